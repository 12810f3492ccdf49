"""Text analysis for the keyword index: one analyzer per collection, the same at index and query time.

An :class:`Analyzer` turns text into *tokens* and a query into *phrases*:

* ``index_tokens(text)`` is the token stream of a chunk (its order gives the positions);
* ``query_phrases(text)`` lists the distinct units of a query, each a token sequence
  that must occur at consecutive positions.

Both stores render exactly this analysis and nothing else, so a collection ranks the same
on either backend: SQLite stores the space-joined tokens with each chunk (its test oracle
asks FTS5 for the quoted phrases ORed); PostgreSQL stores a ``tsvector`` built from the tokens and their positions
and asks ``'a' <-> 'b' | 'c'``. Neither ever parses user text as FTS5 or tsquery syntax.
Tokens are runs of letters and digits (plus CJK marks such as ``ー`` and ``々``), lower-cased
after NFKC, so FTS5's ``unicode61`` tokenizer keeps each one whole.

Built-in analyzers (``get_analyzer(name)``):

* ``bigram`` -- words for alphabetic scripts; each CJK character is a token and a query asks
  for every CJK bigram as a two-token phrase (bigram BM25 without materialising bigrams).
* ``sudachi`` -- Japanese morphemes from SudachiPy (split mode A, dictionary normal forms, so
  ``附属`` finds ``付属``); words for alphabetic scripts. Extra ``ja``.
* ``whitespace`` -- the Unicode word tokenizer alone: runs of letters and digits, no
  segmentation of CJK runs. The baseline to measure the others against.

The analyzer is recorded per collection when it is created (``DEFAULT_ANALYZER_NAME`` when
none is named) and is used for that collection from then on.
"""

from __future__ import annotations

import itertools
import re
import threading
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

from .errors import ConfigError
from .registry import Registry

# CJK ideographs, hiragana, katakana (incl. prolonged sound mark), halfwidth katakana, hangul --
# letters only: the combining and spacing (semi-)voiced marks and the punctuation inside the kana
# blocks (゛゜゠・) are not, because FTS5's unicode61 tokenizer would drop them from a token.
_CJK = (
    r"\u3041-\u3098\u309d-\u309f\u30a1-\u30fa\u30fc-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    r"\uf900-\ufaff\uff66-\uff9d\uac00-\ud7af\u3005\u3006"
)
# A CJK run, or a word: letters and digits of any other script (no underscore, no punctuation).
_TOKEN_RE = re.compile(rf"([{_CJK}]+)|([^\W{_CJK}_]+)")
_WORD_RE = re.compile(r"[^\W_]+")
_CJK_CHAR_RE = re.compile(rf"[{_CJK}]")

Phrase = tuple[str, ...]
_UNSEEN = object()


@runtime_checkable
class Analyzer(Protocol):
    """Turns text into index tokens and query phrases; must be deterministic."""

    name: str

    def index_tokens(self, text: str) -> list[str]:
        """The tokens of ``text`` in order (position = index in the list)."""
        ...

    def query_phrases(self, text: str) -> list[Phrase]:
        """The distinct units of a query, in order; each is a token sequence matched at consecutive positions."""
        ...

    # Optional: ``sequence_tokens(text) -> list[str]``, the tokens in text order for phrase and proximity
    # scoring (see :func:`sequence_tokens`); without it, the index tokens.


def _normalize(text: str) -> str:
    return unicodedata.normalize("NFKC", text).lower()


def _distinct(phrases: Iterable[Phrase]) -> list[Phrase]:
    return list(dict.fromkeys(p for p in phrases if p))


class BigramAnalyzer:
    """Words for alphabetic scripts; CJK characters as tokens, queried as overlapping bigram phrases."""

    name = "bigram"

    def index_tokens(self, text: str) -> list[str]:
        """Words, and every CJK character on its own."""
        return self.normalized_tokens(_normalize(text))

    @staticmethod
    def normalized_tokens(norm: str) -> list[str]:
        """``index_tokens`` of text already normalised (NFKC, lower case)."""
        out: list[str] = []
        for cjk, word in _TOKEN_RE.findall(norm):
            if word:
                out.append(word)
            else:
                out.extend(cjk)
        return out

    def query_phrases(self, text: str) -> list[Phrase]:
        """Distinct words and CJK bigrams (a lone CJK character is a one-token phrase)."""
        out: list[Phrase] = []
        for cjk, word in _TOKEN_RE.findall(_normalize(text)):
            if word:
                out.append((word,))
            elif len(cjk) == 1:
                out.append((cjk,))
            else:
                out.extend((cjk[i], cjk[i + 1]) for i in range(len(cjk) - 1))
        return _distinct(out)

    def terms(self, text: str) -> list[str]:
        """Words and CJK bigrams as strings (for term-overlap scoring outside the index)."""
        return ["".join(p) for p in self.query_phrases(text)]

    def sequence_tokens(self, text: str) -> list[str]:
        """The tokens in text order (:func:`sequence_tokens`): the index tokens."""
        return self.index_tokens(text)


