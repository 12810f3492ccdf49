"""The extractive answer: what ``ask`` says when no LLM is configured (R23, R25).

It should read like an answer: the sentence, or the short span of one, that answers the
question, quoted as written, with enough around it to stand alone, each quote followed by the
``[N]`` of the chunk it comes from. Three steps:

1. **Passages** (:func:`split_passages`). Each retrieved chunk is cut into quotable passages.
   The lines of a paragraph are joined first (PDF and wrapped text break lines inside a
   sentence), then cut at ``。！？`` and at ``. ! ?`` before a capital. A sentence right before a
   list (a lead-in such as "pack the following:") carries the list's items; a table row carries
   its header row (``name: value`` pairs), and so does a record written as three or more
   ``name: value`` lines (a spreadsheet row too wide for a table, a form); such a row is never cut
   into pieces, and a quote of a long one keeps its first pair (the row's key) before the pairs
   that match the question. Text without sentence punctuation (verse, slides,
   labels) is grouped line by line into passages of up to about 100 characters, and a very long
   run without punctuation is cut at clause boundaries, so there is always something to quote.
2. **Scores** (:meth:`ExtractiveAnswerer.select`). The cosine between the question's embedding
   (the one the search already made) and each passage's, plus the IDF-weighted share of the
   question's terms the passage holds (IDF over the candidate passages, so words every passage
   has count for little), plus a small prior for the chunk's search rank.
3. **Quotes**. The best passage, and up to two more that score nearly as well, within a
   character budget. A long sentence is cut to the clauses that match the question best (``…``
   marks the cut); a sentence that opens with a back-reference ("This", "その…") brings the
   sentence before it.

When nothing matches the question, by meaning or by its words, or nothing was retrieved, the
answer is one sentence that says the documents do not contain it, in the question's language.
The weights and thresholds were chosen on jsquad-dev (``bunko eval --answers``; see
docs/ARCHITECTURE.md "Extractive answers").
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .analysis import DEFAULT_ANALYZER, detect_language

# -- passages ------------------------------------------------------------------------------------

# A sentence: up to 。！？!? and the closing brackets or quotes after them.
_SENTENCE_RE = re.compile(r"[^。！？!?]*(?:[。！？!?]+[」』）)\]\"'”’]*|$)")
# English sentence ends inside a run: ". " before a capital (after a lower-case letter, a digit or an
# acronym such as "ID.", not after an initial: "J. Smith", "U.S. Army").
_EN_SPLIT_RE = re.compile(r"(?:(?<=[a-z0-9)\"'”’%][.!?])|(?<=[A-Z]{2}[.]))\s+(?=[A-Z\"'(“‘])")
_HEADING_RE = re.compile(r"^\s*#{1,6}\s")
# List markers: ASCII bullets and numbers need a space after them; the typographic bullets do not.
_LIST_RE = re.compile(r"^\s*(?:[-*+]\s+|[・•●○◦▪■□◆◇►▶]\s*|\d{1,3}[.)）]\s+|[（(]\d{1,3}[)）]\s*)")
_TABLE_ROW_RE = re.compile(r"^\s*\|.*\|\s*$")
_TABLE_RULE_RE = re.compile(r"^\s*\|?[\s:|-]*-[\s:|-]*\|?\s*$")
_CJK_RE = re.compile(r"[\u3005\u3006\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9d"
                     r"\u3000-\u303f\uff01-\uff0f\uff1a-\uff20]")
_WORD_CHAR_RE = re.compile(r"[^\W_]")
# Where a long run may be cut: after a comma-like mark or at a space.
_CLAUSE_RE = re.compile(r"(?<=[、，,;；:：])\s*|\s+")
_FINAL_PUNCT = ("。", "！", "？", ".", "!", "?", "」", "』", "）", ")", ":", "：", "”", "’", "\"")
# A line without sentence punctuation shorter than this is a fragment (a verse line, a slide
# bullet, a label): fragments are grouped into passages of up to VERSE_CHARS.
FRAGMENT_CHARS = 40
VERSE_CHARS = 100
VERSE_JOIN = " / "
# A unit longer than this is cut at clause boundaries before it is scored.
MAX_UNIT_CHARS = 240
MAX_LIST_ITEMS = 12
# A record: "name: value" lines (a short name; an ASCII colon needs a space after it, so URLs are not names).
_PAIR_RE = re.compile(r"^\s*([^\s:：|][^:：|]{0,23}?)\s*(?::\s+|：\s*)(\S.*)$")
MIN_RECORD_PAIRS = 3
# A value of a row longer than this is shortened (…) in its passage, so a row stays one quotable unit.
ROW_VALUE_CHARS = 80
_PIPE_RE = re.compile(r"(?<!\\)\|")
_DIGITS_RE = re.compile(r"\d+")
MAX_LIST_CHARS = 700


@dataclass(slots=True)
class Passage:
    """A quotable unit of a chunk: a sentence (or a group of verse lines, or a table row), plus what it needs
    to stand alone: the items of the list it introduces, and the sentence before it."""

    text: str  # what is scored against the question, and quoted
    items: list[str] = field(default_factory=list)  # list items shown under an introducing sentence
    more_items: int = 0  # items of that list left out
    previous: str = ""  # the sentence before it in its paragraph, if any
    ends_chunk: bool = False  # the last passage of its chunk: a list it introduces may be in the next chunk
    row: bool = False  # a table row or record as "name: value; ..." pairs: quoted whole, or its key and best pairs

    def render(self) -> str:
        """The passage as quoted in an answer (list items on their own lines)."""
        lines = [self.text, *(f"    - {item}" for item in self.items)]
        if self.more_items:
            lines.append("    - …")
        return "\n".join(lines)


def _is_cjk(char: str) -> bool:
    return bool(_CJK_RE.match(char))


def _join(left: str, right: str) -> str:
    """Two pieces of one sentence broken across lines: no space between CJK characters."""
    if not left:
        return right
    if not right:
        return left
    return left + right if _is_cjk(left[-1]) and _is_cjk(right[0]) else left + " " + right


def _quotable(text: str) -> bool:
    """At least two letters or digits: leaves out page numbers, bullets and stray marks."""
    return len(_WORD_CHAR_RE.findall(text)) >= 2 and not text.strip().isdigit()


def _pieces(text: str, limit: int = MAX_UNIT_CHARS) -> list[str]:
    """``text`` cut at clause boundaries (a hard cut when a clause is longer) into pieces of at most ``limit``."""
    if len(text) <= limit:
        return [text]
    out: list[str] = []
    current = ""
    for clause in (c for c in _CLAUSE_RE.split(text) if c):
        while len(clause) > limit:
            if current:
                out.append(current)
                current = ""
            out.append(clause[:limit])
            clause = clause[limit:]
        if current and len(current) + len(clause) + 1 > limit:
            out.append(current)
            current = ""
        current = _join(current, clause) if current else clause
    if current:
        out.append(current)
    return [p.strip() for p in out if p.strip()]


def _cells(line: str) -> list[str]:
    """The cells of a Markdown table row (``\\|`` is a pipe inside a cell)."""
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") and not inner.endswith("\\|") else inner
    return [c.strip().replace("\\|", "|") for c in _PIPE_RE.split(inner)]


def _row(pairs: list[tuple[str, str]]) -> Passage:
    """A row's passage: its non-empty cells as ``name: value`` pairs, long values shortened."""
    def shown(value: str) -> str:
        return value if len(value) <= ROW_VALUE_CHARS else value[:ROW_VALUE_CHARS].rstrip() + "…"

    return Passage("; ".join(f"{name}: {shown(value)}" if name else shown(value) for name, value in pairs if value),
                   row=True)


