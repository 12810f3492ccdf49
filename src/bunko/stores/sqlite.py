"""The embedded store: one SQLite file (WAL) with exact cosine search in numpy.

Layout: ``tenants`` → ``collections`` → ``documents`` → ``chunks`` (content,
metadata, float32 vector blob), plus ``chunks_fts`` (FTS5 over analyzed terms,
rowid = chunk rowid). Every row below ``tenants`` carries ``tenant_id`` and every
statement filters by it.

Vector search keeps, per process, a normalised float32 matrix per collection.
The collection row has a ``mutation_seq`` that every update or delete bumps;
inserts only append rows with larger rowids (AUTOINCREMENT). A search reads
``(mutation_seq, max(rowid))``: an unchanged pair reuses the matrix, new rows are
appended, a changed ``mutation_seq`` reloads. So two processes can share the file
and each sees the other's writes on its next search.
"""

from __future__ import annotations

import json
import logging
import os
import re
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis import Analyzer, fts5_document, fts5_query, get_analyzer
from ..errors import (
    AnalyzerMismatchError,
    CollectionNotFoundError,
    ConfigError,
    DimensionMismatchError,
    DocumentNotFoundError,
    EmbedderMismatchError,
    VectorStoreError,
)
from ..filters import FilterLike, as_filter, compile_sqlite, parse_date
from ..types import (
    Collection,
    ConversationTurn,
    DocumentInfo,
    EmbedderInfo,
    IngestResult,
    SearchHit,
    UsageEvent,
    UsageTotal,
    VectorRecord,
    new_id,
)
from .base import (
    DocumentWrite,
    add_usage,
    check_analyzer,
    check_conversation_id,
    check_query_vector,
    check_turns,
    make_hit,
    utc,
)

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 3
# A chunk row (2 KiB float32 vector for 512-d + text + metadata) is about 3 KiB: a 4 KiB page
# holds one and wastes a quarter or more. With the largest page size rows pack densely and a
# bulk commit writes far fewer pages (ingest at 100k chunks, batched: 4 KiB 15.6k chunks/s,
# 16 KiB 19.5k, 64 KiB 20.6k); reads come from the OS cache either way.
_PAGE_SIZE = 65536
# Rows read per step when (re)loading a collection's vectors into memory.
_LOAD_BATCH = 4096
_NAME_RE = re.compile(r"^[\w][\w.\-]{0,99}$")
_MAX_TOP_K = 1000

# Ordered migrations: index i upgrades a database from version i to i + 1.
_MIGRATIONS: list[str] = [
    """
    CREATE TABLE tenants (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE TABLE collections (
        id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        embedding_provider TEXT NOT NULL,
        embedding_model TEXT NOT NULL,
        dimension INTEGER NOT NULL CHECK (dimension > 0),
        analyzer TEXT NOT NULL DEFAULT 'bigram',
        config TEXT NOT NULL DEFAULT '{}',
        document_count INTEGER NOT NULL DEFAULT 0,
        chunk_count INTEGER NOT NULL DEFAULT 0,
        mutation_seq INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (tenant_id, name)
    );
    CREATE TABLE documents (
        id INTEGER PRIMARY KEY,
        uid TEXT NOT NULL,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        source TEXT NOT NULL,
        content_hash TEXT NOT NULL DEFAULT '',
        metadata TEXT NOT NULL DEFAULT '{}',
        chunk_count INTEGER NOT NULL DEFAULT 0,
        version INTEGER NOT NULL DEFAULT 1,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (tenant_id, uid),
        UNIQUE (tenant_id, collection_id, source)
    );
    CREATE TABLE chunks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        uid TEXT NOT NULL,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        document_id INTEGER REFERENCES documents(id) ON DELETE CASCADE,
        chunk_index INTEGER NOT NULL DEFAULT 0,
        start_offset INTEGER NOT NULL DEFAULT 0,
        end_offset INTEGER NOT NULL DEFAULT 0,
        token_count INTEGER NOT NULL DEFAULT 0,
        content TEXT NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        embedding BLOB NOT NULL,
        UNIQUE (tenant_id, collection_id, uid)
    );
    CREATE INDEX chunks_scan ON chunks (tenant_id, collection_id, id);
    CREATE INDEX chunks_document ON chunks (document_id);
    CREATE VIRTUAL TABLE chunks_fts USING fts5 (terms, tokenize = 'unicode61 remove_diacritics 0');
    """,
    # 2: usage records (R13), search logs (R33) and conversation turns, like PostgreSQL's.
    """
    CREATE TABLE usage_records (
        id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        user_id TEXT,
        operation TEXT NOT NULL,
        provider TEXT,
        model TEXT,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        latency_ms REAL,
        items INTEGER NOT NULL DEFAULT 0,
        metadata TEXT NOT NULL DEFAULT '{}',
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE INDEX usage_records_tenant ON usage_records (tenant_id, created_at);
    CREATE TABLE search_logs (
        id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        user_id TEXT,
        query TEXT,
        result_count INTEGER NOT NULL,
        search_time_ms REAL NOT NULL,
        search_type TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE INDEX search_logs_tenant ON search_logs (tenant_id, created_at);
    CREATE TABLE conversation_turns (
        id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        conversation_id TEXT NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE INDEX conversation_turns_scope ON conversation_turns (tenant_id, conversation_id, id);
    """,
    # 3: the HTTP server's records (stores/service.py): API keys (hashed), rate-limit windows and upload jobs.
    """
    CREATE TABLE api_keys (
        id INTEGER PRIMARY KEY,
        key_hash TEXT NOT NULL UNIQUE,
        prefix TEXT NOT NULL,
        tenant TEXT NOT NULL,
        user_id TEXT,
        admin INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        revoked_at TEXT
    );
    CREATE INDEX api_keys_tenant ON api_keys (tenant);
    CREATE TABLE rate_windows (
        key_id INTEGER NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
        window_start INTEGER NOT NULL,
        hits INTEGER NOT NULL,
        PRIMARY KEY (key_id, window_start)
    );
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        uid TEXT NOT NULL,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        collection TEXT NOT NULL,
        filename TEXT NOT NULL,
        file_size INTEGER NOT NULL DEFAULT 0,
        mime_type TEXT NOT NULL DEFAULT '',
        user_id TEXT,
        status TEXT NOT NULL CHECK (status IN ('processing', 'completed', 'failed')),
        chunk_count INTEGER NOT NULL DEFAULT 0,
        processing_time_ms REAL,
        error_code TEXT,
        error TEXT,
        metadata TEXT NOT NULL DEFAULT '{}',
        lease_until REAL NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (tenant_id, uid)
    );
    CREATE INDEX jobs_user ON jobs (tenant_id, user_id);
    CREATE INDEX search_logs_user ON search_logs (tenant_id, user_id);
    CREATE INDEX usage_records_user ON usage_records (tenant_id, user_id);
    """,
]


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _check_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise VectorStoreError(
            f"invalid {kind} name {name!r}: use 1-100 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit"
        )
    return name


