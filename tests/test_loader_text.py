"""Tests for bunko.loaders.text: encoding detection, Markdown sections, JSON with content_path (R5)."""

from __future__ import annotations

import codecs
import json
import random
from pathlib import Path
from typing import Any

import pytest

from bunko.errors import CorruptDocumentError, EncodingDetectionError, LoaderError, NoTextError
from bunko.loaders import LoadOptions, load_path
from bunko.loaders.text import decode_text, japanese_score, load_json, load_markdown, load_text
from tests.conftest import FIXTURES, SHARED_DOCUMENTS, manifest_params

shared_data = pytest.mark.shared_data


def _flat(text: str) -> str:
    return "".join(text.split())


def _same_codec(a: str, b: str) -> bool:
    return codecs.lookup(a).name == codecs.lookup(b).name


PARAGRAPH = (
    "吾輩は猫である。名前はまだ無い。どこで生れたかとんと見当がつかぬ。\n"
    "何でも薄暗いじめじめした所でニャーニャー泣いていた事だけは記憶している。\n"
    "東京都千代田区の「文庫」プロジェクトは、日本語の検索（ＲＡＧ）を試しています。"
)
CP932_EXTRA = "\n㈱文庫の①番目の例：ⅡとⅢ、髙橋さん。"


# -- the sample files (tests/data, and the shared corpus when present) ---------------------------


@pytest.mark.parametrize("entry", manifest_params("text"))
def test_manifest_text_files(entry: dict[str, Any]) -> None:
    """Every text sample decodes with its manifest encoding and contains its must_contain strings."""
    path = entry["path"]
    [document] = load_path(path)
    assert _same_codec(document.metadata["encoding"], entry["encoding"])
    assert document.content == load_text(path, LoadOptions())[0].content
    flat = _flat(document.content)
    for expected in entry["must_contain"]:
        assert _flat(expected) in flat
    assert "\r" not in document.content and "\ufeff" not in document.content
    assert "\ufffd" not in document.content
    if "legacy_encoding" not in entry["expected"] or entry["file"] != "sjis_rashomon_gutenberg.txt":
        # detect_language reads only the head; the Rashomon file opens with ~4 kB of English PG header
        assert document.metadata["language"] == entry["language"]
    assert document.metadata["kind"] == "text"
    assert document.metadata["mime_type"] == "text/plain"
    # exactly what decoding with the manifest's codec gives
    expected_text = path.read_bytes().decode(entry["encoding"]).replace("\r\n", "\n").replace("\r", "\n")
    assert document.content == expected_text


@pytest.mark.parametrize(
    ("path", "lines", "line_1", "japanese"),
    [
        (FIXTURES / "rashomon_sjis_cr.txt", 8, "Rashomon by AKUTAGAWA Ryunosuke", "ある日の暮方の事である。"),
        pytest.param(SHARED_DOCUMENTS / "sjis_rashomon_gutenberg.txt", 500,
                     "The Project Gutenberg Etext of Rashomon by AKUTAGAWA Ryunosuke", "羅生門", marks=shared_data),
    ],
    ids=["repo", "shared"],
)
def test_sjis_sample_cr_line_endings_become_lines(path: Path, lines: int, line_1: str, japanese: str) -> None:
    """An old-Mac (CR only) Shift_JIS sample comes out as LF-separated lines."""
    assert b"\n" not in path.read_bytes() and path.read_bytes().count(b"\r") >= lines
    [document] = load_path(path)
    found = document.content.split("\n")
    assert len(found) >= lines
    assert found[1] == line_1
    assert japanese in document.content


@pytest.mark.parametrize(
    ("folder", "names"),
    [
        (FIXTURES, ("notice_utf8.txt", "notice_utf8_bom.txt", "notice_sjis.txt", "notice_eucjp.txt",
                    "notice_iso2022jp.txt")),
        pytest.param(SHARED_DOCUMENTS, ("eucjp_universalchardet_readme.txt", "iso2022jp_universalchardet_readme.txt",
                                        "utf8bom_universalchardet_readme.txt"), marks=shared_data),
    ],
    ids=["repo", "shared"],
)
def test_parallel_encodings_decode_to_the_same_text(folder: Path, names: tuple[str, ...]) -> None:
    """One text saved in several encodings (UTF-8 with and without BOM, Shift_JIS, EUC-JP, ISO-2022-JP)."""
    texts = {name: load_path(folder / name)[0].content for name in names}
    assert len({_flat(t) for t in texts.values()}) == 1
    assert len({(folder / name).read_bytes() for name in names}) == len(names)  # the bytes do differ


