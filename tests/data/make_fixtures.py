"""Write the small test documents of ``tests/data`` and their manifest ``documents.jsonl``.

    python tests/data/make_fixtures.py            # rewrite the files beside this script
    python tests/data/make_fixtures.py OUT_DIR    # write them somewhere else

Every file is generated here from text written for these tests or in the public domain
(see README.md), so the repository needs no outside corpus to test its loaders. The PDFs
are written object by object (no PDF library): text in the standard Helvetica font, and
Japanese in non-embedded CJK fonts that every PDF reader knows by name (Adobe-Japan1,
horizontal and vertical), scanned-looking pages (an image and no text layer), RC4
encryption (a user password, and an owner password only), a damaged cross-reference table
and a file that is no PDF at all. Word and PowerPoint files come from python-docx and
python-pptx with fixed ZIP timestamps; the Excel workbook is written part by part (no spreadsheet
library), as Excel writes one. Output is byte-for-byte reproducible for every
file but the Office ones (their bytes depend on the python-docx/python-pptx version; their
text does not).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import sys
import zipfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

# --- texts ---------------------------------------------------------------------------------

# 『春と修羅』序, Miyazawa Kenji (1896-1933), published 1924: public domain. The opening and the closing
# lines, one line per vertical column.
HARU_TO_SHURA = [
    "序",
    "わたくしといふ現象は",
    "假定された有機交流電燈の",
    "ひとつの青い照明です",
    "（あらゆる透明な幽霊の複合体）",
    "風景やみんなといっしょに",
    "せはしくせはしく明滅しながら",
    "いかにもたしかにともりつづける",
    "因果交流電燈の",
    "ひとつの青い照明です",
    "（ひかりはたもち、その電燈は失はれ）",
    "すべてこれらの命題は",
    "心象や時間それ自身の性質として",
    "第四次延長のなかで主張されます",
    "大正十三年一月廿日",
    "宮澤賢治",
]

# Written for these tests.
REPORT_PAGES = [
    [
        "A Short History of Pocket Libraries",
        "",
        "Small, cheap books have been printed for as long as there have been presses.",
        "Publishers learned early that a reader on a train wants a book that fits in",
        "a coat pocket, costs little and can be read in short sittings.",
    ],
    [
        "Paper and Binding",
        "",
        "Cheap paper and glued bindings made the pocket book possible. A sewn binding",
        "lasts longer, but the glued spine let a printer bind thousands of copies a day.",
        "Readers accepted yellowing pages in exchange for a price they could afford.",
    ],
    [
        "Libraries on Every Platform",
        "",
        "Railway stations sold pocket books from kiosks, and later from vending machines.",
        "A traveller could buy a novel in Copenhagen and leave it for the next reader in",
        "Hamburg. Some stations kept a shelf where travellers exchanged finished books.",
    ],
]

BOUSAI_PAGES = [
    [
        "家庭の防災備蓄ガイド",
        "",
        "大きな地震の後は、電気や水道が止まることがあります。",
        "飲料水は一人一日三リットルを目安に、少なくとも三日分を備蓄しましょう。",
        "非常食は、調理せずに食べられる缶詰やレトルト食品が便利です。",
    ],
    [
        "持ち出し袋の中身",
        "",
        "懐中電灯、携帯ラジオ、予備の電池、救急用品を入れておきます。",
        "現金は小銭も含めて用意し、身分証明書の写しも忘れずに。",
        "年に一度、賞味期限と電池の残量を確かめてください。",
    ],
]

ENCRYPTED_LINES = [
    "Quarterly Budget Notes",
    "",
    "The reading room renovation stays within the approved budget.",
    "Night opening hours begin in the spring term.",
]

OWNER_ONLY_LINES = [
    "Opening Hours",
    "",
    "The library opens at nine and closes at eight on weekdays.",
    "On Sundays the reading room is closed for cleaning.",
]

DAMAGED_LINES = [
    "Notes on Readable Files",
    "",
    "Readability counts, even for a file whose table of offsets is wrong.",
    "A careful reader rebuilds the table from the objects themselves.",
]

SCANNED_TEXT = ["Page two is the only page with a text layer.", "The other pages are images of paper."]

# Written for these tests. Words broken at line ends: by a hyphen (com-pile, well-known, Schwarz-Weiß,
# COVID-19) or by a soft hyphen U+00AD (hy-phen), and a soft hyphen in the middle of a line.
HYPHENATION_LINES = [
    "Hyphenation at Line Ends",
    "",
    "A well-known rule of typesetting breaks a long word at",
    "the end of a line, and the reader has to com-",
    "pile the two halves. A reader of a well-",
    "known text hardly notices it. Some fonts print a soft hy\u00ad",
    "phen instead, and a soft hyphen inside a line is never",
    "printed: mid\u00adline. Compounds keep their hyphen, as in the",
    "Schwarz-",
    "Weiß photographs of the COVID-",
    "19 years.",
]

# Written for these tests: the two columns of a page, one line per item.
COLUMN_TITLE = "Reading Room and Bindery"
LEFT_COLUMN = [
    "The reading room opens at nine in the",
    "morning and closes at eight in the evening.",
    "Visitors sign the register at the desk and",
    "leave their coats and bags in the lockers",
    "beside the entrance. Pencils are allowed,",
    "ink is not. The staff bring books from the",
    "closed stacks within twenty minutes of a",
    "request; rare books are read at the long",
    "table under the north window, where the",
    "light is best. Photographs need the per-",
    "mission of the librarian on duty, who",
    "notes the pages in the daybook.",
]
RIGHT_COLUMN = [
    "The bindery in the basement repairs about",
    "forty volumes a week. Loose boards are",
    "reattached with linen tape, torn pages are",
    "mended with thin Japanese tissue and wheat",
    "starch paste, and brittle newspapers are",
    "boxed rather than rebound. Each repair is",
    "recorded on a slip kept inside the back",
    "cover, so the next binder knows which",
    "materials were used. The bindery also",
    "makes the grey boxes for the map collec-",
    "tion and the cloth covers for the music",
    "scores that circulate most often.",
]

# Written for these tests: horizontal Japanese set with extra space after 、 and around （ ）, as
# gazettes set proportional punctuation; readers see the gaps and put spaces there.
SPACING_LINES = [
    "道路の横断について",
    "",
    "歩行者は、道路を横断してはならない。",
    "自転車は、横断歩道（自転車横断帯を含む。）を徐行して通行する。",
    "詳しくは、bunko の検索画面で「横断」と入力してください。",
    "Latin words keep their spaces.",
]

# Akutagawa Ryunosuke (1892-1927), 「羅生門」 (1915): public domain. Its first paragraph.
RASHOMON = (
    "羅生門\n"
    "芥川龍之介\n"
    "\n"
    "　ある日の暮方の事である。一人の下人が、羅生門の下で雨やみを待っていた。\n"
    "　広い門の下には、この男のほかに誰もいない。ただ、所々丹塗の剥げた、大きな円柱に、"
    "蟋蟀が一匹とまっている。羅生門が、朱雀大路にある以上は、この男のほかにも、"
    "雨やみをする市女笠や揉烏帽子が、もう二三人はありそうなものである。"
    "それが、この男のほかには誰もいない。\n"
)
RASHOMON_HEADER = "The text below is in the public domain.\nRashomon by AKUTAGAWA Ryunosuke\n\n"

# One notice in four encodings (written for these tests).
NOTICE = (
    "文庫 プロジェクトのお知らせ\n"
    "\n"
    "このファイルは、文字コードの判定を試すための文書です。\n"
    "同じ文章を UTF-8、Shift_JIS、EUC-JP、ISO-2022-JP で保存しています。\n"
    "全角の記号「」（）、。・ー と半角の English words も含みます。\n"
    "検索エンジンは、どの文字コードでも同じ本文を読み取れなければなりません。\n"
)
CP932_NOTICE = (
    "㈱文庫 社内連絡\n"
    "\n"
    "①から⑩までの番号付きの項目は、Windows の文字コード（CP932）にだけある文字です。\n"
    "Ⅱ期とⅢ期の担当は髙橋さんと﨑山さんです。\n"
)

MARKDOWN = """\
# 文庫の使い方

