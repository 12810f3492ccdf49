"""Keyword ranking: exact BM25 over a collection's postings, the one keyword ranker of every store.

A store keeps, per collection, the postings of every statistics term (a token, or a pair of adjacent
one-character tokens: a CJK bigram) and each term's document frequency, and hands them out through
its search port (:class:`~bunko.stores.base.CollectionReader`). This module analyzes the query with
the collection's analyzer, looks up the statistics, reads the postings of the query's terms and ranks
them in numpy (``bm25_top``), so both stores score a query the same, to the bit.

The scoring is FTS5's ``bm25()`` with its default weights, which ``bunko.testing.oracles`` holds the
postings to: k1 = 1.2, b = 0.75; a phrase's idf is ln((N - n + 0.5) / (n + 0.5)) over N chunks, n of
which hold the phrase, or 1e-6 when that is not positive; a chunk scores the sum over the query's
phrases, in query order, of idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * D / avgdl)), D its token count.
A restricted search (documents, a metadata filter) ranks only the chunks the restriction allows, with
the collection's statistics, so a chunk scores the same with or without it.

Phrase, proximity and title (:class:`Proximity`): BM25 scores terms independently, so a chunk that holds
a title word for word ranks below one that repeats one of its words. The leg therefore takes BM25's best
``candidates`` chunks, reads their text and their document's title in the same transaction, and
multiplies each one's score by 1 + ``phrase`` x (the share of the query's adjacent term pairs the chunk
holds in the same order, next to each other) + ``near`` x (the share it holds within ``window`` tokens
of each other, in either order but not adjacent) + ``title`` x (how well its document's title matches
the query), pairs and terms weighed by idf. Terms are the statistics terms (a word, or a CJK bigram:
two adjacent bigrams of a query are a character trigram), read from the chunk's and the query's token
sequence (:func:`bunko.analysis.sequence_tokens`) after stemming and stop words, the same on both
stores. In hybrid mode the documents whose title matches are also a leg of their own (``title_leg``).
A query of one term with no title weight is left as BM25 ranks it. The weights are chosen with
``benchmarks/phrase_sweep.py`` (docs/ARCHITECTURE.md "Phrase and title").
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from ..analysis import get_analyzer, phrase_term, sequence_tokens, sequence_units
from ..errors import ConfigError
from ..stores.base import CollectionReader, Postings, Ranked, Restriction
from ..stores.sql.postings import term_counts

K1 = 1.2
B = 0.75
# MaxScore: the rarest phrases whose document counts add up to at most this many are essential at first.
KEYWORD_CANDIDATES = 20_000
# The most cells (phrases x chunks) of the matrix ``bm25_top`` scores chunks exactly in, at once.
_EXACT_CELLS = 1 << 20



@dataclass(frozen=True, slots=True)
class Proximity:
    """How the keyword leg rewards a chunk that holds the query's terms in order or close together: the
    weight of in-order adjacent pairs (``phrase``) and of pairs within ``window`` tokens (``near``), over
    BM25's best ``candidates`` chunks (at least as many as the search shows, see :func:`keyword_legs`);
    and a chunk of a document whose title matches the query: its weight in the keyword score (``title``)
    and the weight of the title leg in hybrid fusion (``title_leg``)."""

    phrase: float = 0.0
    near: float = 0.0
    window: int = 8
    candidates: int = 30
    title: float = 0.0
    title_leg: float = 0.0


# Chosen on jsquad-dev and cranfield as `bunko eval` runs them (benchmarks/phrase_sweep.py; docs/ARCHITECTURE.md
# "Phrase and title"): proximity without order helps neither set, so ``near`` is 0.
PROXIMITY: Proximity | None = Proximity(phrase=0.2, near=0.0, window=8, candidates=20, title=1.0, title_leg=0.05)


class UseDefault:
    """The type of :data:`DEFAULT`: "the module's :data:`PROXIMITY` when the search runs"."""


DEFAULT = UseDefault()  # keyword_leg's proximity when none is passed: the module's PROXIMITY at call time

_NONE: Postings = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint16), np.zeros(0, dtype=np.uint16))


def bm25_idf(total_rows: int, n: int) -> float:
    """A phrase's idf as FTS5's ``bm25()`` computes it (``n`` of ``total_rows`` chunks hold it)."""
    value = math.log((max(total_rows, n) - n + 0.5) / (n + 0.5))
    return value if value > 0.0 else 1e-6


def query_terms(analyzer_name: str, query: str) -> list[str]:
    """The statistics terms of a query's phrases, in the analyzer's order (distinct)."""
    terms: list[str] = []
    for phrase in get_analyzer(analyzer_name).query_phrases(query):
        term = phrase_term(phrase)
        if term is None:
            raise ConfigError(f"the {analyzer_name!r} analyzer made the query phrase {phrase!r}; the keyword "
                              "index answers phrases of one token or of two one-character tokens")
        terms.append(term)
    return list(dict.fromkeys(terms))


def keyword_leg(reader: CollectionReader, query: str, top_k: int, restriction: Restriction | None = None, *,
                budget: int = KEYWORD_CANDIDATES, proximity: Proximity | UseDefault | None = DEFAULT) -> Ranked:
    """The ``top_k`` chunks of the reader's collection by BM25 for ``query``, inside ``restriction``,
    re-ranked by phrase, proximity and title (``proximity``, default :data:`PROXIMITY`; None: BM25 alone)."""
    how = PROXIMITY if isinstance(proximity, UseDefault) else proximity
    if how is not None and how.title_leg:
        how = replace(how, title_leg=0.0)
    return keyword_legs(reader, query, top_k, restriction, budget=budget, proximity=how).keyword


def keyword_legs(reader: CollectionReader, query: str, top_k: int, restriction: Restriction | None = None, *,
                 shown: int | None = None, budget: int = KEYWORD_CANDIDATES,
                 proximity: Proximity | UseDefault | None = DEFAULT) -> KeywordRanking:
    """:func:`keyword_leg`'s ranking and, when ``proximity.title_leg`` is above 0, the title leg.

    ``shown``: how many chunks the search shows, when the leg goes deeper than that (a hybrid search's keyword
    leg, ranked ``HYBRID_DEPTH`` times as deep for fusion): the re-ranking takes BM25's best ``candidates``
    and at least ``shown`` of them; the chunks past those follow in BM25's order, below them (a re-ranked
    chunk scores at least its BM25 score, which is at least theirs). None: ``top_k``."""
    how = PROXIMITY if isinstance(proximity, UseDefault) else proximity
    terms = query_terms(reader.row.analyzer, query)
    if not terms:
        return KeywordRanking(Ranked.empty("postings"))
    totals = reader.keyword_totals(terms)
    counts = [totals.document_frequency.get(t, 0) for t in terms]
    if not any(counts):
        return KeywordRanking(Ranked.empty("postings"))
    held = reader.postings([t for t, n in zip(terms, counts, strict=True) if n])
    columns = [held.get(t, _NONE) for t in terms]
    if restriction is not None:
        allowed = reader.allowed(restriction)
        columns = [(c[0][keep], c[1][keep], c[2][keep])
                   for c in columns for keep in (np.isin(c[0], allowed, assume_unique=True),)]
    idf = [bm25_idf(totals.rows, n) for n in counts]
    analyzer = get_analyzer(reader.row.analyzer)
    asked = Query(sequence_tokens(analyzer, query), dict(zip(terms, idf, strict=True))) if how is not None else None
    if how is None or asked is None or not ((asked.pairs and (how.phrase or how.near)) or how.title or how.title_leg):
        rows, scores = bm25_top(columns, idf, totals.average_length, top_k, budget)
        return KeywordRanking(Ranked(rows, scores, "postings"))
    rows, scores = bm25_top(columns, idf, totals.average_length, max(top_k, how.candidates), budget)
    if not len(rows):
        return KeywordRanking(Ranked(rows, scores, "postings"))
    texts = reader.texts(rows)  # every one read whole: a hit among them is not read again
    window = max(how.candidates, top_k if shown is None else shown)
    rows, scores, below, below_scores = rows[:window], scores[:window], rows[window:], scores[window:]
    found = [texts.get(int(key), ("", -int(key), "")) for key in rows.tolist()]
    titles: dict[int, float] = {}
    for _, document, title in found:
        if document not in titles:
            titles[document] = title_share(sequence_tokens(analyzer, title), asked) if title else 0.0
    candidates = Candidates(scores, [sequence_tokens(analyzer, text) for text, _, _ in found],
                            np.asarray([titles[d] for _, d, _ in found], dtype=np.float64),
                            np.asarray([d for _, d, _ in found], dtype=np.int64))
    scores = rescore(candidates, asked, how)
    best = np.lexsort((rows, -scores))
    keyword = Ranked(np.concatenate([rows[best], below])[:top_k],
                     np.concatenate([scores[best], below_scores])[:top_k], "postings+proximity")
    if not how.title_leg:
        return KeywordRanking(keyword)
    # The title leg: each document whose title matches, by its best chunk, the best title first.
    seen: set[int] = set()
    keys, shares = [], []
    for i in best.tolist():
        document = int(candidates.documents[i])
        if candidates.titles[i] > 0 and document not in seen:
            seen.add(document)
            keys.append(int(rows[i]))
            shares.append(float(candidates.titles[i]))
    order = sorted(range(len(keys)), key=lambda j: -shares[j])[:top_k]  # stable: ties keep keyword order
    return KeywordRanking(keyword, Ranked(np.asarray([keys[j] for j in order], dtype=np.int64),
                                          np.asarray([shares[j] for j in order], dtype=np.float64), "titles"),
                          how.title_leg)


@dataclass(frozen=True, slots=True)
class KeywordRanking:
    """The keyword leg's ranking and, when asked for, its title leg (documents whose title matches, each
    by its best chunk, scored by their title share)."""

    keyword: Ranked
    titles: Ranked | None = None
    title_weight: float = 0.0  # the title leg's weight in fusion, relative to the keyword leg's


@dataclass(slots=True)
class Query:
    """A query as the re-ranking reads it: its token sequence, its terms' idf and its adjacent pairs."""

    tokens: list[str]
    idf: Mapping[str, float]
    pairs: list[Pair] = field(default_factory=list)
    units: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.pairs = query_pairs(self.tokens, self.idf)
        self.units = {u for _, u in sequence_units(self.tokens) if u in self.idf}