class WhitespaceAnalyzer:
    """The Unicode word tokenizer alone: runs of letters and digits, lower-cased; CJK runs are not split."""

    name = "whitespace"

    def index_tokens(self, text: str) -> list[str]:
        """Runs of letters and digits."""
        return _WORD_RE.findall(_normalize(text))

    def query_phrases(self, text: str) -> list[Phrase]:
        """Each distinct word is a one-token phrase."""
        return _distinct((w,) for w in self.index_tokens(text))

    def sequence_tokens(self, text: str) -> list[str]:
        """The tokens in text order (:func:`sequence_tokens`): the index tokens."""
        return self.index_tokens(text)


# Sudachi refuses inputs over about 49k bytes; chunks are far smaller, long texts are cut at newlines.
_SUDACHI_MAX_CHARS = 4000
# Parts of speech left out of the index and queries: particles, auxiliary verbs, symbols, blanks.
_SKIP_POS = frozenset({"助詞", "助動詞", "補助記号", "空白", "記号"})
# Distinct morphemes (or stemmed words) whose tokens an analyzer keeps worked out; past this it starts over.
_FORMS_HELD = 500_000


def _pieces(text: str, limit: int) -> Iterable[tuple[int, str]]:
    """``text`` cut into pieces of at most ``limit`` characters (at newlines when possible), with offsets."""
    start = 0
    while len(text) - start > limit:
        cut = text.rfind("\n", start, start + limit)
        cut = cut if cut > start else start + limit
        yield start, text[start:cut]
        start = cut
    if start < len(text):
        yield start, text[start:]


