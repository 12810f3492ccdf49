"""The PDF loader against the test documents of ``tests/data`` and, when present, the shared corpus.

Every PDF in a manifest (``documents.jsonl``) is checked for what its ``expected`` tags call
for; strings are compared with all whitespace removed (vertical Japanese comes out one column
per line). Tests marked ``shared_data`` read the larger corpus and are skipped without it.
Small synthetic PDFs cover garbled text layers.
"""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from bunko.errors import (
    CorruptDocumentError,
    EncryptedDocumentError,
    GarbledTextError,
    LoaderError,
    NoTextError,
)
from bunko.loaders import LoadOptions, load_path
from tests.conftest import FIXTURES, SHARED_DOCUMENTS, manifest_params, read_manifest

pytest.importorskip("pypdfium2")
pytest.importorskip("pdfminer")

from bunko.loaders import pdf as pdf_loader
from bunko.loaders import pdf_layout
from bunko.loaders.pdf import load_pdf

shared_data = pytest.mark.shared_data

# Longer contiguous phrases (from pdfminer's reading-order output) that only come out when
# the vertical columns are read right to left, top to bottom.
READING_ORDER = {
    "haru_to_shura_jo.pdf": [
        "わたくしといふ現象は假定された有機交流電燈のひとつの青い照明です（あらゆる透明な幽霊の複合体）",
        "すべてこれらの命題は心象や時間それ自身の性質として第四次延長のなかで主張されます大正十三年一月廿日宮澤賢治",
    ],
    "jo.pdf": [
        "わたくしといふ現象は假定された有機交流電燈のひとつの青い照明です（あらゆる透明な幽霊の複合体）"
        "風景やみんなといっしょにせはしくせはしく明滅しながらいかにもたしかにともりつづける因果交流電燈の"
        "ひとつの青い照明です",
        "すべてこれらの命題は心象や時間それ自身の性質として第四次延長のなかで主張されます",
    ],
    "kampo.pdf": [
        "道路交通法施行令（昭和三十五年政令第二百七十号）の一部を次のように改正する。"
        "第一条の二第四項第三号中「一・五メートル」を「一メートル」に改め、同条第五項第三号中「第",
    ],
    # two tiers, drawn column by column across them: each tier is read whole, the upper one first
    "tiers_ja.pdf": [
        "序わたくしといふ現象は假定された有機交流電燈のひとつの青い照明です（あらゆる透明な幽霊の複合体）"
        "風景やみんなといっしょにせはしくせはしく明滅しながらいかにもたしかにともりつづける"
        "因果交流電燈のひとつの青い照明です（ひかりはたもち、その電燈は失はれ）すべてこれらの命題は"
        "心象や時間それ自身の性質として第四次延長のなかで主張されます大正十三年一月廿日宮澤賢治",
    ],
}

# Scans with a text layer on some pages only: the pages without one. The repository's manifest
# says so itself; the shared corpus's multipage.pdf (six scans, a poor OCR layer on page 4) does not.
PAGES_WITHOUT_TEXT = {"multipage.pdf": [1, 2, 3, 5, 6]}

_CACHE: dict[tuple[Path, str | None], Any] = {}


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def load(path: Path, password: str | None = None) -> Any:
    """The documents of a test file (cached), or the error loading it raised: the text layer only, without OCR
    (tests/test_loader_ocr.py reads the scans)."""
    key = (path, password)
    if key not in _CACHE:
        try:
            _CACHE[key] = load_pdf(path, LoadOptions(password=password, ocr=False))
        except LoaderError as exc:
            _CACHE[key] = exc
    return _CACHE[key]


def loaded(path: Path, password: str | None = None) -> Any:
    result = load(path, password)
    if isinstance(result, Exception):
        raise result
    assert len(result) == 1
    return result[0]


def assert_clean(text: str) -> None:
    assert "(cid:" not in text
    assert "\ufffd" not in text
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f]", text)


