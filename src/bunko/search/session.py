"""One search, one read of its collection: the legs, then the hydration of the result, once.

A search of a collection costs its store two transactions (three for a hybrid search with its legs at
the same time) and one read of the collection's row:

1. the row is read (``store.read_collection``): the embedder check, the cache key and the legs all
   work from it;
2. after the question is embedded (outside any transaction), one read transaction
   (``store.reader(row)``) runs the legs -- the vector leg (``reader.nearest``) and the keyword leg
   (:func:`bunko.search.keyword.keyword_leg`), each ranking chunk keys with the restriction compiled
   once -- fuses them, and reads the text and metadata of the chunks it returns, once: the chunks the
   keyword leg read whole for its re-ranking are not read again. A reader that can answer the vector
   leg later (``nearest_later``: PostgreSQL sends its index search in pipeline mode) has the server
   work on it while the keyword leg runs in this process. On a store whose ``concurrent_legs`` is true
   (PostgreSQL) a hybrid search runs each leg in a transaction of its own, at the same time, and the
   leg that finishes second fuses and reads the hits in its own, taking the keyword leg's rows from it
   (:func:`collect_legs`).

:func:`collect` is the second step in one transaction, :func:`collect_legs` either way;
:func:`vector_query` and :func:`keyword_query` are a leg and its hits on their own (R14's query by
vector, the keyword leg alone), with ``explain`` telling how the leg searched.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from ..filters import FilterLike
from ..stores.base import CollectionReader, CollectionRow, Ranked, Restriction, check_query_vector
from ..stores.sql.store import check_dimension, check_top_k
from ..types import SearchHit
from .fusion import Fusion, fuse_keys
from .keyword import DEFAULT, Proximity, UseDefault, keyword_leg, keyword_legs


class SearchPort(Protocol):
    """What a search needs of a tenant-bound store: its collection rows and a reader over one."""

    def read_collection(self, name: str) -> CollectionRow:
        """The collection's row, or ``CollectionNotFoundError``."""
        ...

    def reader(self, row: CollectionRow) -> Any:
        """A context manager giving a :class:`~bunko.stores.base.CollectionReader` over ``row``."""
        ...


@dataclass(slots=True)
class Legs:
    """What one search asks of its legs: the question (and its vector), the restriction, how deep each
    leg looks, the vector threshold, and how the legs fuse (None: one leg alone)."""

    query: str
    vector: np.ndarray | None
    keyword: bool
    depth: int
    top_k: int
    restriction: Restriction | None = None
    threshold: float | None = None
    fusion: Fusion | None = None


@dataclass(slots=True)
class Collected:
    """The hits of one search's legs, and how each leg searched (``explain``)."""

    hits: list[SearchHit]
    plans: dict[str, str] = field(default_factory=dict)
    ranked: int = 0  # how many chunks the legs returned for hydration (more than hits: rows gone meanwhile)


def collect(reader: CollectionReader, legs: Legs, *, vectors: dict[str, np.ndarray] | None = None,
            overlap: bool = False) -> Collected:
    """Run the legs inside one reader, fuse them and read the ``legs.top_k`` best whole.

    The vector leg goes first; a reader that can answer it later (``nearest_later``: PostgreSQL sends an
    index search and lets the server walk the graph; SQLite brings its matrix up to date and leaves the
    ranking, which reads memory only) does, while the keyword leg runs here. With ``overlap``, a hybrid
    search over a reader whose later answer may run on any thread (its ``later_anywhere``: SQLite's) has
    that answer worked out on a worker thread meanwhile (the graph walk and numpy let go of the GIL).
    """
    answer = vector_leg_later(reader, legs) if legs.vector is not None else None
    if answer is not None and overlap and legs.keyword and getattr(reader, "later_anywhere", False):
        answer = _pool().submit(answer).result
    try:
        found, title_weight = keyword_part(reader, legs)
    except BaseException:
        if answer is not None:
            with contextlib.suppress(Exception):
                answer()  # the reader's pending work ends before the error goes up
        raise
    ranked = [("vector", answer())] if answer is not None else []
    return fuse_and_read(reader, legs, ranked + found, title_weight, vectors)


def vector_leg(reader: CollectionReader, legs: Legs) -> Ranked:
    """The vector leg: the nearest chunks, as deep as fusion looks (``top_k`` alone)."""
    assert legs.vector is not None
    return reader.nearest(legs.vector, legs.depth if legs.fusion else legs.top_k, legs.restriction,
                          threshold=legs.threshold)


def vector_leg_later(reader: CollectionReader, legs: Legs) -> Callable[[], Ranked]:
    """:func:`vector_leg`, answered by the returned function: later when the reader can (its
    ``nearest_later``), else now. The function must be called once."""
    later = getattr(reader, "nearest_later", None)
    if later is None:
        ranked = vector_leg(reader, legs)
        return lambda: ranked
    assert legs.vector is not None
    answer: Callable[[], Ranked] = later(legs.vector, legs.depth if legs.fusion else legs.top_k, legs.restriction,
                                         threshold=legs.threshold)
    return answer