文庫は、日本語の文書を検索するためのエンジンです。

<!--
## How to use bunko
This English heading is a comment and is not a section.
-->

## インストール

次のコマンドでインストールします。

```sh
# このコメント行は見出しではありません
pip install bunko
```

### 追加の機能

PDF や Word の文書を読むには、追加の依存関係を入れます。<br>

## 検索

キーワード検索とベクトル検索を組み合わせて使えます。

### ハイブリッド検索

二つの結果を順位で融合します。
"""

MARKDOWN_EN = """\
Intro text before any heading.

## Getting Started

Run the `ingest` command on a folder of documents.

## Configuration

Settings come from flags, the environment and a file.
"""

HTML_JA = """\
<!DOCTYPE html>
<html lang="ja"><head><meta charset="utf-8"><title>非常用持ち出し袋の準備 | 防災ノート</title>
<style>.menu {{ display: flex }}</style>
<script>window.dataLayer = window.dataLayer || []; function track() {{ return "計測"; }}</script>
</head><body>
<header><div class="logo">防災ノート</div>
<nav><ul><li><a href="/">トップページ</a></li><li><a href="/news">新着情報</a></li>
<li><a href="/contact">お問い合わせ窓口</a></li></ul></nav></header>
<main><article>
<h1>非常用持ち出し袋の準備</h1>
<p>災害が起きたとき、すぐに持ち出せる袋を玄関の近くに置いておきましょう。{extra}</p>
<h2>入れておくもの</h2>
<p>飲料水、非常食、<ruby>懐中電灯<rp>(</rp><rt>かいちゅうでんとう</rt><rp>)</rp></ruby>、携帯ラジオ、救急用品、
現金、身分証明書の写しを入れておきます。重さは背負って歩ける程度にしてください。</p>
<ul><li>飲料水は一人一日三リットル</li><li>非常食は三日分</li></ul>
<h2>点検の時期</h2>
<p>年に一度、防災の日に中身を点検し、賞味期限が近いものを入れ替えると安心です。
家族で避難場所と連絡方法を確かめておくことも大切です。</p>
</article></main>
<footer><p>Copyright 防災ノート編集部</p><p>関連記事：台風への備え</p></footer>
</body></html>
"""

HTML_SJIS = """\
<!DOCTYPE html>
<html><head><meta http-equiv="Content-Type" content="text/html; charset=Shift_JIS">
<title>図書館だより</title></head><body>
<div id="menu"><ul><li><a href="/">ホーム</a></li><li><a href="/map">館内のご案内</a></li></ul></div>
<article>
<h1>図書館だより</h1>
<p>春の特別展示として、明治時代の文庫本を展示しています。小さな本の中に、当時の人々の暮らしが生き生きと描かれています。
手に取って読める複製も用意しましたので、ぜひ閲覧室でお楽しみください。</p>
<p>展示は四月三十日まで、閲覧室の入口で行っています。どなたでも自由にご覧いただけます。
会期中の土曜日には、司書による解説の時間も設けています。</p>
</article>
<footer><p>掲示板の更新は毎週月曜日です。</p></footer>
</body></html>
"""

HTML_WIKI = """\
<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Pocket library - Encyclopedia</title>
<script>var mw = {config: {}}; document.getElementById("x");</script></head>
<body>
<div id="mw-navigation"><nav><ul><li><a href="/main">Main page</a></li><li><a href="/random">Random article</a></li>
</ul></nav></div>
<div id="content" class="mw-body"><h1 id="firstHeading">Pocket library</h1>
<div id="bodyContent"><div class="mw-parser-output">
<p>A <b>pocket library</b> is a series of small, inexpensive books sold for reading while travelling.
The format spread through railway bookstalls in the nineteenth century.</p>
<div id="toc" class="toc"><h2>Contents</h2><ul><li><a href="#History">1 History</a></li>
<li><a href="#Pricing">2 Pricing</a></li></ul></div>
<h2><span class="mw-headline" id="History">History</span>
<span class="mw-editsection">[<a href="/edit/1">edit</a>]</span></h2>
<p>The first series appeared when printers could bind thousands of copies a day with glued spines.
Readers bought them at stations and left them for the next traveller.</p>
<h2><span class="mw-headline" id="Pricing">Pricing</span>
<span class="mw-editsection">[<a href="/edit/2">edit</a>]</span></h2>
<p>Given a print run of <span class="mwe-math-element"><math xmlns="http://www.w3.org/1998/Math/MathML"
alttext="{\\displaystyle n}"><semantics><mi>n</mi><annotation encoding="application/x-tex">{\\displaystyle n}
</annotation></semantics></math></span> copies, the cost per copy falls roughly as a fixed cost divided by the run
plus the cost of paper.
Publishers chose the largest run they expected to sell within a year.</p>
<h2><span class="mw-headline" id="References">References</span>
<span class="mw-editsection">[<a href="/edit/3">edit</a>]</span></h2>
<ul><li>A history of the book trade, volume two.</li><li>Railway bookstalls and their readers.</li></ul>
</div></div>
</div>
<div id="footer"><div id="catlinks" class="catlinks"><a href="/cats">Categories</a>: Book formats | Publishing</div>
<ul><li>This page was last edited on 1 April 2024.</li><li>Privacy policy</li></ul></div>
</body></html>
"""

FAQ_JSON = {
    "title": "よくある質問",
    "updated": "2024-04-01",
    "items": [
        {"id": 1, "question": "水は何日分備蓄すればいいですか？",
         "answer": "一人一日三リットルを目安に、最低三日分を備蓄してください。"},
        {"id": 2, "question": "非常食は何を選べばいいですか？",
         "answer": "調理しないで食べられる缶詰やレトルト食品が便利です。"},
        {"id": 3, "question": "持ち出し袋はどこに置きますか？",
         "answer": "玄関の近くなど、すぐに持ち出せる場所に置きます。"},
    ],
}

JSONL_RECORDS = [
    {"id": "n-1", "doc": {"text": "四月から閲覧室の開館時間が夜八時までになります。"}, "section": "お知らせ"},
    {"id": "n-2", "doc": {"text": "五月の連休中は休館します。返却ポストをご利用ください。"}, "section": "お知らせ"},
    {"id": "n-3", "doc": {"text": "New: the reading room now has power outlets at every desk."}, "section": "news"},
]


# --- a small PDF writer ------------------------------------------------------------------------------

PAD = bytes.fromhex("28bf4e5e4e758a4164004e56fffa01082e2e00b6d0683e802f0ca9fe6453697a")


def rc4(key: bytes, data: bytes) -> bytes:
    s = list(range(256))
    j = 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) % 256
        s[i], s[j] = s[j], s[i]
    out = bytearray()
    i = j = 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + s[i]) % 256
        s[i], s[j] = s[j], s[i]
        out.append(byte ^ s[(s[i] + s[j]) % 256])
    return bytes(out)


@dataclass
class Rc4Security:
    """The standard security handler, revision 3 (RC4, 128-bit key): Algorithms 2, 3 and 5 of ISO 32000-1."""

    user_password: str
    owner_password: str
    file_id: bytes
    permissions: int = -3904  # printing and copying allowed, changing not

    def __post_init__(self) -> None:
        padded_owner = (self.owner_password.encode("latin-1") + PAD)[:32]
        digest = hashlib.md5(padded_owner).digest()
        for _ in range(50):
            digest = hashlib.md5(digest).digest()
        owner = (self.user_password.encode("latin-1") + PAD)[:32]
        owner = rc4(digest, owner)
        for i in range(1, 20):
            owner = rc4(bytes(b ^ i for b in digest), owner)
        self.o = owner
        padded_user = (self.user_password.encode("latin-1") + PAD)[:32]
        key = hashlib.md5(padded_user + self.o + self.permissions.to_bytes(4, "little", signed=True)
                          + self.file_id).digest()
        for _ in range(50):
            key = hashlib.md5(key).digest()
        self.key = key
        user = rc4(key, hashlib.md5(PAD + self.file_id).digest())
        for i in range(1, 20):
            user = rc4(bytes(b ^ i for b in key), user)
        self.u = user + bytes(16)

    def encrypt(self, number: int, data: bytes) -> bytes:
        object_key = hashlib.md5(self.key + number.to_bytes(3, "little") + b"\x00\x00").digest()
        return rc4(object_key, data)

    def dictionary(self) -> bytes:
        return (b"<< /Filter /Standard /V 2 /R 3 /Length 128 /P %d /O <%s> /U <%s> >>"
                % (self.permissions, self.o.hex().encode(), self.u.hex().encode()))


class Str:
    """A PDF string: bytes written as ``<hex>`` (encrypted with the file when it is)."""

    def __init__(self, value: str | bytes) -> None:
        if isinstance(value, bytes):
            self.raw = value
        elif all(ord(c) < 128 for c in value):
            self.raw = value.encode("ascii")
        else:
            self.raw = b"\xfe\xff" + value.encode("utf-16-be")


@dataclass
class Stream:
    head: bytes  # the dictionary entries besides /Length
    data: bytes


@dataclass
class PdfWriter:
    objects: dict[int, Any] = field(default_factory=dict)
    info: dict[str, Str] = field(default_factory=dict)
    security: Rc4Security | None = None
    file_id: bytes = b""

    def add(self, value: Any) -> int:
        number = len(self.objects) + 1
        self.objects[number] = value
        return number

    def reserve(self) -> int:
        return self.add(None)

    def _value(self, number: int, value: Any) -> bytes:
        if isinstance(value, Str):
            raw = self.security.encrypt(number, value.raw) if self.security else value.raw
            return b"<" + raw.hex().encode() + b">"
        if isinstance(value, Stream):
            data = self.security.encrypt(number, value.data) if self.security else value.data
            return b"<< %s /Length %d >>\nstream\n" % (value.head, len(data)) + data + b"\nendstream"
        if isinstance(value, dict):
            return b"<< " + b" ".join(b"/%s %s" % (k.encode(), self._value(number, v)) for k, v in value.items()) \
                + b" >>"
        if isinstance(value, bytes):
            return value
        raise TypeError(value)

    def write(self, root: int, *, break_xref: bool = False) -> bytes:
        info_number = self.add(dict(self.info)) if self.info else None
        encrypt_number = self.add(self.security.dictionary()) if self.security else None
        out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
        offsets = {}
        for number, value in self.objects.items():
            offsets[number] = len(out)
            body = self._value(number, value) if number != encrypt_number else value
            out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
        start = len(out)
        size = len(self.objects) + 1
        if break_xref:  # the table is lost and startxref points at nothing: readers must rebuild it
            start = len(out) + 4096
        else:
            out += b"xref\n0 %d\n0000000000 65535 f \n" % size
            out += b"".join(b"%010d 00000 n \n" % offsets[number] for number in range(1, size))
        trailer = b"/Size %d /Root %d 0 R" % (size, root)
        if info_number:
            trailer += b" /Info %d 0 R" % info_number
        if encrypt_number:
            trailer += b" /Encrypt %d 0 R" % encrypt_number
        if self.file_id:
            trailer += b" /ID [<%s> <%s>]" % (self.file_id.hex().encode(), self.file_id.hex().encode())
        out += b"trailer\n<< %s >>\nstartxref\n%d\n%%%%EOF\n" % (trailer, start)
        return bytes(out)


def pdf_literal(text: str) -> bytes:
    raw = text.encode("cp1252")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def japan1_cids() -> dict[str, int]:
    """Unicode character -> Adobe-Japan1 CID (the lowest CID of each character), from pdfminer's tables."""
    from pdfminer.cmapdb import CMapDB

    table: dict[str, int] = {}
    for cid, char in sorted(CMapDB.get_unicode_map("Adobe-Japan1", False).cid2unichr.items()):
        table.setdefault(char, cid)
    return table


