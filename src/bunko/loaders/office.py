"""Word (.docx) and PowerPoint (.pptx) loaders, on python-docx and python-pptx.

Both libraries are the ``office`` extra and are imported only when a file needs
them. Word documents become one part per heading section (``section``, ``hierarchy``,
``heading_level``) and tables in document order, each table its rows under their header row
as small Markdown tables (:mod:`bunko.loaders.tables`: parts of their own, with ``table`` = its
number and ``row_start`` / ``row_end``); presentations become one part per slide
(``slide_number``, ``page_number``, ``section`` = the slide title) with grouped shapes and speaker
notes, and each table of a slide the same way as a Word table (parts of their own after the slide's
text, ``table`` = its number in the file, the slide title as caption).
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from ..errors import CorruptDocumentError, EncryptedDocumentError, LoaderError, UnsupportedFormatError
from ..types import Document, DocumentPart
from . import LoadOptions, check_archive, file_metadata, read_bytes
from .tables import Table

_T = TypeVar("_T")

_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTION_INFO = "EncryptionInfo".encode("utf-16-le")

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_MC_FALLBACK = "{http://schemas.openxmlformats.org/markup-compatibility/2006}Fallback"
_HEADING_NAME_RE = re.compile(r"^(?:heading|見出し)\s*(\d)$", re.IGNORECASE)
_TITLE_NAMES = frozenset({"title", "表題", "タイトル"})


# -- shared ----------------------------------------------------------------------------


def _import(module: str, what: str) -> Any:
    from importlib import import_module

    try:
        return import_module(module)
    except ImportError as exc:
        raise LoaderError(f'reading {what} files needs: pip install "bunko[office]"') from exc


def _check_package(path: Path, raw: bytes, what: str, options: LoadOptions) -> None:
    """Fail clearly for encrypted or legacy (OLE) files, non-ZIP files and zip bombs."""
    if raw.startswith(_OLE_MAGIC):
        if _ENCRYPTION_INFO in raw:
            raise EncryptedDocumentError(f"{path}: the {what} file is password-protected; save an unprotected copy")
        raise UnsupportedFormatError(
            f"{path}: a legacy {what} 97-2003 file; save it in the current format (.docx / .pptx)"
        )
    try:
        check_archive(io.BytesIO(raw), options.max_bytes, name=str(path))
    except CorruptDocumentError as exc:
        raise CorruptDocumentError(f"{path}: not a readable {what} file ({exc.message})") from exc


def _open_package(path: Path, options: LoadOptions, module: str, what: str,
                  read: Callable[[Any, io.BytesIO], _T]) -> _T:
    """``read(library, file)``: the file, checked as a package, read by the ``office`` extra's ``module``; a file
    the library cannot read is a ``CorruptDocumentError``."""
    raw = read_bytes(path, options)
    _check_package(path, raw, what, options)
    library = _import(module, what)
    try:
        return read(library, io.BytesIO(raw))
    except Exception as exc:  # python-docx and python-pptx raise KeyError, ValueError, lxml errors... for broken parts
        raise CorruptDocumentError(f"{path}: not a readable {what} file ({type(exc).__name__}: {exc})") from exc


def _package_metadata(path: Path, kind: str, document: Document, package: Any) -> dict[str, Any]:
    """The file's metadata with the R1 fields of the package's core properties, when they can be read."""
    metadata = file_metadata(path, kind, document.content)
    try:
        _core_metadata(metadata, package.core_properties)
    except Exception:  # a damaged docProps/core.xml: the text is still good
        pass
    return metadata


def _iso(value: Any) -> str | None:
    if not isinstance(value, datetime):
        return None
    if value.tzinfo is not None:
        value = value.astimezone(UTC).replace(tzinfo=None)
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")


def _core_metadata(metadata: dict[str, Any], core: Any) -> None:
    """R1 fields from OOXML core properties (title, author, created_at, tags, category, description)."""
    title = (core.title or "").strip()
    if title:
        metadata["title"] = title
    author = (core.author or "").strip()
    if author:
        metadata["author"] = author
    created = _iso(core.created)
    if created:
        metadata["created_at"] = created
    modified = _iso(core.modified)
    if modified:
        metadata["modified_at"] = modified
    keywords = [k.strip() for k in re.split(r"[,;、，]", core.keywords or "") if k.strip()]
    if keywords:
        metadata["tags"] = keywords
    if (core.category or "").strip():
        metadata["category"] = core.category.strip()
    description = (core.subject or "").strip() or (core.comments or "").strip()
    if description:
        metadata["description"] = description


def _row_line(cells: list[str]) -> str:
    while cells and not cells[-1]:
        cells.pop()
    return " | ".join(cells)


def _clean(text: str) -> str:
    """Vertical tabs as line breaks, no-break spaces as spaces, soft hyphens (U+00AD, never printed mid-line) out."""
    text = text.replace("\v", "\n").replace("\xa0", " ").replace("\xad", "")
    return re.sub(r"[ \t]+\n", "\n", text).strip()


# -- Word --------------------------------------------------------------------------------


def _paragraph_text(p: Any) -> str:
    """A paragraph's visible text: runs, hyperlinks, insertions, text boxes; tabs and breaks kept."""
    out: list[str] = []

    def walk(element: Any) -> None:
        for child in element:
            tag = child.tag
            if tag == f"{_W}t":
                out.append(child.text or "")
            elif tag == f"{_W}tab":
                out.append("\t")
            elif tag in (f"{_W}br", f"{_W}cr"):
                out.append("\n")
            elif tag == f"{_W}noBreakHyphen":
                out.append("-")
            elif tag == f"{_W}p":  # a paragraph inside a text box
                out.append("\n")
                walk(child)
            elif tag in (_MC_FALLBACK, f"{_W}pPr", f"{_W}rPr", f"{_W}del", f"{_W}instrText"):
                continue  # the VML copy of a drawing, formatting, deleted text, field codes
            elif isinstance(tag, str):
                walk(child)

    walk(p)
    return _clean("".join(out))


