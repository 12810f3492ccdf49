"""PDF loader: pypdfium2 for every page, pdfminer.six only for the pages pypdfium2 reads badly.

One ``Document`` per PDF, one ``DocumentPart`` per page that has text (``page_number``
is 1-based). pypdfium2 (PDFium) is fast and reads most files, but four kinds of page
go to pdfminer.six as well, decided from measurements on PDFium's text page:

* **garbled** text: ``(cid:N)`` codes, U+FFFD, private-use or control characters make
  up a large share of the page (see ``_badness``);
* **vertical** Japanese (tategaki): PDFium keeps each column top to bottom but puts the
  columns out of order. Consecutive CJK characters whose boxes sit one *below* the other
  in the same column, rather than side by side on a line, mark such a page;
* **interleaved columns**: the page's content stream draws a line of one column, then the
  line beside it in the next column, and PDFium follows it (see ``_interleaved_columns``);
* **missing** text: far more text objects on the page than characters PDFium extracted
  (fonts it cannot map to Unicode, e.g. CID fonts with a CMap PDFium lacks).

pdfminer reads those pages with ``LAParams(detect_vertical=True)`` and its text boxes are
put in reading order (:mod:`bunko.loaders.pdf_layout`): horizontal text column by column, each
column top to bottom; vertical text tier by tier (段), top to bottom, each tier's
columns right to left. The cleaner and more complete of the two texts is kept
(pdfminer's, for vertical and interleaved pages). A page that neither reads cleanly is
left out and listed in ``garbled_pages``; pages without a text layer (scans) are listed
in ``pages_without_text``, unless OCR can read them (:mod:`bunko.loaders.ocr`: Tesseract, when it
is installed; such pages carry ``ocr``, ``ocr_confidence`` and ``ocr_lang``, and the document
``ocr_pages``). A PDF with no text at all raises ``NoTextError`` (``OCRUnavailableError``, naming what
to install, when OCR cannot run), one whose every text page is garbled raises ``GarbledTextError``. Files PDFium
cannot open are tried with pdfminer before they are reported as corrupt.

Tables ruled into cells by lines (:mod:`bunko.loaders.pdf_tables`) become their rows under their
header row, parts of their own (``table``, ``row_start``, ``row_end``, the line above as caption)
placed where the table's first character is in the page's text, which loses the table's
characters. Only pages whose PDFium text is kept are looked at, and only those where PDFium's paths
include horizontal rules crossed by vertical ones (``_Rules``): the rules and characters come from
PDFium, so nothing is parsed twice.

The text is tidied on the way (``_clean``, ``_join_hyphenated``): a word hyphenated at a
line end is joined back (PDFium marks such hyphens with U+FFFE, pdfminer leaves ``-``
and a line break; soft hyphens U+00AD are dropped) and keeps its hyphen only where it is
a compound (the hyphenated form occurs elsewhere in the document, or the second part
starts with a capital or a digit: ``Schwarz-Weiß``); spaces an extractor put between
two CJK characters (from the gaps of proportional punctuation, ``歩行者は、 道路``) are
removed, while spaces between Latin words and around Latin words stay.
"""

from __future__ import annotations

import contextlib
import ctypes
import datetime as dt
import functools
import importlib.util
import logging
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import (
    CorruptDocumentError,
    EncryptedDocumentError,
    GarbledTextError,
    LoaderError,
    NoTextError,
    OCRUnavailableError,
)
from ..types import Document, DocumentPart
from . import LoadOptions, file_metadata, ocr, pdf_tables, read_bytes
from .pdf_layout import pdfminer_info, pdfminer_open, pdfminer_texts
from .tables import Table

_MISSING = 'reading PDF files needs: pip install "bunko[pdf]"'

GARBLED_SHARE = 0.2  # a page whose non-space characters are this much mojibake is unusable
SUSPECT_SHARE = 0.05  # ... and this much makes it worth asking the other extractor
SUSPECT_CODES = 3  # as do this many (cid:N) codes or U+FFFD (stray control/private-use glyphs in maths do not)
VERTICAL_MIN_STEPS = 8  # column steps between CJK characters needed to call a page vertical
MISSING_TEXT_FACTOR = 2  # text objects > 2 * extracted characters + 10: PDFium lost text
MISSING_TEXT_SLACK = 10
_VERTICAL_SAMPLE = 4000  # characters of a page examined for vertical writing
# A page where this many horizontal rules (drawn lines, rectangle edges) are each crossed by two vertical
# ones may hold a ruled table (two rows of cells); pdf_tables looks at such pages only.
RULED_HORIZONTAL = 3
_THIN = 2.0  # points: a path this thin is a line
_RULE_SEGMENTS = 2000  # segments of complex paths examined on one page
_RULES = 400  # rules of each direction compared for crossings
# A page with more rules than this in either direction is a drawing (hatching, a map): crossing them
# all into cells (pdfplumber's geometry, rules x rules) would take seconds. A Word table of 50 rows and
# 8 columns, each cell's borders drawn on their own, has about 450 of each.
MAX_RULES = 1500
# The line just above a table, when no longer than this, is its caption (``## line`` over each of its parts).
CAPTION_CHARS = 80
_RECT_SAMPLE = 160  # text rectangles from the middle of a page examined for interleaved columns
INTERLEAVED_MIN_ROWS = 4  # rows read across two columns needed to call a page interleaved
COLUMN_MIN_SHARE = 0.25  # ... each side at least this share of the page's text width

