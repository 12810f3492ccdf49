"""The PostgreSQL store bound to one tenant: chunk writes with their keyword columns, document versions,
and the upkeep of each collection's HNSW index.

* Vectors: a ``vector`` column (dimension fixed per collection and checked on every write and query)
  and, once a collection is large enough, a partial HNSW cosine index per collection on
  ``embedding::vector(d)`` (``halfvec(d)`` above 2,000 dimensions), built after bulk loads.
* Writes: documents are written in batches with binary ``COPY``, one transaction per batch; a new
  version of a document replaces its chunks inside that transaction.
* Keywords: each chunk's analyzed tokens as tsvectors (``fts``, and ``fts_pairs`` for its pairs of
  one-character tokens), its token count, the collection's ``keyword_df`` and postings.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import crashpoints
from ...analysis import pairs_positions_literal, tsvector_literal
from ...errors import CollectionNotFoundError, VectorStoreError
from ..base import DocumentWrite, Ranked
from ..sql import ChunkRow, PlannedWrite, SQLStore
from ..sql.keywords import KeywordBatch
from ..sql.records import TenantRecords
from .migrations import KEYWORD_TERMS
from .search import RERANK_CANDIDATES, Plan, PostgresReader

if TYPE_CHECKING:
    from ...types import SearchHit
    from ..base import CollectionRow
    from .backend import PostgresBackend

try:
    from psycopg import sql
    from psycopg.types.json import Jsonb
except ImportError:  # pragma: no cover - the "postgres" extra is missing; the backend refuses to open
    pass

logger = logging.getLogger(__name__)


# tsvector positions stop at 16383; pairs of tokens are counted while both positions are distinct.
_TS_POSITIONS = 16383
_PAIR_POSITIONS = _TS_POSITIONS - 1


def keyword_literals(tokens: list[str]) -> tuple[str, str]:
    """The keyword columns of a chunk's tokens: its tsvector literal (``fts``) and the tsvector literal of
    its pairs (``fts_pairs``). Its statistics terms are counted as the tsvectors hold them: every
    token, and the pairs whose first token lies before ``_PAIR_POSITIONS`` (``_pair_limit``)."""
    return tsvector_literal(tokens), pairs_positions_literal(tokens, _PAIR_POSITIONS)


class PostgresVectorStore(SQLStore, TenantRecords):
    """The PostgreSQL store bound to one tenant. Build it with ``PostgresBackend.for_tenant``.

    The SQL core does collections, documents, records and hydration; this class adds the binary
    COPY of chunks with their keyword columns, document versions, the HNSW index's upkeep, and its
    search port (:mod:`bunko.stores.postgres.search`).
    """

    _backend: PostgresBackend
    _collection_extra = ", keyword_tokens, NULL"
    _reader = PostgresReader
    # Both legs wait on the server most of their time: at 100,000 chunks of benchmarks/bench_search.py at
    # load 2-2.5, hybrid p50 10.4-10.8 ms with the legs at the same time against 11.4 ms in turn
    # (docs/ARCHITECTURE.md "Hybrid legs at the same time"); but see legs_at_once.
    concurrent_legs = True

    def legs_at_once(self, row: CollectionRow, restricted: bool) -> bool:
        """At once, each leg in a transaction of its own -- except an unrestricted search over a collection
        whose HNSW index this process knows: its index search is sent ahead (on a second idle connection,
        else in pipeline mode on the transaction's) and answered after the keyword leg ran
        (``PostgresReader.nearest_later``), one transaction.
        On a quiet machine at 100,000 chunks (bench_search.py, 150 questions): 5.95 ms p50 against 6.75 at
        once, 3.92 against 4.37 ms of client CPU, one connection instead of two. Other plans (IVFFlat, exact,
        filtered) run at once: in one transaction they would run in turn (1M, IVFFlat: 72.9 against 51.0)."""
        if restricted:
            return True
        backend, settings = self._backend, self._backend.settings
        kind = backend.index_kinds.get(row.key) if row.key in backend.indexed else None
        outgrown = bool(settings.ivfflat_min_rows) and row.chunk_count >= settings.ivfflat_min_rows
        hnsw = kind is not None and kind[0] in ("halfvec", "hnsw") and not outgrown
        return not (hnsw and row.chunk_count >= settings.hnsw_min_rows)

    def __init__(self, backend: PostgresBackend, tenant: str) -> None:
        super().__init__(backend, tenant)
        self._bulk = False

    def nearest_hits(self, row: CollectionRow, vector: np.ndarray, top_k: int, *, threshold: float | None = None,
                     include_content: bool = True) -> list[SearchHit] | None:
        """An unfiltered vector search's hits in one round trip, or None when this search cannot go that way.

        When the collection's HNSW index over halfvec is known to this process (an earlier search found it),
        the collection is not past ``ivfflat_min_rows``, the tenant's row id is known and k is within the
        re-ranked candidates, the settings and the search with its hits (``Plan.rows_sql``) go in one
        message as one implicit transaction (``PostgresBackend.read_piped``), where a reader's transaction
        waited for the server three times (``BEGIN``, the search, ``COMMIT``). A search that comes back with
        fewer than k hits while k exist returns None: the reader's way then answers (the exact scan)."""
        backend, settings = self._backend, self._backend.settings
        tenant_pk = self._tenant_row.pk
        kind = backend.index_kinds.get(row.key) if row.key in backend.indexed else None
        outgrown = bool(settings.ivfflat_min_rows) and row.chunk_count >= settings.ivfflat_min_rows
        if (tenant_pk is None or kind is None or kind[0] != "halfvec" or outgrown or top_k > RERANK_CANDIDATES
                or row.chunk_count < settings.hnsw_min_rows):
            return None
        plan = Plan("hnsw", tenant_pk, row.key, row.dimension, top_k, None, row.chunk_count, row.chunk_count,
                    settings, cast=f"halfvec({int(row.dimension)})")
        rows = backend.read_piped(self._tenant, tenant_pk, self._user, plan.rows_settings(), plan.rows_sql(),
                                  [*plan.index_params(vector, top_k), tenant_pk])
        if len(rows) < min(top_k, row.chunk_count):
            return None
        reader = self._reader(self, backend, None, tenant_pk, row)  # no statement: every hit is read already
        reader.keep_rows(r[1:] for r in rows)
        found = [(int(r[1]), float(r[0])) for r in rows]
        if threshold is not None:
            found = [(key, score) for key, score in found if score >= threshold]
        ranked = Ranked(np.asarray([k for k, _ in found], dtype=np.int64),
                        np.asarray([s for _, s in found], dtype=np.float64), plan.strategy)
        return reader.hits(ranked, include_content=include_content)

    def read_collection(self, name: str) -> CollectionRow:
        """The collection's row, read once for a search to work from (``reader``), or
        ``CollectionNotFoundError``: once the tenant's row id is known, in one round trip
        (``PostgresBackend.read_once``: the settings and the statement in one message, no ``BEGIN`` or
        ``COMMIT``), where a transaction of its own waited for the server four times."""
        tenant_pk = self._tenant_row.pk
        if tenant_pk is None:
            return super().read_collection(name)
        counters = self._backend.counters
        counters.add("read_transactions")
        counters.add("collection_reads")
        rows = self._backend.read_once(self._tenant, tenant_pk, self._user, ("collection", name), lambda: sql.SQL(
            f"SELECT {self._COLLECTION_COLUMNS}{self._collection_extra} FROM bunko.collections "
            "WHERE tenant_id = {} AND name = {}").format(sql.Literal(int(tenant_pk)), sql.Literal(name)))
        if not rows:
            raise CollectionNotFoundError(f"collection {name!r} does not exist in tenant {self._tenant!r}")
        return self._named(rows[0])


    # -- what the core asks of a backend ---------------------------------------------------
    _render = staticmethod(keyword_literals)
    _pair_limit = _PAIR_POSITIONS

    def _collection_settings(self) -> dict[str, Any]:
        settings = self._backend.settings
        return {"hnsw_m": settings.hnsw_m, "hnsw_ef_construction": settings.hnsw_ef_construction}

    @staticmethod
    def _count(conn: Any, tenant_pk: int, collection_pk: int, chunks: int, tokens: int) -> None:
        conn.execute(
            "UPDATE bunko.collections SET chunk_count = chunk_count + %s, keyword_tokens = keyword_tokens + %s, "
            "mutation_seq = mutation_seq + %s WHERE tenant_id = %s AND id = %s",
            (chunks, tokens, 1 if chunks < 0 else 0, tenant_pk, collection_pk),
        )

    def _insert_chunks(self, conn: Any, tenant_pk: int, collection_pk: int, rows: list[ChunkRow],
                       vectors: np.ndarray, keywords: KeywordBatch) -> None:
        literals, sizes = keywords.rendered, keywords.sizes.tolist()
        ids = self._copy_chunks(conn, [
            (uid, tenant_pk, collection_pk, doc_pk, version_pk, index, start, end, tokens, content, Jsonb(meta),
             vectors[i], literals[i][0], sizes[i], literals[i][1])
            for i, (uid, doc_pk, version_pk, index, start, end, tokens, content, meta) in enumerate(rows)
        ])
        # The collection row's lock (taken here) orders writers before their postings and statistics.
        self._count(conn, tenant_pk, collection_pk, len(rows), keywords.tokens)
        at = {row[0]: i for i, row in enumerate(rows)}
        rowids = np.empty(len(rows), dtype=np.int64)
        for chunk_pk, uid in ids:
            rowids[at[uid]] = chunk_pk
        counts = self._backend.postings.add_columns(  # each term's number of new chunks
            conn, (tenant_pk, collection_pk), rowids, keywords.sizes, keywords.terms, keywords.owner, keywords.term,
            keywords.tf)
        if counts:
            terms = sorted(counts)  # one lock order for every writer: concurrent loads never deadlock
            # The arrays in binary (%b): a write of 2,000 chunks lists ~35,000 terms, which psycopg dumps as a
            # text array (quoting each) in 240 ms and as a binary one in 60 ms (at load 20).
            conn.execute(
                "INSERT INTO bunko.keyword_df (tenant_id, collection_id, term, df) SELECT %s, %s, t, n "
                "FROM unnest(%b::text[], %b::int8[]) AS x(t, n) ORDER BY t "
                "ON CONFLICT (tenant_id, collection_id, term) DO UPDATE SET df = keyword_df.df + excluded.df",
                (tenant_pk, collection_pk, terms, [counts[t] for t in terms]),
            )

    def _delete_chunks(self, conn: Any, tenant_pk: int, collection_pk: int, *,
                       document_pks: Sequence[int] | None = None, uids: Sequence[str] | None = None) -> int:
        params: tuple[Any, ...]
        if document_pks is not None:
            where, params = "tenant_id = %s AND document_id = ANY(%s)", (tenant_pk, list(document_pks))
        else:
            where, params = ("tenant_id = %s AND collection_id = %s AND uid = ANY(%s)",
                             (tenant_pk, collection_pk, list(uids or [])))
        removed, tokens, terms, counts, ids = conn.execute(
            f"WITH gone AS (DELETE FROM bunko.chunks WHERE {where} RETURNING id, fts, fts_length), "
            "terms AS (SELECT t.term, count(*) AS n FROM gone g, LATERAL ("
            + KEYWORD_TERMS.format(fts="g.fts") + ") t GROUP BY t.term) "
            "SELECT (SELECT count(*) FROM gone), (SELECT coalesce(sum(fts_length), 0) FROM gone), "
            "ARRAY(SELECT term FROM terms ORDER BY term), ARRAY(SELECT n FROM terms ORDER BY term), "
            "ARRAY(SELECT id FROM gone)",
            params,
        ).fetchone()
        if removed:
            # Every writer locks the collection row before any keyword_df row, and those rows in term
            # order (as _insert_chunks does): concurrent deletes and loads into one collection never
            # deadlock.
            self._count(conn, tenant_pk, collection_pk, -int(removed), -int(tokens))
            self._backend.postings.remove(conn, (tenant_pk, collection_pk), (int(i) for i in ids))
            if terms:
                conn.execute("SELECT 1 FROM bunko.keyword_df WHERE tenant_id = %s AND collection_id = %s "
                             "AND term = ANY(%b::text[]) ORDER BY term FOR UPDATE",
                             (tenant_pk, collection_pk, list(terms)))
                conn.execute(
                    "UPDATE bunko.keyword_df k SET df = k.df - x.n FROM unnest(%b::text[], %b::int8[]) AS x(t, n) "
                    "WHERE k.tenant_id = %s AND k.collection_id = %s AND k.term = x.t",
                    (list(terms), [int(n) for n in counts], tenant_pk, collection_pk),
                )
        return int(removed)

    def _record_versions(self, conn: Any, tenant_pk: int,
                         written: list[tuple[int, PlannedWrite, DocumentWrite]]) -> list[int | None]:
        """One ``document_versions`` row per written document, and the documents point at it."""
        if not written:
            return []
        rows = conn.execute(
            "INSERT INTO bunko.document_versions (tenant_id, document_id, version, content_hash, metadata, "
            "chunk_count) SELECT %s, d, v, h, m, n "
            "FROM unnest(%s::int8[], %s::int4[], %s::text[], %s::jsonb[], %s::int4[]) AS t(d, v, h, m, n) "
            "RETURNING document_id, id",
            (tenant_pk, [pk for pk, _, _ in written], [p.version for _, p, _ in written],
             [d.content_hash for _, _, d in written], [Jsonb(d.metadata) for _, _, d in written],
             [p.chunk_count for _, p, _ in written]),
        ).fetchall()
        by_document = {int(d): int(v) for d, v in rows}
        conn.execute(
            "UPDATE bunko.documents d SET current_version_id = t.v FROM unnest(%s::int8[], %s::int8[]) "
            "AS t(d, v) WHERE d.tenant_id = %s AND d.id = t.d",
            ([pk for pk, _, _ in written], [by_document[pk] for pk, _, _ in written], tenant_pk),
        )
        return [by_document[pk] for pk, _, _ in written]

    def _drop_collection(self, conn: Any, tenant_pk: int, collection_pk: int) -> None:
        conn.execute("SELECT bunko.drop_hnsw_index(%s)", (collection_pk,))
        # The postings have no foreign key to cascade from the collection's row (m026): they go here.
        conn.execute("DELETE FROM bunko.keyword_postings WHERE tenant_id = %s AND collection_id = %s",
                     (tenant_pk, collection_pk))

    def _forget_collection(self, collection_pk: int) -> None:
        self._backend.indexed.discard(collection_pk)
        self._backend.forget_columns(collection_pk)

    def _after_write(self, collection_pk: int, chunk_count: int) -> None:
        self._maybe_build_index(collection_pk, chunk_count)

    _CHUNK_COLUMNS = ("uid, tenant_id, collection_id, document_id, version_id, chunk_index, start_offset, end_offset, "
                      "token_count, content, metadata, embedding")

    @classmethod
    def _copy_chunks(cls, conn: Any, rows: list[tuple]) -> list[tuple[int, str]]:
        """COPY rows (the chunk columns plus the analyzed keyword text) in binary, then one checked INSERT;
        returns the new rows' (id, uid)."""
        if not rows:
            return []
        columns = cls._CHUNK_COLUMNS
        with conn.cursor() as cur:
            with cur.copy(f"COPY bunko_chunk_stage ({columns}, fts_text, fts_length, fts_pairs_text) FROM STDIN "
                          "(FORMAT BINARY)") as copy:
                copy.set_types(["text", "int8", "int8", "int8", "int8", "int4", "int4", "int4", "int4", "text",
                                "jsonb", "vector", "text", "int4", "text"])
                for r in rows:
                    copy.write_row(r)
            # The analyzer's tokens arrive as a tsvector literal: the cast only parses it, no text-search
            # parser or dictionary runs, so the lexemes are exactly the tokens the queries ask for.
            cur.execute(f"INSERT INTO bunko.chunks ({columns}, fts, fts_length, fts_pairs) SELECT {columns}, "
                        "fts_text::tsvector, fts_length, fts_pairs_text::tsvector FROM bunko_chunk_stage "
                        "RETURNING id, uid")
            ids = [(int(r[0]), str(r[1])) for r in cur.fetchall()]
            cur.execute("TRUNCATE bunko_chunk_stage")
        return ids

    def _maybe_build_index(self, collection_pk: int, chunk_count: int) -> None:
        """Build the collection's HNSW index once it is big enough -- unless a bulk load is on.

        Inserting through an HNSW index is several times slower than building it once after
        the load, so ``bulk_load()`` defers the build to its end. The data is committed
        already, so a failing build is logged, not raised into the write.
        """
        if self._bulk or chunk_count < self._backend.settings.hnsw_min_rows:
            return
        try:
            self.build_index(collection_pk=collection_pk)
        except VectorStoreError as exc:
            logger.warning("could not build the HNSW index of collection %s: %s", collection_pk, exc)

    @contextmanager
    def bulk_load(self, collection: str) -> Iterator[None]:
        """Defer index builds while many documents are written; build and ANALYZE at the end."""
        self._bulk = True
        try:
            yield
        finally:
            self._bulk = False
            try:
                with self.session() as (conn, tenant_pk):
                    row = self._collection_row(conn, tenant_pk, collection)
                    collection_pk, total = row.key, row.chunk_count
            except CollectionNotFoundError:
                return
            self._maybe_build_index(collection_pk, total)
            try:
                with self.session() as (conn, _):
                    conn.execute("SELECT bunko.analyze_tables()")
            except VectorStoreError as exc:  # statistics only (autovacuum gathers them too): the writes stand
                logger.warning("could not ANALYZE after a bulk load into %s: %s", collection, exc.message)

    def build_index(self, collection: str | None = None, *, collection_pk: int | None = None) -> str | None:
        """Build (if missing) the HNSW index of a collection; returns its name.

        When the login role owns the schema the index is built with ``CREATE INDEX CONCURRENTLY``
        on a connection of its own: searches and writes (of every tenant) go on meanwhile, the
        searches with the exact plan until the index is valid. Otherwise the schema's
        ``build_hnsw_index`` function builds it in one transaction (writes wait, reads do not).
        """
        settings = self._backend.settings
        with self._backend.index_lock:
            with self.session() as (conn, tenant_pk):
                if collection_pk is None:
                    collection_pk = self._collection_row(conn, tenant_pk, collection or "").key
                row = conn.execute("SELECT dimension, hnsw_m, hnsw_ef_construction, chunk_count FROM bunko.collections "
                                   "WHERE tenant_id = %s AND id = %s", (tenant_pk, collection_pk)).fetchone()
                if row is None:
                    return None
            crashpoints.reach("store.hnsw.build")
            name = self._backend.build_index_concurrently(int(collection_pk), *(int(v) for v in row))
            with self.session() as (conn, _):
                if name is None:
                    return conn.execute(
                        "SELECT bunko.build_hnsw_index(%s, %s, %s)",
                        (collection_pk, settings.maintenance_work_mem, settings.parallel_workers),
                    ).fetchone()[0]
                conn.execute("SELECT bunko.analyze_tables()")  # or the planner keeps estimating an empty table
            return name
