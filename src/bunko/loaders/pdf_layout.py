"""pdfminer.six's side of the PDF loader: the pages PDFium reads badly, read again with their text boxes
put in reading order, and the document's info dictionary.

pdfminer reads with ``LAParams(detect_vertical=True)``; :func:`reading_order` orders the boxes
itself (XY-cut): horizontal text column by column, each column top to bottom; vertical text tier
by tier (段), top to bottom, each tier's columns right to left. :mod:`bunko.loaders.pdf` decides
which pages come here and which reading of a page it keeps.
"""

from __future__ import annotations

import functools
import io
import logging
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


def pdfminer_open(data: bytes, password: str | None) -> Any:
    """pdfminer's document of a PDF's bytes (pdfminer raises for a file it cannot open or decrypt)."""
    from pdfminer.pdfdocument import PDFDocument
    from pdfminer.pdfparser import PDFParser

    # pdfminer logs a warning for every oddity of a damaged file; unless the application
    # configured its logger, keep them off the console (what matters is raised or recorded).
    miner_log = logging.getLogger("pdfminer")
    if miner_log.level == logging.NOTSET:
        miner_log.setLevel(logging.ERROR)
    return PDFDocument(PDFParser(io.BytesIO(data)), password=password or "")


def pdfminer_texts(document: Any, wanted: set[int] | None) -> dict[int, str | None]:
    """pdfminer's text of the wanted pages (0-based; all when None), None for a page it cannot read.

    pdfminer groups characters into lines and text boxes; the boxes are put in reading order
    by ``reading_order`` (pdfminer's own ordering, ``boxes_flow``, is switched off: it
    interleaves the tiers of a vertical page, and it is the slowest step of its analysis).
    """
    from pdfminer.layout import LAParams
    from pdfminer.pdfinterp import PDFPageInterpreter, PDFResourceManager
    from pdfminer.pdfpage import PDFPage

    manager = PDFResourceManager(caching=True)
    device = _layout_device()(manager, laparams=LAParams(detect_vertical=True, boxes_flow=None))
    interpreter = PDFPageInterpreter(manager, device)
    texts: dict[int, str | None] = {}
    last = max(wanted, default=-1) if wanted is not None else None
    try:
        for index, page in enumerate(PDFPage.create_pages(document)):
            if last is not None and index > last:
                break
            if wanted is not None and index not in wanted:
                continue
            try:
                interpreter.process_page(page)
                texts[index] = layout_text(device.get_result())
            except Exception as exc:  # one bad page must not lose the others
                log.debug("pdfminer cannot read page %d: %s", index + 1, exc)
                texts[index] = None
    finally:
        device.close()
    return texts


@functools.cache
def _layout_device() -> Any:
    """pdfminer's page aggregator, without the drawings (lines, curves, images) text does not need."""
    from pdfminer.converter import PDFPageAggregator

    class TextLayout(PDFPageAggregator):
        def paint_path(self, *args: Any, **kwargs: Any) -> None:
            pass

        def render_image(self, *args: Any, **kwargs: Any) -> None:
            pass

    return TextLayout


@dataclass(slots=True)
class TextBlock:
    """A text box of a page (pdfminer's coordinates: y grows upwards)."""

    x0: float
    y0: float
    x1: float
    y1: float
    text: str
    vertical: bool


def layout_text(layout: Any) -> str:
    """The text of a pdfminer page layout, its boxes in reading order, a blank line after each."""
    from pdfminer.layout import LTChar, LTContainer, LTText, LTTextBox, LTTextBoxVertical

    def chars(item: Any) -> str:
        if isinstance(item, LTContainer):
            return "".join(chars(child) for child in item)
        return item.get_text() if isinstance(item, LTText) else ""

    blocks: list[TextBlock] = []
    for item in layout:
        if isinstance(item, LTTextBox):
            text, vertical = item.get_text(), isinstance(item, LTTextBoxVertical)
        elif isinstance(item, LTContainer | LTChar):  # figures: their characters, not analysed into lines
            text, vertical = chars(item), False
        else:
            continue
        if text.strip():
            blocks.append(TextBlock(item.x0, item.y0, item.x1, item.y1, text, vertical))
    return "".join(b.text.rstrip("\n") + "\n\n" for b in reading_order(blocks))


