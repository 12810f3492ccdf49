"""Faults of a real deployment, made for real (``bunko.testing.faults``): the database unreachable, restarted or out
of connections; a full disk under SQLite, the spool and PostgreSQL; a hosted provider down.

What each must show: the failure is a typed error (503 ``STORE_UNAVAILABLE`` for a moment's database failure,
507 ``STORAGE_FULL`` for a full disk, a provider error) only while the fault lasts; afterwards the same
process answers again (no restart of bunko, no poisoned pooled connection), acknowledged uploads complete,
and nothing is half written. Tests wait for events (the proxy's counters, crash points); the timeouts only
catch hangs.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from bunko import Bunko, Tenant
from bunko.embedders import UniversalSentenceEncoderEmbedder
from bunko.errors import (
    BunkoError,
    LLMProviderError,
    LLMTimeoutError,
    ProviderFailure,
    StorageFullError,
    TransientStoreError,
)
from bunko.server.worker import Worker
from bunko.stores.service import Job
from bunko.testing.faults import FaultProxy, FaultUnavailable, fill, tmpfs, unix_socket_of
from bunko.testing.hooks import paused_at
from bunko.testing.postgres import TemporaryPostgres

from .conftest import EXAMPLES
from .pg import PostgresServer
from .provider_fakes import OpenAIFake
from .served import problem, serve

HANG = 300  # seconds: only catches a hang
TEXT = "避難所には最低3日分の水を備えておきます。非常食も用意します。"


@pytest.fixture()
def proxy(pg_server: PostgresServer) -> Iterator[FaultProxy]:
    with FaultProxy(unix_socket_of(pg_server.admin_url)) as p:
        yield p


@pytest.fixture()
def quick_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool that gives up waiting for a connection after 5 s (the default is 10 s): faster failures."""
    monkeypatch.setenv("BUNKO_PG_POOL_TIMEOUT", "5")
    monkeypatch.setenv("BUNKO_PG_CONNECT_TIMEOUT", "2")


def _search(client: httpx.Client) -> httpx.Response:
    return client.post("/api/v1/search/hybrid", json={"query": "水は何日分？", "collection": "bousai", "limit": 3})


def _chat(client: httpx.Client) -> tuple[int, list[dict[str, Any]], str]:
    """A question with the extractive answer: the status, the SSE events, and the body when it is not a stream."""
    body = {"message": "水は何日分？", "collection": "bousai"}
    with client.stream("POST", "/api/v1/chat/rag", json=body) as response:
        if not response.headers["content-type"].startswith("text/event-stream"):
            return response.status_code, [], response.read().decode()
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
        return response.status_code, events, ""


def _chat_fails_unavailable(client: httpx.Client) -> None:
    status, events, body = _chat(client)
    if events:  # the stream had begun: its last event says what went wrong
        assert events[-1].get("type") == "error" or "error" in events[-1], events[-1]
        assert "STORE_UNAVAILABLE" in json.dumps(events[-1]), events[-1]
    else:
        assert status == 503 and "STORE_UNAVAILABLE" in body, (status, body)


def _answers_again(client: httpx.Client) -> int:
    """Search until the answer is 200 (each one before it a typed 503); returns how many 503s came first."""
    deadline = time.monotonic() + HANG
    failed = 0
    while (response := _search(client)).status_code != 200:
        problem(response, 503, "STORE_UNAVAILABLE")
        failed += 1
        assert time.monotonic() < deadline
    return failed


def _chat_answers(client: httpx.Client) -> None:
    status, events, body = _chat(client)
    assert status == 200 and events, (status, body)
    done = events[-1]
    assert "response" in done and done["response"]["sources"], done


