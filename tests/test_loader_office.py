"""Tests for bunko.loaders.office: Word and PowerPoint files (R5), and how load_path picks them."""

from __future__ import annotations

import datetime as dt
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from bunko.errors import (
    CorruptDocumentError,
    EncryptedDocumentError,
    LoaderError,
    UnsupportedFormatError,
)
from bunko.loaders import LoadOptions, detect_kind, load_path, sniff
from bunko.loaders.office import load_docx, load_pptx
from tests.conftest import FIXTURES, SHARED_DOCUMENTS, manifest_params

docx = pytest.importorskip("docx")
pptx = pytest.importorskip("pptx")

shared_data = pytest.mark.shared_data


def _flat(text: str) -> str:
    return "".join(text.split())


def _sections(document: Any) -> list[dict[str, Any]]:
    """The metadata of each heading section once (a table, and the text after it, are parts of their own)."""
    out: list[dict[str, Any]] = []
    for part in document.parts or []:
        meta = {k: v for k, v in part.metadata.items() if k not in ("table", "row_start", "row_end")}
        if "section" in meta and (not out or out[-1] != meta):
            out.append(meta)
    return out


# -- Word and PowerPoint: the sample files (tests/data, and the shared corpus when present) ------------


@pytest.mark.parametrize("entry", manifest_params("docx"))
def test_manifest_docx_files(entry: dict[str, Any]) -> None:
    """Headings (style: text) start with the manifest's list, table count matches, must_contain present."""
    [document] = load_path(entry["path"])
    headings = [f"{m['heading_style']}: {m['section']}" for m in _sections(document)]
    assert headings[: len(entry["headings"])] == entry["headings"]
    assert document.metadata["table_count"] == entry["tables"]
    flat = _flat(document.content)
    for expected in entry.get("must_contain", []):
        assert _flat(expected) in flat
    assert document.content == "\n\n".join(p.text for p in document.parts or [])
    assert document.metadata["kind"] == "docx"
    assert document.metadata["mime_type"].endswith("wordprocessingml.document")
    assert document.metadata["author"]
    assert document.metadata["created_at"].endswith("Z")
    assert document.metadata["title"]
    for key in ("title", "author", "created_at"):  # the repository's manifest states them
        if key in entry:
            assert document.metadata[key] == entry[key]
    for meta in _sections(document):
        assert meta["hierarchy"][-1] == meta["section"]


@pytest.mark.parametrize("entry", manifest_params("pptx"))
def test_manifest_pptx_files(entry: dict[str, Any]) -> None:
    """A part per slide with text (and its tables after it), core properties as metadata, must_contain (tables,
    notes) present."""
    [document] = load_path(entry["path"])
    parts = document.parts or []
    assert sorted({p.metadata["slide_number"] for p in parts}) == list(range(1, entry["pages"] + 1))
    assert document.metadata["page_count"] == entry["pages"]
    assert document.metadata["kind"] == "pptx" and document.metadata["language"] == entry["language"]
    for key in ("title", "author", "created_at"):
        assert document.metadata[key] == entry[key]
    flat = _flat(document.content)
    for expected in entry["must_contain"]:
        assert _flat(expected) in flat


def test_docx_heading_hierarchy() -> None:
    """Title is level 0, Heading N level N; each section knows its path from the top."""
    [document] = load_path(FIXTURES / "kitei_ja.docx")
    by_section = {m["section"]: m for m in _sections(document)}
    assert by_section["第1項 用語"]["hierarchy"] == ["文書管理規程", "第1章 総則", "第1節 目的", "第1項 用語"]
    assert by_section["第2章 保存期間"]["hierarchy"] == ["文書管理規程", "第2章 保存期間"]
    assert by_section["文書管理規程"]["heading_level"] == 0
    assert by_section["第1項 用語"]["heading_level"] == 3
    assert document.metadata["language"] == "ja"
    part = next(p for p in document.parts or [] if p.metadata.get("section") == "第1節 目的")
    assert part.text == "第1節 目的\n\n文書を適切に管理し、必要なときにすぐ探せるようにすることを目的とする。"
    assert "- 電子文書は、改ざんを防ぐ措置を講じて保存する。\n- この規程は" in document.content


