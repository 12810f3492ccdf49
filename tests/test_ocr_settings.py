"""OCR limits as settings ([ocr], BUNKO_OCR_*) and ingest options (--ocr-max-pages, --ocr-page-seconds, --ocr-lang),
typed errors past them in bunko ingest, the engine and upload workers; scanned pages on their side or upside down."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bunko import Bunko
from bunko.cli import cli
from bunko.config import Settings
from bunko.errors import ConfigError, OCRPageLimitError
from bunko.loaders import LoadOptions, ocr
from bunko.server.worker import Worker, upload_item
from bunko.stores.service import Job
from tests import scans
from tests.conftest import FIXTURES

pytest.importorskip("pypdfium2")
pytest.importorskip("pytesseract")

MISSING = ocr.missing()
needs_tesseract = pytest.mark.skipif(MISSING is not None, reason=f"no Tesseract: {MISSING}")
needs_font = pytest.mark.skipif(scans.font_path() is None, reason="no Japanese font (fonts-noto-cjk) to draw scans")


@pytest.fixture(autouse=True)
def _no_ocr_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("BUNKO_OCR", "BUNKO_OCR_LANG", "BUNKO_OCR_PAGE_SECONDS", "BUNKO_OCR_MAX_PAGES", "BUNKO_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)  # no ./bunko.toml


@pytest.fixture(scope="module")
def two_scanned_pages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An image-only PDF of two pages (blank images: nothing to read, but two pages to OCR)."""
    path = tmp_path_factory.mktemp("ocr") / "two_pages.pdf"
    path.write_bytes((FIXTURES / "partly_scanned.pdf").read_bytes())  # pages 1 and 3 have no text layer
    return path


def test_ocr_settings_from_the_environment_and_the_config_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert Settings.resolve().ocr.load_options() == {"ocr": True, "ocr_lang": None, "ocr_page_seconds": 120.0,
                                                     "ocr_max_pages": 100}
    (tmp_path / "bunko.toml").write_text('[ocr]\nlang = "jpn+eng"\nmax_pages = 20\n', encoding="utf-8")
    monkeypatch.setenv("BUNKO_OCR_PAGE_SECONDS", "30")
    monkeypatch.setenv("BUNKO_OCR", "false")
    assert Settings.resolve().ocr.load_options() == {"ocr": False, "ocr_lang": "jpn+eng", "ocr_page_seconds": 30.0,
                                                     "ocr_max_pages": 20}
    assert Settings.resolve(ocr_max_pages=5).ocr.max_pages == 5  # an argument outranks the file
    for bad in ({"ocr_max_pages": 0}, {"ocr_page_seconds": -1}, {"ocr_lang": "jpn; rm -rf /"}):
        with pytest.raises(ConfigError):
            Settings.resolve(**bad)


@needs_tesseract
def test_the_engine_reads_files_with_its_ocr_settings(tmp_path: Path, embedder: Any, two_scanned_pages: Path) -> None:
    engine = Bunko(f"sqlite:///{tmp_path / 'ocr.db'}", embedder=embedder, ocr_max_pages=1)
    try:
        report = engine.tenant("acme").ingest([two_scanned_pages], "scans")
        [error] = report.errors
        assert error.code == "OCR_PAGE_LIMIT" and "over the limit of 1 pages" in error.message
        assert "--ocr-max-pages" in error.message  # says how to raise it
        # options given to ingest outrank the settings
        report = engine.tenant("acme").ingest([two_scanned_pages], "scans", options=LoadOptions(ocr_max_pages=2))
        assert [e.code for e in report.errors] == [] and report.documents[0].chunks >= 1
    finally:
        engine.close()


@needs_tesseract
def test_bunko_ingest_ocr_options_outrank_the_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      two_scanned_pages: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"

    def ingest(*args: str) -> tuple[int, dict[str, Any]]:
        result = CliRunner().invoke(cli, ["--db", db, "ingest", str(two_scanned_pages), "-c", "scans", *args,
                                          "--json"], catch_exceptions=False)
        return result.exit_code, json.loads(result.stdout)

    monkeypatch.setenv("BUNKO_OCR_MAX_PAGES", "1")
    code, data = ingest()
    assert code == 1 and [e["type"] for e in data["errors"]] == ["OCRPageLimitError"]
    code, data = ingest("--ocr-max-pages", "2")
    assert code == 0 and data["errors"] == [] and data["documents"] == 1
    code, data = ingest("--no-ocr")  # no OCR: the text page alone, as before OCR
    assert code == 0 and data["errors"] == []


@needs_tesseract
def test_upload_workers_read_with_the_ocr_settings(tmp_path: Path, embedder: Any, two_scanned_pages: Path) -> None:
    engine = Bunko(f"sqlite:///{tmp_path / 'jobs.db'}", embedder=embedder, ocr_max_pages=1, ocr_lang="jpn")
    try:
        options = Worker(engine, spool=tmp_path / "spool").load_options
    finally:
        engine.close()
    assert (options.ocr_max_pages, options.ocr_lang, options.ocr_page_seconds) == (1, "jpn", 120.0)
    job = Job(id="job-1", collection="scans", filename="two_pages.pdf")
    with pytest.raises(OCRPageLimitError):
        upload_item(job, two_scanned_pages, 10**8, LoadOptions(ocr_max_pages=1)).load()
    [document] = upload_item(job, two_scanned_pages, 10**8, LoadOptions(ocr_max_pages=2)).load()
    assert document.metadata["source"] == "two_pages.pdf"


@needs_tesseract
@needs_font
@pytest.mark.parametrize("degrees", [90, 180])
def test_a_scanned_page_on_its_side_or_upside_down_is_turned_before_it_is_read(degrees: int) -> None:
    """Tesseract's orientation detection (OSD) says how the page lies; it is turned upright and read as well as
    an upright page (a character error rate of 4.3% at 0, 90, 180 and 270 degrees on this page). A page read
    without OSD (a language given) stays as it lies and reads as noise."""
    page = scans.horizontal_page().rotate(degrees, expand=True, fillcolor=255)
    read = ocr.read_image(page, LoadOptions(), f"rotated {degrees}")
    truth = unicodedata.normalize("NFKC", scans.RASHOMON)
    assert scans.character_error_rate(unicodedata.normalize("NFKC", read.text), truth) < 0.08, read.text
    unturned = ocr.read_image(page, LoadOptions(ocr_lang="jpn"), f"rotated {degrees}")
    assert scans.character_error_rate(unicodedata.normalize("NFKC", unturned.text), truth) > 0.5
