"""OCR (bunko.loaders.ocr): scanned PDF pages and images read by Tesseract, per-page language and direction,
metadata, limits and typed errors; the character error rate on scans made by tests/scans.py and on linn.pdf."""

from __future__ import annotations

import io
import sys
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from bunko import Bunko
from bunko.errors import (
    CorruptDocumentError,
    NoTextError,
    OCRPageLimitError,
    OCRTimeoutError,
    OCRUnavailableError,
)
from bunko.loaders import LoadOptions, load_path, ocr
from tests import scans
from tests.conftest import FIXTURES, SHARED_DOCUMENTS

pytest.importorskip("pypdfium2")
pytesseract = pytest.importorskip("pytesseract")
PIL = pytest.importorskip("PIL")

MISSING = ocr.missing()
needs_tesseract = pytest.mark.skipif(MISSING is not None, reason=f"no Tesseract: {MISSING}")
needs_font = pytest.mark.skipif(scans.font_path() is None, reason="no Japanese font (fonts-noto-cjk) to draw scans")
VERTICAL = "".join(scans.HARU_TO_SHURA)


def _nfkc(text: str) -> str:
    return unicodedata.normalize("NFKC", text)


def _cer(found: str, truth: str) -> float:
    return scans.character_error_rate(_nfkc(found), _nfkc(truth))


@pytest.fixture(scope="module")
def pages() -> tuple[Any, Any]:
    """A horizontal and a vertical Japanese page at 300 dpi."""
    if scans.font_path() is None:
        pytest.skip("no Japanese font (fonts-noto-cjk) to draw scans")
    return scans.horizontal_page(), scans.vertical_page()


@pytest.fixture(scope="module")
def scanned_pdf(tmp_path_factory: pytest.TempPathFactory, pages: tuple[Any, Any]) -> Path:
    path = tmp_path_factory.mktemp("scans") / "scan_ja.pdf"
    path.write_bytes(scans.image_pdf(*pages))
    return path


@needs_tesseract
@needs_font
def test_a_scanned_pdf_is_read_page_by_page_horizontal_and_vertical(scanned_pdf: Path) -> None:
    [document] = load_path(scanned_pdf)
    first, second = document.parts or []
    assert (first.metadata["page_number"], first.metadata["ocr"], first.metadata["ocr_lang"]) == (1, True, "jpn")
    assert (second.metadata["page_number"], second.metadata["ocr_lang"]) == (2, "jpn_vert")
    assert min(first.metadata["ocr_confidence"], second.metadata["ocr_confidence"]) > 0.7
    # measured 0.04 (horizontal) and 0.02 (vertical) on these pages
    assert _cer(first.text, scans.RASHOMON) < 0.08, first.text
    assert _cer(second.text, VERTICAL) < 0.06, second.text
    assert document.metadata["ocr_pages"] == [1, 2] and "pages_without_text" not in document.metadata


@needs_tesseract
@needs_font
def test_the_ocr_lang_option_sets_the_model(scanned_pdf: Path) -> None:
    [document] = load_path(scanned_pdf, LoadOptions(ocr_lang="jpn_vert"))
    # the horizontal page read as vertical is noise, below MIN_CONFIDENCE: left out as without text
    [vertical] = document.parts or []
    assert (vertical.metadata["page_number"], vertical.metadata["ocr_lang"]) == (2, "jpn_vert")
    assert _cer(vertical.text, VERTICAL) < 0.06
    assert document.metadata["pages_without_text"] == [1] and document.metadata["ocr_pages"] == [2]


@needs_tesseract
@needs_font
def test_a_pdf_with_text_pages_and_a_scanned_page(tmp_path: Path, pages: tuple[Any, Any]) -> None:
    import pypdfium2 as pdfium

    mixed = pdfium.PdfDocument.new()
    mixed.import_pages(pdfium.PdfDocument(FIXTURES / "report.pdf"), [0])
    mixed.import_pages(pdfium.PdfDocument(scans.image_pdf(pages[1])))
    out = io.BytesIO()
    mixed.save(out)
    path = tmp_path / "mixed.pdf"
    path.write_bytes(out.getvalue())
    [document] = load_path(path)
    text_page, scanned = document.parts or []
    assert text_page.metadata == {"page_number": 1} and "Pocket Libraries" in text_page.text
    assert scanned.metadata["ocr"] is True and scanned.metadata["page_number"] == 2
    assert document.metadata["ocr_pages"] == [2]


@needs_tesseract
@needs_font
def test_image_files_one_part_per_frame(tmp_path: Path, pages: tuple[Any, Any]) -> None:
    png = tmp_path / "tategaki.png"
    png.write_bytes(scans.image_bytes(pages[1]))
    [document] = load_path(png)
    assert (document.metadata["kind"], document.metadata["mime_type"], document.metadata["ocr"]) == (
        "image", "image/png", True)
    assert _cer(document.content, VERTICAL) < 0.06
    tiff = tmp_path / "two_pages.tiff"
    first, second = (page.copy() for page in pages)  # fresh images: a PNG save leaves its settings on one
    first.save(tiff, format="TIFF", save_all=True, append_images=[second], dpi=(scans.DPI, scans.DPI))
    [document] = load_path(tiff)
    assert [(p.metadata["page_number"], p.metadata["ocr_lang"]) for p in document.parts or []] == [
        (1, "jpn"), (2, "jpn_vert")]
    assert document.metadata["page_count"] == 2