class SudachiAnalyzer:
    """Japanese morphemes from SudachiPy with the core dictionary for CJK text; words for the rest.

    Each morpheme that contains CJK characters becomes a token: its dictionary normal form
    (``附属`` → ``付属``, ``読んだ`` → ``読む``) unless ``normalized=False``. Particles,
    auxiliary verbs and symbols are left out. Other text is cut into words exactly as by the
    other analyzers, so Latin text is tokenized identically by every analyzer here. The
    text goes to Sudachi in one call (per-call overhead dominates short runs), and tokens
    are put back in text order by their offsets.
    """

    name = "sudachi"

    def __init__(self, *, mode: str = "A", normalized: bool = True, skip_function_words: bool = True,
                 min_length: int = 1) -> None:
        try:
            import sudachipy
        except ImportError as exc:
            raise ConfigError('the "sudachi" analyzer needs SudachiPy: pip install "bunko[ja]"') from exc
        try:
            self._dictionary = sudachipy.Dictionary(dict="core")
        except Exception as exc:  # sudachipy raises its own error types for a missing dictionary
            raise ConfigError(f'the "sudachi" analyzer cannot load sudachidict_core ({exc}): '
                              'pip install "bunko[ja]"') from exc
        self._mode = getattr(sudachipy.SplitMode, mode)
        self.normalized = normalized
        self._skip = _SKIP_POS if skip_function_words else frozenset()
        self._min_length = min_length  # shorter tokens are left out (``combined`` keeps words of 2 or more)
        self._local = threading.local()  # a Sudachi tokenizer must not be shared between threads
        # (surface, part-of-speech id, normal form) -> the morpheme's tokens; shared by threads (a race
        # only works one out twice).
        self._forms: dict[tuple[str, int, str], tuple[str, ...]] = {}

    def _tokenizer(self) -> Any:
        tokenizer = getattr(self._local, "tokenizer", None)
        if tokenizer is None:
            tokenizer = self._local.tokenizer = self._dictionary.tokenizer(mode=self._mode)
        return tokenizer

    def _tokens_of(self, m: Any) -> tuple[str, ...]:
        """The tokens a morpheme gives (none for a function word or one without CJK characters)."""
        surface = m.surface()
        if not _CJK_CHAR_RE.search(surface) or m.part_of_speech()[0] in self._skip:
            return ()
        form = m.normalized_form().lower() if self.normalized else surface
        return tuple(t for t in _WORD_RE.findall(form) if _CJK_CHAR_RE.search(t) and len(t) >= self._min_length)

    def morphemes(self, text: str) -> list[tuple[int, str]]:
        """(offset, token) of each CJK morpheme of already normalised ``text``.

        What a morpheme gives depends only on its surface, part of speech and normal form, so it is
        worked out once per distinct morpheme (``_forms``, bounded) and looked up after: a chunk's
        morphemes mostly repeat the collection's vocabulary (2.4x fewer CPU seconds per chunk).
        """
        out: list[tuple[int, str]] = []
        tokenizer = self._tokenizer()
        forms = self._forms
        normalized = self.normalized
        for base, piece in _pieces(text, _SUDACHI_MAX_CHARS):
            for m in tokenizer.tokenize(piece):
                key = (m.surface(), m.part_of_speech_id(), m.normalized_form() if normalized else "")
                tokens = forms.get(key)
                if tokens is None:
                    if len(forms) >= _FORMS_HELD:
                        forms.clear()
                    tokens = forms[key] = self._tokens_of(m)
                if tokens:
                    at = base + m.begin()
                    out.extend((at, t) for t in tokens)
        return out

    def tokens(self, text: str) -> list[str]:
        """The tokens of each CJK morpheme of already normalised ``text``, in text order (``morphemes``
        without the offsets)."""
        out: list[str] = []
        tokenizer = self._tokenizer()
        forms = self._forms
        found = forms.get
        normalized = self.normalized
        for _, piece in _pieces(text, _SUDACHI_MAX_CHARS):
            for m in tokenizer.tokenize(piece):
                key = (m.surface(), m.part_of_speech_id(), m.normalized_form() if normalized else "")
                tokens = found(key)
                if tokens is None:
                    if len(forms) >= _FORMS_HELD:
                        forms.clear()
                    tokens = forms[key] = self._tokens_of(m)
                if tokens:
                    out.extend(tokens)
        return out

    def index_tokens(self, text: str) -> list[str]:
        """CJK morphemes and words of other scripts, in text order."""
        norm = _normalize(text)
        items = [(m.start(), m.group(2)) for m in _TOKEN_RE.finditer(norm) if m.group(2)]
        if _CJK_CHAR_RE.search(norm):
            items.extend(self.morphemes(norm))
            items.sort(key=lambda item: item[0])  # stable: a morpheme's tokens keep their order
        return [token for _, token in items]

    def query_phrases(self, text: str) -> list[Phrase]:
        """Each distinct token is a one-token phrase."""
        return _distinct((t,) for t in self.index_tokens(text))

    def sequence_tokens(self, text: str) -> list[str]:
        """The tokens in text order (:func:`sequence_tokens`): the index tokens."""
        return self.index_tokens(text)


class CombinedAnalyzer:
    """The ``bigram`` analysis plus Sudachi's multi-character CJK morphemes (split mode C).

    Bigrams find any substring, whatever the dictionary knows; whole morphemes (normal
    forms) add evidence for the words the query shares with a chunk. The morphemes follow
    the character tokens, so they never sit between two characters of a bigram phrase, and
    one-character morphemes are left out: they would only repeat the character tokens.
    Text without CJK is analyzed exactly as by ``bigram``.
    """

    name = "combined"

    def __init__(self) -> None:
        self._bigram = BigramAnalyzer()
        self._morphemes = SudachiAnalyzer(mode="C", min_length=2)

    def _words(self, norm: str) -> list[str]:
        """The multi-character CJK morphemes of normalised text."""
        if not _CJK_CHAR_RE.search(norm):
            return []
        return self._morphemes.tokens(norm)

    def index_tokens(self, text: str) -> list[str]:
        """Words and CJK characters (as ``bigram``), then the CJK morphemes."""
        norm = _normalize(text)
        return self._bigram.normalized_tokens(norm) + self._words(norm)

    def query_phrases(self, text: str) -> list[Phrase]:
        """Words and CJK bigrams (as ``bigram``), then each distinct CJK morpheme."""
        return _distinct([*self._bigram.query_phrases(text), *((t,) for t in self._words(_normalize(text)))])

    def sequence_tokens(self, text: str) -> list[str]:
        """The tokens in text order (:func:`sequence_tokens`): ``bigram``'s, without the morphemes that
        follow them (so no dictionary runs)."""
        return self._bigram.index_tokens(text)


