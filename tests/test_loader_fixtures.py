"""The test documents of tests/data: what make_fixtures.py writes is what is committed, and the set is complete."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

import pytest

from bunko.loaders import LoadOptions, load_path
from tests.conftest import FIXTURES, fixture_generator, read_manifest

pytest.importorskip("pdfminer")  # the generator reads Adobe-Japan1 CIDs from pdfminer's tables
pytest.importorskip("docx")
pytest.importorskip("pptx")

OFFICE = {"docx", "pptx"}  # their bytes depend on the python-docx / python-pptx version; their text does not


def _generator() -> ModuleType:
    return fixture_generator("make_fixtures")


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("fixtures")
    _generator().write(out)
    return out


def test_the_committed_files_are_what_the_script_writes(regenerated: Path) -> None:
    committed = read_manifest(FIXTURES)
    fresh = read_manifest(regenerated)
    strip = [{k: v for k, v in r.items() if k not in ("path", "bytes")} for r in committed]
    assert strip == [{k: v for k, v in r.items() if k not in ("path", "bytes")} for r in fresh]
    for record in committed:
        name = record["file"]
        if record["kind"] in OFFICE:
            assert load_path(FIXTURES / name)[0].content == load_path(regenerated / name)[0].content, name
        else:
            assert (FIXTURES / name).read_bytes() == (regenerated / name).read_bytes(), name
            assert record["bytes"] == (FIXTURES / name).stat().st_size


def test_every_file_is_in_the_manifest_and_the_set_stays_small() -> None:
    records = read_manifest(FIXTURES)
    listed = {r["file"] for r in records}
    present = {p.name for p in FIXTURES.iterdir() if p.is_file() and not p.name.startswith(".")}
    assert present - listed == {"README.md", "make_fixtures.py", "documents.jsonl"}
    assert listed <= present
    assert sum(r["bytes"] for r in records) < 512 * 1024


def test_every_kind_the_loaders_read_is_covered() -> None:
    records = read_manifest(FIXTURES)
    kinds = {r["kind"] for r in records}
    assert kinds >= {"pdf", "docx", "pptx", "xlsx", "csv", "tsv", "html", "markdown", "text", "json", "jsonl"}
    tags = {tag for r in records for tag in r["expected"]}
    assert tags >= {"vertical_text", "image_only", "mostly_image_only", "needs_user_password", "owner_password_only",
                    "recoverable", "unrecoverable", "legacy_encoding", "utf8_bom", "cr_line_endings"}
    encodings = {r.get("encoding") for r in records}
    assert encodings >= {"utf-8", "utf-8-sig", "shift_jis", "cp932", "euc_jp", "iso2022_jp"}


def test_parallel_texts_are_one_text() -> None:
    """The notice files hold the same text in different encodings (the bytes differ)."""
    group = [r for r in read_manifest(FIXTURES) if r.get("parallel") == "notice"]
    assert len(group) == 5
    texts = {load_path(r["path"], LoadOptions())[0].content for r in group}
    assert len(texts) == 1
    assert len({r["path"].read_bytes() for r in group}) == 5


def test_manifest_is_valid_json_lines() -> None:
    lines = (FIXTURES / "documents.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines and all(isinstance(json.loads(line), dict) for line in lines)
