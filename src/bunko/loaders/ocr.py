"""OCR of pages without a text layer (scanned PDF pages) and of image files, with Tesseract 5.

Tesseract runs through pytesseract (the ``ocr`` extra), with Debian's models (``tesseract-ocr``,
``tesseract-ocr-jpn``, ``tesseract-ocr-jpn-vert``, ``tesseract-ocr-eng``). Without them a page
without a text layer raises :class:`OCRUnavailableError`, a :class:`NoTextError` that says what
to install.

The language and writing direction are chosen per page, unless ``LoadOptions.ocr_lang`` sets them
(``jpn+eng``, ``jpn_vert``, ...): Tesseract's script detection (OSD) says Latin or Japanese and
which way up the page is (a page on its side is turned first); a Latin page is read with ``eng``; a
Japanese page with ``jpn`` and, when that reads it with low confidence, with ``jpn_vert`` too, the
reading Tesseract is more confident of being kept: horizontal Japanese read as vertical (or the
other way round) comes out as noise with a confidence near 25 against 80 or more for the right
one, while OSD cannot tell the two apart. ``jpn+eng`` is not used by default: on horizontal
Japanese it read a third of the text as Latin letters (a character error rate of 45% against 4%
for ``jpn`` on the page of ``tests/scans.py``).

A page read with a confidence below ``MIN_CONFIDENCE`` (a chart, a photograph) counts as without
text. Every OCR'd page carries ``ocr: True``, ``ocr_confidence`` (Tesseract's mean word confidence,
0-1, weighted by word length) and ``ocr_lang``. A page may take at most
``LoadOptions.ocr_page_seconds`` (:class:`OCRTimeoutError`) and a document may have at most
``LoadOptions.ocr_max_pages`` pages to OCR (:class:`OCRPageLimitError`). OCR runs where the
loader runs: in the ingest runner's and the upload workers' threads, never on an event loop.
"""

from __future__ import annotations

import io
import mimetypes
import re
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import (
    CorruptDocumentError,
    NoTextError,
    OCRError,
    OCRPageLimitError,
    OCRTimeoutError,
    OCRUnavailableError,
)
from ..types import Document, DocumentPart
from . import LoadOptions, file_metadata, read_bytes

DPI = 300  # scanned PDF pages are rendered at this resolution
DEFAULT_PAGE_SECONDS = 120.0
DEFAULT_MAX_PAGES = 100
# Below this confidence (0-100) a Japanese page read as horizontal is read as vertical too.
VERTICAL_RETRY_CONFIDENCE = 70.0
# A page read with less confidence than this is left out as without text: what Tesseract makes of a chart
# or a photograph (35 on the chart of multipage.pdf, in the shared corpus) is noise; pages of text read at
# 80-95, a poor line of text at 55.
MIN_CONFIDENCE = 45.0
INSTALL = ('OCR needs Tesseract and its models: apt-get install tesseract-ocr tesseract-ocr-jpn '
           'tesseract-ocr-jpn-vert tesseract-ocr-eng tesseract-ocr-osd, and pip install "bunko[ocr]"')
_RAISE_TIME = " (raise it with --ocr-page-seconds or [ocr] page_seconds, BUNKO_OCR_PAGE_SECONDS)"
_LATIN_SCRIPTS = {"Latin", "Cyrillic", "Greek"}
_CJK = r"\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff01-\uff60"
_CJK_SPACE_RE = re.compile(rf"(?<=[{_CJK}]) +(?=[{_CJK}])")


@dataclass(slots=True)
class OCRPage:
    """The text Tesseract read on one page, its mean word confidence (0-100) and the model it used."""

    text: str
    confidence: float
    lang: str

    def metadata(self) -> dict[str, Any]:
        """What a part read by OCR carries."""
        return {"ocr": True, "ocr_confidence": round(self.confidence / 100, 3), "ocr_lang": self.lang}


