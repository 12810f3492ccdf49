"""The search port of the PostgreSQL store: the vector search planner, and the allowed chunks of a
restriction from in-memory metadata columns.

Restricted search (R21): the planner sizes the restriction (from its documents' chunk counts, or by
evaluating the filter over the metadata columns, or by counting in SQL up to the exact-scan limit) and
picks an exact scan (few rows, or no index), an HNSW iterative index scan (pgvector 0.8+, verified
with ``SHOW``), or an over-fetch-and-retry loop, so that when k matching chunks exist, k come back in
the right order. Keyword search ranks from the postings above the store (:mod:`bunko.search.keyword`),
with the collection's counters as statistics.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ...config import PostgresSettings
from ..base import Ranked, Restriction
from ..sql import SQLReader, hit_columns, hit_join
from .columns import DOCUMENT_JOIN
from .dialect import POSTGRES

if TYPE_CHECKING:
    from .backend import PostgresBackend


def search_breadth(settings: PostgresSettings, rows: int, top_k: int) -> int:
    """``hnsw.ef_search`` for an unfiltered search of a collection of ``rows`` chunks.

    An HNSW graph of more vectors needs a wider search for the same recall, and from about 100,000 chunks
    faster than the square root of its size: on ``benchmarks/bench_search.py``'s chunks (HNSW over halfvec,
    two question samples) recall@10 reached 0.99 at ef_search ~500 at 60,000 chunks, 560-600 at 100,000
    (two builds) and 900 at 150,000 (docs/ARCHITECTURE.md, "Which index, and how wide a search"). So
    ``settings.ef_search`` up to ``settings.ef_search_rows`` chunks, then growing with the square root of
    the size, and at least in proportion to it past ``settings.ef_search_linear_rows`` chunks; at most
    pgvector's limit of 1,000, never less than k.
    """
    breadth = settings.ef_search
    if settings.ef_search_rows and rows > settings.ef_search_rows:
        breadth = round(settings.ef_search * math.sqrt(rows / settings.ef_search_rows))
    if settings.ef_search_linear_rows and rows > settings.ef_search_linear_rows:
        breadth = max(breadth, round(settings.ef_search * rows / settings.ef_search_linear_rows))
    return max(min(1000, breadth), min(1000, top_k), 1)


def vector_type(dim: int) -> str:
    """The type of a collection's former HNSW index (``chunks_hnsw_<pk>``): ``vector(d)``, ``halfvec(d)`` above
    2,000 dimensions. Indexes built now are over ``halfvec(d)`` at every dimension (``chunks_hnswh_<pk>``)."""
    return f"vector({dim})" if dim <= 2000 else f"halfvec({dim})"


def configured(conn: Any, settings: dict[str, str], statement: str, params: list[Any]) -> tuple[list[Any], list[str]]:
    """Set ``settings`` for the transaction and run ``statement``, in one round trip to the server.

    The ``set_config`` calls and the statement go out together in pipeline mode (one sync), where one
    statement each would wait for the server in turn: on a busy machine each round trip waits for the
    server process to be scheduled. Returns the statement's rows and the settings' values as the server
    reports them after setting (an unsupported value of an enum setting reads back as another value).
    """
    if not settings:
        return conn.execute(statement, params).fetchall(), []
    names = list(settings)
    with conn.pipeline():
        applied = conn.execute("SELECT " + ", ".join(["set_config(%s, %s, true)"] * len(names)),
                               [v for name in names for v in (name, settings[name])])
        found = conn.execute(statement, params)
    row = applied.fetchone()
    return found.fetchall(), [str(v) for v in row]


# An HNSW search over halfvec asks the index for this many candidates (at least k) and re-ranks them by
# their full-precision vectors, so scores and order are exact among the candidates. At 100,000 chunks of
# benchmarks/bench_search.py re-ranking 20 or 40 found the same (0.998 at ef_search 800): the graph's misses
# are not a matter of precision (docs/ARCHITECTURE.md, "Which index, and how wide a search").
RERANK_CANDIDATES = 20


@dataclass(slots=True)
class Plan:
    """A chosen way to run one vector search."""

    strategy: str  # "empty", "exact", "hnsw", "hnsw-iterative", "hnsw-overfetch", "ivfflat" or "ivfflat-iterative"
    tenant_pk: int
    collection_pk: int
    dim: int
    top_k: int
    doc_pks: list[int] | None
    matching: int  # exact, or (for a broad filter) a lower bound above settings.exact_max_rows
    total: int
    settings: PostgresSettings
    where: tuple[str, list[Any]] | None = None  # a compiled metadata filter over c (chunks) and d (documents)
    # The ids of the chunks that pass the restriction, when known (from the metadata columns): the
    # exact scan then reads those rows by primary key instead of testing every row of the collection.
    ids: np.ndarray | None = None
    lists: int = 0  # of the collection's IVFFlat index (0: HNSW or none)
    # The type the collection's HNSW index is over (``halfvec(d)``, or ``vector(d)`` for a former index);
    # over halfvec, candidates are re-ranked by the full vectors.
    cast: str = ""

    @property
    def rerank(self) -> bool:
        """Whether index candidates are re-ranked by the full vectors (an index over halfvec)."""
        return self.cast.startswith("halfvec")

    def run(self, conn: Any, q: np.ndarray) -> list[tuple[int, float]]:
        """(chunk id, score) of the top-k, best first, by this plan's strategy; never short when k match."""
        if self.strategy == "empty":
            return []
        if self.strategy == "exact":
            return self._exact(conn, q)
        want = min(self.top_k, self.matching)
        if self.strategy == "hnsw":
            found, _ = self._index(conn, q, ef_search=search_breadth(self.settings, self.total, self.top_k),
                                   limit=self.top_k)
        elif self.strategy.startswith("ivfflat"):
            found = self._ivfflat(conn, q)
        elif self.strategy == "hnsw-iterative":
            found = self._iterative(conn, q)
        else:
            found = self._overfetch(conn, q)
        if len(found) < want:  # never come back short: the exact scan is the last word
            self.strategy += "+exact"
            return self._exact(conn, q)
        return found

    def _restriction(self) -> tuple[str, str, list[Any]]:
        """(join, conditions, parameters) restricting ``c`` to the documents and the filter."""
        join, restrict, params = "", "", []
        if self.ids is not None:
            # The chunks that pass the filter, found in the metadata columns: the filter is not evaluated
            # again. A chunk's metadata never changes, nor its document's while it lives (a document written
            # again with other metadata has its chunks replaced, with new ids, in the same transaction), so
            # each of these rows still passes if it is there at all. Evaluating the filter again (with a join
            # of the documents) cost a fifth of the statement of a 1% filtered search at 100,000 chunks.
            restrict, params = " AND c.id = ANY(%s)", [self.ids.tolist()]
        if self.doc_pks is not None:
            restrict += " AND c.document_id = ANY(%s)"
            params.append(self.doc_pks)
        if self.where is not None and self.ids is None:
            join = DOCUMENT_JOIN
            restrict += f" AND {self.where[0]}"
            params += self.where[1]
        return join, restrict, params

    def _exact(self, conn: Any, q: np.ndarray) -> list[tuple[int, float]]:
        # The ORDER BY expression differs from the index expression, so the planner cannot use HNSW here.
        join, restrict, params = self._restriction()
        rows = conn.execute(
            "SELECT c.id, c.embedding <=> %s::vector AS distance FROM bunko.chunks c" + join +
            " WHERE c.tenant_id = %s AND c.collection_id = %s" + restrict + " ORDER BY distance, c.id LIMIT %s",
            [q, self.tenant_pk, self.collection_pk, *params, self.top_k],
        ).fetchall()
        return [(int(r[0]), 1.0 - float(r[1])) for r in rows]

    def index_sql(self) -> str:
        """The statement of an HNSW index scan of this plan (parameters: :meth:`index_params`).

        Over halfvec: the index's nearest ``RERANK_CANDIDATES`` (at least k), then re-ranked by the full
        vectors. Over vector (a former index): the index's top k, scored from the row.
        """
        cast = self.cast or vector_type(self.dim)
        join, restrict, _ = self._restriction()
        # collection_id is inlined as an integer literal so the partial index's predicate matches.
        scan = (f"FROM bunko.chunks c{join} WHERE c.tenant_id = %s AND c.collection_id = {int(self.collection_pk)}"
                f"{restrict} ORDER BY (c.embedding::{cast}) <=> %s::{cast} LIMIT %s")
        if self.rerank:
            return (f"WITH candidates AS MATERIALIZED (SELECT c.id, c.embedding {scan}) SELECT id, "
                    "1 - (embedding <=> %s::vector) AS score FROM candidates ORDER BY score DESC, id LIMIT %s")
        return f"SELECT c.id, 1 - ((c.embedding::{cast}) <=> %s::{cast}) AS score {scan}"

    def index_params(self, q: Any, limit: int) -> list[Any]:
        """The parameters of :meth:`index_sql` for query vector ``q`` and ``limit`` hits."""
        _, _, params = self._restriction()
        if self.rerank:
            return [self.tenant_pk, *params, q, max(limit, RERANK_CANDIDATES), q, limit]
        return [q, self.tenant_pk, *params, q, limit]

    def rows_sql(self) -> str:
        """The statement of :meth:`index_rows` (parameters: :meth:`index_params` for k hits, then the tenant)."""
        # collection_id inlined as in index_sql; the tenant predicate again on the join (RLS checks it too).
        return (f"SELECT ranked.score, {hit_columns(POSTGRES)} FROM ({self.index_sql()}) ranked "
                f"JOIN bunko.chunks c ON c.id = ranked.id{hit_join(POSTGRES)} "
                f"WHERE c.tenant_id = %s AND c.collection_id = {int(self.collection_pk)} "
                "ORDER BY ranked.score DESC, c.id")

    def rows_settings(self) -> dict[str, str]:
        """The settings :meth:`rows_sql` runs with (``hnsw.ef_search`` when not the session's)."""
        return self._index_settings(search_breadth(self.settings, self.total, self.top_k))

    def index_rows(self, conn: Any, q: np.ndarray) -> tuple[list[tuple[int, float]], list[Any]]:
        """This plan's unfiltered HNSW search (re-ranked, over halfvec) with its hits read whole in the same
        statement: (chunk id, score) of the top k, best first, and their rows (``hit_columns``, with the
        document join), for ``SQLReader.keep_rows``. One round trip where the search and then the hits read
        were two. Never fewer than k when k exist: else the exact scan answers (and no rows)."""
        rows, _ = configured(conn, self.rows_settings(), self.rows_sql(),
                             [*self.index_params(q, self.top_k), self.tenant_pk])
        if len(rows) < min(self.top_k, self.matching):
            self.strategy += "+exact"
            return self._exact(conn, q), []
        return [(int(r[1]), float(r[0])) for r in rows], [r[1:] for r in rows]

    def _index(self, conn: Any, q: np.ndarray, *, ef_search: int, limit: int,
               settings: dict[str, str] | None = None) -> tuple[list[tuple[int, float]], list[str]]:
        """The index scan with ``settings`` (and ``hnsw.ef_search``) set in the same round trip; its hits
        and the settings' values read back."""
        rows, applied = configured(conn, self._index_settings(ef_search, settings), self.index_sql(),
                                   self.index_params(q, limit))
        return [(int(r[0]), float(r[1])) for r in rows], applied

    def _index_settings(self, ef_search: int, settings: dict[str, str] | None = None) -> dict[str, str]:
        """``settings`` with the ``hnsw.ef_search`` an index scan of breadth ``ef_search`` needs."""
        settings = dict(settings or {})
        if self.rerank:  # the index must reach at least the candidates
            ef_search = max(ef_search, RERANK_CANDIDATES)
        if ef_search != self.settings.ef_search:  # the session default is settings.ef_search (see _configure)
            settings["hnsw.ef_search"] = str(min(1000, ef_search))
        return settings

    def index_request(self, q: np.ndarray) -> tuple[dict[str, str], str, list[Any]]:
        """This plan's unfiltered HNSW search (chunk id and score of the top k) as the settings it runs with,
        its statement and its parameters."""
        return (self._index_settings(search_breadth(self.settings, self.total, self.top_k)), self.index_sql(),
                self.index_params(q, self.top_k))

    def index_found(self, conn: Any, q: np.ndarray, rows: list[Any]) -> list[tuple[int, float]]:
        """The hits of :meth:`index_request`'s rows, never fewer than k: else the exact scan answers, on
        ``conn``."""
        found = [(int(r[0]), float(r[1])) for r in rows]
        if len(found) < min(self.top_k, self.matching):
            self.strategy += "+exact"
            return self._exact(conn, q)
        return found

    def send_index(self, conn: Any, q: np.ndarray) -> Callable[[], list[tuple[int, float]]]:
        """Send this plan's unfiltered HNSW search on ``conn``, which is in pipeline mode, without waiting;
        the returned function, called once the pipeline has ended, gives its hits (:meth:`index_found`)."""
        settings, statement, params = self.index_request(q)
        if settings:
            conn.execute("SELECT " + ", ".join(["set_config(%s, %s, true)"] * len(settings)),
                         [v for name, value in settings.items() for v in (name, value)])
        sent = conn.execute(statement, params)
        return lambda: self.index_found(conn, q, sent.fetchall())

    def _iterative(self, conn: Any, q: np.ndarray) -> list[tuple[int, float]]:
        found, applied = self._index(conn, q, ef_search=max(self.settings.ef_search, self.top_k), limit=self.top_k,
                                     settings={"hnsw.iterative_scan": "strict_order",
                                               "hnsw.max_scan_tuples": str(self.settings.max_scan_tuples)})
        # An invalid or unsupported value silently leaves iterative scans off (the scan then stops at
        # ef_search candidates, so matching chunks may be missed): read it back.
        if applied[0] != "strict_order":
            self.strategy = "hnsw-overfetch"
            return self._overfetch(conn, q)
        return found

    def probes(self) -> int:
        """The IVFFlat lists a search probes: ``ivfflat_probe_share`` of them, at least 1, at most
        ``ivfflat_max_probes`` (when above 0)."""
        probes = math.ceil(self.lists * self.settings.ivfflat_probe_share)
        if self.settings.ivfflat_max_probes:
            probes = min(probes, self.settings.ivfflat_max_probes)
        return max(1, min(self.lists, probes))

    def ivfflat_sql(self) -> str:
        """The statement of an IVFFlat search of this plan (parameters: tenant, restriction, vector, vector,
        candidates, limit): the nearest candidates by their halfvec, re-ranked by the full vectors."""
        join, restrict, _ = self._restriction()
        half = f"halfvec({int(self.dim)})"
        # collection_id is inlined as an integer literal so the partial index's predicate matches.
        return (
            f"WITH candidates AS MATERIALIZED (SELECT c.id, c.embedding FROM bunko.chunks c{join} "
            f"WHERE c.tenant_id = %s AND c.collection_id = {int(self.collection_pk)}{restrict} "
            f"ORDER BY (c.embedding::{half}) <=> %s::{half} LIMIT %s) "
            "SELECT id, 1 - (embedding <=> %s::vector) AS score FROM candidates ORDER BY score DESC, id LIMIT %s"
        )

    def _ivfflat(self, conn: Any, q: np.ndarray) -> list[tuple[int, float]]:
        """Probe ``probes()`` lists of the IVFFlat index for candidates (with a restriction, an iterative scan
        that probes further until enough pass, in relaxed order), re-ranked by the full vectors."""
        settings = {"ivfflat.probes": str(self.probes())}
        if self.strategy == "ivfflat-iterative":
            settings["ivfflat.iterative_scan"] = "relaxed_order"
        _, _, params = self._restriction()
        # A few more candidates than k: the halfvec order may swap neighbours the full vectors tell apart. At
        # 1,000,000 chunks re-ranking 20 or 50 found the same (0.983 at 40 lists probed, 0.980 at 30), and each
        # candidate is a heap row and its vector read out of line (docs/ARCHITECTURE.md).
        candidates = max(self.top_k, RERANK_CANDIDATES)
        rows, applied = configured(conn, settings, self.ivfflat_sql(),
                                   [self.tenant_pk, *params, q, candidates, q, self.top_k])
        # An unsupported value silently leaves iterative scans off: read back, the exact scan then answers.
        if self.strategy == "ivfflat-iterative" and applied[1] != "relaxed_order":
            self.strategy = "ivfflat+exact"
            return self._exact(conn, q)
        return [(int(r[0]), float(r[1])) for r in rows]

    def _overfetch(self, conn: Any, q: np.ndarray) -> list[tuple[int, float]]:
        """Ask the index for more candidates than k, filter, and widen until k match."""
        selectivity = max(self.matching / max(self.total, 1), 1e-6)
        fetch = int(min(self.total, max(self.top_k * 4, self.top_k / selectivity * 2)))
        if fetch > 1000:  # ef_search tops out at 1000: the index cannot reach this deep
            self.strategy = "hnsw-overfetch+exact"
            return self._exact(conn, q)
        cast = self.cast or vector_type(self.dim)
        join, restrict, params = self._restriction()
        # Over halfvec, the passing candidates are scored (and ranked) by their full vectors.
        score = "1 - (c.embedding <=> %s::vector)" if self.rerank else "candidates.score"
        while True:
            rows, _ = configured(
                conn, {"hnsw.ef_search": str(min(1000, max(fetch, 40)))},
                f"SELECT c.id, {score} AS score FROM (SELECT id, 1 - ((embedding::{cast}) <=> %s::{cast}) AS score "
                f"FROM bunko.chunks WHERE tenant_id = %s AND collection_id = {int(self.collection_pk)} "
                f"ORDER BY (embedding::{cast}) <=> %s::{cast} LIMIT %s) candidates "
                f"JOIN bunko.chunks c ON c.id = candidates.id{join} WHERE c.tenant_id = %s{restrict} "
                "ORDER BY score DESC, c.id LIMIT %s",
                [*([q] if self.rerank else []), q, self.tenant_pk, q, fetch, self.tenant_pk, *params, self.top_k])
            if len(rows) >= min(self.top_k, self.matching) or fetch >= min(self.total, 1000):
                return [(int(r[0]), float(r[1])) for r in rows]
            fetch = min(self.total, fetch * 4)