@shared_data
def test_docx_heading_hierarchy_in_the_shared_corpus() -> None:
    [document] = load_path(SHARED_DOCUMENTS / "unit_test_headers.docx")
    by_section = {m["section"]: m for m in _sections(document)}
    assert by_section["Section 1.2.3"]["hierarchy"] == ["Test Document", "Section 1", "Section 1.2", "Section 1.2.3"]
    assert by_section["Section 2"]["hierarchy"] == ["Test Document", "Section 2"]
    assert by_section["Section 2.1.1"]["hierarchy"] == ["Test Document", "Section 2", "Section 2.1.1"]
    assert by_section["Test Document"]["heading_level"] == 0
    assert document.metadata["title"] == "Test Document"
    assert document.metadata["author"] == "Peter Staar"
    assert document.metadata["created_at"] == "2024-09-26T08:01:00Z"
    part = next(p for p in document.parts or [] if p.metadata.get("section") == "Section 1.1")
    assert part.text == "Section 1.1\n\nParagraph 1.1.1\n\nParagraph 1.1.2"


def test_docx_tables_are_rows_under_their_header_in_order() -> None:
    """Each table is a part of its own (or several): its rows under the header row, with the section's title
    as caption and the rows it holds; a cell merged across columns shows once, one merged down the rows in each."""
    [document] = load_path(FIXTURES / "tables.docx")
    parts = document.parts or []
    tables = [p for p in parts if "table" in p.metadata]
    assert [p.whole for p in tables] == [True, True]
    assert tables[0].text == ("## Opening hours\n| Day | Opens | Closes |\n| --- | --- | --- |\n"
                              "| Monday | 9:00 | 20:00 |\n| Sunday | closed |  |")
    assert tables[1].text.endswith("| Room | Floor | Seats |\n| --- | --- | --- |\n"
                                   "| Shared rooms | First floor, forty seats |  |\n| Shared rooms | 1 | 6 |")
    assert [(p.metadata["table"], p.metadata["row_start"], p.metadata["row_end"], p.metadata["section"])
            for p in tables] == [(1, 2, 3, "Opening hours"), (2, 2, 3, "Rooms")]
    texts = [p.text for p in parts]
    assert texts.index("Opening hours\n\nA uniform table") + 1 == texts.index(tables[0].text)
    assert texts[texts.index(tables[1].text) + 1] == "- Borrow up to ten books\n- Return them within three weeks"
    assert document.metadata["table_count"] == 2


@shared_data
def test_docx_tables_are_rows_under_their_header_in_the_shared_corpus() -> None:
    [document] = load_path(SHARED_DOCUMENTS / "word_tables.docx")
    text = document.content
    assert "| Header 0.0 | Header 0.1 | Header 0.2 |\n| --- | --- | --- |\n| Cell 1.0 | Cell 1.1 | Cell 1.2 |" in text
    assert "| Cell 1.0 | Merged Cell 1.1 1.2 |  |\n" in text  # horizontal span: once
    # a vertical span is in each row it covers (two tables have this one, over two rows each)
    assert "| Cell 1.0 | Merged Cell 1.1 2.1 | Cell 1.2 |\n| Cell 2.0 | Merged Cell 1.1 2.1 | Cell 2.2 |" in text
    assert text.count("Merged Cell 1.1 2.1") == 4
    assert text.index("A uniform table") < text.index("Header 0.0") < text.index("A non-uniform table")
    assert document.metadata["table_count"] == 7


def test_a_question_about_a_word_table_cell_finds_the_row_with_its_header(engine: Any) -> None:
    acme = engine.tenant("acme")
    assert acme.ingest([FIXTURES / "kitei_ja.docx", FIXTURES / "tables.docx"], "rules").errors == []
    [top, *_] = acme.search("議事録の保存期間", collection="rules", top_k=3).results
    assert "| 種類 | 保存期間 | 備考 |" in top.content and "| 議事録 | 5年 | 写し可 |" in top.content
    assert (top.metadata["section"], top.metadata["table"]) == ("第2章 保存期間", 1)
    answer = acme.ask("議事録の保存期間は何年ですか？", collection="rules").answer  # extractive: no LLM configured
    assert "種類: 議事録; 保存期間: 5年; 備考: 写し可 [1]" in answer, answer


def test_docx_title_falls_back_to_title_style_and_lists() -> None:
    """tables.docx has an empty core title: the Title paragraph is the title; bullets stay together."""
    [document] = load_path(FIXTURES / "tables.docx")
    assert document.metadata["title"] == "Library Tables"
    assert (document.parts or [])[0].metadata == {"hierarchy": []}  # the note before the title
    assert "- Borrow up to ten books\n- Return them within three weeks" in document.content


@shared_data
def test_docx_title_falls_back_to_title_style_and_lists_in_the_shared_corpus() -> None:
    [document] = load_path(SHARED_DOCUMENTS / "word_sample.docx")
    assert document.metadata["title"] == "Swimming in the lake"
    assert (document.parts or [])[0].metadata == {"hierarchy": []}  # the subtitle before the title
    assert "- You can relax and look around\n- Paddle about\n" in document.content
    assert "Leaves | Ash, Elm, Maple | 50" in document.content