@dataclass(slots=True)
class Candidates:
    """BM25's best chunks: their scores, token sequences, title shares and document keys."""

    scores: np.ndarray
    tokens: list[list[str]]
    titles: np.ndarray
    documents: np.ndarray


def title_share(title: Sequence[str], query: Query) -> float:
    """How well a document's title (its token sequence) matches a query: the idf-weighed share of the
    query's terms the title holds, times the share of the title's terms the query holds (1 for the title
    itself; 0 when they share no term)."""
    units = {u for _, u in sequence_units(title)}
    if not units or not query.units:
        return 0.0
    shared = units & query.units
    if not shared:
        return 0.0
    total = sum(query.idf[u] for u in query.units)
    return (sum(query.idf[u] for u in shared) / total) * (len(shared) / len(units)) if total > 0 else 0.0


# A query's adjacent term pairs: (first term, second term, weight).
Pair = tuple[str, str, float]


def query_pairs(tokens: Sequence[str], idf: Mapping[str, float]) -> list[Pair]:
    """The distinct pairs of adjacent statistics terms of a query's token sequence (two adjacent CJK
    bigrams: a trigram), each weighed by the sum of its terms' idf (terms no chunk holds are left out)."""
    units = [u for _, u in sequence_units(tokens)]
    out: dict[tuple[str, str], float] = {}
    for a, b in itertools.pairwise(units):
        if a in idf and b in idf and (a, b) not in out:
            out[(a, b)] = idf[a] + idf[b]
    return [(a, b, w) for (a, b), w in out.items()]


