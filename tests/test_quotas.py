"""Per-tenant quotas (issue 26): set by the operator, enforced before work starts, shown beside the usage.

Every test runs on SQLite and on PostgreSQL. A tenant at its chunk quota is refused its next upload and its
next upsert with ``QUOTA_EXCEEDED`` (413: a size-like quota), its stored counts stay as they were and another
tenant goes on; concurrent writers cannot pass a quota together; a requests-per-minute quota answers 429.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bunko import Bunko
from bunko.cli import cli
from bunko.errors import ConfigError, NotFoundError, QuotaExceededError
from bunko.stores.quotas import Quota
from bunko.types import Document
from tests.served import Served, problem, serve

NOTICE = "避難所は北小学校の体育館です。非常用の水は一人一日3リットルを三日分備蓄します。"


@pytest.fixture(params=["sqlite", "postgresql"])
def served(request: pytest.FixtureRequest, tmp_path: Path, embedder: object) -> Iterator[Served]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else f"sqlite:///{tmp_path / 't.db'}"
    with serve(url, embedder, rate_limit=0) as live:
        yield live


def _quotas(client: Any) -> dict[str, dict[str, Any]]:
    response = client.get("/api/v1/usage")
    assert response.status_code == 200, response.text
    return dict(response.json()["quotas"])


def test_a_tenant_at_its_chunk_quota_is_refused_its_next_upload_and_upsert(served: Served) -> None:
    records = served.engine.backend.service_records()
    acme, globex = served.client(served.key("acme")), served.client(served.key("globex"))
    with acme, globex:
        made = acme.post("/api/v1/collections/default/vectors", json={
            "records": [{"id": "n1", "content": "一つ目のメモ"}, {"id": "n2", "content": "二つ目のメモ"}]})
        assert made.status_code == 200, made.text
        records.set_quota("acme", {"chunks": 2})
        before = _quotas(acme)
        assert before["chunks"] == {"limit": 2, "usage": 2} and before["documents"] == {"limit": None, "usage": 0}

        body = problem(acme.post("/api/v1/documents/upload", files={"file": ("notice.txt", NOTICE.encode())}),
                       413, "QUOTA_EXCEEDED")
        assert (body["quota"], body["limit"], body["usage"]) == ("chunks", 2, 2), body
        assert "chunks quota is 2 and it has 2; it is at that quota" in body["detail"], body
        assert acme.get("/api/v1/documents").json()["documents"] == []  # no job was queued
        body = problem(acme.post("/api/v1/collections/default/vectors", json={
            "records": [{"id": "n3", "content": "三つ目のメモ"}]}), 413, "QUOTA_EXCEEDED")
        assert (body["quota"], body["limit"], body["usage"]) == ("chunks", 2, 2), body
        assert _quotas(acme) == before  # nothing stored
        assert acme.post("/api/v1/collections/default/query", json={"text": "メモ", "topK": 10}).json()[
            "totalMatches"] == 2
        # Replacing a record does not grow the count: allowed at the quota.
        assert acme.post("/api/v1/collections/default/vectors", json={
            "records": [{"id": "n2", "content": "書き直したメモ"}]}).status_code == 200

        # Another tenant is not limited by acme's quota.
        uploaded = globex.post("/api/v1/documents/upload?wait=true", files={"file": ("notice.txt", NOTICE.encode())})
        assert uploaded.status_code == 200, uploaded.text
        assert globex.post("/api/v1/collections/default/vectors", json={
            "records": [{"id": "g1", "content": "globex のメモ"}]}).status_code == 200
        assert _quotas(globex)["chunks"]["limit"] is None and _quotas(globex)["chunks"]["usage"] >= 2
        assert records.get_quota("globex") == Quota()

        # Raised by the operator: the same upload goes through.
        records.set_quota("acme", {"chunks": 100})
        assert acme.post("/api/v1/documents/upload?wait=true",
                         files={"file": ("notice.txt", NOTICE.encode())}).status_code == 200


def test_the_upload_workers_ingest_refuses_a_document_that_would_pass_the_quota(served: Served) -> None:
    """Below its quota at upload time, past it with the document: the worker's write is refused whole."""
    key = served.key("acme")
    served.engine.backend.service_records().set_quota("acme", {"chunks": 1})
    long_text = "\n\n".join(f"第{n}条 {NOTICE}" for n in range(60))
    with served.client(key) as acme:
        body = problem(acme.post("/api/v1/documents/upload?wait=true",
                                 files={"file": ("long.txt", long_text.encode())}), 413, "QUOTA_EXCEEDED")
        job = acme.get(f"/api/v1/documents/{body['documentId']}").json()
        assert job["status"] == "failed" and job["error"]["code"] == "QUOTA_EXCEEDED", job
        assert _quotas(acme)["chunks"] == {"limit": 1, "usage": 0}
        assert acme.post("/api/v1/search/keyword", json={"query": "避難所"}).json()["results"] == []


