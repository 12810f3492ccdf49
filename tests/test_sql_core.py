"""The SQL core under both backends: write planning, the dialects, statement splitting, the
backend registry, and the tenant scope of its sessions."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from bunko.errors import UnknownProviderError, VectorStoreError
from bunko.stores import (
    SQLiteBackend,
    StoreBackend,
    VectorStore,
    available_backends,
    open_backend,
    register_backend,
)
from bunko.stores.base import ChunkWrite, DocumentWrite
from bunko.stores.service import Job, service_records
from bunko.stores.sql import StoredDocument, plan_writes
from bunko.stores.sqlite import SQLITE, apply_migrations, split_statements
from bunko.stores.sqlite import backend as sqlite_store
from bunko.testing.store_suite import INFO, make_document, unit_vectors
from bunko.types import VectorRecord


def _doc(source: str, content_hash: str, chunks: int = 1, doc_id: str | None = None) -> DocumentWrite:
    return DocumentWrite(doc_id or f"id-{source}", source, content_hash, {},
                         [ChunkWrite(f"{source}-{i}", "x", i, 0, 1, 1) for i in range(chunks)],
                         np.ones((chunks, 4), dtype=np.float32))


STORED = {"a.txt": StoredDocument(pk=7, uid="old-a", content_hash="h1", chunk_count=3, version=2),
          "b.txt": StoredDocument(pk=8, uid="old-b", content_hash="", chunk_count=1, version=1)}


# (what is stored, the batch, the expected (status, uid, version, chunk_count, pk) per document)
PLAN_CASES = {
    "new source is created as version 1 under its own id": (
        {}, [_doc("n.txt", "h", 2)], [("created", "id-n.txt", 1, 2, None)]),
    "same content hash is unchanged, stored id, chunks and version": (
        STORED, [_doc("a.txt", "h1", 5)], [("unchanged", "old-a", 2, 3, 7)]),
    "another hash is a new version under the stored id": (
        STORED, [_doc("a.txt", "h2", 5)], [("replaced", "old-a", 3, 5, 7)]),
    "no hash always makes a new version": (
        STORED, [_doc("a.txt", "", 1)], [("replaced", "old-a", 3, 1, 7)]),
    "a stored empty hash never matches": (
        STORED, [_doc("b.txt", "h9", 2)], [("replaced", "old-b", 2, 2, 8)]),
    "a mixed batch keeps its order": (
        STORED, [_doc("b.txt", "x"), _doc("n.txt", "y"), _doc("a.txt", "h1")],
        [("replaced", "old-b", 2, 1, 8), ("created", "id-n.txt", 1, 1, None), ("unchanged", "old-a", 2, 3, 7)]),
    "an empty batch plans nothing": (STORED, [], []),
}


@pytest.mark.parametrize("case", list(PLAN_CASES))
def test_plan_writes(case: str) -> None:
    existing, documents, expected = PLAN_CASES[case]
    plans = plan_writes(existing, documents)
    assert [p.position for p in plans] == list(range(len(documents)))
    assert [(p.status, p.uid, p.version, p.chunk_count, p.pk) for p in plans] == expected


def test_plan_writes_refuses_a_source_twice_in_one_batch() -> None:
    with pytest.raises(VectorStoreError, match="twice"):
        plan_writes({}, [_doc("a.txt", "1"), _doc("a.txt", "2")])


def test_dialects_translate_core_statements() -> None:
    from bunko.stores.postgres import POSTGRES

    statement = "UPDATE jobs SET updated_at = {now} WHERE tenant_id = ? AND uid = ?"
    assert POSTGRES.sql(statement) == "UPDATE jobs SET updated_at = now() WHERE tenant_id = %s AND uid = %s"
    assert SQLITE.sql(statement).endswith("WHERE tenant_id = ? AND uid = ?") and "strftime" in SQLITE.sql(statement)
    assert POSTGRES.any("uid", ["a", "b"]) == ("uid = ANY(?)", [["a", "b"]])
    assert SQLITE.any("uid", ["a", "b"]) == ("uid IN (?, ?)", ["a", "b"])
    # A very long list travels as one JSON parameter instead of thousands of marks.
    long_sql, long_params = SQLITE.any("id", list(range(20_000)))
    assert "json_each" in long_sql and len(long_params) == 1


def test_long_id_lists_work_on_sqlite(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "s.db")
    try:
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO)
        vectors = unit_vectors(3, 1)
        ids = store.upsert("c", [VectorRecord(id=f"r{i}", content=f"t{i}", vector=vectors[i].tolist())
                                 for i in range(3)])
        wanted = [*ids, *(f"missing-{i}" for i in range(20_000))]
        assert set(store.chunk_vectors("c", wanted)) == set(ids)
        assert store.delete("c", wanted) == 3 and store.count("c") == 0
    finally:
        backend.close()


# -- SQLite migrations ------------------------------------------------------------------------------
TRIGGER_MIGRATION = """
CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL, edits INTEGER NOT NULL DEFAULT 0);
-- a trigger body holds statements of its own; each ends with ';'
CREATE TRIGGER notes_edited AFTER UPDATE OF body ON notes BEGIN
    UPDATE notes SET edits = edits + 1 WHERE id = NEW.id;
