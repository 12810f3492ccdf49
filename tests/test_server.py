"""The HTTP API end to end: a real ``bunko serve`` (uvicorn) on a local port, real stores, the bundled embedder.

Tenants and keys are made with the real ``bunko admin`` commands; requests go over a socket with httpx.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import FIXTURES, ROOT
from tests.provider_fakes import OpenAIFake

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

PDF = FIXTURES / "haru_to_shura_jo.pdf"  # 『春と修羅』序 (Miyazawa Kenji): Japanese, vertical text, one page
TEXT = FIXTURES / "notice_utf8.txt"
MARKDOWN = FIXTURES / "notes.md"
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiveServer:
    """``bunko serve`` in a subprocess, and the ``bunko`` CLI against the same store."""

    def __init__(self, home: Path, database_url: str | None = None, **env: str) -> None:
        self.env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "BUNKO_HOME": str(home), "BUNKO_RATE_LIMIT": "0",
                    **env}
        if database_url:
            self.env["BUNKO_DATABASE_URL"] = database_url
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = home / "server.log"
        home.mkdir(parents=True, exist_ok=True)
        self._log_file = self.log.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bunko", "serve", "--port", str(self.port), "--log-level", "warning"],
            env=self.env, stdout=self._log_file, stderr=subprocess.STDOUT, cwd=home,
        )
        deadline = time.monotonic() + 90
        while True:
            try:
                if httpx.get(self.url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"bunko serve did not start:\n{self.log.read_text(errors='replace')}")
            time.sleep(0.3)

    def cli(self, *args: str) -> Any:
        done = subprocess.run([sys.executable, "-m", "bunko", *args, "--json"], env=self.env, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)

    def key(self, tenant: str, user: str | None = None, *, admin: bool = False) -> str:
        """Create the tenant if needed and a key for it; returns the key."""
        self.cli("admin", "tenants", "create", tenant)
        args = ["admin", "keys", "create", "--tenant", tenant] + (["--user", user] if user else [])
        made = self.cli(*args, *(["--admin"] if admin else []))
        assert made["tenant"] == tenant and made["user"] == user and made["api_key"].startswith("bk_")
        return str(made["api_key"])

    def client(self, key: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=60)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self._log_file.close()


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[LiveServer]:
    live = LiveServer(tmp_path / "home")
    yield live
    live.stop()


def _upload(client: httpx.Client, path: Path, *, wait: bool = False, **form: str) -> dict[str, Any]:
    with path.open("rb") as f:
        response = client.post("/api/v1/documents/upload", files={"file": (path.name, f)}, data=form,
                               params={"wait": "true"} if wait else None)
    assert response.status_code == (200 if wait else 202), response.text  # waited: processed
    return response.json()


def _wait_completed(client: httpx.Client, document_id: str, timeout: float = 120) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        response = client.get(f"/api/v1/documents/{document_id}")
        assert response.status_code == 200, response.text
        info = response.json()
        if info["status"] != "processing":
            return info
        assert time.monotonic() < deadline, f"still processing after {timeout} s"
        time.sleep(0.25)


def _sse_events(client: httpx.Client, body: dict[str, Any]) -> list[dict[str, Any]]:
    events = []
    with client.stream("POST", "/api/v1/chat/rag", json=body) as response:
        assert response.status_code == 200, response.read().decode()
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[len("data: "):]))
            else:
                assert line == "", line
    return events


def _problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["type"] == f"urn:bunko:problem:{code}" and body["status"] == status, body
    assert "Traceback" not in response.text
    return body


@pytest.fixture(params=["sqlite", "postgresql"])
def any_store_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LiveServer]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    live = LiveServer(tmp_path / "home", url)
    yield live
    live.stop()


def test_two_tenants_end_to_end(any_store_server: LiveServer) -> None:
    """Upload a PDF, watch it complete, search it, read a streamed chat answer; tenant B sees none of it."""
    server = any_store_server
    a, b = server.client(server.key("acme", "alice")), server.client(server.key("globex", "bob"))

    uploaded = _upload(a, PDF, tags="poem,miyazawa", category="literature", description="春と修羅 序")
    assert uploaded["status"] == "processing" and uploaded["filename"] == PDF.name and uploaded["chunkCount"] == 0
    doc_id = uploaded["documentId"]
    info = _wait_completed(a, doc_id)
    assert info["status"] == "completed", info
    assert info["chunkCount"] >= 1 and info["fileSize"] == PDF.stat().st_size and info["processingTime"] > 0
    assert info["metadata"] == {"tags": ["poem", "miyazawa"], "category": "literature", "description": "春と修羅 序"}

    listing = a.get("/api/v1/documents").json()
    assert listing["totalCount"] == 1 and listing["totalSize"] == PDF.stat().st_size
    assert listing["documents"][0]["id"] == doc_id

    query = {"query": "因果交流電燈の青い照明", "limit": 3}
    for kind in ("semantic", "keyword", "hybrid"):
        found = a.post(f"/api/v1/search/{kind}", json=query).json()
        assert found["totalMatches"] >= 1 and found["searchType"] == kind, found
        assert {r["documentId"] for r in found["results"]} == {doc_id}
        assert found["results"][0]["documentName"] == PDF.name and found["results"][0]["pageNumber"] == 1

    events = _sse_events(a, {"message": "因果交流電燈とは何ですか？", "conversationId": "c-1"})
    types = [e["type"] for e in events]
    assert types[:3] == ["search_start", "search_results", "generation_start"], types
    assert types[-1] == "done" and "token" in types
    assert events[1]["count"] >= 1
    done = events[-1]["response"]
    assert done["answer"] == "".join(e["content"] for e in events if e["type"] == "token")
    assert done["sources"] and {s["document_id"] for s in done["sources"]} == {doc_id}
    assert len([e for e in events if e["type"] == "citation"]) == len(done["sources"])

    # Tenant B: its own document, and nothing of tenant A's.
    own = _upload(b, TEXT)
    assert _wait_completed(b, own["documentId"])["status"] == "completed"
    _problem(b.get(f"/api/v1/documents/{doc_id}"), 404, "DOCUMENT_NOT_FOUND")
    assert [d["id"] for d in b.get("/api/v1/documents").json()["documents"]] == [own["documentId"]]
    for kind in ("semantic", "keyword", "hybrid"):
        assert b.post(f"/api/v1/search/{kind}", json={**query, "documentIds": [doc_id]}).json()["results"] == []
        hits = b.post(f"/api/v1/search/{kind}", json=query).json()["results"]
        assert doc_id not in {r["documentId"] for r in hits}
    chat_b = _sse_events(b, {"message": "因果交流電燈とは何ですか？", "documentIds": [doc_id], "conversationId": "c-1"})
    assert chat_b[1] == {"type": "search_results", "count": 0} and chat_b[-1]["response"]["sources"] == []
    _problem(b.delete(f"/api/v1/documents/{doc_id}"), 404, "DOCUMENT_NOT_FOUND")
    assert a.get(f"/api/v1/documents/{doc_id}").json()["status"] == "completed"

    # Tenant A deletes it: gone from listings and searches.
    assert a.delete(f"/api/v1/documents/{doc_id}").json() == {"deleted": True, "id": doc_id}
    _problem(a.get(f"/api/v1/documents/{doc_id}"), 404, "DOCUMENT_NOT_FOUND")
    assert a.post("/api/v1/search/hybrid", json=query).json()["results"] == []
    assert b.get(f"/api/v1/documents/{own['documentId']}").json()["status"] == "completed"


def test_errors_and_limits(tmp_path: Path) -> None:
    """401, 413, 415, 422 (filter, validation), 429 with Retry-After, and a failed job with its reason."""
    server = LiveServer(tmp_path / "home", BUNKO_MAX_UPLOAD_MB="1", BUNKO_RATE_LIMIT="7")
    try:
        key = server.key("acme")
        client = server.client(key)
        _problem(server.client(None).get("/api/v1/documents"), 401, "UNAUTHENTICATED")
        _problem(server.client("bk_" + "x" * 43).get("/api/v1/documents"), 401, "INVALID_API_KEY")

        big = tmp_path / "big.pdf"  # 1.5 MB: a PDF with a long comment at its end
        big.write_bytes(PDF.read_bytes() + b"%" + b"0" * (1536 * 1024) + b"\n")
        with big.open("rb") as f:
            _problem(client.post("/api/v1/documents/upload", files={"file": (big.name, f)}), 413, "PAYLOAD_TOO_LARGE")

        def chunked() -> Iterator[bytes]:  # no Content-Length: the limit is enforced while reading
            yield (b'--b\r\nContent-Disposition: form-data; name="file"; filename="big.txt"\r\n'
                   b"Content-Type: text/plain\r\n\r\n")
            for _ in range(3):
                yield b"x" * (1024 * 1024)
            yield b"\r\n--b--\r\n"

        _problem(client.post("/api/v1/documents/upload", content=chunked(),
                             headers={"content-type": "multipart/form-data; boundary=b"}), 413, "PAYLOAD_TOO_LARGE")
        _problem(client.post("/api/v1/documents/upload", files={"file": ("notes.exe", b"MZ\x90\x00binary")}), 415,
                 "UNSUPPORTED_FORMAT")
        broken = _problem(client.post("/api/v1/documents/upload?wait=true",
                                      files={"file": ("invalid.pdf", (FIXTURES / "invalid.pdf").read_bytes())}),
                          422, "CORRUPT_DOCUMENT")  # waited: the job's error, typed
        assert broken["status"] == 422 and broken["filename"] == "invalid.pdf" and str(tmp_path) not in broken["detail"]
        reason = client.get(f"/api/v1/documents/{broken['documentId']}").json()
        assert reason["status"] == "failed" and reason["error"]["code"] and reason["error"]["message"]
        assert str(tmp_path) not in reason["error"]["message"]  # no server paths in answers

        problem = _problem(client.post("/api/v1/search/hybrid", json={"query": "x", "filter": {"year": {"$gt": []}}}),
                           422, "INVALID_FILTER")
        assert problem["problems"][0]["path"] == "year"
        # Fill the key's last minute (some requests above counted already).
        for _ in range(16):
            limited = client.get("/api/v1/documents")
            if limited.status_code == 429:
                break
            assert limited.status_code == 200, limited.text
        body = _problem(limited, 429, "RATE_LIMITED")
        # A sliding window (bunko.ratelimit): the requests of this minute still count, fading, in the next one.
        assert 1 <= int(limited.headers["Retry-After"]) <= 120 and "7 requests" in body["detail"]
        # Another key of the same tenant has its own window.
        other = server.client(server.key("acme", "carol"))
        _problem(other.post("/api/v1/search/semantic", json={"query": "x", "limit": 0}), 422, "VALIDATION_ERROR")
    finally:
        server.stop()


def test_erasure_of_a_user_and_a_tenant(server: LiveServer) -> None:
    """R34: a user's documents, logs, usage and conversations go; other users' stay; the admin erases all."""
    alice, bob = server.client(server.key("acme", "alice")), server.client(server.key("acme", "bob"))
    admin = server.client(server.key("acme", "root", admin=True))
    a_doc = _upload(alice, TEXT, wait=True)
    b_doc = _upload(bob, MARKDOWN, wait=True)
    assert a_doc["status"] == b_doc["status"] == "completed"
    alice.post("/api/v1/search/semantic", json={"query": "alice searched this"})
    bob.post("/api/v1/search/semantic", json={"query": "bob searched this"})
    _sse_events(alice, {"message": "What is this about?", "conversationId": "talk"})
    assert alice.get("/api/v1/conversations/talk").json()["turns"][0]["content"] == "What is this about?"
    _problem(bob.get("/api/v1/conversations/talk"), 404, "CONVERSATION_NOT_FOUND")  # users' conversations are apart
    _problem(bob.delete(f"/api/v1/documents/{a_doc['documentId']}"), 403, "FORBIDDEN")
    _problem(bob.delete("/api/v1/users/alice/data"), 403, "FORBIDDEN")
    _problem(alice.delete("/api/v1/tenant/data"), 403, "FORBIDDEN")

    erased = alice.delete("/api/v1/users/alice/data").json()["deleted"]
    assert erased["documents"] == 1 and erased["jobs"] == 1 and erased["conversationTurns"] == 2
    assert erased["searchLogs"] >= 2 and erased["usageRecords"] >= 1  # the search, and the chat's search
    _problem(alice.get(f"/api/v1/documents/{a_doc['documentId']}"), 404, "DOCUMENT_NOT_FOUND")
    _problem(alice.get("/api/v1/conversations/talk"), 404, "CONVERSATION_NOT_FOUND")
    logs = admin.get("/api/v1/search/logs").json()["logs"]
    assert [entry["query"] for entry in logs] == ["bob searched this"]
    assert admin.get("/api/v1/search/logs?anonymize=true").json()["logs"][0]["query"] is None
    assert bob.get(f"/api/v1/documents/{b_doc['documentId']}").json()["status"] == "completed"
    assert admin.get("/api/v1/usage").json()["usage"]

    everything = admin.delete("/api/v1/tenant/data").json()["deleted"]
    assert everything["documents"] == 1 and everything["collections"] == 1
    assert admin.get("/api/v1/documents").json() == {"documents": [], "totalCount": 0, "totalSize": 0}
    assert admin.get("/api/v1/search/logs").json()["logs"] == []
    assert admin.get("/api/v1/collections").json()["collections"] == []


def test_chat_with_an_llm_streams_tokens_and_citations(tmp_path: Path) -> None:
    """The LLM comes from the same settings as the CLI (BUNKO_LLM); its tokens and [N] citations stream as SSE."""
    with OpenAIFake(reply_text="ひとつの青い照明です[1]。") as llm:
        server = LiveServer(tmp_path / "home", BUNKO_LLM="openai-compatible:fake-model",
                            BUNKO_LLM_BASE_URL=llm.url + "/v1")
        try:
            client = server.client(server.key("acme"))
            assert _upload(client, PDF, wait=True)["status"] == "completed"
            events = _sse_events(client, {"message": "因果交流電燈とは何ですか？", "searchParams": {"mode": "hybrid"}})
        finally:
            server.stop()
    tokens = [e["content"] for e in events if e["type"] == "token"]
    assert len(tokens) > 1 and "".join(tokens) == "ひとつの青い照明です[1]。"
    citations = [e for e in events if e["type"] == "citation"]
    assert len(citations) == 1 and citations[0]["source"]["index"] == 1
    assert events[-1]["response"]["model"] == "fake-model" and len(events[-1]["response"]["sources"]) == 1
    assert llm.requests_to("/chat/completions")


def test_property_based_run_finds_no_server_errors(server: LiveServer) -> None:
    """schemathesis fuzzes every operation of the OpenAPI document; no answer may be a 5xx."""
    st = shutil.which("st", path=str(Path(sys.executable).parent)) or shutil.which("schemathesis")
    if st is None:
        pytest.skip("schemathesis is not installed")
    key = server.key("acme", "alice")
    _upload(server.client(key), TEXT, wait=True)
    done = subprocess.run(
        [st, "run", server.url + "/openapi.json", "-H", f"Authorization: Bearer {key}", "--checks",
         "not_a_server_error", "--max-examples", "25", "--seed", "7", "--phases", "examples,coverage,fuzzing",
         "--request-timeout", "30", "--no-color"],
        capture_output=True, text=True, timeout=600, cwd=server.env["BUNKO_HOME"],
    )
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    assert " passed" in output and "generated" in output, output[-2000:]
    assert server.proc.poll() is None  # and the server is still up


def test_uploading_a_changed_file_with_the_same_name_makes_a_new_version(server: LiveServer, tmp_path: Path) -> None:
    """R4 over HTTP: the file name is the document's key in its collection; the id stays, the version goes up."""
    from bunko import Bunko

    alice, bob = server.client(server.key("acme", "alice")), server.client(server.key("acme", "bob"))
    note = tmp_path / "note.md"
    note.write_text("# 避難メモ\n\n集合場所は公園です。", encoding="utf-8")
    first = _upload(alice, note, wait=True, tags="v1")
    note.write_text("# 避難メモ\n\n集合場所は小学校の体育館に変わりました。", encoding="utf-8")
    second = _upload(alice, note, wait=True, tags="v2")
    assert first["status"] == second["status"] == "completed", (first, second)
    assert second["documentId"] == first["documentId"]
    listing = alice.get("/api/v1/documents").json()
    assert listing["totalCount"] == 1 and listing["documents"][0]["id"] == first["documentId"]
    assert listing["documents"][0]["metadata"]["tags"] == ["v2"] and listing["documents"][0]["version"] == 2
    hits = alice.post("/api/v1/search/keyword", json={"query": "集合場所", "limit": 5}).json()["results"]
    assert hits and all("公園" not in h["content"] for h in hits) and "体育館" in hits[0]["content"]
    # Another user's key may not replace alice's document (as it may not delete it).
    _problem(bob.post("/api/v1/documents/upload", files={"file": ("note.md", b"# bob\n\nbob's text")}), 403,
             "FORBIDDEN")
    with Bunko(home=server.env["BUNKO_HOME"]) as engine:
        (stored,) = engine.tenant("acme").documents("default")
        assert (stored.id, stored.source, stored.version) == (first["documentId"], "note.md", 2)


