"""The seed's memory scenario through the CLI (``bunko memory``) and the HTTP API (``/api/v1/memories``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from bunko import Bunko
from bunko.cli import cli
from bunko.embedders import UniversalSentenceEncoderEmbedder
from tests.test_memory import QUERY, SESSIONS

WEAKNESS = "前回、繰り上がりの足し算で3回つまずいた"


def _cli(db: str, *args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(cli, ["--db", db, *args, "--json"], catch_exceptions=False,
                                env={"BUNKO_MEMORY_TIMEOUT": "120", "BUNKO_MEMORY_SEMANTIC_TIMEOUT": "120"})
    return result.exit_code, json.loads(result.stdout)


def test_cli_memory_add_search_list_delete(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    for user, sessions in SESSIONS.items():
        for session_id, events in sessions.items():
            for content, memory_type, subject in events:
                code, out = _cli(db, "memory", "add", content, "--user", user, "--session", session_id,
                                 "--type", memory_type, "--subject", subject, "--tenant", "school")
                assert code == 0 and out["user_id"] == user and out["memory_id"]

    code, result = _cli(db, "memory", "search", QUERY, "--user", "child-a", "--top-k", "3", "--tenant", "school")
    assert code == 0
    assert set(result) == {"memories", "query", "total_results", "fallback"}
    assert result["memories"][0]["content"] == WEAKNESS and result["total_results"] == 3
    assert {m["metadata"]["user_id"] for m in result["memories"]} == {"child-a"}
    assert set(result["memories"][0]) == {"content", "metadata", "relevance_score"}

    # Another tenant has none of it; a named store that does not exist is the seed's not-found error.
    code, other = _cli(db, "memory", "search", QUERY, "--user", "child-a", "--tenant", "other")
    assert code == 0 and other["memories"] == []
    code, missing = _cli(db, "memory", "search", QUERY, "--user", "child-a", "--store", "nope", "--tenant", "school")
    assert code == 1 and missing["error"]["type"] == "RagCorpusNotFoundError"
    assert missing["error"]["code"] == "RAG_CORPUS_NOT_FOUND"
    code, bad = _cli(db, "memory", "add", "x", "--user", "../x", "--tenant", "school")
    assert code == 1 and bad["error"]["code"] == "INVALID_MEMORY"

    code, listed = _cli(db, "memory", "list", "--user", "child-a", "--session", "a-s1", "--tenant", "school")
    assert code == 0 and [m["content"] for m in listed["memories"]] == [e[0] for e in SESSIONS["child-a"]["a-s1"]]
    code, deleted = _cli(db, "memory", "delete", "--user", "child-a", "--session", "a-s1", "--tenant", "school")
    assert code == 0 and deleted == {"deleted": 2}
    code, deleted = _cli(db, "memory", "delete", "--user", "child-a", "--tenant", "school")
    assert code == 0 and deleted == {"deleted": 3}
    code, listed = _cli(db, "memory", "list", "--user", "child-b", "--tenant", "school")
    assert code == 0 and len(listed["memories"]) == 3


# -- HTTP -----------------------------------------------------------------------------------------------
@pytest.fixture()
def api(tmp_path: Path, embedder: UniversalSentenceEncoderEmbedder) -> Iterator[tuple[Any, dict[str, str]]]:
    pytest.importorskip("fastapi")
    from fastapi.testclient import TestClient

    from bunko.server.app import create_app

    engine = Bunko(f"sqlite:///{tmp_path / 'api.db'}", embedder=embedder, rate_limit=0, memory_timeout=120,
                   memory_semantic_timeout=120)
    records = engine.backend.service_records()
    records.create_tenant("school")
    records.create_tenant("other")
    keys = {user: records.create_api_key("school", user)[0] for user in ("child-a", "child-b")}
    keys["tenant"] = records.create_api_key("school", admin=True)[0]
    keys["other"] = records.create_api_key("other", "child-a")[0]
    try:
        with TestClient(create_app(engine)) as client:
            yield client, keys
    finally:
        engine.close()


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_http_memories_seed_scenario_user_from_the_key(api: tuple[Any, dict[str, str]]) -> None:
    client, keys = api
    for user, sessions in SESSIONS.items():
        for session_id, events in sessions.items():
            body = {"sessionId": session_id, "memories": [
                {"content": c, "memoryType": t, "subject": s, "timestamp": "2026-02-01T10:00:00Z"}
                for c, t, s in events]}
            response = client.post("/api/v1/memories", json=body, headers=_auth(keys[user]))
            assert response.status_code == 201, response.text
            assert len(response.json()["ids"]) == len(events)

    response = client.post("/api/v1/memories/search", json={"query": QUERY, "topK": 5}, headers=_auth(keys["child-a"]))
    assert response.status_code == 200, response.text
    result = response.json()
    assert set(result) == {"memories", "query", "total_results", "fallback"}
    assert result["memories"][0]["content"] == WEAKNESS
    assert result["memories"][0]["metadata"]["timestamp"] == "2026-02-01T10:00:00Z"
    assert {m["metadata"]["user_id"] for m in result["memories"]} == {"child-a"}

    # The body cannot name another user; another tenant's key with the same user id sees nothing.
    smuggled = client.post("/api/v1/memories/search", json={"query": QUERY, "user_id": "child-b"},
                           headers=_auth(keys["child-a"]))
    assert smuggled.status_code == 422
    other = client.post("/api/v1/memories/search", json={"query": QUERY}, headers=_auth(keys["other"]))
    assert other.status_code == 200 and other.json()["memories"] == []
    tenant_wide = client.post("/api/v1/memories/search", json={"query": QUERY}, headers=_auth(keys["tenant"]))
    assert tenant_wide.status_code == 403 and tenant_wide.json()["code"] == "USER_KEY_REQUIRED"
    missing = client.post("/api/v1/memories/search", json={"query": QUERY, "store": "homework-coach-memories"},
                          headers=_auth(keys["child-a"]))
    assert missing.status_code == 404 and missing.json()["type"] == "urn:bunko:problem:RAG_CORPUS_NOT_FOUND"
    bad = client.post("/api/v1/memories", json={"memories": [{"content": "x", "memoryType": "gossip"}]},
                      headers=_auth(keys["child-a"]))
    assert bad.status_code == 422

    listed = client.get("/api/v1/memories", params={"sessionId": "a-s2"}, headers=_auth(keys["child-a"])).json()
    assert len(listed["memories"]) == 3
    one = listed["memories"][0]["metadata"]["memory_id"]
    assert client.delete(f"/api/v1/memories/{one}", headers=_auth(keys["child-b"])).status_code == 404
    assert client.delete(f"/api/v1/memories/{one}", headers=_auth(keys["child-a"])).json() == {"deleted": 1}
    assert client.delete("/api/v1/memories/sessions/a-s2", headers=_auth(keys["child-a"])).json() == {"deleted": 2}

    # The erasure endpoint (R34) takes the user's memories with it.
    erased = client.delete("/api/v1/users/child-a/data", headers=_auth(keys["child-a"]))
    assert erased.status_code == 200 and erased.json()["deleted"]["memories"] == 2
    after = client.post("/api/v1/memories/search", json={"query": QUERY}, headers=_auth(keys["child-a"])).json()
    assert after["memories"] == []
    assert client.delete("/api/v1/memories", headers=_auth(keys["child-b"])).json() == {"deleted": 3}
    # Memory searches are in the tenant's search log, under the key's user.
    logs = client.get("/api/v1/search/logs", headers=_auth(keys["tenant"]))
    assert logs.status_code == 200 and "memory-hybrid" in json.dumps(logs.json())