@pytest.mark.parametrize("entry", manifest_params("markdown"))
def test_manifest_markdown_files(entry: dict[str, Any]) -> None:
    """The ATX headings found equal the manifest's list exactly; must_contain strings are present."""
    [document] = load_path(entry["path"])
    parts = document.parts or []
    sections = [p.metadata for p in parts if "section" in p.metadata]
    headings = [f"{'#' * m['heading_level']} {m['section']}" for m in sections]
    assert headings == entry["headings"]
    flat = _flat(document.content)
    for expected in entry["must_contain"]:
        assert _flat(expected) in flat
    assert _same_codec(document.metadata["encoding"], entry["encoding"])
    assert document.metadata["language"] == entry["language"]
    assert document.content == "\n\n".join(p.text for p in parts)
    first = entry["headings"][0]
    level1 = [h for h in entry["headings"] if h.startswith("# ")]
    assert document.metadata["title"] == (level1[0] if level1 else first).lstrip("#").strip()
    for part in parts:
        if "section" in part.metadata:
            assert part.text.startswith("#" * part.metadata["heading_level"] + " " + part.metadata["section"])
            assert part.metadata["hierarchy"][-1] == part.metadata["section"]


def test_markdown_hierarchy_comments_and_code() -> None:
    """Sections nest under their parents; headings inside comments and # lines inside code fences are not."""
    [document] = load_path(FIXTURES / "guide_ja.md")
    by_section = {p.metadata.get("section"): p for p in document.parts or []}
    assert by_section["追加の機能"].metadata["hierarchy"] == ["文庫の使い方", "インストール", "追加の機能"]
    assert by_section["ハイブリッド検索"].metadata["hierarchy"] == ["文庫の使い方", "検索", "ハイブリッド検索"]
    assert "How to use bunko" not in document.content  # the commented-out English heading
    assert "<!--" not in document.content
    install = by_section["インストール"]
    assert "# このコメント行は見出しではありません\npip install bunko" in install.text  # code blocks are kept
    assert "このコメント行は見出しではありません" not in by_section


@shared_data
def test_markdown_hierarchy_of_ownership_chapter() -> None:
    """Sections nest under the chapter heading; English headings inside comments are dropped."""
    [document] = load_path(SHARED_DOCUMENTS / "ch04-01-what-is-ownership.md")
    by_section = {p.metadata.get("section"): p for p in document.parts or []}
    assert by_section["変数とデータの相互作用法: ムーブ"].metadata["hierarchy"] == [
        "所有権とは？",
        "メモリと確保",
        "変数とデータの相互作用法: ムーブ",
    ]
    assert "What Is Ownership?" not in document.content  # the commented-out English original
    assert "<!--" not in document.content
    assert "let s = String::from(\"hello\");" in document.content  # code blocks are kept


@shared_data
def test_markdown_code_fences_keep_their_hash_lines() -> None:
    """task_guidelines.md has Japanese text in ``` fences; it is content of its section, not headings."""
    [document] = load_path(SHARED_DOCUMENTS / "task_guidelines.md")
    sections = [p for p in document.parts or [] if p.metadata.get("section") == "Task guideline"]
    assert sections and sections[0].metadata["hierarchy"] == ["Task Guidelines", "MARC-ja", "Task guideline"]
    assert "ある商品のレビューを読んでいただきます。" in sections[0].text


@pytest.mark.parametrize("entry", manifest_params("json", "jsonl"))
def test_manifest_json_files(entry: dict[str, Any]) -> None:
    """JSON and JSON Lines samples: one document per item at content_path, each with its text."""
    extra = {"text_key": entry["text_key"]} if "text_key" in entry else {}
    documents = load_path(entry["path"], LoadOptions(content_path=entry["content_path"], extra=extra))
    assert len(documents) == entry["documents"]
    assert [d.metadata["source"] for d in documents] == [f"{entry['path']}#{i}" for i in range(len(documents))]
    assert all(d.metadata["kind"] == "json" and d.content.strip() for d in documents)
    flat = _flat("".join(d.content for d in documents))
    for expected in entry["must_contain"]:
        assert _flat(expected) in flat
    assert documents[0].metadata["language"] == entry["language"]
    assert _same_codec(documents[0].metadata["encoding"], entry["encoding"])


# -- encoding detection: synthetic round trips ---------------------------------------------


