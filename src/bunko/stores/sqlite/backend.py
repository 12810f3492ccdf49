"""The embedded store's database: one SQLite file in WAL mode, one connection per thread.

Writes take the database lock up front (``BEGIN IMMEDIATE``) so they wait instead of failing; reads
run in ``BEGIN`` ... ``COMMIT`` on the thread's own connection. Several threads and processes may use
one file: each sees the others' writes at its next transaction.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ...config import SQLiteSettings, keyword_memory_bytes
from ...errors import ConfigError, StorageFullError, TransientStoreError, VectorStoreError
from ...filters import parse_date
from ..sql import SQLBackend, SQLServiceRecords, StoreCounters, check_name
from ..sql.postings import PostingsTable
from .ann import AnnConfig, Maintainer
from .matrix import CollectionCache
from .migrations import MIGRATIONS, apply_migrations
from .schema import SQLITE
from .store import SQLiteVectorStore

# A chunk row (2 KiB float32 vector for 512-d + text + metadata) is about 3 KiB: a 4 KiB page
# holds one and wastes a quarter or more. With the largest page size rows pack densely and a
# bulk commit writes far fewer pages (ingest at 100k chunks, batched: 4 KiB 15.6k chunks/s,
# 16 KiB 19.5k, 64 KiB 20.6k); reads come from the OS cache either way.
_PAGE_SIZE = 65536


def use_wal(conn: sqlite3.Connection, wait: float = 30.0) -> None:
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


def sqlite_error(what: str, exc: sqlite3.Error) -> VectorStoreError:
    """The store error for a SQLite failure; the one place that decides which are transient: the file
    locked or busy past the busy timeout (another process held the write lock), which changed nothing; and
    which mean a full disk (``StorageFullError``: SQLite rolled the statement back, or the transaction)."""
    code = getattr(exc, "sqlite_errorcode", None)  # an extended code: the primary one is its low byte
    if (code is not None and code & 0xFF == sqlite3.SQLITE_FULL) or (
            code is None and "database or disk is full" in str(exc)):
        return StorageFullError(f"{what}: the disk under the SQLite store is full; nothing was written: {exc}")
    if (code is not None and code & 0xFF in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)) or (
            code is None and isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc)):
        return TransientStoreError(f"{what}: {exc}; nothing was changed, try again")
    return VectorStoreError(f"{what}: {exc}")


class SQLiteBackend(SQLBackend):
    """An embedded store in one SQLite file; safe for several threads and processes."""

    scheme = "sqlite"
    dialect = SQLITE

    def __init__(self, path: str | os.PathLike[str], *, settings: SQLiteSettings | None = None) -> None:
        self.path = str(path)
        self.settings = settings or SQLiteSettings.from_env()
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
        # The vectors and metadata columns of the collections this process searched (see matrix.py).
        self.matrices = CollectionCache()
        # HNSW graphs or IVF lists of large collections (ann.py), saved in a folder beside the file.
        self.ann_folder = None if self.path == ":memory:" else Path(self.path + "-ann")
        self.ann: Maintainer | None = None
        if self.settings.ann:  # IVF lists need numpy alone; graphs need usearch (HAVE_ANN)
            settings = self.settings
            config = AnnConfig(settings.ann_min_rows, settings.ann_ef_search, settings.ann_ef_search_rows,
                               settings.ann_candidates, settings.ann_lists_min_rows, settings.ann_probe_share)
            self.ann = Maintainer(self.ann_folder, config, self.matrices.graphs, self.matrices.lock,
                                  self.matrices.snapshot)
        self.postings = PostingsTable(SQLITE, index_bytes=keyword_memory_bytes(self.settings.keyword_memory_mb))
        self.counters = StoreCounters()
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
            use_wal(conn)
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
    def transaction(self, tenant: str | None, tenant_pk: int | None, *, write: bool,
                    user: str | None = None) -> Iterator[sqlite3.Connection]:
        """A read (``BEGIN``) or write transaction on this thread's connection; SQLite errors become
        ``VectorStoreError``. Tenants and users are not checked by SQLite (no row security): every statement
        filters by tenant, and every statement on a per-user table by user."""
        try:
            if write:
                with self._write() as conn:
                    yield conn
            else:
                with self._read() as conn:
                    yield conn
        except sqlite3.Error as exc:
            raise sqlite_error(f"SQLite {'write' if write else 'read'} failed", exc) from exc

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
            raise sqlite_error("SQLite store is busy or unwritable", exc) from exc
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
                raise sqlite_error("SQLite commit failed", exc) from exc

    def for_tenant(self, tenant: str) -> SQLiteVectorStore:
        """A store bound to ``tenant``; the only way to reach data."""
        return SQLiteVectorStore(self, check_name("tenant", tenant))

    def service_records(self) -> SQLServiceRecords:
        """The HTTP server's records (API keys, rate windows, jobs, erasure) in this file."""
        return SQLServiceRecords(self)

    def connection_count(self) -> int:
        """How many connections this backend holds open (one per live thread that used it)."""
        with self._conn_lock:
            return len(self._connections)

    def open_connection(self) -> sqlite3.Connection:
        """This thread's connection, for tests and tools that read the file directly (``bunko.testing``)."""
        return self._connect()

    def close(self) -> None:
        """Close every connection this backend opened and drop its caches (saving the HNSW graphs that changed)."""
        if self.ann is not None:
            self.ann.close()
        self._closed = True
        with self._conn_lock:
            for _, conn in self._connections:
                try:
                    conn.close()
                except sqlite3.Error:  # pragma: no cover - closing is best effort
                    pass
            self._connections.clear()
        self._local = threading.local()
        self.matrices.clear()

    def __repr__(self) -> str:
        return f"SQLiteBackend({self.path!r})"


def open_sqlite(url: str, settings: SQLiteSettings | None = None) -> SQLiteBackend:
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
    return SQLiteBackend(path, settings=settings)
