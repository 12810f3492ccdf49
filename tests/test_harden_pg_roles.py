"""PostgreSQL logins (issue 13, findings 5 and 8): the application role cannot touch API keys or rate
windows, and a login that could get around row-level security is warned about or refused.

Roles are made per test on the session's server: an owner login (not a superuser) that migrates its
own database, and an application login that is only a member of ``bunko_app``.
"""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

psycopg = pytest.importorskip("psycopg")

from bunko.config import PostgresSettings  # noqa: E402
from bunko.errors import VectorStoreError  # noqa: E402
from bunko.search import keyword_query  # noqa: E402
from bunko.stores.postgres import PostgresBackend, migrate_database  # noqa: E402
from bunko.stores.service import hash_key  # noqa: E402
from bunko.testing.postgres import with_dbname  # noqa: E402
from tests.pg import PostgresServer  # noqa: E402

_names = itertools.count()


@dataclass
class Logins:
    superuser: str  # the test server's superuser, on the test database
    owner: str  # a non-superuser that ran `bunko db migrate`
    app: str  # an application login: LOGIN, member of bunko_app, nothing else


def _as(url: str, user: str) -> str:
    return psycopg.conninfo.make_conninfo(url, user=user)


@pytest.fixture()
def logins(pg_server: PostgresServer) -> Iterator[Logins]:
    n = f"{os.getpid()}_{next(_names)}"
    owner, app, db = f"bunko_owner_{n}", f"bunko_api_{n}", f"bunko_roles_{n}"
    with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {owner} LOGIN NOSUPERUSER NOBYPASSRLS")
        conn.execute(f"CREATE DATABASE {db} OWNER {owner}")
        conn.execute(f"GRANT bunko_app TO {owner}")  # so its pool may SET ROLE bunko_app
    superuser = with_dbname(pg_server.admin_url, db)
    with psycopg.connect(superuser, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS vector")  # an extension needs a superuser once
    migrate_database(_as(superuser, owner))  # the owner runs `bunko db migrate`
    with psycopg.connect(superuser, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE {app} LOGIN NOSUPERUSER NOBYPASSRLS IN ROLE bunko_app")
    yield Logins(superuser, _as(superuser, owner), _as(superuser, app))
    with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {db} WITH (FORCE)")
        conn.execute(f"DROP ROLE IF EXISTS {app}")
        conn.execute(f"DROP ROLE IF EXISTS {owner}")


# -- finding 5: keys and rate windows ---------------------------------------------------------------
def test_the_application_role_cannot_read_or_change_keys_or_rate_windows(logins: Logins) -> None:
    owner = PostgresBackend(logins.owner)
    try:
        records = owner.service_records()
        records.create_tenant("acme")
        key, record = records.create_api_key("acme", "alice")
        assert records.hit(record.id, 100) == 1
    finally:
        owner.close()
    for url, drop in ((logins.app, False), (logins.superuser, True), (logins.owner, True)):
        with psycopg.connect(url, autocommit=True) as conn:
            if drop:  # what the pool of a risky login runs as
                conn.execute("SET ROLE bunko_app")
            assert conn.execute("SELECT current_user").fetchone()[0] != "postgres"
            for statement in ("SELECT count(*) FROM bunko.api_keys", "SELECT key_hash FROM bunko.api_keys",
                              "UPDATE bunko.api_keys SET admin = true",
                              "UPDATE bunko.api_keys SET tenant = 'globex'", "DELETE FROM bunko.api_keys",
                              "INSERT INTO bunko.api_keys (key_hash, prefix, tenant) VALUES ('x', 'x', 'acme')",
                              "SELECT * FROM bunko.rate_windows", "UPDATE bunko.rate_windows SET hits = 0",
                              "DELETE FROM bunko.rate_windows"):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    conn.execute(statement)
            # One row for one hash, and nothing for a guess.
            assert conn.execute("SELECT tenant, user_id, admin FROM bunko.authenticate_key(%s)",
                                (hash_key(key),)).fetchall() == [("acme", "alice", False)]
            assert conn.execute("SELECT * FROM bunko.authenticate_key('')").fetchall() == []
    # The application login works the server: authenticates, counts, but cannot manage keys.
    app = PostgresBackend(logins.app)
    try:
        assert app.login_risks == []
        records = app.service_records()
        found = records.authenticate(key)
        assert found is not None and (found.tenant, found.user_id) == ("acme", "alice")
        assert records.authenticate(key + "x") is None
        assert records.hit(record.id, 100) == 2 and records.hit(record.id, 101) == 1
        for manage in (lambda: records.create_api_key("acme"), lambda: records.list_api_keys("acme"),
                       lambda: records.revoke_api_key(record.id)):
            with pytest.raises(VectorStoreError, match="owner login"):
                manage()
        store = app.for_tenant("acme")
        assert store.list_collections() == []  # tenant data as usual
    finally:
        app.close()


# -- finding 8: a login that could get around RLS ------------------------------------------------------
def test_an_owner_login_drops_to_the_app_role_and_is_warned_about(logins: Logins,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="bunko.stores.postgres"):
        owner = PostgresBackend(logins.owner)
    try:
        assert any("owns the bunko tables" in r.getMessage() and "SECURITY WARNING" in r.getMessage()
                   for r in caplog.records)
        with owner.connection() as conn:
            assert conn.execute("SELECT current_user").fetchone()[0] == "bunko_app"
            # As bunko_app the pool cannot switch row-level security off.
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("ALTER TABLE bunko.chunks NO FORCE ROW LEVEL SECURITY")
            conn.rollback()
    finally:
        owner.close()
    strict = PostgresSettings(require_app_login=True)
    for url, reason in ((logins.owner, "owns the bunko tables"), (logins.superuser, "superuser")):
        with pytest.raises(VectorStoreError, match=reason):
            PostgresBackend(url, settings=strict)
    app = PostgresBackend(logins.app, settings=strict)  # a proper application login passes
    try:
        with app.connection() as conn:
            user, session = conn.execute("SELECT current_user, session_user").fetchone()
        assert user == session and user.startswith("bunko_api_")
    finally:
        app.close()


def _two_tenants_search(logins: Logins) -> tuple[dict[str, int], dict[str, int]]:
    """Tenants acme and globex each write a collection "c" as the application login, and acme's keyword
    search finds only its own chunk; returns the collection ids and the tenant ids by tenant name."""
    from bunko.testing.store_suite import INFO, make_document, unit_vectors

    app = PostgresBackend(logins.app)
    try:
        for tenant, text in (("acme", "水の備蓄は三日分"), ("globex", "水の備蓄は一週間分")):
            store = app.for_tenant(tenant)
            store.ensure_collection("c", INFO)
            store.write_documents("c", [make_document("d.txt", [text, "地震の備え"], unit_vectors(2, 1))])
        acme = app.for_tenant("acme")
        explain: dict[str, str] = {}
        assert [h.content for h in keyword_query(acme, "c", "備蓄", 5, explain=explain)] == ["水の備蓄は三日分"]
        assert explain["plan"].startswith("postings")  # BM25 from the postings, then the title re-ranking
    finally:
        app.close()
    with psycopg.connect(logins.superuser) as conn:
        ids = dict(conn.execute("SELECT t.name, c.id FROM bunko.collections c JOIN bunko.tenants t "
                                "ON t.id = c.tenant_id").fetchall())
        tenants = dict(conn.execute("SELECT name, id FROM bunko.tenants").fetchall())
    return ids, tenants


def test_keyword_matches_keep_to_the_session_tenant(logins: Logins) -> None:
    """bunko.keyword_match (migration m012; the SQL test oracle's candidates) runs as the schema owner and
    never returns another tenant's ids, nor any without a tenant in the session. Its GIN indexes are gone
    (m024): it scans the collection's rows."""
    ids, tenants = _two_tenants_search(logins)
    match = "SELECT count(*) FROM bunko.keyword_match(%s, NULL, %s::tsquery)"
    with psycopg.connect(logins.app) as conn:
        assert conn.execute(match, (ids["globex"], "'備 蓄'")).fetchone()[0] == 0  # no tenant in the session
        conn.execute("SELECT set_config('bunko.tenant_id', %s, false)", (str(tenants["acme"]),))
        assert conn.execute(match, (ids["acme"], "'備 蓄'")).fetchone()[0] == 1
        assert conn.execute(match, (ids["globex"], "'備 蓄'")).fetchone()[0] == 0  # another tenant's collection
        conn.execute("SELECT set_config('bunko.tenant_id', %s, false)", (str(tenants["globex"]),))
        assert conn.execute(match, (ids["acme"], "'備 蓄'")).fetchone()[0] == 0


def test_keyword_postings_keep_to_the_session_tenant(logins: Logins) -> None:
    """keyword_postings (migration m014) is tenant data under row-level security: the application role
    sees only the session tenant's rows and cannot write another tenant's; a keyword search ranks only
    its own tenant's chunks; and the upgrade's fill (m015), run by the owner login (not a superuser),
    rebuilds each tenant's postings under that tenant."""
    from bunko.stores.postgres.migrations import fill_postings_format_2

    ids, tenants = _two_tenants_search(logins)
    with psycopg.connect(logins.superuser) as conn:
        stored = conn.execute("SELECT tenant_id, collection_id, segment, term, entries FROM bunko.keyword_postings "
                              "ORDER BY 1, 2, 3, 4").fetchall()
    assert {r[0] for r in stored} == {tenants["acme"], tenants["globex"]}
    with psycopg.connect(logins.app) as conn:
        assert conn.execute("SELECT count(*) FROM bunko.keyword_postings").fetchone()[0] == 0  # no tenant
        conn.execute("SELECT set_config('bunko.tenant_id', %s, false)", (str(tenants["acme"]),))
        seen = conn.execute("SELECT DISTINCT tenant_id, collection_id FROM bunko.keyword_postings").fetchall()
        assert seen == [(tenants["acme"], ids["acme"])]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO bunko.keyword_postings VALUES (%s, %s, 0, 'x', '')",
                         (tenants["globex"], ids["globex"]))
    with psycopg.connect(logins.superuser) as conn:
        conn.execute("DELETE FROM bunko.keyword_postings")
    with psycopg.connect(logins.owner) as conn:
        fill_postings_format_2(conn)
    with psycopg.connect(logins.superuser) as conn:
        assert conn.execute("SELECT tenant_id, collection_id, segment, term, entries FROM bunko.keyword_postings "
                            "ORDER BY 1, 2, 3, 4").fetchall() == stored


# -- issue 26: users inside a tenant under row-level security (m022) -------------------------------------------
def test_user_policies_hold_for_the_application_and_the_owner_login(logins: Logins) -> None:
    """The application login and the owner login (which drops to bunko_app) both see only a user's own private rows
    in a transaction acting for that user, and every user's in one acting for the whole tenant; the owner's
    connection of its own (``bunko admin``, key listing) works on."""
    from tests.test_postgres_user_rls import PRIVATE, fill, owners

    app = PostgresBackend(logins.app, migrate=False)
    try:
        fill(app)
        store = app.for_tenant("acme")
        with store.for_user("u2").session() as (conn, _):
            assert [owners(conn, t) for t in PRIVATE] == [["u2"]] * 3
        with store.session() as (conn, _):
            assert owners(conn, "search_logs") == [None, "u1", "u2"]
    finally:
        app.close()
    owner = PostgresBackend(logins.owner, migrate=False)
    try:
        with owner.for_tenant("acme").for_user("u1").session() as (conn, _):
            assert [owners(conn, t) for t in PRIVATE] == [["u1"]] * 3
        records = owner.service_records()
        records.create_api_key("acme", "u1")
        assert [k.user_id for k in records.list_api_keys("acme")] == ["u1"]
    finally:
        owner.close()