def _pytesseract() -> Any:
    try:
        import pytesseract
    except ImportError as exc:
        raise OCRUnavailableError(INSTALL) from exc
    return pytesseract


def missing() -> str | None:
    """Why OCR cannot run here (what to install), or None when it can."""
    try:
        pytesseract = _pytesseract()
    except OCRUnavailableError as exc:
        return exc.message
    command = pytesseract.pytesseract.tesseract_cmd
    if shutil.which(command) is None:
        return f"{INSTALL} (no {command!r} command found)"
    try:
        languages = set(pytesseract.get_languages(config=""))
    except Exception as exc:  # TesseractNotFoundError, a broken install
        return f"{INSTALL} ({exc})"
    absent = [lang for lang in ("eng", "jpn", "jpn_vert", "osd") if lang not in languages]
    if absent:
        return f"{INSTALL} (missing models: {', '.join(absent)})"
    return None


def require() -> None:
    """Raise :class:`OCRUnavailableError` (naming what to install) unless OCR can run."""
    reason = missing()
    if reason is not None:
        raise OCRUnavailableError(reason)


class _Budget:
    """The time left for one page, shared by the Tesseract runs on it."""

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds = seconds
        self.what = what
        self.deadline = time.monotonic() + seconds

    def left(self) -> float:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise OCRTimeoutError(f"{self.what}: OCR took longer than the limit of {self.seconds:g} s for one page"
                                  f"{_RAISE_TIME}")
        return remaining


def _run(pytesseract: Any, call: str, image: Any, budget: _Budget, **kwargs: Any) -> Any:
    try:
        return getattr(pytesseract, call)(image, timeout=budget.left(), **kwargs)
    except pytesseract.TesseractError:  # Tesseract ran and said no: the caller decides
        raise
    except RuntimeError as exc:
        if "timeout" in str(exc).lower():  # pytesseract kills Tesseract and says "Tesseract process timeout"
            raise OCRTimeoutError(f"{budget.what}: OCR took longer than the limit of {budget.seconds:g} s "
                                  f"for one page{_RAISE_TIME}") from exc
        raise OCRError(f"{budget.what}: OCR failed ({exc})") from exc


def _read(pytesseract: Any, image: Any, lang: str, budget: _Budget) -> OCRPage:
    """One Tesseract run: the text rebuilt from its words (lines, then paragraphs) and their confidence."""
    try:
        data = _run(pytesseract, "image_to_data", image, budget, lang=lang, config="--psm 3",
                    output_type=pytesseract.Output.DICT)
    except pytesseract.TesseractError as exc:
        raise OCRError(f"{budget.what}: OCR failed ({exc.message or exc})") from exc
    paragraphs: dict[tuple[int, int], dict[int, list[str]]] = {}
    weighted = length = 0.0
    for block, par, line, word, conf in zip(data["block_num"], data["par_num"], data["line_num"], data["text"],
                                            data["conf"], strict=False):
        word = (word or "").strip()
        if not word:
            continue
        paragraphs.setdefault((block, par), {}).setdefault(line, []).append(word)
        if float(conf) >= 0:
            weighted += float(conf) * len(word)
            length += len(word)
    text = "\n\n".join("\n".join(_CJK_SPACE_RE.sub("", " ".join(words)) for words in lines.values())
                       for lines in paragraphs.values())
    return OCRPage(text, weighted / length if length else 0.0, lang)


def readable(page: OCRPage) -> bool:
    """Whether OCR read text on the page (not noise: see ``MIN_CONFIDENCE``)."""
    return bool(page.text.strip()) and page.confidence >= MIN_CONFIDENCE


def _orientation(pytesseract: Any, image: Any, budget: _Budget) -> tuple[int, str | None]:
    """(degrees to turn the page clockwise, script) from Tesseract's OSD; (0, None) when it cannot tell."""
    try:
        osd = _run(pytesseract, "image_to_osd", image, budget, config="--psm 0",
                   output_type=pytesseract.Output.DICT)
    except pytesseract.TesseractError:  # too few characters to tell
        return 0, None
    rotate = int(osd.get("rotate", 0)) if float(osd.get("orientation_conf", 0)) >= 2 else 0
    return rotate, str(osd.get("script") or "") or None