class PostgresReader(SQLReader):
    """One search's read transaction over a collection of the PostgreSQL store."""

    _backend: PostgresBackend

    def _index_kind(self) -> tuple[str, int] | None:
        """The collection's valid vector index: ("halfvec", 0) for HNSW over halfvec (``chunks_hnswh_<pk>``),
        ("hnsw", 0) for a former HNSW index (``chunks_hnsw_<pk>``, see :func:`vector_type`), ("ivfflat", its
        lists), or None.

        Cached per process once found: an index goes away only with its collection (and the collection
        lookup before this fails first), when a collection that grew past ``ivfflat_min_rows`` trades
        its HNSW index for an IVFFlat one (so a cached HNSW of a collection that big is looked up again),
        or when a write replaces a former HNSW index by one over halfvec (so a cached former index is
        looked up again once the collection's ``write_seq`` moved). One round trip less per search. An
        index still being built concurrently exists but is not valid: searches scan exactly meanwhile.
        """
        backend, key = self._backend, self._row.key
        settings = backend.settings
        cached = backend.index_kinds.get(key) if key in backend.indexed else None
        # A former HNSW index (over vector) is looked up again after a write to the collection: the write
        # that replaces it with one over halfvec drops it.
        current = cached is not None and (cached[0] != "hnsw" or backend.index_seqs.get(key) == self._row.write_seq)
        outgrown = cached is not None and cached[0] != "ivfflat" and bool(settings.ivfflat_min_rows) and (
            self._row.chunk_count >= settings.ivfflat_min_rows)
        if cached is not None and current and not outgrown:
            return cached
        found = {name: options for name, options in self._conn.execute(
            "SELECT c.relname, c.reloptions FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "WHERE i.indexrelid IN (to_regclass(%s), to_regclass(%s), to_regclass(%s)) AND i.indisvalid",
            tuple(f"bunko.chunks_{kind}_{key}" for kind in ("ivf", "hnswh", "hnsw")))}
        kind: tuple[str, int] | None = None
        if f"chunks_ivf_{key}" in found:
            lists = [int(o.split("=", 1)[1]) for o in found[f"chunks_ivf_{key}"] or [] if o.startswith("lists=")]
            kind = ("ivfflat", lists[0] if lists else 100)
        elif f"chunks_hnswh_{key}" in found:
            kind = ("halfvec", 0)
        elif f"chunks_hnsw_{key}" in found:
            kind = ("hnsw", 0)
        if kind is not None:
            backend.index_kinds[key] = kind
            backend.index_seqs[key] = self._row.write_seq
            backend.indexed.add(key)
        return kind

    def _passing(self, restriction: Restriction) -> np.ndarray | None:
        """The ids (ascending) of the chunks that pass a filtered restriction, from the metadata columns in
        memory; None when they do not line up with the collection row."""
        assert restriction.filter is not None
        row = self._row
        columns = self._backend.metadata_columns(row.key)
        passing = columns.passing(self._conn, self.scope, (row.mutation_seq, row.chunk_count), restriction.filter,
                                  self.compile(restriction).document_pks)
        return None if passing is None else np.sort(passing)

    def allowed(self, restriction: Restriction) -> np.ndarray:
        """The keys of the chunks that pass ``restriction``: from the metadata columns when they line up
        with the collection row, else from SQL."""
        if restriction.filter is not None:
            passing = self._passing(restriction)
            if passing is not None:
                return passing
        return self.allowed_in_sql(restriction)

    def plan(self, top_k: int, restriction: Restriction | None) -> Plan:
        """Choose how to search: exact scan, HNSW (iterative or over-fetch), from the restriction's size.

        A ``document_ids`` restriction is sized from the documents' chunk counts. A filter is sized
        by the chunks that pass it, from the metadata columns, or by counting them in SQL, stopping one
        past the exact-scan limit: a selective filter is known exactly and takes the exact path; a
        broad one is known to leave more than that, which is all the index strategies need (they fall
        back to the exact scan whenever they come back with fewer than min(k, matching) hits).
        """
        settings = self._backend.settings
        row, tenant_pk = self._row, self._tenant_pk
        compiled = self.compile(restriction) if restriction is not None else None
        doc_pks = compiled.document_pks if compiled is not None else None
        where = compiled.where if compiled is not None else None
        total = row.chunk_count
        matching = total
        if doc_pks is not None:
            matching = sum(r[0] for r in self._conn.execute(
                "SELECT chunk_count FROM bunko.documents WHERE tenant_id = %s AND id = ANY(%s)",
                (tenant_pk, doc_pks))) if doc_pks else 0
        index = self._index_kind() if total >= settings.hnsw_min_rows else None
        has_index = index is not None
        restricted = doc_pks is not None or where is not None
        passing: np.ndarray | None = None
        if where is not None and restriction is not None and has_index and matching > 0:
            # Without an index the exact scan applies the filter itself; no need to count first.
            # With one, the filter is evaluated over the collection's metadata columns in memory:
            # the chunks that pass, exactly, in about a millisecond instead of a scan of every row.
            passing = self._passing(restriction)
            if passing is not None:
                matching = len(passing)
        if where is not None and has_index and matching > 0 and passing is None:
            # The columns did not line up with the row (see MetadataColumns): count in SQL.
            bound = max(settings.exact_max_rows, top_k) + 1
            docs = " AND c.document_id = ANY(%s)" if doc_pks is not None else ""
            matching = int(self._conn.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM bunko.chunks c{DOCUMENT_JOIN} WHERE c.tenant_id = %s "
                f"AND c.collection_id = %s{docs} AND {where[0]} LIMIT %s) AS passing",
                [tenant_pk, row.key, *([doc_pks] if doc_pks is not None else []), *where[1], bound],
            ).fetchone()[0])
        if matching == 0:
            strategy = "empty"
        elif not has_index or (restricted and matching <= settings.exact_max_rows):
            strategy = "exact"
        elif index is not None and index[0] == "ivfflat":
            strategy = "ivfflat" if not restricted else "ivfflat-iterative" if self._backend.iterative else "exact"
        elif not restricted:
            strategy = "hnsw"
        elif self._backend.iterative:
            strategy = "hnsw-iterative"
        else:
            strategy = "hnsw-overfetch"
        cast = "" if index is None or index[0] == "ivfflat" else (
            f"halfvec({int(row.dimension)})" if index[0] == "halfvec" else vector_type(row.dimension))
        return Plan(strategy, tenant_pk, row.key, row.dimension, top_k, doc_pks, matching, total, settings, where,
                    passing if strategy == "exact" else None, index[1] if index is not None else 0, cast)

    def nearest(self, vector: np.ndarray, top_k: int, restriction: Restriction | None = None, *,
                threshold: float | None = None) -> Ranked:
        """Top-k by cosine similarity, best first, inside ``restriction`` (R21): the planner's choice."""
        plan = self.plan(top_k, restriction)
        # A vector search's few hits read in the same statement (Plan.index_rows); a hybrid leg deeper than the
        # candidates leaves them to be read after fusion, which keeps only some.
        if plan.strategy == "hnsw" and plan.rerank and top_k <= RERANK_CANDIDATES:
            found, rows = plan.index_rows(self._conn, vector)
            self.keep_rows(rows)
            return _ranked(found, plan.strategy, threshold)
        return _ranked(plan.run(self._conn, vector), plan.strategy, threshold)

    def nearest_later(self, vector: np.ndarray, top_k: int, restriction: Restriction | None = None, *,
                      threshold: float | None = None) -> Callable[[], Ranked]:
        """:meth:`nearest`, sent now and answered later: the returned function gives its ranking.

        An unfiltered index search goes to the server and this returns at once, so the server walks the
        index while the caller does other work in this process (a hybrid search's keyword leg). It goes on a
        second pooled connection when one is idle (``PostgresBackend.send_piped``: the tenant's settings and
        the search as one implicit transaction), so the statements the caller runs on this transaction
        meanwhile are answered at once, the server working on both; else in pipeline mode on this
        transaction's connection, where they are answered in turn, after it. Other plans run now. The
        function must be called (it ends the pipeline or gives the connection back), once, in this
        transaction.
        """
        plan = self.plan(top_k, restriction)
        if plan.strategy != "hnsw":
            ranked = _ranked(plan.run(self._conn, vector), plan.strategy, threshold)
            return lambda: ranked
        store = self._store
        settings, statement, params = plan.index_request(vector)
        rows = self._backend.send_piped(store.tenant, self._tenant_pk, store.user, settings, statement, params)
        if rows is not None:
            side = rows

            def answer_aside() -> Ranked:
                found = side()
                if found is None:  # the connection was dead: this transaction's connection asks
                    return _ranked(plan.run(self._conn, vector), plan.strategy, threshold)
                return _ranked(plan.index_found(self._conn, vector, found), plan.strategy, threshold)

            return answer_aside
        pipeline = ExitStack()
        pipeline.enter_context(self._conn.pipeline())
        try:
            found = plan.send_index(self._conn, vector)
        except BaseException:
            pipeline.close()
            raise

        def answer() -> Ranked:
            pipeline.close()  # one sync: the answers of everything sent since, then the hits are read here
            return _ranked(found(), plan.strategy, threshold)

        return answer


def _ranked(found: list[tuple[int, float]], plan: str, threshold: float | None) -> Ranked:
    """A vector search's (chunk id, score) pairs as a ranking, those below ``threshold`` left out."""
    if threshold is not None:
        found = [(key, score) for key, score in found if score >= threshold]
    return Ranked(np.asarray([k for k, _ in found], dtype=np.int64),
                  np.asarray([s for _, s in found], dtype=np.float64), plan)
