"""Loaders: turn files (and URLs) into ``Document``s, chosen by file type.

The type comes from the file's content where it can (PDF magic, ZIP members of
Office files, HTML markup), and from the suffix otherwise; a ``.pdf`` that is not a
PDF is reported as such instead of being fed to the wrong reader. Each loader
returns documents with R1 metadata: ``source`` (the resolved path or URL, which is
also the document's stable key for re-ingest), ``source_type``, ``filename``,
``filesize``, ``mime_type``, ``created_at``, ``language``, and what the format
knows (``page_count``, ``author``, ``title``). Structured formats return
``DocumentPart``s (pages, sections, slides) so chunks keep where they came from.

Loaders for heavy formats live in submodules that import their libraries only when
used; a missing library raises a ``LoaderError`` that names the extra to install.

File kinds live in the shared ``Registry``: the built-ins below, plugins whose entry point
in the ``bunko.loaders`` group names a ``FileKind``, and ``register_loader``. Where two
kinds claim one suffix, a registered or plugin kind wins over a built-in.
"""

from __future__ import annotations

import os
import time
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..analysis import detect_language
from ..errors import ArchiveTooLargeError, CorruptDocumentError, LoaderError, UnsupportedFormatError
from ..registry import Registry
from ..types import Document

MAX_FILE_BYTES = 100 * 1024 * 1024


@dataclass(slots=True)
class LoadOptions:
    """Options every loader may read."""

    password: str | None = None  # for encrypted PDFs
    # OCR of pages without a text layer and of images (loaders.ocr): on or off, the Tesseract model(s), e.g.
    # "jpn+eng" (None: chosen per page), the time limit for one page and the most pages one document may OCR.
    ocr: bool = True
    ocr_lang: str | None = None
    ocr_page_seconds: float = 120.0
    ocr_max_pages: int = 100
    content_path: str | None = None  # JSON: dotted path of the text field (seed 000 doc-loader)
    max_bytes: int = MAX_FILE_BYTES
    extra: dict[str, Any] = field(default_factory=dict)


Loader = Callable[[Path, LoadOptions], list[Document]]


@dataclass(slots=True, frozen=True)
class FileKind:
    """A file type: its loader, suffixes and MIME type. Calling it gives the load function."""

    name: str
    loader: Callable[[], Loader]  # imported on first use
    suffixes: tuple[str, ...]
    mime_type: str

    def __call__(self) -> Loader:
        """The load function (its module is imported now)."""
        return self.loader()


def _lazy(module: str, name: str) -> Callable[[], Loader]:
    def get() -> Loader:
        from importlib import import_module

        return getattr(import_module(f"{__name__}.{module}"), name)

    return get


