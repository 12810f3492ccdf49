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
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from ..analysis import get_analyzer, phrase_term
from ..errors import ConfigError
from ..stores.base import CollectionReader, Postings, Ranked, Restriction
from ..stores.sql.postings import term_counts

K1 = 1.2
B = 0.75
# MaxScore: the rarest phrases whose document counts add up to at most this many are essential at first.
KEYWORD_CANDIDATES = 20_000

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
                budget: int = KEYWORD_CANDIDATES) -> Ranked:
    """The ``top_k`` chunks of the reader's collection by BM25 for ``query``, inside ``restriction``."""
    terms = query_terms(reader.row.analyzer, query)
    if not terms:
        return Ranked.empty("postings")
    totals = reader.keyword_totals(terms)
    counts = [totals.document_frequency.get(t, 0) for t in terms]
    if not any(counts):
        return Ranked.empty("postings")
    found = reader.postings([t for t, n in zip(terms, counts, strict=True) if n])
    columns = [found.get(t, _NONE) for t in terms]
    if restriction is not None:
        allowed = reader.allowed(restriction)
        columns = [(c[0][keep], c[1][keep], c[2][keep])
                   for c in columns for keep in (np.isin(c[0], allowed, assume_unique=True),)]
    rows, scores = bm25_top(columns, [bm25_idf(totals.rows, n) for n in counts], totals.average_length, top_k,
                            budget)
    return Ranked(rows, scores, "postings")


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
    whose postings add up to the budget, are scored for every chunk that holds one; their k-th best
    share is a floor for the final k-th score, and a chunk's final score is at most its share plus
    the other phrases' bounds (``rest``). While ``rest`` reaches the floor, more phrases become
    essential. Then only the chunks whose share plus ``rest`` reaches the floor are scored on every
    phrase, exactly as ``bm25()`` does: the same float operations, the phrases added in query order.
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

    split, total = 0, 0
    while split < len(order) and (split == 0 or total + counts[order[split]] <= budget):
        total += counts[order[split]]
        split += 1
    slack = 1.0 + 1e-9  # float rounding of sums taken in another order
    while True:
        rest = sum(bound[split:])
        essential = order[:split]
        ids = np.concatenate([columns[j][0] for j in essential])
        rows, where = np.unique(ids, return_inverse=True)
        sizes = np.empty(len(rows), dtype=np.int64)
        sizes[where] = np.concatenate([columns[j][2] for j in essential])
        norm = k1 * (1 - b + b * sizes.astype(np.float64) / average)
        share = np.zeros(len(rows), dtype=np.float64)
        at = 0
        for j in essential:
            found, tf, _ = columns[j]
            place = where[at:at + len(found)]
            share[place] += contribution(j, tf, norm[place])
            at += len(found)
        if split == len(order):
            keep = np.ones(len(rows), dtype=bool)  # every phrase is scored: no floor needed
            break
        if len(rows) >= top_k:
            floor = np.partition(share, len(rows) - top_k)[len(rows) - top_k]
            if rest * slack < floor:
                keep = (share + rest) * slack >= floor
                break
        budget *= 4  # widen: at least one more phrase, then as many as the larger budget takes
        split += 1
        total = sum(counts[j] for j in order[:split])
        while split < len(order) and total + counts[order[split]] <= budget:
            total += counts[order[split]]
            split += 1
    rows, norm = rows[keep], norm[keep]
    score = np.zeros(len(rows), dtype=np.float64)
    for j in known:  # query order, as bm25() adds them
        found, tf, _ = columns[j]
        place = np.minimum(np.searchsorted(found, rows), len(found) - 1)
        hit = found[place] == rows
        score[hit] += contribution(j, tf[place[hit]], norm[hit])
    best = np.lexsort((rows, -score))[:top_k]
    return rows[best], score[best]


__all__ = ["K1", "KEYWORD_CANDIDATES", "B", "bm25_idf", "bm25_top", "keyword_leg", "query_terms"]