SOFT_HYPHEN_CMAP = (
    b"/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
    b"/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n"
    b"/CMapName /Adobe-Identity-UCS def /CMapType 2 def\n"
    b"1 begincodespacerange <00> <FF> endcodespacerange\n"
    b"1 beginbfrange <20> <7E> <0020> endbfrange\n"
    b"2 beginbfchar <AD> <00AD> <DF> <00DF> endbfchar\n"
    b"endcmap CMapName currentdict /CMap defineresource pop end end\n"
)


class Fonts:
    """The fonts of a document: created once, shared by its pages."""

    def __init__(self, pdf: PdfWriter) -> None:
        self.pdf = pdf
        self.numbers: dict[str, int] = {}

    def get(self, name: str) -> int:
        if name not in self.numbers:
            self.numbers[name] = self._make(name)
        return self.numbers[name]

    def _make(self, name: str) -> int:
        pdf = self.pdf
        if name == "Helvetica":
            return pdf.add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
        if name == "Helvetica-ToUnicode":  # a ToUnicode map that reads code 0xAD as the soft hyphen U+00AD
            cmap = pdf.add(Stream(b"", SOFT_HYPHEN_CMAP))
            return pdf.add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding "
                           b"/ToUnicode %d 0 R >>" % cmap)
        base, encoding = {
            "Mincho-UCS2-H": ("HeiseiMin-W3", "UniJIS-UCS2-H"),  # text as UTF-16BE code units
            "Ryumin-Identity-V": ("Ryumin-Light", "Identity-V"),  # text as CIDs, vertical, no ToUnicode
        }[name]
        descriptor = pdf.add(
            b"<< /Type /FontDescriptor /FontName /%s /Flags 6 /FontBBox [-170 -331 1024 903] /ItalicAngle 0 "
            b"/Ascent 723 /Descent -241 /CapHeight 709 /StemV 69 >>" % base.encode()
        )
        cid_font = pdf.add(
            b"<< /Type /Font /Subtype /CIDFontType0 /BaseFont /%s /CIDSystemInfo << /Registry (Adobe) "
            b"/Ordering (Japan1) /Supplement 2 >> /FontDescriptor %d 0 R /DW 1000 >>" % (base.encode(), descriptor)
        )
        return pdf.add(
            b"<< /Type /Font /Subtype /Type0 /BaseFont /%s-%s /Encoding /%s /DescendantFonts [%d 0 R] >>"
            % (base.encode(), encoding.encode(), encoding.encode(), cid_font)
        )


def horizontal_ops(lines: list[str], font: str, size: float = 12, top: float = 760, left: float = 56) -> bytes:
    """Lines of text, top to bottom, each placed with its own text matrix."""
    ops = [b"BT /F1 %g Tf" % size]
    for index, line in enumerate(lines):
        if not line:
            continue
        y = top - index * size * 1.6
        ops.append(b"1 0 0 1 %g %g Tm" % (left, y))
        if font.startswith("Helvetica"):
            ops.append(pdf_literal(line) + b" Tj")
        else:
            ops.append(b"<" + line.encode("utf-16-be").hex().encode() + b"> Tj")
    ops.append(b"ET")
    return b"\n".join(ops)


def vertical_ops(columns: list[str], cids: dict[str, int], size: float = 14) -> bytes:
    """Vertical columns (Identity-V: two-byte CIDs), right to left from the top right corner."""
    ops = [b"BT /F1 %g Tf" % size]
    for index, column in enumerate(columns):
        x = 540 - index * size * 1.8
        ops.append(b"1 0 0 1 %g 780 Tm" % x)
        missing = [c for c in column if c not in cids]
        if missing:
            raise SystemExit(f"no Adobe-Japan1 CID for {missing}")
        ops.append(b"<" + b"".join(cids[c].to_bytes(2, "big") for c in column).hex().encode() + b"> Tj")
    ops.append(b"ET")
    return b"\n".join(ops)


def column_ops(title: str, left: list[str], right: list[str], *, interleaved: bool, size: float = 10) -> bytes:
    """A title over two columns of lines. ``interleaved`` draws them row by row across the columns
    (a line of the left column, the line beside it in the right one, ...), as some producers do;
    otherwise the left column is drawn before the right one."""
    ops = [b"BT /F1 14 Tf", b"1 0 0 1 56 780 Tm", pdf_literal(title) + b" Tj", b"/F1 %g Tf" % size]
    placed = [[(56.0, 750 - row * size * 1.4, line) for row, line in enumerate(left)],
              [(316.0, 750 - row * size * 1.4, line) for row, line in enumerate(right)]]
    order = [item for pair in zip(*placed, strict=True) for item in pair] if interleaved else placed[0] + placed[1]
    for x, y, line in order:
        ops.append(b"1 0 0 1 %g %g Tm" % (x, y))
        ops.append(pdf_literal(line) + b" Tj")
    ops.append(b"ET")
    return b"\n".join(ops)


