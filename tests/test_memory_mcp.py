"""``bunko mcp`` as a subprocess, driven by the MCP SDK's own stdio client (seed 004 through MCP)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("mcp")

from mcp import ClientSession, StdioServerParameters, stdio_client

from bunko import Bunko
from bunko.embedders import UniversalSentenceEncoderEmbedder
from tests.test_memory import QUERY, SESSIONS

ROOT = Path(__file__).resolve().parent.parent


def _seed_store(url: str, embedder: UniversalSentenceEncoderEmbedder) -> None:
    with Bunko(url, embedder=embedder) as engine:
        school = engine.tenant("school")
        for user, sessions in SESSIONS.items():
            for session_id, events in sessions.items():
                with school.memory.session(user, session_id) as session:
                    for content, memory_type, subject in events:
                        session.add(content, memory_type=memory_type, subject=subject)
        school.upsert("docs", [{"content": "非常用の水は一人一日3リットルを目安に備蓄します。"},
                               {"content": "避難所は近くの小学校です。"}])


def _params(url: str, tmp_path: Path, *args: str, **settings: str) -> StdioServerParameters:
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "BUNKO_HOME": str(tmp_path / "home"), "BUNKO_MEMORY_TIMEOUT": "120",
           "BUNKO_MEMORY_SEMANTIC_TIMEOUT": "120", **settings}
    return StdioServerParameters(command=sys.executable, args=["-m", "bunko", "--db", url, "mcp", *args], env=env,
                                 cwd=str(tmp_path))


async def _session(params: StdioServerParameters, work: Any) -> Any:
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        return await work(session)


def test_mcp_stdio_server_lists_tools_and_answers_search_memory_and_search(
        tmp_path: Path, embedder: UniversalSentenceEncoderEmbedder) -> None:
    url = f"sqlite:///{tmp_path / 'mcp.db'}"
    _seed_store(url, embedder)

    async def work(session: ClientSession) -> dict[str, Any]:
        tools = {t.name: t for t in (await session.list_tools()).tools}
        memory = await session.call_tool("search_memory", {"query": QUERY, "top_k": 3})
        search = await session.call_tool("search", {"query": "水は何リットル？", "collection": "docs", "top_k": 1})
        added = await session.call_tool("add_memory", {"content": "九九の七の段を覚えた", "memory_type": "success",
                                                       "subject": "math", "session_id": "a-s3"})
        recalled = await session.call_tool("search_memory", {"query": "九九の七の段", "top_k": 1})
        smuggled = await session.call_tool("search_memory", {"query": QUERY, "user_id": "child-b"})
        resources = await session.list_resources()
        collection = await session.read_resource("bunko://collections/docs")
        return {"tools": tools, "memory": memory, "search": search, "added": added, "recalled": recalled,
                "smuggled": smuggled, "resources": resources, "collection": collection}

    out = asyncio.run(_session(_params(url, tmp_path, "--tenant", "school", "--user", "child-a"), work))

    tools = out["tools"]
    assert {"search", "ask", "search_memory", "add_memory"} <= set(tools)
    schema = tools["search_memory"].input_schema
    assert set(schema["properties"]) == {"query", "top_k"} and schema["required"] == ["query"]
    assert "user_id" not in tools["add_memory"].input_schema["properties"]
    assert tools["add_memory"].input_schema["properties"]["memory_type"]["enum"] == [
        "dialogue", "weakness", "success", "curriculum"]

    memory = out["memory"]
    assert not memory.is_error
    result = memory.structured_content
    assert result["query"] == QUERY and result["total_results"] == 3
    assert result["memories"][0]["content"] == "前回、繰り上がりの足し算で3回つまずいた"
    assert {m["metadata"]["user_id"] for m in result["memories"]} == {"child-a"}

    search = out["search"].structured_content
    assert search["results"][0]["content"].startswith("非常用の水")

    assert not out["added"].is_error
    recalled = out["recalled"].structured_content["memories"][0]
    assert recalled["content"] == "九九の七の段を覚えた" and recalled["metadata"]["user_id"] == "child-a"
    # The model cannot pick another user: an unknown argument is refused, never used.
    smuggled = out["smuggled"]
    assert smuggled.is_error or all(m["metadata"]["user_id"] == "child-a"
                                    for m in smuggled.structured_content["memories"])

    assert [str(r.uri) for r in out["resources"].resources] == ["bunko://collections/docs"]
    assert json.loads(out["collection"].contents[0].text)["chunks"] == 2


def test_mcp_without_a_user_refuses_memory_tools_but_searches(
        tmp_path: Path, embedder: UniversalSentenceEncoderEmbedder) -> None:
    url = f"sqlite:///{tmp_path / 'mcp.db'}"
    _seed_store(url, embedder)

    async def work(session: ClientSession) -> tuple[Any, Any]:
        return (await session.call_tool("search_memory", {"query": QUERY}),
                await session.call_tool("search", {"query": "避難所", "collection": "docs", "mode": "keyword"}))

    memory, search = asyncio.run(_session(_params(url, tmp_path, "--tenant", "school"), work))
    assert memory.is_error and "NO_USER" in memory.content[0].text
    assert search.structured_content["results"][0]["content"] == "避難所は近くの小学校です。"


@contextmanager
def _http_server(url: str, tmp_path: Path, **settings: str) -> Iterator[str]:
    """``bunko mcp --http`` as a subprocess on a free port, with these environment settings; yields its URL."""
    import socket
    import subprocess
    import time

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    params = _params(url, tmp_path, "--http", f"127.0.0.1:{port}", **settings)
    log = (tmp_path / "mcp-http.log").open("wb")
    proc = subprocess.Popen([params.command, *params.args], env={**os.environ, **(params.env or {})},
                            cwd=str(tmp_path), stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120  # only catches a server that never starts
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "mcp-http.log").read_text()
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


async def _http_calls(mcp_url: str, key: str | None, calls: int = 1) -> list[Any]:
    """``calls`` search_memory tool calls in one streamable HTTP session with ``key``."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx2.AsyncClient(headers=headers, timeout=120) as client, \
            streamable_http_client(mcp_url, http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        return [await session.call_tool("search_memory", {"query": QUERY, "top_k": 2}) for _ in range(calls)]


