"""Agent memory (R31, seed 004) on both stores: the seed's scenario, isolation, fallback, errors, deletion."""

from __future__ import annotations

import asyncio
import itertools
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bunko import Bunko
from bunko.embedders import UniversalSentenceEncoderEmbedder
from bunko.errors import (
    EmbedderMismatchError,
    InvalidMemoryError,
    NotFoundError,
    RagCorpusNotFoundError,
    RagSearchError,
    RagSearchTimeoutError,
    RetrievalError,
)
from bunko.memory import fallback_count
from bunko.providers.openai import OpenAICompatibleEmbedder
from bunko.stores.service import service_records
from tests.provider_fakes import OpenAIFake, Reply

QUERY = "繰り上がりの足し算"
# Several sessions of two children (seed 004): what each said, with the seed's memory types and subjects.
SESSIONS: dict[str, dict[str, list[tuple[str, str, str]]]] = {
    "child-a": {
        "a-s1": [("今日は引き算の練習をした", "dialogue", "math"),
                 ("前回、繰り上がりの足し算で3回つまずいた", "weakness", "math")],
        "a-s2": [("漢字の書き取りがよくできた", "success", "japanese"),
                 ("次は二年生の九九に進む", "curriculum", "math"),
                 ("好きな動物はペンギンだと話した", "dialogue", "other")],
    },
    "child-b": {
        "b-s1": [("繰り上がりの足し算が得意になった", "success", "math"),
                 ("繰り上がりの足し算を先生に説明できた", "success", "math")],
        "b-s2": [("音読で言葉に詰まった", "weakness", "japanese")],
    },
}
_tenants = itertools.count()


def _new_tenant(prefix: str = "school") -> str:
    return f"{prefix}-{next(_tenants)}"


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One database per backend for the module; each test works in tenants of its own."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('memory') / 'memory.db'}"
        return
    server = request.getfixturevalue("pg_server")
    url = server.new_database()
    yield url
    server.drop_database(url)


@pytest.fixture(scope="module")
def engine(store_url: str, embedder: UniversalSentenceEncoderEmbedder) -> Iterator[Bunko]:
    # Budgets far above any loaded machine's time, so the tests below see fallbacks only where they cause one.
    e = Bunko(store_url, embedder=embedder, memory_timeout=120, memory_semantic_timeout=120)
    yield e
    e.close()


def _embedding_calls(tenant: Any) -> tuple[int, int]:
    totals = [t for t in tenant.usage() if t.operation == "embedding"]
    return sum(t.calls for t in totals), sum(t.items for t in totals)


def _run_sessions(tenant: Any) -> None:
    for user, sessions in SESSIONS.items():
        for session_id, events in sessions.items():
            with tenant.memory.session(user, session_id) as session:
                for content, memory_type, subject in events:
                    session.add(content, memory_type=memory_type, subject=subject,
                                timestamp="2026-02-01T10:00:00Z")
                assert tenant.memory.list(user, session_id=session_id) == []  # nothing indexed before the end
                before = _embedding_calls(tenant)
            # The session's end indexed all its events in one batch: one embedding request for all of them.
            calls, items = _embedding_calls(tenant)
            assert (calls - before[0], items - before[1]) == (1, len(events))
            assert len(tenant.memory.list(user, session_id=session_id)) == len(events)


def test_seed_scenario_finds_the_childs_weakness_first_and_nothing_of_the_other_child(engine: Bunko) -> None:
    tenant = engine.tenant(_new_tenant())
    _run_sessions(tenant)

    result = tenant.memory.search_memory(QUERY, user_id="child-a")
    assert set(result) == {"memories", "query", "total_results", "fallback"}
    assert result["query"] == QUERY and result["fallback"] is False
    assert result["total_results"] == len(result["memories"]) == 5
    first = result["memories"][0]
    assert first["content"] == "前回、繰り上がりの足し算で3回つまずいた"
    assert {k: first["metadata"][k] for k in ("user_id", "session_id", "timestamp", "memory_type", "subject")} == {
        "user_id": "child-a", "session_id": "a-s1", "timestamp": "2026-02-01T10:00:00Z",
        "memory_type": "weakness", "subject": "math"}
    assert 0 < first["relevance_score"] <= 1
    scores = [m["relevance_score"] for m in result["memories"]]
    assert scores == sorted(scores, reverse=True)
    assert all(m["metadata"]["user_id"] == "child-a" for m in result["memories"])
    assert not any("得意" in m["content"] for m in result["memories"])  # child B's memories never show

    other = tenant.memory.search_memory(QUERY, user_id="child-b", top_k=2)
    assert [m["metadata"]["user_id"] for m in other["memories"]] == ["child-b", "child-b"]
    assert all("繰り上がり" in m["content"] for m in other["memories"])

    for mode in ("keyword", "semantic"):
        only = tenant.memory.search_memory(QUERY, user_id="child-a", mode=mode)
        assert {m["metadata"]["user_id"] for m in only["memories"]} == {"child-a"}
    keyword = tenant.memory.search_memory(QUERY, user_id="child-a", mode="keyword")
    assert keyword["memories"][0]["content"] == "前回、繰り上がりの足し算で3回つまずいた"

    # Searches are logged (R33) and counted per tenant, by mode.
    models = {t.model for t in tenant.usage() if t.operation == "search"}
    assert {"memory-hybrid", "memory-keyword", "memory-semantic"} <= models