@pytest.mark.parametrize("record", manifest_params("pdf"))
def test_manifest_expectations(record: dict[str, Any]) -> None:
    tags = set(record["expected"])
    name, path = record["file"], record["path"]
    if "image_only" in tags:
        with pytest.raises(NoTextError, match="no extractable text; OCR is not enabled"):
            loaded(path)
        return
    if "needs_user_password" in tags:
        with pytest.raises(EncryptedDocumentError) as info:
            loaded(path)
        assert name in str(info.value) and "password is needed" in str(info.value)
        document = loaded(path, record["password"])
        for expected in record["must_contain_after_decrypt"]:
            assert squash(expected) in squash(document.content)
        assert_clean(document.content)
        return
    if "unrecoverable" in tags:
        with pytest.raises(CorruptDocumentError) as info:
            loaded(path)
        message = str(info.value)
        assert name in message and "Traceback" not in message and "\n" not in message
        return

    document = loaded(path)
    assert_clean(document.content)
    assert document.metadata["page_count"] == record["pages"]
    assert document.metadata["mime_type"] == "application/pdf"
    pages = [part.metadata["page_number"] for part in document.parts]  # a page with tables has several parts
    assert pages == sorted(pages) and all(1 <= n <= record["pages"] for n in pages)
    numbers = sorted(set(pages))
    if "mostly_image_only" in tags:
        without = record.get("pages_without_text") or PAGES_WITHOUT_TEXT[name]
        assert document.metadata["pages_without_text"] == without
        assert numbers == [n for n in range(1, record["pages"] + 1) if n not in without]
        return
    assert "has_text" in tags
    assert numbers == list(range(1, record["pages"] + 1))  # every page of these files has text
    assert "garbled_pages" not in document.metadata
    for expected in record["must_contain"]:
        assert squash(expected) in squash(document.content), expected
    if record["language"] in ("ja", "ko"):  # script-based detection is reliable for these
        assert document.metadata["language"] == record["language"]
    for key in ("title", "author", "created_at"):  # the repository's manifest states the PDF info
        if key in record:
            assert document.metadata[key] == record[key]
    for phrase, page in record.get("page_of", {}).items():
        found = [p.metadata["page_number"] for p in document.parts if squash(phrase) in squash(p.text)]
        assert found == [page], (phrase, found)
    if "vertical_text" in tags:
        for phrase in READING_ORDER[name]:
            assert squash(phrase) in squash(document.content), phrase


@pytest.mark.parametrize("folder", [FIXTURES, pytest.param(SHARED_DOCUMENTS, marks=shared_data)],
                         ids=["repo", "shared"])
def test_every_vertical_sample_has_a_reading_order_phrase(folder: Path) -> None:
    vertical = {r["file"] for r in read_manifest(folder) if "vertical_text" in r["expected"]}
    assert vertical and vertical <= set(READING_ORDER)


@pytest.mark.parametrize(
    "path",
    [FIXTURES / "encrypted.pdf", pytest.param(SHARED_DOCUMENTS / "libreoffice-writer-password.pdf", marks=shared_data)],
    ids=["repo", "shared"],
)
def test_wrong_password_is_an_encryption_error(path: Path) -> None:
    with pytest.raises(EncryptedDocumentError, match="password given does not open it"):
        load_pdf(path, LoadOptions(password="not-the-password"))


def test_parts_carry_their_page_number() -> None:
    for name, phrase, page in [
        ("report.pdf", "A Short History of Pocket Libraries", 1),
        ("report.pdf", "Copenhagen", 3),
        ("bousai_ja.pdf", "持ち出し袋の中身", 2),
        ("partly_scanned.pdf", None, 2),
    ]:
        document = loaded(FIXTURES / name)
        assert all(set(part.metadata) == {"page_number"} for part in document.parts)
        found = [p.metadata["page_number"] for p in document.parts
                 if phrase is None or squash(phrase) in squash(p.text)]
        assert found and found[0] == page, (name, found)
    document = loaded(FIXTURES / "report.pdf")
    assert len(document.parts) == 3
    assert squash(document.parts[1].text) in squash(document.content)
    assert document.parts[1].metadata == {"page_number": 2}
    assert squash(document.parts[1].text).startswith("PaperandBinding")