# English stop words left out of the stemmed analyzers' index and queries: function words and
# question words (NLTK's list without its contractions). Chosen on Cranfield with
# benchmarks/bench_analyzers.py (nDCG@10, stemmed): none 0.3781, Lucene's 33 words 0.3769,
# these 0.3891. Their idf is the lowest, so they add little to a BM25 score, but they make
# every question match most chunks.
ENGLISH_STOP_WORDS = frozenset("""
a about above after again against all am an and any are as at be because been before being below between both but
by can could did do does doing down during each few for from further had has have having he her here hers herself
him himself his how i if in into is it its itself just me more most my myself no nor not now of off on once only or
other our ours ourselves out over own same she should so some such than that the their theirs them themselves then
there these they this those through to too under until up very was we were what when where which while who whom
why will with would you your yours yourself yourselves
""".split())


class StemmedAnalyzer:
    """Another analyzer's tokens with alphabetic words reduced by a Snowball stemmer (PyStemmer).

    Words of letters (``running``, ``Flows``) become their stem (``run``, ``flow``) at index and
    query time; stop words are left out. CJK tokens, digits and mixed tokens pass unchanged, so
    Japanese text is analysed exactly as by the base analyzer.
    """

    def __init__(self, name: str, base: Analyzer, *, language: str = "english",
                 stop_words: frozenset[str] = ENGLISH_STOP_WORDS) -> None:
        try:
            import Stemmer
        except ImportError as exc:  # pragma: no cover - PyStemmer is a core dependency
            raise ConfigError(f'the "{name}" analyzer needs PyStemmer: pip install PyStemmer') from exc
        self.name = name
        self._base = base
        self._stemmer = Stemmer.Stemmer(language)
        self._stop = stop_words
        self._lock = threading.Lock()  # a Snowball stemmer is not safe to share between threads
        # token -> its stem, itself, or None (a stop word); shared by threads (a race works one out twice)
        self._mapped: dict[str, str | None] = {}

    def _map(self, tokens: Iterable[str]) -> list[str]:
        """Stop words left out, alphabetic words stemmed; each distinct token worked out once (``_mapped``)."""
        tokens = list(tokens)
        mapped = self._mapped
        found: list[Any] = list(map(mapped.get, tokens, itertools.repeat(_UNSEEN, len(tokens))))
        if _UNSEEN in found:
            new = list(dict.fromkeys(t for t, f in zip(tokens, found, strict=True) if f is _UNSEEN))
            alphabetic = [t for t in new if t not in self._stop and t.isalpha() and not _CJK_CHAR_RE.search(t)]
            if alphabetic:
                with self._lock:
                    stems = self._stemmer.stemWords(alphabetic)
            if len(mapped) + len(new) > _FORMS_HELD:
                mapped.clear()
            for t in new:
                mapped[t] = None if t in self._stop else t
            if alphabetic:
                mapped.update(zip(alphabetic, stems, strict=True))
            found = list(map(mapped.__getitem__, tokens))
        return [t for t in found if t is not None] if None in found else found

    def index_tokens(self, text: str) -> list[str]:
        """The base analyzer's tokens, stop words left out, words stemmed."""
        return self._map(self._base.index_tokens(text))

    def query_phrases(self, text: str) -> list[Phrase]:
        """The base analyzer's phrases with their words stemmed (a phrase of stop words only is dropped)."""
        return _distinct(tuple(self._map(p)) for p in self._base.query_phrases(text))

    def sequence_tokens(self, text: str) -> list[str]:
        """The base analyzer's sequence tokens, stop words left out, words stemmed."""
        return self._map(sequence_tokens(self._base, text))


def _bigram_en() -> Analyzer:
    return StemmedAnalyzer("bigram_en", BigramAnalyzer())


def _combined_en() -> Analyzer:
    return StemmedAnalyzer("combined_en", CombinedAnalyzer())


def _sudachi_installed() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("sudachipy", "sudachidict_core"))


# -- registry -------------------------------------------------------------------------------
# New collections get ``combined`` when the "ja" extra is installed (it ranks best on JSQuAD),
# and ``bigram`` otherwise; a collection keeps the analyzer it was created with.
DEFAULT_ANALYZER_NAME = "combined_en" if _sudachi_installed() else "bigram_en"
_BUILT_IN: dict[str, Callable[[], Analyzer]] = {
    "bigram": BigramAnalyzer, "whitespace": WhitespaceAnalyzer, "sudachi": SudachiAnalyzer,
    "combined": CombinedAnalyzer, "bigram_en": _bigram_en, "combined_en": _combined_en}