@dataclass(slots=True, frozen=True)
class _Snapshot:
    """A consistent view of a collection's vectors for one search."""

    rowids: np.ndarray  # int64 (n,), ascending
    doc_rowids: np.ndarray  # int64 (n,), -1 for chunks without a document
    vectors: np.ndarray  # float32 (n, d), rows L2-normalised


class _Matrix:
    """A collection's vectors held in memory as one normalised, growable matrix.

    Appends write past the end of the live rows (doubling the capacity when full),
    so a snapshot a search already holds never changes under it. Removing rows builds
    new arrays instead of compacting in place, for the same reason.
    """

    __slots__ = ("_docs", "_rowids", "_vectors", "dim", "high_water", "mutation_seq", "size")

    def __init__(self, dim: int, capacity: int = 0) -> None:
        self.dim = dim
        self.size = 0
        self.mutation_seq = -1
        self.high_water = 0
        self._rowids = np.empty(capacity, dtype=np.int64)
        self._docs = np.empty(capacity, dtype=np.int64)
        self._vectors = np.empty((capacity, dim), dtype=np.float32)

    def snapshot(self) -> _Snapshot:
        n = self.size
        return _Snapshot(self._rowids[:n], self._docs[:n], self._vectors[:n])

    def _reserve(self, extra: int) -> None:
        need = self.size + extra
        if need <= len(self._rowids):
            return
        capacity = max(need, 2 * len(self._rowids), 1024)
        for name in ("_rowids", "_docs", "_vectors"):
            old = getattr(self, name)
            new = np.empty((capacity, *old.shape[1:]), dtype=old.dtype)
            new[: self.size] = old[: self.size]
            setattr(self, name, new)

    def append(self, rows: list[tuple[int, int, bytes]]) -> None:
        """Append ``(rowid, doc_rowid, float32 blob)`` rows (ascending rowids), normalising them."""
        n = len(rows)
        if not n:
            return
        self._reserve(n)
        lo, hi = self.size, self.size + n
        self._rowids[lo:hi] = np.fromiter((r[0] for r in rows), dtype=np.int64, count=n)
        self._docs[lo:hi] = np.fromiter((r[1] for r in rows), dtype=np.int64, count=n)
        flat = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
        if flat.size != n * self.dim:
            raise VectorStoreError("stored vectors do not match the collection's dimension")
        block = self._vectors[lo:hi]
        block[:] = flat.reshape(n, self.dim)
        norms = np.sqrt(np.einsum("ij,ij->i", block, block))
        norms[norms == 0] = 1.0
        block /= norms[:, None]
        self.size = hi

    def keep_only(self, live_rowids: np.ndarray) -> None:
        """Drop rows whose rowid is not in ``live_rowids`` (into new arrays; snapshots stay valid)."""
        keep = np.isin(self._rowids[: self.size], live_rowids, assume_unique=True)
        self._rowids = self._rowids[: self.size][keep]
        self._docs = self._docs[: self.size][keep]
        self._vectors = self._vectors[: self.size][keep]
        self.size = len(self._rowids)


