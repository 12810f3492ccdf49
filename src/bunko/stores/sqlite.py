"""The embedded store: one SQLite file (WAL) with exact cosine search in numpy.

Layout: ``tenants`` → ``collections`` → ``documents`` → ``chunks`` (content,
metadata, float32 vector blob), plus one FTS5 table per collection,
``chunks_fts_<collection rowid>`` (analyzed terms, rowid = chunk rowid), so BM25's
document counts and average length are the collection's own: one tenant's data never
moves another tenant's scores; ``keyword_df`` holds each collection's document frequencies of
tokens and CJK bigrams and ``keyword_postings`` the chunks that hold them, so keyword search scores
only the rows of its rarer phrases, in numpy, exactly as FTS5's ``bm25()`` would (see
``_bm25_postings``; ``_bm25_pruned`` with a filter). Every row below ``tenants`` carries
``tenant_id`` and every statement filters by it.

Vector search keeps, per process, a normalised float32 matrix per collection.
The collection row has a ``mutation_seq`` that every update or delete bumps;
inserts only append rows with larger rowids (AUTOINCREMENT). A search reads
``(mutation_seq, max(rowid))``: an unchanged pair reuses the matrix, new rows are
appended, a changed ``mutation_seq`` reloads. So two processes can share the file
and each sees the other's writes on its next search.

Collections, documents, records and the server's records are the SQL core's
(:mod:`bunko.stores.sql`); this module adds the connections and transactions, the
migrations, the chunk insert with its FTS5 rows, and the two searches.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..analysis import Analyzer, fts5_document, fts5_query, get_analyzer
from ..errors import ConfigError, VectorStoreError
from ..filters import Filter, FilterLike, as_filter, compile_sqlite, parse_date
from ..types import SearchHit
from .base import check_query_vector
from .sql import ChunkRow, Dialect, SQLBackend, SQLStore, check_dimension, check_name, check_top_k
from .sql.columns import Column, Misaligned, filter_mask
from .sql.postings import K1, KEYWORD_CANDIDATES, B, Counted, PostingsTable, bm25_idf, phrase_term, term_counts

logger = logging.getLogger(__name__)

# A chunk row (2 KiB float32 vector for 512-d + text + metadata) is about 3 KiB: a 4 KiB page
# holds one and wastes a quarter or more. With the largest page size rows pack densely and a
# bulk commit writes far fewer pages (ingest at 100k chunks, batched: 4 KiB 15.6k chunks/s,
# 16 KiB 19.5k, 64 KiB 20.6k); reads come from the OS cache either way.
_PAGE_SIZE = 65536
# Rows read per step when (re)loading a collection's vectors into memory.
_LOAD_BATCH = 4096

# Lists longer than this travel as one JSON parameter (SQLite allows 32,766 parameters); shorter ones
# as literal marks, which let the planner look rows up by their keys.
_MAX_MARKS = 10_000


def _any(column: str, values: list[Any]) -> tuple[str, list[Any]]:
    if len(values) <= _MAX_MARKS:
        return f"{column} IN ({', '.join('?' * len(values))})", values
    return f"{column} IN (SELECT value FROM json_each(?))", [json.dumps(values)]


SQLITE = Dialect(
    name="sqlite",
    mark="?",
    now="strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
    any_list=_any,
    time_in=lambda moment: moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
    vector_out=lambda blob: np.frombuffer(blob, dtype=np.float32),
    compile_filter=compile_sqlite,
    no_limit=-1,
)



def fts_table(collection_pk: int) -> str:
    """The name of a collection's FTS5 table (the collection's rowid is an integer: safe in SQL text)."""
    return f"chunks_fts_{int(collection_pk)}"


def create_fts(conn: sqlite3.Connection, collection_pk: int) -> None:
    """Create a collection's FTS5 table if it does not exist yet."""
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts_table(collection_pk)} USING fts5 "
                 "(terms, tokenize = 'unicode61 remove_diacritics 0')")


def _m007_fts_per_collection(conn: sqlite3.Connection) -> None:
    """Move every collection's rows out of the shared ``chunks_fts`` into its own FTS5 table."""
    for (collection_pk,) in conn.execute("SELECT id FROM collections").fetchall():
        create_fts(conn, collection_pk)
        conn.execute(f"INSERT INTO {fts_table(collection_pk)} (rowid, terms) SELECT f.rowid, f.terms "
                     "FROM chunks_fts f JOIN chunks c ON c.id = f.rowid WHERE c.collection_id = ?", (collection_pk,))
    conn.execute("DROP TABLE chunks_fts")


def _counted(rows: Iterable[tuple[int, str]]) -> list[Counted]:
    """Chunks given as (rowid, stored FTS5 text) as the postings take them: (rowid, term counts, tokens)."""
    out: list[Counted] = []
    for rowid, text in rows:
        tokens = text.split(" ") if text else []
        out.append((rowid, term_counts(tokens), len(tokens)))
    return out


def _add_df(conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, stored: Iterable[str], sign: int) -> None:
    """Add (``sign`` 1) or remove (-1) the statistics terms of chunks, given their stored FTS5 text."""
    counts: Counter[str] = Counter()
    for text in stored:
        counts.update(term_counts(text.split(" ") if text else []).keys())
    _upsert_df(conn, (tenant_pk, collection_pk), {term: sign * n for term, n in counts.items()})