@shared_data
def test_parts_carry_their_page_number_in_the_shared_corpus() -> None:
    for name, phrase, page in [
        ("GeoTopo-komprimiert.pdf", "Einführung in die Geometrie und Topologie", 1),
        ("nlp2004slides.pdf", "再現率と適合率の関係", 31),
        ("multicolumn.pdf", "Copenhagen", 3),
        ("multipage.pdf", None, 4),
    ]:
        document = loaded(SHARED_DOCUMENTS / name)
        assert all(set(part.metadata) == {"page_number"} for part in document.parts if "table" not in part.metadata)
        assert all(set(part.metadata) <= {"page_number", "table", "row_start", "row_end"} for part in document.parts)
        found = [p.metadata["page_number"] for p in document.parts
                 if phrase is None or squash(phrase) in squash(p.text)]
        assert found and found[0] == page, (name, found)
    document = loaded(SHARED_DOCUMENTS / "GeoTopo-komprimiert.pdf")
    assert len(document.parts) == 117
    assert squash(document.parts[82].text) in squash(document.content)
    assert document.parts[82].metadata == {"page_number": 83}


def test_document_metadata_from_the_pdf_info() -> None:
    path = FIXTURES / "report.pdf"
    meta = loaded(path).metadata
    assert meta["title"] == "A Short History of Pocket Libraries"
    assert meta["author"] == "Reading Room Staff"
    assert meta["created_at"] == "2024-04-01T00:30:00Z"  # D:20240401093000+09'00' in UTC
    assert meta["filename"] == "report.pdf" and meta["source"] == str(path)
    assert meta["filesize"] == path.stat().st_size
    ja = loaded(FIXTURES / "bousai_ja.pdf").metadata  # UTF-16 strings in the info dictionary
    assert (ja["title"], ja["author"], ja["language"]) == ("家庭の防災備蓄ガイド", "防災委員会", "ja")
    assert loaded(FIXTURES / "haru_to_shura_jo.pdf").metadata["language"] == "ja"
    assert "title" not in loaded(FIXTURES / "haru_to_shura_jo.pdf").metadata  # no info dictionary: not set


@shared_data
def test_document_metadata_from_the_pdf_info_in_the_shared_corpus() -> None:
    path = SHARED_DOCUMENTS / "normal_4pages.pdf"
    meta = loaded(path).metadata
    assert meta["title"] == "코로나-19 관련 보험약관상 재해보험금 지급문제 및 개선과제"
    assert meta["author"] == "김창호"
    assert meta["created_at"] == "2020-03-31T09:02:55Z"  # D:20200331180255+09'00' in UTC
    assert meta["filename"] == "normal_4pages.pdf" and meta["source"] == str(path)
    assert meta["filesize"] == path.stat().st_size
    geo = loaded(SHARED_DOCUMENTS / "GeoTopo-komprimiert.pdf").metadata
    assert (geo["title"], geo["author"]) == ("Geometrie und Topologie", "Martin Thoma")
    assert loaded(SHARED_DOCUMENTS / "jo.pdf").metadata["language"] == "ja"
    assert "title" not in loaded(SHARED_DOCUMENTS / "tracemonkey.pdf").metadata  # empty Title in the info: not set


