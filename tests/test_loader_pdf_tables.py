"""Ruled tables in PDFs: rows under their header row (bunko.loaders.pdf_tables), and no tables from drawings."""

from __future__ import annotations

import re
from typing import Any

import pytest

from bunko.loaders import LoadOptions, load_path, pdf_tables
from bunko.loaders.pdf_tables import is_table, split_lines
from tests.conftest import FIXTURES, SHARED_DOCUMENTS

shared_data = pytest.mark.shared_data

PRICE_TABLE = "\n".join([
    "## 表1 備蓄用品の単価と在庫",
    "| 品番 | 品名 | 単価（円） | 在庫 |",
    "| --- | --- | --- | --- |",
    "| A-101 | 保存水 2L | 180 | 240 |",
    "| A-102 | 乾パン | 350 | 85 |",
    "| B-201 | 携帯ラジオ | 2980 | 12 |",
    "| B-202 | 懐中電灯 | 1480 | 30 |",
    "| C-301 | 救急セット | 2200 | 8 |",
])


def _tables(path: Any) -> dict[int, list[str]]:
    [document] = load_path(path, LoadOptions(ocr=False))
    found: dict[int, list[str]] = {}
    for part in document.parts or []:
        if "table" in part.metadata:
            found.setdefault(part.metadata["page_number"], []).append(part.text)
    return found


def test_a_ruled_table_is_its_rows_under_the_header_between_the_text_around_it() -> None:
    """The line above the table (its caption) heads each of its parts; its cells are not in the page's text."""
    [document] = load_path(FIXTURES / "table_ja.pdf")
    parts = document.parts or []
    assert [(p.metadata["page_number"], p.whole) for p in parts] == [(1, False), (1, True), (1, False), (2, False)]
    before, table, after, grid = parts
    assert table.text == PRICE_TABLE
    assert (table.metadata["table"], table.metadata["row_start"], table.metadata["row_end"]) == (1, 2, 6)
    assert before.text == ("防災用品の価格表\n備蓄用品の単価と在庫を次の表に示す。価格は税込である。\n"
                           "表1 備蓄用品の単価と在庫")
    assert after.text == "在庫が十を下回った品は月末に発注する。"
    assert "方眼は図を描くための下書きであり、表ではない。" in grid.text  # a ruled grid with empty cells: no table
    assert document.metadata["table_count"] == 1


def test_a_question_about_a_pdf_table_cell_finds_the_row_with_its_header(engine: Any) -> None:
    acme = engine.tenant("acme")
    assert acme.ingest([FIXTURES / "table_ja.pdf", FIXTURES / "bousai_ja.pdf"], "stock").errors == []
    [top, *_] = acme.search("携帯ラジオの単価", collection="stock", top_k=3).results  # chunks are NFKC: (円)
    assert "| 品番 | 品名 | 単価(円) | 在庫 |" in top.content and "| B-201 | 携帯ラジオ | 2980 | 12 |" in top.content
    assert (top.metadata["page_number"], top.metadata["table"]) == (1, 1)
    answer = acme.ask("携帯ラジオの単価はいくらですか？", collection="stock").answer  # extractive: no LLM
    assert re.search(r"品番: B-201; 品名: 携帯ラジオ; 単価\(円\): 2980; 在庫: 12 \[\d\]", answer), answer


@pytest.mark.parametrize(("rows", "table"), [
    ([["品番", "品名"], ["A-1", "水"]], True),
    ([["品番", "品名"]], False),  # one row
    ([["品番"], ["A-1"]], False),  # one column
    ([["0", "1", "2"], ["3", "4", "5"]], False),  # numbers and no word: a plot's tick labels
    ([["", "x"], ["", ""]], False),  # mostly empty: a diagram
    ([["Day", None, "Closes"], ["Monday", "9:00", None]], True),  # None: covered by a merged cell
    ([["", "", ""], ["", "", ""], ["", "", ""], ["Day", "Opens", "Closes"]], False),  # no header among the first
])
def test_which_grids_are_tables(rows: list[list[str | None]], table: bool) -> None:
    assert is_table(rows) is table


def test_rows_drawn_in_one_ruled_cell_are_split_by_lines() -> None:
    assert split_lines([["スコア", "単語"], ["1.0\n0.9\n0.8", "a\nb\nc"], ["x\ny", "long value\nwrapped"]]) == [
        (1, ["スコア", "単語"]), (2, ["1.0", "a"]), (2, ["0.9", "b"]), (2, ["0.8", "c"]),
        (3, ["x y", "long value wrapped"])]
    assert split_lines([["保存\n期間", "五年"]]) == [(1, ["保存期間", "五年"])]  # a Japanese line break goes


@shared_data
def test_tables_of_the_shared_corpus_and_no_tables_from_its_drawings() -> None:
    """Which pages get tables (see docs/ARCHITECTURE.md): the ruled tables of a Korean report and of slides;
    none from the diagrams and plots of lecture notes and a paper."""
    korean = _tables(SHARED_DOCUMENTS / "normal_4pages.pdf")
    assert list(korean) == [2]
    assert korean[2][0].startswith("## [표 1] 감염병예방법 제2조제2호 개정전·후 비교\n| 구분 | 개정전 | 개정후 |\n"
                                   "| --- | --- | --- |\n| 분류 | 1군 감염병 | 1급 감염병 |")
    slides = _tables(SHARED_DOCUMENTS / "nlp2004slides.pdf")
    assert list(slides) == [17, 19, 22, 26]
    assert ("| スコア | 単語 | 種類 | 頻度 |\n| --- | --- | --- | --- |\n| 1.000 | sykesville | LOCATION | 3 |"
            in slides[17][0])
    for name in ("GeoTopo-komprimiert.pdf", "tracemonkey.pdf", "pdkids.pdf", "multicolumn.pdf", "kampo.pdf"):
        assert _tables(SHARED_DOCUMENTS / name) == {}, name


def test_without_pdfplumber_the_table_stays_in_the_page_text(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pdf_tables, "available", lambda: False)
    [document] = load_path(FIXTURES / "table_ja.pdf")
    assert [p.metadata for p in document.parts or []] == [{"page_number": 1}, {"page_number": 2}]
    assert "B-201 携帯ラジオ 2980 12" in document.content and "table_count" not in document.metadata


def test_graph_paper_is_no_table() -> None:
    """Rules crossing at more points than MAX_CROSSINGS (100 by 100 here) are a drawing: no cells are sought."""
    horizontal = [(0.0, 400.0, 10.0 + 4 * i) for i in range(100)]
    vertical = [(10.0, 406.0, 4.0 * i) for i in range(100)]
    asked: list[bool] = []
    assert pdf_tables.find_tables(horizontal, vertical, lambda: asked.append(True) or []) == []
    assert asked == []  # the page's characters were not even read