def _sentences(text: str) -> list[str]:
    out: list[str] = []
    for piece in _SENTENCE_RE.findall(text):
        out.extend(p.strip() for p in _EN_SPLIT_RE.split(piece) if p.strip())
    return out


def _complete(sentence: str) -> bool:
    return sentence.endswith(_FINAL_PUNCT)


class _Splitter:
    """One pass over a chunk's lines (see :func:`split_passages`)."""

    def __init__(self) -> None:
        self.passages: list[Passage] = []
        self.paragraph: list[str] = []
        self.fragments: list[str] = []
        self.lead: Passage | None = None  # the sentence that ended the paragraph just closed
        self.list_owner: Passage | None = None  # the lead-in whose list is being read
        self.item: Passage | None = None  # the list item being read (continuation lines join it)
        self.owner_items: list[Passage] = []
        self.table_header: list[str] | None = None
        self.pairs: list[str] = []  # "name: value" lines that may be a record (see flush_pairs)

    # fragments: lines without sentence punctuation, grouped
    def flush_fragments(self) -> None:
        group: list[str] = []
        for fragment in filter(_quotable, self.fragments):
            if group and len(VERSE_JOIN.join([*group, fragment])) > VERSE_CHARS:
                self._add(Passage(VERSE_JOIN.join(group)))
                group = []
            group.append(fragment)
        if group:
            self._add(Passage(VERSE_JOIN.join(group)))
        self.fragments = []

    def _add(self, passage: Passage) -> Passage | None:
        if not _quotable(passage.text):
            return None
        self.passages.append(passage)
        return passage

    def close_paragraph(self) -> None:
        if not self.paragraph:
            return
        self.lead = None
        text = ""
        for line in self.paragraph:
            text = _join(text, line.strip())
        self.paragraph = []
        previous = ""
        for sentence in _sentences(text):
            if not _complete(sentence) and len(sentence) < FRAGMENT_CHARS:
                self.fragments.append(sentence)
                previous = ""
                self.lead = None
                continue
            self.flush_fragments()
            for piece in _pieces(sentence):
                added = self._add(Passage(piece, previous=previous))
                if added is not None:
                    previous = piece
                    self.lead = added

    def close_list(self) -> None:
        owner, items = self.list_owner, self.owner_items
        if owner is not None and items:
            texts = [i.text for i in items]
            shown: list[str] = []
            for text in texts[:MAX_LIST_ITEMS]:
                if shown and sum(map(len, shown)) + len(text) > MAX_LIST_CHARS:
                    break
                shown.append(text)
            owner.items = shown
            owner.more_items = len(texts) - len(shown)
        self.list_owner, self.owner_items, self.item = None, [], None

    def close_table(self) -> None:
        self.table_header = None

    def flush_pairs(self) -> None:
        """Lines of ``name: value`` held back: a record when there are enough of them, else read as text."""
        lines, self.pairs = self.pairs, []
        if len(lines) < MIN_RECORD_PAIRS:
            for line in lines:
                self._feed(line)
            return
        self.close_paragraph()
        self.flush_fragments()
        self.close_list()
        self.close_table()
        self.lead = None
        matches = [_PAIR_RE.match(line) for line in lines]
        self._add(_row([(m.group(1), m.group(2).strip()) for m in matches if m]))

    def feed(self, line: str) -> None:
        if self.item is None and _PAIR_RE.match(line) and not _TABLE_ROW_RE.match(line) \
                and not _LIST_RE.match(line):
            self.pairs.append(line)
            return
        self.flush_pairs()
        self._feed(line)

    def _feed(self, line: str) -> None:
        stripped = line.strip()
        if not stripped:
            self.close_paragraph()
            self.item = None  # a blank line ends an item (not the list: items may be spaced out)
            self.close_table()
            return
        if _HEADING_RE.match(line):
            self.close_paragraph()
            self.flush_fragments()
            self.close_list()
            self.close_table()
            self.lead = None
            return
        if _TABLE_ROW_RE.match(line):
            self.close_paragraph()
            self.flush_fragments()
            self.close_list()
            self.lead = None
            if _TABLE_RULE_RE.match(line):
                return
            cells = _cells(stripped)
            if self.table_header is None:
                self.table_header = cells
                return
            header = self.table_header + [""] * (len(cells) - len(self.table_header))
            self._add(_row(list(zip(header, cells, strict=False))))
            return
        self.close_table()
        if _LIST_RE.match(line) and _WORD_CHAR_RE.search(_LIST_RE.sub("", line)):
            if self.list_owner is None:
                self.close_paragraph()  # sets the lead-in: the paragraph's last sentence
                self.flush_fragments()
                self.list_owner = self.lead
            if self.owner_items and self.owner_items[-1].text.endswith((":", "：")) and \
                    self.owner_items[-1] is not self.list_owner:
                owner = self.owner_items[-1]  # "• Tools:" then "- a", "- b": a list inside a list
                self.close_list()
                self.list_owner = owner
            self.item = Passage(_LIST_RE.sub("", line).strip())
            self.passages.append(self.item)
            self.owner_items.append(self.item)
            return
        if self.item is not None:  # a wrapped list item
            self.item.text = _join(self.item.text, stripped)
            return
        self.close_list()
        self.paragraph.append(stripped)

    def finish(self) -> list[Passage]:
        self.flush_pairs()
        self.close_paragraph()
        self.flush_fragments()
        self.close_list()
        kept: list[Passage] = []
        for passage in self.passages:
            if passage.items or _quotable(passage.text):
                if len(passage.text) > MAX_UNIT_CHARS and not passage.items and not passage.row:
                    kept.extend(Passage(p) for p in _pieces(passage.text))
                else:
                    kept.append(passage)
        return kept