@pytest.mark.parametrize(
    ("raw", "iso"),
    [
        ("D:20161231184323+01'00'", "2016-12-31T17:43:23Z"),
        ("D:20150722100404Z00'00'", "2015-07-22T10:04:04Z"),
        ("D:20091207215100Z", "2009-12-07T21:51:00Z"),
        ("D:20180810042542-05'00'", "2018-08-10T09:25:42Z"),
        ("D:2004", "2004-01-01T00:00:00Z"),
        ("20230216100534", "2023-02-16T10:05:34Z"),
        ("yesterday", None),
        ("D:20231345", None),
    ],
)
def test_pdf_dates(raw: str, iso: str | None) -> None:
    assert pdf_loader._pdf_date(raw) == iso


@pytest.mark.parametrize(
    ("folder", "horizontal", "vertical", "scanned"),
    [
        (FIXTURES, "bousai_ja.pdf", "haru_to_shura_jo.pdf", "scanned.pdf"),
        pytest.param(SHARED_DOCUMENTS, "kampo.pdf", "jo.pdf", "c02-22.pdf", marks=shared_data),
    ],
    ids=["repo", "shared"],
)
def test_load_path_sniffs_the_content(tmp_path: Path, folder: Path, horizontal: str, vertical: str,
                                      scanned: str) -> None:
    documents = load_path(folder / horizontal)
    assert documents[0].metadata["kind"] == "pdf"
    without_ocr = LoadOptions(ocr=False)
    unnamed = tmp_path / "gazette"  # no suffix: the %PDF- header decides
    shutil.copyfile(folder / vertical, unnamed)
    documents = load_path(unnamed)
    assert documents[0].metadata["kind"] == "pdf"
    assert squash(READING_ORDER[vertical][1]) in squash(documents[0].content)
    assert documents[0].metadata["filename"] == "gazette"
    with pytest.raises(NoTextError):
        load_path(folder / scanned, without_ocr)


@pytest.mark.parametrize(
    ("folder", "plain", "consulted"),
    [
        (FIXTURES, ["report.pdf", "bousai_ja.pdf", "partly_scanned.pdf", "owner_password_only.pdf",
                    "hyphenation.pdf", "spacing_ja.pdf"],
         ["haru_to_shura_jo.pdf", "tiers_ja.pdf",  # vertical: PDFium's column order is not trusted
          "two_columns.pdf"]),  # page 1 is drawn row by row across its columns (page 2 column by column)
        pytest.param(SHARED_DOCUMENTS, ["tracemonkey.pdf", "pdkids.pdf", "GeoTopo-komprimiert.pdf",
                                        "nlp2004slides.pdf", "issue16538.pdf", "normal_4pages.pdf"],
                     ["jo.pdf",  # vertical: PDFium's column order is wrong
                      "kampo.pdf"],  # PDFium maps almost none of the glyphs
                     marks=shared_data),
    ],
    ids=["repo", "shared"],
)
def test_pdfminer_only_where_needed(monkeypatch: pytest.MonkeyPatch, folder: Path, plain: list[str],
                                    consulted: list[str]) -> None:
    asked: list[set[int] | None] = []
    original = pdf_loader.pdfminer_texts

    def spy(document: Any, wanted: set[int] | None) -> Any:
        asked.append(wanted)
        return original(document, wanted)

    monkeypatch.setattr(pdf_loader, "pdfminer_texts", spy)
    for name in plain:
        load_pdf(folder / name, LoadOptions())
    assert asked == []
    for name in consulted:
        load_pdf(folder / name, LoadOptions())
    assert asked == [{0}] * len(consulted)


