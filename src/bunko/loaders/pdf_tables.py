"""Ruled tables on PDF pages, as rows of cells under their header row.

A PDF has no tables, only characters and drawn lines; a table is clear where lines rule it into
cells. :mod:`bunko.loaders.pdf` collects a page's horizontal and vertical rules from PDFium (drawn
lines, rectangle edges, the straight segments of paths) and its characters with their boxes; here
the rules are snapped, joined and crossed into cells with pdfplumber's geometry (MIT: ``merge_edges``,
``edges_to_intersections``, ``intersections_to_cells``, ``cells_to_tables``, as its ``lines``
strategy does), and each cell takes the characters whose centre is in it.

pdfplumber's own page analysis is not used: it interprets the page again with pdfminer.six, which
took 0.2-0.4 s a page on the drawings of the shared corpus (slides and lecture notes draw a lot), 30
to 50 times the rest of the PDF loader. Its ``text`` strategy (tables guessed from aligned words, no
lines) made tables of the running text of every page it was tried on; PyMuPDF's
``page.find_tables()`` is AGPL, a licence bunko cannot take on.

Drawings are ruled too (plots, diagrams, framed boxes of slides), so a grid counts as a table only
when it looks like one (:func:`is_table`): at least two rows and two columns, one of its first rows
names most of its columns (the header: cells with text, one with a word) and most of its cells hold
text; and a grid that would lose characters (text inside it in no cell) stays text. What the shared
corpus gave, page by page, is in docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

MIN_ROWS = 2
MIN_COLUMNS = 2
# Of the cells of a table (those not covered by a merged cell), this share at least must hold text.
MIN_FILLED = 0.5
# The header: one of the first HEADER_ROWS rows has text in at least this share of the columns (and 2).
HEADER_ROWS = 3
HEADER_FILLED = 0.6
# A grid that would lose more than this share of the characters inside it (text in no cell) is left as text.
MAX_LOST = 0.02
# pdfplumber's defaults (TableSettings): rules this close (points) are one, and cross when this close.
SNAP = 3.0
JOIN = 3.0
CROSS = 3.0
MIN_RULE = 3.0  # shorter rules are left out
# Rules crossing at more points than this are graph paper or a drawing, not a table (a table of 60 rows and
# 60 columns has 3,700). Finding the cells takes time that grows faster than the crossings: 0.75 s for a
# grid of 60 by 60 rules, 5 s for 100 by 100 (this machine).
MAX_CROSSINGS = 4000

_CJ = "\u3001-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff01-\uff60"
_CJ_BREAK_RE = re.compile(f"(?<=[{_CJ}])\\n(?=[{_CJ}])")

Box = tuple[float, float, float, float]  # x0, top, x1, bottom: y measured down from the page's top


@dataclass(slots=True)
class Char:
    """A character of a page in PDFium's text order: its text and the centre of its box (``x``, ``y`` down
    from the page's top); a character without a box (a space or line break PDFium generated) has None."""

    text: str
    x: float | None = None
    y: float | None = None


@dataclass(slots=True)
class PdfTable:
    """A table of a page: its box, its rows of cell texts (one cell per column; a cell merged down the rows
    is repeated in each, one merged across gives its text to the first) and the characters it took
    (indices into the page's characters)."""

    bbox: Box
    rows: list[list[str]]
    chars: set[int]


def available() -> bool:
    """Whether pdfplumber (the ``pdf`` extra) is installed: without it, PDF pages have no tables."""
    return importlib.util.find_spec("pdfplumber") is not None


def find_tables(horizontal: list[tuple[float, float, float]], vertical: list[tuple[float, float, float]],
                page_chars: Callable[[], list[Char]]) -> list[PdfTable]:
    """The tables a page's rules make: ``horizontal`` rules as (x0, x1, y), ``vertical`` as (top, bottom, x)
    (y down from the top); ``page_chars()`` gives the page's characters in text order (asked for only when
    the rules make a grid of two rows and two columns)."""
    if not available():
        return []
    from pdfplumber.table import Table, cells_to_tables, edges_to_intersections, intersections_to_cells, merge_edges

    edges: list[dict[str, Any]] = [{"x0": x0, "x1": x1, "top": y, "bottom": y, "width": x1 - x0, "height": 0.0,
                                    "orientation": "h", "object_type": "line"} for x0, x1, y in horizontal]
    edges += [{"x0": x, "x1": x, "top": top, "bottom": bottom, "width": 0.0, "height": bottom - top,
               "orientation": "v", "object_type": "line"} for top, bottom, x in vertical]
    edges = merge_edges(edges, SNAP, SNAP, JOIN, JOIN)
    edges = [e for e in edges if (e["width"] if e["orientation"] == "h" else e["height"]) >= MIN_RULE]
    crossings = edges_to_intersections(edges, CROSS, CROSS)
    if len(crossings) > MAX_CROSSINGS:
        return []
    cells = intersections_to_cells(crossings)
    # a Table needs its page only to extract text, which is done here from PDFium's characters
    grids = [table for table in (Table(None, group) for group in cells_to_tables(cells))  # type: ignore[arg-type]
             if len(table.rows) >= MIN_ROWS and len({cell[0] for cell in table.cells}) >= MIN_COLUMNS]
    if not grids:
        return []
    placed = [(index, char) for index, char in enumerate(page_chars()) if char.x is not None]
    tables = []
    for table in grids:
        found = _read(table, placed)
        if found is not None:
            tables.append(found)
    return tables


