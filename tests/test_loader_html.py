"""HTML loader: main content only (trafilatura), sections, title, language and decoding."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("trafilatura")

from bunko.errors import LoaderError
from bunko.loaders import LoadOptions, load_path
from bunko.loaders.html import decode_html, html_to_document, load_html
from tests.conftest import FIXTURES, SHARED_DOCUMENTS, manifest_params


def _squash(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("record", manifest_params("html"))
def test_manifest_pages(record: dict) -> None:
    path = record["path"]
    [document] = load_path(path)
    text = _squash(document.content)
    for wanted in record["must_contain"]:
        assert _squash(wanted) in text, wanted
    for boilerplate in record.get("must_not_contain", []):
        assert _squash(boilerplate) not in text, boilerplate
    meta = document.metadata
    assert meta["language"] == record["language"]
    assert meta["title"]
    assert meta["source"] == str(path.resolve())
    assert meta["source_type"] == "file" and meta["mime_type"] == "text/html" and meta["kind"] == "html"
    assert meta["filesize"] == record["bytes"]
    assert document.parts and document.content == "\n\n".join(p.text for p in document.parts)
    # nothing from <script>/<style>
    for code in ("function(", "var ", "{display:", "window.", "document.getElementById"):
        assert code not in document.content


def test_wiki_style_page_sections_and_math() -> None:
    """Sections with their hierarchy, no edit links, no empty Contents heading, inline math kept as text."""
    [document] = load_html(FIXTURES / "pocket_library.html", LoadOptions())
    sections = [p.metadata.get("section") for p in document.parts or []]
    assert sections == ["Pocket library", "History", "Pricing", "References"]
    pricing = next(p for p in document.parts or [] if p.metadata.get("section") == "Pricing")
    assert pricing.text.startswith("## Pricing\n")
    assert pricing.metadata["hierarchy"] == ["Pocket library", "Pricing"]
    assert pricing.metadata["heading_level"] == 2
    assert "[edit]" not in document.content and "edit" not in _squash(document.content).lower()
    assert "## Contents" not in document.content  # an empty heading is dropped
    # inline math keeps its TeX instead of leaving a hole in the sentence
    assert "Given a print run of n copies" in document.content
    assert document.metadata["title"] == "Pocket library"


def test_shift_jis_page_is_decoded_from_its_meta_charset() -> None:
    [document] = load_html(FIXTURES / "toshokan_sjis.html", LoadOptions())
    assert document.metadata["encoding"] == "cp932"  # what browsers use for the label Shift_JIS
    assert document.metadata["title"] == "図書館だより" and document.metadata["language"] == "ja"
    assert "明治時代の文庫本を展示しています" in document.content


@pytest.mark.shared_data
def test_wikipedia_sections_and_math() -> None:
    path = SHARED_DOCUMENTS / "en.wikipedia.org.tsne.html"
    [document] = load_html(path, LoadOptions())
    sections = [p.metadata.get("section") for p in document.parts or []]
    assert "Details" in sections and "References" in sections
    details = next(p for p in document.parts or [] if p.metadata.get("section") == "Details")
    assert details.text.startswith("## Details\n")
    assert details.metadata["hierarchy"] == ["t-distributed stochastic neighbor embedding", "Details"]
    assert details.metadata["heading_level"] == 2
    assert "[edit]" not in document.content  # Wikipedia's edit links
    assert "## Contents" not in document.content  # an empty heading is dropped
    # inline math keeps its TeX instead of leaving holes in the sentence
    assert "Given a set of N high-dimensional objects" in document.content


JA_ARTICLE = """<!DOCTYPE html>
<html lang="ja-JP"><head><meta charset="{charset}"><title>文庫の歴史 | サンプルサイト</title>
<style>.x {{ color: red }}</style><script>var tracking = "スクリプトの中身";</script></head>
<body>
<header><div class="logo">サンプルサイト</div></header>
<nav><ul><li><a href="/">ホーム</a></li><li><a href="/about">会社概要</a></li>
<li><a href="/contact">お問い合わせ</a></li></ul></nav>
<main><article>
<h1>文庫の歴史</h1>
<p>日本の<ruby>文庫<rp>(</rp><rt>ぶんこ</rt><rp>)</rp></ruby>本は、小型で安価な書籍の形式として広く親しまれてきました。昭和の初めに登場して以来、多くの読者が通勤や通学の途中で本を読む習慣を支えてきたのです。</p>
<h2>誕生</h2>
<h3>最初の文庫</h3>
<p>最初期の文庫は古典の普及を目的としており、手頃な価格で名作を届けることを使命としていました。出版社は紙の質や装丁を工夫し、持ち運びやすい大きさを追求しました。</p>
<h2>現在</h2>
<p>現在では新作の小説も文庫で刊行されることが多く、電子書籍と並んで読書文化の重要な一部となっています。書店には各社の文庫が並び、読者は気軽に新しい作家と出会うことができます。</p>
</article></main>
<footer><p>Copyright 2024 サンプルサイト 無断転載を禁じます</p></footer>
</body></html>"""


def _ja(charset: str = "utf-8", **replace: str) -> str:
    page = JA_ARTICLE.format(charset=charset)
    for old, new in replace.items():
        page = page.replace(old, new)
    return page


def test_japanese_page_ruby_sections_and_metadata() -> None:
    document = html_to_document(_ja("shift_jis").encode("cp932"), source="ja.html", base_metadata={"tag": "x"})
    text = document.content
    assert "日本の文庫本は、小型で安価な書籍" in text
    assert "ぶんこ" not in text and "(" not in text  # <rt> and <rp> dropped
    for boilerplate in ("ホーム", "会社概要", "スクリプトの中身", "color", "無断転載", "サンプルサイト"):
        assert boilerplate not in text
    meta = document.metadata
    assert meta["title"] == "文庫の歴史"
    assert meta["language"] == "ja"  # from lang="ja-JP"
    assert meta["encoding"] == "cp932"
    assert meta["tag"] == "x" and meta["source"] == "ja.html"
    assert "published_at" not in meta  # "Copyright 2024" in the footer is not a date
    parts = document.parts or []
    assert [p.metadata.get("section") for p in parts] == ["文庫の歴史", "最初の文庫", "現在"]
    assert parts[1].metadata["hierarchy"] == ["文庫の歴史", "誕生", "最初の文庫"]
    # "## 誕生" has no text of its own; it stays in front of its subsection
    assert parts[1].text.startswith("## 誕生\n\n### 最初の文庫\n\n最初期の文庫は")
    assert parts[2].metadata["hierarchy"] == ["文庫の歴史", "現在"]
    assert text.startswith("# 文庫の歴史\n\n")


def test_language_detected_without_lang_attribute() -> None:
    page = _ja(**{' lang="ja-JP"': ""})
    document = html_to_document(page, source="x", base_metadata={"language": "und"})
    assert document.metadata["language"] == "ja"


@pytest.mark.parametrize(
    ("raw", "http_charset", "encoding"),
    [
        (_ja("shift_jis").encode("cp932"), None, "cp932"),  # <meta charset>
        (_ja("euc-jp").encode("euc_jp"), None, "euc_jp"),
        (_ja("utf-8").encode("cp932"), "Shift_JIS", "cp932"),  # HTTP charset beats <meta>
        (b"\xef\xbb\xbf" + _ja("shift_jis").encode("utf-8"), "euc-jp", "utf-8-sig"),  # BOM beats both
        (_ja("utf-16").encode("utf-8"), None, "utf-8"),  # <meta> cannot say UTF-16
        (_ja("bogus-charset").encode("utf-8"), None, "utf-8"),  # unknown label: ignored
        (_ja("utf-8").encode("utf-16"), None, "utf-16"),  # BOM
    ],
)
def test_decoding_order(raw: bytes, http_charset: str | None, encoding: str) -> None:
    text, used = decode_html(raw, http_charset)
    assert used == encoding
    assert "最初期の文庫は古典の普及を目的としており" in text
    document = html_to_document(raw, source="x", base_metadata={}, charset=http_charset)
    assert "最初期の文庫は古典の普及を目的としており" in document.content


def test_undeclared_legacy_encoding_is_detected() -> None:
    page = _ja(**{'<meta charset="{charset}">'.format(charset="utf-8"): ""})
    raw = page.encode("cp932")
    text, used = decode_html(raw)
    assert "最初期の文庫は古典の普及を目的としており" in text
    assert used.replace("_", "").lower() in ("cp932", "shiftjis", "shiftjis2004", "shiftjisx0213")


def test_load_html_from_file(tmp_path: Path) -> None:
    path = tmp_path / "bunko.htm"
    path.write_bytes(_ja("shift_jis").encode("cp932"))
    [document] = load_path(path)
    assert document.metadata["source"] == str(path.resolve())
    assert document.metadata["filename"] == "bunko.htm"
    assert document.metadata["kind"] == "html"
    assert document.metadata["language"] == "ja"
    assert "現在では新作の小説も文庫で刊行される" in document.content


@pytest.mark.parametrize(
    "page",
    [
        b"",
        b"   \n  ",
        b"<html><head><title>t</title><script>var a = 1;</script></head><body></body></html>",
        b"<html><body><nav><a href='/'>Home</a> <a href='/x'>Other page</a></nav><style>p{}</style></body></html>",
    ],
)
def test_page_without_main_content_is_an_error(page: bytes) -> None:
    with pytest.raises(LoaderError, match="no main content"):
        html_to_document(page, source="empty.html", base_metadata={})


def test_page_without_headings_is_one_part() -> None:
    body = "<p>" + "This paragraph has no heading above it but it is the content of the page. " * 6 + "</p>"
    document = html_to_document(f"<html><body><article>{body}</article></body></html>", source="x", base_metadata={})
    assert len(document.parts or []) == 1
    assert document.parts[0].metadata == {}  # type: ignore[index]
    assert document.metadata["language"] == "en"


def test_lists_and_tables_keep_their_rows() -> None:
    intro = "<p>" + "The table below lists the formats the loader understands and what each one keeps. " * 4 + "</p>"
    page = f"""<html lang="en"><body><article><h1>Formats</h1>{intro}
    <ul><li>PDF pages</li><li>Word headings<ul><li>nested item</li></ul></li></ul>
    <table><tr><th>Format</th><th>Parts</th></tr><tr><td>Word</td><td>sections</td></tr></table>
    </article></body></html>"""
    document = html_to_document(page, source="x", base_metadata={})
    assert "- PDF pages" in document.content
    assert "  - nested item" in document.content
    assert "Format | Parts" in document.content and "Word | sections" in document.content