@pytest.mark.parametrize(
    ("folder", "damaged", "phrase", "title", "invalid"),
    [
        (FIXTURES, "damaged_xref.pdf", "Readability counts", "Notes on Readable Files", "invalid.pdf"),
        pytest.param(SHARED_DOCUMENTS, "zen_of_python_corrupted.pdf", "Readability counts.", "zen_of_python.txt",
                     "invalid.pdf", marks=shared_data),
    ],
    ids=["repo", "shared"],
)
def test_unreadable_by_pdfium_falls_back_to_pdfminer(monkeypatch: pytest.MonkeyPatch, folder: Path, damaged: str,
                                                     phrase: str, title: str, invalid: str) -> None:
    import pypdfium2
    import pypdfium2.raw as pdfium_c

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise pypdfium2.PdfiumError("Failed to load document (PDFium: Data format error).",
                                    err_code=pdfium_c.FPDF_ERR_FORMAT)

    monkeypatch.setattr(pypdfium2, "PdfDocument", broken)
    document = load_pdf(folder / damaged, LoadOptions())[0]
    assert squash(phrase) in squash(document.content)
    assert document.metadata["page_count"] == 1 and document.metadata["title"] == title
    with pytest.raises(CorruptDocumentError, match="not a readable PDF"):
        load_pdf(folder / invalid, LoadOptions())


def test_missing_libraries_name_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pypdfium2", None)
    with pytest.raises(LoaderError, match=re.escape('pip install "bunko[pdf]"')):
        load_pdf(FIXTURES / "haru_to_shura_jo.pdf", LoadOptions())


# --- synthetic PDFs: a text layer whose ToUnicode map points at private-use characters ---


def make_pdf(pages: list[tuple[str, bool]]) -> bytes:
    """A PDF with one Helvetica line block per page; ``True`` maps that page's glyphs to U+E000..."""
    cmap = (b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
            b"/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n"
            b"/CMapName /Garbled-UCS def /CMapType 2 def\n"
            b"1 begincodespacerange <00> <FF> endcodespacerange\n"
            b"1 beginbfrange <20> <7E> <E000> endbfrange\n"
            b"endcmap CMapName currentdict /CMap defineresource pop end end\n")
    objects = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        3: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        4: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding /ToUnicode 5 0 R >>",
        5: b"<< /Length %d >>\nstream\n" % len(cmap) + cmap + b"endstream",
    }
    kids = []
    number = 6
    for text, garbled in pages:
        words, lines = text.split(), []
        while words:
            lines.append(" ".join(words[:6]))
            words = words[6:]
        ops = b"BT /F1 12 Tf 20 260 Td 14 TL " + b" ".join(b"(%s) '" % line.encode("latin-1") for line in lines)
        ops += b" ET"
        objects[number] = b"<< /Length %d >>\nstream\n" % len(ops) + ops + b"\nendstream"
        objects[number + 1] = (b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 300 300] /Contents %d 0 R "
                               b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (number, 4 if garbled else 3))
        kids.append(number + 1)
        number += 2
    objects[2] = b"<< /Type /Pages /Count %d /Kids [%s] >>" % (len(kids), b" ".join(b"%d 0 R" % k for k in kids))
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = {}
    for n in sorted(objects):
        offsets[n] = len(out)
        out += b"%d 0 obj\n" % n + objects[n] + b"\nendobj\n"
    start = len(out)
    size = max(objects) + 1
    out += b"xref\n0 %d\n0000000000 65535 f \n" % size
    out += b"".join(b"%010d 00000 n \n" % offsets[n] for n in range(1, size))
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (size, start)
    return bytes(out)


SENTENCE = "The quick brown fox jumps over the lazy dog near the quiet river bank today"


def test_garbled_pages_are_left_out_and_listed(tmp_path: Path) -> None:
    path = tmp_path / "mixed.pdf"
    path.write_bytes(make_pdf([(SENTENCE, False), ("Secret words nobody can read " * 3, True), (SENTENCE, False)]))
    document = load_pdf(path, LoadOptions())[0]
    assert [p.metadata["page_number"] for p in document.parts] == [1, 3]
    assert document.metadata["garbled_pages"] == [2]
    assert document.metadata["page_count"] == 3
    assert "pages_without_text" not in document.metadata
    assert not re.search("[\ue000-\uf8ff]", document.content)
    assert squash(SENTENCE) in squash(document.content)