def test_tenants_and_users_are_isolated(engine: Bunko) -> None:
    school, other = engine.tenant(_new_tenant()), engine.tenant(_new_tenant("other"))
    school.memory.add([{"content": "秘密の作戦は木曜日", "memory_type": "dialogue"}], user_id="child-a",
                      session_id="s1")
    school.memory.store("notes").add("繰り上がりの足し算の宿題", user_id="child-a")
    # Another tenant with the same user id sees nothing: not in its default store, not a named store.
    assert other.memory.search_memory("秘密の作戦", user_id="child-a")["memories"] == []
    assert other.memory.list("child-a") == []
    with pytest.raises(RagCorpusNotFoundError):
        other.memory.store("notes").search_memory("宿題", user_id="child-a")
    assert other.memory.delete_user("child-a") == 0
    # Another user of the same tenant sees nothing either.
    assert school.memory.search_memory("秘密の作戦", user_id="child-b")["memories"] == []
    assert school.memory.list("child-b") == []
    assert school.memory.delete("child-b", memory_ids=[m["metadata"]["memory_id"]
                                                       for m in school.memory.list("child-a")]) == 0
    assert [m["content"] for m in school.memory.list("child-a")] == ["秘密の作戦は木曜日"]
    # Stores are per tenant: the other tenant's listing does not show the school's.
    assert {s.name for s in school.memory.stores()} == {"memories", "notes"}
    assert other.memory.stores() == []


def test_postgres_row_level_security_hides_memories_without_the_tenant(engine: Bunko) -> None:
    if engine.backend.scheme != "postgresql":
        pytest.skip("row-level security is PostgreSQL's")
    tenant = engine.tenant(_new_tenant())
    tenant.memory.add("見えてはいけない記憶", user_id="child-a")
    with engine.backend.transaction(None, None, write=False) as conn:  # type: ignore[attr-defined]
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM memory_stores").fetchone()[0] == 0
    other = engine.tenant(_new_tenant("other"))
    with other.store.session(create=True) as (conn, _):  # type: ignore[attr-defined]
        assert conn.execute("SELECT count(*) FROM memories").fetchone()[0] == 0


def test_errors_are_the_seeds_and_part_of_bunkos_hierarchy(engine: Bunko) -> None:
    assert issubclass(RagSearchError, RetrievalError)
    assert issubclass(RagCorpusNotFoundError, RagSearchError) and issubclass(RagCorpusNotFoundError, NotFoundError)
    assert issubclass(RagSearchTimeoutError, RagSearchError)
    tenant = engine.tenant(_new_tenant())
    with pytest.raises(RagCorpusNotFoundError, match="'homework-coach-memories' does not exist"):
        tenant.memory.store("homework-coach-memories").search_memory(QUERY, user_id="child-a")
    tenant.memory.add("繰り上がりの足し算で3回つまずいた", user_id="child-a")
    # A budget too small for any search: the seed's timeout error, not a late answer.
    with pytest.raises(RagSearchTimeoutError, match="budget"):
        tenant.memory.search_memory(QUERY, user_id="child-a", timeout=1e-9)
    with pytest.raises(InvalidMemoryError, match="unknown memory type"):
        tenant.memory.add([{"content": "x", "memory_type": "gossip"}], user_id="child-a")
    with pytest.raises(InvalidMemoryError, match="non-empty"):
        tenant.memory.add(["  "], user_id="child-a")
    with pytest.raises(InvalidMemoryError, match="invalid user id"):
        tenant.memory.search_memory(QUERY, user_id="../etc")
    with pytest.raises(InvalidMemoryError, match="top_k"):
        tenant.memory.search_memory(QUERY, user_id="child-a", top_k=0)
    with pytest.raises(InvalidMemoryError, match="unknown memory field"):
        tenant.memory.add([{"content": "x", "user_id": "child-b"}], user_id="child-a")  # the user is the call's
    session = tenant.memory.session("child-a", "s-x")
    with pytest.raises(InvalidMemoryError, match="unknown memory type"):
        session.add("x", memory_type="nope")  # checked when added, not at the end
    session.end()
    with pytest.raises(InvalidMemoryError, match="ended"):
        session.add("y")