def split_passages(text: str) -> list[Passage]:
    """The quotable passages of a chunk, in order; headings and bare marks are left out.

    A sentence followed by a list (blank lines between allowed) carries the list's items, so
    "you should pack the following:" quotes what follows; the items are passages of their own too.
    """
    splitter = _Splitter()
    for line in text.split("\n"):
        splitter.feed(line)
    return splitter.finish()


def split_sentences(text: str) -> list[str]:
    """The quotable sentences (passages) of a chunk."""
    return [p.text for p in split_passages(text)]


# -- messages ------------------------------------------------------------------------------------

MESSAGES = {
    "ja": {
        "header": "文書からの抜粋です（抽出型の回答、LLM なし）：",
        "none": "この質問への答えは、お手元の文書には見つかりませんでした。",
    },
    "en": {
        "header": "From your documents (an extractive answer, no LLM):",
        "none": "The answer to this question was not found in your documents.",
    },
}


def answer_language(question: str) -> str:
    """``ja`` for a Japanese (or Chinese) question, else ``en``: the language of the fixed sentences."""
    return "ja" if detect_language(question) in ("ja", "zh") else "en"


def answer_body(answer: str) -> str:
    """An answer without the extractive answer's header line, stripped: empty when nothing was answered."""
    text = answer.strip()
    for messages in MESSAGES.values():
        if text.startswith(messages["header"]):
            text = text[len(messages["header"]):].strip()
    return text