def test_all_pages_garbled_raises(tmp_path: Path) -> None:
    path = tmp_path / "garbled.pdf"
    path.write_bytes(make_pdf([(SENTENCE, True), (SENTENCE, True)]))
    with pytest.raises(GarbledTextError, match=r"pages 1, 2"):
        load_pdf(path, LoadOptions())


def test_synthetic_clean_pdf_loads(tmp_path: Path) -> None:
    path = tmp_path / "clean.pdf"
    path.write_bytes(make_pdf([(SENTENCE, False)]))
    document = load_pdf(path, LoadOptions())[0]
    assert squash(document.content) == squash(SENTENCE)
    assert document.metadata["language"] == "en"


@pytest.mark.parametrize(
    ("text", "garbled"),
    [
        ("(cid:12)(cid:345)(cid:7) (cid:88)(cid:9) ab", True),
        ("\ufffd\ufffd\ufffd ok", True),
        ("\x01\x02\x03\x04\x05\x06 text", True),
        ("a normal sentence with one (cid:3) code in it", False),
        ("日本語の文章です。縦書きでも横書きでも同じ。", False),
    ],
)
def test_garble_detection(text: str, garbled: bool) -> None:
    assert pdf_loader._Candidate.of(text).garbled is garbled


def test_cid_codes_are_never_stored() -> None:
    assert pdf_loader._clean("before (cid:1) after\x04 \ufffd") == "before  after"


# --- text fidelity: hyphenation, spaces in CJK text, reading order ---------------------------

CJK_SPACE = re.compile(
    "(?<=[\u3001-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff01-\uff0f\uff1a-\uff20])"
    "[^\\S\\n]+(?=[\u3001-\u303f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff01-\uff0f\uff1a-\uff20])"
)
HYPHEN_MARKS = re.compile("[\ufffe\u00ad\x02]")


def one_line(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def test_words_hyphenated_at_line_ends_are_joined() -> None:
    content = one_line(loaded(FIXTURES / "hyphenation.pdf").content)
    assert not HYPHEN_MARKS.search(content)
    assert "the reader has to compile the two halves" in content
    assert "A reader of a well-known text" in content  # the document writes it with a hyphen elsewhere
    assert "print a soft hyphen instead" in content  # U+00AD at the line end
    assert "never printed: midline." in content  # U+00AD inside a line
    assert "the Schwarz-Weiß photographs of the COVID-19 years." in content  # a capital, a digit: compounds


def test_hyphenation_rules() -> None:
    join = pdf_loader._join_hyphenated
    assert join(["com\ufffepile", "pile"]) == ["compile", "pile"]
    assert join(["a well-known rule", "a well\ufffeknown text"]) == ["a well-known rule", "a well-known text"]
    assert join(["Trace\ufffeMonkey, as TraceMonkey"]) == ["TraceMonkey, as TraceMonkey"]  # the joined form occurs
    assert join(["Schwarz\ufffeWeiß", "COVID\ufffe19", "220px\ufffeYellow_River"]) == [
        "Schwarz-Weiß", "COVID-19", "220px-Yellow_River"]
    assert join(["trailing\ufffe", "\ufffeleading"]) == ["trailing-", "-leading"]
    assert join(["no marks - at all"]) == ["no marks - at all"]
    # pdfminer's line-end hyphens and soft hyphens are marked the same way before the decision
    prepared = pdf_loader._prepare("com-\npile, hy\u00ad\nphen, mid\u00adline, 1-\n2")
    assert prepared == "com\ufffepile, hyphen, midline, 1-\n2"


def test_no_spaces_between_cjk_characters() -> None:
    document = loaded(FIXTURES / "spacing_ja.pdf")
    assert not CJK_SPACE.search(document.content)
    lines = document.content.splitlines()
    assert "歩行者は、道路を横断してはならない。" in lines
    assert "自転車は、横断歩道（自転車横断帯を含む。）を徐行して通行する。" in lines
    assert "bunko の検索画面で「横断」と入力してください。" in document.content  # a space beside Latin stays
    assert "Latin words keep their spaces." in lines


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("歩行者は、 道路を横断", "歩行者は、道路を横断"),
        ("法律（ 平成十九年法律第九十号） の一部", "法律（平成十九年法律第九十号）の一部"),
        ("大正十三年一月廿日\u3000\u3000宮澤賢治", "大正十三年一月廿日宮澤賢治"),
        ("検索 エンジン bunko の 検索", "検索エンジン bunko の検索"),  # Latin keeps its spaces
        ("\u3000\u3000（あるひは修羅の十億年）", "（あるひは修羅の十億年）"),  # an indent is not between characters
        ("코로나 관련 보험약관", "코로나 관련 보험약관"),  # Korean separates words with spaces
        ("第 4817 号", "第 4817 号"),
        ("見出し\n 本文", "見出し\n 本文"),  # line breaks are not spaces
    ],
    ids=["after-comma", "parentheses", "ideographic-space", "latin", "indent", "korean", "digits", "newline"],
)
def test_cjk_spaces(raw: str, clean: str) -> None:
    assert pdf_loader._clean(raw) == clean


