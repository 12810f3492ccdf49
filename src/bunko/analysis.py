"""Text analysis for the keyword index: the same analyzer at index and query time.

The default analyzer is language-neutral: words for alphabetic scripts (case-folded),
and overlapping character bigrams for CJK runs, which is what makes keyword search
match Japanese text at all (Japanese has no spaces between words). A morphological
analyzer can replace it behind the same ``Analyzer`` protocol.

For SQLite FTS5 the bigrams are not materialised: the index stores every CJK
character as its own token (one C-level regex substitution per chunk), and a query
asks for each CJK bigram as a two-token *phrase*. FTS5 ranks phrases with BM25 just
as it ranks terms, so this is bigram BM25 at a fraction of the indexing cost.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Protocol, runtime_checkable

# CJK ideographs, hiragana, katakana (incl. prolonged sound mark), halfwidth katakana, hangul.
_CJK = (
    r"\u3040-\u309f\u30a0-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    r"\uf900-\ufaff\uff66-\uff9f\uac00-\ud7af\u3005\u3006\u30fc"
)
_TOKEN_RE = re.compile(rf"([{_CJK}]+)|([^\W{_CJK}_]+)")
_CJK_CHAR_RE = re.compile(rf"[{_CJK}]")
_CJK_RANGES = [
    (0x3040, 0x309F), (0x30A0, 0x30FF), (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF), (0xFF66, 0xFF9F), (0xAC00, 0xD7AF), (0x3005, 0x3006),
]
# str.translate with a plain dict runs in C; re.sub with a template calls back into Python per match.
_SPACE_OUT_CJK = {cp: f" {chr(cp)} " for lo, hi in _CJK_RANGES for cp in range(lo, hi + 1)}


@runtime_checkable
class Analyzer(Protocol):
    """Turns text into index terms and queries; must be deterministic."""

    name: str

    def terms(self, text: str) -> list[str]:
        """The index terms of ``text``, in order."""
        ...

    def index_text(self, text: str) -> str:
        """The text stored in the FTS5 column (tokenised there by ``unicode61``)."""
        ...

    def match_query(self, text: str) -> str | None:
        """An FTS5 MATCH expression for a user query, or None when it has no terms."""
        ...


def _quote(phrase: str) -> str:
    # Every term is a double-quoted FTS5 string, so user input is never parsed as FTS5 syntax.
    return '"' + phrase.replace('"', '""') + '"'


class BigramAnalyzer:
    """Words for alphabetic scripts, overlapping character bigrams for CJK runs."""

    name = "bigram"

    def terms(self, text: str) -> list[str]:
        """The index terms of ``text``, in order."""
        out: list[str] = []
        for match in _TOKEN_RE.finditer(unicodedata.normalize("NFKC", text).lower()):
            cjk, word = match.group(1), match.group(2)
            if word:
                out.append(word)
            elif len(cjk) == 1:
                out.append(cjk)
            else:
                out.extend(cjk[i : i + 2] for i in range(len(cjk) - 1))
        return out

    def index_text(self, text: str) -> str:
        """Text with every CJK character spaced out, so FTS5 indexes it as one token."""
        return unicodedata.normalize("NFKC", text).translate(_SPACE_OUT_CJK)

    def match_query(self, text: str) -> str | None:
        """OR of the query's distinct words and CJK bigrams (each bigram a two-token phrase)."""
        seen: dict[str, None] = {}
        for term in self.terms(text):
            seen.setdefault(" ".join(term) if _CJK_CHAR_RE.match(term) else term, None)
        return " OR ".join(_quote(t) for t in seen) if seen else None


def fts_document(analyzer: Analyzer, text: str) -> str:
    """The analyzed text as stored in the FTS5 column."""
    return analyzer.index_text(text)


def fts_query(analyzer: Analyzer, text: str) -> str | None:
    """An FTS5 MATCH expression for ``text``, or None if it has no terms."""
    return analyzer.match_query(text)


DEFAULT_ANALYZER = BigramAnalyzer()


_KANA_RE = re.compile(r"[\u3040-\u30ff]")
_HAN_RE = re.compile(r"[\u4e00-\u9fff]")
_HANGUL_RE = re.compile(r"[\uac00-\ud7af]")
_LATIN_RE = re.compile(r"[A-Za-z]")


def detect_language(text: str, sample: int = 4000) -> str:
    """A script-based language guess: ``ja``, ``zh``, ``ko``, ``en`` or ``und``.

    Kana means Japanese; Han without kana means Chinese; Latin letters with common
    English function words mean English. Good enough to pick answer templates and
    tag documents; a full detector can replace it behind this function.
    """
    # Sample the start, middle and end: a file may open with a header in another language.
    if len(text) > sample:
        third = sample // 3
        middle = len(text) // 2
        head = text[:third] + text[middle - third // 2 : middle + third // 2] + text[-third:]
    else:
        head = text
    kana = len(_KANA_RE.findall(head))
    han = len(_HAN_RE.findall(head))
    if kana >= 3 or (kana and kana * 10 >= han):
        return "ja"
    if _HANGUL_RE.search(head):
        return "ko"
    if han >= 3:
        return "zh"
    if len(_LATIN_RE.findall(head)) >= 3:
        words = re.findall(r"[a-zäöüßàâçéèêëîïôûùœáíóúñ]+", head.lower())
        if not words:
            return "und"
        best, share = "und", 0.0
        for language, stopwords in _STOPWORDS.items():
            hits = sum(w in stopwords for w in words) / len(words)
            if hits > share:
                best, share = language, hits
        return best if share >= 0.05 else "und"
    return "und"


_STOPWORDS = {
    "en": frozenset(
        "the a an and or of to in is are was were be it this that for on with as by at from what how "
        "why when where which who do does should can i you we".split()
    ),
    "de": frozenset("der die das und ist nicht ein eine zu den mit von sich auf für im dem des auch es".split()),
    "fr": frozenset("le la les et est des une un du en que qui dans pour pas sur au avec il elle".split()),
    "es": frozenset("el la los las y es de que en un una por con para del se no su al lo".split()),
    "pt": frozenset("o a os as e é de que em um uma para com não do da dos das se".split()),
    "it": frozenset("il lo la gli le e è di che un una per con non del della sono nel".split()),
    "nl": frozenset("de het een en is van dat die niet op te in zijn met voor".split()),
}