def spaced_ops(lines: list[str], gap: int = 300, size: float = 12) -> bytes:
    """Horizontal lines (UCS-2 text) with ``gap``/1000 em of extra space after 、 and around （ ）."""
    ops = [b"BT /F1 %g Tf" % size]
    for index, line in enumerate(lines):
        if not line:
            continue
        pieces, piece = [], ""
        for char in line:
            if char == "（" and piece:
                pieces.append(piece)
                piece = ""
            piece += char
            if char in "、）":
                pieces.append(piece)
                piece = ""
        pieces.append(piece)
        ops.append(b"1 0 0 1 56 %g Tm" % (760 - index * size * 1.6))
        hexes = [b"<" + p.encode("utf-16-be").hex().encode() + b">" for p in pieces if p]
        ops.append(b"[" + (b" %d " % -gap).join(hexes) + b"] TJ")
    ops.append(b"ET")
    return b"\n".join(ops)


def tier_ops(upper: list[str], lower: list[str], cids: dict[str, int], size: float = 14) -> bytes:
    """Vertical columns in two tiers (段), drawn column by column across the tiers: the first column of
    the upper tier, the first of the lower tier, the second of the upper, ..."""
    ops = [b"BT /F1 %g Tf" % size]
    for index, pair in enumerate(zip(upper, lower, strict=True)):
        for top, column in zip((780, 420), pair, strict=True):
            ops.append(b"1 0 0 1 %g %d Tm" % (540 - index * size * 1.8, top))
            ops.append(b"<" + b"".join(cids[c].to_bytes(2, "big") for c in column).hex().encode() + b"> Tj")
    ops.append(b"ET")
    return b"\n".join(ops)


# table_ja.pdf: a price list ruled as a table (page 1), and a ruled drawing with no text in its cells (page 2).
TABLE_TITLE = "防災用品の価格表"
TABLE_BEFORE = ["備蓄用品の単価と在庫を次の表に示す。価格は税込である。", "表1 備蓄用品の単価と在庫"]
TABLE_ROWS = [
    ["品番", "品名", "単価（円）", "在庫"],
    ["A-101", "保存水 2L", "180", "240"],
    ["A-102", "乾パン", "350", "85"],
    ["B-201", "携帯ラジオ", "2980", "12"],
    ["B-202", "懐中電灯", "1480", "30"],
    ["C-301", "救急セット", "2200", "8"],
]
TABLE_AFTER = ["在庫が十を下回った品は月末に発注する。"]
GRID_LINES = ["図1 方眼（目盛りは一センチ）", "", "方眼は図を描くための下書きであり、表ではない。"]


def _ucs2(x: float, y: float, text: str, size: float = 10) -> bytes:
    return b"BT /F1 %g Tf 1 0 0 1 %g %g Tm <%s> Tj ET" % (size, x, y, text.encode("utf-16-be").hex().encode())


def table_ops() -> bytes:
    """A title, a sentence, a table ruled with a line between every row and every column (each line a path
    of its own, as word processors draw them), and a sentence under it; UCS-2 text."""
    columns = [56.0, 120.0, 260.0, 360.0, 440.0]
    top, height = 700.0, 22.0
    bottom = top - height * len(TABLE_ROWS)
    ops = [_ucs2(56, 780, TABLE_TITLE, 14)]
    ops += [_ucs2(56, 740 - 18 * i, line) for i, line in enumerate(TABLE_BEFORE)]
    ops.append(b"0.5 w")
    ops += [b"%g %g m %g %g l S" % (columns[0], top - height * i, columns[-1], top - height * i)
            for i in range(len(TABLE_ROWS) + 1)]
    ops += [b"%g %g m %g %g l S" % (x, top, x, bottom) for x in columns]
    for r, row in enumerate(TABLE_ROWS):
        for c, cell in enumerate(row):
            ops.append(_ucs2(columns[c] + 4, top - height * r - 15, cell))
    ops += [_ucs2(56, bottom - 30 - 18 * i, line) for i, line in enumerate(TABLE_AFTER)]
    return b"\n".join(ops)


def grid_ops() -> bytes:
    """A square grid of ruled lines with nothing in its cells (a drawing, not a table) and text below it."""
    ops = [b"0.5 w"]
    ops += [b"100 %g m 400 %g l S" % (400 + 60 * i, 400 + 60 * i) for i in range(6)]
    ops += [b"%g 400 m %g 700 l S" % (100 + 60 * i, 100 + 60 * i) for i in range(6)]
    ops += [_ucs2(96 + 60 * i, 386, str(i)) for i in range(6)]
    ops += [_ucs2(56, 350 - 18 * i, line) for i, line in enumerate(GRID_LINES) if line]
    return b"\n".join(ops)


IMAGE = bytes((x * 7 + y * 13) % 256 for y in range(16) for x in range(16))  # a 16 x 16 grey pattern


def make_pdf(
    pages: list[bytes | None],
    font: str = "Helvetica",
    info: dict[str, str] | None = None,
    security: tuple[str, str] | None = None,
    break_xref: bool = False,
) -> bytes:
    """A PDF with one page per item: a content stream drawing text in ``font``, or None for an image only."""
    file_id = hashlib.md5(b"".join(p or b"image" for p in pages) + json.dumps(info or {}).encode()).digest()
    pdf = PdfWriter(file_id=file_id)
    if security:
        pdf.security = Rc4Security(security[0], security[1], file_id)
    catalog = pdf.reserve()
    tree = pdf.reserve()
    fonts = Fonts(pdf)
    image = None
    kids = []
    for content in pages:
        if content is None:
            if image is None:
                image = pdf.add(Stream(b"/Type /XObject /Subtype /Image /Width 16 /Height 16 /ColorSpace /DeviceGray "
                                       b"/BitsPerComponent 8", IMAGE))
            stream = pdf.add(Stream(b"", b"q 480 0 0 680 66 80 cm /Im1 Do Q"))
            resources = b"<< /XObject << /Im1 %d 0 R >> >>" % image
        else:
            stream = pdf.add(Stream(b"", content))
            resources = b"<< /Font << /F1 %d 0 R >> >>" % fonts.get(font)
        kids.append(pdf.add(b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 595 842] /Contents %d 0 R "
                            b"/Resources %s >>" % (tree, stream, resources)))
    pdf.objects[tree] = b"<< /Type /Pages /Count %d /Kids [%s] >>" % (
        len(kids), b" ".join(b"%d 0 R" % k for k in kids))
    pdf.objects[catalog] = b"<< /Type /Catalog /Pages %d 0 R >>" % tree
    if info:
        pdf.info = {key: Str(value) for key, value in info.items()}
    return pdf.write(catalog, break_xref=break_xref)


# --- Office files ------------------------------------------------------------------------------------

FIXED_ZIP_TIME = (2024, 4, 1, 0, 0, 0)