def test_mcp_streamable_http_takes_tenant_and_user_from_the_api_key(
        tmp_path: Path, embedder: UniversalSentenceEncoderEmbedder) -> None:
    url = f"sqlite:///{tmp_path / 'mcp.db'}"
    _seed_store(url, embedder)
    with Bunko(url, embedder=embedder) as engine:
        records = engine.backend.service_records()
        key_a = records.create_api_key("school", "child-a")[0]
        key_b = records.create_api_key("school", "child-b")[0]
    with _http_server(url, tmp_path) as mcp_url:
        [as_a], [as_b], [anonymous] = (asyncio.run(_http_calls(mcp_url, key)) for key in (key_a, key_b, None))
    assert as_a.structured_content["memories"][0]["content"] == "前回、繰り上がりの足し算で3回つまずいた"
    assert {m["metadata"]["user_id"] for m in as_a.structured_content["memories"]} == {"child-a"}
    assert {m["metadata"]["user_id"] for m in as_b.structured_content["memories"]} == {"child-b"}
    assert anonymous.is_error and "UNAUTHENTICATED" in anonymous.content[0].text


def test_mcp_ask_answers_with_citations_in_process(tmp_path: Path, embedder: UniversalSentenceEncoderEmbedder) -> None:
    from mcp.server.mcpserver.exceptions import ToolError

    from bunko.integrations.mcp_server import build_server

    url = f"sqlite:///{tmp_path / 'mcp.db'}"
    _seed_store(url, embedder)
    with Bunko(url, embedder=embedder) as engine:
        server = build_server(engine, tenant="school", user_id="child-a")
        answer = asyncio.run(server.call_tool("ask", {"question": "非常用の水は一人一日何リットル？",
                                                      "collection": "docs"}))
        # In process the SDK raises the tool's error; over a transport it becomes an error result (see above).
        with pytest.raises(ToolError, match="COLLECTION_NOT_FOUND: collection 'nope' does not exist"):
            asyncio.run(server.call_tool("search", {"query": "水", "collection": "nope"}))
    assert not answer.is_error
    result = answer.structured_content
    assert "[1]" in result["answer"] and result["sources"][0]["excerpt"].startswith("非常用の水")


def test_mcp_over_http_counts_tool_calls_against_the_keys_rate_limit(
        tmp_path: Path, embedder: UniversalSentenceEncoderEmbedder) -> None:
    """Issue 26, finding 5: MCP over HTTP had no rate limit (650 tool calls in 6 s on one key). Each tool call
    now counts against its key's limit, in the REST API's sliding windows."""
    url = f"sqlite:///{tmp_path / 'mcp.db'}"
    _seed_store(url, embedder)
    with Bunko(url, embedder=embedder) as engine:
        records = engine.backend.service_records()
        key_a = records.create_api_key("school", "child-a")[0]
        key_b = records.create_api_key("school", "child-b")[0]
    with _http_server(url, tmp_path, BUNKO_RATE_LIMIT="3") as mcp_url:
        calls = asyncio.run(_http_calls(mcp_url, key_a, 4))
        [other] = asyncio.run(_http_calls(mcp_url, key_b))
    assert [c.is_error for c in calls] == [False, False, False, True]
    assert "RATE_LIMITED" in calls[3].content[0].text and "retry in" in calls[3].content[0].text
    assert not other.is_error  # another key has its own budget


def test_mcp_over_http_counts_tool_calls_against_the_tenants_requests_per_minute_quota(
        tmp_path: Path, embedder: UniversalSentenceEncoderEmbedder) -> None:
    """A tenant's requests-per-minute quota (bunko admin tenants set-quota) counts the tool calls of all of its
    keys, with the per-key limit off."""
    url = f"sqlite:///{tmp_path / 'mcp.db'}"
    _seed_store(url, embedder)
    with Bunko(url, embedder=embedder) as engine:
        records = engine.backend.service_records()
        key_a = records.create_api_key("school", "child-a")[0]
        key_b = records.create_api_key("school", "child-b")[0]
        records.set_quota("school", {"requests_per_minute": 3})
    with _http_server(url, tmp_path, BUNKO_RATE_LIMIT="0") as mcp_url:
        first = asyncio.run(_http_calls(mcp_url, key_a, 2))
        second = asyncio.run(_http_calls(mcp_url, key_b, 2))
    assert [c.is_error for c in first + second] == [False, False, False, True]
    assert "QUOTA_EXCEEDED: this tenant" in second[1].content[0].text and "retry in" in second[1].content[0].text
