"""Plain text, Markdown and JSON loaders, with Japanese-aware encoding detection.

Generic detectors are weakest exactly where Japanese files live: Shift_JIS/CP932 and
EUC-JP share byte ranges, and a short file decodes "successfully" in both. So the
choice between the Japanese legacy encodings is made here, by decoding strictly and
scoring how Japanese each result looks; charset-normalizer is only asked about the
rest (Latin-1, GB18030, Big5, EUC-KR, ...). When nothing fits, loading fails with
``EncodingDetectionError`` instead of storing mojibake.
"""

from __future__ import annotations

import codecs
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..analysis import detect_language
from ..errors import CorruptDocumentError, EncodingDetectionError, LoaderError, NoTextError
from ..types import Document, DocumentPart
from . import LoadOptions, file_metadata, read_bytes

# -- encoding detection ------------------------------------------------------------

_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF32_LE, "utf-32"),  # before UTF-16 LE: FF FE 00 00 starts with FF FE
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# JIS X 0208 / 0201 / 0212 designations used by the ISO-2022-JP family.
_ISO2022_ESCAPES = (b"\x1b$B", b"\x1b$@", b"\x1b(J", b"\x1b(I", b"\x1b$(D", b"\x1b$(O", b"\x1b$(Q")
_ISO2022_CODECS = ("iso2022_jp", "iso2022_jp_ext", "iso2022_jp_1", "iso2022_jp_2", "iso2022_jp_2004",
                   "iso2022_jp_3")
# Tried in this order; ties go to the first. cp932 is a superset of shift_jis (NEC and IBM
# extensions such as ① and ㈱); the JIS X 0213 variants only when the classic ones fail.
_JAPANESE_CODECS = ("cp932", "euc_jp", "shift_jis_2004", "euc_jis_2004")
# C0 control bytes that do not occur in text (TAB, LF, FF, CR, SUB and ESC are allowed).
_CONTROL_BYTES = bytes([*range(0, 9), 11, *range(14, 26), *range(28, 32), 127])
_SINGLE_BYTE_WESTERN = frozenset({"cp1250", "cp1257", "cp775", "hp_roman8", "iso8859_10", "iso8859_15", "latin_1",
                                  "iso8859_2", "iso8859_4", "iso8859_13", "mac_roman", "mac_iceland", "mac_latin2",
                                  "mac_turkish", "cp1254", "iso8859_9", "cp850", "cp437"})
_SCORE_SAMPLE = 65536  # characters of each candidate decoding that are scored
_MIN_SCORE = 0.5
_MIN_KANA = 0.05
_MIN_KANJI_ONLY_SCORE = 0.9


@lru_cache(maxsize=1)
def _jis_kanji_levels() -> tuple[frozenset[str], frozenset[str]]:
    """The JIS X 0208 level-1 (common) and level-2 kanji, read off the euc_jp codec."""
    levels: tuple[set[str], set[str]] = (set(), set())
    for row in range(16, 85):
        target = levels[0] if row < 48 else levels[1]
        for cell in range(1, 95):
            try:
                target.add(bytes([0xA0 + row, 0xA0 + cell]).decode("euc_jp"))
            except UnicodeDecodeError:
                continue
    return frozenset(levels[0]), frozenset(levels[1])


def japanese_score(text: str) -> tuple[float, float]:
    """How Japanese ``text`` looks: (score, kana share), both over its non-ASCII characters.

    Hiragana, full-width katakana, Japanese punctuation, full-width forms and common
    (JIS level-1) kanji count +1; half-width katakana +0.5 (legitimate, but also what
    EUC-JP bytes turn into when read as Shift_JIS, so they do not count as kana); rare
    (level-2) kanji +0.3; C1 controls, private-use characters and U+FFFD -2. Real
    Japanese text scores near 1 with a large kana share; a wrong decoding has no
    full-width kana (EUC-JP read as cp932) or only odd kanji. Returns (0, 0) for text
    without non-ASCII characters.
    """
    level1, level2 = _jis_kanji_levels()
    total = kana = 0
    score = 0.0
    for ch in text[:_SCORE_SAMPLE]:
        o = ord(ch)
        if o < 0x80:
            continue
        total += 1
        if 0x3041 <= o <= 0x30FF:  # hiragana, katakana, ー and friends
            kana += 1
            score += 1
        elif 0x3000 <= o <= 0x303F or 0xFF01 <= o <= 0xFF60 or 0xFFE0 <= o <= 0xFFE5:
            score += 1
        elif ch in level1:
            score += 1
        elif ch in level2:
            score += 0.3
        elif 0xFF61 <= o <= 0xFF9F:
            score += 0.5
        elif o <= 0x9F or 0xE000 <= o <= 0xF8FF or o == 0xFFFD:
            score -= 2
    if not total:
        return 0.0, 0.0
    return score / total, kana / total