@pytest.mark.parametrize(
    ("codec", "text", "expected"),
    [
        ("utf-8", PARAGRAPH + CP932_EXTRA, "utf-8"),
        ("utf-8-sig", PARAGRAPH + CP932_EXTRA, "utf-8-sig"),
        ("shift_jis", PARAGRAPH, "shift_jis"),
        ("cp932", PARAGRAPH + CP932_EXTRA, "cp932"),
        ("euc_jp", PARAGRAPH, "euc_jp"),
        ("iso2022_jp", PARAGRAPH, "iso2022_jp"),
        ("utf-16", PARAGRAPH + CP932_EXTRA, "utf-16"),
        ("utf-32", PARAGRAPH, "utf-32"),
    ],
)
def test_japanese_round_trip(codec: str, text: str, expected: str, tmp_path: Path) -> None:
    """The same Japanese paragraph in every encoding decodes back exactly and names its encoding."""
    raw = text.encode(codec)
    decoded, encoding = decode_text("memo.txt", raw)
    assert decoded == text
    assert _same_codec(encoding, expected)
    path = tmp_path / f"{codec}.txt"
    path.write_bytes(raw)
    [document] = load_text(path, LoadOptions())
    assert document.content == text
    assert _same_codec(document.metadata["encoding"], expected)
    assert document.metadata["language"] == "ja"


SHORT_TEXTS = ["テスト", "日本語のテキスト", "ｺﾝﾋﾟｭｰﾀはﾃﾞｰﾀを処理します。", "Version 2.0 リリースノート\n- バグ修正\n"]


@pytest.mark.parametrize(
    ("codec", "text"),
    [(c, t) for c in ("shift_jis", "cp932", "euc_jp", "iso2022_jp", "iso2022_jp_ext") for t in SHORT_TEXTS
     if (c == "iso2022_jp_ext") == ("ｺ" in t)],  # plain ISO-2022-JP has no half-width katakana
)
def test_short_japanese_texts(codec: str, text: str) -> None:
    """Short texts, half-width katakana and mostly-ASCII texts are not mistaken for another encoding."""
    decoded, _ = decode_text("x.txt", text.encode(codec))
    assert decoded == text


def test_cp932_extensions_are_not_reported_as_shift_jis() -> None:
    """NEC/IBM extensions (①, ㈱, 髙) need cp932; plain JIS X 0208 text is reported as shift_jis."""
    assert decode_text("x", ("①㈱" + PARAGRAPH).encode("cp932"))[1] == "cp932"
    assert decode_text("x", PARAGRAPH.encode("cp932"))[1] == "shift_jis"


def test_kanji_only_lines_stay_japanese() -> None:
    """A title without kana (芥川龍之介, 【例１】) still decodes as Japanese, in Shift_JIS and EUC-JP."""
    for text in ("芥川龍之介", "【類似度：５】", "羅生門"):
        for codec in ("shift_jis", "euc_jp"):
            assert decode_text("x", text.encode(codec))[0] == text


@pytest.mark.parametrize(
    ("text", "codec"),
    [
        ("Café crème brûlée à la française, déjà vu. “Hello”", "cp1252"),
        ("Zażółć gęślą jaźń. Pchnąć w tę łódź jeża lub ośm skrzyń fig.", "cp1250"),
        ("Привет, как дела? Это тестовый текст на русском языке.", "cp1251"),
        ("我们的产品质量很好，价格也很便宜。这是一段中文测试文字，用于检测编码。", "gb2312"),
        ("這是繁體中文的測試文字，用於檢測編碼。", "big5"),
        ("우리는 한국어 문장을 테스트합니다. 인코딩 검출입니다.", "euc_kr"),
    ],
)
def test_other_encodings_go_through_charset_normalizer(text: str, codec: str) -> None:
    """Non-Japanese legacy encodings are decoded correctly (Korean is not taken for EUC-JP kanji)."""
    decoded, encoding = decode_text("x", text.encode(codec))
    assert decoded == text
    assert text.encode(codec).decode(encoding) == text


def test_iso2022jp_is_recognised_before_utf8() -> None:
    """ISO-2022-JP is pure 7-bit, so it is valid UTF-8 too; the escape sequences decide."""
    raw = PARAGRAPH.encode("iso2022_jp")
    assert max(raw) < 0x80 and b"\x1b$B" in raw
    assert decode_text("x", raw) == (PARAGRAPH, "iso2022_jp")