def _inside(char: Char, box: Box) -> bool:
    assert char.x is not None and char.y is not None
    return box[0] <= char.x < box[2] and box[1] <= char.y < box[3]


def _text(chars: list[tuple[int, Char]]) -> str:
    """The characters of a cell, in text order, a line break where the next one starts a new line."""
    out: list[str] = []
    previous: tuple[int, Char] | None = None
    for index, char in chars:
        if previous is not None:
            gap_y = abs((char.y or 0.0) - (previous[1].y or 0.0))
            if index != previous[0] + 1 and gap_y > 2.0:
                out.append("\n")
            elif index != previous[0] + 1:
                out.append(" ")
        out.append(char.text)
        previous = (index, char)
    return "".join(out)


def _read(table: Any, placed: list[tuple[int, Char]]) -> PdfTable | None:
    """The table of a group of cells, or None when it is no table (see the module docstring)."""
    x0, top, x1, bottom = table.bbox
    inside = [(i, c) for i, c in placed if x0 - 1 <= (c.x or 0.0) <= x1 + 1 and top - 1 <= (c.y or 0.0) <= bottom + 1]
    rows = table.rows
    cells = table.cells
    lefts = sorted({cell[0] for cell in cells})  # pdfplumber's columns: the cells' distinct left edges
    taken: set[int] = set()

    def read(box: Box) -> str:
        mine = [(i, c) for i, c in inside if i not in taken and _inside(c, box)]
        taken.update(i for i, _ in mine)
        return _text(mine)

    texts: dict[Box, str] = {tuple(cell): read(tuple(cell)) for cell in cells}
    grid: list[list[str | None]] = []
    for row in rows:
        row_top, row_bottom = row.bbox[1], row.bbox[3]
        middle = (row_top + row_bottom) / 2
        out: list[str | None] = []
        for column, cell in enumerate(row.cells):
            if cell is not None:
                out.append(texts[tuple(cell)])
                continue
            x = lefts[column] + 0.5
            cover = next((c for c in cells if c[0] <= x < c[2] and c[1] <= middle < c[3]), None)
            if cover is not None:  # a merged cell: its text when it comes down from above, empty from the left
                out.append(texts[tuple(cover)] if cover[1] < row_top - 0.5 else "")
            else:  # no cell here (the column's outer edge is not ruled): the characters in its box
                right = lefts[column + 1] if column + 1 < len(lefts) else x1
                out.append(read((lefts[column], row_top, right, row_bottom)))
        grid.append(out)
    if not is_table(grid):
        return None
    if inside and (len(inside) - len(taken)) > MAX_LOST * len(inside):
        return None
    return PdfTable((x0, top, x1, bottom), [[c or "" for c in row] for row in grid],
                    {i for i, _ in inside})


def cell_text(text: str | None) -> str:
    """A cell's text on one line: a line break between two Japanese characters goes, others become spaces."""
    if not text:
        return ""
    text = _CJ_BREAK_RE.sub("", text.strip())
    return " ".join(text.split())


def is_table(rows: list[list[str | None]]) -> bool:
    """Whether a ruled grid is a table and not a drawing (see the module docstring)."""
    if len(rows) < MIN_ROWS:
        return False
    columns = max((len(row) for row in rows), default=0)
    if columns < MIN_COLUMNS:
        return False
    cells = [cell_text(c) for row in rows for c in row if c is not None]
    if not cells or sum(1 for c in cells if c) < MIN_FILLED * len(cells):
        return False
    need = max(MIN_COLUMNS, HEADER_FILLED * columns)
    return any(sum(1 for c in row if cell_text(c)) >= need and any(_has_word(c) for c in row)
               for row in rows[:HEADER_ROWS])


def _has_word(cell: str | None) -> bool:
    """Whether a cell holds a letter (of any script): a header names its columns, the tick labels of a plot
    and the marks of a diagram are numbers and symbols."""
    return any(ch.isalpha() for ch in cell or "")


def split_lines(rows: list[list[str]]) -> list[tuple[int, list[str]]]:
    """(row number from 1, cells on one line) of a table's rows.

    A table ruled only around its header (or its columns) draws many rows in one ruled cell, one a
    line: a row whose filled cells all hold the same number of lines is that many rows, all numbered
    as the ruled row, when the count says so (two cells of three lines or more, or three cells of two
    or more: two cells of two lines are as likely a long value wrapped). In other rows a cell's lines
    are joined (:func:`cell_text`).
    """
    out: list[tuple[int, list[str]]] = []
    for number, row in enumerate(rows, start=1):
        lines = [[part.strip() for part in c.strip().split("\n")] if c.strip() else [] for c in row]
        counts = {len(parts) for parts in lines if parts}
        filled = sum(1 for parts in lines if parts)
        count = counts.pop() if len(counts) == 1 else 0
        if count >= 2 and ((filled >= 2 and count >= 3) or filled >= 3):
            out.extend((number, [parts[i] if parts else "" for parts in lines]) for i in range(count))
        else:
            out.append((number, [cell_text(c) for c in row]))
    return out


__all__ = ["Char", "PdfTable", "available", "cell_text", "find_tables", "is_table", "split_lines"]