def fixed_zip(raw: bytes) -> bytes:
    """The same ZIP with every member's timestamp fixed, so regenerating gives the same bytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as source, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as target:
        for item in source.infolist():
            info = zipfile.ZipInfo(item.filename, FIXED_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            target.writestr(info, source.read(item.filename))
    return out.getvalue()


def make_docx_ja() -> bytes:
    import docx

    doc = docx.Document()
    core = doc.core_properties
    core.title = "文書管理規程"
    core.author = "総務部"
    core.created = dt.datetime(2024, 4, 1, 9, 30)
    core.modified = dt.datetime(2024, 4, 2, 10, 0)
    core.last_modified_by = "総務部"
    core.revision = 1
    doc.add_paragraph("文書管理規程", style="Title")
    doc.add_heading("第1章 総則", level=1)
    doc.add_paragraph("この規程は、社内の文書の作成、保存および廃棄について定める。")
    doc.add_heading("第1節 目的", level=2)
    doc.add_paragraph("文書を適切に管理し、必要なときにすぐ探せるようにすることを目的とする。")
    doc.add_heading("第1項 用語", level=3)
    doc.add_paragraph("この規程で「文書」とは、紙および電子の記録をいう。")
    doc.add_heading("第2章 保存期間", level=1)
    doc.add_paragraph("保存期間は、文書の種類ごとに次の表のとおりとする。")
    table = doc.add_table(rows=3, cols=3)
    for r, row in enumerate([["種類", "保存期間", "備考"], ["契約書", "10年", "原本"], ["議事録", "5年", "写し可"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    doc.add_heading("第3章 雑則", level=1)
    doc.add_paragraph("電子文書は、改ざんを防ぐ措置を講じて保存する。", style="List Bullet")
    doc.add_paragraph("この規程は、2024年4月1日から施行する。", style="List Bullet")
    out = io.BytesIO()
    doc.save(out)
    return fixed_zip(out.getvalue())


def make_docx_tables() -> bytes:
    import docx

    doc = docx.Document()
    core = doc.core_properties
    core.title = ""  # no core title: the Title paragraph names the document
    core.author = "Reading Room"
    core.created = dt.datetime(2024, 5, 6, 7, 8, 9)
    core.modified = dt.datetime(2024, 5, 6, 7, 8, 9)
    core.last_modified_by = "Reading Room"
    core.revision = 1
    doc.add_paragraph("A note before the title")
    doc.add_paragraph("Library Tables", style="Title")
    doc.add_heading("Opening hours", level=1)
    doc.add_paragraph("A uniform table")
    table = doc.add_table(rows=3, cols=3)
    for r, row in enumerate([["Day", "Opens", "Closes"], ["Monday", "9:00", "20:00"], ["Sunday", "closed", ""]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    doc.add_heading("Rooms", level=1)
    doc.add_paragraph("A table with merged cells")
    table = doc.add_table(rows=3, cols=3)
    for r, row in enumerate([["Room", "Floor", "Seats"], ["Reading room", "1", "40"], ["Archive", "1", "6"]]):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    across = table.cell(1, 1).merge(table.cell(1, 2))
    across.text = "First floor, forty seats"
    down = table.cell(1, 0).merge(table.cell(2, 0))
    down.text = "Shared rooms"
    doc.add_paragraph("Borrow up to ten books", style="List Bullet")
    doc.add_paragraph("Return them within three weeks", style="List Bullet")
    out = io.BytesIO()
    doc.save(out)
    return fixed_zip(out.getvalue())


def make_pptx() -> bytes:
    from pptx import Presentation
    from pptx.util import Inches

    prs = Presentation()
    core = prs.core_properties
    core.title = "防災訓練のご案内"
    core.author = "防災委員会"
    core.created = dt.datetime(2024, 8, 30, 9, 0)
    core.modified = dt.datetime(2024, 8, 30, 9, 0)
    core.last_modified_by = "防災委員会"
    core.revision = 1
    slide = prs.slides.add_slide(prs.slide_layouts[1])
    slide.shapes.title.text = "防災訓練のご案内"
    slide.placeholders[1].text = "九月一日の防災の日に、全館で避難訓練を行います。"
    slide.notes_slide.notes_text_frame.text = "集合場所を最初に伝える。"
    slide = prs.slides.add_slide(prs.slide_layouts[5])
    slide.shapes.title.text = "当日の流れ"
    rows = [["時刻", "内容"], ["10:00", "地震の放送"], ["10:05", "避難開始"], ["10:20", "点呼"]]
    table = slide.shapes.add_table(len(rows), 2, Inches(1), Inches(2), Inches(6), Inches(2)).table
    for r, row in enumerate(rows):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    slide = prs.slides.add_slide(prs.slide_layouts[6])
    slide.shapes.add_textbox(Inches(1), Inches(1), Inches(6), Inches(1)).text_frame.text = (
        "訓練の後、非常用持ち出し袋の中身を確かめましょう。")
    out = io.BytesIO()
    prs.save(out)
    return fixed_zip(out.getvalue())


# --- spreadsheets ------------------------------------------------------------------------------------
# A small .xlsx writer (no spreadsheet library): shared strings, numbers, booleans, dates (a date style),
# formulas with their cached values, as Excel writes them, so a reader can be checked against known bytes.


@dataclass(frozen=True)
class Formula:
    """A formula cell: the expression and the value Excel cached for it."""

    expression: str
    cached: Any


_XLSX_EPOCH = dt.datetime(1899, 12, 30)
_XML_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})


def xlsx_column(index: int) -> str:
    """``A`` for 0, ``Z`` for 25, ``AA`` for 26, ..."""
    name = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        name = chr(65 + rest) + name
    return name


def _xlsx_cell(ref: str, value: Any, strings: dict[str, int]) -> str:
    if isinstance(value, Formula):
        cached = value.cached
        kind = ' t="str"' if isinstance(cached, str) else ' t="b"' if isinstance(cached, bool) else ""
        shown = (int(cached) if isinstance(cached, bool) else cached)
        return f'<c r="{ref}"{kind}><f>{value.expression.translate(_XML_ESCAPES)}</f><v>{shown}</v></c>'
    if isinstance(value, bool):
        return f'<c r="{ref}" t="b"><v>{int(value)}</v></c>'
    if isinstance(value, int | float):
        return f'<c r="{ref}"><v>{value}</v></c>'
    if isinstance(value, dt.date):
        stamp = value if isinstance(value, dt.datetime) else dt.datetime(value.year, value.month, value.day)
        serial = (stamp - _XLSX_EPOCH).total_seconds() / 86400
        return f'<c r="{ref}" s="1"><v>{serial:.17g}</v></c>'  # as Excel writes it: 17 digits
    index = strings.setdefault(str(value), len(strings))
    return f'<c r="{ref}" t="s"><v>{index}</v></c>'


def make_xlsx(sheets: list[tuple[str, Iterable[list[Any]]]], *, title: str = "", author: str = "") -> bytes:
    """An .xlsx workbook: ``(sheet name, rows)`` in order; ``None`` cells are left out, empty rows too."""
    strings: dict[str, int] = {}
    worksheets = []
    for _, rows in sheets:
        lines = []
        used: list[tuple[int, int]] = []  # (row, column) of the cells written, for the sheet's dimension
        for number, row in enumerate(rows, start=1):
            cells = "".join(_xlsx_cell(f"{xlsx_column(c)}{number}", v, strings) for c, v in enumerate(row)
                            if v is not None)
            if cells:
                lines.append(f'<row r="{number}">{cells}</row>')
                columns = [c for c, v in enumerate(row) if v is not None]
                used += [(number, columns[0]), (number, columns[-1])]
        # Excel writes the used range as the sheet's dimension (readers take its first column from it)
        dimension = (f"{xlsx_column(min(c for _, c in used))}{used[0][0]}:"
                     f"{xlsx_column(max(c for _, c in used))}{used[-1][0]}") if used else "A1"
        worksheets.append('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
                          '<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main">'
                          f'<dimension ref="{dimension}"/><sheetData>{"".join(lines)}</sheetData></worksheet>')
    main = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    package = "http://schemas.openxmlformats.org/package/2006/relationships"
    parts = {
        "[Content_Types].xml": (
            '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
            '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/xl/workbook.xml" '
            'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
            + "".join(f'<Override PartName="/xl/worksheets/sheet{i}.xml" ContentType="application/'
                      'vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
                      for i in range(1, len(sheets) + 1))
            + '<Override PartName="/xl/styles.xml" '
            'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.styles+xml"/>'
            '<Override PartName="/xl/sharedStrings.xml" '
            'ContentType="application/vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
            '<Override PartName="/docProps/core.xml" '
            'ContentType="application/vnd.openxmlformats-package.core-properties+xml"/></Types>'),
        "_rels/.rels": (
            f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<Relationships xmlns="{package}">'
            f'<Relationship Id="rId1" Type="{rel}/officeDocument" Target="xl/workbook.xml"/>'
            '<Relationship Id="rId2" Type="http://schemas.openxmlformats.org/package/2006/relationships/metadata/'
            'core-properties" Target="docProps/core.xml"/></Relationships>'),
        "docProps/core.xml": (
            '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
            '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties" '
            'xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:dcterms="http://purl.org/dc/terms/" '
            'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">'
            f'<dc:title>{title.translate(_XML_ESCAPES)}</dc:title><dc:creator>{author.translate(_XML_ESCAPES)}'
            '</dc:creator><dcterms:created xsi:type="dcterms:W3CDTF">2024-04-01T09:00:00Z</dcterms:created>'
            '</cp:coreProperties>'),
        "xl/workbook.xml": (
            f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<workbook xmlns="{main}" xmlns:r="{rel}">'
            "<sheets>" + "".join(f'<sheet name="{name.translate(_XML_ESCAPES)}" sheetId="{i}" r:id="rId{i}"/>'
                                 for i, (name, _) in enumerate(sheets, start=1)) + "</sheets></workbook>"),
        "xl/_rels/workbook.xml.rels": (
            f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<Relationships xmlns="{package}">'
            + "".join(f'<Relationship Id="rId{i}" Type="{rel}/worksheet" Target="worksheets/sheet{i}.xml"/>'
                      for i in range(1, len(sheets) + 1))
            + f'<Relationship Id="rId{len(sheets) + 1}" Type="{rel}/styles" Target="styles.xml"/>'
            f'<Relationship Id="rId{len(sheets) + 2}" Type="{rel}/sharedStrings" Target="sharedStrings.xml"/>'
            "</Relationships>"),
        "xl/styles.xml": (
            f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<styleSheet xmlns="{main}">'
            '<fonts count="1"><font><sz val="11"/><name val="Calibri"/></font></fonts>'
            '<fills count="1"><fill><patternFill patternType="none"/></fill></fills>'
            '<borders count="1"><border/></borders><cellStyleXfs count="1"><xf/></cellStyleXfs>'
            '<cellXfs count="2"><xf numFmtId="0"/><xf numFmtId="14" applyNumberFormat="1"/></cellXfs>'
            "</styleSheet>"),
    }
    for i, sheet in enumerate(worksheets, start=1):
        parts[f"xl/worksheets/sheet{i}.xml"] = sheet
    shared = "".join(f"<si><t>{text.translate(_XML_ESCAPES)}</t></si>" for text in strings)
    parts["xl/sharedStrings.xml"] = (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<sst xmlns="{main}" '
                                     f'count="{len(strings)}" uniqueCount="{len(strings)}">{shared}</sst>')
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, text in parts.items():
            info = zipfile.ZipInfo(name, FIXED_ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, text.encode("utf-8"))
    return out.getvalue()



# Written for these tests: a price list under a title block, with formulas (their cached values), dates, a
# remark long enough that its row cannot go with the header in one chunk, and a cell holding a pipe.
PRICE_ITEMS = [
    ("ボールペン 黒", 120), ("ボールペン 赤", 120), ("シャープペンシル", 350), ("消しゴム", 80), ("定規 30cm", 200),
    ("ホッチキス", 780), ("ホッチキス針", 150), ("クリップ 大", 240), ("付箋 75mm", 310), ("ノート A4", 180),
    ("ノート B5", 160), ("ファイル A4", 95), ("クリアファイル", 30), ("封筒 長3", 420), ("封筒 角2", 610),
    ("セロハンテープ", 130), ("のり", 110), ("はさみ", 520), ("カッターナイフ", 380), ("電卓", 1980),
    ("印鑑ケース", 650), ("朱肉", 720), ("名札ケース", 90), ("ラベルシール", 560), ("蛍光ペン 黄", 100),
]
LONG_REMARK = ("在庫限りの特価品です。"
               + "お取り寄せには二週間ほどかかり、色や仕様はメーカーの都合で予告なく変わることがあります。" * 8
               + "ご注文の前に総務部へお問い合わせください。")


def price_rows() -> list[list[Any]]:
    rows: list[list[Any]] = [["2024年度 文具価格表"],
                             ["株式会社文庫 総務部", None, None, "改定日", dt.date(2024, 4, 1)],
                             [], ["品番", "品名", "単価", "数量", "金額", "登録日", "備考"]]
    for i, (name, price) in enumerate(PRICE_ITEMS):
        row_number = len(rows) + 1
        quantity = 5 + (i * 7) % 20
        remark = LONG_REMARK if i == 19 else "A|B 兼用" if i == 12 else "取り寄せ" if i % 6 == 5 else None
        amount = Formula(f"C{row_number}*D{row_number}", price * quantity)
        rows.append([f"B-{101 + i:03d}", name, price, quantity, amount,
                     dt.date(2024, 4, 1) + dt.timedelta(days=7 * i), remark])
    return rows


STOCK_ROWS: list[list[Any]] = [
    ["倉庫", "品番", "在庫数", "要発注", "棚卸日時"],
    ["本社", "B-101", 42, Formula("C2<20", False), dt.datetime(2024, 3, 29, 17, 30)],
    ["本社", "B-120", 3, Formula("C3<20", True), dt.datetime(2024, 3, 29, 17, 30)],
    ["大阪支店", "B-104", 15, Formula("C4<20", True), dt.datetime(2024, 3, 28, 10, 0)],
    ["大阪支店", "B-118", 27, Formula('IF(C5<20,"要","不要")', "不要"), dt.datetime(2024, 3, 28, 10, 0)],
]

CSV_MEMBERS = (
    "id,name,team,phone,joined\r\n"
    '1,Alice Tanaka,"Sales, Tokyo",03-1234-5678,2019-04-01\r\n'
    '2,Bob Suzuki,Support,06-2345-6789,2020-10-15\r\n'
    '3,Carol Sato,"Research ""Lab""","03-3456-7890",2021-07-01\r\n'
    '4,Dan Ito,"Facilities\nand Safety",011-456-7890,2022-01-11\r\n'
)
CSV_MEIBO = (
    "社員番号,氏名,部署,内線,入社日\r\n"
    "1001,髙橋 一郎,総務部,①-201,2015/04/01\r\n"
    "1002,﨑山 花子,経理部,①-305,2018/10/01\r\n"
    "1003,山田 太郎,営業部,②-110,2020/04/01\r\n"
    "1004,鈴木 次郎,情報システム部,②-415,2023/07/18\r\n"
)
TSV_ZAIKO = (
    "倉庫\t品番\t品名\t在庫数\r\n"
    "本社\tB-101\tボールペン 黒\t42\r\n"
    "本社\tB-120\t電卓\t3\r\n"
    "大阪支店\tB-104\t消しゴム\t15\r\n"
)