_BUILTINS = {kind.name: kind for kind in (
    FileKind("text", _lazy("text", "load_text"), (".txt", ".text"), "text/plain"),
    FileKind("markdown", _lazy("text", "load_markdown"), (".md", ".markdown"), "text/markdown"),
    FileKind("json", _lazy("text", "load_json"), (".json", ".jsonl"), "application/json"),
    FileKind("pdf", _lazy("pdf", "load_pdf"), (".pdf",), "application/pdf"),
    FileKind("docx", _lazy("office", "load_docx"), (".docx",),
             "application/vnd.openxmlformats-officedocument.wordprocessingml.document"),
    FileKind("pptx", _lazy("office", "load_pptx"), (".pptx",),
             "application/vnd.openxmlformats-officedocument.presentationml.presentation"),
    FileKind("html", _lazy("html", "load_html"), (".html", ".htm", ".xhtml"), "text/html"),
    FileKind("xlsx", _lazy("sheets", "load_xlsx"), (".xlsx", ".xlsm"),
             "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
    FileKind("image", _lazy("ocr", "load_image"), (".png", ".jpg", ".jpeg", ".tif", ".tiff", ".bmp", ".webp"),
             "image/png"),
    FileKind("csv", _lazy("sheets", "load_csv"), (".csv",), "text/csv"),
    FileKind("tsv", _lazy("sheets", "load_tsv"), (".tsv", ".tab"), "text/tab-separated-values"),
)}
_REGISTRY: Registry[Loader] = Registry("file kind", "bunko.loaders", _BUILTINS)


def register_loader(kind: str, loader: Callable[[], Loader], suffixes: Iterable[str], mime_type: str) -> None:
    """Register a file kind; ``loader`` is a zero-argument callable returning the load function."""
    _REGISTRY.register(kind, FileKind(kind, loader, tuple(s.lower() for s in suffixes), mime_type))


def file_kinds() -> dict[str, FileKind]:
    """Every file kind by name (an entry point that names no ``FileKind`` is left out)."""
    kinds = {}
    for name in _REGISTRY.names():
        entry = _REGISTRY.get(name)
        if isinstance(entry, FileKind):
            kinds[name] = entry
    return kinds


def file_kind(kind: str) -> FileKind:
    """The file kind called ``kind``; ``UnknownProviderError`` naming the kinds there are, if none."""
    entry = _REGISTRY.get(kind)
    if not isinstance(entry, FileKind):
        raise LoaderError(f"the file kind {kind!r} is not a FileKind ({entry!r})")
    return entry


def suffix_kinds() -> dict[str, str]:
    """The kind each known suffix (``.pdf``) is loaded as."""
    kinds = file_kinds()
    by_suffix: dict[str, str] = {}
    # Built-ins first, so that a registered or plugin kind claiming the same suffix wins.
    for entry in sorted(kinds.values(), key=lambda k: _BUILTINS.get(k.name) is not k):
        for suffix in entry.suffixes:
            by_suffix[suffix] = entry.name
    return by_suffix


def supported_suffixes() -> list[str]:
    """The file suffixes that have a loader."""
    return sorted(suffix_kinds())


def mime_type(kind: str) -> str:
    """The MIME type of a registered kind."""
    return file_kind(kind).mime_type


def sniff(path: Path) -> str | None:
    """The file kind from its first bytes (``pdf``, ``docx``, ``pptx``, ``xlsx``, ``html``), or None."""
    try:
        with path.open("rb") as f:
            head = f.read(4096)
    except OSError as exc:
        raise LoaderError(f"{path}: cannot read ({exc.strerror})") from exc
    if head.lstrip()[:5] == b"%PDF-" or b"%PDF-" in head[:1024]:
        return "pdf"
    if head[:8] == b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1":
        return "ole"  # a legacy Office file, or a password-protected new one: the loader of the suffix says which
    if head[:4] == b"PK\x03\x04":
        try:
            with zipfile.ZipFile(path) as archive:
                names = set(archive.namelist())
        except (zipfile.BadZipFile, OSError):
            return None
        if "word/document.xml" in names:
            return "docx"
        if "ppt/presentation.xml" in names:
            return "pptx"
        if "xl/workbook.xml" in names:
            return "xlsx"
        return "zip"
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith((b"<!doctype html", b"<html")) or (b"<html" in text[:1024] and b"<body" in text):
        return "html"
    return None


def detect_kind(path: Path) -> str:
    """The kind to load ``path`` as: content first, then suffix; raises for unsupported files."""
    sniffed = sniff(path)
    by_suffix = suffix_kinds().get(path.suffix.lower())
    if sniffed in file_kinds() and (by_suffix is None or by_suffix in ("text", "markdown", sniffed)
                              or sniffed != "html"):
        if by_suffix not in (None, sniffed) and by_suffix not in ("text", "markdown"):
            raise CorruptDocumentError(
                f"{path}: the name says {by_suffix} but the content is {sniffed}; rename the file or check it"
            )
        return sniffed
    if sniffed == "ole" and by_suffix in ("docx", "pptx", "xlsx"):
        return by_suffix
    if by_suffix in ("pdf", "docx", "pptx", "xlsx") and sniffed != by_suffix:
        raise CorruptDocumentError(f"{path}: not a valid {by_suffix.upper()} file (the content does not match)")
    if by_suffix is not None:
        return by_suffix
    if sniffed == "zip":
        raise UnsupportedFormatError(f"{path}: a ZIP archive that is not a Word, PowerPoint or Excel file")
    raise UnsupportedFormatError(
        f"{path}: unsupported file type {path.suffix or '(no suffix)'!r}; supported: {', '.join(supported_suffixes())}"
    )


def file_metadata(path: Path, kind: str, text: str = "") -> dict[str, Any]:
    """The R1 metadata every file loader starts from."""
    stat = path.stat()
    return {
        "source": str(path),
        "source_type": "file",
        "filename": path.name,
        "filesize": stat.st_size,
        "mime_type": kinds[kind].mime_type if kind in (kinds := file_kinds()) else "application/octet-stream",
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stat.st_mtime)),
        "language": detect_language(text) if text else "und",
    }