def test_a_changed_upload_embeds_only_its_changed_chunks(server: LiveServer, tmp_path: Path) -> None:
    """Chunk-level reuse over HTTP: the job of a new version says how many chunks it embedded and how many took
    the vector of the same chunk of the version it replaced; so does the document listing."""
    client = server.client(server.key("acme"))
    sections = [f"## 第{i}節\n\n" + f"第{i}節の手順では、申請書を所属長に提出し、承認を得てから総務部へ回付する。" * 8
                for i in range(8)]
    manual = tmp_path / "manual.md"
    manual.write_text("# 手順書\n\n" + "\n\n".join(sections), encoding="utf-8")
    first = _upload(client, manual, wait=True)
    assert first["status"] == "completed" and first["chunkCount"] > 4, first
    assert (first["embeddedChunks"], first["reusedChunks"]) == (first["chunkCount"], 0)
    sections[3] += "（改訂）提出期限は十日以内とする。"
    manual.write_text("# 手順書\n\n" + "\n\n".join(sections), encoding="utf-8")
    second = _upload(client, manual, wait=True)
    assert second["status"] == "completed" and second["documentId"] == first["documentId"], second
    assert second["embeddedChunks"] + second["reusedChunks"] == second["chunkCount"]
    assert 0 < second["embeddedChunks"] < second["reusedChunks"], second
    (listed,) = client.get("/api/v1/documents").json()["documents"]
    assert (listed["embeddedChunks"], listed["reusedChunks"]) == (second["embeddedChunks"], second["reusedChunks"])