# PDFium is not thread-safe, and the engine loads files in worker threads.
_PDFIUM_LOCK = threading.Lock()

_CID_RE = re.compile(r"\(cid:\d+\)")
_CODES_RE = re.compile(r"\(cid:\d+\)|\ufffd")
_SPACE_RE = re.compile(r"\s")
# not whitespace (\s also covers \x0b, \x0c and \x1c-\x1f), so counted among the non-space characters
_BAD_RE = re.compile("[\x00-\x08\x0e-\x1b\x7f-\x84\x86-\x9f\ufffd\ue000-\uf8ff\U000f0000-\U0010ffff]")
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\ufffd]")
_CJK_RE = re.compile(r"[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff00-\uffef\uac00-\ud7af]")
# Characters of Chinese and Japanese text, written without spaces between words: ideographs, kana,
# CJK punctuation and full-width punctuation (not the ideographic space U+3000, not full-width
# letters and digits, and not Hangul: Korean puts spaces between words).
_CJ = ("\u2e80-\u2fdf\u3001-\u303f\u3040-\u30ff\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
       "\ufe30-\ufe4f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff9f\U00020000-\U0003134f")
_CJ_SPACE_RE = re.compile(f"(?<=[{_CJ}])[^\\S\\n]+(?=[{_CJ}])")
# Hyphenation. PDFium replaces a hyphen that breaks a word at a line end (and the line break) with
# U+FFFE (U+0002 in older versions); pdfminer keeps the hyphen and the line break. Both become
# _HYPHEN here, and ``_join_hyphenated`` decides per word whether the hyphen stays.
_HYPHEN = "\ufffe"
_LETTER = "A-Za-z\u00c0-\u024f\u0370-\u03ff\u0400-\u04ff"  # scripts that hyphenate at line ends
_LINE_END_HYPHEN_RE = re.compile(f"(?<=[{_LETTER}])-[ \\t]*\\n[ \\t]*(?=[{_LETTER}])")
_MARKED_HYPHEN_RE = re.compile("[\ufffe\x02][ \\t]*\\n?[ \\t]*")
_SOFT_HYPHEN_RE = re.compile("\u00ad(?:[ \\t]*\\n[ \\t]*)?")  # discretionary: never printed mid-line
_HYPHENATED_RE = re.compile("([^\\W_]*)\ufffe([^\\W_]*)")
_WORD_RE = re.compile(r"[^\W_]+(?:-[^\W_]+)*")
_PDF_DATE_RE = re.compile(
    r"^(?:D:)?(\d{4})(\d{2})?(\d{2})?(\d{2})?(\d{2})?(\d{2})?\s*(?:([Zz+\-])\s*(\d{2})?'?(\d{2})?'?)?"
)

log = logging.getLogger(__name__)


def _pdfium() -> tuple[Any, Any]:
    try:
        import pypdfium2
        import pypdfium2.raw as pdfium_c
    except ImportError as exc:
        raise LoaderError(_MISSING) from exc
    if importlib.util.find_spec("pdfminer") is None:  # needed for some pages only: fail the same way always
        raise LoaderError(_MISSING)
    return pypdfium2, pdfium_c


# --- text quality -------------------------------------------------------------------


def _badness(text: str) -> tuple[int, int]:
    """(mojibake characters, non-space characters); a ``(cid:N)`` code counts as one bad character.

    Mojibake here: U+FFFD, private-use characters (glyphs without a real Unicode value)
    and control characters (raw glyph codes leaking through).
    """
    cids = len(_CID_RE.findall(text))
    rest = _CID_RE.sub("", text) if cids else text
    total = len(rest) - len(_SPACE_RE.findall(rest))
    return cids + len(_BAD_RE.findall(rest)), cids + total


@dataclass(slots=True)
class _Candidate:
    """One extractor's text for a page, with its quality."""

    text: str
    bad: int
    total: int

    @classmethod
    def of(cls, raw: str | None) -> _Candidate:
        text = _prepare(raw or "")
        bad, total = _badness(text)
        return cls(text, bad, total)

    @property
    def share(self) -> float:
        return self.bad / self.total if self.total else 0.0

    @property
    def garbled(self) -> bool:
        return self.total > 0 and self.share >= GARBLED_SHARE

    @property
    def suspect(self) -> bool:
        if not self.total:
            return False
        return self.share >= SUSPECT_SHARE or len(_CODES_RE.findall(self.text)) >= SUSPECT_CODES

    @property
    def good(self) -> int:
        return self.total - self.bad


