"""Row-level security for per-user rows inside a tenant on PostgreSQL (migration m022).

A store acting for a user (``VectorStore.for_user``, as an API key's scope does) sets ``bunko.user_id`` in each
transaction beside the tenant. These tests send raw SQL *without any user predicate* in such transactions, so
what they see is what the policies let through, not what the store's WHERE clauses choose:

- memories, conversation turns and search logs: a user sees, changes and writes only its own rows;
- jobs and usage records: every key of the tenant reads them (the document list, quotas, the tenant's usage),
  but a user inserts only rows of its own and updates or deletes only its own;
- a transaction for the whole tenant (a tenant or admin key) sees and changes every user's rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from bunko.errors import ForbiddenError, VectorStoreError
from bunko.stores.postgres import PostgresBackend
from bunko.stores.service import Job
from bunko.stores.sql.memory import MemoryWrite
from bunko.testing.postgres import with_dbname
from bunko.types import ConversationTurn, EmbedderInfo, UsageEvent

from .pg import psycopg

USERS = ("u1", "u2", None)  # None: a tenant key's rows
PRIVATE = ("memories", "conversation_turns", "search_logs")  # a user sees only its own
SHARED_READ = ("jobs", "usage_records")  # read by every key of the tenant; written by their user only
INFO = EmbedderInfo("test", "three", 3)


def _conversation(user: str | None) -> str:
    return f"u.{user}:talk" if user else "t:talk"


def fill(backend: PostgresBackend, tenant: str = "acme") -> Any:
    """One row of every per-user table for u1, u2 and the tenant itself (memories: users only)."""
    store = backend.for_tenant(tenant)
    memories = store.memories()
    memories.ensure_store("memories", INFO)
    for n, user in enumerate(u for u in USERS if u):
        memories.add("memories", [MemoryWrite(f"m-{user}", user, "s", "dialogue", None, "2026-01-01T00:00:00Z",
                                              f"{user} remembers")], np.eye(3, dtype=np.float32)[n:n + 1])
    records = backend.service_records()
    for user in USERS:
        store.conversations.append(_conversation(user), [ConversationTurn("user", f"{user} asks")])
        store.usage.record([UsageEvent("search", "test", "three", items=1)], [(f"{user} query", 1, 1.0, "vector")],
                           user_id=user)
        records.create_job(store, Job(f"job-{user}", "docs", f"{user}.txt", user_id=user))
    return store


@pytest.fixture()
def backend(pg_url: str) -> Iterator[PostgresBackend]:
    b = PostgresBackend(pg_url)
    fill(b)
    fill(b, "other")
    yield b
    b.close()


def owners(conn: Any, table: str) -> list[str | None]:
    """The user of every row the transaction sees in ``table``: no tenant and no user predicate."""
    return sorted((r[0] for r in conn.execute(f"SELECT user_id FROM bunko.{table}").fetchall()),
                  key=lambda u: u or "")


def test_a_user_transaction_sees_only_its_own_private_rows(backend: PostgresBackend) -> None:
    store = backend.for_tenant("acme")
    for user in ("u1", "u2"):
        with store.for_user(user).session() as (conn, _):
            for table in PRIVATE:
                assert owners(conn, table) == [user], table
            for table in SHARED_READ:  # the tenant's, as every key of it reads them (and no other tenant's)
                assert owners(conn, table) == [None, "u1", "u2"], table
    with store.session() as (conn, _):  # the whole tenant (a tenant or admin key): every user's rows
        for table in (*PRIVATE, *SHARED_READ):
            assert owners(conn, table) == ([] if table == "memories" else [None]) + ["u1", "u2"], table


def test_a_user_transaction_changes_no_other_users_rows(backend: PostgresBackend) -> None:
    store = backend.for_tenant("acme")
    columns = {"memories": "content", "conversation_turns": "content", "search_logs": "query",
               "jobs": "filename", "usage_records": "model"}

    def count(table: str) -> int:
        with store.session() as (conn, _):
            return int(conn.execute(f"SELECT count(*) FROM bunko.{table}").fetchone()[0])

    before = {table: count(table) for table in columns}
    with store.for_user("u1").session(write=True) as (conn, _):
        for table, column in columns.items():
            others = "user_id IS DISTINCT FROM 'u1'"
            changed = conn.execute(f"UPDATE bunko.{table} SET {column} = 'changed' WHERE {others}").rowcount
            assert changed == 0, table
            assert conn.execute(f"DELETE FROM bunko.{table} WHERE {others}").rowcount == 0, table
    assert {table: count(table) for table in columns} == before
    with store.session() as (conn, _):
        for table, column in columns.items():
            assert conn.execute(f"SELECT count(*) FROM bunko.{table} WHERE {column} = 'changed'").fetchone()[0] == 0
    # Its own rows it may change and delete.
    with store.for_user("u1").session(write=True) as (conn, _):
        for table in columns:
            assert conn.execute(f"DELETE FROM bunko.{table} WHERE user_id = 'u1'").rowcount == 1, table


INSERTS = {
    "memories": ("INSERT INTO bunko.memories (uid, tenant_id, store_id, user_id, memory_type, occurred_at, "
                 "content, embedding) SELECT 'forged', %s, id, %s, 'dialogue', 'now', 'forged', '\\x00' "
                 "FROM bunko.memory_stores"),
    "conversation_turns": "INSERT INTO bunko.conversation_turns (tenant_id, conversation_id, role, content) "
                          "VALUES (%s, 'u.' || %s || ':talk', 'user', 'forged')",
    "search_logs": "INSERT INTO bunko.search_logs (tenant_id, user_id, query, result_count, search_time_ms, "
                   "search_type) VALUES (%s, %s, 'forged', 0, 0, 'vector')",
    "jobs": "INSERT INTO bunko.jobs (uid, tenant_id, collection, filename, user_id, status) "
            "VALUES ('forged', %s, 'docs', 'forged.txt', %s, 'processing')",
    "usage_records": "INSERT INTO bunko.usage_records (tenant_id, user_id, operation) VALUES (%s, %s, 'forged')",
}


@pytest.mark.parametrize(("table", "claimed"), [(t, c) for t in sorted(INSERTS) for c in ("u2", None)
                                                  if (t, c) != ("memories", None)])  # a memory always has a user
def test_a_user_transaction_cannot_write_rows_of_another_user(backend: PostgresBackend, table: str,
                                                              claimed: str | None) -> None:
    store = backend.for_tenant("acme")
    if table == "conversation_turns" and claimed is None:
        claimed = ""  # the id 'u.:talk' names no user: a tenant-level row
    with pytest.raises(VectorStoreError, match="row-level security"), \
            store.for_user("u1").session(write=True) as (conn, tenant_pk):
        conn.execute(INSERTS[table], (tenant_pk, claimed))
    with store.for_user("u1").session(write=True) as (conn, tenant_pk):  # its own: allowed
        conn.execute(INSERTS[table], (tenant_pk, "u1"))
    with store.session(write=True) as (conn, tenant_pk):  # the whole tenant may write any user's
        if table in ("memories", "jobs"):
            conn.execute(f"DELETE FROM bunko.{table} WHERE uid = 'forged'")
        conn.execute(INSERTS[table], (tenant_pk, claimed))


def test_a_user_transaction_cannot_hand_its_rows_to_another_user(backend: PostgresBackend) -> None:
    store = backend.for_tenant("acme")
    for table in ("memories", "search_logs", "jobs", "usage_records"):
        with pytest.raises(VectorStoreError, match="row-level security"), \
                store.for_user("u1").session(write=True) as (conn, _):
            conn.execute(f"UPDATE bunko.{table} SET user_id = 'u2' WHERE user_id = 'u1'")
    with pytest.raises(VectorStoreError, match="row-level security"), \
            store.for_user("u1").session(write=True) as (conn, _):
        conn.execute("UPDATE bunko.conversation_turns SET conversation_id = 'u.u2:mine' WHERE user_id = 'u1'")


def test_the_generated_user_of_a_conversation_follows_its_namespace(backend: PostgresBackend) -> None:
    with backend.for_tenant("acme").session() as (conn, _):
        rows = dict(conn.execute("SELECT conversation_id, user_id FROM bunko.conversation_turns").fetchall())
    assert rows == {"u.u1:talk": "u1", "u.u2:talk": "u2", "t:talk": None}


def test_a_user_scope_reads_its_own_records_without_asking(backend: PostgresBackend, tmp_path) -> None:
    """Through the API: a user's store answers its own search log even asked for the tenant's, and its memory
    and conversation reads of another user find nothing even when the repository is asked by name."""
    mine = backend.for_tenant("acme").for_user("u1")
    assert [r["query"] for r in mine.usage.searches()] == ["u1 query"]
    assert mine.memories().user_memories("memories", "u2")[0] == []
    assert mine.memories().list_memories("u2") == []
    assert mine.memories().delete("u2") == 0
    assert mine.conversations.turns("u.u2:talk") == []
    assert mine.conversations.delete("u.u2:talk") == 0
    assert mine.conversations.ids() == ["u.u1:talk"]
    tenant = backend.for_tenant("acme")
    assert [m.user_id for m in tenant.memories().list_memories("u2")] == ["u2"]
    assert len(tenant.conversations.turns("u.u2:talk")) == 1
    assert sorted(r["query"] for r in tenant.usage.searches()) == ["None query", "u1 query", "u2 query"]


def test_erasure_by_the_admin_and_by_the_user_itself(backend: PostgresBackend) -> None:
    """The tenant policy alone applies to a transaction for the whole tenant: an admin key erases any user; a user
    erases itself; neither touches the other users or tenants."""
    records = backend.service_records()
    erased = records.erase_user(backend.for_tenant("acme"), "u2").to_dict()  # an admin key's scope
    assert {k: erased[k] for k in ("jobs", "searchLogs", "usageRecords", "conversationTurns", "memories")} == \
        {"jobs": 1, "searchLogs": 1, "usageRecords": 1, "conversationTurns": 1, "memories": 1}
    own = records.erase_user(backend.for_tenant("acme").for_user("u1"), "u1").to_dict()
    assert {k: own[k] for k in ("jobs", "searchLogs", "usageRecords", "conversationTurns", "memories")} == \
        {"jobs": 1, "searchLogs": 1, "usageRecords": 1, "conversationTurns": 1, "memories": 1}
    with backend.for_tenant("acme").session() as (conn, _):
        for table in (*PRIVATE, *SHARED_READ):
            assert owners(conn, table) == ([] if table == "memories" else [None]), table
    with backend.for_tenant("other").session() as (conn, _):
        assert owners(conn, "search_logs") == [None, "u1", "u2"]


def test_a_store_acting_for_a_user_erases_no_other_user(backend: PostgresBackend) -> None:
    """Documents are no policy's to guard (every user reads them): erasing another user through a store acting
    for a user is refused before anything is deleted."""
    records = backend.service_records()
    with pytest.raises(ForbiddenError):
        records.erase_user(backend.for_tenant("acme").for_user("u1"), "u2")
    with backend.for_tenant("acme").session() as (conn, _):
        assert owners(conn, "jobs") == [None, "u1", "u2"]


def test_upgrading_to_user_rls_keeps_existing_rows(pg_server) -> None:
    """A database just before m022 with rows: m022 spells out each conversation's user and the policies apply to the
    old rows; the application login works on as before."""
    from bunko.stores.postgres import migrate_database
    from bunko.stores.postgres.migrations import MIGRATIONS

    names = [name for name, _ in MIGRATIONS]
    before = names.index("m022_user_rls")
    url = with_dbname(pg_server.admin_url, "bunko_user_rls_upgrade")
    with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS bunko_user_rls_upgrade WITH (FORCE)")
        conn.execute("CREATE DATABASE bunko_user_rls_upgrade")
    try:
        migrate_database(url, target=before)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("INSERT INTO bunko.tenants (name) VALUES ('acme')")
            tenant = conn.execute("SELECT id FROM bunko.tenants").fetchone()[0]
            conn.execute("SELECT set_config('bunko.tenant_id', %s, false)", (str(tenant),))
            for user in USERS:
                conn.execute("INSERT INTO bunko.conversation_turns (tenant_id, conversation_id, role, content) "
                             "VALUES (%s, %s, 'user', 'old')", (tenant, _conversation(user)))
                conn.execute("INSERT INTO bunko.search_logs (tenant_id, user_id, query, result_count, "
                             "search_time_ms, search_type) VALUES (%s, %s, 'old', 0, 0, 'vector')", (tenant, user))
        assert migrate_database(url) == names[before:]
        backend = PostgresBackend(url)
        try:
            store = backend.for_tenant("acme")
            with store.session() as (conn, _):
                assert owners(conn, "conversation_turns") == [None, "u1", "u2"]
            with store.for_user("u2").session() as (conn, _):
                assert owners(conn, "conversation_turns") == ["u2"]
                assert owners(conn, "search_logs") == ["u2"]
            fill(backend, "acme")  # and the new code writes as before
            with store.for_user("u1").session() as (conn, _):
                assert owners(conn, "memories") == ["u1"]
        finally:
            backend.close()
    finally:
        pg_server.drop_database(url)