_REGISTRY: Registry[Analyzer] = Registry("analyzer", "bunko.analyzers", _BUILT_IN, unknown=ConfigError)
_INSTANCES: dict[Callable[[], Analyzer], Analyzer] = {}  # one shared instance per factory
_LOCK = threading.Lock()


def register_analyzer(name: str, factory: Callable[[], Analyzer]) -> None:
    """Make an analyzer available by name (built on first use, then shared).

    Plugins can also name analyzers in the ``bunko.analyzers`` entry-point group.
    """
    _REGISTRY.register(name, factory)


def analyzer_names() -> list[str]:
    """The registered analyzer names."""
    return _REGISTRY.names()


def built_in(analyzer: Analyzer) -> bool:
    """Whether ``analyzer`` is the shared instance of a built-in analyzer, which any process can build
    again by its name (a plugin's, or one registered at run time, exists only where it was made)."""
    factory = _BUILT_IN.get(getattr(analyzer, "name", ""))
    with _LOCK:
        return factory is not None and _INSTANCES.get(factory) is analyzer


def get_analyzer(name: str | None = None) -> Analyzer:
    """The analyzer registered as ``name`` (the default when None); ``ConfigError`` if unknown."""
    factory = _REGISTRY.get(name or DEFAULT_ANALYZER_NAME)
    with _LOCK:
        analyzer = _INSTANCES.get(factory)
        if analyzer is None:
            analyzer = _INSTANCES[factory] = factory()
        return analyzer


# -- token sequences: phrase and proximity ---------------------------------------------------
def sequence_tokens(analyzer: Analyzer, text: str) -> list[str]:
    """The tokens of ``text`` in text order, as phrase and proximity scoring reads a chunk and a query:
    the analyzer's ``sequence_tokens`` if it has one, else its index tokens. The built-in analyzers give
    their index tokens in text order without the tokens appended after them (``combined``'s morphemes),
    so no dictionary runs; the same function reads the query and the chunk."""
    method = getattr(analyzer, "sequence_tokens", None)
    return list(method(text)) if method is not None else analyzer.index_tokens(text)


def sequence_units(tokens: Sequence[str]) -> list[tuple[int, str]]:
    """The statistics terms of a token sequence, each with the position of its first token: a run of
    one-character tokens gives its pairs (``"東 京"``, ``"京 都"``; a lone one-character token itself),
    any other token itself. The terms are those of ``phrase_term``, so a query's units are its phrases'
    terms, and two units follow each other in the text when their positions differ by one."""
    out: list[tuple[int, str]] = []
    n = len(tokens)
    for i, token in enumerate(tokens):
        if len(token) != 1:
            out.append((i, token))
        elif i + 1 < n and len(tokens[i + 1]) == 1:
            out.append((i, f"{token} {tokens[i + 1]}"))
        elif i == 0 or len(tokens[i - 1]) != 1:
            out.append((i, token))
    return out


# -- rendering for the stores ---------------------------------------------------------------
def fts5_document(tokens: list[str]) -> str:
    """The text stored in the FTS5 column: the tokens joined by spaces (``unicode61`` splits there)."""
    return " ".join(tokens)


def _fts5_quote(token: str) -> str:
    return '"' + token.replace('"', '""') + '"'


def fts5_query(phrases: list[Phrase]) -> str | None:
    """An FTS5 MATCH expression: the phrases, each a double-quoted string, ORed (None if there are none).

    Every phrase is quoted, so user text is never parsed as FTS5 syntax.
    """
    if not phrases:
        return None
    return " OR ".join(_fts5_quote(" ".join(p)) for p in phrases)


def _ts_quote(token: str) -> str:
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"


# tsvector positions run from 1 to 16383; later positions are clamped to the last one.
_TS_MAX_POSITION = 16383


def token_pairs(tokens: Sequence[str]) -> Iterator[tuple[int, str]]:
    """Each pair of adjacent one-character tokens (a CJK bigram) as the term ``"a b"``, with the index
    of its first token: with the tokens themselves, the keyword statistics terms both stores keep."""
    for i, (a, b) in enumerate(itertools.pairwise(tokens)):
        if len(a) == 1 and len(b) == 1:
            yield i, f"{a} {b}"


def phrase_term(phrase: Sequence[str]) -> str | None:
    """The keyword statistics term of a query phrase: its token, or ``"a b"`` for two one-character
    tokens (a CJK bigram); None for a phrase of any other shape, which the keyword index does not keep."""
    if len(phrase) == 1:
        return phrase[0]
    if len(phrase) == 2 and len(phrase[0]) == 1 and len(phrase[1]) == 1:
        return " ".join(phrase)
    return None