def test_an_upload_past_the_uploads_per_day_quota_is_429_before_its_job(served: Served) -> None:
    key = served.key("acme")
    size = len(NOTICE.encode())
    served.engine.backend.service_records().set_quota("acme", {"upload_bytes_per_day": size + size // 2})
    with served.client(key) as acme:
        assert acme.post("/api/v1/documents/upload?wait=true",
                         files={"file": ("a.txt", NOTICE.encode())}).status_code == 200
        body = problem(acme.post("/api/v1/documents/upload", files={"file": ("b.txt", NOTICE.encode())}),
                       429, "QUOTA_EXCEEDED")
        assert (body["quota"], body["limit"], body["usage"]) == ("upload_bytes_per_day", size + size // 2, size)
        assert [d["filename"] for d in acme.get("/api/v1/documents").json()["documents"]] == ["a.txt"]
        assert _quotas(acme)["upload_bytes_per_day"] == {"limit": size + size // 2, "usage": size}


def test_the_ingest_and_the_upsert_of_the_library_refuse_a_write_that_passes_a_quota(
        store_url: str, embedder: object) -> None:
    with Bunko(store_url, embedder=embedder) as engine:
        records = engine.backend.service_records()
        acme = engine.tenant("acme")
        acme.upsert("notes", [{"id": "a", "content": "最初のメモ"}])
        records.set_quota("acme", {"chunks": 2, "documents": 5})
        acme.upsert("notes", [{"id": "b", "content": "二つ目"}])  # up to the quota: allowed
        with pytest.raises(QuotaExceededError) as refused:
            acme.upsert("notes", [{"id": "c", "content": "三つ目"}, {"id": "d", "content": "四つ目"}])
        assert (refused.value.quota, refused.value.limit, refused.value.usage) == ("chunks", 2, 2)
        with pytest.raises(QuotaExceededError):
            acme.add_document(Document(NOTICE * 3, {"source": "notice.txt"}), "notes")
        status = acme.quota()
        assert (status.chunks, status.documents) == (2, 0)  # nothing half written
        assert acme.store.count("notes") == 2

        records.set_quota("acme", {"documents": 0}, clear={"chunks"})
        with pytest.raises(QuotaExceededError) as refused:
            acme.add_document(Document(NOTICE, {"source": "notice.txt"}), "notes")
        assert refused.value.quota == "documents" and not refused.value.rate_like
        assert acme.quota().documents == 0

        # Bytes of stored chunk text (UTF-8): "三つ目" is 9 bytes.
        held = acme.quota().bytes
        records.set_quota("acme", {"bytes": held + 9}, clear={"documents"})
        with pytest.raises(QuotaExceededError) as refused:
            acme.upsert("notes", [{"id": "c", "content": "三つ目だよ"}])
        assert (refused.value.quota, refused.value.usage) == ("bytes", held)
        acme.upsert("notes", [{"id": "c", "content": "三つ目"}])
        assert acme.quota().bytes == held + 9

        other = engine.tenant("globex")
        other.add_document(Document(NOTICE, {"source": "notice.txt"}), "notes")
        assert other.quota().documents == 1


def test_concurrent_writers_cannot_pass_a_quota_together(store_url: str, embedder: object) -> None:
    """Eight writers, each to its own collection (no row in common), one quota: exactly the room is used."""
    with Bunko(store_url, embedder=embedder) as engine:
        acme = engine.tenant("acme")
        for n in range(8):
            acme.upsert(f"notes{n}", [{"id": f"seed{n}", "content": "種"}])
        engine.backend.service_records().set_quota("acme", {"chunks": 11})
        vector = acme.store.chunk_vectors("notes0", ["seed0"])["seed0"].tolist()
        start = threading.Barrier(8)
        outcomes: list[str] = []

        def write(n: int) -> None:
            start.wait()
            try:
                acme.upsert(f"notes{n}", [{"id": f"r{n}", "content": f"メモ {n}", "vector": vector}])
                outcomes.append("stored")
            except QuotaExceededError:
                outcomes.append("refused")

        threads = [threading.Thread(target=write, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(outcomes) == ["refused"] * 5 + ["stored"] * 3
        assert sum(acme.store.count(f"notes{n}") for n in range(8)) == 11 == acme.quota().chunks


def test_a_requests_per_minute_quota_counts_every_key_of_the_tenant(
        served: Served, monkeypatch: pytest.MonkeyPatch) -> None:
    records = served.engine.backend.service_records()
    alice, bob = served.key("acme", "alice"), served.key("acme", "bob")
    other = served.key("globex")
    records.set_quota("acme", {"requests_per_minute": 3})
    now = [(time.time() // 60) * 60 + 30.0]  # half a minute in, with no earlier minute counted
    monkeypatch.setattr(time, "time", lambda: now[0])
    with served.client(alice) as a, served.client(bob) as b, served.client(other) as g:
        assert [c.get("/api/v1/collections").status_code for c in (a, b, a)] == [200, 200, 200]
        refused = b.get("/api/v1/collections")
        body = problem(refused, 429, "QUOTA_EXCEEDED")
        assert (body["quota"], body["limit"]) == ("requests_per_minute", 3), body
        assert int(refused.headers["Retry-After"]) >= 1
        assert [g.get("/api/v1/collections").status_code for _ in range(5)] == [200] * 5  # globex: no quota
        now[0] += 120.0  # two minutes on, the budget is back
        assert a.get("/api/v1/collections").status_code == 200


def _cli(url: str, *args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(cli, ["--db", url, *args, "--json"], catch_exceptions=False)
    return result.exit_code, json.loads(result.stdout)


def test_set_quota_round_trip_in_the_cli(store_url: str) -> None:
    assert _cli(store_url, "admin", "tenants", "create", "acme")[0] == 0
    code, data = _cli(store_url, "admin", "tenants", "set-quota", "acme", "--chunks", "10", "--documents", "3",
                      "--uploads-per-day", "1000000", "--requests-per-minute", "60")
    assert code == 0, data
    assert data["quota"] == {"documents": 3, "chunks": 10, "bytes": None, "upload_bytes_per_day": 1000000,
                             "requests_per_minute": 60}
    code, data = _cli(store_url, "admin", "tenants", "set-quota", "acme", "--bytes", "5000", "--clear", "chunks",
                      "--clear", "requests-per-minute")
    assert code == 0 and data["quota"] == {"documents": 3, "chunks": None, "bytes": 5000,
                                           "upload_bytes_per_day": 1000000, "requests_per_minute": None}, data
    code, data = _cli(store_url, "usage", "--tenant", "acme")
    assert code == 0 and data["quotas"]["documents"] == {"limit": 3, "usage": 0}, data
    assert data["quotas"]["chunks"] == {"limit": None, "usage": 0}
    code, data = _cli(store_url, "admin", "tenants", "set-quota", "nobody", "--chunks", "1")
    assert code != 0 and data["error"]["type"] == "TenantNotFoundError", data
    code, data = _cli(store_url, "admin", "tenants", "set-quota", "acme", "--chunks", "1", "--clear", "chunks")
    assert code != 0 and "both set and cleared" in data["error"]["message"], data


def test_quota_values_are_checked(store_url: str) -> None:
    with Bunko(store_url) as engine:
        records = engine.backend.service_records()
        records.create_tenant("acme")
        with pytest.raises(ConfigError):
            records.set_quota("acme", {"chunks": -1})
        with pytest.raises(ConfigError):
            records.set_quota("acme", {"pages": 3})
        with pytest.raises(NotFoundError):
            records.set_quota("nobody", {"chunks": 1})
        assert records.get_quota("acme") == Quota()


def test_quotas_and_request_windows_stay_in_their_tenant(store_url: str, embedder: object) -> None:
    """Isolation of the new tables: a tenant's session reads its own quota and request windows only, and on
    PostgreSQL the application role cannot change a quota."""
    with Bunko(store_url, embedder=embedder) as engine:
        records = engine.backend.service_records()
        for name, limit in (("acme", 5), ("globex", 7)):
            records.create_tenant(name)
            records.set_quota(name, {"chunks": limit, "requests_per_minute": 100})
            records.tenant_rate_count(name, 1000)
        records.tenant_rate_count("acme", 1000)
        assert records.get_quota("acme").chunks == 5 and records.get_quota("globex").chunks == 7
        assert records.tenant_rate_count("acme", 1000) == (3, 0)
        assert records.tenant_rate_count("globex", 1000) == (2, 0)
        store = engine.backend.for_tenant("acme")
        with store.session() as (conn, _):  # no WHERE: what the tenant's transaction may see at all
            seen = store.run(conn, "SELECT count(*) FROM tenant_quotas").fetchone()[0]
            windows = store.run(conn, "SELECT count(*) FROM tenant_rate_windows").fetchone()[0]
        if engine.backend.scheme.startswith("postgres"):
            assert (seen, windows) == (1, 1)
            with pytest.raises(Exception, match="permission denied"), store.session(write=True) as (conn, pk):
                store.run(conn, "UPDATE tenant_quotas SET chunks = NULL WHERE tenant_id = ?", (pk,))
            assert records.get_quota("acme").chunks == 5
        else:  # one file, no row security: the statements of a tenant say WHERE tenant_id
            assert (seen, windows) == (2, 2)