def _grid_value(element: Any, tag: str) -> int:
    found = element.find(tag)
    try:
        return max(0, int(found.get(f"{_W}val", "0"))) if found is not None else 0
    except ValueError:
        return 0


def _table_rows(tbl: Any) -> Iterator[tuple[int, list[str]]]:
    """(row number from 1, cells as text) of a Word table, one cell per grid column: a cell merged across
    columns gives its text to the first and leaves the others empty; a cell merged down the rows is
    repeated in each, so every row can stand alone under the header."""
    above: dict[int, str] = {}  # grid column -> the text of the cell that starts there
    for number, tr in enumerate(tbl.iterchildren(f"{_W}tr"), start=1):
        cells = [""] * _grid_value(tr, f"{_W}trPr/{_W}gridBefore")
        for tc in tr.iterchildren(f"{_W}tc"):
            column = len(cells)
            span = max(1, _grid_value(tc, f"{_W}tcPr/{_W}gridSpan"))
            v_merge = tc.find(f"{_W}tcPr/{_W}vMerge")
            if v_merge is not None and v_merge.get(f"{_W}val") in (None, "continue"):
                text = above.get(column, "")
            else:
                pieces = []
                for child in tc:
                    if child.tag == f"{_W}p":
                        pieces.append(_paragraph_text(child).replace("\n", " "))
                    elif child.tag == f"{_W}tbl":
                        pieces.append(" / ".join(_table_lines(child)))
                text = " ".join(p for p in pieces if p)
                above[column] = text
            cells += [text] + [""] * (span - 1)
        yield number, cells


def _table_lines(tbl: Any) -> list[str]:
    """Rows as ``cell | cell`` lines (a table inside a table cell)."""
    return [line for _, cells in _table_rows(tbl) if (line := _row_line(cells)).strip(" |")]


def _body_blocks(body: Any) -> Iterator[Any]:
    """Paragraphs and tables of the body in order, looking inside content controls except tables of contents."""
    for child in body:
        if child.tag in (f"{_W}p", f"{_W}tbl"):
            yield child
        elif child.tag == f"{_W}sdt":
            gallery = child.find(f"{_W}sdtPr/{_W}docPartObj/{_W}docPartGallery")
            if gallery is not None and "contents" in (gallery.get(f"{_W}val") or "").lower():
                continue  # a generated table of contents repeats the headings
            content = child.find(f"{_W}sdtContent")
            if content is not None:
                yield from _body_blocks(content)