class SQLiteBackend:
    """An embedded store in one SQLite file; safe for several threads and processes."""

    scheme = "sqlite"

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self.url = f"sqlite:///{self.path}"
        if self.path != ":memory:":
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise VectorStoreError(f"cannot create the folder for {self.path}: {exc.strerror}") from exc
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._conn_lock = threading.Lock()
        self._cache: dict[int, _Matrix] = {}
        self._cache_lock = threading.Lock()
        self._closed = False
        self._migrate()

    # -- connections ---------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            return conn
        if self._closed:
            raise VectorStoreError("the store is closed")
        try:
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 30000")
            # Only takes effect on a new, empty file; see _PAGE_SIZE.
            conn.execute(f"PRAGMA page_size = {_PAGE_SIZE}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA cache_size = -65536")
            # Metadata filters compare ISO-8601 dates through the same parser as the Python evaluator.
            conn.create_function("bunko_date", 1, parse_date, deterministic=True)
        except sqlite3.Error as exc:
            raise VectorStoreError(f"cannot open the SQLite store {self.path}: {exc}") from exc
        self._local.conn = conn
        with self._conn_lock:
            self._connections.append(conn)
        return conn

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        try:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                conn.execute("COMMIT")
        except sqlite3.Error as exc:
            raise VectorStoreError(f"SQLite read failed: {exc}") from exc

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction; BEGIN IMMEDIATE takes the lock up front so it waits, not fails."""
        conn = self._connect()
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise VectorStoreError(f"SQLite store is busy or unwritable: {exc}") from exc
        try:
            yield conn
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        else:
            try:
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise VectorStoreError(f"SQLite commit failed: {exc}") from exc

    def _migrate(self) -> None:
        with self._write_translated() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise VectorStoreError(
                    f"{self.path} was written by a newer bunko (schema {version}, this one knows "
                    f"{SCHEMA_VERSION}); upgrade bunko"
                )
            for target in range(version, SCHEMA_VERSION):
                # executescript() would COMMIT our transaction first; run statement by statement instead.
                for statement in _MIGRATIONS[target].split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {target + 1}")

    @contextmanager
    def _write_translated(self) -> Iterator[sqlite3.Connection]:
        try:
            with self._write() as conn:
                yield conn
        except sqlite3.Error as exc:
            raise VectorStoreError(f"SQLite write failed: {exc}") from exc

    def for_tenant(self, tenant: str) -> SQLiteVectorStore:
        """A store bound to ``tenant``; the only way to reach data."""
        return SQLiteVectorStore(self, _check_name("tenant", tenant))

    def close(self) -> None:
        """Close every connection this backend opened and drop its caches."""
        self._closed = True
        with self._conn_lock:
            for conn in self._connections:
                try:
                    conn.close()
                except sqlite3.Error:  # pragma: no cover - closing is best effort
                    pass
            self._connections.clear()
        self._local = threading.local()
        with self._cache_lock:
            self._cache.clear()

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.path!r})"


class SQLiteVectorStore:
    """The embedded store bound to one tenant. Build it with ``SQLiteBackend.for_tenant``."""

    def __init__(self, backend: SQLiteBackend, tenant: str) -> None:
        self._backend = backend
        self._tenant = tenant

    @property
    def tenant(self) -> str:
        """The tenant this store is bound to (read-only)."""
        return self._tenant

    def __repr__(self) -> str:
        return f"SQLiteVectorStore(tenant={self._tenant!r}, path={self._backend.path!r})"

    # -- scope helpers: every query goes through these ----------------------------
    def _tenant_pk(self, conn: sqlite3.Connection, *, create: bool) -> int | None:
        row = conn.execute("SELECT id FROM tenants WHERE name = ?", (self._tenant,)).fetchone()
        if row is not None:
            return int(row[0])
        if not create:
            return None
        return int(conn.execute("INSERT INTO tenants (name) VALUES (?)", (self._tenant,)).lastrowid)

    def _collection_row(self, conn: sqlite3.Connection, name: str) -> tuple[int, int, sqlite3.Row | tuple]:
        """(tenant_pk, collection_pk, row) of a collection in this tenant, or CollectionNotFoundError."""
        tenant_pk = self._tenant_pk(conn, create=False)
        row = None
        if tenant_pk is not None:
            row = conn.execute(
                _COLLECTION_SELECT + " WHERE tenant_id = ? AND name = ?", (tenant_pk, name)
            ).fetchone()
        if row is None:
            raise CollectionNotFoundError(f"collection {name!r} does not exist in tenant {self._tenant!r}")
        return tenant_pk, int(row[0]), row  # type: ignore[return-value]

    @staticmethod
    def _collection_from_row(row: Any) -> Collection:
        return Collection(
            name=row[1],
            description=row[2],
            embedding_provider=row[3],
            embedding_model=row[4],
            dimension=int(row[5]),
            created_at=row[6],
            document_count=int(row[7]),
            chunk_count=int(row[8]),
            config=json.loads(row[9]),
            analyzer=row[10],
        )

    @staticmethod
    def _count(conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, documents: int, chunks: int,
               *, mutated: bool) -> None:
        """Keep the collection's counters exact; ``mutated`` marks that rows were removed or rewritten."""
        conn.execute(
            "UPDATE collections SET document_count = document_count + ?, chunk_count = chunk_count + ?, "
            "mutation_seq = mutation_seq + ? WHERE tenant_id = ? AND id = ?",
            (documents, chunks, 1 if mutated else 0, tenant_pk, collection_pk),
        )

    # -- collections ---------------------------------------------------------------
    def ensure_collection(self, name: str, embedder: EmbedderInfo, description: str = "",
                          config: dict[str, Any] | None = None, *, analyzer: str | None = None) -> Collection:
        """Return the collection, creating it for this embedder and analyzer if missing; refuse others."""
        _check_name("collection", name)
        analyzer_name = get_analyzer(analyzer).name  # an unknown name fails before anything is written
        with self._backend._write_translated() as conn:
            tenant_pk = self._tenant_pk(conn, create=True)
            row = conn.execute(_COLLECTION_SELECT + " WHERE tenant_id = ? AND name = ?", (tenant_pk, name)).fetchone()
            if row is None:
                conn.execute(
                    "INSERT INTO collections (tenant_id, name, description, embedding_provider, "
                    "embedding_model, dimension, analyzer, config) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (tenant_pk, name, description, embedder.provider, embedder.model, embedder.dimension,
                     analyzer_name, json.dumps(config or {}, ensure_ascii=False)),
                )
                row = conn.execute(
                    _COLLECTION_SELECT + " WHERE tenant_id = ? AND name = ?", (tenant_pk, name)
                ).fetchone()
            collection = self._collection_from_row(row)
        if collection.embedder != embedder:
            raise EmbedderMismatchError(
                f"collection {name!r} was built with {collection.embedding_provider}:"
                f"{collection.embedding_model} ({collection.dimension} dimensions); the embedder in use "
                f"is {embedder.provider}:{embedder.model} ({embedder.dimension} dimensions). Use the "
                "same embedder, or another collection"
            )
        check_analyzer(collection, analyzer)
        return collection

    def _analyzer(self, collection: str) -> Analyzer:
        """The analyzer a collection records (fixed at creation)."""
        return get_analyzer(self.get_collection(collection).analyzer)

    def get_collection(self, name: str) -> Collection:
        """The collection, or ``CollectionNotFoundError``."""
        with self._backend._read() as conn:
            _, _, row = self._collection_row(conn, name)
            return self._collection_from_row(row)

    def list_collections(self) -> list[Collection]:
        """This tenant's collections, by name."""
        with self._backend._read() as conn:
            tenant_pk = self._tenant_pk(conn, create=False)
            if tenant_pk is None:
                return []
            rows = conn.execute(_COLLECTION_SELECT + " WHERE tenant_id = ? ORDER BY name", (tenant_pk,)).fetchall()
            return [self._collection_from_row(row) for row in rows]

    def delete_collection(self, name: str) -> None:
        """Delete a collection with all its documents, chunks and vectors."""
        with self._backend._write_translated() as conn:
            tenant_pk, collection_pk, _ = self._collection_row(conn, name)
            conn.execute(
                "DELETE FROM chunks_fts WHERE rowid IN "
                "(SELECT id FROM chunks WHERE tenant_id = ? AND collection_id = ?)",
                (tenant_pk, collection_pk),
            )
            conn.execute("DELETE FROM chunks WHERE tenant_id = ? AND collection_id = ?", (tenant_pk, collection_pk))
            conn.execute("DELETE FROM documents WHERE tenant_id = ? AND collection_id = ?", (tenant_pk, collection_pk))
            conn.execute("DELETE FROM collections WHERE tenant_id = ? AND id = ?", (tenant_pk, collection_pk))
        self._backend_cache_drop(collection_pk)

    # -- documents ----------------------------------------------------------------
    def write_document(self, collection: str, document: DocumentWrite) -> IngestResult:
        """Store a document and its chunks atomically; replace an older one with the same source."""
        return self.write_documents(collection, [document])[0]

    def write_documents(self, collection: str, documents: Sequence[DocumentWrite]) -> list[IngestResult]:
        """Store several documents in one transaction (each replaces an older one with its source).

        One commit per batch instead of per document is what makes bulk ingest fast: every
        commit writes a new FTS5 segment and rewrites the same B-tree index pages.
        """
        started = time.perf_counter()
        # Analysis (possibly morphological, so slow) runs before the write lock is taken.
        analyzer = self._analyzer(collection)
        prepared = []
        for document in documents:
            vectors = np.asarray(document.vectors, dtype=np.float32)
            if vectors.ndim != 2 or vectors.shape[0] != len(document.chunks):
                raise VectorStoreError(
                    f"document {document.source!r}: {len(document.chunks)} chunks but vectors of shape "
                    f"{vectors.shape}"
                )
            prepared.append((document, vectors, [fts5_document(analyzer.index_tokens(c.content))
                                                 for c in document.chunks]))
        results: list[IngestResult] = []
        with self._backend._write_translated() as conn:
            tenant_pk, collection_pk, row = self._collection_row(conn, collection)
            _same_analyzer(row[10], analyzer, collection)
            for document, vectors, terms in prepared:
                if document.chunks:
                    self._check_dimension(int(row[5]), vectors.shape[1], collection)
                old = conn.execute(
                    "SELECT id, uid, content_hash, chunk_count, version FROM documents "
                    "WHERE tenant_id = ? AND collection_id = ? AND source = ?",
                    (tenant_pk, collection_pk, document.source),
                ).fetchone()
                if old is not None and document.content_hash and old[2] == document.content_hash:
                    results.append(IngestResult(old[1], document.source, int(old[3]), "unchanged", version=old[4]))
                    continue
                metadata = json.dumps(document.metadata, ensure_ascii=False, default=str)
                if old is None:
                    uid, version, status = document.id, 1, "created"
                    doc_pk = conn.execute(
                        "INSERT INTO documents (uid, tenant_id, collection_id, source, content_hash, metadata, "
                        "chunk_count) VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (uid, tenant_pk, collection_pk, document.source, document.content_hash, metadata,
                         len(document.chunks)),
                    ).lastrowid
                    self._count(conn, tenant_pk, collection_pk, 1, 0, mutated=False)
                else:
                    # A new version of the same document: same id, old chunks out, new chunks in,
                    # all inside this transaction.
                    doc_pk, uid, version, status = int(old[0]), old[1], int(old[4]) + 1, "replaced"
                    self._delete_document_chunks(conn, tenant_pk, collection_pk, [doc_pk])
                    conn.execute(
                        "UPDATE documents SET content_hash = ?, metadata = ?, chunk_count = ?, version = ?, "
                        "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE tenant_id = ? AND id = ?",
                        (document.content_hash, metadata, len(document.chunks), version, tenant_pk, doc_pk),
                    )
                self._insert_chunks(
                    conn, tenant_pk, collection_pk, doc_pk,
                    [(c.id, c.index, c.start, c.end, c.token_count, c.content, c.metadata) for c in document.chunks],
                    vectors, terms,
                )
                self._count(conn, tenant_pk, collection_pk, 0, len(document.chunks), mutated=False)
                results.append(IngestResult(uid, document.source, len(document.chunks), status, version=version))
        elapsed = (time.perf_counter() - started) * 1000
        for result in results:
            result.processing_time_ms = elapsed / max(1, len(results))
        return results

    def find_by_source(self, collection: str, source: str) -> DocumentInfo | None:
        """The document stored under ``source``, or None (also when the collection is missing)."""
        with self._backend._read() as conn:
            try:
                tenant_pk, collection_pk, _ = self._collection_row(conn, collection)
            except CollectionNotFoundError:
                return None
            row = conn.execute(
                _DOC_SELECT + " AND d.collection_id = ? AND d.source = ?",
                (tenant_pk, collection_pk, source),
            ).fetchone()
        return None if row is None else _doc_info(row)

    def list_documents(self, collection: str, limit: int | None = None, offset: int = 0) -> list[DocumentInfo]:
        """Documents of a collection, oldest first."""
        with self._backend._read() as conn:
            tenant_pk, collection_pk, _ = self._collection_row(conn, collection)
            rows = conn.execute(
                _DOC_SELECT + " AND d.collection_id = ? ORDER BY d.id LIMIT ? OFFSET ?",
                (tenant_pk, collection_pk, -1 if limit is None else int(limit), int(offset)),
            ).fetchall()
        return [_doc_info(r) for r in rows]

    def get_document(self, document_id: str, collection: str | None = None) -> DocumentInfo:
        """One document of this tenant, or ``DocumentNotFoundError``."""
        with self._backend._read() as conn:
            tenant_pk = self._tenant_pk(conn, create=False)
            sql = _DOC_SELECT + " AND d.uid = ?"
            params: list[Any] = [tenant_pk, document_id]
            if collection is not None:
                _, collection_pk, _ = self._collection_row(conn, collection)
                sql += " AND d.collection_id = ?"
                params.append(collection_pk)
            row = conn.execute(sql, params).fetchone() if tenant_pk is not None else None
        if row is None:
            raise DocumentNotFoundError(f"document {document_id!r} does not exist in tenant {self._tenant!r}")
        return _doc_info(row)

    def delete_documents(self, document_ids: Sequence[str], collection: str | None = None) -> int:
        """Delete documents (and their chunks); returns how many existed in this tenant."""
        ids = [str(i) for i in document_ids]
        if not ids:
            return 0
        with self._backend._write_translated() as conn:
            tenant_pk = self._tenant_pk(conn, create=False)
            if tenant_pk is None:
                return 0
            sql = (f"SELECT id, collection_id FROM documents WHERE tenant_id = ? "
                   f"AND uid IN ({','.join('?' * len(ids))})")
            params: list[Any] = [tenant_pk, *ids]
            if collection is not None:
                _, collection_pk, _ = self._collection_row(conn, collection)
                sql += " AND collection_id = ?"
                params.append(collection_pk)
            rows = conn.execute(sql, params).fetchall()
            by_collection: dict[int, list[int]] = {}
            for doc_pk, collection_pk in rows:
                by_collection.setdefault(int(collection_pk), []).append(int(doc_pk))
            for collection_pk, doc_pks in by_collection.items():
                self._delete_document_rows(conn, tenant_pk, collection_pk, doc_pks)
        return len(rows)

    def _delete_document_chunks(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int,
                                doc_pks: list[int]) -> None:
        """Delete the chunks and FTS rows of documents of one collection, and fix the counters."""
        chunks = 0
        for start in range(0, len(doc_pks), 500):
            batch = doc_pks[start : start + 500]
            marks = ",".join("?" * len(batch))
            conn.execute(
                f"DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE tenant_id = ? "
                f"AND document_id IN ({marks}))",
                (tenant_pk, *batch),
            )
            chunks += conn.execute(f"DELETE FROM chunks WHERE tenant_id = ? AND document_id IN ({marks})",
                                   (tenant_pk, *batch)).rowcount
        self._count(conn, tenant_pk, collection_pk, 0, -chunks, mutated=True)

    def _delete_document_rows(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int,
                              doc_pks: list[int]) -> None:
        """Delete documents of one collection with their chunks and FTS rows, and fix the counters."""
        self._delete_document_chunks(conn, tenant_pk, collection_pk, doc_pks)
        documents = 0
        for start in range(0, len(doc_pks), 500):
            batch = doc_pks[start : start + 500]
            marks = ",".join("?" * len(batch))
            documents += conn.execute(f"DELETE FROM documents WHERE tenant_id = ? AND id IN ({marks})",
                                      (tenant_pk, *batch)).rowcount
        self._count(conn, tenant_pk, collection_pk, -documents, 0, mutated=False)

    # -- chunks and vectors --------------------------------------------------------
    @staticmethod
    def _check_dimension(expected: int, got: int, collection: str) -> None:
        if expected != got:
            raise DimensionMismatchError(
                f"collection {collection!r} holds {expected}-dimensional vectors; got {got} dimensions"
            )

    def _insert_chunks(
        self,
        conn: sqlite3.Connection,
        tenant_pk: int,
        collection_pk: int,
        doc_pk: int | None,
        rows: list[tuple[str, int, int, int, int, str, dict[str, Any]]],
        vectors: np.ndarray,
        terms: list[str],
    ) -> None:
        if not np.all(np.isfinite(vectors)):
            raise VectorStoreError("vectors contain NaN or infinite values")
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        dumps = json.dumps
        params = [
            (uid, tenant_pk, collection_pk, doc_pk, index, start, end, tokens, content,
             dumps(meta, ensure_ascii=False, default=str) if meta else "{}", vectors[i].tobytes())
            for i, (uid, index, start, end, tokens, content, meta) in enumerate(rows)
        ]
        first = conn.execute("SELECT coalesce(max(id), 0) FROM chunks").fetchone()[0]
        conn.executemany(
            "INSERT INTO chunks (uid, tenant_id, collection_id, document_id, chunk_index, start_offset, "
            "end_offset, token_count, content, metadata, embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            params,
        )
        # AUTOINCREMENT under the write lock: the new rows are exactly the ids after ``first``.
        new_ids = [r[0] for r in conn.execute(
            "SELECT id FROM chunks WHERE tenant_id = ? AND collection_id = ? AND id > ? ORDER BY id",
            (tenant_pk, collection_pk, first),
        )]
        conn.executemany("INSERT INTO chunks_fts (rowid, terms) VALUES (?, ?)", zip(new_ids, terms, strict=True))

    def upsert(self, collection: str, records: Sequence[VectorRecord]) -> list[str]:
        """Insert or update records that carry vectors; ids are generated when missing (R14)."""
        if not records:
            return []
        for record in records:
            if record.vector is None:
                raise VectorStoreError("upsert needs a vector on every record; embed the content first")
        vectors = np.asarray([r.vector for r in records], dtype=np.float32)
        ids = [r.id or new_id() for r in records]
        if len(set(ids)) != len(ids):
            raise VectorStoreError("upsert got the same id twice in one call")
        analyzer = self._analyzer(collection)
        terms = [fts5_document(analyzer.index_tokens(r.content)) for r in records]
        with self._backend._write_translated() as conn:
            tenant_pk, collection_pk, row = self._collection_row(conn, collection)
            _same_analyzer(row[10], analyzer, collection)
            self._check_dimension(int(row[5]), vectors.shape[1] if vectors.ndim == 2 else -1, collection)
            doc_pks: dict[str, int] = {}
            for record in records:
                if record.document_id and record.document_id not in doc_pks:
                    found = conn.execute(
                        "SELECT id FROM documents WHERE tenant_id = ? AND collection_id = ? AND uid = ?",
                        (tenant_pk, collection_pk, record.document_id),
                    ).fetchone()
                    if found is None:
                        raise DocumentNotFoundError(
                            f"document {record.document_id!r} does not exist in collection {collection!r}"
                        )
                    doc_pks[record.document_id] = int(found[0])
            existing = self._existing_chunk_ids(conn, tenant_pk, collection_pk, ids)
            self._delete_chunk_rows(conn, tenant_pk, collection_pk, list(existing.values()))
            # Insert grouped by document so each group shares a document rowid.
            by_doc: dict[int | None, list[int]] = {}
            for i, record in enumerate(records):
                by_doc.setdefault(doc_pks.get(record.document_id or ""), []).append(i)
            for doc_pk, positions in by_doc.items():
                self._insert_chunks(
                    conn, tenant_pk, collection_pk, doc_pk,
                    [(ids[i], int(records[i].metadata.get("chunk_index", 0)), 0, len(records[i].content), 0,
                      records[i].content, records[i].metadata) for i in positions],
                    vectors[positions],
                    [terms[i] for i in positions],
                )
            self._count(conn, tenant_pk, collection_pk, 0, len(records), mutated=False)
        return ids

    def _existing_chunk_ids(
        self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, uids: Sequence[str]
    ) -> dict[str, int]:
        found: dict[str, int] = {}
        uids = list(uids)
        for start in range(0, len(uids), 500):
            batch = uids[start : start + 500]
            for uid, rowid in conn.execute(
                f"SELECT uid, id FROM chunks WHERE tenant_id = ? AND collection_id = ? "
                f"AND uid IN ({','.join('?' * len(batch))})",
                (tenant_pk, collection_pk, *batch),
            ):
                found[uid] = int(rowid)
        return found

    def delete(self, collection: str, ids: Sequence[str]) -> int:
        """Delete chunks by id; returns how many existed in this tenant's collection."""
        if not ids:
            return 0
        with self._backend._write_translated() as conn:
            tenant_pk, collection_pk, _ = self._collection_row(conn, collection)
            existing = self._existing_chunk_ids(conn, tenant_pk, collection_pk, [str(i) for i in ids])
            self._delete_chunk_rows(conn, tenant_pk, collection_pk, list(existing.values()))
        return len(existing)

    def _delete_chunk_rows(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int,
                           rowids: list[int]) -> None:
        deleted = 0
        for start in range(0, len(rowids), 500):
            batch = rowids[start : start + 500]
            marks = ",".join("?" * len(batch))
            conn.execute(f"DELETE FROM chunks_fts WHERE rowid IN ({marks})", batch)
            deleted += conn.execute(f"DELETE FROM chunks WHERE tenant_id = ? AND collection_id = ? AND id IN ({marks})",
                                    (tenant_pk, collection_pk, *batch)).rowcount
        if deleted:
            self._count(conn, tenant_pk, collection_pk, 0, -deleted, mutated=True)

    def chunk_vectors(self, collection: str, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored vectors of these chunks of this tenant's collection (unknown ids are left out)."""
        if not chunk_ids:
            return {}
        with self._backend._read() as conn:
            tenant_pk, collection_pk, _ = self._collection_row(conn, collection)
            out: dict[str, np.ndarray] = {}
            ids = [str(i) for i in chunk_ids]
            for start in range(0, len(ids), 500):
                batch = ids[start : start + 500]
                marks = ",".join("?" * len(batch))
                for uid, blob in conn.execute(
                    f"SELECT uid, embedding FROM chunks WHERE tenant_id = ? AND collection_id = ? AND uid IN ({marks})",
                    (tenant_pk, collection_pk, *batch),
                ):
                    out[uid] = np.frombuffer(blob, dtype=np.float32)
            return out

    def count(self, collection: str, *, filter: FilterLike = None) -> int:
        """Number of chunks in a collection (that pass ``filter``, if given)."""
        flt = as_filter(filter)
        with self._backend._read() as conn:
            tenant_pk, collection_pk, row = self._collection_row(conn, collection)
            if flt is None:
                return int(row[8])
            where, params = compile_sqlite(flt)
            return int(conn.execute(
                "SELECT count(*) FROM chunks c LEFT JOIN documents d ON d.id = c.document_id AND d.tenant_id = "
                f"c.tenant_id WHERE c.tenant_id = ? AND c.collection_id = ? AND {where}",
                (tenant_pk, collection_pk, *params),
            ).fetchone()[0])

    def _filtered_rowids(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, where: str,
                         params: list[Any]) -> np.ndarray:
        """Rowids of this collection's chunks that pass a compiled filter."""
        return np.fromiter((r[0] for r in conn.execute(
            "SELECT c.id FROM chunks c LEFT JOIN documents d ON d.id = c.document_id AND d.tenant_id = c.tenant_id "
            f"WHERE c.tenant_id = ? AND c.collection_id = ? AND {where}",
            (tenant_pk, collection_pk, *params),
        )), dtype=np.int64)

    # -- search --------------------------------------------------------------------
    def _backend_cache_drop(self, collection_pk: int) -> None:
        with self._backend._cache_lock:
            self._backend._cache.pop(collection_pk, None)

    def _matrix(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, dim: int) -> _Snapshot:
        """The collection's vectors, refreshed from the file only as far as it changed.

        Inserts only add rows above the cached high-water rowid, so they are appended.
        Updates and deletes bump ``mutation_seq``; then the cache keeps the rows that are
        still live (one index-only scan of rowids) and appends the new ones, instead of
        re-reading every vector.
        """
        seq, high = conn.execute(
            "SELECT mutation_seq, (SELECT coalesce(max(id), 0) FROM chunks WHERE tenant_id = ? "
            "AND collection_id = ?) FROM collections WHERE tenant_id = ? AND id = ?",
            (tenant_pk, collection_pk, tenant_pk, collection_pk),
        ).fetchone()
        cache = self._backend._cache
        with self._backend._cache_lock:
            matrix = cache.get(collection_pk)
            if matrix is not None and matrix.dim != dim:
                matrix = None
            if matrix is not None and matrix.mutation_seq == seq and matrix.high_water == high:
                return matrix.snapshot()
            if matrix is None:
                matrix = _Matrix(dim, capacity=int(conn.execute(
                    "SELECT chunk_count FROM collections WHERE tenant_id = ? AND id = ?",
                    (tenant_pk, collection_pk)).fetchone()[0]))
            elif matrix.mutation_seq != seq:
                live = np.fromiter((r[0] for r in conn.execute(
                    "SELECT id FROM chunks WHERE tenant_id = ? AND collection_id = ? AND id <= ?",
                    (tenant_pk, collection_pk, matrix.high_water))), dtype=np.int64)
                matrix.keep_only(live)
            cursor = conn.execute(
                "SELECT id, coalesce(document_id, -1), embedding FROM chunks "
                "WHERE tenant_id = ? AND collection_id = ? AND id > ? AND id <= ? ORDER BY id",
                (tenant_pk, collection_pk, matrix.high_water, high),
            )
            while rows := cursor.fetchmany(_LOAD_BATCH):
                matrix.append(rows)
            matrix.mutation_seq, matrix.high_water = int(seq), int(high)
            cache[collection_pk] = matrix
            return matrix.snapshot()

    def _document_pks(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int,
                      document_ids: Sequence[str]) -> np.ndarray:
        uids = [str(d) for d in document_ids]
        pks: list[int] = []
        for start in range(0, len(uids), 500):
            batch = uids[start : start + 500]
            pks.extend(r[0] for r in conn.execute(
                f"SELECT id FROM documents WHERE tenant_id = ? AND collection_id = ? "
                f"AND uid IN ({','.join('?' * len(batch))})",
                (tenant_pk, collection_pk, *batch),
            ))
        return np.asarray(pks, dtype=np.int64)

    def query(
        self,
        collection: str,
        vector: Sequence[float],
        top_k: int = 5,
        *,
        threshold: float | None = None,
        document_ids: Sequence[str] | None = None,
        include_content: bool = True,
        filter: FilterLike = None,
    ) -> list[SearchHit]:
        """Exact top-k by cosine similarity, best first; restricted to ``document_ids`` and ``filter`` if given.

        The restriction masks the matrix before ranking, so k hits come back whenever k chunks match.
        """
        top_k = _check_top_k(top_k)
        q = check_query_vector(vector)
        flt = as_filter(filter)
        compiled = compile_sqlite(flt) if flt is not None else None
        for _attempt in range(3):
            with self._backend._read() as conn:
                tenant_pk, collection_pk, row = self._collection_row(conn, collection)
                self._check_dimension(int(row[5]), q.shape[0], collection)
                matrix = self._matrix(conn, tenant_pk, collection_pk, int(row[5]))
                norm = float(np.linalg.norm(q))
                qn = q / norm if norm > 0 else q
                mask = None
                if document_ids is not None:
                    wanted = self._document_pks(conn, tenant_pk, collection_pk, document_ids)
                    mask = np.isin(matrix.doc_rowids, wanted)
                if compiled is not None:
                    allowed = self._filtered_rowids(conn, tenant_pk, collection_pk, *compiled)
                    passed = np.isin(matrix.rowids, allowed)
                    mask = passed if mask is None else mask & passed
                if mask is not None:
                    positions = np.flatnonzero(mask)
                    scores = matrix.vectors[positions] @ qn
                else:
                    positions = None
                    scores = matrix.vectors @ qn
                order = _top_indices(scores, top_k)
                if threshold is not None:
                    order = order[scores[order] >= threshold]
                picked = order if positions is None else positions[order]
                rowids = matrix.rowids[picked]
                hits = self._fetch_hits(conn, tenant_pk, collection_pk, rowids, scores[order], include_content)
            if len(hits) == len(rowids):
                return hits
            # A concurrent delete removed rows after our snapshot of the matrix: reload and retry.
            self._backend_cache_drop(collection_pk)
        return hits

    def _fetch_hits(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, rowids: np.ndarray,
                    scores: np.ndarray, include_content: bool) -> list[SearchHit]:
        if len(rowids) == 0:
            return []
        ids = [int(r) for r in rowids]
        rows = conn.execute(
            "SELECT c.id, c.uid, coalesce(d.uid, ''), coalesce(d.source, ''), c.content, c.chunk_index, "
            "c.metadata, coalesce(d.metadata, '{}'), c.start_offset, c.end_offset, c.token_count, d.chunk_count "
            "FROM chunks c LEFT JOIN documents d ON d.id = c.document_id AND d.tenant_id = c.tenant_id "
            f"WHERE c.tenant_id = ? AND c.collection_id = ? AND c.id IN ({','.join('?' * len(ids))})",
            (tenant_pk, collection_pk, *ids),
        ).fetchall()
        by_id = {r[0]: r for r in rows}
        hits = []
        for rowid, score in zip(ids, scores, strict=True):
            r = by_id.get(rowid)
            if r is None:
                continue
            hits.append(make_hit(r, float(score), json.loads(r[7]), json.loads(r[6]), include_content))
        return hits

    def keyword_search(
        self,
        collection: str,
        query: str,
        top_k: int = 5,
        *,
        document_ids: Sequence[str] | None = None,
        filter: FilterLike = None,
    ) -> list[SearchHit]:
        """Top-k by BM25 over the analyzed text, best first (score = -bm25, larger is better).

        ``document_ids`` and ``filter`` restrict the matches before they are ranked.
        """
        top_k = _check_top_k(top_k)
        flt = as_filter(filter)
        with self._backend._read() as conn:
            tenant_pk, collection_pk, row = self._collection_row(conn, collection)
            # The query is analyzed as the collection's chunks were; every phrase is quoted.
            match = fts5_query(get_analyzer(row[10]).query_phrases(query))
            if match is None:
                return []
            # CROSS JOIN fixes the order (FTS first) and INDEXED BY answers the tenant and collection
            # check from the index alone, without reading each matching chunk row.
            sql = ("SELECT c.id, -bm25(chunks_fts) AS score FROM chunks_fts CROSS JOIN chunks c INDEXED BY chunks_scan "
                   "ON c.tenant_id = ? AND c.collection_id = ? AND c.id = chunks_fts.rowid")
            params: list[Any] = [tenant_pk, collection_pk]
            if flt is not None:
                sql += " LEFT JOIN documents d ON d.id = c.document_id AND d.tenant_id = c.tenant_id"
            sql += " WHERE chunks_fts MATCH ?"
            params.append(match)
            if document_ids is not None:
                wanted = [int(x) for x in self._document_pks(conn, tenant_pk, collection_pk, document_ids)]
                if not wanted:
                    return []
                sql += f" AND c.document_id IN ({','.join('?' * len(wanted))})"
                params.extend(wanted)
            if flt is not None:
                where, where_params = compile_sqlite(flt)
                sql += f" AND {where}"
                params.extend(where_params)
            sql += " ORDER BY score DESC, c.id LIMIT ?"
            params.append(top_k)
            try:
                rows = conn.execute(sql, params).fetchall()
            except sqlite3.OperationalError as exc:
                raise VectorStoreError(f"keyword search failed: {exc}") from exc
            rowids = np.asarray([r[0] for r in rows], dtype=np.int64)
            scores = np.asarray([r[1] for r in rows], dtype=np.float64)
            return self._fetch_hits(conn, tenant_pk, collection_pk, rowids, scores, True)


    # -- usage records, search logs and conversations --------------------------------------
    def record_usage(self, events: Sequence[UsageEvent], *, user_id: str | None = None) -> None:
        """Store metered operations (embedding, llm, search, upsert, ...) for this tenant (and user, if given)."""
        items = list(events)
        if not items:
            return
        with self._backend._write_translated() as conn:
            tenant_pk = self._tenant_pk(conn, create=True)
            conn.executemany(
                "INSERT INTO usage_records (tenant_id, user_id, operation, provider, model, input_tokens, "
                "output_tokens, latency_ms, items, metadata) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(tenant_pk, user_id, e.operation, e.provider, e.model, int(e.input_tokens), int(e.output_tokens),
                  float(e.latency_ms), int(e.items), json.dumps(e.metadata, ensure_ascii=False, default=str))
                 for e in items],
            )

    def usage_summary(self, since: datetime | None = None) -> list[UsageTotal]:
        """This tenant's usage grouped by operation, provider and model (since ``since`` if given)."""
        with self._backend._read() as conn:
            tenant_pk = self._tenant_pk(conn, create=False)
            if tenant_pk is None:
                return []
            where, params = "tenant_id = ?", [tenant_pk]
            if since is not None:
                where += " AND created_at >= ?"
                params.append(utc(since).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z")
            rows = conn.execute(
                "SELECT operation, provider, model, count(*), sum(input_tokens), sum(output_tokens), sum(items), "
                f"sum(latency_ms) FROM usage_records WHERE {where} GROUP BY operation, provider, model "
                "ORDER BY operation, provider, model",
                params,
            ).fetchall()
        totals: dict[tuple[str, str, str], UsageTotal] = {}
        for row in rows:
            add_usage(totals, row)
        return list(totals.values())

    def log_search(self, query: str | None, result_count: int, search_time_ms: float, search_type: str, *,
                   user_id: str | None = None) -> None:
        """Record one search (``query`` None when search logs are anonymised; ``user_id`` who searched)."""
        with self._backend._write_translated() as conn:
            tenant_pk = self._tenant_pk(conn, create=True)
            conn.execute(
                "INSERT INTO search_logs (tenant_id, user_id, query, result_count, search_time_ms, search_type) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (tenant_pk, user_id, query, int(result_count), float(search_time_ms), search_type),
            )

    def search_log(self, limit: int = 100) -> list[dict[str, Any]]:
        """This tenant's latest searches, newest first."""
        with self._backend._read() as conn:
            tenant_pk = self._tenant_pk(conn, create=False)
            if tenant_pk is None:
                return []
            rows = conn.execute(
                "SELECT query, result_count, search_time_ms, search_type, created_at FROM search_logs "
                "WHERE tenant_id = ? ORDER BY id DESC LIMIT ?",
                (tenant_pk, int(limit)),
            ).fetchall()
        return [{"query": r[0], "result_count": r[1], "search_time_ms": r[2], "search_type": r[3],
                 "created_at": r[4]} for r in rows]

    def append_turns(self, conversation_id: str, turns: Sequence[ConversationTurn]) -> None:
        """Append turns to one of this tenant's conversations (created on first use)."""
        check_conversation_id(conversation_id)
        items = check_turns(turns)
        with self._backend._write_translated() as conn:
            tenant_pk = self._tenant_pk(conn, create=True)
            conn.executemany(
                "INSERT INTO conversation_turns (tenant_id, conversation_id, role, content, metadata) "
                "VALUES (?, ?, ?, ?, ?)",
                [(tenant_pk, conversation_id, t.role, t.content, json.dumps(t.metadata, ensure_ascii=False,
                                                                              default=str)) for t in items],
            )

    def conversation(self, conversation_id: str, limit: int | None = None) -> list[ConversationTurn]:
        """The last ``limit`` turns (all if None) of a conversation, oldest first; [] if it does not exist."""
        check_conversation_id(conversation_id)
        with self._backend._read() as conn:
            tenant_pk = self._tenant_pk(conn, create=False)
            if tenant_pk is None:
                return []
            rows = conn.execute(
                "SELECT role, content, metadata, created_at FROM conversation_turns "
                "WHERE tenant_id = ? AND conversation_id = ? ORDER BY id DESC LIMIT ?",
                (tenant_pk, conversation_id, -1 if limit is None else int(limit)),
            ).fetchall()
        return [ConversationTurn(r[0], r[1], json.loads(r[2]), r[3]) for r in reversed(rows)]

    def delete_conversation(self, conversation_id: str) -> int:
        """Delete a conversation; returns how many turns it had."""
        check_conversation_id(conversation_id)
        with self._backend._write_translated() as conn:
            tenant_pk = self._tenant_pk(conn, create=False)
            if tenant_pk is None:
                return 0
            return conn.execute(
                "DELETE FROM conversation_turns WHERE tenant_id = ? AND conversation_id = ?",
                (tenant_pk, conversation_id),
            ).rowcount


_COLLECTION_SELECT = (
    "SELECT id, name, description, embedding_provider, embedding_model, dimension, created_at, "
    "document_count, chunk_count, config, analyzer FROM collections"
)


def _same_analyzer(recorded: str, analyzer: Analyzer, collection: str) -> None:
    if recorded != analyzer.name:  # the collection was dropped and re-created while we analyzed
        raise AnalyzerMismatchError(f"collection {collection!r} now uses the {recorded!r} analyzer; write again")

_DOC_SELECT = (
    "SELECT d.uid, d.source, (SELECT count(*) FROM chunks c WHERE c.tenant_id = d.tenant_id "
    "AND c.document_id = d.id), d.metadata, d.content_hash, d.created_at, d.version FROM documents d "
    "WHERE d.tenant_id = ?"
)


def _doc_info(row: Any) -> DocumentInfo:
    return DocumentInfo(row[0], row[1], int(row[2]), json.loads(row[3]), row[4], row[5], int(row[6]))


def _check_top_k(top_k: int) -> int:
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= _MAX_TOP_K:
        raise VectorStoreError(f"top_k must be an integer from 1 to {_MAX_TOP_K}; got {top_k!r}")
    return top_k


def _top_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores, best first (ties by position, so results are stable)."""
    n = scores.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if k < n:
        part = np.argpartition(scores, n - k)[n - k :]
    else:
        part = np.arange(n)
    return part[np.lexsort((part, -scores[part]))]


def open_sqlite(url: str) -> SQLiteBackend:
    """Open a ``sqlite:///path`` URL (or a bare path) as an embedded backend."""
    if url.startswith("sqlite:///"):
        path = url[len("sqlite:///"):]
    elif url.startswith("sqlite://"):
        path = url[len("sqlite://"):]
    else:
        path = url
    if not path:
        raise ConfigError(f"no file path in {url!r}; write sqlite:///path/to/bunko.db")
    if path != ":memory:":
        path = str(Path(path).expanduser())
    return SQLiteBackend(path)