def _upsert_df(conn: sqlite3.Connection, scope: tuple[int, int], counts: dict[str, int]) -> None:
    if counts:
        conn.executemany(
            "INSERT INTO keyword_df (tenant_id, collection_id, term, df) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (tenant_id, collection_id, term) DO UPDATE SET df = df + excluded.df",
            [(*scope, term, n) for term, n in sorted(counts.items())])


def _m009_keyword_df(conn: sqlite3.Connection) -> None:
    """Keyword statistics per collection: how many chunks hold each term (see ``term_counts``)."""
    conn.execute("""CREATE TABLE keyword_df (
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        term TEXT NOT NULL,
        df INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, collection_id, term)
    ) WITHOUT ROWID""")
    for tenant_pk, collection_pk in conn.execute("SELECT tenant_id, id FROM collections").fetchall():
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (fts_table(collection_pk),)).fetchone() is not None:
            cursor = conn.execute(f"SELECT c0 FROM {fts_table(collection_pk)}_content")
            while rows := cursor.fetchmany(4096):
                _add_df(conn, tenant_pk, collection_pk, (r[0] for r in rows), 1)


# -- keyword postings (the table and its upkeep: sql/postings.py) ----------------------------------
POSTINGS = PostingsTable(SQLITE)


def _add_postings(conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, rows: list[tuple[int, str]], *,
                  count: bool = True) -> None:
    """Index new chunks, given as (rowid, stored FTS5 text), as a new segment, and with ``count``
    count their terms in ``keyword_df``."""
    found = POSTINGS.add(conn, (tenant_pk, collection_pk), _counted(rows))
    if count:
        _upsert_df(conn, (tenant_pk, collection_pk), found)


def _remove_postings(conn: sqlite3.Connection, tenant_pk: int, collection_pk: int,
                     rows: list[tuple[int, str]]) -> None:
    """Take chunks, given as (rowid, stored FTS5 text), out of ``keyword_df`` and the postings."""
    if not rows:
        return
    _add_df(conn, tenant_pk, collection_pk, (text for _, text in rows), -1)
    POSTINGS.remove(conn, (tenant_pk, collection_pk), (rowid for rowid, _ in rows))


def _m010_keyword_postings(conn: sqlite3.Connection) -> None:
    """Postings per collection in segments (keyword search scores them in numpy), filled from every
    collection's FTS5 text."""
    conn.execute("""CREATE TABLE keyword_postings (
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        segment INTEGER NOT NULL,
        term TEXT NOT NULL,
        entries BLOB NOT NULL,
        PRIMARY KEY (tenant_id, collection_id, segment, term)
    ) WITHOUT ROWID""")
    for tenant_pk, collection_pk in conn.execute("SELECT tenant_id, id FROM collections").fetchall():
        if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (fts_table(collection_pk),)).fetchone() is None:
            continue
        cursor = conn.execute(f"SELECT id, c0 FROM {fts_table(collection_pk)}_content ORDER BY id")
        while rows := cursor.fetchmany(8192):
            _add_postings(conn, tenant_pk, collection_pk, rows, count=False)  # keyword_df has the counts


Migration = str | Callable[[sqlite3.Connection], None]

# Ordered migrations: index i upgrades a database from version i to i + 1; a migration is a SQL
# script or a function of the connection (for steps that name tables per collection).
MIGRATIONS: list[Migration] = [
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
    # agent memories (bunko.memory, stores/sql/memory.py): named memory stores per tenant, and
    # memories per user inside them (normalised float32 vectors, the analyzer's tokens).
    """
    CREATE TABLE memory_stores (
        id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        embedding_provider TEXT NOT NULL,
        embedding_model TEXT NOT NULL,
        dimension INTEGER NOT NULL CHECK (dimension > 0),
        analyzer TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (tenant_id, name)
    );
    CREATE TABLE memories (
        id INTEGER PRIMARY KEY,
        uid TEXT NOT NULL,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        store_id INTEGER NOT NULL REFERENCES memory_stores(id) ON DELETE CASCADE,
        user_id TEXT NOT NULL,
        session_id TEXT,
        memory_type TEXT NOT NULL,
        subject TEXT,
        occurred_at TEXT NOT NULL,
        content TEXT NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        terms TEXT NOT NULL DEFAULT '',
        embedding BLOB NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (tenant_id, store_id, user_id, uid)
    );
    CREATE INDEX memories_user ON memories (tenant_id, user_id, session_id);
    """,
    # 5: the collection write counter: every ingest, delete or version change bumps it (the search cache key).
    """
    ALTER TABLE collections ADD COLUMN write_seq INTEGER NOT NULL DEFAULT 0;
    """,
    # 6: upload jobs as a queue that worker processes claim (bunko.worker): attempts, the claiming worker,
    # and a status that only moves forward (processing -> completed | failed), enforced by a trigger.
    """
    ALTER TABLE jobs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 3;
    ALTER TABLE jobs ADD COLUMN worker TEXT;
    CREATE INDEX jobs_queue ON jobs (lease_until) WHERE status = 'processing';
    CREATE TRIGGER jobs_status_forward BEFORE UPDATE OF status ON jobs
    WHEN OLD.status <> 'processing' AND NEW.status <> OLD.status
    BEGIN
        SELECT RAISE(ABORT, 'a finished job keeps its status');
    END;
    """,
    # 7: keyword statistics per collection (one FTS5 table each) instead of across all tenants.
    _m007_fts_per_collection,
    # 8: files and URLs whose ingest failed, with the reason, until one is ingested (see SQLStore.ingest_failures).
    """
    CREATE TABLE ingest_failures (
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        collection TEXT NOT NULL,
        source TEXT NOT NULL,
        error_type TEXT NOT NULL,
        error_code TEXT NOT NULL,
        message TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 1,
        first_failed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        failed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        PRIMARY KEY (tenant_id, collection, source)
    );
    """,
    # 9: document frequencies of terms and CJK bigrams per collection, kept by every write (keyword search).
    _m009_keyword_df,
    # 10: the chunks holding each of those terms, with their counts (keyword search scores them in numpy).
    _m010_keyword_postings,
]
SCHEMA_VERSION = len(MIGRATIONS)