# -- Word: synthetic documents ------------------------------------------------------------


def _japanese_docx(path: Path) -> Path:
    doc = docx.Document()
    doc.core_properties.title = "社内規程集"
    doc.core_properties.author = "総務部"
    doc.core_properties.created = dt.datetime(2024, 4, 1, 9, 30, tzinfo=dt.UTC)
    doc.core_properties.keywords = "規程, 総務"
    doc.add_paragraph("前書きの段落です。")
    doc.add_heading("第1章 総則", level=1)
    doc.add_paragraph("この規程は、文書の管理について定める。")
    doc.add_heading("第1節 目的", level=2)
    doc.add_paragraph("目的は次のとおりとする。", style="List Bullet")
    doc.add_paragraph("二つ目の項目", style="List Bullet")
    table = doc.add_table(rows=3, cols=3)
    for r, row in enumerate([["項目", "内容", "備考"], ["期限", "30日", ""], ["担当", "総務部", "要確認"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    merged = table.cell(1, 1).merge(table.cell(1, 2))
    merged.text = "30日以内"
    doc.add_heading("第2章 雑則", level=1)
    paragraph = doc.add_paragraph("改行の")
    paragraph.add_run().add_break()
    paragraph.add_run("あとの行\tタブ")
    doc.save(path)
    return path


def test_japanese_docx(tmp_path: Path) -> None:
    """A Japanese Word file: sections, hierarchy, table with a merged cell, core properties."""
    [document] = load_docx(_japanese_docx(tmp_path / "規程.docx"), LoadOptions())
    parts = document.parts or []
    assert [p.metadata.get("hierarchy") for p in parts] == [
        [],
        ["第1章 総則"],
        ["第1章 総則", "第1節 目的"],
        ["第1章 総則", "第1節 目的"],
        ["第2章 雑則"],
    ]
    assert parts[0].text == "前書きの段落です。"
    assert parts[2].text == "第1節 目的\n\n- 目的は次のとおりとする。\n- 二つ目の項目"
    assert parts[3].text == ("## 第1節 目的\n| 項目 | 内容 | 備考 |\n| --- | --- | --- |\n| 期限 | 30日以内 |  |\n"
                             "| 担当 | 総務部 | 要確認 |")
    assert parts[3].whole and (parts[3].metadata["table"], parts[3].metadata["row_start"]) == (1, 2)
    assert parts[4].text == "第2章 雑則\n\n改行の\nあとの行\tタブ"
    meta = document.metadata
    assert meta["title"] == "社内規程集"
    assert meta["author"] == "総務部"
    assert meta["created_at"] == "2024-04-01T09:30:00Z"
    assert meta["tags"] == ["規程", "総務"]
    assert meta["language"] == "ja"
    assert meta["table_count"] == 1
    assert meta["filename"] == "規程.docx"


def test_docx_soft_hyphens_are_dropped(tmp_path: Path) -> None:
    """A soft hyphen is a line-break hint: typed into the text (U+00AD) or as ``w:softHyphen``, it is not text."""
    from docx.oxml import OxmlElement

    doc = docx.Document()
    paragraph = doc.add_paragraph("Silben\u00adtrennung mit wei\u00adchem Strich. ")
    run = paragraph.add_run("Donau")
    run._r.append(OxmlElement("w:softHyphen"))
    text = OxmlElement("w:t")
    text.text = "dampfschiff"
    run._r.append(text)
    path = tmp_path / "trennung.docx"
    doc.save(path)
    [document] = load_docx(path, LoadOptions())
    assert document.content == "Silbentrennung mit weichem Strich. Donaudampfschiff"


def test_broken_docx_raises_corrupt(tmp_path: Path) -> None:
    """Truncated files, ZIPs without a document and malformed XML are CorruptDocumentError."""
    good = _japanese_docx(tmp_path / "good.docx").read_bytes()
    truncated = tmp_path / "truncated.docx"
    truncated.write_bytes(good[: len(good) // 2])
    with pytest.raises(CorruptDocumentError):
        load_docx(truncated, LoadOptions())
    with pytest.raises(CorruptDocumentError):
        load_path(truncated)

    bad_xml = tmp_path / "bad_xml.docx"
    with zipfile.ZipFile(tmp_path / "good.docx") as src, zipfile.ZipFile(bad_xml, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            dst.writestr(item, b"<w:document><unclosed>" if item.filename == "word/document.xml" else data)
    assert sniff(bad_xml) == "docx"
    with pytest.raises(CorruptDocumentError, match="not a readable Word file"):
        load_path(bad_xml)

    not_zip = tmp_path / "plain.docx"
    not_zip.write_text("これは Word ファイルではありません", encoding="utf-8")
    with pytest.raises(CorruptDocumentError):
        load_docx(not_zip, LoadOptions())


def test_encrypted_and_legacy_office_files(tmp_path: Path) -> None:
    """OLE files: password-protected OOXML is EncryptedDocumentError, a .doc is unsupported."""
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + b"\x00" * 504
    encrypted = tmp_path / "secret.docx"
    encrypted.write_bytes(ole + "EncryptionInfo".encode("utf-16-le") + b"\x00" * 64)
    with pytest.raises(EncryptedDocumentError, match="password"):
        load_docx(encrypted, LoadOptions())
    legacy = tmp_path / "old.pptx"
    legacy.write_bytes(ole + b"\x00" * 64)
    with pytest.raises(UnsupportedFormatError, match="97-2003"):
        load_pptx(legacy, LoadOptions())


def test_missing_libraries_name_the_extra(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without python-docx / python-pptx the error says which extra to install."""
    path = _japanese_docx(tmp_path / "a.docx")
    monkeypatch.setitem(sys.modules, "docx", None)
    with pytest.raises(LoaderError) as info:
        load_docx(path, LoadOptions())
    assert str(info.value) == 'reading Word files needs: pip install "bunko[office]"'
    deck = _deck(tmp_path / "a.pptx")
    monkeypatch.setitem(sys.modules, "pptx", None)
    with pytest.raises(LoaderError) as info:
        load_pptx(deck, LoadOptions())
    assert str(info.value) == 'reading PowerPoint files needs: pip install "bunko[office]"'


def test_size_limit(tmp_path: Path) -> None:
    """max_bytes applies to Office files too."""
    path = _japanese_docx(tmp_path / "a.docx")
    with pytest.raises(LoaderError, match="limit"):
        load_docx(path, LoadOptions(max_bytes=100))


# -- PowerPoint ---------------------------------------------------------------------------------


def _deck(path: Path) -> Path:
    from pptx.util import Inches

    prs = pptx.Presentation()
    prs.core_properties.author = "企画部"
    prs.core_properties.created = dt.datetime(2025, 1, 15, 10, 0)

    slide = prs.slides.add_slide(prs.slide_layouts[0])  # title slide
    slide.shapes.title.text = "文庫プロジェクトのご紹介"
    slide.placeholders[1].text = "日本語に強い検索エンジン"
    slide.notes_slide.notes_text_frame.text = "最初に自己紹介をする。"

    slide = prs.slides.add_slide(prs.slide_layouts[1])  # title and content
    slide.shapes.title.text = "Architecture"
    body = slide.placeholders[1].text_frame
    body.text = "Loaders turn files into documents"
    body.add_paragraph().text = "Splitters cut them into chunks"
    group = slide.shapes.add_group_shape()
    group.shapes.add_textbox(Inches(1), Inches(5), Inches(2), Inches(1)).text_frame.text = "Grouped box one"
    inner = group.shapes.add_group_shape()
    inner.shapes.add_textbox(Inches(4), Inches(5), Inches(2), Inches(1)).text_frame.text = "Nested group box"
    slide.notes_slide.notes_text_frame.text = "Mention the registry.\nThen the splitters."

    slide = prs.slides.add_slide(prs.slide_layouts[5])  # title only
    slide.shapes.title.text = "料金表"
    table = slide.shapes.add_table(5, 3, Inches(1), Inches(2), Inches(6), Inches(2)).table
    for r, row in enumerate([["プラン", "月額", "備考"], ["無料", "0円", "お試し"], ["企業", "要相談", ""],
                             ["学校", "500円", "教育機関向け"], ["団体", "", "十名から"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    table.cell(2, 1).merge(table.cell(2, 2))  # across two columns
    table.cell(3, 1).merge(table.cell(4, 1))  # down two rows

    prs.slides.add_slide(prs.slide_layouts[6])  # blank, no text at all

    slide = prs.slides.add_slide(prs.slide_layouts[6])  # blank with a text box and no title
    slide.shapes.add_textbox(Inches(1), Inches(1), Inches(4), Inches(1)).text_frame.text = "タイトルのないスライド"
    prs.save(path)
    return path


def test_pptx_slides_become_parts(tmp_path: Path) -> None:
    """One part per slide with slide/page number, the title as section, groups and notes; a table is its rows
    under its header row as in Word, the slide title as caption (a slide with a title and a table only: the
    table's parts alone)."""
    path = _deck(tmp_path / "deck.pptx")
    [document] = load_pptx(path, LoadOptions())
    parts = document.parts or []
    assert [p.metadata["slide_number"] for p in parts] == [1, 2, 3, 5]  # slide 4 has no text
    assert all(p.metadata["page_number"] == p.metadata["slide_number"] for p in parts)
    assert [p.metadata.get("section") for p in parts] == ["文庫プロジェクトのご紹介", "Architecture", "料金表", None]
    assert [(p.whole, p.metadata.get("table")) for p in parts] == [(False, None), (False, None), (True, 1),
                                                                    (False, None)]

    assert parts[0].text == "文庫プロジェクトのご紹介\n日本語に強い検索エンジン\nNotes:\n最初に自己紹介をする。"
    assert parts[1].text == (
        "Architecture\nLoaders turn files into documents\nSplitters cut them into chunks\n"
        "Grouped box one\nNested group box\nNotes:\nMention the registry.\nThen the splitters."
    )
    assert parts[2].text == ("## 料金表\n| プラン | 月額 | 備考 |\n| --- | --- | --- |\n| 無料 | 0円 | お試し |\n"
                             "| 企業 | 要相談 |  |\n| 学校 | 500円 | 教育機関向け |\n| 団体 | 500円 | 十名から |")
    assert (parts[2].metadata["row_start"], parts[2].metadata["row_end"]) == (2, 5)
    assert parts[3].text == "タイトルのないスライド"

    meta = document.metadata
    assert meta["page_count"] == 5
    assert meta["table_count"] == 1
    assert meta["title"] == "文庫プロジェクトのご紹介"  # no core title: the first slide title
    assert meta["author"] == "企画部"
    assert meta["created_at"] == "2025-01-15T10:00:00Z"
    assert meta["language"] == "ja"
    assert document.content == "\n\n".join(p.text for p in parts)


def test_pptx_through_load_path(tmp_path: Path) -> None:
    """load_path sniffs the ZIP members: a .pptx is pptx, and so is one renamed to .bin."""
    path = _deck(tmp_path / "deck.pptx")
    [document] = load_path(path)
    assert document.metadata["kind"] == "pptx"
    assert document.metadata["mime_type"].endswith("presentationml.presentation")
    renamed = tmp_path / "deck.bin"
    renamed.write_bytes(path.read_bytes())
    [again] = load_path(renamed)
    assert again.metadata["kind"] == "pptx"
    assert again.content == document.content


def test_broken_pptx_raises_corrupt(tmp_path: Path) -> None:
    """A truncated presentation is CorruptDocumentError, directly and through load_path."""
    raw = _deck(tmp_path / "deck.pptx").read_bytes()
    broken = tmp_path / "broken.pptx"
    broken.write_bytes(raw[: len(raw) // 3])
    with pytest.raises(CorruptDocumentError):
        load_pptx(broken, LoadOptions())
    with pytest.raises(CorruptDocumentError):
        load_path(broken)


# -- how load_path chooses the loader (detect_kind) ------------------------------------------


def test_detect_kind_content_beats_suffix(tmp_path: Path) -> None:
    """Office content is recognised whatever the name says, unless the name claims another binary format."""
    raw = _japanese_docx(tmp_path / "a.docx").read_bytes()
    for name in ("report.bin", "report", "report.txt", "report.md"):
        path = tmp_path / name
        path.write_bytes(raw)
        assert detect_kind(path) == "docx"
        [document] = load_path(path)
        assert document.metadata["kind"] == "docx"
        assert "第1章 総則" in document.content

    pptx_named_docx = tmp_path / "slides.docx"
    pptx_named_docx.write_bytes(_deck(tmp_path / "d.pptx").read_bytes())
    with pytest.raises(CorruptDocumentError, match="the name says docx but the content is pptx"):
        load_path(pptx_named_docx)

    text_named_docx = tmp_path / "memo.docx"
    text_named_docx.write_text("ただのテキスト", encoding="utf-8")
    with pytest.raises(CorruptDocumentError, match="not a valid DOCX"):
        load_path(text_named_docx)

    other_zip = tmp_path / "archive"
    with zipfile.ZipFile(other_zip, "w") as archive:
        archive.writestr("readme.txt", "hello")
    with pytest.raises(UnsupportedFormatError, match="ZIP archive"):
        load_path(other_zip)

    unknown = tmp_path / "data.bin"
    unknown.write_text("テキストですが拡張子が未知です", encoding="utf-8")
    with pytest.raises(UnsupportedFormatError):
        load_path(unknown)
