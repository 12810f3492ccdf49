"""Tables as rows with their header row: what spreadsheets, CSV/TSV files and Word, PowerPoint and PDF tables
become.

A row means little without its column names, so a table is written as small Markdown tables,
each its header row, the rule and a few rows (after a ``## caption`` line where the table has
one: a spreadsheet's sheet name, a Word table's section title, a slide's title, the line above a PDF
table), and each is a ``whole`` ``DocumentPart``: the indexer makes it one chunk and never cuts it,
so every chunk of a table carries the header and the extractive answer can quote a row as
``名前: 値`` pairs. A group holds
rows while it stays within ``TABLE_CHARS`` (one chunk of the default splitter, 512 characters).
A row too long to fit with its header on its own is written as ``列名: 値`` lines instead, in
parts of at most ``TABLE_CHARS`` (whole too): a part after the first starts with the row's first
cell, and a value too long for one part is cut (at a sentence end where it can) with its column
name before each piece, so every chunk of the row says which row and which column it holds.
Each part carries ``row_start`` and ``row_end`` (the rows as the source numbers them: a
spreadsheet's row numbers, a CSV file's records, a Word table's rows) with the metadata it is given.

The header is the first row of the first few that fills most of the table's width (title
lines above a table, as spreadsheets often have, come before it as text).
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Iterator
from typing import Any

from ..types import DocumentPart

# A group of rows with its header stays within this (NFKC may lengthen a few characters; the splitter's
# default chunk is 512): it is then one chunk.
TABLE_CHARS = 480
# The header row is looked for among the first rows that have cells.
HEADER_SEARCH_ROWS = 10
# ... the first that fills this share of the widest of them (and at least two cells, when any row has two).
HEADER_FILL = 0.6

_SPACE_RE = re.compile(r"\s+")


def column_name(index: int) -> str:
    """The spreadsheet name of a 0-based column: ``A``, ..., ``Z``, ``AA``, ..."""
    name = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        name = chr(65 + rest) + name
    return name


def cell_text(value: Any) -> str:
    """A cell value as shown: integral floats without ``.0``, dates as ISO dates, text on one line."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return ""
        if value.is_integer() and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.15g}"
    if isinstance(value, dt.datetime):
        if (value.hour, value.minute, value.second) == (0, 0, 0):
            return value.date().isoformat()
        return value.strftime("%Y-%m-%d %H:%M" if value.second == 0 else "%Y-%m-%d %H:%M:%S")
    if isinstance(value, dt.date):
        return value.isoformat()
    if isinstance(value, dt.time):
        return value.strftime("%H:%M" if value.second == 0 else "%H:%M:%S")
    if isinstance(value, dt.timedelta):
        seconds = int(value.total_seconds())
        return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    return _SPACE_RE.sub(" ", str(value)).strip()


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_row(cells: list[str]) -> str:
    """``| a | b |``, pipes inside cells escaped."""
    return "| " + " | ".join(_escape(c) for c in cells) + " |"


def _trimmed(cells: list[str]) -> list[str]:
    end = len(cells)
    while end and not cells[end - 1]:
        end -= 1
    return cells[:end]