def keyword_part(reader: CollectionReader, legs: Legs) -> tuple[list[tuple[str, Ranked]], float]:
    """The keyword leg (and in hybrid mode the title leg), with the title leg's weight in fusion."""
    if not legs.keyword:
        return [], 0.0
    if legs.fusion is None:
        return [("keyword", keyword_leg(reader, legs.query, legs.top_k, legs.restriction))], 0.0
    both = keyword_legs(reader, legs.query, legs.depth, legs.restriction, shown=legs.top_k)
    found = [("keyword", both.keyword)]
    if both.titles is not None and len(both.titles):
        found.append(("title", both.titles))
        return found, legs.fusion.keyword_weight * both.title_weight
    return found, 0.0


def fuse_and_read(reader: CollectionReader, legs: Legs, ranked: list[tuple[str, Ranked]], title_weight: float,
                  vectors: dict[str, np.ndarray] | None = None, read: Mapping[int, Any] | None = None) -> Collected:
    """Fuse the legs' rankings (one leg alone: its order) and read the ``legs.top_k`` best whole, once: the
    chunks the keyword leg read for its re-ranking (in this reader, or in another: ``read``) are not read
    again."""
    plans = {name: leg.plan for name, leg in ranked}
    if legs.fusion is None:
        leg = ranked[0][1] if ranked else Ranked.empty()
        order = Ranked(leg.keys[:legs.top_k], leg.scores[:legs.top_k])
        return Collected(reader.hits(order, vectors=vectors, read=read), plans, len(order))
    weights = {"vector": legs.fusion.vector_weight, "keyword": legs.fusion.keyword_weight, "title": title_weight}
    fused = fuse_keys([(name, weights[name], leg.keys.tolist(), leg.scores.tolist()) for name, leg in ranked],
                      legs.top_k, legs.fusion)
    order = Ranked(np.asarray([k for k, _, _ in fused], dtype=np.int64),
                   np.asarray([s for _, s, _ in fused], dtype=np.float64))
    hits = reader.hits(order, vectors=vectors, extra={int(k): {"legs": found} for k, _, found in fused}, read=read)
    return Collected(hits, plans, len(order))


# The threads the vector leg of a hybrid search runs in while its keyword leg runs in the caller's
# thread. A task here never waits for another task here, so a full pool only queues.
LEG_THREADS = 8
_legs_pool: ThreadPoolExecutor | None = None
_legs_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _legs_pool
    with _legs_lock:
        if _legs_pool is None:
            _legs_pool = ThreadPoolExecutor(LEG_THREADS, thread_name_prefix="bunko-leg")
        return _legs_pool


def _forget_pool() -> None:
    """In a forked child: the parent's threads are not there, so the child starts a pool of its own."""
    global _legs_pool, _legs_lock
    _legs_pool, _legs_lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget_pool)


class _Meeting:
    """Where the two legs of a hybrid search meet: the leg that finishes second fuses both and reads the
    hits in its own transaction, which is still open; the first closes its transaction and is done."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.vector: Ranked | None = None
        self.keyword: tuple[list[tuple[str, Ranked]], float] | None = None
        self.read: Mapping[int, Any] = {}  # the chunks the keyword leg read whole (its reader's rows_read)
        self._failed = False

    def arrive_vector(self, ranked: Ranked) -> bool:
        """Leave the vector leg's ranking; True when the keyword leg is already here (then fuse now)."""
        with self._lock:
            self.vector = ranked
            return not self._failed and self.keyword is not None

    def arrive_keyword(self, found: tuple[list[tuple[str, Ranked]], float], read: Mapping[int, Any]) -> bool:
        """Leave the keyword leg's ranking and the chunks it read whole; True when the vector leg is already
        here (then fuse now)."""
        with self._lock:
            self.keyword = found
            self.read = read
            return not self._failed and self.vector is not None

    def fail(self) -> None:
        with self._lock:
            self._failed = True


def _vector_side(store: SearchPort, row: CollectionRow, legs: Legs, meeting: _Meeting,
                 vectors: dict[str, np.ndarray] | None) -> Collected | None:
    try:
        with store.reader(row) as reader:
            ranked = vector_leg(reader, legs)
            if meeting.arrive_vector(ranked):
                assert meeting.keyword is not None
                found, title_weight = meeting.keyword
                return fuse_and_read(reader, legs, [("vector", ranked), *found], title_weight, vectors,
                                     meeting.read)
            return None
    except BaseException:
        meeting.fail()
        raise


