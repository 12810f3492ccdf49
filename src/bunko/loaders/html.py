"""HTML loader: the main content of a page, without navigation, scripts and boilerplate.

Main-content extraction is trafilatura's (its XML output, which keeps headings as
``<head rend="hN">``); this module decodes the bytes, cleans the tree first (ruby
readings, navigation, Wikipedia edit links, MathML replaced by its TeX alt text),
and renders the extracted tree back to text with Markdown ``#`` heading lines, one
``DocumentPart`` per section with ``section`` / ``hierarchy`` / ``heading_level``
metadata. ``html_to_document`` is shared with the URL loader.

Decoding follows the HTML standard's order: a byte-order mark, then the transport's
charset (HTTP ``Content-Type``), then ``<meta charset>`` / ``http-equiv`` / the XML
declaration, then UTF-8, then detection with charset-normalizer. Legacy Japanese labels
map to the superset codecs browsers use (``Shift_JIS`` -> ``cp932``).
"""

from __future__ import annotations

import codecs
import re
from pathlib import Path
from typing import Any

from ..analysis import detect_language
from ..errors import EncodingDetectionError, LoaderError
from ..types import Document, DocumentPart
from . import LoadOptions, file_metadata, read_bytes

__all__ = ["codec_for", "decode_html", "html_to_document", "load_html"]


def load_html(path: Path, options: LoadOptions) -> list[Document]:
    """An HTML file as one document of its main content, in parts per section."""
    raw = read_bytes(path, options)
    return [html_to_document(raw, source=str(path), base_metadata=file_metadata(path, "html"))]


def html_to_document(
    html: bytes | str,
    *,
    source: str,
    base_metadata: dict[str, Any],
    charset: str | None = None,
    url: str | None = None,
) -> Document:
    """The main content of an HTML page as a ``Document``.

    ``charset`` is the transport's declared charset (HTTP), used when the bytes have no
    BOM; ``url`` is the page's address, if known, which helps trafilatura. Metadata is
    ``base_metadata`` plus ``title``, ``language`` (the page's ``lang``, else detected),
    ``author`` / ``description`` / ``published_at`` when the page states them, and
    ``encoding``. Raises ``LoaderError`` when the page has no main content.
    """
    trafilatura, lxml_html, etree = _libraries()
    if isinstance(html, bytes):
        text, encoding = decode_html(html, charset, source=source)
    else:
        text, encoding = html.lstrip("\ufeff"), None
    if not text.strip():
        raise LoaderError(f"{source}: empty HTML page: no main content found")
    try:
        parser = lxml_html.HTMLParser(encoding="utf-8", remove_comments=True, remove_pis=True)
        tree = lxml_html.document_fromstring(text.encode("utf-8", "surrogatepass"), parser=parser)
    except (etree.ParserError, ValueError) as exc:
        raise LoaderError(f"{source}: cannot parse the HTML ({exc}): no main content found") from exc

    page_language = _page_language(tree)
    page_title = _page_title(tree)
    _clean_tree(tree)

    try:
        xml = trafilatura.extract(
            tree,
            url=url,
            output_format="xml",
            include_comments=False,
            include_tables=True,
            include_images=False,
            include_links=False,
            include_formatting=False,
            with_metadata=True,
            # dates only from the markup: the text-wide search takes "Copyright 2024" for a date
            date_extraction_params={"extensive_search": False, "original_date": True},
        )
    except Exception as exc:  # trafilatura has no error hierarchy of its own
        raise LoaderError(f"{source}: main-content extraction failed ({type(exc).__name__}: {exc})") from exc
    if not xml:
        raise LoaderError(f"{source}: no main content found (the page may be only navigation or scripts)")
    try:
        doc = etree.fromstring(xml.encode("utf-8"))
    except etree.XMLSyntaxError as exc:
        raise LoaderError(f"{source}: main-content extraction returned invalid XML ({exc})") from exc
    main = doc.find("main")
    parts = _sections(main) if main is not None else []
    if not parts:
        raise LoaderError(f"{source}: no main content found (the page may be only navigation or scripts)")

    document = Document.from_parts(parts, dict(base_metadata))
    metadata = document.metadata
    metadata.setdefault("source", source)
    title = _clean_space(doc.get("title") or "") or page_title or _first_heading(parts)
    if title and not metadata.get("title"):
        metadata["title"] = title
    if page_language:
        metadata["language"] = page_language
    elif metadata.get("language") in (None, "", "und"):  # e.g. an HTTP Content-Language is kept
        metadata["language"] = detect_language(document.content)
    for key, attribute in (("author", "author"), ("description", "description"), ("published_at", "date")):
        value = _clean_space(doc.get(attribute) or "")
        if value and not metadata.get(key):
            metadata[key] = value
    if encoding:
        metadata.setdefault("encoding", encoding)
    return document