class TableWriter:
    """Turns a header and a stream of rows into parts (see the module docstring)."""

    def __init__(self, header: list[str], metadata: dict[str, Any], *, limit: int = TABLE_CHARS,
                 first_column: int = 0, caption: str = "") -> None:
        self.offset = first_column  # the sheet's column of the first cell (unnamed columns are named by letter)
        self.header = [name or column_name(first_column + i) for i, name in enumerate(header)]
        self.metadata = metadata
        self.limit = limit
        self.caption = f"## {caption}\n" if caption else ""
        self._head = self._head_lines(len(self.header))
        self._rows: list[str] = []
        self._first = self._last = 0
        self._size = len(self._head)
        self.rows = 0

    def _head_lines(self, width: int) -> str:
        names = self.header + [column_name(self.offset + i) for i in range(len(self.header), width)]
        return self.caption + markdown_row(names) + "\n" + "| " + " | ".join(["---"] * width) + " |"

    def _widen(self, width: int) -> Iterator[DocumentPart]:
        """A row wider than the header: the header grows (named by column letters), after the rows so far."""
        yield from self.flush()
        self.header = self.header + [column_name(self.offset + i) for i in range(len(self.header), width)]
        self._head = self._head_lines(width)
        self._size = len(self._head)

    def add(self, number: int, cells: list[str]) -> Iterator[DocumentPart]:
        """Add row ``number`` (its cells as text); yields the parts that are complete."""
        cells = _trimmed(cells)
        if not any(cells):
            return
        self.rows += 1
        if len(cells) > len(self.header):
            yield from self._widen(len(cells))
        line = markdown_row(cells + [""] * (len(self.header) - len(cells)))
        if len(self._head) + 1 + len(line) > self.limit:  # too long to go with its header: name: value lines
            yield from self.flush()
            yield from self._record(number, [(n, v) for n, v in zip(self.header, cells, strict=False) if v])
            return
        if self._rows and self._size + 1 + len(line) > self.limit:
            yield from self.flush()
        if not self._rows:
            self._first = number
        self._rows.append(line)
        self._last = number
        self._size += 1 + len(line)

    def _record(self, number: int, pairs: list[tuple[str, str]]) -> Iterator[DocumentPart]:
        """One row as ``name: value`` lines in parts of at most ``limit`` (see the module docstring)."""
        metadata = {**self.metadata, "row_start": number, "row_end": number}
        key = _cut(f"{pairs[0][0]}: {pairs[0][1]}", self.limit // 4)[0]  # which row: its first cell
        text = ""
        for name, value in pairs:
            label = f"{name}: "
            while True:
                room = self.limit - len(text) - 1 if text else self.limit
                if len(label) + len(value) <= room:
                    text = f"{text}\n{label}{value}" if text else label + value
                    break
                fresh = text == key
                if room - len(label) >= 40 or fresh:  # what fits here, then the rest in the next part
                    piece, value = _cut_once(value, max(20, room - len(label)))
                    text = f"{text}\n{label}{piece}" if text else label + piece
                yield DocumentPart(text, metadata, whole=True)
                text = key
        if text and text != key:
            yield DocumentPart(text, metadata, whole=True)

    def flush(self) -> Iterator[DocumentPart]:
        """The rows held, as one part."""
        if self._rows:
            text = self._head + "\n" + "\n".join(self._rows)
            yield DocumentPart(text, {**self.metadata, "row_start": self._first, "row_end": self._last}, whole=True)
        self._rows = []
        self._size = len(self._head)


_SENTENCE_END_RE = re.compile(r"[。．！？!?]|\.\s")


def _cut_once(text: str, size: int) -> tuple[str, str]:
    """The first piece of ``text`` of at most ``size``, cut after the last sentence end in its second half
    where there is one (else after a space, else anywhere), and the rest."""
    if len(text) <= size:
        return text, ""
    window = text[:size]
    ends = [m.end() for m in _SENTENCE_END_RE.finditer(window) if m.end() > size // 2]
    space = window.rfind(" ")
    cut = ends[-1] if ends else (space + 1 if space > size // 2 else size)
    return text[:cut].rstrip(), text[cut:].lstrip()


def _cut(text: str, size: int) -> list[str]:
    """``text`` in pieces of at most ``size`` (see :func:`_cut_once`)."""
    pieces = []
    while text:
        piece, text = _cut_once(text, size)
        pieces.append(piece)
    return pieces


def find_header(rows: list[tuple[int, list[str]]]) -> int:
    """The index in ``rows`` (the first rows with any cell) of the header row."""
    widths = [sum(1 for c in cells if c) for _, cells in rows]
    if not widths:
        return 0
    widest = max(widths)
    need = max(2 if widest >= 2 else 1, math.ceil(HEADER_FILL * widest))
    return next((i for i, width in enumerate(widths) if width >= need), 0)


class Table:
    """The parts of one table (iterate once): ``rows`` are ``(row number, cells as text)`` in order, the header
    among the first; ``first_column`` is the sheet column of the first cell.

    Rows before the header (a title, a note) come first as one text part; every part carries ``metadata``.
    Rows are consumed as they come, so a long table is never held whole. ``rows`` counts the rows under
    the header that have a value, once the parts have been read.
    """

    def __init__(self, rows: Iterable[tuple[int, list[str]]], metadata: dict[str, Any], *,
                 limit: int = TABLE_CHARS, first_column: int = 0, caption: str = "") -> None:
        self._source = rows
        self.metadata = metadata
        self.limit = limit
        self.first_column = first_column
        self.caption = caption
        self.rows = 0

    def __iter__(self) -> Iterator[DocumentPart]:
        iterator = iter(self._source)
        metadata = self.metadata
        head: list[tuple[int, list[str]]] = []
        for number, cells in iterator:
            cells = _trimmed(cells)
            if any(cells):
                head.append((number, cells))
                if len(head) >= HEADER_SEARCH_ROWS:
                    break
        if not head:
            return
        at = find_header(head)
        if at:
            lines = [" ".join(c for c in cells if c) for _, cells in head[:at]]
            yield DocumentPart("\n".join(lines), {**metadata, "row_start": head[0][0], "row_end": head[at - 1][0]})
        writer = TableWriter(head[at][1], metadata, limit=self.limit, first_column=self.first_column,
                             caption=self.caption)
        for number, cells in head[at + 1:]:
            yield from writer.add(number, cells)
        for number, cells in iterator:
            yield from writer.add(number, cells)
        self.rows = writer.rows
        if writer.rows == 0:  # a header and nothing under it: its names as a line of text
            yield DocumentPart(" | ".join(writer.header), {**metadata, "row_start": head[at][0],
                                                           "row_end": head[at][0]})
        yield from writer.flush()


__all__ = ["TABLE_CHARS", "Table", "TableWriter", "cell_text", "column_name", "find_header", "markdown_row"]