END;
INSERT INTO notes (body) VALUES ('first; not a statement end');
"""


def test_split_statements_keeps_triggers_and_strings_whole() -> None:
    statements = split_statements(TRIGGER_MIGRATION)
    assert len(statements) == 3
    assert statements[1].startswith("-- a trigger") and statements[1].endswith("END;")
    assert statements[2].endswith("VALUES ('first; not a statement end');")
    with pytest.raises(VectorStoreError, match="incomplete"):
        split_statements("CREATE TABLE t (x INTEGER);\nCREATE TABLE u (")


def test_a_migration_with_a_trigger_and_a_semicolon_in_a_string_applies(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with closing(sqlite3.connect(tmp_path / "raw.db", isolation_level=None)) as conn:
        conn.execute("BEGIN")
        apply_migrations(conn, ["CREATE TABLE base (x INTEGER);", TRIGGER_MIGRATION])
        conn.execute("COMMIT")
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
        conn.execute("UPDATE notes SET body = 'second'")
        assert conn.execute("SELECT body, edits FROM notes").fetchone() == ("second", 1)
    # The backend runs its migrations the same way: an extra one with a trigger applies on open.
    monkeypatch.setattr(sqlite_store, "MIGRATIONS", [*sqlite_store.MIGRATIONS, TRIGGER_MIGRATION])
    backend = SQLiteBackend(tmp_path / "store.db")
    backend.close()
    with closing(sqlite3.connect(tmp_path / "store.db")) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(sqlite_store.MIGRATIONS)
        assert conn.execute("SELECT body FROM notes").fetchone() == ("first; not a statement end",)


# -- a registered backend serves the whole contract --------------------------------------------------
class _RenamedBackend(SQLiteBackend):
    """A backend under another URL scheme, registered as a plugin would register one."""

    scheme = "bunkotest"


def _open_renamed(url: str, settings: object = None) -> StoreBackend:
    return _RenamedBackend(url.removeprefix("bunkotest://"))


def test_a_registered_backend_serves_the_server_records_with_isolation(tmp_path: Path) -> None:
    register_backend("bunkotest", _open_renamed)
    assert "bunkotest" in available_backends()
    with pytest.raises(UnknownProviderError, match="bunkotest"):  # the error names what exists
        open_backend("nosuch://x")
    backend = open_backend(f"bunkotest://{tmp_path / 'r.db'}")
    try:
        records = service_records(backend)
        records.create_tenant("acme")
        key, _ = records.create_api_key("acme", "alice")
        assert records.authenticate(key).tenant == "acme"  # type: ignore[union-attr]
        acme, globex = backend.for_tenant("acme"), backend.for_tenant("globex")
        records.create_job(acme, Job("j1", "c", "a.txt", lease_until=time.time() + 60))
        assert [j.id for j in records.list_jobs(acme)] == ["j1"] and records.list_jobs(globex) == []
        assert records.delete_jobs(globex, ["j1"]) == 0 and records.get_job(acme, "j1").filename == "a.txt"
    finally:
        backend.close()


# -- sessions and protocols on both backends ----------------------------------------------------------
@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else f"sqlite:///{tmp_path / 's.db'}"
    b = open_backend(url)
    yield b
    b.close()


def test_a_rolled_back_tenant_row_is_not_remembered(backend: StoreBackend) -> None:
    """A store remembers its tenant's row id only once a transaction that saw it committed: SQLite reuses
    the id of a rolled-back row, and another tenant created next must stay invisible to this store."""
    first = backend.for_tenant("first")
    with pytest.raises(RuntimeError), first.session(create=True) as (_, tenant_pk):  # type: ignore[attr-defined]
        assert tenant_pk is not None
        raise RuntimeError("the write failed after the tenant row was inserted")
    other = backend.for_tenant("other")
    other.ensure_collection("private", INFO)
    other.write_document("private", make_document("secret.txt", ["secret"], unit_vectors(1, 3)))
    assert first.list_collections() == [] and first.usage.summary() == [] and first.usage.searches() == []
    first.ensure_collection("own", INFO)
    assert [c.name for c in first.list_collections()] == ["own"]
    assert [c.name for c in other.list_collections()] == ["private"]


def test_every_store_has_the_protocol_capabilities(backend: StoreBackend) -> None:
    store = backend.for_tenant("acme")
    assert isinstance(store, VectorStore)
    store.ensure_collection("c", INFO)
    with store.bulk_load("c"):
        store.write_documents("c", [make_document(f"d{i}.txt", [f"t{i}"], unit_vectors(1, i)) for i in range(3)])
    assert store.count("c") == 3
    name = store.build_index("c")
    if backend.scheme == "sqlite":
        assert name is None
    else:
        assert name is not None and name.startswith("chunks_hnswh_")