def test_postgres_search_over_its_budget_raises_the_timeout_error(engine: Bunko) -> None:
    """A store that cannot answer (the memories table locked by another transaction) hits the budget."""
    if engine.backend.scheme != "postgresql":
        pytest.skip("needs a lock another session holds")
    import psycopg

    tenant = engine.tenant(_new_tenant())
    tenant.memory.add("繰り上がりの足し算", user_id="child-a")
    with psycopg.connect(engine.backend.url, autocommit=False) as blocker:
        blocker.execute("LOCK TABLE bunko.memories IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(RagSearchTimeoutError):
            tenant.memory.search_memory(QUERY, user_id="child-a", timeout=1.0)
        blocker.rollback()
    assert tenant.memory.search_memory(QUERY, user_id="child-a")["total_results"] == 1


def test_deletion_per_memory_session_and_user_and_erasure(engine: Bunko) -> None:
    tenant = engine.tenant(_new_tenant())
    _run_sessions(tenant)
    memory = tenant.memory
    first = memory.list("child-a", session_id="a-s2")[0]["metadata"]["memory_id"]
    assert memory.delete("child-a", memory_ids=[first]) == 1
    assert memory.delete_session("child-a", "a-s2") == 2
    assert [m["metadata"]["session_id"] for m in memory.list("child-a")] == ["a-s1", "a-s1"]
    assert memory.delete_user("child-a") == 2
    assert memory.search_memory(QUERY, user_id="child-a")["memories"] == []
    assert len(memory.list("child-b")) == 3

    # The erasure endpoints' records (R34) take memories with them: a user's, then the tenant's.
    memory.store("notes").add("ノート", user_id="child-b")
    records = service_records(engine.backend)
    tenant.memory.add("もう一つ", user_id="child-c")
    assert records.erase_user(tenant.store, "child-b").memories == 4
    assert memory.list("child-b") == [] and len(memory.list("child-c")) == 1
    erased = records.erase_tenant(tenant.store)
    assert erased.memories == 1 and erased.to_dict()["memories"] == 1
    assert memory.stores() == []


def test_an_id_given_again_replaces_that_users_memory(engine: Bunko) -> None:
    tenant = engine.tenant(_new_tenant())
    tenant.memory.add([{"id": "event-1", "content": "古い記憶"}], user_id="child-a", session_id="s1")
    tenant.memory.add([{"id": "event-1", "content": "新しい記憶"}], user_id="child-b", session_id="s1")
    tenant.memory.add([{"id": "event-1", "content": "書き直した記憶", "memory_type": "success"}],
                      user_id="child-a", session_id="s1")
    assert [m["content"] for m in tenant.memory.list("child-a")] == ["書き直した記憶"]
    assert [m["content"] for m in tenant.memory.list("child-b")] == ["新しい記憶"]


def test_async_session_and_search(engine: Bunko) -> None:
    tenant = engine.tenant(_new_tenant())

    async def agent() -> tuple[Any, dict[str, Any]]:
        async with tenant.memory.session("child-a") as session:
            session.add({"content": "割り算の筆算でつまずいた", "memory_type": "weakness", "subject": "math",
                         "metadata": {"grade": 3}})
        return session, await tenant.memory.asearch_memory("割り算", "child-a", top_k=1)

    session, result = asyncio.run(agent())
    assert session.ended and len(session.ids) == 1
    assert result["memories"][0]["metadata"]["grade"] == 3
    assert result["memories"][0]["metadata"]["session_id"] == session.session_id


def test_another_embedder_is_refused_for_a_store(engine: Bunko, tmp_path: Path) -> None:
    name = _new_tenant()
    engine.tenant(name).memory.add("足し算", user_id="child-a")
    with OpenAIFake(dimension=8) as server:
        other = Bunko(engine.backend.url, embedder=OpenAICompatibleEmbedder(
            "fake", base_url=server.url + "/v1", dimensions=8, max_retries=0))
        try:
            with pytest.raises(EmbedderMismatchError, match="keeps its embedder"):
                other.tenant(name).memory.add("引き算", user_id="child-a")
            with pytest.raises(EmbedderMismatchError):
                other.tenant(name).memory.search_memory("足し算", user_id="child-a")
        finally:
            other.close()


# -- the keyword fallback: a real hosted-style embedder behind a local fake that goes down or slow ------
@pytest.fixture()
def fake_embedder_engine(store_url: str) -> Iterator[tuple[Bunko, OpenAIFake]]:
    with OpenAIFake(dimension=16) as server:
        embedder = OpenAICompatibleEmbedder("fake-embed", base_url=server.url + "/v1", dimensions=16, max_retries=0)
        e = Bunko(store_url, embedder=embedder, memory_timeout=60, memory_semantic_timeout=1.0)
        try:
            yield e, server
        finally:
            e.close()


def _seed(tenant: Any) -> None:
    for user, sessions in SESSIONS.items():
        for session_id, events in sessions.items():
            tenant.memory.add([{"content": c, "memory_type": t, "subject": s} for c, t, s in events],
                              user_id=user, session_id=session_id)


def test_failing_embedder_falls_back_to_keywords_logged_and_counted(
        fake_embedder_engine: tuple[Bunko, OpenAIFake], caplog: pytest.LogCaptureFixture) -> None:
    engine, server = fake_embedder_engine
    tenant = engine.tenant(_new_tenant())
    _seed(tenant)
    assert tenant.memory.search_memory(QUERY, user_id="child-a")["fallback"] is False
    before = fallback_count()
    server.fail(Reply(500, json={"error": {"message": "model is loading"}}))
    with caplog.at_level("WARNING", logger="bunko.memory"):
        result = tenant.memory.search_memory(QUERY, user_id="child-a")
    assert result["fallback"] is True
    assert result["memories"][0]["content"] == "前回、繰り上がりの足し算で3回つまずいた"
    assert {m["metadata"]["user_id"] for m in result["memories"]} == {"child-a"}
    assert fallback_count() == before + 1
    assert any("fell back to keyword search" in r.getMessage() and "500" in r.getMessage() for r in caplog.records)
    fallbacks = [t for t in tenant.usage() if t.operation == "search" and t.model == "memory-keyword-fallback"]
    assert [t.calls for t in fallbacks] == [1]

    # Down altogether (nothing listens any more): still answered from keywords.
    server.stop()
    down = tenant.memory.search_memory(QUERY, user_id="child-a", top_k=1)
    assert down["fallback"] is True and down["memories"][0]["metadata"]["memory_type"] == "weakness"
    assert fallback_count() == before + 2


def test_slow_embedder_past_the_semantic_budget_falls_back(fake_embedder_engine: tuple[Bunko, OpenAIFake]) -> None:
    engine, server = fake_embedder_engine
    tenant = engine.tenant(_new_tenant())
    _seed(tenant)
    released = threading.Event()

    def slow(request: Any) -> Reply:
        released.wait(30)  # answers only after the search has given up on it
        return Reply(500)

    server.routes.insert(0, ("POST", re.compile("/v1/embeddings"), slow))
    try:
        result = tenant.memory.search_memory(QUERY, user_id="child-a")
    finally:
        released.set()
    assert result["fallback"] is True
    assert result["memories"][0]["content"] == "前回、繰り上がりの足し算で3回つまずいた"
    reasons = [t for t in tenant.usage() if t.model == "memory-keyword-fallback"]
    assert reasons and reasons[0].calls == 1


def test_sync_search_inside_a_running_loop_points_to_the_async_form(engine: Bunko) -> None:
    tenant = engine.tenant(_new_tenant())

    async def inside() -> None:
        with pytest.raises(Exception, match="await the 'a…' form"):
            tenant.memory.search_memory(QUERY, user_id="child-a")

    asyncio.run(inside())


def test_memory_keywords_score_as_a_collections_keyword_search(engine: Bunko) -> None:
    """One user's memories rank by the same BM25 as a collection holding the same texts: the same order and
    the same scores (the memory leg's statistics are that user's memories alone)."""
    from bunko.analysis import get_analyzer
    from bunko.search import keyword_query
    from bunko.search.keyword import rank_texts
    from bunko.types import Document

    texts = ["前回、繰り上がりの足し算で3回つまずいた", "繰り下がりの引き算は得意", "足し算の宿題をした",
             "漢字の書き取りで満点", "算数の時間に足し算を練習した"]
    tenant = engine.tenant(_new_tenant())
    for i, text in enumerate(texts):
        tenant.add_document(Document(content=text, metadata={"source": f"m{i}.txt"}), "same")
    analyzer = tenant.store.read_collection("same").analyzer
    tokens = [get_analyzer(analyzer).index_tokens(t) for t in texts]
    ranked = rank_texts(analyzer, "足し算でつまずいた", tokens, 5)
    # BM25 alone: a collection's keyword leg re-ranks by phrase and title after it, memories do not.
    by_collection = keyword_query(tenant.store, "same", "足し算でつまずいた", 5, proximity=None)
    assert [texts[i] for i in ranked.keys.tolist()] == [h.content for h in by_collection]
    assert ranked.scores.tolist() == [h.score for h in by_collection]