def is_not_found(text: str) -> bool:
    """Whether ``text`` (an answer's body) is the "not found in your documents" sentence."""
    return text.strip() in {messages["none"] for messages in MESSAGES.values()}


# -- selection -----------------------------------------------------------------------------------

# Opening words that point back at the sentence before ("This", "その…"): that sentence comes along.
_BACK_REFERENCE_RE = re.compile(
    r"^(?:(?:this|that|these|those|it|they|such|he|she|its|their|there)\b|(?:この|その|これ|それ|あの|同|彼|彼女))",
    re.IGNORECASE)

# Sentences that describe the document rather than state something ("This guide lists…",
# "このガイドは…"): an introduction, not an answer, so they score a little lower.
_ABOUT_THE_DOCUMENT_RE = re.compile(
    r"^(?:(?:this|the)\s+(?:guide|document|page|article|chapter|section|checklist|report|paper|book|manual)\b"
    r"|(?:この|本)(?:ガイド|文書|資料|ページ|記事|章|節|書|マニュアル|チェックリスト)(?:は|では|で)|ここでは)",
    re.IGNORECASE)
# English function and question words: matching them says nothing about an answer.
_STOPWORDS = frozenset("""
a an the and or but if of in on at to for from by with about as into over after before is are was were be been
being am do does did doing have has had having i me my we our you your he she it its they them their this that
these those there here what which who whom whose when where why how can could should would will shall may might
must not no so than then too very just also any some such each every all both more most other own same only
""".split())

Embed = Callable[[list[str]], Awaitable[np.ndarray]]
# The text that follows hit N's chunk in its document (None if none): where a lead-in's list goes on.
Following = Callable[[int], Awaitable[str | None]]


@dataclass(slots=True)
class Quote:
    """One quote of an extractive answer: from ``hits[hit]``, shown as ``text``; ``passage`` is its source text."""

    hit: int
    text: str
    passage: str
    score: float


@dataclass(slots=True)
class Selection:
    """What :meth:`ExtractiveAnswerer.select` found: the quotes (best first), or none (not found)."""

    quotes: list[Quote]
    confidence: float
    embedded_texts: int


def _mostly_cjk(text: str) -> bool:
    letters = _WORD_CHAR_RE.findall(text)
    return bool(letters) and sum(1 for c in letters if _is_cjk(c)) * 2 >= len(letters)


def _flat(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).lower().split())