def _level_from_name(name: str | None) -> int | None:
    if not name:
        return None
    name = name.strip()
    if name.lower() in _TITLE_NAMES:
        return 0
    m = _HEADING_NAME_RE.match(name)
    return int(m.group(1)) if m else None


def _outline_level(ppr: Any) -> int | None:
    if ppr is None:
        return None
    level = ppr.find(f"{_W}outlineLvl")
    if level is None:
        return None
    try:
        value = int(level.get(f"{_W}val", "9"))
    except ValueError:
        return None
    return value + 1 if value < 9 else None


def _heading_level(p: Any, styles: Any) -> tuple[int | None, str | None]:
    """(level, style name): 0 for Title, N for Heading N (or its style chain / outline level)."""
    style_id = p.find(f"{_W}pPr/{_W}pStyle")
    style = None
    if style_id is not None and styles is not None:
        try:
            from docx.enum.style import WD_STYLE_TYPE

            style = styles.get_by_id(style_id.get(f"{_W}val"), WD_STYLE_TYPE.PARAGRAPH)
        except (KeyError, ValueError):
            style = None
    name = style.name if style is not None else None
    current = style
    for _ in range(8):
        if current is None:
            break
        level = _level_from_name(current.name)
        if level is not None:
            return level, name
        current = current.base_style
    level = _outline_level(p.find(f"{_W}pPr"))
    current = style
    for _ in range(8):
        if level is not None or current is None:
            break
        level = _outline_level(current.element.find(f"{_W}pPr"))
        current = current.base_style
    return level, name


def _is_list_item(p: Any, style_name: str | None) -> bool:
    return p.find(f"{_W}pPr/{_W}numPr") is not None or (style_name or "").lower().startswith("list")


class _Sections:
    """Collects blocks into heading sections with their hierarchy."""

    def __init__(self) -> None:
        self.parts: list[DocumentPart] = []
        self.headings: list[tuple[int, str, str | None]] = []
        self._stack: list[tuple[int, str]] = []
        self._blocks: list[str] = []
        self._meta: dict[str, Any] = {"hierarchy": []}
        self._last_was_list = False
        self.tables = 0

    def heading(self, level: int, text: str, style: str | None) -> None:
        self._flush()
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, text))
        self.headings.append((level, text, style))
        self._meta = {"section": text, "hierarchy": [h for _, h in self._stack], "heading_level": level}
        if style:
            self._meta["heading_style"] = style
        self._blocks = [text]
        self._last_was_list = False

    def block(self, text: str, list_item: bool = False) -> None:
        if list_item and self._last_was_list and self._blocks:
            self._blocks[-1] += "\n- " + text
        else:
            self._blocks.append(f"- {text}" if list_item else text)
        self._last_was_list = list_item

    def table(self, tbl: Any) -> None:
        """A table: its rows under its header row (:mod:`bunko.loaders.tables`), in parts of their own that
        carry the section's metadata, with the section's title as their caption."""
        self._flush()
        self.tables += 1
        meta = {**self._meta, "table": self.tables}
        self.parts.extend(Table(_table_rows(tbl), meta, caption=str(self._meta.get("section", ""))))
        self._last_was_list = False

    def _flush(self) -> None:
        text = "\n\n".join(self._blocks).strip()
        if text:
            self.parts.append(DocumentPart(text, self._meta))
        self._blocks = []

    def finish(self) -> list[DocumentPart]:
        self._flush()
        return self.parts