def collect_legs(store: SearchPort, row: CollectionRow, legs: Legs, *, vectors: dict[str, np.ndarray] | None = None,
                 concurrent: bool | None = None) -> Collected:
    """:func:`collect` over a tenant-bound store; in hybrid mode the two legs run at the same time.

    The vector leg runs in a worker thread, the keyword leg in this one (both drivers let go of the GIL
    while the database or numpy works), each in a read transaction of its own through the same
    tenant-bound ``store``. The leg that finishes second fuses both rankings and reads the fused list
    whole, once, in its transaction; the first has closed its own by then. So a hybrid search costs three
    read transactions (the row, two legs) and no thread holds a connection while it waits for another:
    a search cannot wait on a pool it holds part of. A leg's error is raised as it is (the keyword leg's
    first), after the other leg has given its connection back. ``concurrent`` False: both legs in one
    transaction, in turn (:func:`collect`); None: as the store prefers for this search (its
    ``legs_at_once``: PostgreSQL yes except an unrestricted search over an HNSW index, SQLite no, by
    measurement), and on a store that is not concurrent both legs in one transaction
    with the vector leg ranked in a worker thread meanwhile when its reader allows it (``collect``'s
    ``overlap``: the SQLite reader's ``later_anywhere``).
    """
    overlap = concurrent is None
    if concurrent is None:
        at_once = getattr(store, "legs_at_once", None)
        concurrent = bool(at_once(row, legs.restriction is not None)) if at_once is not None else False
    if not (concurrent and legs.vector is not None and legs.keyword and legs.fusion is not None):
        with store.reader(row) as reader:
            return collect(reader, legs, vectors=vectors, overlap=overlap)
    meeting = _Meeting()
    pending = _pool().submit(_vector_side, store, row, legs, meeting, vectors)
    try:
        with store.reader(row) as reader:
            found, title_weight = keyword_part(reader, legs)
            if meeting.arrive_keyword((found, title_weight), reader.rows_read()):
                assert meeting.vector is not None
                return fuse_and_read(reader, legs, [("vector", meeting.vector), *found], title_weight, vectors)
    except BaseException:
        meeting.fail()
        wait([pending])  # the vector leg's connection is back in its pool before the error goes up
        raise
    collected = pending.result()  # the vector leg's error, if it failed
    assert collected is not None  # the keyword leg arrived first, so the vector leg fused
    return collected


def _explained(explain: dict[str, Any] | None, plan: str) -> None:
    if explain is not None:
        explain["plan"] = plan


def vector_query(store: SearchPort, collection: str, vector: Sequence[float] | np.ndarray, top_k: int = 5, *,
                 threshold: float | None = None, document_ids: Sequence[str] | None = None,
                 include_content: bool = True, filter: FilterLike = None,
                 explain: dict[str, Any] | None = None) -> list[SearchHit]:
    """Top-k by cosine similarity, best first, inside ``document_ids`` and ``filter`` (R14, R21).

    The restriction applies before ranking: when k chunks pass, k come back. A malformed filter raises
    ``FilterError`` before the store is touched; a vector of another dimension than the collection's,
    ``DimensionMismatchError``. ``explain``, if a dict, receives ``{"plan": ...}``: how the store searched.
    """
    top_k = check_top_k(top_k)
    q = check_query_vector(vector)
    restriction = Restriction.of(document_ids, filter)
    row = store.read_collection(collection)
    check_dimension(row.dimension, q.shape[0], collection)
    # A store that can answer an unrestricted search in one round trip (PostgreSQL over a known HNSW index:
    # its nearest_hits) does; None from it: the reader's way.
    once = getattr(store, "nearest_hits", None) if restriction is None else None
    hits = once(row, q, top_k, threshold=threshold, include_content=include_content) if once is not None else None
    if hits is not None:
        _explained(explain, "hnsw")
        return list(hits)
    with store.reader(row) as reader:
        ranked = reader.nearest(q, top_k, restriction, threshold=threshold)
        _explained(explain, ranked.plan)
        return list(reader.hits(ranked, include_content=include_content))


def keyword_query(store: SearchPort, collection: str, query: str, top_k: int = 5, *,
                  document_ids: Sequence[str] | None = None, filter: FilterLike = None, include_content: bool = True,
                  explain: dict[str, Any] | None = None, budget: int | None = None,
                  proximity: Proximity | UseDefault | None = DEFAULT) -> list[SearchHit]:
    """Top-k by BM25 over the collection's postings with phrase and proximity, best first, inside
    ``document_ids`` and ``filter`` (see :mod:`bunko.search.keyword`); ``budget`` is the ranker's MaxScore
    budget (tests make it small), ``proximity`` None ranks by BM25 alone."""
    top_k = check_top_k(top_k)
    restriction = Restriction.of(document_ids, filter)
    row = store.read_collection(collection)
    with store.reader(row) as reader:
        options: Mapping[str, Any] = {} if budget is None else {"budget": budget}
        ranked = keyword_leg(reader, query, top_k, restriction, proximity=proximity, **options)
        _explained(explain, ranked.plan)
        return list(reader.hits(ranked, include_content=include_content))


__all__ = ["LEG_THREADS", "Collected", "Legs", "SearchPort", "collect", "collect_legs", "fuse_and_read", "keyword_part",
           "keyword_query", "vector_leg", "vector_query"]