# More members than this in one archive is refused too (each costs memory before anything is read).
MAX_ARCHIVE_MEMBERS = 20_000


def check_archive(source: Path | IO[bytes], limit: int, *, name: str | None = None, stream: bool = True) -> int:
    """The unpacked size of a ZIP container (docx, pptx, any ZIP-based format), refused past ``limit``.

    The sizes the archive declares are checked first (no member is unpacked for a bomb that admits
    its size); then, with ``stream``, every member is unpacked in 1 MiB pieces and counted, so an
    archive that understates its sizes is stopped as soon as the real bytes pass ``limit``, and
    memory stays at one piece. Raises :class:`ArchiveTooLargeError` or, for a damaged container,
    :class:`CorruptDocumentError`.
    """
    shown = name or (str(source) if isinstance(source, Path) else "the archive")
    try:
        with zipfile.ZipFile(source) as archive:
            members = archive.infolist()
            if len(members) > MAX_ARCHIVE_MEMBERS:
                raise ArchiveTooLargeError(f"{shown}: {len(members)} files inside, over the limit of "
                                           f"{MAX_ARCHIVE_MEMBERS}")
            declared = sum(m.file_size for m in members)
            if declared > limit:
                raise ArchiveTooLargeError(f"{shown}: unpacks to {declared} bytes, over the {limit}-byte limit "
                                           "for one file")
            if not stream:
                return declared
            total = 0
            for member in members:
                with archive.open(member) as unpacking:
                    while piece := unpacking.read(1 << 20):
                        total += len(piece)
                        if total > limit:
                            raise ArchiveTooLargeError(f"{shown}: unpacks to more than the {limit}-byte limit "
                                                       "for one file")
            return total
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError, EOFError, zlib.error,
            NotImplementedError) as exc:
        raise CorruptDocumentError(f"{shown}: a damaged ZIP container ({exc})") from exc


def read_bytes(path: Path, options: LoadOptions) -> bytes:
    """The file's bytes, refusing files over the size limit."""
    try:
        size = path.stat().st_size
        if size > options.max_bytes:
            raise LoaderError(f"{path}: {size} bytes is over the {options.max_bytes}-byte limit for one file")
        return path.read_bytes()
    except OSError as exc:
        raise LoaderError(f"{path}: cannot read ({exc.strerror})") from exc


def load_path(path: str | os.PathLike[str], options: LoadOptions | None = None) -> list[Document]:
    """Load one file with the loader for its detected kind."""
    p = Path(path).expanduser().resolve()
    if not p.exists():
        raise LoaderError(f"{path}: no such file")
    if not p.is_file():
        raise LoaderError(f"{path}: not a regular file")
    kind = detect_kind(p)
    documents = file_kind(kind)()(p, options or LoadOptions())
    for document in documents:
        document.metadata.setdefault("kind", kind)
    return documents


@dataclass(slots=True, frozen=True)
class Skipped:
    """A file found while walking a folder that has no loader."""

    path: str
    reason: str


def is_url(value: str | os.PathLike[str]) -> bool:
    """True for http(s) URLs given where paths are accepted."""
    return isinstance(value, str) and value.lower().startswith(("http://", "https://"))


def discover(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[Path | str], list[Skipped]]:
    """Expand files, folders and URLs into what to load, and the files skipped (with why).

    Files named explicitly are always returned (an unsupported one then fails loudly
    in ``load_path``); inside folders, hidden entries are ignored and files without a
    loader are reported as skipped. URLs are passed through. Missing paths raise.
    """
    found: list[Path | str] = []
    skipped: list[Skipped] = []
    seen: set[Path | str] = set()
    by_suffix, kinds = suffix_kinds(), file_kinds()

    def add(item: Path | str) -> None:
        if item not in seen:
            seen.add(item)
            found.append(item)

    for raw in paths:
        if is_url(raw):
            add(str(raw))
            continue
        p = Path(raw).expanduser()
        if not p.exists():
            raise LoaderError(f"{raw}: no such file or folder")
        if p.is_dir():
            for child in _walk(p):
                if child.suffix.lower() in by_suffix or (not child.suffix and sniff(child) in kinds):
                    add(child.resolve())
                else:
                    skipped.append(Skipped(str(child), f"unsupported file type {child.suffix or '(none)'!r}"))
        else:
            add(p.resolve())
    return found, skipped


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(dirpath) / name
