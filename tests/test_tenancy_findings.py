"""The findings of the attack run on many tenants and users (issue 26), each as it was probed.

1. A user's key replaced or deleted another user's records (chunks) of the same tenant through
   ``POST /collections/{name}/vectors`` and workflow ``vector-upsert`` / ``vector-delete`` steps.
2. A NUL character in a memory's metadata or subject, or in workflow-fed text and metadata, answered 500 on
   PostgreSQL (and was stored on SQLite).
3. Memory user and session ids accepted a trailing newline (``re.match`` with ``$``).
4. A failed import left what it wrote (see tests/test_portability.py for the import itself).
5. MCP over HTTP had no rate limit, and the REST limiter's fixed minute let twice the limit through
   around a minute boundary.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bunko import Bunko
from bunko.errors import ArchiveError, InvalidMemoryError
from bunko.memory import check_session, check_user
from bunko.portability import FILES, MANIFEST, export_tenant, import_tenant
from bunko.types import ConversationTurn
from tests.conftest import ROOT
from tests.served import Served, problem, serve

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

NOTICE = "避難所は北小学校の体育館です。非常用の水は一人一日3リットルを三日分備蓄します。"


@pytest.fixture(params=["sqlite", "postgresql"])
def served(request: pytest.FixtureRequest, tmp_path: Path, embedder: object) -> Iterator[Served]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else f"sqlite:///{tmp_path / 't.db'}"
    with serve(url, embedder, rate_limit=0) as live:
        yield live


def _workflow(client: httpx.Client, block: str, input: dict[str, Any]) -> httpx.Response:
    return client.post("/api/v1/workflows/run", json={
        "workflow": {"steps": [{"block": block, "config": {"collection": "default"}}]}, "input": input})


def _search(client: httpx.Client, query: str = "避難所 体育館") -> list[dict[str, Any]]:
    response = client.post("/api/v1/search/keyword", json={"query": query})
    assert response.status_code == 200, response.text
    return list(response.json()["results"])


# -- finding 1: records belong to their document's uploader, or to the user who created them --------------
def test_a_user_key_changes_only_its_own_users_records(served: Served) -> None:
    alice, bob = served.client(served.key("acme", "alice")), served.client(served.key("acme", "bob"))
    tenant, admin = served.client(served.key("acme")), served.client(served.key("acme", "root", admin=True))
    with alice, bob, tenant, admin:
        uploaded = alice.post("/api/v1/documents/upload?wait=true", files={"file": ("notice.txt", NOTICE.encode())})
        assert uploaded.status_code == 200, uploaded.text
        document = uploaded.json()["documentId"]
        [hit] = [h for h in _search(bob) if h["documentId"] == document][:1]  # any user reads a chunk id
        chunk = hit["id"]

        # Bob replaces, deletes or attaches to Alice's document: refused, nothing changed.
        body = problem(bob.post("/api/v1/collections/default/vectors", json={
            "records": [{"id": chunk, "content": "ボブが書き換えた"}]}), 403, "FORBIDDEN")
        assert chunk in body["detail"]
        problem(bob.post("/api/v1/collections/default/vectors", json={
            "records": [{"content": "ボブの追記", "documentId": document}]}), 403, "FORBIDDEN")
        for block, input in (("vector-delete", {"ids": [chunk]}),
                             ("vector-upsert", {"documents": [{"id": chunk, "content": "ボブが書き換えた"}]})):
            body = problem(_workflow(bob, block, input), 403, "FORBIDDEN")
            assert body["error"]["block"] == block
        [again] = [h for h in _search(alice) if h["id"] == chunk]
        assert again["content"] == hit["content"] and again["documentName"] == "notice.txt"

        # Bob's own record is his: he may change and delete it, Alice may not.
        made = bob.post("/api/v1/collections/default/vectors", json={"records": [{"id": "bob-1",
                                                                                   "content": "ボブのメモ"}]})
        assert made.status_code == 200, made.text
        problem(alice.post("/api/v1/collections/default/vectors", json={
            "records": [{"id": "bob-1", "content": "アリスが書き換えた"}]}), 403, "FORBIDDEN")
        problem(_workflow(alice, "vector-delete", {"ids": ["bob-1", "unknown"]}), 403, "FORBIDDEN")
        assert bob.post("/api/v1/collections/default/vectors", json={
            "records": [{"id": "bob-1", "content": "ボブのメモ 2"}]}).status_code == 200
        done = _workflow(bob, "vector-delete", {"ids": ["bob-1", "unknown"]})
        assert done.status_code == 200 and done.json()["output"]["deleted_count"] == 1, done.text

        # Alice may change the records of her own document; tenant and admin keys any record.
        assert alice.post("/api/v1/collections/default/vectors", json={
            "records": [{"id": chunk, "content": NOTICE}]}).status_code == 200
        assert tenant.post("/api/v1/collections/default/vectors", json={
            "records": [{"id": chunk, "content": NOTICE + " (tenant)"}]}).status_code == 200
        done = _workflow(admin, "vector-delete", {"ids": [chunk]})
        assert done.status_code == 200 and done.json()["output"]["deleted_count"] == 1, done.text


# -- finding 2: NUL characters are 422 naming the field, on both stores --------------------------------------
def test_nul_characters_in_memories_and_workflow_text_are_422_naming_the_field(served: Served) -> None:
    with served.client(served.key("acme", "alice")) as client:
        for memory, field in (({"content": "水", "metadata": {"note": "a\x00b"}}, "metadata.note"),
                              ({"content": "水", "subject": "ma\x00th"}, "subject")):
            body = problem(client.post("/api/v1/memories", json={"memories": [memory]}), 422, "VALIDATION_ERROR")
            assert body["field"] == field and "NUL" in body["detail"], body
        assert client.get("/api/v1/memories").json()["memories"] == []

        loader = {"block": "doc-loader", "config": {"source_type": "text", "metadata": {"author": "x\x00y"}}}
        upsert = {"block": "vector-upsert", "config": {"collection": "flow"}}
        for steps, input, field in (([loader, upsert], {"text": "避難所の案内"}, "metadata.author"),
                                    ([{**loader, "config": {"source_type": "text"}}, upsert], {"text": "避難\x00所"},
                                     "content")):
            body = problem(client.post("/api/v1/workflows/run", json={"workflow": {"steps": steps}, "input": input}),
                           422, "VALIDATION_ERROR")
            assert body["error"]["block"] == "vector-upsert" and field in body["detail"], body
        assert client.get("/api/v1/collections").json()["collections"] == []


# -- finding 3: a trailing newline is not part of a user or session id --------------------------------------
def test_memory_user_and_session_ids_refuse_a_trailing_newline(tmp_path: Path, embedder: object) -> None:
    for bad in ("u\n", "u\n\n", "\nu"):
        with pytest.raises(InvalidMemoryError):
            check_user(bad)
        with pytest.raises(InvalidMemoryError):
            check_session(bad)
    assert check_user("u") == "u" and check_session("s-1") == "s-1"
    url = f"sqlite:///{tmp_path / 'm.db'}"
    with Bunko(url, embedder=embedder) as engine:
        memory = engine.tenant("acme").memory
        with pytest.raises(InvalidMemoryError):
            memory.add(["水"], user_id="alice\n")
        with pytest.raises(InvalidMemoryError):
            memory.add(["水"], user_id="alice", session_id="s-1\n")
        if importlib.util.find_spec("mcp") is not None:  # `bunko mcp --user` (the optional extra)
            from bunko.integrations.mcp_server import build_server

            with pytest.raises(InvalidMemoryError):
                build_server(engine, user_id="alice\n")
    env = {"PYTHONPATH": str(ROOT / "src"), "BUNKO_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}
    for option, value, says in (("--user", "alice\n", "invalid user id"), ("--session", "s-1\n", "invalid session id")):
        extra = [] if option == "--user" else ["--user", "alice"]
        done = subprocess.run([sys.executable, "-m", "bunko", "--db", url, "memory", "add", "水", option, value,
                               *extra, "--json"], capture_output=True, text=True, timeout=300, env=env)
        assert done.returncode != 0 and says in done.stdout + done.stderr, done.stdout + done.stderr
    with Bunko(url, embedder=embedder) as engine:  # nothing was stored
        assert engine.tenant("acme").memory.list("alice") == []


# -- finding 4: an import that fails verification writes nothing --------------------------------------------
def _edit_export(folder: Path) -> None:
    """Change one chunk's text and recompute the file checksums (the data digest stays the export's)."""
    import hashlib

    documents = folder / FILES["documents"]
    lines = documents.read_text(encoding="utf-8").splitlines()
    record = json.loads(lines[0])
    record["chunks"][0]["content"] = "書き換えられた本文"
    lines[0] = json.dumps(record, ensure_ascii=False, separators=(",", ":"))
    data = ("\n".join(lines) + "\n").encode("utf-8")
    documents.write_bytes(data)
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    manifest["files"][FILES["documents"]].update(sha256=hashlib.sha256(data).hexdigest(), bytes=len(data))
    (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")


def test_an_edited_export_with_recomputed_checksums_imports_nothing(
        store_url: str, tmp_path: Path, embedder: object) -> None:
    with Bunko(store_url, embedder=embedder) as engine:
        acme = engine.tenant("acme")
        notice = tmp_path / "notice.txt"
        notice.write_text(NOTICE, encoding="utf-8")
        acme.ingest([notice], "docs")
        acme.upsert("notes", [{"content": "メモ", "id": "note-1"}])
        export_tenant(engine.backend.for_tenant("acme"), tmp_path / "export")
        _edit_export(tmp_path / "export")
        target = engine.backend.for_tenant("target")
        with pytest.raises(ArchiveError, match="digest"):
            import_tenant(target, tmp_path / "export")
        assert target.list_collections() == [] and target.conversations.ids() == []


def test_an_import_that_fails_midway_takes_back_what_it_wrote(
        store_url: str, tmp_path: Path, embedder: object) -> None:
    with Bunko(store_url, embedder=embedder) as engine:
        acme = engine.tenant("acme")
        notice = tmp_path / "notice.txt"
        notice.write_text(NOTICE, encoding="utf-8")
        acme.ingest([notice], "docs")
        acme.upsert("notes", [{"content": "acme のメモ", "id": "note-1"}])
        acme.store.conversations.append("chat-1", [ConversationTurn("user", "水は何日分？")])
        acme.memory.add(["繰り上がりの足し算が苦手"], user_id="child-a")
        export_tenant(engine.backend.for_tenant("acme"), tmp_path / "export")
        target = engine.tenant("target")
        target.upsert("notes", [{"content": "target のメモ", "id": "note-1"}])  # the same id, another text
        before = [(h.chunk_id, h.content) for h in target.query("notes", text="メモ", top_k=5)]
        with pytest.raises(ArchiveError, match="record 'note-1' exists"):
            import_tenant(target.store, tmp_path / "export")
        assert [c.name for c in target.collections()] == ["notes"]  # "docs" was written, then taken back
        assert [(h.chunk_id, h.content) for h in target.query("notes", text="メモ", top_k=5)] == before
        assert target.store.conversations.ids() == [] and target.memory.list("child-a") == []
        again = import_tenant(engine.backend.for_tenant("fresh"), tmp_path / "export")
        assert again.verified and again.counts["documents"] == 1
        assert import_tenant(engine.backend.for_tenant("fresh"), tmp_path / "export").verified  # the same again


def test_bunko_import_without_tenant_asks_before_writing_into_a_tenant_with_data(
        tmp_path: Path, embedder: object) -> None:
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    with Bunko(url, embedder=embedder) as engine:
        engine.tenant("acme").upsert("notes", [{"content": "acme のメモ", "id": "note-1"}])
        export_tenant(engine.backend.for_tenant("acme"), tmp_path / "export")
        engine.tenant("acme").upsert("other", [{"content": "後から足したメモ", "id": "note-2"}])
    env = {"PYTHONPATH": str(ROOT / "src"), "BUNKO_HOME": str(tmp_path / "home"), "PATH": "/usr/bin:/bin"}

    def bunko(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "bunko", "--db", url, *args, "--json"], capture_output=True,
                              text=True, timeout=300, env=env)

    refused = bunko("import", str(tmp_path / "export"))
    assert refused.returncode != 0, refused.stdout
    assert json.loads(refused.stdout)["error"]["type"] == "ConfirmationRequired"
    assert "--tenant" in json.loads(refused.stdout)["error"]["message"]
    named = bunko("import", str(tmp_path / "export"), "--tenant", "acme-copy")
    assert named.returncode == 0 and json.loads(named.stdout)["tenant"] == "acme-copy", named.stdout + named.stderr
    confirmed = bunko("import", str(tmp_path / "export"), "--yes")  # the same records again: nothing changes
    assert confirmed.returncode == 0 and json.loads(confirmed.stdout)["verified"], confirmed.stdout + confirmed.stderr


def test_taking_back_a_memory_store_stays_in_its_tenant(store_url: str, embedder: object) -> None:
    """The writer's undo drops a memory store it created (SQLMemories.drop_store): the tenant's only."""
    with Bunko(store_url, embedder=embedder) as engine:
        for tenant in ("acme", "other"):
            engine.tenant(tenant).memory.add([f"{tenant} のメモ"], user_id="u1")
        assert engine.backend.for_tenant("acme").memories().drop_store("memories") == 1
        assert engine.tenant("acme").memory.list("u1") == []
        assert [m["content"] for m in engine.tenant("other").memory.list("u1")] == ["other のメモ"]
        assert engine.backend.for_tenant("nobody").memories().drop_store("memories") == 0


# -- finding 5: the REST limit slides (MCP over HTTP: tests/test_memory_mcp.py) -------------------------------
def test_the_rest_limit_holds_across_a_minute_boundary(store_url: str, embedder: object,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A fixed one-minute window let the limit through just before a minute ends and again just after."""
    with serve(store_url, embedder, rate_limit=5) as live, \
            live.client(live.key("acme")) as client, live.client(live.key("acme", "bob")) as other:
        now = [(time.time() // 60 + 1) * 60 - 5.0]  # 5 s before a minute ends
        monkeypatch.setattr(time, "time", lambda: now[0])
        for _ in range(5):
            assert client.get("/api/v1/collections").status_code == 200
        now[0] += 10.0  # 5 s into the next minute: the last 60 s hold 5 requests already
        refused = client.get("/api/v1/collections")
        problem(refused, 429, "RATE_LIMITED")
        # The next request is allowed when 5 x (1 - t / 60) + 2 <= 5 (the refused one counts): 24 s into the minute.
        assert refused.headers["Retry-After"] == "19"
        assert other.get("/api/v1/collections").status_code == 200  # another key has its own budget
        now[0] += 19.0
        assert client.get("/api/v1/collections").status_code == 200


# -- fair scheduling: a tenant's backlog of uploads delays only itself (claims: tests/test_jobs_queue.py) ------
@pytest.mark.parametrize("kind", ["sqlite", "postgresql"])
def test_an_upload_behind_another_tenants_300_finishes_before_their_20th(
        kind: str, request: pytest.FixtureRequest, tmp_path: Path, embedder: object) -> None:
    import asyncio

    from bunko.server.worker import Worker

    url = request.getfixturevalue("pg_url") if kind == "postgresql" else f"sqlite:///{tmp_path / 'q.db'}"
    with serve(url, embedder, rate_limit=0, job_workers=0) as live, \
            live.client(live.key("acme", "alice")) as acme, live.client(live.key("globex", "bob")) as globex:
        for i in range(300):  # queued while no worker runs
            queued = acme.post("/api/v1/documents/upload", files={"file": (f"n{i:03d}.txt", f"備蓄メモ {i}".encode())})
            assert queued.status_code == 202, queued.text
        queued = globex.post("/api/v1/documents/upload", files={"file": ("one.txt", NOTICE.encode())})
        assert queued.status_code == 202, queued.text
        # One worker, one job at a time, 20 jobs: globex's must be among them.
        worker = Worker(live.engine, worker_id="w1", concurrency=1)
        asyncio.run(worker.run(asyncio.Event(), max_jobs=20))
        done = globex.get(f"/api/v1/documents/{queued.json()['documentId']}").json()
        assert done["status"] == "completed", done
        assert acme.get("/api/v1/documents", params={"limit": 1}).json()["totalCount"] == 300
        finished = acme.get("/api/v1/documents", params={"status": "completed", "limit": 1}).json()["totalCount"]
        assert finished == 19  # globex's job went second; acme's 20th waits