def proximity_shares(tokens: Sequence[str], pairs: Sequence[Pair], window: int,
                     runs: Sequence[str | None] | None = None) -> tuple[float, float]:
    """The weighed shares of ``pairs`` a chunk's token sequence holds in order and next to each other
    (its first term right before its second), and within ``window`` positions otherwise. ``runs``: the
    pairs' ``adjacent_run`` (worked out once for many chunks)."""
    total = sum(w for _, _, w in pairs)
    if total <= 0:
        return 0.0, 0.0
    joined = _SEP + _SEP.join(tokens) + _SEP
    plain = window <= 0 and joined.count(_SEP) == len(tokens) + 1  # no token holds the separator
    where: dict[str, list[int]] | None = None
    ordered = near = 0.0
    if runs is None:
        runs = [adjacent_run(a, b) for a, b, _ in pairs]
    for (a, b, w), run in zip(pairs, runs, strict=True):
        if plain:
            if run is not None:  # the pair's tokens in a row, found as text: exactly where the units are
                if run and run in joined:
                    ordered += w
                continue
        if where is None:
            where = _positions(tokens, {t for x, y, _ in pairs for t in (x, y)})
        first, second = where.get(a), where.get(b)
        if not first or not second:
            continue
        follow = set(second)
        if any(p + 1 in follow for p in first):
            ordered += w
            continue
        if window > 0 and _within(first, second, window):
            near += w
    return ordered / total, near / total