def test_columns_are_read_one_after_the_other() -> None:
    document = loaded(FIXTURES / "two_columns.pdf")
    title = "Reading Room and Bindery"
    left = ("The reading room opens at nine in the morning and closes at eight in the evening. Visitors sign the "
            "register at the desk and leave their coats and bags in the lockers beside the entrance. Pencils are "
            "allowed, ink is not. The staff bring books from the closed stacks within twenty minutes of a request; "
            "rare books are read at the long table under the north window, where the light is best. Photographs "
            "need the permission of the librarian on duty, who notes the pages in the daybook.")
    right = ("The bindery in the basement repairs about forty volumes a week. Loose boards are reattached with linen "
             "tape, torn pages are mended with thin Japanese tissue and wheat starch paste, and brittle newspapers "
             "are boxed rather than rebound. Each repair is recorded on a slip kept inside the back cover, so the "
             "next binder knows which materials were used. The bindery also makes the grey boxes for the map "
             "collection and the cloth covers for the music scores that circulate most often.")
    # page 1 draws the columns row by row across the page, page 2 one after the other: the same text
    assert [one_line(part.text) for part in document.parts] == [f"{title} {left} {right}"] * 2


def test_interleaved_columns_are_detected_from_pdfium_rectangles() -> None:
    import pypdfium2
    import pypdfium2.raw as pdfium_c

    found = {}
    for name in ("two_columns.pdf", "report.pdf", "hyphenation.pdf"):
        pdf = pypdfium2.PdfDocument(FIXTURES / name)
        try:
            for index in range(len(pdf)):
                textpage = pdf[index].get_textpage()
                lines = textpage.get_text_range().count("\n") + 1
                found[(name, index + 1)] = pdf_loader._interleaved_columns(textpage.raw, lines, pdfium_c)
                textpage.close()
        finally:
            pdf.close()
    assert [key for key, value in found.items() if value] == [("two_columns.pdf", 1)]


def test_tiers_are_read_one_after_the_other() -> None:
    content = loaded(FIXTURES / "tiers_ja.pdf").content
    assert squash(content) == READING_ORDER["tiers_ja.pdf"][0]


