"""Loaders: turn files into ``Document``s, chosen by file type through a registry.

This module reads plain text (``.txt``) and Markdown (``.md``). Each loader
returns documents with R1 metadata: ``source`` (the resolved path, which is also
the document's stable key for re-ingest), ``source_type``, ``filename``,
``filesize``, ``mime_type``, ``created_at`` (file modification time, UTC),
``language`` and, for Markdown, ``title``. More formats register here by suffix.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .analysis import detect_language
from .errors import LoaderError, UnsupportedFormatError
from .types import Document

Loader = Callable[[Path], list[Document]]
_LOADERS: dict[str, tuple[Loader, str]] = {}
MAX_FILE_BYTES = 50 * 1024 * 1024


def register_loader(suffixes: Iterable[str], loader: Loader, mime_type: str) -> None:
    """Register ``loader`` for file suffixes (``".md"``); later registrations win."""
    for suffix in suffixes:
        _LOADERS[suffix.lower()] = (loader, mime_type)


def supported_suffixes() -> list[str]:
    """The file suffixes that have a loader."""
    return sorted(_LOADERS)


def _read_text(path: Path) -> str:
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise LoaderError(f"{path}: cannot read ({exc.strerror})") from exc
    if size > MAX_FILE_BYTES:
        raise LoaderError(f"{path}: {size} bytes is over the {MAX_FILE_BYTES}-byte limit for one file")
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise LoaderError(f"{path}: cannot read ({exc.strerror})") from exc
    if b"\x00" in raw[:8192]:
        raise LoaderError(f"{path}: looks like a binary file, not text")
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise LoaderError(
            f"{path}: not valid UTF-8 (byte {exc.start}); convert it to UTF-8 "
            "(for example: iconv -f SHIFT_JIS -t UTF-8)"
        ) from exc


def _base_metadata(path: Path, text: str, mime_type: str) -> dict[str, object]:
    stat = path.stat()
    return {
        "source": str(path),
        "source_type": "file",
        "filename": path.name,
        "filesize": stat.st_size,
        "mime_type": mime_type,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stat.st_mtime)),
        "language": detect_language(text),
    }


def load_text(path: Path) -> list[Document]:
    """A plain-text file as one document."""
    text = _read_text(path)
    return [Document(content=text, metadata=_base_metadata(path, text, "text/plain"))]


_HEADING_RE = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def load_markdown(path: Path) -> list[Document]:
    """A Markdown file as one document; its first heading becomes ``title``."""
    text = _read_text(path)
    metadata = _base_metadata(path, text, "text/markdown")
    heading = _HEADING_RE.search(text)
    if heading:
        metadata["title"] = heading.group(1)
    return [Document(content=text, metadata=metadata)]


register_loader([".txt", ".text"], load_text, "text/plain")
register_loader([".md", ".markdown"], load_markdown, "text/markdown")


def load_path(path: str | os.PathLike[str]) -> list[Document]:
    """Load one file with the loader registered for its suffix."""
    p = Path(path).expanduser().resolve()
    if not p.exists():
        raise LoaderError(f"{path}: no such file")
    if not p.is_file():
        raise LoaderError(f"{path}: not a regular file")
    entry = _LOADERS.get(p.suffix.lower())
    if entry is None:
        raise UnsupportedFormatError(
            f"{path}: unsupported file type {p.suffix or '(no suffix)'!r}; supported: "
            f"{', '.join(supported_suffixes())}"
        )
    return entry[0](p)


@dataclass(slots=True, frozen=True)
class Skipped:
    """A file found while walking a folder that has no loader."""

    path: str
    reason: str


def discover(paths: Iterable[str | os.PathLike[str]]) -> tuple[list[Path], list[Skipped]]:
    """Expand files and folders into the files to load, and the files skipped (with why).

    Files named explicitly are always returned (an unsupported one then fails loudly
    in ``load_path``); inside folders, hidden entries are ignored and files without a
    loader are reported as skipped. Missing paths raise ``LoaderError``.
    """
    files: list[Path] = []
    skipped: list[Skipped] = []
    seen: set[Path] = set()

    def add(p: Path) -> None:
        if p not in seen:
            seen.add(p)
            files.append(p)

    for raw in paths:
        p = Path(raw).expanduser()
        if not p.exists():
            raise LoaderError(f"{raw}: no such file or folder")
        if p.is_dir():
            for child in _walk(p):
                if child.suffix.lower() in _LOADERS:
                    add(child.resolve())
                else:
                    skipped.append(Skipped(str(child), f"unsupported file type {child.suffix or '(none)'!r}"))
        else:
            add(p.resolve())
    return files, skipped


def _walk(root: Path) -> Iterator[Path]:
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        for name in sorted(filenames):
            if not name.startswith("."):
                yield Path(dirpath) / name