def test_ascii_and_ansi_escapes_are_utf8() -> None:
    """Plain ASCII is UTF-8; terminal colour codes (ESC [) are not ISO-2022-JP."""
    assert decode_text("x", b"plain text\n") == ("plain text\n", "utf-8")
    assert decode_text("x", b"\x1b[31mred\x1b[0m log line\n")[1] == "utf-8"
    assert decode_text("x", b"") == ("", "utf-8")


def test_utf16_without_bom() -> None:
    """ASCII-heavy UTF-16 without a BOM is recognised from its NUL pattern."""
    text = "Hello, world. これはテストです。\n" * 5
    assert decode_text("x", text.encode("utf-16-le")) == (text, "utf-16-le")
    assert decode_text("x", text.encode("utf-16-be")) == (text, "utf-16-be")


@pytest.mark.parametrize("seed", range(5))
def test_random_bytes_raise(seed: int) -> None:
    """Random bytes (with or without NULs and control bytes) never come back as text."""
    rng = random.Random(seed)
    for raw in (rng.randbytes(4096), bytes(rng.randrange(0x80, 0x100) for _ in range(2048)), rng.randbytes(64)):
        with pytest.raises(EncodingDetectionError) as info:
            decode_text("blob.txt", raw)
        assert "blob.txt" in str(info.value)
        assert info.value.code == "UNKNOWN_ENCODING"


def test_binary_file_raises_through_load_path(tmp_path: Path) -> None:
    """A PNG renamed to .txt fails with a clear message instead of storing mojibake."""
    path = tmp_path / "image.txt"
    path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    with pytest.raises(EncodingDetectionError, match="binary"):
        load_path(path)


def test_bad_bom_raises() -> None:
    """A UTF-8 BOM followed by invalid UTF-8 is an error, not a guess."""
    with pytest.raises(EncodingDetectionError, match="byte order mark"):
        decode_text("x", codecs.BOM_UTF8 + "日本語".encode("shift_jis"))


def test_japanese_score_separates_right_from_wrong() -> None:
    """EUC-JP bytes read as cp932 (half-width katakana soup) score far below the right decoding."""
    raw = PARAGRAPH.encode("euc_jp")
    right, kana = japanese_score(raw.decode("euc_jp"))
    assert right > 0.9 and kana > 0.3
    wrong_score, wrong_kana = japanese_score(raw.decode("cp932", errors="ignore"))
    assert wrong_kana == 0 and wrong_score < 0.9


@pytest.mark.parametrize("newline", ["\r\n", "\r"])
def test_load_text_normalises_line_endings(newline: str, tmp_path: Path) -> None:
    """CRLF and lone CR both become LF."""
    path = tmp_path / "memo.txt"
    path.write_bytes(newline.join(["一行目", "二行目", "三行目"]).encode("shift_jis"))
    [document] = load_text(path, LoadOptions())
    assert document.content == "一行目\n二行目\n三行目"
    assert document.metadata["encoding"] == "shift_jis"
    assert document.metadata["source"] == str(path)
    assert document.metadata["filename"] == "memo.txt"


# -- Markdown -----------------------------------------------------------------------------

GUIDE = """\
Intro line before any heading.

# Guide

Welcome.

## Install

Run the installer.

### Linux

```bash
# this is a shell comment, not a heading
apt-get install bunko
```

~~~
## also not a heading
~~~

<!--
## Commented Out
-->

### macOS ###

Use brew. <!-- inline note --> Done.

## Usage

    # indented code, not a heading

#hashtag is not a heading either
"""


def test_markdown_sections_and_hierarchy(tmp_path: Path) -> None:
    """One part per section, with the heading path; fences, comments and indented code are not headings."""
    path = tmp_path / "guide.md"
    path.write_text(GUIDE, encoding="utf-8")
    [document] = load_markdown(path, LoadOptions())
    parts = document.parts or []
    assert [p.metadata.get("hierarchy") for p in parts] == [
        [],
        ["Guide"],
        ["Guide", "Install"],
        ["Guide", "Install", "Linux"],
        ["Guide", "Install", "macOS"],
        ["Guide", "Usage"],
    ]
    assert [p.metadata.get("section") for p in parts[1:]] == ["Guide", "Install", "Linux", "macOS", "Usage"]
    assert parts[0].text == "Intro line before any heading."
    assert parts[3].text.startswith("### Linux\n\n```bash\n# this is a shell comment")
    assert "## also not a heading" in parts[3].text
    assert "Commented Out" not in document.content and "inline note" not in document.content
    assert parts[4].text == "### macOS\n\nUse brew.  Done."
    assert "#hashtag is not a heading either" in parts[5].text
    assert document.metadata["title"] == "Guide"
    assert document.metadata["encoding"] == "utf-8"
    assert document.content == "\n\n".join(p.text for p in parts)


