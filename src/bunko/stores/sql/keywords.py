"""The keyword side of a write, worked out before its transaction: analysis and term counts in columns.

A write's chunks are analyzed (the collection's analyzer), and each chunk's statistics terms (its
tokens, and ``"a b"`` for adjacent one-character tokens: see :func:`bunko.stores.sql.postings.term_counts`)
are counted into a :class:`KeywordBatch`: numpy columns (chunk, term, count) over the batch's own
vocabulary, from which the postings build a segment and the statistics their document frequencies
without a Python step per entry. Beside the columns each chunk carries what its backend stores of it
(SQLite: the space-joined tokens, ``chunks.terms``; PostgreSQL: its tsvector literals).

Large writes are analyzed in the worker processes (:mod:`bunko.workers`), in parts side by side, and
:meth:`SQLStore.write_batches <bunko.stores.sql.store.SQLStore.write_batches>` analyzes the next batch
while one is written: the analysis of a built-in analyzer only; a plugin's runs in the writing process.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import crashpoints, workers
from ...analysis import Analyzer, built_in, get_analyzer
from ..base import DocumentWrite
from .postings import check_tokens

# A backend's rendering of a chunk's tokens: what it stores beside the chunk (picklable by name).
Render = Callable[[list[str]], Any]
# Below this many chunks a write is analyzed where it runs (a worker's round trip would cost more).
POOL_MIN_CHUNKS = 256
# The least chunks a part sent to one worker holds.
PART_MIN_CHUNKS = 128


@dataclass(frozen=True, slots=True)
class KeywordBatch:
    """The analyzed keywords of a batch of chunks, in the batch's order.

    ``entries`` are (``owner``: the chunk's position, ``term``: an index into ``terms``, ``tf``: the
    term's count in the chunk), one per distinct term of each chunk; ``sizes`` each chunk's token count.
    """

    rendered: list[Any]
    sizes: np.ndarray
    terms: list[str]
    owner: np.ndarray
    term: np.ndarray
    tf: np.ndarray

    def __len__(self) -> int:
        return len(self.rendered)

    @property
    def tokens(self) -> int:
        """The batch's keyword tokens."""
        return int(self.sizes.sum())

    def check(self) -> KeywordBatch:
        """This batch, or ``VectorStoreError`` if a chunk holds more tokens than the keyword index takes."""
        if len(self.sizes):
            check_tokens(int(self.sizes.max()))
        return self

    def select(self, positions: Sequence[int] | np.ndarray) -> KeywordBatch:
        """The chunks at ``positions`` (ascending), as a batch of their own."""
        picked = np.asarray(positions, dtype=np.int64)
        if len(picked) == len(self) and np.array_equal(picked, np.arange(len(self))):
            return self
        renumber = np.full(len(self) + 1, -1, dtype=np.int64)
        renumber[picked] = np.arange(len(picked))
        keep = renumber[self.owner] >= 0
        return KeywordBatch([self.rendered[i] for i in picked.tolist()], self.sizes[picked], self.terms,
                            renumber[self.owner[keep]], self.term[keep], self.tf[keep])

    def document_frequencies(self) -> dict[str, int]:
        """Each term's number of chunks in the batch (terms of no chunk left out)."""
        counts = np.bincount(self.term, minlength=len(self.terms))
        return {self.terms[i]: int(counts[i]) for i in np.flatnonzero(counts).tolist()}

    @staticmethod
    def join(parts: Sequence[KeywordBatch]) -> KeywordBatch:
        """The parts one after the other, over one vocabulary."""
        if len(parts) == 1:
            return parts[0]
        index: dict[str, int] = {}
        rendered: list[Any] = []
        owners, terms, tfs = [], [], []
        at = 0
        for part in parts:
            remap = np.fromiter((index.setdefault(t, len(index)) for t in part.terms), dtype=np.int64,
                                count=len(part.terms))
            rendered.extend(part.rendered)
            owners.append(part.owner + at)
            terms.append(remap[part.term])
            tfs.append(part.tf)
            at += len(part)
        empty = np.zeros(0, dtype=np.int64)
        return KeywordBatch(rendered, np.concatenate([p.sizes for p in parts]) if parts else empty, list(index),
                            np.concatenate(owners) if owners else empty, np.concatenate(terms) if terms else empty,
                            np.concatenate(tfs) if tfs else empty)


def count_terms(token_lists: Sequence[list[str]], rendered: list[Any], pair_limit: int | None = None) -> KeywordBatch:
    """Chunks' tokens counted into columns: each token, and each pair of adjacent one-character tokens
    as ``"a b"`` (only pairs whose first token lies before ``pair_limit``, when given); one Python step
    per token, the rest in numpy."""
    index: dict[str, int] = {}
    setdefault = index.setdefault
    ids = np.fromiter((setdefault(t, len(index)) for tokens in token_lists for t in tokens), dtype=np.int64)
    sizes = np.fromiter((len(t) for t in token_lists), dtype=np.int64, count=len(token_lists))
    owner = np.repeat(np.arange(len(token_lists), dtype=np.int64), sizes)
    vocabulary = list(index)
    all_ids, all_owner = ids, owner
    if len(ids) > 1:
        single = np.fromiter((len(t) == 1 for t in vocabulary), dtype=bool, count=len(vocabulary))
        first, second = ids[:-1], ids[1:]
        paired = (owner[:-1] == owner[1:]) & single[first] & single[second]
        if pair_limit is not None:
            starts = np.concatenate(([0], np.cumsum(sizes)[:-1]))
            paired &= (np.arange(len(ids) - 1) - starts[owner[:-1]]) < pair_limit
        if paired.any():
            width = len(vocabulary)
            keys, inverse = np.unique(first[paired] * width + second[paired], return_inverse=True)
            vocabulary.extend(f"{vocabulary[k // width]} {vocabulary[k % width]}" for k in keys.tolist())
            all_ids = np.concatenate([ids, width + inverse.reshape(-1)])
            all_owner = np.concatenate([owner, owner[:-1][paired]])
    width = max(1, len(vocabulary))
    keys, tf = np.unique(all_owner * width + all_ids, return_counts=True)
    # int32 columns: half the bytes a worker sends back (a batch's chunks and vocabulary stay far below 2**31)
    return KeywordBatch(rendered, sizes.astype(np.int32), vocabulary, (keys // width).astype(np.int32),
                        (keys % width).astype(np.int32), tf.astype(np.int32))


def analyze(render: Render, analyzer_name: str, texts: list[str], pair_limit: int | None) -> KeywordBatch:
    """Analyze texts with a built-in analyzer, by name (what a worker process runs)."""
    analyzer = get_analyzer(analyzer_name)
    crashpoints.reach("keywords.worker")
    return _analyze(render, analyzer, texts, pair_limit)


def _analyze(render: Render, analyzer: Analyzer, texts: list[str], pair_limit: int | None) -> KeywordBatch:
    tokens = [analyzer.index_tokens(text) for text in texts]
    return count_terms(tokens, [render(t) for t in tokens], pair_limit)


class PendingKeywords:
    """A batch's analysis under way (in worker processes, or done already): cut into one part per worker,
    or, with ``whole`` (a writer that keeps a batch per worker under way), given to one worker whole."""

    def __init__(self, render: Render, analyzer: Analyzer, texts: list[str], pair_limit: int | None, *,
                 whole: bool = False) -> None:
        self._args = (render, analyzer, pair_limit)
        self._parts: list[tuple[list[str], Future[KeywordBatch]]] = []
        count = workers.worker_count()
        if count <= 0 or len(texts) < POOL_MIN_CHUNKS or not built_in(analyzer):
            done: Future[KeywordBatch] = Future()
            done.set_result(_analyze(render, analyzer, texts, pair_limit))
            self._parts.append((texts, done))
            return
        parts = 1 if whole else max(1, min(count, len(texts) // PART_MIN_CHUNKS))
        bounds = np.linspace(0, len(texts), parts + 1).astype(int).tolist()
        for lo, hi in itertools.pairwise(bounds):
            part = texts[lo:hi]
            self._parts.append((part, workers.submit(analyze, render, analyzer.name, part, pair_limit)))

    def result(self) -> KeywordBatch:
        """The analyzed batch, once every part is done (a part whose worker died is done here)."""
        render, analyzer, pair_limit = self._args
        return KeywordBatch.join([workers.result(future, _analyze, render, analyzer, part, pair_limit)
                                  for part, future in self._parts]).check()


@dataclass(slots=True)
class PendingWrite:
    """A write started (``SQLStore.begin_write``): its documents, and their analysis under way."""

    collection: str
    documents: list[DocumentWrite]
    analyzer: Analyzer
    analysis: PendingKeywords
    started: float


__all__ = ["KeywordBatch", "PendingKeywords", "PendingWrite", "Render", "analyze", "count_terms"]
