"""Tests for bunko.loaders.sheets and bunko.loaders.tables: workbooks, CSV and TSV as rows with their headers."""

from __future__ import annotations

import datetime as dt
import io
import itertools
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from bunko import Bunko
from bunko.errors import (
    CorruptDocumentError,
    EncodingDetectionError,
    EncryptedDocumentError,
    LoaderError,
    NoTextError,
)
from bunko.loaders import LoadOptions, detect_kind, load_path, sheets
from bunko.loaders.tables import TABLE_CHARS, Table
from bunko.types import Document
from tests.conftest import FIXTURES, fixture_generator, manifest_params

pytest.importorskip("python_calamine")
pytest.importorskip("openpyxl")


def _generator() -> ModuleType:
    return fixture_generator("make_fixtures_sheets")


make = _generator()


def _tables(document: Document) -> list[Any]:
    return [p for p in document.parts or [] if p.whole]


def _header_line(part: Any) -> str:
    """The Markdown header row of a table part (after the ``## sheet`` caption when there is one)."""
    lines = part.text.splitlines()
    return lines[1] if lines[0].startswith("## ") else lines[0]


# -- the sample files ------------------------------------------------------------------------------------


@pytest.mark.parametrize("record", manifest_params("xlsx", "csv", "tsv"))
def test_sample_files(record: dict[str, Any] | None) -> None:
    if record is None:
        pytest.skip("no spreadsheets in the shared corpus")
    if "broken" in record["expected"]:
        with pytest.raises(CorruptDocumentError, match="not a valid XLSX file"):
            load_path(record["path"])
        return
    [document] = load_path(record["path"])
    assert detect_kind(record["path"]) == record["kind"] == document.metadata["kind"]
    for phrase in record["must_contain"]:
        assert phrase in document.content, phrase
    for key in ("title", "author", "created_at", "encoding", "delimiter"):
        if key in record:
            assert document.metadata[key] == record[key], key
    if "rows" in record:
        assert document.metadata["row_count"] == record["rows"]
    if "sheets" in record:
        assert document.metadata["sheets"] == record["sheets"]
        assert [p.metadata["sheet"] for p in document.parts or []] == sorted(
            (p.metadata["sheet"] for p in document.parts or []), key=record["sheets"].index)
    tables = _tables(document)
    assert tables
    for part in tables:  # every table part starts with the header of its table, and says which rows it holds
        assert part.metadata["row_start"] <= part.metadata["row_end"]
        header = record.get("header_of", {}).get(part.metadata.get("sheet"))
        if header and "\n| --- |" in part.text:  # a Markdown table (not a long row's name: value lines)
            assert _header_line(part) == header
        assert len(part.text) <= TABLE_CHARS


def test_workbook_sheets_title_block_formulas_and_the_long_row() -> None:
    [document] = load_path(FIXTURES / "kakaku_ja.xlsx")
    parts = document.parts or []
    title = parts[0]
    assert (title.text, title.whole) == ("2024年度 文具価格表\n株式会社文庫 総務部 改定日 2024-04-01", False)
    assert (title.metadata["sheet"], title.metadata["row_start"], title.metadata["row_end"]) == ("価格表", 1, 2)
    # rows 5-29 of 価格表 (the header is row 4), each exactly once, in order; the long row 24 on its own as
    # "name: value" lines
    price = [p for p in parts[1:] if p.metadata["sheet"] == "価格表"]
    assert [(p.metadata["row_start"], p.metadata["row_end"]) for p in price] == [(5, 11), (12, 18), (19, 23),
                                                                                  (24, 24), (25, 29)]
    long_row = price[3]
    assert long_row.whole and long_row.text.startswith("品番: B-120\n品名: 電卓\n")
    assert long_row.text.splitlines()[-1].startswith("備考: 在庫限りの特価品です。")
    assert all(p.whole for p in price)
    assert all(p.text.startswith("## 価格表\n| 品番 |") for p in price if p is not long_row)
    for p in price:  # the formula column shows the cached value: price × quantity
        rows = [line.split(" | ") for line in p.text.splitlines()[3:]] if p is not long_row else []
        for cells in rows:
            assert int(cells[4]) == int(cells[2]) * int(cells[3]), cells
    stock = [p for p in parts if p.metadata["sheet"] == "在庫"]
    assert len(stock) == 1 and stock[0].metadata["section"] == "在庫" and stock[0].metadata["hierarchy"] == ["在庫"]
    assert stock[0].text.splitlines()[3] == "| 本社 | B-101 | 42 | FALSE | 2024-03-29 17:30 |"
    assert document.metadata["row_count"] == 25 + 4 and document.metadata["sheet_count"] == 2