_SEP = "\x1f"  # joins a chunk's tokens for the pair search (a token holding it takes the slow way)


def adjacent_run(a: str, b: str) -> str | None:
    """The tokens, joined as ``proximity_shares`` joins a chunk's, that hold unit ``a`` right before unit
    ``b`` (a unit: a word, or a CJK bigram ``"x y"``), wherever they stand: "" when no sequence can (a
    bigram's second token is the next unit's first); None when a unit is one lone one-character token,
    whose place depends on its neighbours (then the positions decide)."""
    first, second = a.split(" "), b.split(" ")
    if any(len(u) == 1 and len(u[0]) == 1 for u in (first, second)):
        return None
    if len(first) == 2 and first[1] != second[0]:
        return ""
    return _SEP + _SEP.join([first[0], *second]) + _SEP


def _positions(tokens: Sequence[str], wanted: set[str]) -> dict[str, list[int]]:
    """The positions of the ``wanted`` statistics terms in a token sequence, as ``sequence_units`` finds
    them, looking only at the tokens that start one (most of a chunk's tokens start none)."""
    starts = {u.split(" ", 1)[0] for u in wanted}
    where: dict[str, list[int]] = {}
    n = len(tokens)
    for i, token in enumerate(tokens):
        if token not in starts:
            continue
        if len(token) != 1:
            unit = token
        elif i + 1 < n and len(tokens[i + 1]) == 1:
            unit = f"{token} {tokens[i + 1]}"
        elif i == 0 or len(tokens[i - 1]) != 1:
            unit = token
        else:
            continue
        if unit in wanted:
            where.setdefault(unit, []).append(i)
    return where


def _within(first: Sequence[int], second: Sequence[int], window: int) -> bool:
    """Whether a position of ``first`` is within ``window`` of a position of ``second`` (both ascending)."""
    i = j = 0
    while i < len(first) and j < len(second):
        if abs(first[i] - second[j]) <= window and first[i] != second[j]:
            return True
        if first[i] < second[j]:
            i += 1
        else:
            j += 1
    return False


def rescore(candidates: Candidates, query: Query, how: Proximity) -> np.ndarray:
    """BM25 scores of candidates times 1 + ``phrase`` x their in-order share + ``near`` x their near share
    + ``title`` x their document's title share."""
    boost = np.ones(len(candidates.scores), dtype=np.float64)
    if query.pairs and (how.phrase or how.near):
        runs = [adjacent_run(a, b) for a, b, _ in query.pairs]
        for i, sequence in enumerate(candidates.tokens):
            ordered, near = proximity_shares(sequence, query.pairs, how.window if how.near else 0, runs)
            boost[i] += how.phrase * ordered + how.near * near
    if how.title:
        boost += how.title * candidates.titles
    return np.asarray(candidates.scores, dtype=np.float64) * boost


def rank_texts(analyzer_name: str, query: str, token_lists: Sequence[Sequence[str]], top_k: int) -> Ranked:
    """BM25 of ``query`` over a few texts given as their analyzer tokens (one user's memories, say), with
    the statistics of those texts alone: the same terms, idf and scoring as a collection's postings.
    Keys are the texts' positions."""
    terms = query_terms(analyzer_name, query)
    if not terms or not token_lists:
        return Ranked.empty("texts")
    counts = [term_counts(tokens) for tokens in token_lists]
    sizes = np.fromiter((len(tokens) for tokens in token_lists), dtype=np.int64, count=len(token_lists))
    columns: list[Postings] = []
    for term in terms:
        held = np.asarray([i for i, c in enumerate(counts) if term in c], dtype=np.int64)
        columns.append((held, np.asarray([counts[i][term] for i in held.tolist()], dtype=np.int64), sizes[held]))
    frequencies = [len(c[0]) for c in columns]
    if not any(frequencies):
        return Ranked.empty("texts")
    n = len(token_lists)
    rows, scores = bm25_top(columns, [bm25_idf(n, f) for f in frequencies], max(int(sizes.sum()), 1) / n, top_k)
    return Ranked(rows, scores, "texts")


