"""Blocks and workflows through their other doors: the CLI, the HTTP API (both stores), an LLM at a
provider's wire format, and URLs through the SSRF-guarded fetcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bunko import Bunko
from bunko.blocks import SEED_BLOCK_NAMES, BlockError
from bunko.blocks.ctx import BlockContext, ExecutionContext, context_from_messages
from bunko.llm import LLMMessage

from .provider_fakes import FakeServer, OpenAIFake, Reply

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / "examples" / "workflows"
FACT = "非常用の水は一人一日3リットルを目安に、最低3日分を備蓄します。"
GUIDE = ("<html><head><title>防災ガイド</title><style>p{color:red}</style><script>var x = 1;</script></head><body>"
         "<nav>メニュー</nav><main><h1>防災ガイド</h1><p>" + FACT + "</p><p>懐中電灯とラジオを用意します。</p>"
         "</main></body></html>")


def cli(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "BUNKO_HOME": str(home)}
    return subprocess.run([sys.executable, "-m", "bunko", *args], env=env, capture_output=True, text=True,
                          timeout=300, cwd=home)


# -- CLI -------------------------------------------------------------------------------------------

def test_cli_blocks_list_and_workflow_run(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    listed = cli(home, "blocks", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    blocks = json.loads(listed.stdout)["blocks"]
    assert [b["name"] for b in blocks] == list(SEED_BLOCK_NAMES) and not any(b["addition"] for b in blocks)
    assert all(set(b) == {"name", "category", "description", "config_schema", "addition"} for b in blocks)
    text = cli(home, "blocks", "list")
    lines = text.stdout.splitlines()
    assert text.returncode == 0 and [line.split()[0] for line in lines[::2]] == list(SEED_BLOCK_NAMES)
    assert lines[3].split() == ["config:", "chunk_size", "(integer,", "default", "1000),", "chunk_overlap", "(integer,",
                                "default", "200),", "separator", "(string,", "default", r'"\n\n")']

    stored = cli(home, "workflow", "run", str(WORKFLOWS / "ingest.yaml"), "--tenant", "acme", "--json",
                 "--input", json.dumps({"text": FACT}))
    assert stored.returncode == 0, stored.stdout + stored.stderr
    result = json.loads(stored.stdout)
    assert result["workflow"] == "ingest" and [s["status"] for s in result["steps"]] == ["completed"] * 4
    (home / "q.json").write_text(json.dumps({"query": "水は何日分備蓄しますか？"}), encoding="utf-8")
    answered = cli(home, "workflow", "run", str(WORKFLOWS / "rag-query.json"), "-t", "acme", "--input", "@q.json")
    assert answered.returncode == 0, answered.stderr
    assert "3日分" in answered.stdout and "[1]" in answered.stdout
    assert "answer (rag-query): completed" in answered.stderr

    # Another tenant: the collection does not exist there; exit 1 with the step named.
    failed = cli(home, "workflow", "run", str(WORKFLOWS / "rag-query.json"), "-t", "globex", "--json",
                 "--input", '{"query": "水"}')
    assert failed.returncode == 1
    body = json.loads(failed.stdout)
    assert body["error"] == {"code": "COLLECTION_NOT_FOUND", "step": "answer", "block": "rag-query",
                             "message": "collection 'bousai' does not exist in tenant 'globex'"}
    assert body["steps"] == [{"id": "answer", "block": "rag-query", "status": "failed",
                              "duration_ms": body["steps"][0]["duration_ms"]}]
    bad = tmp_path / "bad.yaml"
    bad.write_text("steps:\n  - block: rag-query\n    config: {collection: c, top_k: many}\n", encoding="utf-8")
    plain = cli(home, "workflow", "run", str(bad))
    assert plain.returncode == 1 and plain.stdout == ""
    assert plain.stderr.strip() == "error: [CONFIG_001] step rag-query (rag-query): config.top_k: 'many' is not " \
                                   "of type 'integer'"
    garbage = cli(home, "workflow", "run", str(bad), "--input", "[1]", "--json")
    assert garbage.returncode == 1 and json.loads(garbage.stdout)["error"]["code"] == "INPUT_001"
    assert "Traceback" not in plain.stderr + garbage.stderr + failed.stderr


# -- HTTP ------------------------------------------------------------------------------------------

@pytest.fixture(params=["sqlite", "postgresql"])
def api(request: pytest.FixtureRequest, tmp_path: Path, embedder: Any) -> Iterator[tuple[Any, dict[str, str]]]:
    from fastapi.testclient import TestClient

    from bunko.server.app import create_app
    from bunko.stores.service import service_records

    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else f"sqlite:///{tmp_path / 'api.db'}"
    engine = Bunko(url, embedder=embedder)
    records = service_records(engine.backend)
    keys = {}
    for tenant in ("acme", "globex"):
        records.create_tenant(tenant)
        keys[tenant] = records.create_api_key(tenant, "u1")[0]
    with TestClient(create_app(engine)) as client:
        yield client, keys
    engine.close()


def _problem(response: Any, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["code"] == code and body["type"] == f"urn:bunko:problem:{code}" and "Traceback" not in response.text
    return body


def test_http_blocks_and_workflows_per_api_key(api: tuple[Any, dict[str, str]]) -> None:
    client, keys = api
    acme, globex = ({"Authorization": f"Bearer {keys[t]}"} for t in ("acme", "globex"))
    assert client.get("/api/v1/blocks").status_code == 401
    listed = client.get("/api/v1/blocks", headers=acme).json()["blocks"]
    assert [b["name"] for b in listed] == list(SEED_BLOCK_NAMES)

    ingest = json.loads(json.dumps(__import__("yaml").safe_load((WORKFLOWS / "ingest.yaml").read_text("utf-8"))))
    done = client.post("/api/v1/workflows/run", headers=acme, json={"workflow": ingest, "input": {"text": FACT}})
    assert done.status_code == 200, done.text
    assert done.json()["output"]["upserted_count"] == 1
    rag = json.loads((WORKFLOWS / "rag-query.json").read_text("utf-8"))
    answer = client.post("/api/v1/workflows/run", headers=acme,
                         json={"workflow": rag, "input": {"query": "水は何日分備蓄しますか？"}}).json()
    assert [s["status"] for s in answer["steps"]] == ["completed"]
    assert "3日分" in answer["output"]["answer"] and answer["output"]["sources"][0]["index"] == 1
    usage = client.get("/api/v1/usage", headers=acme).json()
    assert "embedding" in json.dumps(usage)

    # The other key's tenant: A's collection is not there, and a config cannot name A's tenant.
    missing = _problem(client.post("/api/v1/workflows/run", headers=globex,
                                   json={"workflow": rag, "input": {"query": "水"}}), 404, "COLLECTION_NOT_FOUND")
    assert missing["error"] == {"code": "COLLECTION_NOT_FOUND", "step": "answer", "block": "rag-query",
                                "message": "collection 'bousai' does not exist in tenant 'globex'"}
    assert missing["steps"][0]["status"] == "failed"
    named = {"steps": [{"block": "rag-query", "config": {"collection": "bousai", "tenant": "acme"}}]}
    body = _problem(client.post("/api/v1/workflows/run", headers=globex, json={"workflow": named,
                                                                                 "input": {"query": "水"}}),
                    422, "TENANT_001")
    assert body["error"]["step"] == "rag-query" and body["error"]["path"] == "config.tenant"
    _problem(client.post("/api/v1/workflows/run", headers=globex, json={"workflow": {"steps": []}}), 422,
             "WORKFLOW_001")
    _problem(client.post("/api/v1/workflows/run", headers=globex,
                         json={"workflow": {"steps": [{"block": "rag-query", "config": {"collection": "c"}}]},
                               "input": {}}), 422, "RAG_001")
    # A workflow is an object in the body; a server never reads a file named by a client.
    _problem(client.post("/api/v1/workflows/run", headers=globex,
                         json={"workflow": str(WORKFLOWS / "rag-query.json")}), 422, "VALIDATION_ERROR")


# -- LLM -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def fake() -> Iterator[OpenAIFake]:
    with OpenAIFake(reply_text="最低3日分です[1]。") as server:
        yield server


def test_rag_query_and_chat_with_an_llm(fake: OpenAIFake, tmp_path: Path, embedder: Any) -> None:
    with Bunko(f"sqlite:///{tmp_path / 'llm.db'}", embedder=embedder, llm="openai-compatible:chat-1",
               llm_base_url=fake.url + "/v1", llm_max_retries=0) as engine:
        scope = engine.tenant("acme")
        scope.upsert("bousai", [{"content": FACT}])
        out = scope.run_workflow({"steps": [{"block": "rag-query", "config": {
            "collection": "bousai", "system_prompt": "答えは文脈からのみ。", "temperature": 0.5}}]},
            {"question": "水は何日分？"}).output
        assert out["answer"] == "最低3日分です[1]。" and out["extractive"] is False and out["model"] == "chat-1"
        assert out["sources"][0]["index"] == 1 and "3日分" in out["sources"][0]["content"]
        sent = fake.requests_to("/chat/completions")[-1].json
        assert sent["messages"][0] == {"role": "system", "content": "答えは文脈からのみ。"}
        assert sent["temperature"] == 0.5
        assert "[1]" in sent["messages"][-1]["content"] and FACT in sent["messages"][-1]["content"]
        assert {u.operation for u in scope.usage()} >= {"llm", "search", "embedding"}

        ctx = BlockContext(ExecutionContext(scope))
        import asyncio

        reply = asyncio.run(ctx.llm.chat(None, None, {"messages": [{"role": "user", "content": "こんにちは"}],
                                                      "temperature": 0.2, "max_tokens": 50}))
        assert reply["content"] == "最低3日分です[1]。" and reply["extractive"] is False
        assert fake.requests_to("/chat/completions")[-1].json["max_tokens"] == 50

        fake.fail(Reply(500, json={"error": {"message": "boom"}}))
        with pytest.raises(BlockError) as caught:
            scope.run_workflow({"steps": [{"id": "ask", "block": "rag-query", "config": {"collection": "bousai"}}]},
                               {"query": "水は何日分？"})
        assert (caught.value.code, caught.value.step) == ("PROVIDER_001", "ask")
        assert "500" in caught.value.message


def test_a_named_embedder_builds_and_searches_its_own_collection(fake: OpenAIFake, tmp_path: Path,
                                                                 embedder: Any) -> None:
    from bunko.embedders import register_embedder, unregister_embedder
    from bunko.providers.openai import OpenAICompatibleEmbedder

    register_embedder("hosted", lambda model=None: OpenAICompatibleEmbedder(model or "embed-1",
                                                                            base_url=fake.url + "/v1"))
    try:
        with Bunko(f"sqlite:///{tmp_path / 'hosted.db'}", embedder=embedder) as engine:
            scope = engine.tenant("acme")
            stored = scope.run_workflow({"steps": [
                {"block": "doc-loader", "config": {"source_type": "text"}},
                {"block": "embedding", "config": {"provider": "hosted"}},
                {"block": "vector-upsert", "config": {"collection": "hosted", "embedding_provider": "hosted"}}]},
                {"text": FACT})
            embedded = stored.outputs["embedding"]
            assert embedded["dimension"] == 8 and embedded["model"] == "openai-compatible:embed-1"
            assert embedded["usage"]["total_tokens"] > 0
            made = scope.store.get_collection("hosted")
            assert (made.embedding_provider, made.embedding_model, made.dimension) == \
                ("openai-compatible", "embed-1", 8)
            search = {"collection": "hosted", "embedding_provider": "hosted"}
            found = scope.run_workflow({"steps": [{"block": "vector-search", "config": search}]}, {"query": FACT})
            assert found.output["matches"][0]["id"] == stored.output["ids"][0]
            answer = scope.run_workflow({"steps": [{"block": "rag-query", "config": search}]}, {"query": FACT}).output
            assert answer["sources"] and answer["usage"]["embedding"]["total_tokens"] > 0
            # The engine's own embedder may not query a collection built by another one.
            with pytest.raises(BlockError) as caught:
                scope.run_workflow({"steps": [{"id": "ask", "block": "rag-query", "config": {"collection": "hosted"}}]},
                                   {"query": FACT})
            assert (caught.value.code, caught.value.step) == ("EMBEDDER_MISMATCH", "ask")
            assert {(u.operation, u.provider) for u in scope.usage()} >= {("embedding", "openai-compatible")}
    finally:
        unregister_embedder("hosted")


def test_chat_without_an_llm_answers_extractively_from_the_numbered_context(engine: Bunko) -> None:
    import asyncio

    messages = [{"role": "system", "content": "Answer from the context."},
                {"role": "user", "content": "## Context\n\n[1] (guide.md)\n懐中電灯を用意します。\n\n---\n\n"
                                            f"[2] (water.md)\n{FACT}\n\n## Question\n\n水は何日分？\n\n## Answer"}]
    question, hits = context_from_messages([LLMMessage(m["role"], m["content"]) for m in messages])
    assert question == "水は何日分？" and [h.content for h in hits] == ["懐中電灯を用意します。", FACT]
    ctx = BlockContext(ExecutionContext(engine.tenant("acme")))
    reply = asyncio.run(ctx.llm.chat("default", None, messages))
    assert reply["extractive"] is True and reply["model"] == "extractive"
    assert "3日分" in reply["content"] and "[1]" in reply["content"]
    with pytest.raises(BlockError) as caught:
        asyncio.run(ctx.llm.chat(None, None, [{"role": "robot", "content": "x"}]))
    assert caught.value.code == "INPUT_001"


# -- URLs ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def site() -> Iterator[FakeServer]:
    with FakeServer() as server:
        server.route("GET", "/guide.html", lambda r: Reply(body=GUIDE.encode(),
                                                           headers={"Content-Type": "text/html; charset=utf-8"}))
        server.route("GET", "/data.json", lambda r: Reply(json={"items": [{"body": FACT}]}))
        yield server


def test_url_ingest_goes_through_the_ssrf_guard(site: FakeServer, tmp_path: Path, embedder: Any) -> None:
    url = site.url + "/guide.html"
    with Bunko(f"sqlite:///{tmp_path / 'url.db'}", embedder=embedder) as engine:
        blocked = engine.tenant("acme")
        with pytest.raises(BlockError) as caught:
            blocked.run_workflow(WORKFLOWS / "ingest-url.yaml", {"url": url, "collection": "web"})
        assert (caught.value.code, caught.value.step, caught.value.block) == ("BLOCKED_URL", "load", "doc-loader")
        assert blocked.collections() == []
    with Bunko(f"sqlite:///{tmp_path / 'url.db'}", embedder=embedder, fetch_allow_hosts=("127.0.0.1",)) as engine:
        scope = engine.tenant("acme")
        result = scope.run_workflow(WORKFLOWS / "ingest-url.yaml", {"url": url, "collection": "web"})
        loaded = result.outputs["load"]["documents"]
        assert len(loaded) == 1 and FACT in loaded[0]["content"] and "var x" not in loaded[0]["content"]
        assert loaded[0]["metadata"]["source"] == url and loaded[0]["metadata"]["source_type"] == "url"
        assert result.output["collection"] == "web" and scope.store.count("web") == result.output["upserted_count"]
        answer = scope.run_workflow({"steps": [{"block": "rag-query", "config": {"collection": "web"}}]},
                                    {"query": "水は何日分？"}).output
        assert "3日分" in answer["answer"] and answer["sources"][0]["metadata"]["source"] == url

        raw = scope.run_workflow({"steps": [{"block": "doc-loader", "config": {
            "source_type": "url", "url": site.url + "/data.json", "strip_html": False}}]}).output["documents"][0]
        assert json.loads(raw["content"]) == {"items": [{"body": FACT}]}
        assert raw["metadata"]["content_type"] == "application/json"
        picked = scope.run_workflow({"steps": [{"block": "doc-loader", "config": {
            "source_type": "json", "content_path": "items.0.body"}}]}, {"data": {"items": [{"body": FACT}]}}).output
        assert picked["documents"][0]["content"] == FACT


@pytest.fixture()
def engine(tmp_path: Path, embedder: Any) -> Iterator[Bunko]:
    e = Bunko(f"sqlite:///{tmp_path / 'e.db'}", embedder=embedder)
    yield e
    e.close()