def _strict(raw: bytes, encoding: str) -> str | None:
    try:
        return raw.decode(encoding)
    except (UnicodeDecodeError, LookupError):
        return None


def _looks_binary(raw: bytes) -> bool:
    sample = raw[:65536]
    controls = len(sample) - len(sample.translate(None, _CONTROL_BYTES))
    return controls > max(2, len(sample) // 100)


def _utf16_without_bom(raw: bytes) -> tuple[str, str] | None:
    """UTF-16 without a BOM, recognised by NUL bytes on one side of each pair (ASCII-heavy text)."""
    sample = raw[:4096]
    half = len(sample) // 2
    if half < 4 or len(raw) % 2:
        return None
    even = sample[0::2].count(0)
    odd = sample[1::2].count(0)
    if odd > half * 0.3 and even == 0:
        encoding = "utf-16-le"
    elif even > half * 0.3 and odd == 0:
        encoding = "utf-16-be"
    else:
        return None
    text = _strict(raw, encoding)
    if text is None or _control_share(text) > 0.01:
        return None
    return text, encoding


def _control_share(text: str) -> float:
    if not text:
        return 0.0
    sample = text[:65536]
    bad = sum(1 for ch in sample if (ord(ch) < 32 and ch not in "\t\n\r\f\x1a\x1b") or 0x7F <= ord(ch) <= 0x9F)
    return bad / len(sample)


def _decode_japanese(raw: bytes) -> tuple[tuple[str, str] | None, tuple[str, str] | None]:
    """Strict decodings among the Japanese legacy encodings: ``(confident, kanji_only)``.

    ``confident`` is the best-scoring one with kana in it; ``kanji_only`` the best one
    that scores high without kana (short lines such as a title or a name: Japanese, or
    Korean / Chinese that happens to decode as EUC-JP, which the caller settles).
    """
    best: list[tuple[float, str, str] | None] = [None, None]
    seen: set[str] = set()
    for encoding in _JAPANESE_CODECS:
        if (best[0] or best[1]) is not None and encoding.endswith("2004"):
            break  # the JIS X 0213 variants only as a fallback
        text = _strict(raw, encoding)
        if text is None or text in seen:
            continue
        seen.add(text)
        score, kana = japanese_score(text)
        slot = 0 if score >= _MIN_SCORE and kana >= _MIN_KANA else 1 if score >= _MIN_KANJI_ONLY_SCORE else None
        if slot is not None and (best[slot] is None or score > best[slot][0]):  # type: ignore[index]
            best[slot] = (score, text, encoding)
    return _named(raw, best[0]), _named(raw, best[1]) if best[0] is None else None


def _named(raw: bytes, found: tuple[float, str, str] | None) -> tuple[str, str] | None:
    if found is None:
        return None
    _, text, encoding = found
    if encoding == "cp932" and _strict(raw, "shift_jis") == text:
        encoding = "shift_jis"  # the same text: report the standard name
    return text, encoding


def decode_text(path: Path | str, raw: bytes) -> tuple[str, str]:
    """Decode a text file's bytes; returns ``(text, encoding)`` with a Python codec name.

    Rules, in order:
    1. a BOM decides (UTF-8, UTF-16, UTF-32; the BOM is not part of the text);
    2. NUL bytes mean UTF-16 without BOM when they sit on one side of each byte pair,
       binary otherwise; so do many other control bytes;
    3. 7-bit input with ISO-2022-JP escape sequences is ``iso2022_jp`` (or a sibling);
    4. input that is valid UTF-8 is UTF-8 (pure ASCII included);
    5. cp932 and euc_jp (then their JIS X 0213 variants) are decoded strictly and the
       result that looks most Japanese (with kana) wins, see :func:`japanese_score`;
       cp932 is reported as ``shift_jis`` when both decode to the same text;
    6. otherwise charset-normalizer is asked, and its answer must decode cleanly; a
       kanji-only Japanese decoding (a short title, a name) still wins over it unless
       charset-normalizer reads the bytes as Korean (Hangul in EUC-KR looks like
       kanji when read as EUC-JP).
    Raises ``EncodingDetectionError`` when the input is binary or no encoding fits.
    Line endings are left as they are.
    """
    if not raw:
        return "", "utf-8"
    for bom, encoding in _BOMS:
        if raw.startswith(bom):
            text = _strict(raw, encoding)
            if text is None:
                name = encoding.upper().removesuffix("-SIG")
                if name != "UTF-8":
                    name += "-LE" if bom[0] == 0xFF else "-BE"
                raise EncodingDetectionError(f"{path}: starts with a {name} byte order mark but is not valid {name}")
            return text, encoding
    if b"\x00" in raw:
        found = _utf16_without_bom(raw)
        if found is not None:
            return found
        raise EncodingDetectionError(f"{path}: looks like a binary file (NUL bytes), not text")
    if _looks_binary(raw):
        raise EncodingDetectionError(f"{path}: looks like a binary file (control bytes), not text")
    if b"\x1b" in raw and any(esc in raw for esc in _ISO2022_ESCAPES) and max(raw) < 0x80:
        for encoding in _ISO2022_CODECS:
            text = _strict(raw, encoding)
            if text is not None:
                return text, encoding
    text = _strict(raw, "utf-8")
    if text is not None:
        return text, "utf-8"
    confident, kanji_only = _decode_japanese(raw)
    if confident is not None:
        return confident
    other = _guess_other(raw)
    if kanji_only is not None and not (other is not None and _reads_as_korean(raw, other[1])):
        return kanji_only  # Japanese first: kanji-only text stays Japanese unless it reads as Korean
    if other is None:
        raise EncodingDetectionError(
            f"{path}: cannot tell the text encoding (not UTF-8, Shift_JIS/CP932, EUC-JP or ISO-2022-JP, "
            "and no other encoding fits cleanly); convert it to UTF-8, e.g. iconv -f <encoding> -t UTF-8"
        )
    return other


_KOREAN_CODECS = frozenset({"cp949", "euc_kr", "johab", "iso2022_kr"})
_HANGUL_WORDS_RE = re.compile(r"[\uac00-\ud7a3]+ +[\uac00-\ud7a3]+")


def _reads_as_korean(raw: bytes, guessed: str) -> bool:
    """EUC-KR Hangul also decodes as EUC-JP kanji; Korean wins when it looks like spaced Hangul words."""
    if guessed not in _KOREAN_CODECS:
        return False
    text = _strict(raw, "euc_kr")
    if text is None:
        return False
    non_ascii = [ch for ch in text[:_SCORE_SAMPLE] if ord(ch) >= 0x80]
    hangul = sum(1 for ch in non_ascii if 0xAC00 <= ord(ch) <= 0xD7A3)
    return hangul * 2 >= len(non_ascii) and _HANGUL_WORDS_RE.search(text) is not None


def _guess_other(raw: bytes) -> tuple[str, str] | None:
    """charset-normalizer's answer, if it decodes cleanly."""
    from charset_normalizer import from_bytes

    results = from_bytes(raw)
    best = results.best()
    encoding = best.encoding if best is not None else None
    if best is not None and encoding != "cp1252":
        # On short Western text charset-normalizer often cannot tell the single-byte code
        # pages apart (same chaos); then the most common one is the better guess.
        tied = [m.encoding for m in results if m.chaos <= best.chaos + 0.005]
        if "cp1252" in tied and encoding in _SINGLE_BYTE_WESTERN:
            encoding = "cp1252"
    text = _strict(raw, encoding) if encoding else None
    if encoding is None or text is None or _control_share(text) > 0.01 or "\ufffd" in text:
        return None
    return text, codecs.lookup(encoding).name


def normalize_newlines(text: str) -> str:
    """CRLF and lone CR (old Mac files) to LF."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _read_text(path: Path, options: LoadOptions) -> tuple[str, str]:
    text, encoding = decode_text(path, read_bytes(path, options))
    return normalize_newlines(text), encoding


def load_text(path: Path, options: LoadOptions) -> list[Document]:
    """A plain-text file as one document; ``encoding`` records how it was decoded."""
    text, encoding = _read_text(path, options)
    metadata = file_metadata(path, "text", text)
    metadata["encoding"] = encoding
    return [Document(content=text, metadata=metadata)]


# -- Markdown ------------------------------------------------------------------------

_ATX_RE = re.compile(r"^ {0,3}(#{1,6})(?=[ \t]|$)(.*)$")
_ATX_CLOSE_RE = re.compile(r"(?:^|[ \t]+)#+[ \t]*$")
_FENCE_RE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_COMMENT_RE = re.compile(r"<!--.*?-->")
_FRONT_MATTER_END = ("---", "...")


def _front_matter(lines: list[str]) -> tuple[int, str | None]:
    """The number of YAML front-matter lines at the top, and its ``title`` if it has one."""
    if not lines or lines[0].strip() != "---":
        return 0, None
    for i in range(1, min(len(lines), 200)):
        if lines[i].strip() in _FRONT_MATTER_END:
            title = None
            for line in lines[1:i]:
                m = re.match(r"^title\s*:\s*(.+?)\s*$", line)
                if m:
                    title = m.group(1).strip("'\"") or None
            return i + 1, title
    return 0, None


def markdown_sections(text: str) -> tuple[list[tuple[int, str, list[str]]], list[str], str | None]:
    """Split Markdown into ATX sections.

    Returns ``(sections, preamble, front_matter_title)``; each section is
    ``(level, heading text, lines)`` with the heading line first. Headings inside fenced
    code blocks and ``<!-- -->`` comments are not headings; comments are dropped from the
    text (they are not rendered), code blocks are kept as they are.
    """
    lines = text.split("\n")
    skip, fm_title = _front_matter(lines)
    preamble: list[str] = []
    sections: list[tuple[int, str, list[str]]] = []
    fence: str | None = None
    in_comment = False

    def emit(line: str) -> None:
        (sections[-1][2] if sections else preamble).append(line)

    for line in lines[skip:]:
        if fence is not None:
            emit(line)
            m = _FENCE_RE.match(line)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and not m.group(2).strip():
                fence = None
            continue
        if in_comment:
            end = line.find("-->")
            if end < 0:
                continue
            in_comment = False
            line = line[end + 3:]
            if not line.strip():
                continue
            emit(line)
            continue
        m = _FENCE_RE.match(line)
        if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
            fence = m.group(1)
            emit(line)
            continue
        m = _ATX_RE.match(line)
        if m:
            heading = _ATX_CLOSE_RE.sub("", _COMMENT_RE.sub("", m.group(2)).strip()).strip()
            if heading:
                sections.append((len(m.group(1)), heading, [f"{m.group(1)} {heading}"]))
                continue
        cleaned = _COMMENT_RE.sub("", line)
        start = cleaned.find("<!--")
        if start >= 0:
            cleaned = cleaned[:start]
            in_comment = True
        if cleaned != line:
            cleaned = cleaned.rstrip()
            if not cleaned.strip():
                continue  # the line was only a comment
        emit(cleaned)
    return sections, preamble, fm_title


def _join(lines: list[str]) -> str:
    text = "\n".join(lines).strip("\n")
    return re.sub(r"\n{3,}", "\n\n", text)


def load_markdown(path: Path, options: LoadOptions) -> list[Document]:
    """A Markdown file as one document with one part per heading section.

    Each part keeps its heading line and carries ``section`` (the heading text),
    ``hierarchy`` (the headings from the top level down) and ``heading_level``; text
    before the first heading is a part with an empty hierarchy. ``title`` is the
    front matter's title, else the first level-1 heading, else the first heading.
    """
    raw_text, encoding = _read_text(path, options)
    sections, preamble, fm_title = markdown_sections(raw_text)
    parts: list[DocumentPart] = []
    intro = _join(preamble)
    if intro.strip():
        parts.append(DocumentPart(intro, {"hierarchy": []}))
    stack: list[tuple[int, str]] = []
    for level, heading, lines in sections:
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, heading))
        parts.append(DocumentPart(_join(lines), {
            "section": heading,
            "hierarchy": [h for _, h in stack],
            "heading_level": level,
        }))
    document = Document.from_parts(parts) if parts else Document("")
    metadata = file_metadata(path, "markdown", document.content)
    metadata["encoding"] = encoding
    title = fm_title or next((h for lvl, h, _ in sections if lvl == 1), None) or (sections[0][1] if sections else None)
    if title:
        metadata["title"] = title
    document.metadata = metadata
    return [document]


# -- JSON ------------------------------------------------------------------------------

_TEXT_KEYS = ("content", "text", "body", "page_content", "message", "description")
_RESERVED_KEYS = frozenset({"source", "source_type", "filename", "filesize", "mime_type", "kind", "encoding"})
_MISSING = object()


def _json_error(path: Path, exc: json.JSONDecodeError, line: int | None = None) -> CorruptDocumentError:
    where = f"line {line if line is not None else exc.lineno}, column {exc.colno}"
    return CorruptDocumentError(f"{path}: invalid JSON at {where}: {exc.msg}")


def resolve_path(data: Any, content_path: str, where: str = "") -> Any:
    """The value at a dotted path (``data.body``, ``items.0.text``); raises ``LoaderError`` naming the missing key."""
    value = data
    walked: list[str] = []
    for key in content_path.split("."):
        if isinstance(value, dict):
            found = value.get(key, _MISSING)
        elif isinstance(value, list) and re.fullmatch(r"-?\d+", key):
            index = int(key)
            found = value[index] if -len(value) <= index < len(value) else _MISSING
        else:
            found = _MISSING
        if found is _MISSING:
            at = ".".join(walked) or "the top level"
            if isinstance(value, dict):
                keys = ", ".join(list(map(str, value))[:10]) or "none"
                detail = f"key {key!r} not found at {at} (keys there: {keys})"
            elif isinstance(value, list):
                detail = f"{key!r} is not an index of the {len(value)}-item array at {at}"
            else:
                detail = f"key {key!r} not found: {at} is a {type(value).__name__}, not an object"
            raise LoaderError(f"{where}content_path {content_path!r}: {detail}")
        value = found
        walked.append(key)
    return value


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, indent=2)
    return json.dumps(value, ensure_ascii=False)


def _add_fields(metadata: dict[str, Any], obj: Any, skip: str | None) -> None:
    """Copy an object's top-level scalar fields (except ``skip`` and the file keys) into metadata."""
    if isinstance(obj, dict):
        for key, value in obj.items():
            if key != skip and key not in _RESERVED_KEYS and (value is None or isinstance(value, str | int | float)):
                metadata[str(key)] = value


def _finish(metadata: dict[str, Any], text: str, provided: Any) -> Document:
    if not (isinstance(provided, dict) and "language" in provided):
        metadata["language"] = detect_language(text) if text else "und"
    return Document(content=text, metadata=metadata)


def _item_document(base: dict[str, Any], index: int, item: Any, text: str | None, skip: str | None,
                   text_key: str | None) -> Document:
    """One array / JSON Lines item as a document; an object item's other scalar fields become metadata."""
    metadata = dict(base)
    if text is None:
        if isinstance(item, dict):
            key = text_key if text_key in item else next((k for k in _TEXT_KEYS if isinstance(item.get(k), str)), None)
            if key is not None:
                text, skip = _as_text(item[key]), key
        if text is None:
            text = _as_text(item)
    _add_fields(metadata, item, skip)
    metadata["source"] = f"{base['source']}#{index}"
    metadata["json_index"] = index
    return _finish(metadata, text, item)


def load_json(path: Path, options: LoadOptions) -> list[Document]:
    """JSON or JSON Lines (seed 000's doc-loader with ``content_path``).

    With ``options.content_path`` (a dotted path such as ``data.body`` or
    ``items.0.text``) the text is the value there; without it, the whole JSON
    pretty-printed. An array at the content path, or a ``.jsonl`` file, gives one
    document per item with ``source`` = ``<path>#<index>``; for an object item the text
    is its ``content``/``text``/``body``/... field (or ``options.extra["text_key"]``),
    else the item as JSON, and its other top-level scalar fields go into metadata.
    """
    text, encoding = _read_text(path, options)
    base = file_metadata(path, "json")
    base["encoding"] = encoding
    content_path = options.content_path or None
    text_key = options.extra.get("text_key")
    head = content_path.split(".")[0] if content_path else None
    if content_path:
        base["content_path"] = content_path
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        documents: list[Document] = []
        for lineno, line in enumerate(text.split("\n"), start=1):
            if not line.strip():
                continue
            try:
                item = json.loads(line)
            except json.JSONDecodeError as exc:
                raise _json_error(path, exc, lineno) from exc
            value = _as_text(resolve_path(item, content_path, f"{path} line {lineno}: ")) if content_path else None
            documents.append(_item_document(base, len(documents), item, value, head, text_key))
        if not documents:
            raise NoTextError(f"{path}: the JSON Lines file has no records")
        return documents
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _json_error(path, exc) from exc
    if not content_path:
        return [_finish(dict(base), _as_text(data), None)]
    value = resolve_path(data, content_path, f"{path}: ")
    if isinstance(value, list):
        if not value:
            raise NoTextError(f"{path}: the array at {content_path!r} is empty")
        documents = [_item_document(base, i, item, None, None, text_key) for i, item in enumerate(value)]
        documents = [d for d in documents if d.content.strip()]  # indices (and sources) stay as in the file
        if not documents:
            raise NoTextError(f"{path}: no item of the array at {content_path!r} has text")
        return documents
    metadata = dict(base)
    _add_fields(metadata, data, head)
    return [_finish(metadata, _as_text(value), data)]