# --- decoding -----------------------------------------------------------------------------

_BOMS = ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"))
_META_CHARSET_RE = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)""", re.IGNORECASE)
_XML_DECL_RE = re.compile(rb"""^\s*<\?xml[^>]*encoding\s*=\s*["']([A-Za-z0-9_.:\-]+)["']""", re.IGNORECASE)
# WHATWG Encoding Standard: labels whose browser meaning differs from Python's codec of that name.
_LABELS = {
    "shift_jis": "cp932", "shift-jis": "cp932", "sjis": "cp932", "x-sjis": "cp932", "ms_kanji": "cp932",
    "csshiftjis": "cp932", "windows-31j": "cp932", "ms932": "cp932", "cp932": "cp932",
    "euc-jp": "euc_jp", "x-euc-jp": "euc_jp", "cseucpkdfmtjapanese": "euc_jp",
    "iso-2022-jp": "iso2022_jp", "csiso2022jp": "iso2022_jp",
    "iso-8859-1": "cp1252", "latin1": "cp1252", "l1": "cp1252", "ascii": "cp1252", "us-ascii": "cp1252",
    "windows-1252": "cp1252", "cp1252": "cp1252",
    "gb2312": "gb18030", "gbk": "gb18030", "x-gbk": "gb18030", "gb18030": "gb18030",
    "big5": "big5hkscs", "big5-hkscs": "big5hkscs",
    "euc-kr": "cp949", "ks_c_5601-1987": "cp949", "windows-949": "cp949",
}


def codec_for(label: str | None, *, from_meta: bool = False) -> str | None:
    """The Python codec for a charset label, or None for unknown labels."""
    if not label:
        return None
    label = label.strip().strip("\"'").lower()
    name = _LABELS.get(label)
    if name is None:
        try:
            name = codecs.lookup(label).name
        except LookupError:
            return None
    if from_meta and name.startswith("utf-16"):
        return "utf-8"  # a <meta> inside the bytes cannot truthfully say UTF-16 (HTML standard)
    return name


def declared_charset(raw: bytes) -> str | None:
    """The charset a page declares in its first 4 KB (``<meta>`` or the XML declaration)."""
    head = raw[:4096]
    match = _XML_DECL_RE.match(head) or _META_CHARSET_RE.search(head)
    return match.group(1).decode("ascii") if match else None


def decode_html(raw: bytes, http_charset: str | None = None, *, source: str = "HTML") -> tuple[str, str]:
    """Decode HTML bytes: BOM, then HTTP charset, then ``<meta>``, then UTF-8, then detection.

    Returns the text and the codec used. A declared charset that does not fit the bytes
    is set aside for detection; if detection finds nothing it is used with replacement
    characters. Raises ``EncodingDetectionError`` when nothing fits.
    """
    for bom, name in _BOMS:
        if raw.startswith(bom):
            try:
                return raw.decode(name), name
            except UnicodeDecodeError as exc:
                raise EncodingDetectionError(f"{source}: has a {name} byte-order mark but is not {name}") from exc
    declared: list[str] = []
    for label, from_meta in ((http_charset, False), (declared_charset(raw), True)):
        codec = codec_for(label, from_meta=from_meta)
        if codec is None or codec in declared:
            continue
        try:
            return raw.decode(codec), codec
        except UnicodeDecodeError:
            declared.append(codec)
    if "utf-8" not in declared:
        try:
            return raw.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    try:
        from charset_normalizer import from_bytes

        best = from_bytes(raw[:200_000]).best()
    except Exception:  # detection is best effort
        best = None
    if best is not None and best.encoding:
        name = codec_for(best.encoding) or best.encoding
        try:
            return raw.decode(name), name
        except (UnicodeDecodeError, LookupError):
            pass
    if declared:
        return raw.decode(declared[0], errors="replace"), declared[0]
    raise EncodingDetectionError(
        f"{source}: cannot tell the text encoding (no BOM, no charset declared, not UTF-8, detection failed)"
    )


# --- tree clean-up --------------------------------------------------------------------------

_NO_SPACE_BEFORE = set(",.;:!?)]}、。，．") | {""}
_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
_LANG_RE = re.compile(r"^[A-Za-z]{2,3}(?:$|[-_])")


def _page_language(tree: Any) -> str | None:
    """The primary language subtag from ``<html lang>`` (or ``xml:lang`` / Content-Language meta)."""
    candidates = [tree.get("lang"), tree.get("xml:lang"), tree.get(_XML_LANG)]
    for meta in tree.iter("meta"):
        if (meta.get("http-equiv") or "").lower() == "content-language":
            candidates.append((meta.get("content") or "").split(",")[0])
    for value in candidates:
        value = (value or "").strip()
        if _LANG_RE.match(value) and value.lower() not in ("und", "mul", "zxx"):
            return re.split(r"[-_]", value)[0].lower()
    return None


def _page_title(tree: Any) -> str | None:
    node = tree.find(".//title")
    if node is None:
        return None
    return _clean_space(node.text_content()) or None


def _clean_tree(tree: Any) -> None:
    """Remove what is never content, before trafilatura sees the page (in place)."""
    # Math: MathML and Wikipedia's math spans become their TeX alt text (else the prose has holes).
    for math in list(tree.iter("math", "{http://www.w3.org/1998/Math/MathML}math")):
        tex = _tex(math)
        target = math
        for ancestor in math.iterancestors():
            if "mwe-math-element" in (ancestor.get("class") or "").split():
                target = ancestor
                break
        tail = target.tail or ""
        _replace_with_text(target, f" {tex}{'' if tail[:1] in _NO_SPACE_BEFORE else ' '}" if tex else "")
    removable = (
        "//rt | //rp"  # ruby readings: 漢字<rt>かんじ</rt> keeps 漢字
        " | //script | //style | //noscript | //template | //nav"
        " | //*[@role='navigation'] | //*[@aria-hidden='true' and not(.//p)]"
        " | //*[contains(concat(' ', normalize-space(@class), ' '), ' mw-editsection ')]"
    )
    for node in tree.xpath(removable):
        _drop(node)


def _tex(math: Any) -> str:
    alttext = (math.get("alttext") or "").strip()
    if not alttext:
        for annotation in math.iter("annotation", "{http://www.w3.org/1998/Math/MathML}annotation"):
            alttext = (annotation.text or "").strip()
            break
    match = re.fullmatch(r"\{\\displaystyle\s*(.*)\}", alttext, re.DOTALL)
    return _clean_space(match.group(1) if match else alttext)


def _drop(node: Any) -> None:
    """Remove a node but keep its tail text."""
    parent = node.getparent()
    if parent is None:
        return
    _replace_with_text(node, "")


def _replace_with_text(node: Any, text: str) -> None:
    parent = node.getparent()
    if parent is None:
        return
    joined = text + (node.tail or "")
    previous = node.getprevious()
    if previous is not None:
        previous.tail = (previous.tail or "") + joined
    else:
        parent.text = (parent.text or "") + joined
    parent.remove(node)


# --- rendering trafilatura's XML ------------------------------------------------------------

_SPACE_RE = re.compile(r"[ \t\r\f\v\u00a0\u3000]+")
_BLOCKS = {"p", "head", "list", "table", "quote", "code", "div", "section"}


def _clean_space(text: str) -> str:
    return _SPACE_RE.sub(" ", text).strip()


def _inline(element: Any) -> str:
    """An element's text, with ``<lb/>`` as a line break."""
    pieces = [element.text or ""]
    for child in element:
        if child.tag == "lb":
            pieces.append("\n")
        elif child.tag == "list":
            pieces.append("\n" + _render_list(child) + "\n")
        elif child.tag in _BLOCKS or child.tag in ("item", "row", "cell"):
            pieces.append("\n" + _inline(child) + "\n")
        elif child.tag != "graphic":
            pieces.append(_inline(child))
        pieces.append(child.tail or "")
    return "".join(pieces)


def _lines(text: str) -> str:
    lines = (_clean_space(line) for line in text.split("\n"))
    return "\n".join(line for line in lines if line)


def _render_list(element: Any, depth: int = 0) -> str:
    out = []
    for item in element.iter("item"):
        if item.getparent() is not element:
            continue
        nested = [child for child in item if child.tag == "list"]
        for child in nested:
            item.remove(child)  # rendered below, indented
        text = _lines(_inline(item)).replace("\n", " ")
        if text:
            out.append("  " * depth + "- " + text)
        out.extend(_render_list(child, depth + 1) for child in nested)
    return "\n".join(line for line in out if line)


def _render_table(element: Any) -> str:
    rows = []
    for row in element.iter("row"):
        cells = [_lines(_inline(cell)).replace("\n", " ") for cell in row if cell.tag == "cell"]
        if any(cells):
            rows.append(" | ".join(cells))
    return "\n".join(rows)


def _blocks(element: Any) -> list[tuple[int, str]]:
    """(heading level, text) for headings and (0, text) for body blocks, in document order."""
    out: list[tuple[int, str]] = []
    if element.text and element.text.strip():
        out.append((0, _clean_space(element.text)))
    for child in element:
        tag = child.tag
        if tag == "head":
            rend = child.get("rend") or ""
            level = int(rend[1]) if re.fullmatch(r"h[1-6]", rend) else 2
            text = _clean_space(_inline(child).replace("\n", " "))
            if text:
                out.append((level, text))
        elif tag == "list":
            out.append((0, _render_list(child)))
        elif tag == "table":
            out.append((0, _render_table(child)))
        elif tag in ("div", "section", "quote") and any(c.tag in _BLOCKS for c in child):
            out.extend(_blocks(child))
        elif tag != "graphic":
            out.append((0, _lines(_inline(child))))
        if child.tail and child.tail.strip():
            out.append((0, _clean_space(child.tail)))
    return [(level, text) for level, text in out if text]


def _sections(main: Any) -> list[DocumentPart]:
    """Parts per section: each starts with its ``#`` heading line; empty sections are dropped.

    A heading with no text of its own is kept in front of the next section only when it
    is that section's ancestor (``## A`` directly followed by ``### B``).
    """
    parts: list[DocumentPart] = []
    stack: list[tuple[int, str]] = []  # the open headings, outermost first
    pending: list[tuple[int, str]] = []  # headings not yet written into a part
    body: list[str] = []
    has_text = False

    def flush() -> None:
        nonlocal body
        if not body:
            return
        lines = [f"{'#' * level} {text}" for level, text in pending]
        metadata: dict[str, Any] = {}
        if stack:
            metadata = {"section": stack[-1][1], "hierarchy": [t for _, t in stack], "heading_level": stack[-1][0]}
        parts.append(DocumentPart("\n\n".join([*lines, *body]), metadata))
        pending.clear()
        body = []

    for level, text in _blocks(main):
        if level == 0:
            body.append(text)
            has_text = True
            continue
        flush()
        while stack and stack[-1][0] >= level:
            stack.pop()
        pending[:] = [p for p in pending if p[0] < level and p in stack]
        stack.append((level, text))
        pending.append((level, text))
    flush()
    return parts if has_text else []


def _first_heading(parts: list[DocumentPart]) -> str | None:
    for part in parts:
        hierarchy = part.metadata.get("hierarchy")
        if hierarchy:
            return str(hierarchy[0])
    return None


def _libraries() -> tuple[Any, Any, Any]:
    try:
        import trafilatura
        from lxml import etree
        from lxml import html as lxml_html
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise LoaderError(f"HTML loading needs trafilatura and lxml: pip install 'bunko[html]' ({exc})") from exc
    return trafilatura, lxml_html, etree
