"""Usage accounting (R13) and search logs (R33) through the engine, on both backends, tenant by tenant."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from bunko import Bunko

from .conftest import EXAMPLES
from .provider_fakes import OpenAIFake


@pytest.fixture()
def fake() -> Iterator[OpenAIFake]:
    with OpenAIFake(reply_text="最低3日分です[1]。") as server:
        yield server


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'usage.db'}"
    return request.getfixturevalue("pg_url")


def totals(scope) -> dict[tuple[str, str, str], dict]:
    return {(t.operation, t.provider, t.model): t.to_dict() for t in scope.usage()}


def test_every_operation_is_recorded_for_its_own_tenant(store_url: str, embedder, fake: OpenAIFake) -> None:
    backend = "sqlite" if store_url.startswith("sqlite") else "postgresql"
    with Bunko(store_url, embedder=embedder, llm="openai-compatible:chat-1", llm_base_url=fake.url + "/v1") as engine:
        acme, other = engine.tenant("acme"), engine.tenant("other")
        report = acme.ingest([EXAMPLES], "bousai")
        acme.search("避難場所", "bousai", top_k=3, mode="hybrid")
        answer = acme.ask("水は何日分？", "bousai", mode="vector")

        usage = totals(acme)
        embedding = usage[("embedding", "use", embedder.model)]
        assert embedding["items"] == report.chunks + 2  # every chunk, plus the two queries
        upsert = usage[("upsert", backend, "")]
        assert upsert["items"] == report.chunks and upsert["calls"] >= 1
        assert usage[("search", backend, "hybrid")]["items"] == 3
        assert usage[("search", backend, "vector")]["calls"] == 1
        llm = usage[("llm", "openai-compatible", "chat-1")]
        assert (llm["calls"], llm["input_tokens"], llm["output_tokens"]) == (
            1, answer.usage["input_tokens"], answer.usage["output_tokens"])
        assert llm["input_tokens"] > 0 and llm["latency_ms_total"] > 0

        # The other tenant's work shows up only in its own records, and never in acme's.
        assert other.usage() == []
        other.ingest([EXAMPLES / "bichiku.txt"], "bousai")
        asyncio.run(_drain(other.astream_ask("水は？", "bousai")))
        theirs = totals(other)
        assert theirs[("llm", "openai-compatible", "chat-1")]["calls"] == 1
        assert totals(acme) == usage

        log = acme.search_log()
        assert [(e["query"], e["search_type"]) for e in log] == [("水は何日分？", "vector"), ("避難場所", "hybrid")]
        assert [e["query"] for e in other.search_log()] == ["水は？"]
        assert acme.usage(since=datetime.now(UTC) + timedelta(minutes=5)) == []


async def _drain(stream) -> list:
    return [event async for event in stream]


def test_a_failed_llm_call_is_still_recorded(tmp_path, embedder, fake: OpenAIFake) -> None:
    from bunko.errors import RAGPipelineError

    from .provider_fakes import Reply

    with Bunko(f"sqlite:///{tmp_path / 'u.db'}", embedder=embedder, llm="openai-compatible:chat-1",
               llm_base_url=fake.url + "/v1", llm_max_retries=0) as engine:
        scope = engine.tenant("acme")
        scope.ingest([EXAMPLES / "bichiku.txt"], "c")
        fake.fail(Reply(500, json={"error": {"message": "boom"}}))
        with pytest.raises(RAGPipelineError):
            scope.ask("水は？", "c")
        assert totals(scope)[("llm", "openai-compatible", "chat-1")]["calls"] == 1


def test_search_logs_can_be_anonymised(tmp_path, embedder) -> None:
    with Bunko(f"sqlite:///{tmp_path / 'a.db'}", embedder=embedder, anonymize_search_logs=True) as engine:
        scope = engine.tenant("acme")
        scope.ingest([EXAMPLES / "bichiku.txt"], "c")
        scope.search("私の個人的な質問", "c")
        [entry] = scope.search_log()
        assert entry["query"] is None and entry["result_count"] > 0
