"""The embedded SQLite store: the shared conformance suite plus SQLite-only behaviour."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from bunko.errors import ConfigError, UnknownProviderError, VectorStoreError
from bunko.stores import SQLiteBackend, open_backend
from bunko.stores.sqlite import SCHEMA_VERSION
from bunko.testing.store_suite import INFO, StoreConformance, make_document, unit_vectors


class TestSQLiteConformance(StoreConformance):
    """Runs the whole conformance suite on the embedded store."""


def _writer(path: str, worker: int, n_docs: int) -> None:
    backend = SQLiteBackend(path)
    store = backend.for_tenant("acme")
    store.ensure_collection("c", INFO)
    for d in range(n_docs):
        vectors = unit_vectors(20, worker * 1000 + d)
        store.write_document("c", make_document(f"w{worker}-d{d}", [f"w{worker} d{d} c{i}" for i in range(20)],
                                                vectors))
        store.query("c", vectors[0], 3)
    backend.close()


@pytest.mark.slow
def test_two_processes_write_and_read_one_file(db_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_writer, args=(str(db_path), w, 15)) for w in range(2)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(120)
        assert p.exitcode == 0
    backend = SQLiteBackend(db_path)
    store = backend.for_tenant("acme")
    assert len(store.list_documents("c")) == 30
    assert store.count("c") == 600
    assert len(store.query("c", unit_vectors(1, 5)[0], 100)) == 100
    backend.close()


def test_file_uses_wal_and_schema_version(db_path: Path, backend: SQLiteBackend) -> None:
    backend.for_tenant("t").ensure_collection("c", INFO)
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_newer_schema_is_refused(db_path: Path) -> None:
    SQLiteBackend(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(VectorStoreError, match="newer bunko"):
        SQLiteBackend(db_path)


def test_non_finite_vectors_are_refused(backend: SQLiteBackend) -> None:
    store = backend.for_tenant("t")
    store.ensure_collection("c", INFO)
    bad = unit_vectors(1, 1)
    bad[0, 0] = np.nan
    with pytest.raises(VectorStoreError):
        store.write_document("c", make_document("a", ["x"], bad))
    with pytest.raises(VectorStoreError):
        store.query("c", bad[0], 1)
    assert store.count("c") == 0


def test_open_backend_by_url(tmp_path: Path) -> None:
    backend = open_backend(f"sqlite:///{tmp_path / 'x.db'}")
    assert isinstance(backend, SQLiteBackend) and backend.path == str(tmp_path / "x.db")
    backend.close()
    bare = open_backend(str(tmp_path / "y.db"))
    assert isinstance(bare, SQLiteBackend)
    bare.close()
    with pytest.raises(UnknownProviderError, match=r"available: .*sqlite"):
        open_backend("mongodb://localhost/x")
    with pytest.raises(ConfigError):
        open_backend("sqlite://")