class ExtractiveAnswerer:
    """Picks the passages of retrieved chunks that answer a question (see the module docstring)."""

    def __init__(self, *, max_quotes: int = 3, min_similarity: float = 0.35, min_overlap: float = 0.3,
                 cosine_weight: float = 0.5, overlap_weight: float = 0.5, rank_weight: float = 0.1,
                 about_penalty: float = 0.2, fragment_penalty: float = 0.1, margin: float = 0.1, budget: int = 350,
                 quote_chars: int = 200,
                 max_candidates: int = 80) -> None:
        self.max_quotes = max_quotes
        self.min_similarity = min_similarity  # cosine below which a passage does not mean what was asked
        self.min_overlap = min_overlap  # weighted share of the question's terms below which it does not say it
        self.cosine_weight = cosine_weight
        self.overlap_weight = overlap_weight
        self.rank_weight = rank_weight
        self.about_penalty = about_penalty
        self.fragment_penalty = fragment_penalty
        self.margin = margin  # a further quote scores at least the best score minus this
        self.budget = budget  # characters of further quotes (the best one is always shown)
        self.quote_chars = quote_chars  # a longer sentence is cut to its best clauses
        self.max_candidates = max_candidates

    def candidates(self, contents: Sequence[str]) -> list[tuple[int, Passage]]:
        """(hit number, passage) for every distinct passage of the contents, best hit first."""
        out: list[tuple[int, Passage]] = []
        seen: set[str] = set()
        for number, content in enumerate(contents):
            passages = split_passages(content)
            if passages:
                passages[-1].ends_chunk = True
            for passage in passages:
                key = _flat(passage.text)
                if key in seen:  # overlap between chunks repeats sentences
                    continue
                seen.add(key)
                out.append((number, passage))
                if len(out) >= self.max_candidates:
                    return out
        return out

    async def select(self, question: str, contents: Sequence[str], embed: Embed,
                     query_vector: Any = None, following: Following | None = None) -> Selection:
        """The quotes that answer ``question`` from ``contents`` (the retrieved chunks' text, best first).

        ``embed`` embeds a list of texts; ``query_vector`` is the question's embedding when the
        search already made it (the question is then not embedded again). ``following`` reads the
        text after a chunk, for a quoted lead-in whose list starts in the next chunk.
        """
        candidates = self.candidates(contents)
        if not candidates:
            return Selection([], 0.0, 0)
        texts = [p.text for _, p in candidates]
        term_sets = [self._terms(t) for t in texts]
        weights = self._weights(question, term_sets)
        overlap = self._overlap(weights, term_sets)
        # Terms cannot match across scripts (an English question, Japanese passages): there, the meaning
        # (cosine) stands in for the overlap, so those passages are not scored down for their language.
        asked_cjk = _mostly_cjk(question)
        # (digits belong to no script: a table row of codes and amounts is in the script of its words)
        other_script = np.array([_mostly_cjk(_DIGITS_RE.sub("", t) if p.row else t) != asked_cjk
                                 for t, (_, p) in zip(texts, candidates, strict=True)])
        q = None if query_vector is None else np.asarray(query_vector, dtype=np.float32).ravel()
        vectors = await embed(texts if q is not None else [question, *texts])
        embedded = len(texts) if q is not None else len(texts) + 1
        if q is None or q.shape[0] != vectors.shape[1]:
            if q is not None:  # another embedder's vector: embed the question after all
                vectors = np.vstack([await embed([question]), vectors])
                embedded += 1
            q, vectors = vectors[0], vectors[1:]
        norms = np.linalg.norm(vectors, axis=1) * (float(np.linalg.norm(q)) or 1.0)
        cosine = (vectors @ q) / np.where(norms == 0, 1.0, norms)
        term_overlap, overlap = overlap, np.where(other_script, np.clip(cosine, 0.0, 1.0), overlap)
        ranks = np.array([number for number, _ in candidates], dtype=np.float64)
        about = np.array([bool(_ABOUT_THE_DOCUMENT_RE.match(t)) for t in texts], dtype=np.float64)
        # A title or a label says less than a sentence (among verse or slides, all are fragments alike).
        fragment = np.array([not (p.items or _complete(p.text)) for _, p in candidates], dtype=np.float64)
        scores = (self.cosine_weight * cosine + self.overlap_weight * overlap + self.rank_weight / (1.0 + ranks)
                  - self.about_penalty * about - self.fragment_penalty * fragment)
        if float(cosine.max()) < self.min_similarity and float(term_overlap.max()) < self.min_overlap:
            return Selection([], 0.0, embedded)
        order = [int(i) for i in np.argsort(-scores, kind="stable")]
        best = float(scores[order[0]])
        quotes: list[Quote] = []
        shown: set[str] = set()
        used = 0
        for i in order:
            if len(quotes) == self.max_quotes or (quotes and float(scores[i]) < best - self.margin):
                break
            number, passage = candidates[i]
            if passage.text in shown:  # already quoted as an item under a lead-in
                continue
            if passage.ends_chunk and not passage.items and following is not None and _complete(passage.text):
                passage = await self._with_list(passage, number, following)
            text = self._quote(passage, weights)
            if quotes and used + len(text) > self.budget:
                continue
            quotes.append(Quote(number, text, passage.text, float(scores[i])))
            shown.add(passage.text)
            shown.update(passage.items)
            used += len(text) if len(quotes) > 1 else 0
        confidence = max(0.0, min(1.0, float(cosine[order[0]])))
        return Selection(quotes, confidence, embedded)

    @staticmethod
    async def _with_list(passage: Passage, number: int, following: Following) -> Passage:
        """``passage`` with the items of a list that follows it in the next chunk, if one does."""
        tail = await following(number)
        if not tail:
            return passage
        extended = split_passages(passage.text + "\n" + tail)
        if extended and extended[0].text == passage.text and extended[0].items:
            return Passage(passage.text, extended[0].items, extended[0].more_items, passage.previous)
        return passage

    # -- scoring helpers --------------------------------------------------------------------------
    @staticmethod
    def _terms(text: str) -> set[str]:
        return set(DEFAULT_ANALYZER.terms(text))

    def _weights(self, question: str, term_sets: Sequence[set[str]]) -> dict[str, float]:
        """IDF weight of each question term over the candidates' terms (a term no candidate has: the highest)."""
        n = len(term_sets)
        weights = {}
        for term in dict.fromkeys(DEFAULT_ANALYZER.terms(question)):
            if term in _STOPWORDS:
                continue
            df = sum(1 for terms in term_sets if term in terms)
            weights[term] = math.log(1.0 + n / (1.0 + df))
        return weights

    @staticmethod
    def _overlap(weights: dict[str, float], term_sets: Sequence[set[str]]) -> np.ndarray:
        """The IDF-weighted share of the question's terms in each candidate."""
        total = sum(weights.values())
        if total <= 0:
            return np.zeros(len(term_sets))
        return np.array([sum(w for t, w in weights.items() if t in terms) / total for terms in term_sets])

    def _quote(self, passage: Passage, weights: dict[str, float]) -> str:
        """The passage as quoted: a long sentence cut to its best clauses, a back-reference with its antecedent."""
        text = passage.text
        if passage.row and len(text) > self.quote_chars:  # the row's key, then the pairs that match best
            key, _, rest = text.partition("; ")
            text = key + "; " + self._window(rest, weights, max(40, self.quote_chars - len(key) - 2))
        elif len(text) > self.quote_chars and not passage.items:
            text = self._window(text, weights)
        elif passage.previous and _BACK_REFERENCE_RE.match(text):
            previous = passage.previous
            if len(previous) + len(text) > self.quote_chars:  # the end of the sentence before, at most
                previous = self._window(previous, {}, max(40, self.quote_chars - len(text)), tail=True)
            text = _join(previous, text)
        if passage.items:
            return Passage(text, passage.items, passage.more_items).render()
        return text

    def _window(self, text: str, weights: dict[str, float], limit: int | None = None, *, tail: bool = False) -> str:
        """The run of clauses of ``text`` (at most ``limit`` long) that holds the most question terms
        (``tail``: the last clauses that fit)."""
        limit = limit or self.quote_chars
        clauses = [m.group(0) for m in re.finditer(r".*?(?:[、，,;；]\s*|$)", text) if m.group(0)]
        best_score, best_span = -1.0, (0, 0)
        for start in range(len(clauses)):
            length, end = 0, start
            while end < len(clauses) and length + len(clauses[end]) <= limit:
                length += len(clauses[end])
                end += 1
            if end == start:  # one clause longer than the budget
                end = start + 1
            terms = self._terms("".join(clauses[start:end]))
            score = float(end == len(clauses)) if tail else sum(w for t, w in weights.items() if t in terms)
            if score > best_score:
                best_score, best_span = score, (start, end)
        start, end = best_span
        quote = "".join(clauses[start:end]).strip()
        if len(quote) > limit:
            quote = quote[:limit].rstrip()
            end = len(clauses) + 1  # cut inside the clause: mark the end
        return ("…" if start > 0 else "") + quote + ("…" if end < len(clauses) else "")


__all__ = [
    "MESSAGES",
    "ExtractiveAnswerer",
    "Passage",
    "Quote",
    "Selection",
    "answer_body",
    "answer_language",
    "is_not_found",
    "split_passages",
    "split_sentences",
]