def split_statements(script: str) -> list[str]:
    """The statements of a SQL script, split where SQLite says a statement is complete.

    Unlike splitting at every ``;``, a trigger body or a string literal with ``;`` stays whole.
    """
    statements: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip():
        raise VectorStoreError(f"a migration ends with an incomplete statement: {pending.strip()[:80]!r}")
    return statements


def apply_migrations(conn: sqlite3.Connection, migrations: Sequence[Migration], *, path: str = "the store") -> None:
    """Bring a database from its ``user_version`` to ``len(migrations)``, inside the caller's transaction."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(migrations):
        raise VectorStoreError(
            f"{path} was written by a newer bunko (schema {version}, this one knows {len(migrations)}); upgrade bunko"
        )
    for target in range(version, len(migrations)):
        migration = migrations[target]
        if callable(migration):
            migration(conn)
            conn.execute(f"PRAGMA user_version = {target + 1}")
            continue
        # executescript() would COMMIT the caller's transaction first; run statement by statement instead.
        for statement in split_statements(migration):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {target + 1}")


@dataclass(slots=True, frozen=True)
class _Snapshot:
    """A consistent view of a collection's vectors for one search."""

    rowids: np.ndarray  # int64 (n,), ascending
    doc_rowids: np.ndarray  # int64 (n,), -1 for chunks without a document
    vectors: np.ndarray  # float32 (n, d), rows L2-normalised
    state: tuple[int, int] = (-1, 0)  # (mutation_seq, high_water) of the collection these rows are


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
        return _Snapshot(self._rowids[:n], self._docs[:n], self._vectors[:n], (self.mutation_seq, self.high_water))

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


def _use_wal(conn: sqlite3.Connection, wait: float = 30.0) -> None:
    """Switch a connection's file to WAL, waiting out other processes that do the same.

    Turning a new file to WAL needs an exclusive lock. When two processes open a new file at once, each
    holds a shared lock and wants the exclusive one; SQLite answers one of them "database is locked" at
    once, without its busy handler, to avoid the deadlock. The switch happens once per file, so the
    loser waits and tries again: by then the file is usually WAL already and nothing needs changing.
    """
    deadline = time.monotonic() + wait
    delay = 0.005
    while True:
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.25)


class SQLiteBackend(SQLBackend):
    """An embedded store in one SQLite file; safe for several threads and processes."""

    scheme = "sqlite"
    dialect = SQLITE

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = str(path)
        self.url = f"sqlite:///{self.path}"
        if self.path != ":memory:":
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise VectorStoreError(f"cannot create the folder for {self.path}: {exc.strerror}") from exc
        self._local = threading.local()
        # Each thread's connection, with its thread: a dead thread's connection is closed (see _connect).
        self._connections: list[tuple[threading.Thread, sqlite3.Connection]] = []
        self._conn_lock = threading.Lock()
        self._cache: dict[int, _Matrix] = {}
        self._columns: dict[tuple[int, tuple[str, ...]], Column] = {}
        # The MaxScore budget of keyword search (see _bm25_pruned); tests make it small to force more rounds.
        self.keyword_candidates = KEYWORD_CANDIDATES
        self._cache_lock = threading.Lock()
        self._closed = False
        with self.transaction(None, None, write=True) as conn:
            apply_migrations(conn, MIGRATIONS, path=self.path)

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
            _use_wal(conn)
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA cache_size = -65536")
            # Metadata filters compare ISO-8601 dates through the same parser as the Python evaluator.
            conn.create_function("bunko_date", 1, parse_date, deterministic=True)
        except sqlite3.Error as exc:
            raise VectorStoreError(f"cannot open the SQLite store {self.path}: {exc}") from exc
        self._local.conn = conn
        with self._conn_lock:
            # Threads come and go (asyncio.run's executor in every sync call, a server's thread pool):
            # close the connections of threads that ended, so descriptors stay bounded by live threads.
            dead = [c for t, c in self._connections if not t.is_alive()]
            self._connections = [(t, c) for t, c in self._connections if t.is_alive()]
            self._connections.append((threading.current_thread(), conn))
        for old in dead:
            try:
                old.close()
            except sqlite3.Error:  # pragma: no cover - closing is best effort
                pass
        return conn

    @contextmanager
    def transaction(self, tenant: str | None, tenant_pk: int | None, *, write: bool) -> Iterator[sqlite3.Connection]:
        """A read (``BEGIN``) or write transaction on this thread's connection; SQLite errors become
        ``VectorStoreError``. Tenants are not checked by SQLite: every statement filters by tenant."""
        try:
            if write:
                with self._write() as conn:
                    yield conn
            else:
                with self._read() as conn:
                    yield conn
        except sqlite3.Error as exc:
            raise VectorStoreError(f"SQLite {'write' if write else 'read'} failed: {exc}") from exc

    @contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        conn = self._connect()
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

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

    def for_tenant(self, tenant: str) -> SQLiteVectorStore:
        """A store bound to ``tenant``; the only way to reach data."""
        return SQLiteVectorStore(self, check_name("tenant", tenant))

    def drop_cached(self, collection_pk: int) -> None:
        """Forget a collection's in-memory vectors (it was deleted, or rows vanished under a search)."""
        with self._cache_lock:
            self._cache.pop(collection_pk, None)
            for key in [k for k in self._columns if k[0] == collection_pk]:
                del self._columns[key]

    def close(self) -> None:
        """Close every connection this backend opened and drop its caches."""
        self._closed = True
        with self._conn_lock:
            for _, conn in self._connections:
                try:
                    conn.close()
                except sqlite3.Error:  # pragma: no cover - closing is best effort
                    pass
            self._connections.clear()
        self._local = threading.local()
        with self._cache_lock:
            self._cache.clear()
            self._columns.clear()

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.path!r})"