def test_vector_upsert_and_query_over_http(server: LiveServer) -> None:
    """R14 over HTTP: records with and without vectors, queries by vector and by text; tenants stay apart."""
    a, b = server.client(server.key("acme")), server.client(server.key("globex"))
    given = [0.0] * 512
    given[7] = 1.0
    upserted = a.post("/api/v1/collections/notes/vectors", json={"records": [
        {"id": "own-vector", "content": "brought its own vector", "vector": given, "metadata": {"kind": "given"}},
        {"content": "非常用の水は一人一日3リットルを目安に備蓄します。", "metadata": {"kind": "embedded"}},
    ]})
    assert upserted.status_code == 200, upserted.text
    body = upserted.json()
    assert body["collection"] == "notes" and body["upserted"] == 2 and body["ids"][0] == "own-vector"
    by_vector = a.post("/api/v1/collections/notes/query", json={"vector": given, "topK": 1}).json()
    assert [r["id"] for r in by_vector["results"]] == ["own-vector"] and by_vector["results"][0]["score"] > 0.999
    by_text = a.post("/api/v1/collections/notes/query",
                     json={"text": "水は一日何リットル？", "topK": 1, "includeContent": False}).json()
    assert [r["id"] for r in by_text["results"]] == [body["ids"][1]] and by_text["results"][0]["content"] is None
    filtered = a.post("/api/v1/collections/notes/query", json={"text": "水", "filter": {"kind": "given"}}).json()
    assert [r["id"] for r in filtered["results"]] == ["own-vector"]
    collections = a.get("/api/v1/collections").json()["collections"]
    assert [(c["name"], c["chunkCount"], c["embedding"]["dimension"]) for c in collections] == [("notes", 2, 512)]

    _problem(a.post("/api/v1/collections/notes/vectors", json={"records": [{"vector": [0.1, 0.2]}]}), 409,
             "DIMENSION_MISMATCH")
    _problem(a.post("/api/v1/collections/notes/query", json={"vector": [0.1, 0.2]}), 409, "DIMENSION_MISMATCH")
    _problem(a.post("/api/v1/collections/notes/query", json={"vector": given, "text": "both"}), 422,
             "VALIDATION_ERROR")
    _problem(a.post("/api/v1/collections/notes/vectors", json={"records": [{"content": " "}]}), 422,
             "VALIDATION_ERROR")

    # Tenant B: the same collection name is not A's; its own records never show A's.
    _problem(b.post("/api/v1/collections/notes/query", json={"vector": given}), 404, "COLLECTION_NOT_FOUND")
    assert b.post("/api/v1/collections/notes/vectors",
                  json={"records": [{"id": "own-vector", "content": "globex の資料です。"}]}).status_code == 200
    theirs = b.post("/api/v1/collections/notes/query", json={"vector": given, "topK": 10}).json()["results"]
    assert [(r["id"], r["content"]) for r in theirs] == [("own-vector", "globex の資料です。")]
    mine = a.post("/api/v1/collections/notes/query", json={"vector": given, "topK": 10}).json()["results"]
    assert {r["id"] for r in mine} == set(body["ids"]) and "globex の資料です。" not in {r["content"] for r in mine}


def test_extractive_answers_are_the_same_over_http_chat_the_cli_and_python(server: LiveServer) -> None:
    """One code path: the issue's question over HTTP chat gives the CLI's answer, never just a header."""
    from bunko import Bunko
    from bunko.extractive import answer_body
    from tests.conftest import EXAMPLES

    key = server.key("acme")
    server.cli("ingest", str(EXAMPLES), "--tenant", "acme", "-c", "bousai")
    client = server.client(key)
    for question in ("水は何日分？", "What should I pack in a go-bag?"):
        done = _sse_events(client, {"message": question, "collection": "bousai"})[-1]["response"]
        cli = server.cli("ask", question, "--tenant", "acme", "-c", "bousai")
        with Bunko(home=server.env["BUNKO_HOME"]) as engine:
            python = engine.tenant("acme").ask(question, collection="bousai")
        assert done["answer"] == cli["answer"] == python.answer, question
        assert answer_body(done["answer"]) and done["sources"], done["answer"]
