"""The embedded store bound to one tenant, and its search port.

Layout: ``tenants`` → ``collections`` → ``documents`` → ``chunks`` (content, metadata, float32
vector blob, and ``terms``: the chunk's analyzed text, its tokens joined by spaces, from which a delete
learns what to take out of the keyword index), plus ``keyword_df`` (how many chunks hold each
statistics term) and ``keyword_postings`` (:mod:`bunko.stores.sql.postings`). Every row below
``tenants`` carries ``tenant_id`` and every statement filters by it.

Vector search is exact, over the collection's normalised matrix held in memory (see
:mod:`bunko.stores.sqlite.matrix`); a restriction masks the matrix before ranking, from in-memory
metadata columns, or from SQL when those do not line up (a concurrent write). An unfiltered search
over a large collection asks its HNSW graph for candidates and ranks them by the same exact vectors
(:mod:`bunko.stores.sqlite.ann`). Keyword search ranks
from the postings above the store (:mod:`bunko.search.keyword`), with the collection's chunk and
token counters as its totals (``collections.chunk_count``, ``collections.keyword_tokens``).
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np

from ...analysis import fts5_document
from ..base import Ranked, Restriction
from ..sql import ChunkRow, SQLReader, SQLStore
from ..sql.columns import Column, Misaligned, filter_mask
from ..sql.keywords import KeywordBatch
from ..sql.postings import term_counts
from ..sql.records import TenantRecords
from .ann import Identity, remove_files
from .matrix import CollectionCache, Matrix, Snapshot, score_rows, top_indices
from .schema import text_key

if TYPE_CHECKING:
    from .backend import SQLiteBackend

# Rows read per step when (re)loading a collection's vectors into memory.
_LOAD_BATCH = 4096
# How long a search waits for a collection's HNSW graph while the maintainer updates it, before scanning.
_GRAPH_WAIT = 0.05


def _unit(vector: np.ndarray) -> np.ndarray:
    norm = float(np.linalg.norm(vector))
    return vector / norm if norm > 0 else vector


def _upsert_df(conn: sqlite3.Connection, scope: tuple[int, int], counts: dict[str, int]) -> None:
    if counts:
        conn.executemany(
            "INSERT INTO keyword_df (tenant_id, collection_id, term, df) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (tenant_id, collection_id, term) DO UPDATE SET df = df + excluded.df",
            [(*scope, term, n) for term, n in sorted(counts.items())])


class SQLiteReader(SQLReader):
    """One search's read transaction over a collection of the embedded store."""

    hydrate_by_collection = True
    # What nearest_later returns reads memory only, so any thread may call it (a hybrid search ranks its
    # vector leg on a worker thread while the keyword leg runs: bunko.search.session.collect's overlap).
    later_anywhere = True
    _backend: SQLiteBackend

    @property
    def _cache(self) -> CollectionCache:
        return self._backend.matrices

    def _matrix(self) -> Snapshot:
        """The collection's vectors as of the row this reader works from (see ``_refresh``); a large
        collection's index (graph or lists) is scheduled to catch up when it is behind them."""
        snapshot = self._refresh()
        ann = self._backend.ann
        if ann is not None and len(snapshot.rowids) >= ann.config.smallest():
            graph = self._cache.graphs.get(self._row.key)
            if graph is None or graph.high_water < snapshot.state[1] or graph.mutation_seq != snapshot.state[0]:
                ann.schedule(self._identity())
        return snapshot

    def _identity(self) -> Identity:
        row = self._row
        return Identity(self._tenant_pk, row.key, row.name, row.created_at, row.dimension)

    def _refresh(self) -> Snapshot:
        """The collection's vectors as of the row this reader works from, refreshed only as far as they changed.

        Inserts only add rows above the cached highest key, so they are appended. Updates and deletes
        bump ``mutation_seq``; then the cache keeps the rows that are still live (one index-only scan of
        keys) and appends the new ones, instead of reading every vector again.
        """
        row, cache = self._row, self._cache
        seq, high = row.mutation_seq, row.high_water
        with cache.lock:
            matrix = cache.matrices.get(row.key)
            if matrix is not None and matrix.dim != row.dimension:
                matrix = None
            if matrix is not None and matrix.mutation_seq == seq and matrix.high_water == high:
                return matrix.snapshot()
            if matrix is None:
                # Room for the next writes: growing copies the whole matrix, which a search would wait for.
                matrix = Matrix(row.dimension, capacity=row.chunk_count + max(1024, row.chunk_count // 8))
            elif matrix.mutation_seq != seq:
                live = np.fromiter((r[0] for r in self.run(
                    "SELECT id FROM chunks WHERE tenant_id = ? AND collection_id = ? AND id <= ?",
                    (*self.scope, matrix.high_water))), dtype=np.int64)
                matrix.keep_only(live)
            cursor = self.run(
                "SELECT id, coalesce(document_id, -1), embedding FROM chunks "
                "WHERE tenant_id = ? AND collection_id = ? AND id > ? AND id <= ? ORDER BY id",
                (*self.scope, matrix.high_water, high))
            while rows := cursor.fetchmany(_LOAD_BATCH):
                matrix.append(rows)
            matrix.mutation_seq, matrix.high_water = seq, high
            cache.matrices[row.key] = matrix
            return matrix.snapshot()

    def _column(self, field: tuple[str, ...], state: tuple[int, int]) -> Column:
        """A metadata field of the collection's chunks as a factorised column, read only as far as it changed."""
        cache, key = self._cache, (self._row.key, field)
        with cache.lock:
            column = cache.columns.get(key)
            if column is not None and (column.mutation_seq, column.high_water) == state:
                return column
            if column is None or column.mutation_seq != state[0] or column.high_water > state[1]:
                column = Column()
            path = "$" + "".join(f'."{segment}"' for segment in field)
            rows = self.run(
                "SELECT c.metadata -> ?, d.metadata -> ? FROM chunks c LEFT JOIN documents d "
                "ON d.id = c.document_id AND d.tenant_id = c.tenant_id WHERE c.tenant_id = ? AND c.collection_id = ? "
                "AND c.id > ? AND c.id <= ? ORDER BY c.id",
                (path, path, *self.scope, column.high_water, state[1])).fetchall()
            column.append([mine if mine is not None else theirs for mine, theirs in rows])
            column.mutation_seq, column.high_water = state
            cache.columns[key] = column
            return column

    def _mask(self, matrix: Snapshot, restriction: Restriction) -> np.ndarray:
        """Which rows of ``matrix`` pass ``restriction``.

        A filter is evaluated over in-memory columns of the fields it reads: each leaf once per
        distinct value of its field (with the Python evaluator, so the semantics are the filter
        language's own), mapped to the rows by their codes. When a column does not line up with the
        matrix (a concurrent write), the chunks that pass come from SQL instead.
        """
        compiled = self.compile(restriction)
        mask = np.ones(len(matrix.rowids), dtype=bool)
        if compiled.document_pks is not None:
            mask &= np.isin(matrix.doc_rowids, np.asarray(compiled.document_pks, dtype=np.int64))
        if restriction.filter is not None:
            try:
                mask &= filter_mask(restriction.filter, len(matrix.rowids),
                                    lambda field: self._column(field, matrix.state))
            except Misaligned:
                mask &= np.isin(matrix.rowids, self.allowed_in_sql(Restriction(None, restriction.filter)))
        return mask

    def allowed(self, restriction: Restriction) -> np.ndarray:
        """The keys of the chunks that pass ``restriction``: from the matrix and its columns when this
        process holds the collection, else from SQL (loading every vector would cost more)."""
        if not self._cache.holds(self._row.key):
            return self.allowed_in_sql(restriction)
        matrix = self._matrix()
        return matrix.rowids[self._mask(matrix, restriction)]

    def nearest(self, vector: np.ndarray, top_k: int, restriction: Restriction | None = None, *,
                threshold: float | None = None) -> Ranked:
        """Exact top-k by cosine similarity over the matrix; a restriction masks it before ranking, so k
        come back whenever k chunks pass."""
        if restriction is None:
            return self.nearest_later(vector, top_k, threshold=threshold)()
        matrix = self._matrix()
        q = _unit(vector)
        positions = np.flatnonzero(self._mask(matrix, restriction))
        scores = matrix.vectors[positions] @ q
        order = top_indices(scores, top_k)
        if threshold is not None:
            order = order[scores[order] >= threshold]
        return Ranked(matrix.rowids[positions[order]], scores[order].astype(np.float64), "exact")

    def nearest_later(self, vector: np.ndarray, top_k: int, restriction: Restriction | None = None, *,
                      threshold: float | None = None) -> Callable[[], Ranked]:
        """:meth:`nearest` in two steps: what reads the database now (the matrix brought up to date, a
        restriction's mask), and the ranking as a function any thread may call while this reader works on
        (it reads memory only: the graph walk and numpy let go of the GIL, so a hybrid search ranks its
        keyword leg meanwhile)."""
        if restriction is not None:
            ranked = self.nearest(vector, top_k, restriction, threshold=threshold)
            return lambda: ranked
        matrix = self._matrix()
        q = _unit(vector)
        return lambda: self._unrestricted(matrix, q, top_k, threshold)

    def _unrestricted(self, matrix: Snapshot, q: np.ndarray, top_k: int, threshold: float | None) -> Ranked:
        """The ``top_k`` of the whole matrix for ``q`` (unit length): from the collection's index when it
        has one, else by a scan. Reads memory only."""
        approximate = self._approximate(matrix, q, top_k, threshold)
        if approximate is not None:
            return approximate
        scores = matrix.vectors @ q
        order = top_indices(scores, top_k)
        if threshold is not None:
            order = order[scores[order] >= threshold]
        return Ranked(matrix.rowids[order], scores[order].astype(np.float64), "exact")

    def _approximate(self, matrix: Snapshot, q: np.ndarray, top_k: int, threshold: float | None) -> Ranked | None:
        """Top-k from the collection's index (an HNSW graph, or IVF lists above ``lists_min_rows``): its
        candidates and the rows it does not hold yet, ranked by their exact vectors; None when the collection
        has no usable index (the caller scans)."""
        ann = self._backend.ann
        n = len(matrix.rowids)
        if ann is None or n < ann.config.smallest():
            return None
        index = self._cache.graphs.get(self._row.key)
        count = max(top_k, ann.config.candidates)
        if index is None or index.identity != self._identity() or count * 4 > n:
            return None
        found = index.candidates(matrix, q, count, _GRAPH_WAIT, ann.config)
        if found is None:
            return None
        positions, high_water = found
        tail = int(np.searchsorted(matrix.rowids, high_water, side="right"))
        if tail < n:  # rows written since the index last caught up: ranked exactly
            positions = np.concatenate([positions, np.arange(tail, n)])
        scores = score_rows(matrix.vectors, positions, q)
        order = top_indices(scores, top_k)
        if threshold is not None:
            order = order[scores[order] >= threshold]
        return Ranked(matrix.rowids[positions[order]], scores[order].astype(np.float64), index.plan)


class SQLiteVectorStore(SQLStore, TenantRecords):
    """The embedded store bound to one tenant. Build it with ``SQLiteBackend.for_tenant``.

    The SQL core does collections, documents, records and hydration; this class adds the keyword
    index of its writes (analyzed text, statistics, postings) and its search port.
    """

    _backend: SQLiteBackend
    # Upserted records may join a document, so a document's chunks are counted, not read from its row.
    _document_chunks = ("(SELECT count(*) FROM chunks c WHERE c.tenant_id = d.tenant_id "
                        "AND c.document_id = d.id)")
    # The collection's keyword token total, and its highest chunk key, read with its row (the matrix cache
    # checks itself against it).
    _collection_extra = (", keyword_tokens, (SELECT coalesce(max(k.id), 0) FROM chunks k WHERE k.tenant_id = "
                         "collections.tenant_id AND k.collection_id = collections.id)")
    _reader = SQLiteReader

    # -- what the core asks of a backend -------------------------------------------------
    _render = staticmethod(fts5_document)  # ``chunks.terms``: each chunk's tokens joined by spaces

    @staticmethod
    def _count(conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, chunks: int, tokens: int, *,
               mutated: bool) -> None:
        """Keep the chunk and keyword token counters exact; ``mutated`` marks that rows were removed (for the
        matrix cache)."""
        conn.execute(
            "UPDATE collections SET chunk_count = chunk_count + ?, keyword_tokens = keyword_tokens + ?, "
            "mutation_seq = mutation_seq + ? WHERE tenant_id = ? AND id = ?",
            (chunks, tokens, 1 if mutated else 0, tenant_pk, collection_pk),
        )

    def _insert_chunks(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, rows: list[ChunkRow],
                       vectors: np.ndarray, keywords: KeywordBatch) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        dumps = json.dumps
        params = [
            (uid, tenant_pk, collection_pk, doc_pk, index, start, end, tokens, content,
             dumps(meta, ensure_ascii=False, default=str) if meta else "{}", vectors[i].tobytes(), terms,
             None if doc_pk is None else text_key(content))
            for i, ((uid, doc_pk, _version, index, start, end, tokens, content, meta), terms)
            in enumerate(zip(rows, keywords.rendered, strict=True))
        ]
        first = conn.execute("SELECT coalesce(max(id), 0) FROM chunks").fetchone()[0]
        conn.executemany(
            "INSERT INTO chunks (uid, tenant_id, collection_id, document_id, chunk_index, start_offset, "
            "end_offset, token_count, content, metadata, embedding, terms, text_key) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            params,
        )
        # AUTOINCREMENT under the write lock: the new rows are exactly the ids after ``first``, in order.
        new_ids = [r[0] for r in conn.execute(
            "SELECT id FROM chunks WHERE tenant_id = ? AND collection_id = ? AND id > ? ORDER BY id",
            (tenant_pk, collection_pk, first),
        )]
        found = self._backend.postings.add_columns(
            conn, (tenant_pk, collection_pk), np.asarray(new_ids, dtype=np.int64), keywords.sizes, keywords.terms,
            keywords.owner, keywords.term, keywords.tf)
        _upsert_df(conn, (tenant_pk, collection_pk), found)
        self._count(conn, tenant_pk, collection_pk, len(rows), keywords.tokens, mutated=False)

    def _delete_chunks(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, *,
                       document_pks: Sequence[int] | None = None, uids: Sequence[str] | None = None) -> int:
        d = self._d
        if document_pks is not None:  # document row ids are unique: the chunks_document index answers
            listed, values = d.any("document_id", document_pks)
            where, params = f"tenant_id = ? AND {listed}", (tenant_pk, *values)
        else:
            listed, values = d.any("uid", uids or [])
            where, params = f"tenant_id = ? AND collection_id = ? AND {listed}", (tenant_pk, collection_pk, *values)
        gone = conn.execute(f"SELECT id, terms FROM chunks WHERE {where}", params).fetchall()
        if not gone:
            return 0
        tokens = self._forget_keywords(conn, (tenant_pk, collection_pk), gone)
        removed = conn.execute(f"DELETE FROM chunks WHERE {where}", params).rowcount
        self._count(conn, tenant_pk, collection_pk, -removed, -tokens, mutated=True)
        return removed

    def _forget_keywords(self, conn: sqlite3.Connection, scope: tuple[int, int],
                         gone: Sequence[tuple[int, str]]) -> int:
        """Take chunks, given as (rowid, analyzed text), out of ``keyword_df`` and the postings; returns
        their keyword tokens."""
        counts: Counter[str] = Counter()
        tokens = 0
        for _, text in gone:
            split = text.split(" ") if text else []
            tokens += len(split)
            counts.update(term_counts(split).keys())
        _upsert_df(conn, scope, {term: -n for term, n in counts.items()})
        self._backend.postings.remove(conn, scope, (rowid for rowid, _ in gone))
        return tokens

    def _drop_collection(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int) -> None:
        scope = (tenant_pk, collection_pk)
        conn.execute("DELETE FROM keyword_df WHERE tenant_id = ? AND collection_id = ?", scope)
        conn.execute("DELETE FROM keyword_postings WHERE tenant_id = ? AND collection_id = ?", scope)
        conn.execute("DELETE FROM chunks WHERE tenant_id = ? AND collection_id = ?", scope)
        conn.execute("DELETE FROM documents WHERE tenant_id = ? AND collection_id = ?", scope)

    def _forget_collection(self, collection_pk: int) -> None:
        self._backend.matrices.drop(collection_pk)
        remove_files(self._backend.ann_folder, collection_pk)
