"""The HTTP admin API for quotas (issue 26): an operator key, no tenant's, lists tenants and reads and sets their
quotas; a tenant's keys (its admin key too) cannot, and the operator key reads no tenant's data.

Over a real server on both stores; on PostgreSQL also with the server on an application login, which writes a
quota only through the definer function that checks the operator key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from bunko.cli import cli
from bunko.stores.quotas import Quota
from tests.served import Served, problem, serve
from tests.test_harden_pg_roles import logins  # noqa: F401  (the fixture: an owner and an application login)

NOTICE = "避難所は北小学校の体育館です。非常用の水は一人一日3リットルを三日分備蓄します。"
QUOTA = "/api/v1/admin/tenants/{}/quota"
NO_LIMITS = {"documents": None, "chunks": None, "bytes": None, "uploadBytesPerDay": None, "requestsPerMinute": None}


@pytest.fixture(params=["sqlite", "postgresql"])
def served(request: pytest.FixtureRequest, tmp_path: Path, embedder: object) -> Iterator[Served]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else f"sqlite:///{tmp_path / 't.db'}"
    with serve(url, embedder, rate_limit=0) as live:
        yield live


def _operator(served: Served, label: str = "ops") -> str:
    key, record = served.engine.backend.service_records().create_operator_key(label)
    assert key.startswith("bko_") and record.label == label
    return key


def test_an_operator_key_lists_tenants_and_reads_and_sets_their_quotas(served: Served) -> None:
    records = served.engine.backend.service_records()
    acme, globex = served.key("acme", "alice"), served.key("globex")
    with served.client(_operator(served)) as ops, served.client(acme) as a, served.client(globex) as g:
        listed = ops.get("/api/v1/admin/tenants")
        assert listed.status_code == 200, listed.text
        assert [(t["name"], t["quota"]) for t in listed.json()["tenants"]] == [("acme", NO_LIMITS),
                                                                                ("globex", NO_LIMITS)]
        assert a.post("/api/v1/collections/default/vectors", json={
            "records": [{"id": "n1", "content": "一つ目"}, {"id": "n2", "content": "二つ目"}]}).status_code == 200

        got = ops.get(QUOTA.format("acme")).json()
        assert got["quota"] == NO_LIMITS and got["quotas"]["chunks"] == {"limit": None, "usage": 2}, got

        put = ops.put(QUOTA.format("acme"), json={"chunks": 2, "uploadBytesPerDay": 10_000})
        assert put.status_code == 200, put.text
        assert put.json()["quota"] == {**NO_LIMITS, "chunks": 2, "uploadBytesPerDay": 10_000}
        assert put.json()["quotas"]["chunks"] == {"limit": 2, "usage": 2}
        assert records.get_quota("acme") == Quota(chunks=2, upload_bytes_per_day=10_000)
        assert records.get_quota("globex") == Quota()  # another tenant's quota is not touched

        # In force at once: the tenant's next upload is refused, and its own view shows the limit.
        body = problem(a.post("/api/v1/documents/upload", files={"file": ("n.txt", NOTICE.encode())}),
                       413, "QUOTA_EXCEEDED")
        assert (body["quota"], body["limit"], body["usage"]) == ("chunks", 2, 2)
        assert a.get("/api/v1/usage").json()["quotas"]["chunks"] == {"limit": 2, "usage": 2}
        assert g.post("/api/v1/collections/default/vectors", json={
            "records": [{"id": f"g{n}", "content": "globex"} for n in range(3)]}).status_code == 200

        # PATCH changes what it names (null: no limit); PUT replaces everything (absent: no limit).
        patched = ops.patch(QUOTA.format("acme"), json={"documents": 5, "uploadBytesPerDay": None})
        assert patched.status_code == 200, patched.text
        assert patched.json()["quota"] == {**NO_LIMITS, "documents": 5, "chunks": 2}
        assert ops.put(QUOTA.format("acme"), json={"requestsPerMinute": 600}).json()["quota"] == {
            **NO_LIMITS, "requestsPerMinute": 600}
        assert a.post("/api/v1/documents/upload?wait=true",
                      files={"file": ("n.txt", NOTICE.encode())}).status_code == 200
        listed = {t["name"]: t["quota"] for t in ops.get("/api/v1/admin/tenants").json()["tenants"]}
        assert listed == {"acme": {**NO_LIMITS, "requestsPerMinute": 600}, "globex": NO_LIMITS}

        # Typed errors: an unknown tenant, values out of range, unknown fields; nothing changes.
        problem(ops.get(QUOTA.format("nobody")), 404, "TENANT_NOT_FOUND")
        problem(ops.put(QUOTA.format("nobody"), json={"chunks": 1}), 404, "TENANT_NOT_FOUND")
        problem(ops.patch(QUOTA.format("nobody"), json={"chunks": 1}), 404, "TENANT_NOT_FOUND")
        for bad in ({"chunks": -1}, {"requestsPerMinute": 2**31}, {"pages": 3}, {"chunks": "many"},
                    {"bytes": 2**63}):
            problem(ops.put(QUOTA.format("acme"), json=bad), 422, "VALIDATION_ERROR")
        assert records.get_quota("acme") == Quota(requests_per_minute=600)


def test_a_tenant_key_cannot_set_or_read_quotas_and_an_operator_key_reads_no_tenant_data(served: Served) -> None:
    records = served.engine.backend.service_records()
    admin, user, tenant_key = served.key("acme", admin=True), served.key("acme", "alice"), served.key("acme")
    records.set_quota("acme", {"chunks": 1})
    operator = _operator(served)
    with served.client(user) as a:
        assert a.post("/api/v1/collections/default/vectors", json={
            "records": [{"id": "n1", "content": "秘密のメモ"}]}).status_code == 200
    for key in (admin, user, tenant_key):
        with served.client(key) as client:
            for call in (lambda c: c.put(QUOTA.format("acme"), json={"chunks": 1_000_000}),
                         lambda c: c.patch(QUOTA.format("acme"), json={"chunks": None}),
                         lambda c: c.get(QUOTA.format("acme")), lambda c: c.get("/api/v1/admin/tenants")):
                body = problem(call(client), 403, "FORBIDDEN")
                assert "operator key" in body["detail"]
    assert records.get_quota("acme") == Quota(chunks=1)  # the tenant did not raise its own quota

    # No key, a wrong key, a revoked operator key: 401.
    with served.client(None) as anonymous:
        problem(anonymous.get("/api/v1/admin/tenants"), 401, "UNAUTHENTICATED")
    for wrong in ("bko_" + "x" * 43, "bk_" + "x" * 43):
        with served.client(wrong) as client:
            problem(client.put(QUOTA.format("acme"), json={"chunks": 9}), 401, "INVALID_API_KEY")
    second = _operator(served, "second")
    key_id = next(k.id for k in records.list_operator_keys() if k.label == "second")
    assert records.revoke_operator_key(key_id) and not records.revoke_operator_key(key_id)
    with served.client(second) as revoked:
        problem(revoked.put(QUOTA.format("acme"), json={"chunks": 9}), 401, "INVALID_API_KEY")
    assert records.get_quota("acme") == Quota(chunks=1)

    # The operator key reads no tenant's data: every tenant route refuses it.
    with served.client(operator) as ops:
        for response in (ops.get("/api/v1/documents"), ops.get("/api/v1/usage"), ops.get("/api/v1/collections"),
                         ops.post("/api/v1/search/keyword", json={"query": "秘密"}),
                         ops.post("/api/v1/collections/default/query", json={"text": "秘密", "topK": 5}),
                         ops.get("/api/v1/search/logs"), ops.delete("/api/v1/tenant/data")):
            body = problem(response, 403, "FORBIDDEN")
            assert "cannot read or change a tenant's data" in body["detail"]
        assert "秘密" not in ops.get(QUOTA.format("acme")).text


def test_the_admin_api_is_in_the_openapi_document(served: Served) -> None:
    with httpx.Client(base_url=served.url) as client:
        paths = client.get("/openapi.json").json()["paths"]
    quota = paths["/api/v1/admin/tenants/{name}/quota"]
    assert set(quota) == {"get", "put", "patch"}
    assert {"401", "403", "404", "422"} <= set(quota["put"]["responses"])
    assert quota["put"]["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("QuotaLimits")
    assert paths["/api/v1/admin/tenants"]["get"]["security"]  # a bearer key, as every /api/ route


def _cli(url: str, *args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, ["--db", url, *args, "--json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


def test_operator_keys_and_quotas_in_the_cli(store_url: str) -> None:
    code, made = _cli(store_url, "admin", "operator-keys", "create", "--label", "billing")
    assert code == 0 and made["operator_key"].startswith("bko_") and made["label"] == "billing", made
    code, listed = _cli(store_url, "admin", "operator-keys", "list")
    assert code == 0 and [(k["id"], k["label"], k["revoked"]) for k in listed["operator_keys"]] == [
        (made["id"], "billing", False)]
    assert "key_hash" not in json.dumps(listed) and made["operator_key"] not in json.dumps(listed)
    assert _cli(store_url, "admin", "tenants", "create", "acme")[0] == 0
    assert _cli(store_url, "admin", "tenants", "set-quota", "acme", "--chunks", "7")[0] == 0
    code, shown = _cli(store_url, "admin", "tenants", "quota", "acme")
    assert code == 0 and shown["quotas"]["chunks"] == {"limit": 7, "usage": 0}, shown
    assert shown["quotas"]["documents"] == {"limit": None, "usage": 0}
    code, missing = _cli(store_url, "admin", "tenants", "quota", "nobody")
    assert code != 0 and missing["error"]["type"] == "TenantNotFoundError", missing
    code, revoked = _cli(store_url, "admin", "operator-keys", "revoke", str(made["id"]))
    assert code == 0 and revoked == {"id": made["id"], "revoked": True}
    code, again = _cli(store_url, "admin", "operator-keys", "revoke", str(made["id"]))
    assert code != 0, again


def test_on_an_application_login_a_quota_is_set_only_with_an_operator_key(
        request: pytest.FixtureRequest, embedder: object) -> None:
    """The server's PostgreSQL login cannot read operator keys or write quotas itself; it sets a quota through
    ``bunko.operator_set_quota``, which refuses a hash that is not an active operator key's."""
    psycopg = pytest.importorskip("psycopg")
    from bunko.stores.postgres import PostgresBackend
    from bunko.stores.service import hash_key

    roles = request.getfixturevalue("logins")
    owner = PostgresBackend(roles.owner)
    try:
        records = owner.service_records()
        records.create_tenant("acme")
        operator, _ = records.create_operator_key("ops")
        tenant_key, _ = records.create_api_key("acme", admin=True)
    finally:
        owner.close()
    with psycopg.connect(roles.app, autocommit=True) as conn:
        for statement in ("SELECT * FROM bunko.operator_keys", "DELETE FROM bunko.operator_keys",
                          "INSERT INTO bunko.operator_keys (key_hash, prefix) VALUES ('x', 'bko_x')",
                          "INSERT INTO bunko.tenant_quotas (tenant_id, chunks) "
                          "SELECT id, 1 FROM bunko.tenants"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute(statement)
        for guess in ("", hash_key("bko_guess"), hash_key(tenant_key)):
            assert conn.execute("SELECT bunko.operator_set_quota(%s, 'acme', 1, 1, 1, 1, 1)",
                                (guess,)).fetchone()[0] == -1
            assert conn.execute("SELECT count(*) FROM bunko.operator_tenants(%s)", (guess,)).fetchone()[0] == 0
    with serve(roles.app, embedder, rate_limit=0) as live:
        with live.client(tenant_key) as tenant:
            problem(tenant.put(QUOTA.format("acme"), json={"chunks": 10**9}), 403, "FORBIDDEN")
        with live.client(operator) as ops:
            assert ops.put(QUOTA.format("acme"), json={"chunks": 3}).json()["quotas"]["chunks"] == {
                "limit": 3, "usage": 0}
            assert [t["name"] for t in ops.get("/api/v1/admin/tenants").json()["tenants"]] == ["acme"]
        assert live.engine.backend.service_records().get_quota("acme") == Quota(chunks=3)