class SQLiteVectorStore(SQLStore):
    """The embedded store bound to one tenant. Build it with ``SQLiteBackend.for_tenant``.

    The SQL core does collections, documents, records and hydration; this class adds the FTS5
    keyword index, the chunk bulk insert, and exact vector search over an in-memory matrix.
    """

    _backend: SQLiteBackend
    # Upserted records may join a document, so a document's chunks are counted, not read from its row.
    _document_chunks = ("(SELECT count(*) FROM chunks c WHERE c.tenant_id = d.tenant_id "
                        "AND c.document_id = d.id)")
    _hydrate_by_collection = True
    # How the last keyword search ranked: "postings" (MaxScore in numpy over keyword_postings, a search
    # without restrictions), "pruned" (MaxScore over FTS5's ranking) or "fts5" (FTS5's bm25 over every match).
    last_keyword_plan = ""

    # -- what the core asks of a backend -------------------------------------------------
    def _keywords(self, analyzer: Analyzer, content: str) -> str:
        return fts5_document(analyzer.index_tokens(content))

    @staticmethod
    def _count(conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, chunks: int, *, mutated: bool) -> None:
        """Keep the chunk counter exact; ``mutated`` marks that rows were removed (for the matrix cache)."""
        conn.execute(
            "UPDATE collections SET chunk_count = chunk_count + ?, mutation_seq = mutation_seq + ? "
            "WHERE tenant_id = ? AND id = ?",
            (chunks, 1 if mutated else 0, tenant_pk, collection_pk),
        )

    def _insert_chunks(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, rows: list[ChunkRow],
                       vectors: np.ndarray, keywords: list[Any]) -> None:
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        dumps = json.dumps
        params = [
            (uid, tenant_pk, collection_pk, doc_pk, index, start, end, tokens, content,
             dumps(meta, ensure_ascii=False, default=str) if meta else "{}", vectors[i].tobytes())
            for i, (uid, doc_pk, _version, index, start, end, tokens, content, meta) in enumerate(rows)
        ]
        first = conn.execute("SELECT coalesce(max(id), 0) FROM chunks").fetchone()[0]
        conn.executemany(
            "INSERT INTO chunks (uid, tenant_id, collection_id, document_id, chunk_index, start_offset, "
            "end_offset, token_count, content, metadata, embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            params,
        )
        # AUTOINCREMENT under the write lock: the new rows are exactly the ids after ``first``, in order.
        new_ids = [r[0] for r in conn.execute(
            "SELECT id FROM chunks WHERE tenant_id = ? AND collection_id = ? AND id > ? ORDER BY id",
            (tenant_pk, collection_pk, first),
        )]
        create_fts(conn, collection_pk)
        conn.executemany(f"INSERT INTO {fts_table(collection_pk)} (rowid, terms) VALUES (?, ?)",
                         zip(new_ids, keywords, strict=True))
        _add_postings(conn, tenant_pk, collection_pk, list(zip(new_ids, keywords, strict=True)))
        self._count(conn, tenant_pk, collection_pk, len(rows), mutated=False)

    def _delete_chunks(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, *,
                       document_pks: Sequence[int] | None = None, uids: Sequence[str] | None = None) -> int:
        d = self._d
        if document_pks is not None:  # document row ids are unique: the chunks_document index answers
            listed, values = d.any("document_id", document_pks)
            where, params = f"tenant_id = ? AND {listed}", (tenant_pk, *values)
        else:
            listed, values = d.any("uid", uids or [])
            where, params = f"tenant_id = ? AND collection_id = ? AND {listed}", (tenant_pk, collection_pk, *values)
        if self._has_fts(conn, collection_pk):
            fts = fts_table(collection_pk)
            gone = conn.execute(f"SELECT id, c0 FROM {fts}_content WHERE id IN (SELECT id FROM chunks WHERE {where})",
                                params).fetchall()
            _remove_postings(conn, tenant_pk, collection_pk, gone)
            conn.execute(f"DELETE FROM {fts} WHERE rowid IN (SELECT id FROM chunks WHERE {where})", params)
        removed = conn.execute(f"DELETE FROM chunks WHERE {where}", params).rowcount
        if removed:
            self._count(conn, tenant_pk, collection_pk, -removed, mutated=True)
        return removed

    def _drop_collection(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int) -> None:
        scope = (tenant_pk, collection_pk)
        conn.execute(f"DROP TABLE IF EXISTS {fts_table(collection_pk)}")
        conn.execute("DELETE FROM keyword_df WHERE tenant_id = ? AND collection_id = ?", scope)
        conn.execute("DELETE FROM keyword_postings WHERE tenant_id = ? AND collection_id = ?", scope)
        conn.execute("DELETE FROM chunks WHERE tenant_id = ? AND collection_id = ?", scope)
        conn.execute("DELETE FROM documents WHERE tenant_id = ? AND collection_id = ?", scope)

    @staticmethod
    def _has_fts(conn: sqlite3.Connection, collection_pk: int) -> bool:
        return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                            (fts_table(collection_pk),)).fetchone() is not None

    def _forget_collection(self, collection_pk: int) -> None:
        self._backend.drop_cached(collection_pk)

    # -- search --------------------------------------------------------------------
    def _filtered_rowids(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, where: str,
                         params: list[Any]) -> np.ndarray:
        """Rowids of this collection's chunks that pass a compiled filter."""
        return np.fromiter((r[0] for r in conn.execute(
            "SELECT c.id FROM chunks c LEFT JOIN documents d ON d.id = c.document_id AND d.tenant_id = c.tenant_id "
            f"WHERE c.tenant_id = ? AND c.collection_id = ? AND {where}",
            (tenant_pk, collection_pk, *params),
        )), dtype=np.int64)

    def _column(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, field: tuple[str, ...],
                state: tuple[int, int]) -> Column:
        """A metadata field of the collection's chunks as a factorised column, read only as far as it changed."""
        backend = self._backend
        key = (collection_pk, field)
        with backend._cache_lock:
            column = backend._columns.get(key)
            if column is not None and (column.mutation_seq, column.high_water) == state:
                return column
            if column is None or column.mutation_seq != state[0] or column.high_water > state[1]:
                column = Column()
            path = "$" + "".join(f'."{segment}"' for segment in field)
            rows = conn.execute(
                "SELECT c.metadata -> ?, d.metadata -> ? FROM chunks c LEFT JOIN documents d "
                "ON d.id = c.document_id AND d.tenant_id = c.tenant_id WHERE c.tenant_id = ? AND c.collection_id = ? "
                "AND c.id > ? AND c.id <= ? ORDER BY c.id",
                (path, path, tenant_pk, collection_pk, column.high_water, state[1]),
            ).fetchall()
            column.append([mine if mine is not None else theirs for mine, theirs in rows])
            column.mutation_seq, column.high_water = state
            backend._columns[key] = column
            return column

    def _filter_mask(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, flt: Filter,
                     matrix: _Snapshot, state: tuple[int, int]) -> np.ndarray | None:
        """Which rows of ``matrix`` pass ``flt``, from in-memory columns of the fields it reads.

        Each leaf of the filter is evaluated once per distinct value of its field (with the Python
        evaluator, so the semantics are the filter language's own) and mapped to the rows by their
        codes; ``$and``, ``$or`` and ``$not`` combine the masks. None when a column does not line up
        with the matrix (a concurrent write): the caller filters in SQL instead.
        """
        try:
            return filter_mask(flt, len(matrix.rowids),
                               lambda field: self._column(conn, tenant_pk, collection_pk, field, state))
        except Misaligned:
            return None

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
        backend = self._backend
        cache = backend._cache
        with backend._cache_lock:
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



    def _restricted_rowids(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, dim: int,
                           flt: Filter | None, document_ids: Sequence[str] | None) -> np.ndarray | None:
        """The rowids (ascending) of the collection's chunks in ``document_ids`` that pass ``flt``, from
        the in-memory matrix and metadata columns; None when this process does not hold the collection
        (loading every vector for a keyword search would cost more than FTS5's ranking) or a column does
        not line up."""
        with self._backend._cache_lock:
            if collection_pk not in self._backend._cache:
                return None
        matrix = self._matrix(conn, tenant_pk, collection_pk, dim)
        mask = np.ones(len(matrix.rowids), dtype=bool)
        if document_ids is not None:
            mask &= np.isin(matrix.doc_rowids, self._document_pks(conn, tenant_pk, collection_pk, document_ids))
        if flt is not None:
            passed = self._filter_mask(conn, tenant_pk, collection_pk, flt, matrix, matrix.state)
            if passed is None:
                return None
            mask &= passed
        return matrix.rowids[mask]

    def _document_pks(self, conn: sqlite3.Connection, tenant_pk: int, collection_pk: int,
                      document_ids: Sequence[str]) -> np.ndarray:
        listed, values = self._d.any("uid", [str(d) for d in document_ids])
        return np.fromiter((r[0] for r in conn.execute(
            f"SELECT id FROM documents WHERE tenant_id = ? AND collection_id = ? AND {listed}",
            (tenant_pk, collection_pk, *values),
        )), dtype=np.int64)

    def query(
        self,
        collection: str,
        vector: Sequence[float] | np.ndarray,
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
        top_k = check_top_k(top_k)
        q = check_query_vector(vector)
        flt = as_filter(filter)
        compiled = compile_sqlite(flt) if flt is not None else None
        hits: list[SearchHit] = []
        for _attempt in range(3):
            with self.session() as (conn, tenant_pk):
                row = self._collection_row(conn, tenant_pk, collection)
                assert tenant_pk is not None
                collection_pk, dim = int(row[0]), int(row[5])
                check_dimension(dim, q.shape[0], collection)
                matrix = self._matrix(conn, tenant_pk, collection_pk, dim)
                norm = float(np.linalg.norm(q))
                qn = q / norm if norm > 0 else q
                mask = None
                if document_ids is not None:
                    wanted = self._document_pks(conn, tenant_pk, collection_pk, document_ids)
                    mask = np.isin(matrix.doc_rowids, wanted)
                if compiled is not None and flt is not None:
                    passed = self._filter_mask(conn, tenant_pk, collection_pk, flt, matrix, matrix.state)
                    if passed is None:
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
                ranked = list(zip(rowids.tolist(), scores[order].tolist(), strict=True))
                hits = self._hits(conn, tenant_pk, collection_pk, ranked, include_content)
            if len(hits) == len(rowids):
                return hits
            # A concurrent delete removed rows after our snapshot of the matrix: reload and retry.
            self._backend.drop_cached(collection_pk)
        return hits

    def keyword_search(
        self,
        collection: str,
        query: str,
        top_k: int = 5,
        *,
        document_ids: Sequence[str] | None = None,
        filter: FilterLike = None,
        include_content: bool = True,
    ) -> list[SearchHit]:
        """Top-k by BM25 over the analyzed text, best first (score = -bm25, larger is better).

        ``document_ids`` and ``filter`` restrict the matches before they are ranked.
        """
        top_k = check_top_k(top_k)
        flt = as_filter(filter)
        with self.session() as (conn, tenant_pk):
            row = self._collection_row(conn, tenant_pk, collection)
            assert tenant_pk is not None
            collection_pk = int(row[0])
            # The query is analyzed as the collection's chunks were; every phrase is quoted.
            phrases = get_analyzer(row[10]).query_phrases(query)
            match = fts5_query(phrases)
            if match is None:
                return []
            if not self._has_fts(conn, collection_pk):
                return []  # nothing was ever written to the collection
            # The restriction, over c (chunks) and d (documents).
            join, restrict = "", ""
            restrict_params: list[Any] = []
            if flt is not None:
                join = " LEFT JOIN documents d ON d.id = c.document_id AND d.tenant_id = c.tenant_id"
            if document_ids is not None:
                wanted = self._document_pks(conn, tenant_pk, collection_pk, document_ids).tolist()
                if not wanted:
                    return []
                listed, values = self._d.any("c.document_id", wanted)
                restrict += f" AND {listed}"
                restrict_params.extend(values)
            if flt is not None:
                where, where_params = compile_sqlite(flt)
                restrict += f" AND {where}"
                restrict_params.extend(where_params)
            try:
                ranked = None
                # A restriction is answered from the postings when this process holds the collection's
                # vectors (and so its chunk rowids and metadata columns) in memory.
                allowed = (None if not restrict else
                           self._restricted_rowids(conn, tenant_pk, collection_pk, int(row[5]), flt, document_ids))
                if not restrict or allowed is not None:  # scored here from the postings
                    ranked = _bm25_postings(conn, self._backend, tenant_pk, collection_pk, phrases, top_k, allowed)
                    self.last_keyword_plan = "postings"
                if ranked is None:
                    ranked = _bm25_pruned(conn, self._backend, tenant_pk, collection_pk, phrases, top_k, join,
                                          restrict, restrict_params)
                    self.last_keyword_plan = "pruned"
                if ranked is None:  # every phrase is common: FTS5 ranks them all
                    self.last_keyword_plan = "fts5"
                    ranked = _bm25_fts5(conn, tenant_pk, collection_pk, match, top_k, join, restrict,
                                        restrict_params)
            except sqlite3.OperationalError as exc:
                raise VectorStoreError(f"keyword search failed: {exc}") from exc
            return self._hits(conn, tenant_pk, collection_pk, ranked, include_content)


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


# -- BM25 ---------------------------------------------------------------------------------
# FTS5's bm25() (see sql/postings.py). Without a restriction the postings answer (_bm25_postings);
# with one, MaxScore over FTS5's own ranking (_bm25_pruned): rows scored here in one round before
# more phrases become essential instead.
_ROUND_ROWS = 384


def _varint(blob: bytes, at: int = 0) -> tuple[int, int]:
    """The SQLite varint at ``blob[at:]`` (FTS5's records are made of them): (value, offset after it)."""
    value = 0
    for i in range(8):
        byte = blob[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return (value << 8) | blob[at + 8], at + 9


def _bm25_fts5(conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, match: str, top_k: int, join: str,
               restrict: str, restrict_params: list[Any]) -> list[tuple[int, float]]:
    """The top-k of the whole query ranked by FTS5's own ``bm25()``.

    CROSS JOIN fixes the order (FTS first) and INDEXED BY answers the tenant and collection check
    from the index alone, without reading each matching chunk row.
    """
    fts = fts_table(collection_pk)
    rows = conn.execute(
        f"SELECT c.id, -bm25({fts}) AS score FROM {fts} CROSS JOIN chunks c INDEXED BY chunks_scan "
        f"ON c.tenant_id = ? AND c.collection_id = ? AND c.id = {fts}.rowid{join} WHERE {fts} MATCH ?{restrict} "
        "ORDER BY score DESC, c.id LIMIT ?",
        [tenant_pk, collection_pk, match, *restrict_params, top_k],
    ).fetchall()
    return [(int(r[0]), float(r[1])) for r in rows]


def _phrase_counts(conn: sqlite3.Connection, tenant_pk: int, collection_pk: int,
                   phrases: list[tuple[str, ...]]) -> list[int]:
    """Each phrase's number of rows, as FTS5 counts them for ``bm25()``: from ``keyword_df`` for a
    token or a pair of one-character tokens, else counted by FTS5."""
    terms = [p[0] if len(p) == 1 else " ".join(p) if len(p) == 2 and len(p[0]) == 1 and len(p[1]) == 1 else None
             for p in phrases]
    listed = sorted({t for t in terms if t is not None})
    counts = dict(conn.execute(
        f"SELECT term, df FROM keyword_df WHERE tenant_id = ? AND collection_id = ? AND term IN "
        f"({', '.join('?' * len(listed))})", [tenant_pk, collection_pk, *listed]).fetchall()) if listed else {}
    fts = fts_table(collection_pk)
    return [int(counts.get(t, 0)) if t is not None else int(conn.execute(
        f"SELECT count(*) FROM {fts} WHERE {fts} MATCH ?", (fts5_query([p]),)).fetchone()[0])
        for p, t in zip(phrases, terms, strict=True)]


def _fts5_totals(conn: sqlite3.Connection, fts: str) -> tuple[int, float] | None:
    """FTS5's row count and average row length (tokens) of a table, as ``bm25()`` reads them."""
    found = conn.execute(f"SELECT block FROM {fts}_data WHERE id = 1").fetchone()
    if found is None:
        return None
    averages = bytes(found[0])
    total_rows, at = _varint(averages)
    total_tokens, _ = _varint(averages, at)
    if total_rows <= 0:
        return None
    return total_rows, total_tokens / total_rows


def _phrase_stats(conn: sqlite3.Connection, tenant_pk: int, collection_pk: int, fts: str,
                  phrases: list[tuple[str, ...]]
                  ) -> tuple[float, list[int], dict[int, float], list[int], list[float]] | None:
    """What BM25 needs of the query's phrases: FTS5's average row length, each phrase's document
    frequency, the idf of those that occur at all (the others add 0.0 to every score) as ``bm25()``
    computes it, and those phrases by falling bound idf x (k1 + 1), with the bounds. None when the
    table has no totals yet."""
    totals = _fts5_totals(conn, fts)
    if totals is None:
        return None
    total_rows, average = totals
    counts = _phrase_counts(conn, tenant_pk, collection_pk, phrases)
    idf = {j: bm25_idf(total_rows, n) for j, n in enumerate(counts) if n > 0}
    order = sorted(idf, key=lambda j: (-idf[j], j))
    return average, counts, idf, order, [idf[j] * (K1 + 1.0) for j in order]


def _bm25_postings(conn: sqlite3.Connection, backend: SQLiteBackend, tenant_pk: int, collection_pk: int,
                   phrases: list[tuple[str, ...]], top_k: int,
                   allowed: np.ndarray | None = None) -> list[tuple[int, float]] | None:
    """FTS5's BM25 top-k of the collection (of its ``allowed`` rowids), scored in numpy from
    ``keyword_postings`` (``bm25_top``), with FTS5's statistics. None when FTS5 should rank instead (a
    phrase of another shape, a saturated count, or a returned row whose token count differs from FTS5's).
    """
    fts = fts_table(collection_pk)
    terms = [phrase_term(p) for p in phrases]
    if any(t is None for t in terms):
        return None
    stats = _phrase_stats(conn, tenant_pk, collection_pk, fts, phrases)
    if stats is None or not stats[3]:
        return None if stats is None else []
    average, counts, idf, _order, _bound = stats
    ranked = POSTINGS.rank(conn, (tenant_pk, collection_pk), terms, counts,  # type: ignore[arg-type]
                           [idf.get(j, 0.0) for j in range(len(terms))], average, top_k, backend.keyword_candidates,
                           allowed=allowed)
    if ranked is None:
        return None
    rows, scores, sizes = ranked
    top = list(zip(rows.tolist(), scores.tolist(), strict=True))
    # The stored text splits as FTS5 tokenized it (else every count above is off): check the answer.
    fts_sizes = dict(conn.execute(f"SELECT id, sz FROM {fts}_docsize WHERE id IN (SELECT value FROM json_each(?))",
                                  (json.dumps([r for r, _ in top]),)).fetchall())
    for rowid, size in zip(rows.tolist(), sizes.tolist(), strict=True):
        stored = fts_sizes.get(rowid)
        if stored is None or _varint(stored)[0] != size:
            return None
    return top


def _bm25_pruned(conn: sqlite3.Connection, backend: SQLiteBackend, tenant_pk: int, collection_pk: int,
                 phrases: list[tuple[str, ...]], top_k: int, join: str, restrict: str,
                 restrict_params: list[Any]) -> list[tuple[int, float]] | None:
    """FTS5's BM25 top-k without scoring every row that holds a common phrase (MaxScore).

    A phrase adds at most idf x (k1 + 1) to a row's score. With the phrases ranked by that
    bound, the first ("essential") ones are ranked by FTS5 alone: ``bm25()`` of a query of
    just those phrases is each row's share of its full score from them (the idf of a phrase
    does not depend on the others), and only their rare rows are read. A row's full score is
    at most that share plus the sum of the other phrases' bounds (``rest``). Rows are then
    scored on every phrase here, exactly as ``bm25()`` does (same inputs from FTS5's own
    records, same float operations in the same order), best share first, until the k-th full
    score beats the next row's share plus ``rest`` and ``rest`` alone (the rows that hold no
    essential phrase); otherwise more phrases become essential. None when FTS5 should rank
    the whole query (every phrase became essential, or stored text that does not split as
    FTS5 tokenized it).
    """
    fts = fts_table(collection_pk)
    stats = _phrase_stats(conn, tenant_pk, collection_pk, fts, phrases)
    if stats is None or not stats[3]:
        return None if stats is None else []
    average, counts, idf, order, bound = stats
    weighted = [(phrases[j], idf[j]) for j in sorted(idf)]
    budget = backend.keyword_candidates
    split, total = 0, 0
    while split < len(order) and (split == 0 or total + counts[order[split]] <= budget):
        total += counts[order[split]]
        split += 1
    scored: dict[int, float] = {}
    slack = 1.0 + 1e-9  # float rounding of sums taken in another order
    while split < len(order):
        rest = sum(bound[split:])
        essential = {phrases[j] for j in order[:split]}
        match = fts5_query([phrases[j] for j in sorted(order[:split])])
        assert match is not None
        if restrict:
            cursor = conn.execute(
                f"SELECT c.id, -bm25({fts}) AS share FROM {fts} CROSS JOIN chunks c INDEXED BY chunks_scan "
                f"ON c.tenant_id = ? AND c.collection_id = ? AND c.id = {fts}.rowid{join} WHERE {fts} MATCH ?"
                f"{restrict} ORDER BY share DESC, c.id", [tenant_pk, collection_pk, match, *restrict_params])
        else:  # the table is the collection's own (found in this tenant), and its rows are its chunks
            cursor = conn.execute(f"SELECT rowid, -bm25({fts}) AS share FROM {fts} WHERE {fts} MATCH ? "
                                  "ORDER BY share DESC, rowid", (match,))
        top: list[tuple[int, float]] = []
        before, narrow = len(scored), False
        while batch := cursor.fetchmany(64):
            if len(top) == top_k and (batch[0][1] + rest) * slack < top[-1][1]:
                break  # no row from here on can reach the k-th score
            todo = [int(r[0]) for r in batch if int(r[0]) not in scored]
            if todo and not _score_rows(conn, fts, todo, weighted, essential, average, scored):
                return None
            top = sorted({**dict(top), **{int(r[0]): scored[int(r[0])] for r in batch}}.items(),
                         key=lambda item: (-item[1], item[0]))[:top_k]
            if len(top) == top_k and (rest * slack >= top[-1][1] or len(scored) - before > _ROUND_ROWS):
                # Rows with no essential phrase could still reach the k-th, or too many rows come
                # close to it: FTS5 ranks on more phrases at once faster than they are scored here.
                narrow = True
                break
        cursor.close()
        # Every row holding an essential phrase was scored or shown to fall short (not narrow).
        if not narrow and len(top) == top_k and rest * slack < top[-1][1]:
            return top
        split += 1
        if len(top) == top_k:
            # The k-th score is a floor for the final one: make essential just enough phrases that
            # the others' bounds sum below it, and the next round is the last.
            kth = top[-1][1]
            target = kth / 2 if narrow else kth
            while split < len(order) and sum(bound[split:]) * slack >= target:
                split += 1
        else:  # fewer than k rows so far (a narrow restriction): widen by document count
            budget *= 4
            total = sum(counts[j] for j in order[:split])
            while split < len(order) and total + counts[order[split]] <= budget:
                total += counts[order[split]]
                split += 1
    return None


def _score_rows(conn: sqlite3.Connection, fts: str, rowids: list[int], phrases: list[tuple[tuple[str, ...], float]],
                essential: set[tuple[str, ...]], average: float, out: dict[int, float]) -> bool:
    """BM25 of ``rowids`` over ``phrases`` (with their idf, in query order) as FTS5 computes it, into ``out``.

    The tokens are the stored text split at spaces, as the analyzer joined them; False if a row's
    count differs from FTS5's (its docsize record) or a row holds no essential phrase: then the
    split is not FTS5's tokenization and the caller falls back to FTS5.

    A phrase's occurrences are counted as substrings: with every token wrapped in its own pair of
    spaces (`` a  b  a ``), `` a  b `` occurs once per position where the phrase starts, and
    occurrences cannot overlap unless the phrase ends with its own beginning (``の の``), which is
    counted token by token.
    """
    patterns = []
    for phrase, weight in phrases:
        overlaps = any(phrase[:n] == phrase[-n:] for n in range(1, len(phrase)))
        patterns.append((phrase, weight, " " + "  ".join(phrase) + " ", overlaps, phrase in essential))
    for rowid, text, size in conn.execute(
            f"SELECT t.id, t.c0, s.sz FROM {fts}_content t JOIN {fts}_docsize s ON s.id = t.id "
            "WHERE t.id IN (SELECT value FROM json_each(?))", (json.dumps(rowids),)):
        length = _varint(size)[0]
        if length != (text.count(" ") + 1 if text else 0):
            return False
        spaced = " " + text.replace(" ", "  ") + " "
        norm = K1 * (1 - B + B * length / average)
        score = 0.0
        holds = False
        for phrase, weight, pattern, overlaps, key in patterns:
            tf = _overlapping(text, phrase) if overlaps else spaced.count(pattern)
            if tf:
                score += weight * ((tf * (K1 + 1.0)) / (tf + norm))
                holds = holds or key
        if not holds:
            return False
        out[int(rowid)] = score
    return True


def _overlapping(text: str, phrase: tuple[str, ...]) -> int:
    """How many times ``phrase`` occurs in the space-separated tokens of ``text``, overlaps included."""
    tokens = text.split(" ")
    n = len(phrase)
    return sum(1 for i in range(len(tokens) - n + 1) if tuple(tokens[i:i + n]) == phrase)