# -- PostgreSQL unreachable, dropped, restarted ---------------------------------------------------------------
def test_searches_and_chats_fail_only_while_the_database_is_unreachable(
        pg_url: str, proxy: FaultProxy, embedder: UniversalSentenceEncoderEmbedder, quick_pool: None) -> None:
    """Every connection reset and new ones refused: searches and chats answer 503 STORE_UNAVAILABLE (after the
    pool's timeout, not a hang); once connections go through again the same server answers, the first request
    after already, without a restart."""
    with serve(proxy.url(pg_url), embedder) as served:
        served.engine.tenant("acme").ingest([EXAMPLES], "bousai")
        client = served.client(served.key("acme"))
        assert _search(client).status_code == 200
        _chat_answers(client)
        proxy.down()
        for _ in range(2):
            down = _search(client)
            problem(down, 503, "STORE_UNAVAILABLE")
            assert down.headers["retry-after"] == "1"
            _chat_fails_unavailable(client)
        proxy.up()
        assert _search(client).status_code == 200
        _chat_answers(client)
        assert proxy.refused > 0 and proxy.dropped > 0


def test_connections_dropped_under_an_open_pool_are_replaced_not_reused(
        pg_url: str, proxy: FaultProxy, embedder: UniversalSentenceEncoderEmbedder, quick_pool: None) -> None:
    """Every pooled connection reset at once (a failover) while the server stays up: no request sees a poisoned
    connection; the pool opens new ones."""
    with serve(proxy.url(pg_url), embedder) as served:
        served.engine.tenant("acme").ingest([EXAMPLES], "bousai")
        client = served.client(served.key("acme"))
        for _ in range(3):
            assert _search(client).status_code == 200
            before = proxy.accepted
            assert proxy.drop() > 0
            for _ in range(3):
                assert _search(client).status_code == 200
                _chat_answers(client)
            assert proxy.accepted > before  # new connections, not the dead ones