def _prepare(text: str) -> str:
    """Line ends to ``\\n``; hyphens that break a word at a line end marked with ``_HYPHEN``.

    PDFium's markers (U+FFFE, or U+0002) and pdfminer's ``-`` before a line break between
    two letters become ``_HYPHEN`` with the line break gone; soft hyphens (U+00AD) are
    dropped, joining the line after one to it.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if "\u00ad" in text:
        text = _SOFT_HYPHEN_RE.sub("", text)
    if "\ufffe" in text or "\x02" in text:
        text = _MARKED_HYPHEN_RE.sub(_HYPHEN, text)
    if "-" in text:
        text = _LINE_END_HYPHEN_RE.sub(_HYPHEN, text)
    return text


def _clean(text: str) -> str:
    """The text to store: no CID codes, replacement or control characters, tidy blank lines.

    Spaces between two CJK characters are removed: Japanese and Chinese put none between
    words, and the ones here come from the gaps an extractor sees around proportional
    punctuation or between glyphs set with extra spacing.
    """
    text = _CID_RE.sub("", text)
    text = _CONTROL_RE.sub("", text)
    if _CJK_RE.search(text):
        text = _CJ_SPACE_RE.sub("", text)
    text = re.sub(r"[ \t\u3000]+\n", "\n", text)
    text = re.sub(r"\n{3,}", "\n\n", text)
    return text.strip()


def _join_hyphenated(texts: list[str]) -> list[str]:
    """The texts (a document's pages) with every ``_HYPHEN`` resolved: the word joined, or a hyphen.

    The hyphen stays where the word is a compound: its hyphenated form occurs elsewhere in
    the document and its joined form does not, or (neither occurring) the second part starts
    with a capital letter or a digit, or the first ends with a digit (``Schwarz-Weiß``,
    ``COVID-19``). Otherwise the word is joined (``com-pile`` -> ``compile``).
    """
    if not any(_HYPHEN in text for text in texts):
        return texts
    words = {word.lower() for text in texts for word in _WORD_RE.findall(text)}

    def resolve(match: re.Match[str]) -> str:
        first, second = match.group(1), match.group(2)
        if not first or not second:
            return f"{first}-{second}"
        hyphenated, joined = f"{first}-{second}".lower(), f"{first}{second}".lower()
        if hyphenated in words and joined not in words:
            return f"{first}-{second}"
        if joined in words:
            return first + second
        if second[0].isupper() or second[0].isdigit() or first[-1].isdigit():
            return f"{first}-{second}"
        return first + second

    return [_HYPHENATED_RE.sub(resolve, text) if _HYPHEN in text else text for text in texts]


# --- PDFium --------------------------------------------------------------------------


@dataclass(slots=True)
class _PdfiumPage:
    text: _Candidate
    needs_pdfminer: bool
    reorder: bool  # PDFium's text order is wrong (vertical columns, interleaved columns): prefer pdfminer's
    # the page's tables and its text outside them (see _page_layout), for a page whose text PDFium reads
    layout: list[str | pdf_tables.PdfTable] | None = None


def _column_steps(textpage: Any, count: int, pdfium_c: Any) -> tuple[int, int]:
    """(vertical, horizontal) steps between consecutive CJK characters in PDFium's text order.

    In tategaki the next character sits about one character height *below* the previous
    one at the same x; in horizontal text it sits about one width to the right on the same
    baseline. Characters are compared by the centres of their boxes, scaled by font size.
    """
    left, right, bottom, top = ctypes.c_double(), ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
    vertical = horizontal = 0
    prev: tuple[float, float, float] | None = None
    for index in range(min(count, _VERTICAL_SAMPLE)):
        code = pdfium_c.FPDFText_GetUnicode(textpage, index)
        if not (0x3000 <= code <= 0xD7AF or 0xF900 <= code <= 0xFFEF) or code in (0x3000,):
            prev = None
            continue
        if not pdfium_c.FPDFText_GetCharBox(textpage, index, left, right, bottom, top):
            prev = None
            continue
        size = max(pdfium_c.FPDFText_GetFontSize(textpage, index), right.value - left.value,
                   top.value - bottom.value, 1.0)
        x, y = (left.value + right.value) / 2, (bottom.value + top.value) / 2
        if prev is not None:
            scale = max(size, prev[2])
            dx, dy = x - prev[0], y - prev[1]
            if abs(dx) < 0.5 * scale and -2.5 * scale < dy < -0.3 * scale:
                vertical += 1
            elif abs(dy) < 0.5 * scale and 0.3 * scale < dx < 2.5 * scale:
                horizontal += 1
        prev = (x, y, size)
    return vertical, horizontal


def _interleaved_columns(textpage: Any, lines: int, pdfium_c: Any) -> bool:
    """True if PDFium's text runs across columns line by line: a line of one column, the line beside it, ...

    PDFium follows the content stream; most producers draw a column at a time, some draw
    each row of the page across all its columns. PDFium's text rectangles (one per run of a
    line) show it: a run, then a run on the same baseline after a gap wider than the line
    is high, then the next line back under the first run. Both runs must be wide (a share
    of the page's text width), so label/value rows and short table cells do not count.
    ``_RECT_SAMPLE`` rectangles from the middle of the page (its body, past any title) are
    examined: this runs on every page, and a page of formulas has thousands of them. A page
    with few more rectangles than ``lines`` (of PDFium's text) has no line made of two runs.
    """
    count = pdfium_c.FPDFText_CountRects(textpage, 0, -1)
    if count < 3 * INTERLEAVED_MIN_ROWS or count < 1.4 * lines:
        return False
    first = max(0, min(count // 2 - _RECT_SAMPLE // 2, count - _RECT_SAMPLE))
    left, top, right, bottom = ctypes.c_double(), ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
    get_rect = pdfium_c.FPDFText_GetRect
    runs: list[list[float]] = []  # [left, bottom, right, top] of each run of a line, in text order
    for index in range(first, min(count, first + _RECT_SAMPLE)):
        if not get_rect(textpage, index, left, top, right, bottom):
            continue
        x0, y0, x1, y1 = left.value, bottom.value, right.value, top.value
        if runs:
            last = runs[-1]
            height = max(last[3] - last[1], y1 - y0, 1.0)
            if abs(y0 - last[1]) < 0.5 * height and -0.5 * height < x0 - last[2] < height:  # the same run goes on
                if x1 > last[2]:
                    last[2] = x1
                if y1 > last[3]:
                    last[3] = y1
                continue
        runs.append([x0, y0, x1, y1])
    rows = _rows_across(runs)
    return rows >= INTERLEAVED_MIN_ROWS and 4 * rows >= len(runs)


def _rows_across(runs: list[list[float]]) -> int:
    """How many runs are followed by a wide run beside them and then a run back under them (see above)."""
    if len(runs) < 3:
        return 0
    wide = COLUMN_MIN_SHARE * (max(r[2] for r in runs) - min(r[0] for r in runs))
    rows = 0
    for a, b, c in zip(runs, runs[1:], runs[2:], strict=False):
        height = max(a[3] - a[1], b[3] - b[1], 1.0)
        if (abs(a[1] - b[1]) < 0.5 * height and b[0] - a[2] > height  # b beside a, past a gap
                and abs(c[0] - a[0]) < 2 * height and c[1] < a[1] - 0.5 * height  # c back under a
                and a[2] - a[0] >= wide and b[2] - b[0] >= wide):
            rows += 1
    return rows


def _form_object(pdfium_c: Any, form: Any, index: int) -> Any:
    return pdfium_c.FPDFFormObj_GetObject(form, index)


@dataclass(slots=True)
class _Rules:
    """The straight horizontal and vertical lines drawn on a page (PDF user space): a table's rules."""

    horizontal: list[tuple[float, float, float]] = field(default_factory=list)  # (x0, x1, y)
    vertical: list[tuple[float, float, float]] = field(default_factory=list)  # (y0, y1, x)
    segments: int = 0  # segments of complex paths read so far

    def add(self, x0: float, y0: float, x1: float, y1: float) -> None:
        """A line from (x0, y0) to (x1, y1), kept when it is horizontal or vertical."""
        if abs(y1 - y0) <= _THIN < abs(x1 - x0):
            self.horizontal.append((min(x0, x1), max(x0, x1), (y0 + y1) / 2))
        elif abs(x1 - x0) <= _THIN < abs(y1 - y0):
            self.vertical.append((min(y0, y1), max(y0, y1), (x0 + x1) / 2))

    def grid(self) -> bool:
        """Whether some rules cross as a table's do: ``RULED_HORIZONTAL`` horizontal lines each crossed by
        at least two of the vertical ones (two rows of cells)."""
        if len(self.horizontal) < RULED_HORIZONTAL or len(self.vertical) < 2:
            return False
        if len(self.horizontal) > MAX_RULES or len(self.vertical) > MAX_RULES:  # hatching, a map: no table
            return False
        vertical = self.vertical[:_RULES]
        crossed = 0
        for x0, x1, y in self.horizontal[:_RULES]:
            crossings = sum(1 for y0, y1, x in vertical
                            if x0 - _THIN <= x <= x1 + _THIN and y0 - _THIN <= y <= y1 + _THIN)
            if crossings >= 2:
                crossed += 1
                if crossed >= RULED_HORIZONTAL:
                    return True
        return False


def _path_rules(obj: Any, pdfium_c: Any, rules: _Rules, box: tuple[Any, ...], point: tuple[Any, Any],
                matrix: Any) -> None:
    """The horizontal and vertical lines of a path object: a thin path is one, else its straight segments
    are (a rectangle's edges: a shaded cell is ruled by them), up to ``_RULE_SEGMENTS`` on a page."""
    left, bottom, right, top = box
    if not pdfium_c.FPDFPageObj_GetBounds(obj, left, bottom, right, top):
        return
    x0, y0, x1, y1 = left.value, bottom.value, right.value, top.value
    if y1 - y0 <= _THIN:
        rules.add(x0, (y0 + y1) / 2, x1, (y0 + y1) / 2)
        return
    if x1 - x0 <= _THIN:
        rules.add((x0 + x1) / 2, y0, (x0 + x1) / 2, y1)
        return
    if rules.segments >= _RULE_SEGMENTS or not pdfium_c.FPDFPageObj_GetMatrix(obj, matrix):
        return
    a, b, c, d, e, f = matrix.a, matrix.b, matrix.c, matrix.d, matrix.e, matrix.f
    x, y = point
    count = min(pdfium_c.FPDFPath_CountSegments(obj), _RULE_SEGMENTS - rules.segments)
    rules.segments += count
    previous = start = None
    for index in range(count):
        segment = pdfium_c.FPDFPath_GetPathSegment(obj, index)
        if not segment or not pdfium_c.FPDFPathSegment_GetPoint(segment, x, y):
            previous = start = None
            continue
        here = (a * x.value + c * y.value + e, b * x.value + d * y.value + f)
        kind = pdfium_c.FPDFPathSegment_GetType(segment)
        if kind == pdfium_c.FPDF_SEGMENT_MOVETO:
            start = here
        elif kind == pdfium_c.FPDF_SEGMENT_LINETO and previous is not None:
            rules.add(previous[0], previous[1], here[0], here[1])
        if pdfium_c.FPDFPathSegment_GetClose(segment) and start is not None:
            rules.add(here[0], here[1], start[0], start[1])
        previous = here


def _count_objects(page: Any, limit: int, pdfium_c: Any) -> tuple[bool, _Rules]:
    """(more than ``limit`` text objects, the rules drawn) of a page.

    Text objects inside forms count; the paths of forms are not looked at (their coordinates are the form's).
    """
    count = 0
    rules = _Rules()
    box = (ctypes.c_float(), ctypes.c_float(), ctypes.c_float(), ctypes.c_float())
    point = (ctypes.c_float(), ctypes.c_float())
    matrix = pdfium_c.FS_MATRIX()
    stack: list[tuple[int, Callable[[int], Any], bool]] = [
        (pdfium_c.FPDFPage_CountObjects(page), lambda i: pdfium_c.FPDFPage_GetObject(page, i), True)
    ]
    while stack:
        n, get, top_level = stack.pop()
        for i in range(n):
            obj = get(i)
            kind = pdfium_c.FPDFPageObj_GetType(obj)
            if kind == pdfium_c.FPDF_PAGEOBJ_TEXT:
                count += 1
            elif kind == pdfium_c.FPDF_PAGEOBJ_PATH and top_level:
                _path_rules(obj, pdfium_c, rules, box, point, matrix)
            elif kind == pdfium_c.FPDF_PAGEOBJ_FORM and len(stack) < 16:
                stack.append((pdfium_c.FPDFFormObj_CountObjects(obj), functools.partial(_form_object, pdfium_c, obj),
                              False))
    return count > limit, rules


def _read_pdfium_page(pdf: Any, index: int, pdfium_c: Any) -> _PdfiumPage:
    try:
        page = pdf[index]
    except Exception as exc:  # a damaged page: let pdfminer try it
        log.debug("PDFium cannot load page %d: %s", index + 1, exc)
        return _PdfiumPage(_Candidate.of(""), True, False)
    textpage = page.get_textpage()
    try:
        count = textpage.count_chars()
        candidate = _Candidate.of(textpage.get_text_range() if count > 0 else "")
        reorder = False
        if candidate.total >= 10 and len(_CJK_RE.findall(candidate.text)) * 5 >= candidate.total:
            v_steps, h_steps = _column_steps(textpage.raw, count, pdfium_c)
            reorder = v_steps >= VERTICAL_MIN_STEPS and v_steps > h_steps
        if not reorder and candidate.total >= 10:
            reorder = _interleaved_columns(textpage.raw, candidate.text.count("\n") + 1, pdfium_c)
        missing, rules = _count_objects(page.raw, MISSING_TEXT_FACTOR * max(count, 0) + MISSING_TEXT_SLACK, pdfium_c)
        layout = None
        if (rules.grid() and candidate.total > 0 and page.get_rotation() == 0 and not missing and not reorder
                and not candidate.suspect and pdf_tables.available()):
            try:
                layout = _page_layout(textpage, count, rules, page.get_height(), pdfium_c)
            except Exception as exc:  # a table is a bonus: the page's text stays as PDFium read it
                log.debug("tables of page %d not read: %s", index + 1, exc)
    finally:
        textpage.close()
        page.close()
    needs = candidate.suspect or reorder or missing
    return _PdfiumPage(candidate, needs, reorder, layout)


def _open_error(path: Path, exc: Exception, pdfium_c: Any, password: str | None) -> Exception | None:
    """The error for a PDFium open failure, or None when pdfminer should try the file."""
    code = getattr(exc, "err_code", None)
    if code == pdfium_c.FPDF_ERR_PASSWORD:
        if password:
            return EncryptedDocumentError(f"{path}: the PDF is encrypted and the password given does not open it")
        return EncryptedDocumentError(f"{path}: the PDF is encrypted; a password is needed to open it")
    return None


# --- metadata ------------------------------------------------------------------------


def _pdf_date(value: str) -> str | None:
    """A PDF date (``D:YYYYMMDDHHmmSSOHH'mm'``) as ``YYYY-MM-DDTHH:MM:SSZ`` in UTC, or None."""
    match = _PDF_DATE_RE.match(value.strip())
    if not match:
        return None
    year, month, day, hour, minute, second, sign, off_h, off_m = match.groups()
    try:
        stamp = dt.datetime(int(year), int(month or 1), int(day or 1), int(hour or 0), int(minute or 0),
                            int(second or 0), tzinfo=dt.UTC)
        if sign in ("+", "-"):
            offset = dt.timedelta(hours=int(off_h or 0), minutes=int(off_m or 0))
            stamp = stamp - offset if sign == "+" else stamp + offset
    except (ValueError, OverflowError):
        return None
    if not 1900 <= stamp.year <= 2200:
        return None
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def _info_metadata(info: dict[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for source, key in (("Title", "title"), ("Author", "author")):
        value = (info.get(source) or "").replace("\x00", "").strip()
        if value:
            found[key] = value
    created = _pdf_date(info.get("CreationDate") or "")
    if created:
        found["created_at"] = created
    return found


# --- the loader ----------------------------------------------------------------------


def _choose(pdfium_page: _PdfiumPage | None, miner_raw: str | None, consulted: bool) -> tuple[str, str]:
    """(status, text) for a page: status ``text``, ``empty`` or ``garbled``."""
    candidates: list[tuple[float, _Candidate]] = []
    if pdfium_page is not None and pdfium_page.text.total and not pdfium_page.text.garbled:
        candidates.append((pdfium_page.text.good, pdfium_page.text))
    miner = _Candidate.of(miner_raw) if consulted else None
    if miner is not None and miner.total and not miner.garbled:
        # pdfminer's text is in reading order: prefer it unless it lost much of the text
        weight = 1.25 if pdfium_page is not None and pdfium_page.reorder else 1.0
        candidates.append((miner.good * weight, miner))
    if candidates:
        best = max(candidates, key=lambda c: c[0])[1]
        text = _clean(best.text)
        if text:
            return "text", text
    seen_garbled = (pdfium_page is not None and pdfium_page.text.garbled) or (miner is not None and miner.garbled)
    return ("garbled" if seen_garbled else "empty"), ""


def load_pdf(path: Path, options: LoadOptions) -> list[Document]:
    """A PDF as one document with a part per page that has text; see the module docstring."""
    pdfium, pdfium_c = _pdfium()
    data = read_bytes(path, options)
    password = options.password or None
    info: dict[str, str] = {}
    pages: list[_PdfiumPage] | None = None
    open_failure: str | None = None
    with _PDFIUM_LOCK:
        try:
            pdf = pdfium.PdfDocument(data, password=password)
        except pdfium.PdfiumError as exc:
            error = _open_error(path, exc, pdfium_c, password)
            if error is not None:
                raise error from exc
            reason = re.search(r"PDFium: ([^)]*)", str(exc))
            open_failure = reason.group(1).strip().rstrip(".").lower() if reason else "unknown error"
        else:
            try:
                info = {k: v for k, v in pdf.get_metadata_dict(skip_empty=True).items() if isinstance(v, str)}
                pages = [_read_pdfium_page(pdf, index, pdfium_c) for index in range(len(pdf))]
            finally:
                pdf.close()

    if not pages:  # PDFium could not open the file (or found no pages): pdfminer's turn
        return _load_with_pdfminer(path, data, password, open_failure or "no pages")

    wanted = {index for index, page in enumerate(pages) if page.needs_pdfminer}
    miner_texts: dict[int, str | None] = {}
    if wanted:
        try:
            miner_texts = pdfminer_texts(pdfminer_open(data, password), wanted)
        except Exception as exc:  # keep what PDFium read
            log.debug("pdfminer cannot open %s: %s", path, exc)
    results = [_choose(page, miner_texts.get(index), index in wanted) for index, page in enumerate(pages)]
    scanned = [index for index, (status, _) in enumerate(results) if status == "empty"]
    ocr_pages: dict[int, dict[str, Any]] = {}
    unavailable = (ocr.missing() if options.ocr else "OCR is not enabled") if scanned else None
    if scanned and unavailable is None:
        ocr.check_page_count(len(scanned), options, str(path))
        for index in scanned:
            page = ocr.read_image(_render(data, password, index), options, f"{path} page {index + 1}")
            if ocr.readable(page):
                results[index] = ("text", page.text)
                ocr_pages[index + 1] = page.metadata()
    layouts = {index: page.layout for index, page in enumerate(pages)
               if page.layout is not None and results[index][0] == "text"}
    return [_document(path, results, info, ocr_pages, unavailable, layouts)]


def _page_layout(textpage: Any, count: int, rules: _Rules, height: float,
                 pdfium_c: Any) -> list[str | pdf_tables.PdfTable] | None:
    """A page's tables (:mod:`bunko.loaders.pdf_tables`) and its text outside them, in PDFium's text order
    (each table where its first character is): ``[text, table, text, ...]``; None when it has none."""
    chars: list[pdf_tables.Char] = []

    def page_chars() -> list[pdf_tables.Char]:
        left, right, bottom, top = ctypes.c_double(), ctypes.c_double(), ctypes.c_double(), ctypes.c_double()
        for index in range(count):
            text = chr(pdfium_c.FPDFText_GetUnicode(textpage.raw, index))
            if not text.isspace() and pdfium_c.FPDFText_GetCharBox(textpage.raw, index, left, right, bottom, top):
                chars.append(pdf_tables.Char(text, (left.value + right.value) / 2,
                                             height - (bottom.value + top.value) / 2))
            else:
                chars.append(pdf_tables.Char(text))
        return chars

    horizontal = [(x0, x1, height - y) for x0, x1, y in rules.horizontal]
    vertical = [(height - y1, height - y0, x) for y0, y1, x in rules.vertical]
    tables = pdf_tables.find_tables(horizontal, vertical, page_chars)
    if not tables:
        return None
    owner = [next((n for n, table in enumerate(tables) if index in table.chars), -1) for index in range(count)]
    for index in range(1, count):  # spaces and line breaks go with the characters before them
        if chars[index].x is None:
            owner[index] = owner[index - 1]
    layout: list[str | pdf_tables.PdfTable] = []
    placed: set[int] = set()
    start = 0
    for index in range(1, count + 1):
        if index < count and owner[index] == owner[start]:
            continue
        if owner[start] < 0:
            layout.append(textpage.get_text_range(start, index - start))
        elif owner[start] not in placed:
            placed.add(owner[start])
            layout.append(tables[owner[start]])
        start = index
    layout.extend(table for number, table in enumerate(tables) if number not in placed)
    return layout


# A page is rendered for OCR at ocr.DPI, or smaller when that would pass this many pixels (a poster).
MAX_RENDER_PIXELS = 40_000_000


def _render(data: bytes, password: str | None, index: int) -> Any:
    """Page ``index`` as a grayscale image for OCR."""
    pdfium, _ = _pdfium()
    with _PDFIUM_LOCK:
        pdf = pdfium.PdfDocument(data, password=password)
        try:
            page = pdf[index]
            try:
                width, height = page.get_size()  # points
                scale = min(ocr.DPI / 72, (MAX_RENDER_PIXELS / max(1.0, width * height)) ** 0.5)
                return page.render(scale=scale, grayscale=True).to_pil()
            finally:
                page.close()
        finally:
            pdf.close()


def _load_with_pdfminer(path: Path, data: bytes, password: str | None, reason: str) -> list[Document]:
    from pdfminer.pdfdocument import PDFEncryptionError, PDFPasswordIncorrect

    try:
        document = pdfminer_open(data, password)
        texts = pdfminer_texts(document, None)
    except PDFPasswordIncorrect as exc:
        if password:
            raise EncryptedDocumentError(f"{path}: the PDF is encrypted and the password given does not open it") \
                from exc
        raise EncryptedDocumentError(f"{path}: the PDF is encrypted; a password is needed to open it") from exc
    except PDFEncryptionError as exc:
        raise EncryptedDocumentError(f"{path}: the PDF uses an encryption method that cannot be read") from exc
    except Exception as exc:  # any parser failure here means a damaged file
        raise CorruptDocumentError(f"{path}: not a readable PDF (damaged or incomplete: {reason})") from exc
    if not texts:
        raise CorruptDocumentError(f"{path}: not a readable PDF (damaged or incomplete: {reason}; no pages found)")
    try:
        info = pdfminer_info(document)
    except Exception:  # metadata is optional
        info = {}
    count = max(texts) + 1
    results = [_choose(None, texts.get(index), True) for index in range(count)]
    return [_document(path, results, info)]


def _document(path: Path, results: list[tuple[str, str]], info: dict[str, str],
              ocr_pages: dict[int, dict[str, Any]] | None = None, ocr_missing: str | None = None,
              layouts: dict[int, list[str | pdf_tables.PdfTable]] | None = None) -> Document:
    """The document of the pages' texts; ``ocr_pages`` holds the OCR metadata of the pages read by OCR,
    ``ocr_missing`` why OCR could not run (when pages without a text layer were left out for that), and
    ``layouts`` the pages with tables: their text outside the tables and the tables, in order."""
    ocr_pages = ocr_pages or {}
    layouts = layouts or {}
    # every page's text, or its pieces of text between its tables, for the hyphenation of the whole document
    pieces: list[str] = []
    for index, (_, text) in enumerate(results):
        if index in layouts:
            pieces.extend(_clean(_prepare(item)) for item in layouts[index] if isinstance(item, str))
        else:
            pieces.append(text)
    joined = iter(_join_hyphenated(pieces))
    parts: list[DocumentPart] = []
    tables = 0
    for number, (status, _) in enumerate(results, start=1):
        if number - 1 not in layouts:
            text = next(joined)
            if status == "text":
                parts.append(DocumentPart(text, {"page_number": number, **ocr_pages.get(number, {})}))
            continue
        caption = ""
        for item in layouts[number - 1]:
            if isinstance(item, str):
                text = next(joined)
                if text:
                    parts.append(DocumentPart(text, {"page_number": number}))
                caption = text.rsplit("\n", 1)[-1] if text else ""
                continue
            tables += 1
            rows = [(row, [_clean(cell) for cell in cells]) for row, cells in pdf_tables.split_lines(item.rows)]
            caption = caption if len(caption) <= CAPTION_CHARS else ""
            parts.extend(Table(rows, {"page_number": number, "table": tables}, caption=caption))
            caption = ""
    without_text = [number for number, (status, _) in enumerate(results, start=1) if status == "empty"]
    garbled = [number for number, (status, _) in enumerate(results, start=1) if status == "garbled"]
    if not parts:
        if garbled:
            raise GarbledTextError(
                f"{path}: the text of page{'s' if len(garbled) > 1 else ''} {_page_list(garbled)} comes out "
                "garbled (glyphs without a Unicode mapping) in every PDF reader; nothing readable to index"
            )
        pages = f"{len(results)} page{'s' if len(results) != 1 else ''} without a text layer, e.g. scanned images"
        if ocr_missing == "OCR is not enabled":
            raise NoTextError(f"{path}: no extractable text; OCR is not enabled ({pages})")
        if ocr_missing is not None:
            raise OCRUnavailableError(f"{path}: no extractable text ({pages}); {ocr_missing}")
        raise NoTextError(f"{path}: no extractable text ({pages}; OCR found no text on them either)")
    document = Document.from_parts(parts)
    metadata = file_metadata(path, "pdf", document.content)
    metadata["page_count"] = len(results)
    metadata.update(_info_metadata(info))
    if without_text:
        metadata["pages_without_text"] = without_text
    if ocr_pages:
        metadata["ocr_pages"] = sorted(ocr_pages)
    if garbled:
        metadata["garbled_pages"] = garbled
    if tables:
        metadata["table_count"] = tables
    document.metadata = metadata
    return document


def _page_list(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:20])
    return shown + (f" (and {len(numbers) - 20} more)" if len(numbers) > 20 else "")


# -- encrypted uploads ---------------------------------------------------------------------------
def unlock_pdf(path: Path, password: str) -> bool:
    """Replace the PDF at ``path`` by a decrypted copy when it is encrypted; returns whether it was.

    The server uses it for an upload's ``password`` (used once, never stored, never sent to a worker).

    A PDF that opens without a password (none, or an owner password only) stays as it is. Raises
    :class:`EncryptedDocumentError` when the password does not open it,
    :class:`CorruptDocumentError` when PDFium cannot open it at all, and the PDF loader's
    :class:`LoaderError` when the ``pdf`` extra is not installed. Messages name the file, not its path.
    """
    pdfium, pdfium_c = _pdfium()
    unlocked = path.with_name(path.name + ".unlocked")
    with _PDFIUM_LOCK:
        try:
            pdf = pdfium.PdfDocument(str(path), password=password)
        except pdfium.PdfiumError as exc:
            if getattr(exc, "err_code", None) == pdfium_c.FPDF_ERR_PASSWORD:
                if _opens_without_password(pdfium, path):  # an owner password only: readable as it is
                    return False
                raise EncryptedDocumentError(f"{path.name}: the PDF is encrypted and the password given does not "
                                             "open it") from None
            raise CorruptDocumentError(f"{path.name}: not a PDF that can be opened with a password "
                                       "(damaged or incomplete)") from None
        try:
            if pdfium_c.FPDF_GetSecurityHandlerRevision(pdf.raw) < 0:
                return False  # not encrypted: the upload stays as it is
            try:
                with unlocked.open("wb") as out:
                    pdf.save(out, flags=pdfium_c.FPDF_REMOVE_SECURITY)
            except BaseException:
                with contextlib.suppress(OSError):
                    unlocked.unlink()
                raise
        finally:
            pdf.close()
    os.replace(unlocked, path)
    return True


def _opens_without_password(pdfium: Any, path: Path) -> bool:
    try:
        pdfium.PdfDocument(str(path)).close()
    except pdfium.PdfiumError:
        return False
    return True


__all__ = ["load_pdf", "unlock_pdf"]