def bm25_top(columns: Sequence[Postings], idf: Sequence[float], average: float, top_k: int,
             budget: int = KEYWORD_CANDIDATES, *, k1: float = K1, b: float = B) -> tuple[np.ndarray, np.ndarray]:
    """The exact BM25 top-k over phrases' postings (in query order, each with its idf): (chunk keys,
    scores) best first, ties by key.

    MaxScore: the phrases ranked by their bound idf x (k1 + 1), the first ("essential") ones,
    whose postings add up to the budget, are scored for every chunk that holds one (their "share");
    the k-th best share is a floor for the final k-th score, raised when needed to the lowest exact
    score of the k chunks with the best shares, while a chunk's final score is at most its share plus
    the other phrases' bounds (``rest``). While ``rest`` reaches the floor, more phrases become
    essential. The chunks whose share plus ``rest`` reaches the floor are then pruned phrase by phrase
    (``prune``: the other phrases added in bound order, the floor rising to the k-th best partial
    score), and those left are scored on every phrase, exactly as ``bm25()`` does: the same float
    operations, the phrases added in query order.
    """
    known = [j for j in range(len(columns)) if len(columns[j][0])]
    if not known:
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    counts = [len(c[0]) for c in columns]
    order = sorted(known, key=lambda j: (-idf[j], j))
    bound = [idf[j] * (k1 + 1.0) for j in order]

    def contribution(j: int, tf: np.ndarray, norm: np.ndarray) -> np.ndarray:
        f = tf.astype(np.float64)
        return idf[j] * ((f * (k1 + 1.0)) / (f + norm))

    # The essential phrases' shares, added one phrase at a time into arrays over the chunk keys (a chunk
    # appears once in a phrase's postings), so widening adds phrases instead of starting over. The arrays
    # span the keys from the lowest to the highest; keys spread thinly (a small collection among large
    # ones) are numbered by their rank among the keys the phrases hold instead.
    low = min(int(columns[j][0][0]) for j in known)
    span = max(int(columns[j][0][-1]) for j in known) - low + 1
    keys: np.ndarray | None = None
    if span > 4 * sum(counts) + 65_536:
        keys = np.unique(np.concatenate([columns[j][0] for j in known]))
        span = len(keys)
    share = np.zeros(span, dtype=np.float64)
    norms = np.zeros(span, dtype=np.float64)

    def take(j: int) -> None:
        found, tf, lengths = columns[j]
        at = found - low if keys is None else np.searchsorted(keys, found)
        norm = k1 * (1 - b + b * lengths.astype(np.float64) / average)
        norms[at] = norm
        share[at] += contribution(j, tf, norm)

    def take_first(phrases: list[int]) -> None:
        """``take`` of each of the first essential phrases (``share`` all zeros), all at once: their entries
        one after another, in the order ``take`` would add them (``np.add.at`` adds in that order; only
        the entries' positions are written, not an array over the whole span)."""
        if len(phrases) == 1:
            take(phrases[0])
            return
        found = np.concatenate([columns[j][0] for j in phrases])
        f = np.concatenate([columns[j][1] for j in phrases]).astype(np.float64)
        lengths = np.concatenate([columns[j][2] for j in phrases]).astype(np.float64)
        at = found - low if keys is None else np.searchsorted(keys, found)
        norm = k1 * (1 - b + b * lengths / average)
        norms[at] = norm
        weight = np.empty(len(found), dtype=np.float64)
        start = 0
        for j in phrases:
            weight[start:start + counts[j]] = idf[j]
            start += counts[j]
        np.add.at(share, at, weight * ((f * (k1 + 1.0)) / (f + norm)))

    def counts_of(j: int, rows: np.ndarray) -> np.ndarray:
        """Phrase ``j``'s term counts in the chunks ``rows`` (ascending keys; 0 where a chunk lacks it), by
        binary search in its postings."""
        found, tf, _ = columns[j]
        place = found.searchsorted(rows)
        np.minimum(place, len(found) - 1, out=place)
        return (tf[place] * (found[place] == rows)).astype(np.float64)

    def exact(at: np.ndarray, looked: Mapping[int, np.ndarray] | None = None) -> np.ndarray:
        """The scores of the chunks at ``at`` (ascending positions), as bm25() adds them: every phrase in
        query order. Each phrase's term counts for the chunks are found first (``looked``: those ``prune``
        found, by phrase, for these chunks; the others by binary search for each chunk in the phrase's
        postings, or by running through them once when they are few beside the chunks) into one matrix,
        phrases by chunks (0 where a chunk lacks the phrase, which adds exactly 0); the contributions are
        then worked out in one pass and added phrase after phrase (``np.add.accumulate``: in order, no
        pairwise summation)."""
        rows = at + low if keys is None else keys[at]
        n = len(at)
        looked = looked or {}
        if n * len(known) > _EXACT_CELLS:  # a large matrix: a slice of the chunks at a time
            step = max(1, _EXACT_CELLS // len(known))
            return np.concatenate([exact(at[i:i + step], {j: f[i:i + step] for j, f in looked.items()})
                                   for i in range(0, n, step)]) if n else np.zeros(0)
        tfs = np.zeros((len(known), n), dtype=np.float64)
        if n * 16 < sum(counts):  # by binary search for each chunk, phrase by phrase
            for i, j in enumerate(known):
                f = looked.get(j)
                tfs[i] = counts_of(j, rows) if f is None else f
        else:  # by running through each phrase's postings once
            picked = np.zeros(span, dtype=bool)
            picked[at] = True
            for i, j in enumerate(known):
                if j in looked:
                    tfs[i] = looked[j]
                    continue
                found, tf, _ = columns[j]
                spot = found - low if keys is None else np.searchsorted(keys, found)
                held = picked[spot]
                tfs[i, np.searchsorted(at, spot[held])] = tf[held]
        weights = np.asarray([idf[j] for j in known], dtype=np.float64)[:, None]
        parts = weights * ((tfs * (k1 + 1.0)) / (tfs + norms[at]))
        return np.add.accumulate(parts, axis=0)[-1] if len(known) > 1 else parts[0]

    def prune(at: np.ndarray, part: np.ndarray, floor: float,
              rest: float) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """The chunks at ``at`` (their shares ``part``) that may still reach the floor once the phrases
        outside the shares (their bounds adding up to ``rest``) are added, one phrase at a time, the
        highest bound first: each phrase's counts for the chunks left (by binary search), its bound out of
        the rest; the floor rises to the k-th best partial score (each scores at least that much). Stops
        when few chunks are left. Returns them with the counts found, by phrase, for them (the exact pass
        does not look those up again)."""
        looked: dict[int, np.ndarray] = {}
        for j, limit in zip(order[split:], bound[split:], strict=True):
            if len(at) <= 4 * top_k:
                break
            f = counts_of(j, at + low if keys is None else keys[at])
            part = part + contribution(j, f, norms[at])
            looked[j] = f
            rest -= limit
            floor = max(floor, float(np.partition(part, len(part) - top_k)[len(part) - top_k]))
            keep = (part + max(rest, 0.0)) * slack >= floor
            if not keep.all():
                at, part = at[keep], part[keep]
                looked = {p: v[keep] for p, v in looked.items()}
        return at, looked

    split, total = 0, 0
    looked: dict[int, np.ndarray] = {}
    slack = 1.0 + 1e-9  # float rounding of sums taken in another order
    while True:
        first = split == 0
        while split < len(order) and (split == 0 or total + counts[order[split]] <= budget):
            if not first:
                take(order[split])
            total += counts[order[split]]
            split += 1
        if first:
            take_first(order[:split])
        touched = np.flatnonzero(share != 0)  # (over a bool array: several times faster than over floats)
        if len(touched) >= top_k:
            # The floor: the k-th best final score is at least the k-th best share (when every phrase is in
            # the shares, they are the scores but for rounding), and at least the lowest exact score of the k
            # chunks with the best shares (each scores at least its share), worked out only when the first
            # is too low to stop widening.
            shares = share[touched]
            cut = len(touched) - top_k
            rest = sum(bound[split:])
            best = np.argpartition(shares, cut)
            floor = float(shares[best[cut]])
            if split < len(order) and rest * slack >= floor:
                floor = float(exact(np.sort(touched[best[cut:]])).min())
            if rest * slack < floor:
                keep = (shares + rest) * slack >= floor
                at, looked = prune(touched[keep], shares[keep], floor, rest)
                break
        elif split == len(order):
            at = touched  # fewer chunks than k hold any phrase: all of them
            break
        budget *= 4  # widen: at least one more phrase, then as many as the larger budget takes
        take(order[split])
        total += counts[order[split]]
        split += 1
    rows = at + low if keys is None else keys[at]
    score = exact(at, looked)
    best = np.lexsort((rows, -score))[:top_k]
    return rows[best], score[best]


__all__ = ["DEFAULT", "K1", "KEYWORD_CANDIDATES", "PROXIMITY", "B", "Candidates", "KeywordRanking", "Pair", "Proximity",
           "Query", "UseDefault", "adjacent_run", "bm25_idf", "bm25_top", "keyword_leg", "keyword_legs",
           "proximity_shares", "query_pairs", "query_terms", "rank_texts", "rescore", "title_share"]