@needs_tesseract
def test_a_blank_scan_is_still_no_text() -> None:
    with pytest.raises(NoTextError, match="OCR found no text on them either"):
        load_path(FIXTURES / "scanned.pdf")
    [document] = load_path(FIXTURES / "partly_scanned.pdf")  # pages 1 and 3 are blank images
    assert document.metadata["pages_without_text"] == [1, 3] and "ocr_pages" not in document.metadata


@needs_tesseract
@needs_font
def test_limits_are_typed_errors(scanned_pdf: Path) -> None:
    with pytest.raises(OCRPageLimitError, match="2 pages without a text layer to OCR, over the limit of 1"):
        load_path(scanned_pdf, LoadOptions(ocr_max_pages=1))
    with pytest.raises(OCRTimeoutError, match=r"page 1: OCR took longer than the limit of 0\.01 s"):
        load_path(scanned_pdf, LoadOptions(ocr_page_seconds=0.01))


@needs_tesseract
@needs_font
def test_ingest_and_search_find_a_sentence_on_a_scanned_page(engine: Bunko, scanned_pdf: Path) -> None:
    acme = engine.tenant("acme")
    assert acme.ingest([scanned_pdf], "scans").errors == []
    for query, page in (("一人の下人が、羅生門の下で雨やみを待っていた", 1), ("わたくしといふ現象は", 2)):
        [top, *_] = acme.search(query, collection="scans", top_k=3).results
        first = top.metadata["page_number"]  # a chunk may run from page 1 onto page 2
        assert first <= page <= top.metadata.get("page_end", first) and top.metadata["ocr"] is True
        assert query[-8:] in top.content
    filtered = acme.search("雨やみ", collection="scans", filter={"ocr": True}).results
    assert filtered and all(h.metadata["ocr"] for h in filtered)


def test_without_tesseract_the_error_names_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pytesseract.pytesseract, "tesseract_cmd", str(tmp_path / "no-tesseract"))
    with pytest.raises(OCRUnavailableError, match="apt-get install tesseract-ocr tesseract-ocr-jpn") as info:
        load_path(FIXTURES / "scanned.pdf")
    assert isinstance(info.value, NoTextError) and "no extractable text" in info.value.message
    image = tmp_path / "page.png"
    PIL.Image.new("L", (200, 100), 255).save(image)
    with pytest.raises(OCRUnavailableError, match="tesseract-ocr-jpn-vert"):
        load_path(image)
    broken = tmp_path / "broken.png"
    broken.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(40))
    monkeypatch.undo()  # Tesseract back: the image itself is at fault
    if MISSING is None:
        with pytest.raises(CorruptDocumentError, match=r"broken\.png: not a readable image \(an unknown or damaged"):
            load_path(broken)
    monkeypatch.setitem(sys.modules, "pytesseract", None)  # the ocr extra not installed
    with pytest.raises(OCRUnavailableError, match=r'pip install "bunko\[ocr\]"'):
        load_path(image)
    with pytest.raises(NoTextError, match="OCR is not enabled"):
        load_path(image, LoadOptions(ocr=False))
    with pytest.raises(NoTextError, match="OCR is not enabled"):
        load_path(FIXTURES / "scanned.pdf", LoadOptions(ocr=False))


# -- the shared corpus's scans -------------------------------------------------------------------------


@pytest.mark.shared_data
@needs_tesseract
def test_linn_pdf_character_error_rate() -> None:
    """linn.pdf (a scanned brochure, two columns) against its transcription linn.txt."""
    [document] = load_path(SHARED_DOCUMENTS / "linn.pdf")
    assert all(p.metadata["ocr"] and p.metadata["ocr_lang"] == "eng" for p in document.parts or [])
    truth = (SHARED_DOCUMENTS / "linn.txt").read_text(encoding="utf-8")
    assert _cer(document.content, truth) < 0.03  # measured 0.011


@pytest.mark.shared_data
@needs_tesseract
def test_scanned_pages_of_the_shared_corpus_are_searchable(engine: Bunko) -> None:
    acme = engine.tenant("acme")
    report = acme.ingest([SHARED_DOCUMENTS / "c02-22.pdf", SHARED_DOCUMENTS / "multipage.pdf"], "scans")
    assert report.errors == []
    # c02-22.pdf is also page 1 of multipage.pdf
    for query, name, page in (("the branches wouldn't scrape our heads", "c02-22.pdf", 1),
                              ("a king with a large jaw and a queen with a fair face", "multipage.pdf", 5)):
        hits = acme.search(query, collection="scans", top_k=3).results
        assert any(h.metadata["filename"] == name and h.metadata["page_number"] in (page, 6)
                   and h.metadata["ocr"] is True for h in hits), (query, hits)
    [multipage] = [d for d in acme.documents("scans") if d.metadata["filename"] == "multipage.pdf"]
    # page 4 has a text layer; page 3 is a chart, whose OCR is noise (left out: below MIN_CONFIDENCE)
    assert multipage.metadata["ocr_pages"] == [1, 2, 5, 6] and multipage.metadata["pages_without_text"] == [3]