# --- the fixture set and its manifest ----------------------------------------------------------------


@dataclass
class Fixture:
    file: str
    make: Callable[[], bytes]
    record: dict[str, Any]


def text_lines(pages: list[list[str]], font: str = "Helvetica") -> list[bytes | None]:
    return [horizontal_ops(lines, font) for lines in pages]


def fixtures() -> list[Fixture]:
    cids = japan1_cids()
    report_info = {"Title": "A Short History of Pocket Libraries", "Author": "Reading Room Staff",
                   "CreationDate": "D:20240401093000+09'00'"}
    bousai_info = {"Title": "家庭の防災備蓄ガイド", "Author": "防災委員会", "CreationDate": "D:20230901120000Z"}
    scanned_pages: list[bytes | None] = [None, horizontal_ops(SCANNED_TEXT, "Helvetica"), None]
    jsonl = "\n".join(json.dumps(r, ensure_ascii=False) for r in JSONL_RECORDS) + "\n"
    cr_text = (RASHOMON_HEADER + RASHOMON).replace("\n", "\r")
    return [
        Fixture("report.pdf", lambda: make_pdf(text_lines(REPORT_PAGES), info=report_info), {
            "kind": "pdf", "language": "en", "expected": ["has_text", "multi_page"], "pages": 3,
            "must_contain": ["A Short History of Pocket Libraries", "Copenhagen", "glued bindings"],
            "title": report_info["Title"], "author": report_info["Author"], "created_at": "2024-04-01T00:30:00Z",
            "page_of": {"Paper and Binding": 2, "Copenhagen": 3}}),
        Fixture("bousai_ja.pdf", lambda: make_pdf(text_lines(BOUSAI_PAGES, "Mincho-UCS2-H"), "Mincho-UCS2-H",
                                                  info=bousai_info), {
            "kind": "pdf", "language": "ja", "expected": ["has_text", "multi_page", "horizontal_text"], "pages": 2,
            "must_contain": ["飲料水は一人一日三リットルを目安に", "懐中電灯、携帯ラジオ"],
            "title": bousai_info["Title"], "author": bousai_info["Author"], "created_at": "2023-09-01T12:00:00Z",
            "page_of": {"持ち出し袋の中身": 2}}),
        Fixture("haru_to_shura_jo.pdf",
                lambda: make_pdf([vertical_ops(HARU_TO_SHURA, cids)], "Ryumin-Identity-V"), {
            "kind": "pdf", "language": "ja", "expected": ["has_text", "vertical_text"], "pages": 1,
            "must_contain": ["わたくしといふ現象は", "因果交流電燈の", "宮澤賢治"],
            "notes": "vertical writing; non-embedded CID font Ryumin-Light Identity-V (Adobe-Japan1), no ToUnicode"}),
        Fixture("hyphenation.pdf",
                lambda: make_pdf([horizontal_ops(HYPHENATION_LINES, "Helvetica-ToUnicode")], "Helvetica-ToUnicode"), {
            "kind": "pdf", "language": "en", "expected": ["has_text", "hyphenation", "soft_hyphens"], "pages": 1,
            "must_contain": ["has to compile the two halves", "A reader of a well-known text", "a soft hyphen instead",
                             "printed: midline.", "the Schwarz-Weiß photographs of the COVID-19 years."],
            "notes": "words hyphenated at line ends, soft hyphens (U+00AD through a ToUnicode map)"}),
        Fixture("two_columns.pdf", lambda: make_pdf([
                    column_ops(COLUMN_TITLE, LEFT_COLUMN, RIGHT_COLUMN, interleaved=True),
                    column_ops(COLUMN_TITLE, LEFT_COLUMN, RIGHT_COLUMN, interleaved=False)]), {
            "kind": "pdf", "language": "en", "expected": ["has_text", "multi_page", "two_column"], "pages": 2,
            "must_contain": [" ".join(LEFT_COLUMN).replace("per- ", "per"),
                             " ".join(RIGHT_COLUMN).replace("collec- ", "collec")],
            "notes": "the same two columns on both pages: drawn row by row across the columns on page 1, "
                     "column by column on page 2"}),
        Fixture("spacing_ja.pdf", lambda: make_pdf([spaced_ops(SPACING_LINES)], "Mincho-UCS2-H"), {
            "kind": "pdf", "language": "ja", "expected": ["has_text", "horizontal_text", "spaced_punctuation"],
            "pages": 1, "must_contain": ["歩行者は、道路を横断してはならない。", "bunko の検索画面"],
            "notes": "extra space after 、 and around （ ） (TJ adjustments): gaps between CJK characters"}),
        Fixture("tiers_ja.pdf", lambda: make_pdf([tier_ops(HARU_TO_SHURA[:8], HARU_TO_SHURA[8:], cids)],
                                                 "Ryumin-Identity-V"), {
            "kind": "pdf", "language": "ja", "expected": ["has_text", "vertical_text", "two_tiers"], "pages": 1,
            "must_contain": ["わたくしといふ現象は", "宮澤賢治"],
            "notes": "vertical writing in two tiers, drawn column by column across the tiers; the upper tier holds "
                     "the first eight lines"}),
        Fixture("table_ja.pdf", lambda: make_pdf([table_ops(), grid_ops()], "Mincho-UCS2-H"), {
            "kind": "pdf", "language": "ja", "expected": ["has_text", "multi_page", "ruled_table"], "pages": 2,
            "must_contain": [TABLE_BEFORE[0], TABLE_AFTER[0], GRID_LINES[-1]],
            "page_of": {"携帯ラジオ": 1, "方眼は図を描く": 2},
            "notes": "page 1: a price list ruled as a table between two sentences; page 2: a ruled grid with no "
                     "text in its cells (a drawing, not a table)"}),
        Fixture("scanned.pdf", lambda: make_pdf([None]), {
            "kind": "pdf", "language": None, "expected": ["image_only", "no_text_layer"], "pages": 1}),
        Fixture("partly_scanned.pdf", lambda: make_pdf(scanned_pages), {
            "kind": "pdf", "language": "en", "expected": ["mostly_image_only", "partial_text_layer", "multi_page"],
            "pages": 3, "pages_without_text": [1, 3]}),
        Fixture("encrypted.pdf",
                lambda: make_pdf(text_lines([ENCRYPTED_LINES]), security=("openpassword", "owner-secret")), {
            "kind": "pdf", "language": "en", "expected": ["encrypted", "needs_user_password"], "pages": 1,
            "password": "openpassword", "must_contain_after_decrypt": ["Quarterly Budget Notes"]}),
        Fixture("owner_password_only.pdf",
                lambda: make_pdf(text_lines([OWNER_ONLY_LINES]), security=("", "owner-secret")), {
            "kind": "pdf", "language": "en", "expected": ["encrypted", "owner_password_only", "has_text"],
            "pages": 1, "must_contain": ["The library opens at nine"]}),
        Fixture("damaged_xref.pdf", lambda: make_pdf(text_lines([DAMAGED_LINES]),
                                                     info={"Title": "Notes on Readable Files"}, break_xref=True), {
            "kind": "pdf", "language": "en", "expected": ["broken", "recoverable", "has_text"], "pages": 1,
            "must_contain": ["Readability counts"], "title": "Notes on Readable Files",
            "notes": "no cross-reference table and a startxref beyond the end; readers rebuild the table"}),
        Fixture("invalid.pdf", lambda: b"%PDF-1.4\nThis file starts like a PDF and is none.\n%%EOF\n", {
            "kind": "pdf", "language": None, "expected": ["broken", "unrecoverable"], "pages": None}),
        Fixture("kitei_ja.docx", make_docx_ja, {
            "kind": "docx", "language": "ja", "expected": ["has_text", "headings", "heading_hierarchy", "table"],
            "headings": ["Title: 文書管理規程", "Heading 1: 第1章 総則", "Heading 2: 第1節 目的",
                         "Heading 3: 第1項 用語", "Heading 1: 第2章 保存期間", "Heading 1: 第3章 雑則"],
            "tables": 1, "must_contain": ["契約書 | 10年 | 原本"], "title": "文書管理規程", "author": "総務部",
            "created_at": "2024-04-01T09:30:00Z"}),
        Fixture("tables.docx", make_docx_tables, {
            "kind": "docx", "language": "en", "expected": ["has_text", "headings", "table", "merged_cells"],
            "headings": ["Title: Library Tables", "Heading 1: Opening hours", "Heading 1: Rooms"], "tables": 2,
            "must_contain": ["A uniform table", "Monday | 9:00 | 20:00"], "title": "Library Tables",
            "author": "Reading Room", "created_at": "2024-05-06T07:08:09Z"}),
        Fixture("kakaku_ja.xlsx", lambda: make_xlsx([("価格表", price_rows()), ("在庫", STOCK_ROWS)],
                                                    title="文具価格表", author="総務部"), {
            "kind": "xlsx", "language": "ja", "expected": ["has_text", "sheets", "title_block", "formulas", "dates",
                                                           "long_row"],
            "sheets": ["価格表", "在庫"], "title": "文具価格表", "author": "総務部",
            "created_at": "2024-04-01T09:00:00Z",
            "must_contain": ["2024年度 文具価格表",
                             "| B-113 | クリアファイル | 30 | 9 | 270 | 2024-06-24 | A\\|B 兼用 |",
                             "品番: B-120\n品名: 電卓\n単価: 1980\n数量: 18\n金額: 35640\n登録日: 2024-08-12\n"
                             "備考: 在庫限り",
                             "| 本社 | B-120 | 3 | TRUE | 2024-03-29 17:30 |", "| 大阪支店 | B-118 | 27 | 不要 |"],
            "header_of": {"価格表": "| 品番 | 品名 | 単価 | 数量 | 金額 | 登録日 | 備考 |"},
            "notes": "a title block above the header (rows 1-2), formulas with cached values (numbers, booleans, "
                     "text), dates and times, a pipe in a cell, row 24 with a remark longer than a chunk"}),
        Fixture("broken.xlsx", lambda: make_xlsx([("価格表", price_rows())])[:1500], {
            "kind": "xlsx", "language": None, "expected": ["broken", "unrecoverable"],
            "notes": "the first 1,500 bytes of a workbook: no ZIP central directory"}),
        Fixture("members.csv", lambda: CSV_MEMBERS.encode("utf-8"), {
            "kind": "csv", "language": "en", "expected": ["has_text", "quoted_fields", "crlf_line_endings"],
            "encoding": "utf-8", "delimiter": ",", "rows": 4,
            "must_contain": ["| 1 | Alice Tanaka | Sales, Tokyo | 03-1234-5678 | 2019-04-01 |", 'Research "Lab"']}),
        Fixture("meibo_cp932.csv", lambda: CSV_MEIBO.encode("cp932"), {
            "kind": "csv", "language": "ja", "expected": ["has_text", "legacy_encoding", "cp932_extensions"],
            "encoding": "cp932", "delimiter": ",", "rows": 4,
            "must_contain": ["| 社員番号 | 氏名 | 部署 | 内線 | 入社日 |",
                             "| 1001 | 髙橋 一郎 | 総務部 | ①-201 | 2015/04/01 |"]}),
        Fixture("zaiko.tsv", lambda: TSV_ZAIKO.encode("utf-8"), {
            "kind": "tsv", "language": "ja", "expected": ["has_text"], "encoding": "utf-8", "delimiter": "\t",
            "rows": 3, "must_contain": ["| 倉庫 | 品番 | 品名 | 在庫数 |", "| 本社 | B-120 | 電卓 | 3 |"]}),
        Fixture("kunren_ja.pptx", make_pptx, {
            "kind": "pptx", "language": "ja", "expected": ["has_text", "slides", "table", "notes"], "pages": 3,
            "must_contain": ["九月一日の防災の日", "10:05 | 避難開始", "集合場所を最初に伝える。"],
            "title": "防災訓練のご案内", "author": "防災委員会", "created_at": "2024-08-30T09:00:00Z"}),
        Fixture("bousai_ja.html", lambda: HTML_JA.format(extra="").encode("utf-8"), {
            "kind": "html", "language": "ja", "expected": ["has_text", "boilerplate", "scripts", "styles", "nav",
                                                           "ruby_furigana"], "encoding": "utf-8",
            "must_contain": ["すぐに持ち出せる袋を玄関の近くに置いておきましょう", "懐中電灯、携帯ラジオ",
                             "年に一度、防災の日に中身を点検し"],
            "must_not_contain": ["お問い合わせ窓口", "関連記事", "かいちゅうでんとう", "計測"]}),
        Fixture("toshokan_sjis.html", lambda: HTML_SJIS.encode("cp932"), {
            "kind": "html", "language": "ja", "expected": ["has_text", "legacy_encoding"], "encoding": "cp932",
            "must_contain": ["明治時代の文庫本を展示しています", "司書による解説の時間"],
            "must_not_contain": ["館内のご案内", "掲示板の更新"]}),
        Fixture("pocket_library.html", lambda: HTML_WIKI.encode("utf-8"), {
            "kind": "html", "language": "en", "expected": ["has_text", "boilerplate", "scripts", "nav"],
            "encoding": "utf-8", "must_contain": ["A pocket library is a series of small", "cost per copy falls"],
            "must_not_contain": ["Random article", "Privacy policy", "Categories"]}),
        Fixture("guide_ja.md", lambda: MARKDOWN.encode("utf-8"), {
            "kind": "markdown", "language": "ja", "expected": ["has_text", "heading_hierarchy", "code_fences",
                                                               "html_comments", "inline_html"], "encoding": "utf-8",
            "must_contain": ["文庫は、日本語の文書を検索するためのエンジンです。", "pip install bunko"],
            "headings": ["# 文庫の使い方", "## インストール", "### 追加の機能", "## 検索", "### ハイブリッド検索"]}),
        Fixture("notes.md", lambda: MARKDOWN_EN.encode("utf-8"), {
            "kind": "markdown", "language": "en", "expected": ["has_text", "headings"], "encoding": "utf-8",
            "must_contain": ["Run the `ingest` command"], "headings": ["## Getting Started", "## Configuration"]}),
        Fixture("notice_utf8.txt", lambda: NOTICE.encode("utf-8"), {
            "kind": "text", "language": "ja", "expected": ["has_text"], "encoding": "utf-8",
            "must_contain": ["文庫 プロジェクトのお知らせ"], "parallel": "notice"}),
        Fixture("notice_utf8_bom.txt", lambda: NOTICE.encode("utf-8-sig"), {
            "kind": "text", "language": "ja", "expected": ["has_text", "utf8_bom"], "encoding": "utf-8-sig",
            "must_contain": ["文庫 プロジェクトのお知らせ"], "parallel": "notice"}),
        Fixture("notice_sjis.txt", lambda: NOTICE.replace("\n", "\r\n").encode("shift_jis"), {
            "kind": "text", "language": "ja", "expected": ["has_text", "legacy_encoding", "crlf_line_endings"],
            "encoding": "shift_jis", "must_contain": ["文字コードの判定を試すための文書です"], "parallel": "notice"}),
        Fixture("notice_eucjp.txt", lambda: NOTICE.encode("euc_jp"), {
            "kind": "text", "language": "ja", "expected": ["has_text", "legacy_encoding"], "encoding": "euc_jp",
            "must_contain": ["文字コードの判定を試すための文書です"], "parallel": "notice"}),
        Fixture("notice_iso2022jp.txt", lambda: NOTICE.encode("iso2022_jp"), {
            "kind": "text", "language": "ja", "expected": ["has_text", "legacy_encoding", "7bit_escape_sequences"],
            "encoding": "iso2022_jp", "must_contain": ["文字コードの判定を試すための文書です"], "parallel": "notice"}),
        Fixture("renraku_cp932.txt", lambda: CP932_NOTICE.encode("cp932"), {
            "kind": "text", "language": "ja", "expected": ["has_text", "legacy_encoding", "cp932_extensions"],
            "encoding": "cp932", "must_contain": ["①から⑩までの番号付きの項目", "髙橋さん"]}),
        Fixture("rashomon_sjis_cr.txt", lambda: cr_text.encode("shift_jis"), {
            "kind": "text", "language": "ja", "expected": ["has_text", "legacy_encoding", "cr_line_endings"],
            "encoding": "shift_jis", "must_contain": ["ある日の暮方の事である。", "Rashomon by AKUTAGAWA Ryunosuke"],
            "notes": "Shift_JIS with old-Mac CR-only line endings; an English header before the Japanese text"}),
        Fixture("faq_ja.json", lambda: (json.dumps(FAQ_JSON, ensure_ascii=False, indent=2) + "\n").encode("utf-8"), {
            "kind": "json", "language": "ja", "expected": ["has_text", "json_array"], "encoding": "utf-8",
            "content_path": "items", "text_key": "answer", "documents": 3,
            "must_contain": ["一人一日三リットルを目安に"]}),
        Fixture("records.jsonl", lambda: jsonl.encode("utf-8"), {
            "kind": "jsonl", "language": "ja", "expected": ["has_text"], "encoding": "utf-8",
            "content_path": "doc.text", "documents": 3, "must_contain": ["閲覧室の開館時間が夜八時まで"]}),
    ]


def write(out: Path) -> list[dict[str, Any]]:
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for fixture in fixtures():
        data = fixture.make()
        (out / fixture.file).write_bytes(data)
        records.append({"file": fixture.file, **fixture.record, "bytes": len(data)})
    manifest = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    (out / "documents.jsonl").write_text(manifest, encoding="utf-8")
    return records


def main(argv: Iterable[str]) -> None:
    args = list(argv)
    out = Path(args[0]) if args else HERE
    records = write(out)
    total = sum(r["bytes"] for r in records)
    print(f"wrote {len(records)} files ({total:,} bytes) and documents.jsonl to {out}")


if __name__ == "__main__":
    main(sys.argv[1:])