def test_markdown_in_shift_jis_with_front_matter(tmp_path: Path) -> None:
    """Markdown uses the same encoding detection; a front matter title wins and is not content."""
    text = "---\ntitle: 社内マニュアル\n# not a heading: YAML comment\n---\n\n## はじめに\n\nこれは説明です。\r\n"
    path = tmp_path / "manual.md"
    path.write_bytes(text.encode("cp932"))
    [document] = load_path(path)
    assert document.metadata["encoding"] == "shift_jis"
    assert document.metadata["title"] == "社内マニュアル"
    assert [p.metadata["section"] for p in document.parts or []] == ["はじめに"]
    assert document.content == "## はじめに\n\nこれは説明です。"


def test_markdown_without_level_one_heading_takes_the_first(tmp_path: Path) -> None:
    """Without a level-1 heading the first heading is the title; a file without headings has none."""
    path = tmp_path / "a.md"
    path.write_text("### 小見出し\n\n本文。\n\n## 中見出し\n\n本文2。\n", encoding="utf-8")
    [document] = load_markdown(path, LoadOptions())
    assert document.metadata["title"] == "小見出し"
    assert [p.metadata["hierarchy"] for p in document.parts or []] == [["小見出し"], ["中見出し"]]
    plain = tmp_path / "b.md"
    plain.write_text("ただの文章です。\n", encoding="utf-8")
    [document] = load_markdown(plain, LoadOptions())
    assert "title" not in document.metadata
    assert document.content == "ただの文章です。"


# -- JSON ---------------------------------------------------------------------------------