def reading_order(blocks: list[TextBlock]) -> list[TextBlock]:
    """The blocks of a page in reading order, by recursive cuts along the gaps between them (XY-cut).

    Horizontal text is cut into columns first (read left to right), then into bands
    (top to bottom): a title above two columns is a band, each column is read to its end
    before the next one starts. Vertical text is cut into tiers first (top to bottom),
    then into columns (right to left): a page of two tiers is read tier by tier, never
    line by line across the tiers. Blocks that no gap separates are read top to bottom
    (horizontal) or right to left (vertical). Each group of blocks is horizontal or
    vertical by the most of its characters, so a horizontal running head over vertical
    text still reads left to right.

    Where only the second kind of cut applies (a title spans the columns), the bands it
    gives are put back together while they still split into columns (tiers) between them
    (``_sections``): paragraph breaks that happen to line up across two columns do not
    make the page read row by row.
    """
    ordered: list[TextBlock] = []
    stack = [blocks]
    while stack:
        group = stack.pop()
        vertical = 2 * sum(len(b.text) for b in group if b.vertical) > sum(len(b.text) for b in group)
        parts: list[list[TextBlock]] = []
        if len(group) > 1:
            first, second = ("y", "x") if vertical else ("x", "y")
            parts = _cut(group, first, vertical)
            if len(parts) < 2:
                parts = _sections(_cut(group, second, vertical), first, vertical)
        if len(parts) > 1:
            stack.extend(reversed(parts))
        elif vertical:
            ordered.extend(sorted(group, key=lambda b: (-b.x1, -b.y1)))
        else:
            ordered.extend(sorted(group, key=lambda b: (-b.y1, b.x0)))
    return ordered


def _sections(bands: list[list[TextBlock]], axis: str, vertical: bool) -> list[list[TextBlock]]:
    """Neighbouring bands joined while the join still cuts along ``axis`` and one of them did on its own.

    All of them never join: the bands come from a group that does not cut along ``axis``.
    """
    sections = [bands[0]]
    splits = len(_cut(bands[0], axis, vertical)) > 1
    for band in bands[1:]:
        joined = sections[-1] + band
        band_splits = len(_cut(band, axis, vertical)) > 1
        if (splits or band_splits) and len(_cut(joined, axis, vertical)) > 1:
            sections[-1] = joined
            splits = True
        else:
            sections.append(band)
            splits = band_splits
    return sections


def _cut(group: list[TextBlock], axis: str, vertical: bool) -> list[list[TextBlock]]:
    """The group split at every gap of its projection on ``axis``, in reading order (one part: no gap)."""
    if axis == "x":
        spans = sorted(group, key=lambda b: b.x0)
        start, end = (lambda b: b.x0), (lambda b: b.x1)
    else:  # from the top of the page down
        spans = sorted(group, key=lambda b: -b.y1)
        start, end = (lambda b: -b.y1), (lambda b: -b.y0)
    parts: list[list[TextBlock]] = [[spans[0]]]
    reach = end(spans[0])
    for block in spans[1:]:
        if start(block) > reach:
            parts.append([block])
        else:
            parts[-1].append(block)
        reach = max(reach, end(block))
    if axis == "x" and vertical:  # vertical columns and blocks of columns run right to left
        parts.reverse()
    return parts


def pdfminer_info(document: Any) -> dict[str, str]:
    """The text entries of a pdfminer document's info dictionary (Title, Author, CreationDate, ...)."""
    from pdfminer.pdftypes import resolve1
    from pdfminer.psparser import PSLiteral
    from pdfminer.utils import decode_text

    info: dict[str, str] = {}
    for entry in getattr(document, "info", None) or []:
        for key, value in entry.items():
            value = resolve1(value)
            if isinstance(value, bytes):
                value = decode_text(value)
            elif isinstance(value, PSLiteral):
                value = str(value.name)
            if isinstance(value, str):
                info[str(key)] = value
    return info


__all__ = ["TextBlock", "layout_text", "pdfminer_info", "pdfminer_open", "pdfminer_texts", "reading_order"]