def test_both_readers_give_the_same_parts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``STREAM_SHEET_BYTES`` of sheet XML, openpyxl streams the sheets; what comes out is the same."""
    [fast] = load_path(FIXTURES / "kakaku_ja.xlsx")
    monkeypatch.setattr(sheets, "STREAM_SHEET_BYTES", 0)
    [streamed] = load_path(FIXTURES / "kakaku_ja.xlsx")
    assert streamed.parts == fast.parts and streamed.content == fast.content
    assert streamed.metadata == fast.metadata


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


@pytest.mark.parametrize("stream", [False, True], ids=["calamine", "openpyxl"])
def test_a_damaged_sheet_is_a_typed_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: bool) -> None:
    if stream:
        monkeypatch.setattr(sheets, "STREAM_SHEET_BYTES", 0)
    good = (FIXTURES / "kakaku_ja.xlsx").read_bytes()
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(good)) as source, zipfile.ZipFile(out, "w") as damaged:
        for item in source.infolist():
            data = source.read(item)
            if item.filename == "xl/worksheets/sheet1.xml":
                data = data[: len(data) // 2]  # the XML stops in the middle of a row
            damaged.writestr(item, data)
    with pytest.raises(CorruptDocumentError, match="not a readable Excel file"):
        load_path(_write(tmp_path, "damaged.xlsx", out.getvalue()))
    with pytest.raises(CorruptDocumentError, match="not a readable Excel file"):  # no central directory
        sheets.load_xlsx(FIXTURES / "broken.xlsx", LoadOptions())


def test_a_password_protected_workbook_is_a_typed_error(tmp_path: Path) -> None:
    msoffcrypto = pytest.importorskip("msoffcrypto")
    from msoffcrypto.format.ooxml import OOXMLFile

    encrypted = io.BytesIO()
    with (FIXTURES / "kakaku_ja.xlsx").open("rb") as plain:
        OOXMLFile(plain).encrypt("himitsu", encrypted)
    path = _write(tmp_path, "locked.xlsx", encrypted.getvalue())
    assert msoffcrypto.OfficeFile(io.BytesIO(path.read_bytes())).is_encrypted()
    with pytest.raises(EncryptedDocumentError, match="password-protected"):
        load_path(path)


def test_a_legacy_workbook_and_an_empty_one(tmp_path: Path) -> None:
    with pytest.raises(NoTextError, match="no cells"):
        load_path(_write(tmp_path, "empty.xlsx", make.make_xlsx([("Sheet1", [])])))
    # an OLE container that is not encrypted: an Excel 97-2003 file
    legacy = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504) + "Workbook".encode("utf-16-le") + bytes(512)
    with pytest.raises(LoaderError, match="legacy Excel 97-2003"):
        load_path(_write(tmp_path, "old.xlsx", legacy))


def test_without_the_libraries_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "python_calamine", None)  # import fails as when it is not installed
    with pytest.raises(LoaderError, match=r'pip install "bunko\[sheets\]"'):
        load_path(FIXTURES / "kakaku_ja.xlsx")
    monkeypatch.setattr(sheets, "STREAM_SHEET_BYTES", 0)
    monkeypatch.setitem(sys.modules, "openpyxl", None)
    with pytest.raises(LoaderError, match=r'pip install "bunko\[sheets\]"'):
        load_path(FIXTURES / "kakaku_ja.xlsx")
    [document] = load_path(FIXTURES / "meibo_cp932.csv")  # CSV needs neither
    assert "髙橋 一郎" in document.content


# -- CSV and TSV -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["utf-8-sig", "shift_jis", "euc_jp"])
def test_csv_in_japanese_encodings_with_a_title_line_and_semicolons(tmp_path: Path, encoding: str) -> None:
    text = "部品在庫一覧\n\n品番;品名;在庫数\nK-1;六角ボルト M6;1200\nK-2;ナット M6;800\n"
    [document] = load_path(_write(tmp_path, "parts.csv", text.encode(encoding)))
    assert document.metadata["encoding"] == encoding and document.metadata["delimiter"] == ";"
    title, table = document.parts or []
    assert (title.text, title.metadata) == ("部品在庫一覧", {"row_start": 1, "row_end": 1})
    assert table.whole and table.metadata == {"row_start": 4, "row_end": 5}
    assert table.text == ("| 品番 | 品名 | 在庫数 |\n| --- | --- | --- |\n| K-1 | 六角ボルト M6 | 1200 |\n"
                          "| K-2 | ナット M6 | 800 |")


def test_csv_rows_wider_than_the_header_and_a_header_alone(tmp_path: Path) -> None:
    [document] = load_path(_write(tmp_path, "wide.csv", b"a,b\n1,2\n3,4,5\n"))
    first, second = document.parts or []
    assert first.text.splitlines()[0] == "| a | b |" and first.metadata == {"row_start": 2, "row_end": 2}
    assert second.text.splitlines()[0] == "| a | b | C |" and second.text.endswith("| 3 | 4 | 5 |")
    [document] = load_path(_write(tmp_path, "head.csv", "氏名,部署\n".encode()))
    assert document.content == "氏名 | 部署"
    with pytest.raises(NoTextError):
        load_path(_write(tmp_path, "blank.csv", b",,\n,,\n"))
    with pytest.raises(EncodingDetectionError, match="binary"):
        load_path(_write(tmp_path, "binary.csv", b"a,b\n\x00\x01\x02,3\n"))


def test_a_value_longer_than_a_chunk_is_cut_with_its_row_and_column(tmp_path: Path) -> None:
    remark = "".join(f"第{i}項の説明です。" for i in range(1, 200))  # about 1,600 characters
    [document] = load_path(_write(tmp_path, "notes.csv", f"番号,件名,説明\nN-7,規程の改定,{remark}\nN-8,短い,なし\n"
                                  .encode()))
    *pieces, last = document.parts or []
    assert len(pieces) > 3 and all(p.whole and len(p.text) <= TABLE_CHARS for p in pieces)
    assert all(p.metadata == {"row_start": 2, "row_end": 2} for p in pieces)
    assert pieces[0].text.startswith("番号: N-7\n件名: 規程の改定\n説明: 第1項の説明です。")
    assert all(p.text.startswith("番号: N-7\n説明: ") for p in pieces[1:])  # which row, which column
    assert all(p.text.endswith("です。") for p in pieces)  # cut at sentence ends
    assert "".join(p.text.split("説明: ", 1)[1] for p in pieces) == remark
    assert last.text.endswith("| N-8 | 短い | なし |")


# -- long tables: grouped under their header, read as they come ------------------------------------------


def test_a_table_is_read_as_it_comes() -> None:
    """The parts of a table come out while its rows are still being read: a long table is never held whole."""
    read = 0

    def rows() -> Iterator[tuple[int, list[str]]]:
        nonlocal read
        yield 1, ["品番", "品名", "単価"]
        for n in itertools.count(2):
            read = n
            yield n, [f"P-{n:06d}", f"品目{n}", str(n * 10)]

    parts = iter(Table(rows(), {"sheet": "S"}))
    first = next(parts)
    assert first.metadata["row_start"] == 2 and read - first.metadata["row_end"] <= 1  # one row read ahead
    for _ in range(1000):
        part = next(parts)
    assert read - part.metadata["row_end"] <= 1 and part.text.startswith("| 品番 | 品名 | 単価 |\n")


def _big_workbook(path: Path, rows: int) -> None:
    """``rows`` rows over 3 sheets (the rows of benchmarks/bench_sheets.py)."""
    per = rows // 3
    data = []
    for s in range(3):
        body = [["品番", "登録日", "品名", "分類", "単価", "数量", "金額"]]
        for i in range(s * per, (s + 1) * per):
            price, quantity = 100 + i % 900, 1 + i % 17
            body.append([f"P-{i:07d}", dt.date(2020, 1, 1) + dt.timedelta(days=i % 1500), f"品目{i}",
                         ["文具", "家具", "食品", "工具", "書籍"][i % 5], price, quantity,
                         make.Formula(f"E{len(body) + 1}*F{len(body) + 1}", price * quantity)])
        data.append((f"シート{s + 1}", body))
    path.write_bytes(make.make_xlsx(data))


def test_5000_rows_over_3_sheets_every_row_once_under_its_header(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "big.xlsx"
    _big_workbook(path, 5001)
    for stream in (False, True):
        monkeypatch.setattr(sheets, "STREAM_SHEET_BYTES", 0 if stream else 1 << 30)
        [document] = load_path(path)
        assert document.metadata["row_count"] == 5001
        for name in ("シート1", "シート2", "シート3"):
            parts = [p for p in document.parts or [] if p.metadata["sheet"] == name]
            assert all(p.whole and p.text.startswith(f"## {name}\n| 品番 | 登録日 |") for p in parts)
            covered = [n for p in parts for n in range(p.metadata["row_start"], p.metadata["row_end"] + 1)]
            assert covered == list(range(2, 1669))  # 1,667 rows under the header of row 1
            assert sum(len(p.text.splitlines()) - 3 for p in parts) == 1667
        assert "| P-0004321 | 2023-08-14 | 品目4321 | 家具 | 821 | 4 | 3284 |" in document.content


# -- ingest and search: a cell value finds its row, with the headers -------------------------------------


def test_ingest_and_search_find_the_row_with_its_headers(engine: Bunko) -> None:
    acme = engine.tenant("acme")
    report = acme.ingest([FIXTURES / "kakaku_ja.xlsx", FIXTURES / "meibo_cp932.csv", FIXTURES / "zaiko.tsv"], "sheets")
    assert not report.errors and len(report.documents) == 3
    hits = acme.search("クリアファイル", collection="sheets", top_k=3).results
    top = hits[0]
    assert "| B-113 | クリアファイル | 30 | 9 | 270 | 2024-06-24 |" in top.content
    assert "| 品番 | 品名 | 単価 | 数量 | 金額 | 登録日 | 備考 |" in top.content
    assert top.metadata["sheet"] == "価格表" and top.metadata["row_start"] <= 17 <= top.metadata["row_end"]
    hits = acme.search("髙橋 一郎の内線", collection="sheets", top_k=3).results
    assert "| 社員番号 | 氏名 | 部署 | 内線 | 入社日 |" in hits[0].content and "髙橋 一郎" in hits[0].content
    # every chunk of the price sheet's table holds the header: none is cut, none joined to its neighbours
    chunks = acme.search("品番 品名 単価", collection="sheets", mode="keyword", top_k=50).results
    price = [h for h in chunks if h.metadata.get("sheet") == "価格表" and h.metadata["row_start"] >= 5]
    assert sorted((h.metadata["row_start"], h.metadata["row_end"]) for h in price) == [
        (5, 11), (12, 18), (19, 23), (24, 24), (25, 29)]
    assert all("| 品番 | 品名 |" in h.content or h.content.startswith("品番: B-120") for h in price)


@pytest.mark.slow  # embeds about 700 chunks
def test_a_question_about_one_row_of_5000_finds_that_row_first(tmp_path: Path, engine: Bunko) -> None:
    path = tmp_path / "big.xlsx"
    _big_workbook(path, 5001)
    acme = engine.tenant("acme")
    acme.ingest([path], "big")
    [hit, *_] = acme.search("品番 P-0004321 の金額", collection="big", top_k=5).results
    assert "| P-0004321 | 2023-08-14 | 品目4321 | 家具 | 821 | 4 | 3284 |" in hit.content
    assert "| 品番 | 登録日 | 品名 | 分類 | 単価 | 数量 | 金額 |" in hit.content
    row = 4321 - 3334 + 2  # シート3 holds P-0003334 onwards from row 2
    assert hit.metadata["sheet"] == "シート3" and hit.metadata["row_start"] <= row <= hit.metadata["row_end"]


def _workbook_with_hidden_sheets(path: Path) -> Path:
    """A visible sheet, a hidden one (the price master the first looks values up in) and a very hidden one."""
    import openpyxl

    book = openpyxl.Workbook()
    orders = book.active
    orders.title = "注文"
    for row in (["注文番号", "品番", "数量"], ["O-1", "A-101", 3]):
        orders.append(row)
    master = book.create_sheet("単価マスタ")
    for row in (["品番", "単価"], ["A-101", 180]):
        master.append(row)
    master.sheet_state = "hidden"
    secret = book.create_sheet("作業用")
    for row in (["メモ", "担当"], ["棚卸し", "佐藤"]):
        secret.append(row)
    secret.sheet_state = "veryHidden"
    book.save(path)
    return path


@pytest.mark.parametrize("stream", [False, True], ids=["calamine", "openpyxl"])
def test_hidden_sheets_are_read_and_marked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stream: bool) -> None:
    """Hidden sheets are kept, their chunks marked ``hidden`` (a search can leave them out with a filter) and the
    document lists them: a hidden sheet is most often the master data the visible ones look up (prices, codes),
    which people ask about; leaving it out would lose it without a word. Hidden slides are treated the same."""
    if stream:
        monkeypatch.setattr(sheets, "STREAM_SHEET_BYTES", 0)
    [document] = load_path(_workbook_with_hidden_sheets(tmp_path / "orders.xlsx"))
    parts = document.parts or []
    assert [(p.metadata["sheet"], p.metadata.get("hidden", False)) for p in parts] == [
        ("注文", False), ("単価マスタ", True), ("作業用", True)]
    assert parts[1].text == "## 単価マスタ\n| 品番 | 単価 |\n| --- | --- |\n| A-101 | 180 |"
    assert document.metadata["sheets"] == ["注文", "単価マスタ", "作業用"]
    assert document.metadata["hidden_sheets"] == ["単価マスタ", "作業用"]


def test_a_search_can_leave_hidden_sheets_out(engine: Bunko, tmp_path: Path) -> None:
    acme = engine.tenant("acme")
    assert acme.ingest([_workbook_with_hidden_sheets(tmp_path / "orders.xlsx")], "orders").errors == []
    found = acme.search("A-101 の単価", collection="orders", top_k=5).results
    assert "単価マスタ" in {hit.metadata["sheet"] for hit in found}
    visible = acme.search("A-101 の単価", collection="orders", top_k=5, filter={"hidden": {"$ne": True}}).results
    assert visible and {hit.metadata["sheet"] for hit in visible} == {"注文"}