def read_image(image: Any, options: LoadOptions, what: str) -> OCRPage:
    """OCR of one page image (see the module docstring for how the language is chosen)."""
    pytesseract = _pytesseract()
    budget = _Budget(options.ocr_page_seconds, what)
    image = image.convert("L")
    if options.ocr_lang:
        return _read(pytesseract, image, options.ocr_lang, budget)
    rotate, script = _orientation(pytesseract, image, budget)
    if rotate:
        image = image.rotate(-rotate, expand=True, fillcolor=255)
    if script in _LATIN_SCRIPTS:
        return _read(pytesseract, image, "eng", budget)
    best = _read(pytesseract, image, "jpn", budget)
    if best.confidence < VERTICAL_RETRY_CONFIDENCE:
        vertical = _read(pytesseract, image, "jpn_vert", budget)
        best = max(best, vertical, key=lambda page: page.confidence)
    if script is None and best.confidence < VERTICAL_RETRY_CONFIDENCE:  # OSD could not tell: maybe Latin
        best = max(best, _read(pytesseract, image, "eng", budget), key=lambda page: page.confidence)
    return best


def check_page_count(count: int, options: LoadOptions, what: str) -> None:
    """Raise :class:`OCRPageLimitError` when ``count`` pages to OCR are more than the limit."""
    if count > options.ocr_max_pages:
        raise OCRPageLimitError(f"{what}: {count} pages without a text layer to OCR, over the limit of "
                                f"{options.ocr_max_pages} pages for one document (raise it with --ocr-max-pages or "
                                "[ocr] max_pages, BUNKO_OCR_MAX_PAGES)")


# -- image files ----------------------------------------------------------------------------------


def _frames(image: Any) -> Iterator[Any]:
    """Each frame (page) of an image: a multi-page TIFF has several."""
    for index in range(getattr(image, "n_frames", 1)):
        image.seek(index)
        yield image.copy()


def load_image(path: Path, options: LoadOptions) -> list[Document]:
    """An image file (PNG, JPEG, TIFF, ...) read by OCR: one document, a part per page (frame)."""
    raw = read_bytes(path, options)
    if not options.ocr:
        raise NoTextError(f"{path}: an image has no text without OCR, and OCR is not enabled")
    require()
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(raw))
        pages = getattr(image, "n_frames", 1)
        check_page_count(pages, options, str(path))
        parts: list[DocumentPart] = []
        for number, frame in enumerate(_frames(image), start=1):
            page = read_image(frame, options, f"{path} page {number}")
            if readable(page):
                parts.append(DocumentPart(page.text, {"page_number": number, **page.metadata()}))
    except UnidentifiedImageError as exc:
        raise CorruptDocumentError(f"{path}: not a readable image (an unknown or damaged image format)") from exc
    except (OSError, Image.DecompressionBombError) as exc:
        raise CorruptDocumentError(f"{path}: not a readable image ({exc})") from exc
    if not parts:
        raise NoTextError(f"{path}: OCR found no text in the image")
    document = Document.from_parts(parts)
    metadata = file_metadata(path, "image", document.content)
    metadata["mime_type"] = mimetypes.guess_type(path.name)[0] or metadata["mime_type"]
    confidences = [float(p.metadata["ocr_confidence"]) for p in parts]
    metadata.update(page_count=pages, ocr=True, ocr_confidence=round(sum(confidences) / len(confidences), 3))
    document.metadata = metadata
    return [document]


__all__ = ["DEFAULT_MAX_PAGES", "DEFAULT_PAGE_SECONDS", "DPI", "MIN_CONFIDENCE", "OCRPage", "check_page_count",
           "load_image", "missing", "read_image", "readable", "require"]
