"""``bunko admin check``: the store's consistency as a command, on both stores (exit 0 when whole, 1 with each
problem named once a counter, a document or the keyword index disagrees with the rows)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from bunko import Bunko
from bunko.cli import cli
from tests.conftest import EXAMPLES
from tests.test_harden_pg_roles import logins  # noqa: F401  (the fixture: an owner and an application login)


def _check(url: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, ["--db", url, "admin", "check", "--json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


def _execute(url: str, statement: str) -> None:
    """A statement on the store's rows behind bunko's back (a crash or a bug would leave the same)."""
    if url.startswith("sqlite"):
        import sqlite3
        from contextlib import closing

        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn, conn:
            conn.execute(statement)
        return
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET search_path = bunko")
        conn.execute("SET session_replication_role = replica")  # no trigger stops the damage
        conn.execute(statement)


def test_admin_check_passes_a_whole_store_and_names_what_disagrees(store_url: str, embedder: object) -> None:
    with Bunko(store_url, embedder=embedder) as engine:
        for tenant in ("acme", "globex"):
            assert engine.tenant(tenant).ingest([EXAMPLES], "bousai").errors == []
    code, report = _check(store_url)
    assert code == 0 and report["ok"], report
    names = [c["name"] for c in report["checks"]]
    assert {"collection_counts", "documents_whole", "orphan_chunks", "keyword_rows"} <= set(names)
    assert ("integrity" in names) == store_url.startswith("sqlite")

    # One tenant's counter off by one: only that collection is named.
    _execute(store_url, "UPDATE collections SET chunk_count = chunk_count + 1 WHERE tenant_id = "
                        "(SELECT id FROM tenants WHERE name = 'globex')")
    code, report = _check(store_url)
    assert code == 1 and not report["ok"], report
    failed = {c["name"]: c for c in report["checks"] if not c["ok"]}
    assert set(failed) == {"collection_counts"}, failed
    assert failed["collection_counts"]["found"] == 1
    assert failed["collection_counts"]["problems"][0].startswith("globex/bousai: counters say"), failed

    # A keyword token total off (what BM25 divides by): only the keyword index is named.
    _execute(store_url, "UPDATE collections SET chunk_count = chunk_count - 1, keyword_tokens = keyword_tokens + 5 "
                        "WHERE tenant_id = (SELECT id FROM tenants WHERE name = 'globex')")
    code, report = _check(store_url)
    failed = {c["name"]: c for c in report["checks"] if not c["ok"]}
    assert code == 1 and set(failed) == {"keyword_rows"}, report
    assert failed["keyword_rows"]["found"] == 1 and failed["keyword_rows"]["problems"][0].startswith("globex/bousai")

    # A document whose chunks went missing: the document, the counters and the keyword rows disagree.
    _execute(store_url, "UPDATE collections SET keyword_tokens = keyword_tokens - 5 WHERE tenant_id = "
                        "(SELECT id FROM tenants WHERE name = 'globex')")
    assert _check(store_url)[0] == 0
    _execute(store_url, "DELETE FROM chunks WHERE id = (SELECT min(k.id) FROM chunks k JOIN tenants t "
                        "ON t.id = k.tenant_id WHERE t.name = 'acme')")
    code, report = _check(store_url)
    failed = {c["name"]: c for c in report["checks"] if not c["ok"]}
    assert code == 1 and {"collection_counts", "documents_whole"} <= set(failed), report
    if store_url.startswith("sqlite"):  # the postings still list the chunk
        assert "the postings list" in " ".join(failed["keyword_rows"]["problems"]), failed
    assert failed["documents_whole"]["problems"][0].startswith("acme/bousai/"), failed

    # Text output: one line per check, and the exit code.
    result = CliRunner().invoke(cli, ["--db", store_url, "admin", "check"], catch_exceptions=False)
    assert result.exit_code == 1 and "documents_whole" in result.stdout and "acme/bousai/" in result.stdout


def test_admin_check_on_postgresql_needs_the_owner_login(request: pytest.FixtureRequest) -> None:
    """Row-level security shows the application login no tenant's rows: its check is refused, not passed."""
    roles = request.getfixturevalue("logins")
    code, report = _check(roles.owner)
    assert code == 0 and report["ok"], report
    code, refused = _check(roles.app)
    assert code == 1 and "owner login" in refused["error"]["message"], refused