# Text an analyzer is tried on when a collection is created with it (see check_phrase_shapes).
_SHAPE_PROBES = (
    "東京都の防災マニュアル、2024年版。非常用の水は一人一日3リットル。",
    "Trace-based Just-in-Time Type Specialization for Dynamic Languages; running flows.",
    "ソウル 서울 北京 Zürich naïve café 123 abc-def",
)


def check_phrase_shapes(analyzer: Analyzer) -> None:
    """Refuse an analyzer whose query phrases the keyword index cannot answer.

    The index keeps tokens and pairs of adjacent one-character tokens (``phrase_term``), so a phrase of
    one token or of two one-character tokens is all a query may ask for; the built-in analyzers make
    nothing else. Tried on probe texts of several scripts when a collection is created, so a plug-in
    analyzer that makes longer phrases is refused then, not at its first search.
    """
    for text in _SHAPE_PROBES:
        for phrase in analyzer.query_phrases(text):
            if phrase_term(phrase) is None:
                raise ConfigError(
                    f"the {getattr(analyzer, 'name', type(analyzer).__name__)!r} analyzer makes the query phrase "
                    f"{phrase!r}; the keyword index answers phrases of one token or of two one-character tokens")


def tsvector_literal(tokens: list[str]) -> str:
    """A ``tsvector`` input literal: each token quoted, with its position (``'水':1 'の':2 '水':3``).

    Cast in SQL (``::tsvector``), which merges a repeated token's positions. PostgreSQL's text-search
    parser never sees the text, so the stored lexemes are exactly the analyzer's tokens. Measured per
    250-character chunk against ``to_tsvector('simple', ' '.join(tokens))``: 20 µs here + 43 µs for the
    cast, against 4 + 85 µs.
    """
    if len(tokens) > _TS_MAX_POSITION:
        positions: Iterable[int] = (min(i, _TS_MAX_POSITION) for i in range(1, len(tokens) + 1))
    else:
        positions = range(1, len(tokens) + 1)
    joined = "".join(tokens)
    if "'" in joined or "\\" in joined:
        return " ".join([f"{_ts_quote(t)}:{i}" for t, i in zip(tokens, positions, strict=True)])
    return " ".join([f"'{t}':{i}" for t, i in zip(tokens, positions, strict=True)])


def pairs_literal(pairs: dict[str, list[int]]) -> str:
    """A ``tsvector`` input literal of whole lexemes with their positions (``'水 の':1,7 'の 量':2``)."""
    return " ".join([f"{_ts_quote(t)}:{','.join(map(str, ps))}" for t, ps in pairs.items()])


def pairs_positions_literal(tokens: Sequence[str], limit: int) -> str:
    """A ``tsvector`` input literal of each pair of adjacent one-character tokens (``'a b'``) at the position
    of its first token (from 1), for pairs whose first token lies before ``limit``: one entry per
    occurrence, in text order (``'水 の':1 'の 量':2 '水 の':7``). The cast merges a repeated pair's
    positions, so it stores what :func:`pairs_literal` of the grouped pairs stores, without grouping them
    here (a third of the CPU time of a PostgreSQL write's analysis of Japanese text went to grouping)."""
    head = tokens[:limit + 1]
    single = [len(t) == 1 for t in head]
    joined = "".join(head)
    if "'" in joined or "\\" in joined:
        return " ".join([f"{_ts_quote(a + ' ' + b)}:{i}" for i, (a, b, x, y)
                         in enumerate(zip(head, head[1:], single, single[1:], strict=False), 1) if x and y])
    return " ".join([f"'{a} {b}':{i}" for i, (a, b, x, y)
                     in enumerate(zip(head, head[1:], single, single[1:], strict=False), 1) if x and y])


def ts_lexemes_query(lexemes: Iterable[str]) -> str | None:
    """A ``tsquery`` input literal matching any of these whole lexemes (spaces included)."""
    quoted = [_ts_quote(t) for t in lexemes]
    return " | ".join(quoted) if quoted else None


def tsquery_literal(phrases: list[Phrase]) -> str | None:
    """A ``tsquery`` input literal: each phrase's tokens joined by ``<->``, the phrases ORed."""
    if not phrases:
        return None
    return " | ".join("(" + " <-> ".join(_ts_quote(t) for t in p) + ")" for p in phrases)


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