def _write_json(tmp_path: Path, data: Any, name: str = "data.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
    return path


def test_json_content_path_dotted(tmp_path: Path) -> None:
    """``data.body`` picks the text; other top-level scalars become metadata."""
    path = _write_json(tmp_path, {"title": "お知らせ", "data": {"body": "本日は晴天なり。", "n": 1}})
    [document] = load_json(path, LoadOptions(content_path="data.body"))
    assert document.content == "本日は晴天なり。"
    assert document.metadata["title"] == "お知らせ"
    assert document.metadata["content_path"] == "data.body"
    assert document.metadata["source"] == str(path)
    assert document.metadata["language"] == "ja"


def test_json_content_path_with_index(tmp_path: Path) -> None:
    """``items.0.text``: numeric segments index arrays."""
    path = _write_json(tmp_path, {"items": [{"text": "一つ目"}, {"text": "二つ目"}]})
    assert load_json(path, LoadOptions(content_path="items.1.text"))[0].content == "二つ目"
    assert load_json(path, LoadOptions(content_path="items.-1.text"))[0].content == "二つ目"


def test_json_without_content_path_is_pretty_printed(tmp_path: Path) -> None:
    """The whole JSON, indented, with Japanese kept as is (ensure_ascii=False)."""
    data = {"名前": "文庫", "tags": ["a", "b"]}
    path = _write_json(tmp_path, data)
    [document] = load_json(path, LoadOptions())
    assert document.content == json.dumps(data, ensure_ascii=False, indent=2)
    assert "\\u" not in document.content


def test_json_array_at_content_path_gives_one_document_per_item(tmp_path: Path) -> None:
    """Each item is a document with a stable ``<path>#<index>`` source and its scalar fields as metadata."""
    data = {
        "items": [
            {"id": 7, "title": "一", "text": "最初の記事です。", "nested": {"x": 1}, "source": "ignored"},
            {"id": 8, "title": "二", "body": "二番目の記事です。"},
            "ただの文字列",
        ]
    }
    path = _write_json(tmp_path, data)
    documents = load_path(path, LoadOptions(content_path="items"))
    assert [d.content for d in documents] == ["最初の記事です。", "二番目の記事です。", "ただの文字列"]
    assert [d.metadata["source"] for d in documents] == [f"{path}#0", f"{path}#1", f"{path}#2"]
    assert documents[0].metadata["id"] == 7 and documents[0].metadata["title"] == "一"
    assert "text" not in documents[0].metadata and "nested" not in documents[0].metadata
    assert "body" not in documents[1].metadata
    assert all(d.metadata["kind"] == "json" for d in documents)
    assert all(d.metadata["filename"] == "data.json" for d in documents)


def test_json_array_items_with_text_key(tmp_path: Path) -> None:
    """``options.extra['text_key']`` names the text field of object items."""
    path = _write_json(tmp_path, [{"q": "質問", "a": "回答です。"}], name="faq.json")
    opts = LoadOptions(content_path="0", extra={"text_key": "a"})
    # "0" resolves to the object itself, not an array: the object is pretty-printed
    assert json.loads(load_json(path, opts)[0].content) == {"q": "質問", "a": "回答です。"}
    wrapped = _write_json(tmp_path, {"faq": [{"q": "質問", "a": "回答です。"}]}, name="faq2.json")
    [document] = load_json(wrapped, LoadOptions(content_path="faq", extra={"text_key": "a"}))
    assert document.content == "回答です。"
    assert document.metadata["q"] == "質問"


def test_jsonl_one_document_per_line(tmp_path: Path) -> None:
    """A .jsonl file gives one document per record; content_path applies to each record."""
    path = tmp_path / "records.jsonl"
    lines = [{"id": i, "doc": {"text": f"記録{i}です。"}} for i in range(3)]
    path.write_text("\n".join(json.dumps(x, ensure_ascii=False) for x in lines) + "\n\n", encoding="utf-8")
    documents = load_path(path, LoadOptions(content_path="doc.text"))
    assert [d.content for d in documents] == ["記録0です。", "記録1です。", "記録2です。"]
    assert [d.metadata["source"] for d in documents] == [f"{path}#{i}" for i in range(3)]
    assert [d.metadata["id"] for d in documents] == [0, 1, 2]
    plain = load_path(path)
    assert json.loads(plain[1].content) == lines[1]


def test_json_missing_path_names_the_key(tmp_path: Path) -> None:
    """A missing key is a LoaderError saying which key and where."""
    path = _write_json(tmp_path, {"data": {"body": "x", "title": "t"}})
    with pytest.raises(LoaderError, match=r"'bdy' not found at data \(keys there: body, title\)"):
        load_json(path, LoadOptions(content_path="data.bdy"))
    with pytest.raises(LoaderError, match="'5' is not an index"):
        load_json(_write_json(tmp_path, {"items": [1]}, "b.json"), LoadOptions(content_path="items.5"))
    with pytest.raises(LoaderError, match="not an object"):
        load_json(path, LoadOptions(content_path="data.body.deeper"))
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text('{"text": "a"}\n{"other": "b"}\n', encoding="utf-8")
    with pytest.raises(LoaderError, match="line 2"):
        load_json(jsonl, LoadOptions(content_path="text"))


def test_invalid_json_reports_line_and_column(tmp_path: Path) -> None:
    """Invalid JSON is a CorruptDocumentError with the position."""
    path = tmp_path / "bad.json"
    path.write_text('{\n  "a": 1,\n  "b": ,\n}\n', encoding="utf-8")
    with pytest.raises(CorruptDocumentError, match=r"line 3, column 8"):
        load_json(path, LoadOptions())
    jsonl = tmp_path / "bad.jsonl"
    jsonl.write_text('{"a": 1}\n\n{"a": 2\n', encoding="utf-8")
    with pytest.raises(CorruptDocumentError, match=r"line 3, column"):
        load_json(jsonl, LoadOptions())


def test_json_in_shift_jis(tmp_path: Path) -> None:
    """Legacy-encoded JSON is decoded like text."""
    path = tmp_path / "sjis.json"
    path.write_bytes(json.dumps({"本文": "日本語のテキストです。"}, ensure_ascii=False).encode("cp932"))
    [document] = load_json(path, LoadOptions(content_path="本文"))
    assert document.content == "日本語のテキストです。"
    assert document.metadata["encoding"] == "shift_jis"


def test_json_array_skips_items_without_text(tmp_path: Path) -> None:
    """Blank items are left out but the others keep their index in ``source``; all blank is NoTextError."""
    path = _write_json(tmp_path, {"rows": ["一行目", "", None, "四行目"]})
    documents = load_json(path, LoadOptions(content_path="rows"))
    assert [d.metadata["source"] for d in documents] == [f"{path}#0", f"{path}#3"]
    empty = _write_json(tmp_path, {"rows": ["", "  "]}, "empty.json")
    with pytest.raises(NoTextError):
        load_json(empty, LoadOptions(content_path="rows"))