def test_reading_order_of_blocks() -> None:
    def block(x0: float, y0: float, x1: float, y1: float, text: str, vertical: bool = False) -> Any:
        return pdf_layout.TextBlock(x0, y0, x1, y1, text, vertical)

    horizontal = [  # a title over two columns of two paragraphs each, and a page number under them
        block(300, 500, 550, 600, "right-top"), block(50, 700, 550, 750, "title"),
        block(50, 300, 280, 480, "left-bottom"), block(300, 300, 550, 480, "right-bottom"),
        block(50, 500, 280, 600, "left-top"), block(280, 250, 320, 270, "page"),
    ]
    assert [b.text for b in pdf_layout.reading_order(horizontal)] == [
        "title", "left-top", "left-bottom", "right-top", "right-bottom", "page"]
    vertical = [  # two tiers of three columns each (right to left), the columns of both tiers at one x
        block(x, y0, x + 10, y1, f"{tier}{n}", True)
        for tier, (y0, y1) in (("lower", (100, 300)), ("upper", (400, 600)))
        for n, x in enumerate((500, 480, 460))
    ]
    assert [b.text for b in pdf_layout.reading_order(vertical)] == [
        "upper0", "upper1", "upper2", "lower0", "lower1", "lower2"]


# --- text fidelity on the shared corpus: every document, split as ingest splits it ------------


def _shared_chunks() -> dict[str, list[str]]:
    from bunko.indexing import IndexManager
    from bunko.preprocess import Preprocessor
    from bunko.splitters import DEFAULT_SPLITTER, build_splitter

    chunker = build_splitter(dict(DEFAULT_SPLITTER))
    manager = IndexManager(Preprocessor(), chunker, embedder=None, vector_store=None)  # type: ignore[arg-type]
    chunks: dict[str, list[str]] = {}
    for record in read_manifest(SHARED_DOCUMENTS):
        try:
            documents = load_path(record["path"], LoadOptions(password=record.get("password"), ocr=False))
        except LoaderError:
            continue  # scans, broken files: what they raise is checked by the manifest tests
        chunks[record["file"]] = [c.content for d in documents for c in chunker.split(manager.normalize(d)[0])]
    return chunks


@shared_data
def test_shared_corpus_chunks_are_free_of_hyphenation_marks_and_cjk_spaces() -> None:
    records = read_manifest(SHARED_DOCUMENTS)
    assert len(records) == 31
    chunks = _shared_chunks()
    assert len(chunks) >= 27 and sum(len(c) for c in chunks.values()) > 1000
    marks = {name: sum(len(HYPHEN_MARKS.findall(c)) for c in texts) for name, texts in chunks.items()}
    assert sum(marks.values()) == 0, {k: v for k, v in marks.items() if v}
    japanese = [r["file"] for r in records if r["kind"] == "pdf" and r["language"] == "ja"]
    assert set(japanese) >= {"jo.pdf", "kampo.pdf", "nlp2004slides.pdf", "issue16538.pdf"}
    spaces = {name: [m.group() for c in chunks[name] for m in CJK_SPACE.finditer(c)] for name in japanese}
    assert not any(spaces.values()), spaces
    joined = squash(" ".join(chunks["tracemonkey.pdf"]))
    assert "moredifficulttocompilethanstaticallytypedones" in joined  # com-pile, at a line end
    assert "Schwarz-Weiß" in " ".join(chunks["GeoTopo-komprimiert.pdf"])


@shared_data
def test_shared_jo_tiers_are_read_one_after_the_other() -> None:
    """jo.pdf: two tiers whose columns share x positions; the upper tier is read whole, then the lower one."""
    content = squash(loaded(SHARED_DOCUMENTS / "jo.pdf").content)
    for seam in [
        # upper-tier columns either side of a lower-tier column at the same x
        "ひとつの青い照明です（ひかりはたもち、その電燈は失はれ）これらは二十二箇月の",
        "そのとほりの心象スケッチですこれらについて人や銀河や修羅や海膽は",
        # the last column of the upper tier, then the first of the lower one
        "みんなのおのおののなかのすべてですから）けれどもこれら新世代沖積世の",
        "しかもわたくしも印刷者もそれを変らないとして感ずることは傾向としてはあり得ます",
        "第四次延長のなかで主張されます大正十三年一月廿日宮澤賢治",
    ]:
        assert seam in content, seam