def test_an_exhausted_pool_is_a_typed_error_not_a_hang(
        pg_url: str, proxy: FaultProxy, embedder: UniversalSentenceEncoderEmbedder, quick_pool: None,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pooled connection busy (pool_max 1, held by the test): a search waits the pool's timeout and
    answers 503; when the connection comes back the next one answers."""
    monkeypatch.setenv("BUNKO_PG_POOL_MIN", "1")
    monkeypatch.setenv("BUNKO_PG_POOL_MAX", "1")
    with serve(proxy.url(pg_url), embedder) as served:
        served.engine.tenant("acme").ingest([EXAMPLES], "bousai")
        client = served.client(served.key("acme"))
        assert _search(client).status_code == 200
        with served.engine.backend.connection():  # the only connection, held
            started = time.monotonic()
            problem(_search(client), 503, "STORE_UNAVAILABLE")
            assert time.monotonic() - started < HANG
        assert _search(client).status_code == 200


def test_a_server_that_accepts_but_never_answers_is_a_typed_error(
        pg_url: str, proxy: FaultProxy, embedder: UniversalSentenceEncoderEmbedder, quick_pool: None) -> None:
    """New connections are accepted and left unanswered (a stalled failover) after the open ones are reset:
    requests fail with 503 instead of waiting for ever; released, the server answers again."""
    with serve(proxy.url(pg_url), embedder) as served:
        served.engine.tenant("acme").ingest([EXAMPLES], "bousai")
        client = served.client(served.key("acme"))
        assert _search(client).status_code == 200
        proxy.hold()
        proxy.drop()
        problem(_search(client), 503, "STORE_UNAVAILABLE")
        proxy.release()
        _answers_again(client)  # the pool's next attempt to connect goes through


def _queued_upload(tenant: Tenant, job_id: str = "up1") -> None:
    jobs = tenant.jobs
    staged = jobs.staging()
    staged.mkdir(parents=True)
    (staged / "a.txt").write_text(TEXT)
    jobs.create(Job(job_id, "docs", "a.txt", len(TEXT.encode()), lease_until=0.0), staged=staged)


def test_a_workers_job_outlives_a_long_database_outage(
        pg_url: str, proxy: FaultProxy, tmp_path: Path, embedder: UniversalSentenceEncoderEmbedder,
        quick_pool: None) -> None:
    """The database goes away as the worker starts writing and stays away through more failed tries than a
    brief failure needs: the worker keeps the job (backing off) and completes it once the database is back."""
    engine = Bunko(proxy.url(pg_url), embedder=embedder)
    try:
        spool = tmp_path / "spool"
        tenant = Tenant(engine, engine.backend.for_tenant("acme"), spool=spool)
        _queued_upload(tenant)
        worker = Worker(engine, spool=spool, worker_id="w1", store_backoff=0.05)
        claim = worker.claim()
        assert claim is not None
        ended: list[Job | None] = []
        with paused_at("ingest.prepared") as pause:  # read and embedded, nothing written yet
            thread = threading.Thread(target=lambda: ended.append(asyncio.run(worker.process(claim))))
            thread.start()
            assert pause.reached.wait(HANG)
            proxy.down()
            pause.go.set()
            deadline = time.monotonic() + HANG
            while worker.store_retries < 6:  # an outage longer than a few tries
                assert thread.is_alive(), ended
                assert time.monotonic() < deadline
                time.sleep(0.05)
            proxy.up()
            thread.join(HANG)
        assert ended and ended[0] is not None, ended
        assert (ended[0].status, ended[0].error_code) == ("completed", None)
        job = tenant.jobs.get("up1")
        assert job.status == "completed" and job.chunk_count > 0
        assert [d.id for d in tenant.documents("docs")] == ["up1"]
    finally:
        engine.close()


def test_transient_store_error_is_what_a_lost_database_raises_in_the_library(
        pg_url: str, proxy: FaultProxy, embedder: UniversalSentenceEncoderEmbedder, quick_pool: None) -> None:
    """The library (no HTTP) sees the same typed error, and the same engine searches again afterwards."""
    with Bunko(proxy.url(pg_url), embedder=embedder) as engine:
        tenant = engine.tenant("acme")
        tenant.ingest([EXAMPLES], "bousai")
        assert tenant.search("水", collection="bousai")
        proxy.down()
        with pytest.raises(TransientStoreError):
            tenant.search("水", collection="bousai")
        proxy.up()
        assert tenant.search("水", collection="bousai")


# Run in a network namespace of its own (tests/test_faults.py: the loopback silenced there only).
_SILENT_CLIENT = """
import json, os, time
from bunko.errors import BunkoError
from bunko.stores import open_backend
from bunko.testing.faults import FaultProxy, silent_loopback, unix_socket_of

def attempt(store):
    try:
        return [c.name for c in store.list_collections()]
    except BunkoError as exc:
        return exc.code

url = os.environ["SILENT_PG_URL"]
out = {}
with FaultProxy(unix_socket_of(url)) as proxy:
    backend = open_backend(proxy.url(url))
    store = backend.for_tenant("acme")
    out["before"] = attempt(store)
    proxy.blackhole()
    with silent_loopback():
        started = time.monotonic()
        out["during"] = attempt(store)  # the pooled connection: sent, never acknowledged
        out["first_seconds"] = round(time.monotonic() - started, 1)
        out["again"] = attempt(store)  # a new connection: its SYN is never answered
        out["seconds"] = round(time.monotonic() - started, 1)
    proxy.up()
    deadline = time.monotonic() + 120
    while (after := attempt(store)) != [] and time.monotonic() < deadline:
        time.sleep(0.2)
    out["after"] = after
    backend.close()
print(json.dumps(out))
"""


def test_a_connection_gone_silent_fails_a_request_with_store_unavailable_instead_of_hanging(
        pg_url: str, tmp_path: Path) -> None:
    """The database's connection goes silent (no answer, no reset, nothing acknowledged: a server machine or a
    route gone): with libpq's tcp_user_timeout and keepalives (``[postgres]``) the request fails with the typed
    STORE_UNAVAILABLE instead of waiting for the kernel's retransmissions (about 15 minutes), and the same
    process answers again once the network is back. The proxy blackholes and every loopback packet is dropped,
    in a network namespace of this test's own (root; skipped elsewhere)."""
    if shutil.which("unshare") is None or subprocess.run(["unshare", "--net", "true"], capture_output=True,
                                                         check=False).returncode != 0:
        pytest.skip("needs a private network namespace (unshare --net, root)")
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root / "src"), "SILENT_PG_URL": pg_url,
           "BUNKO_PG_TCP_USER_TIMEOUT": "2", "BUNKO_PG_CONNECT_TIMEOUT": "2", "BUNKO_PG_POOL_TIMEOUT": "5",
           "BUNKO_HOME": str(tmp_path)}
    done = subprocess.run(["unshare", "--net", "sh", "-c", 'ip link set lo up && exec "$0" -c "$1"', sys.executable,
                           _SILENT_CLIENT], env=env, capture_output=True, text=True, timeout=HANG, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["before"] == [], out
    assert out["during"] == "STORE_UNAVAILABLE" and out["again"] == "STORE_UNAVAILABLE", out
    assert out["after"] == [], out


def test_tcp_options_come_from_the_settings_and_the_url_wins() -> None:
    from bunko.config import PostgresSettings
    from bunko.stores.postgres.backend import tcp_options

    defaults = tcp_options("postgresql://u@db.example/bunko", PostgresSettings())
    assert defaults == {"keepalives": 1, "keepalives_idle": 30, "keepalives_interval": 10, "keepalives_count": 3,
                        "tcp_user_timeout": 30_000}
    given = tcp_options("postgresql://u@db.example/bunko?keepalives_idle=5&tcp_user_timeout=1000",
                        PostgresSettings(tcp_user_timeout=2.5, keepalives_count=9))
    assert given == {"keepalives": 1, "keepalives_interval": 10, "keepalives_count": 9}
    off = tcp_options("postgresql://u@db.example/bunko", PostgresSettings(tcp_user_timeout=0))
    assert "tcp_user_timeout" not in off


@pytest.fixture()
def own_postgres() -> Iterator[TemporaryPostgres]:
    """A PostgreSQL server of this test alone, which it may stop and start."""
    server = TemporaryPostgres()
    yield server
    server.close()


def _wait_completed(client: httpx.Client, document_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + HANG
    while True:
        response = client.get(f"/api/v1/documents/{document_id}")
        if response.status_code == 200 and response.json()["status"] != "processing":
            return dict(response.json())
        assert time.monotonic() < deadline, response.text
        time.sleep(0.2)


def test_a_postgresql_restart_costs_requests_only_while_it_is_down(
        own_postgres: TemporaryPostgres, embedder: UniversalSentenceEncoderEmbedder, quick_pool: None,
        tmp_path: Path) -> None:
    """The server is shut down (fast: sessions ended) and started again under a running bunko: while it is down
    searches and chats answer 503 STORE_UNAVAILABLE and uploads are refused with it (not acknowledged); uploads
    acknowledged before complete; after, everything answers again from the same process."""
    url = own_postgres.create_database("faults")
    with serve(url, embedder) as served:
        served.engine.tenant("acme").ingest([EXAMPLES], "bousai")
        client = served.client(served.key("acme"))
        assert _search(client).status_code == 200
        acknowledged = []
        for i in range(3):
            response = client.post("/api/v1/documents/upload", files={"file": (f"a{i}.txt", f"{TEXT} {i}".encode())},
                                   data={"collection": "docs"})
            assert response.status_code == 202, response.text
            acknowledged.append(response.json()["documentId"])
        own_postgres.stop()
        problem(_search(client), 503, "STORE_UNAVAILABLE")
        _chat_fails_unavailable(client)
        refused = client.post("/api/v1/documents/upload", files={"file": ("late.txt", TEXT.encode())},
                              data={"collection": "docs"})
        problem(refused, 503, "STORE_UNAVAILABLE")
        own_postgres.start()
        assert _search(client).status_code == 200
        _chat_answers(client)
        for document_id in acknowledged:
            assert _wait_completed(client, document_id)["status"] == "completed"
        listed = client.get("/api/v1/documents", params={"collection": "docs"}).json()["documents"]
        assert sorted(d["filename"] for d in listed) == ["a0.txt", "a1.txt", "a2.txt"]
    assert _consistent(url)["docs"] > 0


# -- a full disk ----------------------------------------------------------------------------------------------
@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 48 MiB tmpfs of the test's own (skipped where a tmpfs cannot be mounted)."""
    try:
        with tmpfs(tmp_path / "disk", 48) as folder:
            yield folder
    except FaultUnavailable as exc:
        pytest.skip(str(exc))


def _corpus(folder: Path, files: int, tag: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        body = "\n\n".join(f"{tag} 文書{i}の第{j}段落。地震への備えとして水と食料を備蓄します。"
                            f"Paragraph {j} of file {i} ({tag}) about water, food and shelters." for j in range(40))
        (folder / f"{tag}{i:03d}.md").write_text(f"# {tag} {i}\n\n{body}\n", encoding="utf-8")
    return folder


def _consistent(url: str) -> dict[str, int]:
    """The store's invariants, read with plain SQL: the file's own integrity check (SQLite), every document whole
    (its chunk count is its chunks), no chunk without its document, no keyword row without its chunk, each
    collection's counters equal to its rows. Returns the documents and chunks by collection name."""
    found: dict[str, int] = {}
    if url.startswith("sqlite"):
        import sqlite3
        from contextlib import closing

        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            q = conn.execute
            assert q("PRAGMA integrity_check").fetchall() == [("ok",)]
            assert q("PRAGMA foreign_key_check").fetchall() == []
            for pk, name, documents, chunks in q("SELECT id, name, document_count, chunk_count FROM collections"):
                rows = q("SELECT count(*) FROM chunks WHERE collection_id = ?", (pk,)).fetchone()[0]
                docs = q("SELECT count(*) FROM documents WHERE collection_id = ?", (pk,)).fetchone()[0]
                assert (documents, chunks) == (docs, rows), name
                # The postings list each chunk once (each segment's chunks, less its deleted ones).
                assert q("SELECT coalesce(sum(CASE term WHEN '' THEN length(entries) ELSE -length(entries) END), 0) "
                         "/ 8 FROM keyword_postings WHERE collection_id = ? AND term IN ('', ' ')",
                         (pk,)).fetchone()[0] == rows, name
                found[name] = rows
            assert q("SELECT count(*) FROM documents d WHERE chunk_count <> (SELECT count(*) FROM chunks c "
                     "WHERE c.document_id = d.id)").fetchone()[0] == 0
            assert q("SELECT count(*) FROM chunks WHERE document_id IS NOT NULL AND document_id NOT IN "
                     "(SELECT id FROM documents)").fetchone()[0] == 0
        return found
    import psycopg

    with psycopg.connect(url) as conn:
        q = conn.execute
        for pk, name, documents, chunks in q("SELECT id, name, document_count, chunk_count FROM bunko.collections"):
            rows = q("SELECT count(*) FROM bunko.chunks WHERE collection_id = %s", (pk,)).fetchone()[0]
            docs = q("SELECT count(*) FROM bunko.documents WHERE collection_id = %s", (pk,)).fetchone()[0]
            assert (documents, chunks) == (docs, rows), name
            found[name] = rows
        assert q("SELECT count(*) FROM bunko.documents d WHERE chunk_count <> (SELECT count(*) FROM bunko.chunks c "
                 "WHERE c.document_id = d.id AND c.version_id = d.current_version_id)").fetchone()[0] == 0
        assert q("SELECT count(*) FROM bunko.chunks c WHERE c.document_id IS NOT NULL AND NOT EXISTS (SELECT 1 "
                 "FROM bunko.documents d WHERE d.tenant_id = c.tenant_id AND d.id = c.document_id)").fetchone()[0] == 0
        assert q("SELECT c.keyword_tokens = (SELECT coalesce(sum(fts_length), 0) FROM bunko.chunks k "
                 "WHERE k.collection_id = c.id) FROM bunko.collections c").fetchall() in ([], [(True,)] * len(found))
    return found


def test_a_full_disk_under_sqlite_fails_writes_with_storage_full_and_keeps_the_store_whole(
        small_disk: Path, tmp_path: Path, embedder: UniversalSentenceEncoderEmbedder) -> None:
    """The SQLite file's disk fills: an ingest is refused with StorageFullError (every document of it, nothing
    half written), searches go on, the file passes its checks; with space back the same engine writes again."""
    url = f"sqlite:///{small_disk / 'store.db'}"
    with Bunko(url, embedder=embedder) as engine:
        tenant = engine.tenant("acme")
        assert tenant.ingest([EXAMPLES], "bousai").errors == []
        before = _consistent(url)
        ballast = fill(small_disk)
        report = tenant.ingest([_corpus(tmp_path / "more", 20, "full")], "more")
        assert report.errors and {e.code for e in report.errors} == {"STORAGE_FULL"}, report.errors
        assert tenant.search("水", collection="bousai")
        with pytest.raises(StorageFullError):
            tenant.upsert("bousai", [{"content": "満杯のディスクへの書き込み。" * 2000}])
        assert _consistent(url) == before
        ballast.unlink()
        again = tenant.ingest([_corpus(tmp_path / "more", 20, "full")], "more")
        assert again.errors == [] and len(again.documents) == 20
        after = _consistent(url)
        assert after["bousai"] == before["bousai"] and after["more"] > 0


def test_a_full_spool_disk_refuses_the_upload_with_507_and_queues_nothing(
        small_disk: Path, tmp_path: Path, embedder: UniversalSentenceEncoderEmbedder) -> None:
    """The upload spool's disk is full: 507 STORAGE_FULL before any job is recorded, no file left behind; with
    space back the same upload is taken and completes."""
    spool = small_disk / "spool"
    with serve(f"sqlite:///{tmp_path / 'store.db'}", embedder, spool_dir=str(spool)) as served:
        client = served.client(served.key("acme"))
        ballast = fill(small_disk)
        payload = ("避難所には最低3日分の水を備えておきます。" * 4000).encode()
        response = client.post("/api/v1/documents/upload", files={"file": ("big.txt", payload)},
                               data={"collection": "docs"})
        problem(response, 507, "STORAGE_FULL")
        assert client.get("/api/v1/documents").json()["documents"] == []
        assert not [p for p in spool.rglob("*") if p.is_file()]
        ballast.unlink()
        response = client.post("/api/v1/documents/upload", files={"file": ("big.txt", payload)},
                               data={"collection": "docs"}, params={"wait": "true"})
        assert response.status_code == 200 and response.json()["status"] == "completed", response.text


def test_a_full_disk_under_postgresql_fails_writes_with_storage_full_and_keeps_the_store_whole(
        tmp_path: Path, embedder: UniversalSentenceEncoderEmbedder) -> None:
    """PostgreSQL's data folder on a small tmpfs that fills: the write is refused with StorageFullError, searches go
    on, the rows stay consistent; with space back the same engine writes again."""
    try:
        mounted = tmpfs(tmp_path / "pgdisk", 192)
        disk = mounted.__enter__()
    except FaultUnavailable as exc:
        pytest.skip(str(exc))
    try:
        server = TemporaryPostgres(disk / "data")
        try:
            url = server.create_database("faults")
            with Bunko(url, embedder=embedder) as engine:
                tenant = engine.tenant("acme")
                assert tenant.ingest([EXAMPLES], "bousai").errors == []
                before = _consistent(url)
                ballast = fill(disk)
                report = tenant.ingest([_corpus(tmp_path / "more", 20, "full")], "more")
                assert report.errors and {e.code for e in report.errors} == {"STORAGE_FULL"}, report.errors
                assert tenant.search("水", collection="bousai")
                now = _consistent(url)
                assert now.pop("more", 0) == 0 and now == before  # the new collection may exist, empty
                ballast.unlink()
                again = tenant.ingest([_corpus(tmp_path / "more", 20, "full")], "more")
                assert again.errors == [] and len(again.documents) == 20
                after = _consistent(url)
                assert after["bousai"] == before["bousai"] and after["more"] > 0
        finally:
            server.close()
    finally:
        mounted.__exit__(None, None, None)


# -- a hosted provider down -------------------------------------------------------------------------------------
@pytest.fixture()
def provider() -> Iterator[tuple[OpenAIFake, FaultProxy]]:
    """An OpenAI-compatible fake (embeddings and chat) behind a fault proxy."""
    with OpenAIFake(reply_text="最低3日分です[1]。") as fake:
        with FaultProxy(("127.0.0.1", int(fake.url.rsplit(":", 1)[1]))) as p:
            yield fake, p


def _provider_failure(exc: BaseException) -> ProviderFailure | None:
    while exc is not None and not isinstance(exc, ProviderFailure):
        exc = exc.__cause__  # type: ignore[assignment]
    return exc


def test_an_llm_down_fails_the_answer_with_a_typed_error_after_bounded_tries_and_recovers(
        provider: tuple[OpenAIFake, FaultProxy], tmp_path: Path, embedder: UniversalSentenceEncoderEmbedder) -> None:
    """The LLM refuses connections, then accepts them and never answers: each question fails with the LLM's
    typed error after 1 + max_retries tries (not more), searches go on meanwhile; back, it answers again."""
    _, proxy = provider
    base = f"http://127.0.0.1:{proxy.port}/v1"
    with Bunko(f"sqlite:///{tmp_path / 's.db'}", embedder=embedder, llm="openai-compatible:chat-1", llm_base_url=base,
               llm_max_retries=2, llm_timeout=1.0) as engine:
        tenant = engine.tenant("acme")
        tenant.ingest([EXAMPLES], "bousai")
        assert tenant.ask("水は何日分？", collection="bousai").answer == "最低3日分です[1]。"
        proxy.down()
        before = proxy.accepted
        with pytest.raises(BunkoError) as down:  # the pipeline's error, with the provider's as its cause
            tenant.ask("水は何日分？", collection="bousai")
        failure = _provider_failure(down.value)
        assert isinstance(failure, LLMProviderError) and failure.code == "LLM_PROVIDER_ERROR", down.value
        assert proxy.accepted - before <= 3
        assert tenant.search("水", collection="bousai")
        proxy.up()
        proxy.hold()  # connections accepted, never answered
        before = proxy.accepted
        with pytest.raises(BunkoError) as silent:
            tenant.ask("水は何日分？", collection="bousai")
        failure = _provider_failure(silent.value)
        assert isinstance(failure, LLMTimeoutError) and failure.code == "LLM_TIMEOUT", silent.value
        assert proxy.accepted - before == 3
        proxy.release()
        assert tenant.ask("水は何日分？", collection="bousai").answer == "最低3日分です[1]。"


def test_an_embedding_provider_down_fails_searches_and_uploads_with_a_typed_error_and_recovers(
        provider: tuple[OpenAIFake, FaultProxy], tmp_path: Path) -> None:
    """A collection embedded by a hosted embedder whose API goes away: a search fails with the embedding provider's
    typed error (502 over HTTP), an ingest reports it per document and writes nothing; back, both work again."""
    from bunko.providers.openai import OpenAICompatibleEmbedder

    fake, proxy = provider
    hosted = OpenAICompatibleEmbedder("embed-1", base_url=f"http://127.0.0.1:{proxy.port}/v1", max_retries=2,
                                      timeout=1.0)
    url = f"sqlite:///{tmp_path / 's.db'}"
    with serve(url, hosted) as served:
        tenant = served.engine.tenant("acme")
        assert tenant.ingest([EXAMPLES], "bousai").errors == []
        client = served.client(served.key("acme"))
        assert _search(client).status_code == 200
        before = _consistent(url)
        proxy.down()
        accepted = proxy.accepted
        response = client.post("/api/v1/search/semantic", json={"query": "非常食は何を選ぶ？", "collection": "bousai"})
        assert response.status_code == 502 and "EMBEDDING" in response.json()["type"], response.text
        assert proxy.accepted - accepted <= 3
        hybrid = client.post("/api/v1/search/hybrid", json={"query": "停電に備えて何を用意する？",
                                                             "collection": "bousai"})
        problem(hybrid, 502, "EMBEDDING_PROVIDER_ERROR")
        report = tenant.ingest([_corpus(tmp_path / "more", 2, "down")], "bousai")
        assert {e.code for e in report.errors} == {"EMBEDDING_PROVIDER_ERROR"}, report.errors
        assert _consistent(url) == before
        proxy.up()
        assert _search(client).status_code == 200
        assert tenant.ingest([_corpus(tmp_path / "more", 2, "down")], "bousai").errors == []
    assert fake.requests_to("/embeddings")


def test_a_hung_hosted_embedder_fails_after_the_configured_timeout_and_retries(
        provider: tuple[OpenAIFake, FaultProxy], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``[embedder] timeout`` and ``max_retries`` (here from the environment) bound a hosted embedder that accepts
    connections and never answers: a search fails with EMBEDDING_TIMEOUT after 1 + max_retries tries of the
    configured timeout each (not the provider's 5 x 60 s); released, the same engine searches again."""
    from bunko.errors import EmbeddingTimeoutError

    fake, proxy = provider
    monkeypatch.setenv("BUNKO_EMBEDDER", "openai-compatible:embed-1")
    monkeypatch.setenv("BUNKO_EMBEDDER_BASE_URL", f"http://127.0.0.1:{proxy.port}/v1")
    monkeypatch.setenv("BUNKO_EMBEDDER_TIMEOUT", "0.5")
    monkeypatch.setenv("BUNKO_EMBEDDER_MAX_RETRIES", "1")
    with Bunko(f"sqlite:///{tmp_path / 's.db'}") as engine:
        assert (engine.embedder.core.timeout, engine.embedder.core.retry.max_retries) == (0.5, 1)
        tenant = engine.tenant("acme")
        assert tenant.ingest([EXAMPLES], "bousai").errors == []
        proxy.hold()  # connections accepted, never answered
        before = proxy.accepted
        with pytest.raises(BunkoError) as hung:
            tenant.search("停電に備えて何を用意する？", collection="bousai", mode="vector")
        failure = _provider_failure(hung.value)
        assert isinstance(failure, EmbeddingTimeoutError) and failure.code == "EMBEDDING_TIMEOUT", hung.value
        assert "within 0.5s" in str(failure), failure
        assert proxy.accepted - before == 2  # the first try and one retry
        proxy.release()
        assert tenant.search("停電に備えて何を用意する？", collection="bousai", mode="vector")
    assert fake.requests_to("/embeddings")


# -- an upgrade while the older version runs ---------------------------------------------------------------------
def test_an_upgrade_refuses_while_other_sessions_are_connected(pg_server: PostgresServer, tmp_path: Path) -> None:
    """One migration pending and a session of "the older version" connected: `bunko db migrate` (and a server of
    the new version, which migrates when it opens) refuses, changing nothing and naming the session; with --force
    the upgrade runs."""
    import os
    import subprocess
    import sys

    import psycopg

    from bunko.errors import VectorStoreError
    from bunko.stores.postgres import PostgresBackend, migrate_database, schema_status
    from bunko.stores.postgres.migrations import MIGRATIONS
    from bunko.testing.postgres import with_dbname

    from .conftest import ROOT

    with psycopg.connect(pg_server.admin_url, autocommit=True) as conn:
        conn.execute("DROP DATABASE IF EXISTS bunko_faults_upgrade WITH (FORCE)")
        conn.execute("CREATE DATABASE bunko_faults_upgrade")
    url = with_dbname(pg_server.admin_url, "bunko_faults_upgrade")
    try:
        migrate_database(url, target=len(MIGRATIONS) - 1)
        with psycopg.connect(url, application_name="bunko-older") as older:
            older.execute("SELECT 1")
            with pytest.raises(VectorStoreError, match="bunko-older"):
                migrate_database(url)
            with pytest.raises(VectorStoreError, match="other session"):
                PostgresBackend(url)
            assert len(schema_status(url)["pending"]) == 1
            env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "BUNKO_HOME": str(tmp_path / "home")}
            refused = subprocess.run([sys.executable, "-m", "bunko", "--db", url, "db", "migrate", "--json"],
                                     env=env, capture_output=True, text=True)
            assert refused.returncode != 0 and "--force" in refused.stdout + refused.stderr
            forced = subprocess.run([sys.executable, "-m", "bunko", "--db", url, "db", "migrate", "--force", "--json"],
                                    env=env, capture_output=True, text=True)
            assert forced.returncode == 0, forced.stderr
            assert json.loads(forced.stdout)["applied"] == [MIGRATIONS[-1][0]]
        assert schema_status(url)["pending"] == []
    finally:
        pg_server.drop_database(url)