def load_docx(path: Path, options: LoadOptions) -> list[Document]:
    """A Word file as one document with one part per heading section."""

    def read(docx: Any, file: io.BytesIO) -> tuple[Any, Any, Any]:
        word = docx.Document(file)
        return word, word.element.body, word.styles

    word, body, styles = _open_package(path, options, "docx", "Word", read)
    sections = _Sections()
    for element in _body_blocks(body):
        if element.tag == f"{_W}tbl":
            sections.table(element)
            continue
        text = _paragraph_text(element)
        if not text:
            continue
        level, style_name = _heading_level(element, styles)
        if level is not None:
            sections.heading(level, " ".join(text.split()), style_name)
        else:
            sections.block(text, _is_list_item(element, style_name))
    parts = sections.finish()
    document = Document.from_parts(parts)
    metadata = _package_metadata(path, "docx", document, word)
    if "title" not in metadata and sections.headings:
        top = min(level for level, _, _ in sections.headings)
        metadata["title"] = next(text for level, text, _ in sections.headings if level == top)
    metadata["table_count"] = sections.tables
    document.metadata = metadata
    return [document]


# -- PowerPoint ----------------------------------------------------------------------------


def _slide_table_rows(table: Any) -> Iterator[tuple[int, list[str]]]:
    """(row number from 1, cells as text) of a slide's table, one cell per column: a cell merged across
    columns gives its text to the first, one merged down the rows is repeated in each (as in Word tables)."""
    above: dict[int, str] = {}
    for number, row in enumerate(table.rows, start=1):
        cells = []
        for column, cell in enumerate(row.cells):
            tc = cell._tc
            if tc.get("hMerge") in ("1", "true"):
                cells.append("")  # covered by a horizontal merge: the text is in the origin cell
            elif tc.get("vMerge") in ("1", "true"):
                cells.append(above.get(column, ""))
            else:
                text = _clean(cell.text).replace("\n", " ")
                above[column] = text
                cells.append(text)
        yield number, cells


def _shape_items(shape: Any, skip: Any) -> Iterator[str | Any]:
    """Text of one shape (text frames, the members of groups) and its tables (python-pptx tables)."""
    if skip is not None and shape.shape_id == skip.shape_id:
        return  # the title, already first
    from pptx.shapes.group import GroupShape

    if isinstance(shape, GroupShape):
        for child in shape.shapes:
            yield from _shape_items(child, skip)
        return
    if getattr(shape, "has_table", False) and shape.has_table:
        yield shape.table
        return
    if getattr(shape, "has_text_frame", False) and shape.has_text_frame:
        text = _clean("\n".join(p.text for p in shape.text_frame.paragraphs))
        if text:
            yield text


def load_pptx(path: Path, options: LoadOptions) -> list[Document]:
    """A PowerPoint file as one document with one part per slide (speaker notes under ``Notes:``)."""

    def read(pptx: Any, file: io.BytesIO) -> tuple[Any, list[Any]]:
        presentation = pptx.Presentation(file)
        return presentation, list(presentation.slides)

    presentation, slides = _open_package(path, options, "pptx", "PowerPoint", read)
    parts: list[DocumentPart] = []
    first_title = None
    tables = 0
    for number, slide in enumerate(slides, start=1):
        title_shape = slide.shapes.title
        title = " ".join(_clean(title_shape.text_frame.text).split()) if title_shape is not None else ""
        meta: dict[str, Any] = {"slide_number": number, "page_number": number}
        if title:
            meta["section"] = title
            first_title = first_title or title
        if slide._element.get("show") in ("0", "false"):
            meta["hidden"] = True
        lines = [title] if title else []
        slide_parts: list[DocumentPart] = []
        for shape in slide.shapes:
            for item in _shape_items(shape, title_shape):
                if isinstance(item, str):
                    lines.append(item)
                    continue
                tables += 1
                slide_parts.extend(Table(_slide_table_rows(item), {**meta, "table": tables}, caption=title))
        if slide.has_notes_slide:
            notes_frame = slide.notes_slide.notes_text_frame
            notes = _clean(notes_frame.text) if notes_frame is not None else ""
            if notes:
                lines.append(f"Notes:\n{notes}")
        if lines and (lines != [title] or not slide_parts):  # a slide that is only a table has no text part
            parts.append(DocumentPart("\n".join(lines), meta))
        parts.extend(slide_parts)
    document = Document.from_parts(parts)
    metadata = _package_metadata(path, "pptx", document, presentation)
    if "title" not in metadata and first_title:
        metadata["title"] = first_title
    metadata["page_count"] = len(slides)
    metadata["table_count"] = tables
    document.metadata = metadata
    return [document]
