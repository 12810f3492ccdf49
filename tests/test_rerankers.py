"""Rerankers: hosted Cohere, Voyage and Jina clients against local fakes, and the local cross-encoder."""

from __future__ import annotations

import asyncio
import importlib.util
import sys

import pytest

from bunko.errors import (
    ConfigError,
    MissingAPIKeyError,
    RerankAuthError,
    RerankError,
    RerankProviderError,
    RerankRateLimitError,
    RetrievalError,
    UnknownProviderError,
)
from bunko.providers import RetryPolicy
from bunko.rerankers import (
    CohereReranker,
    JinaReranker,
    Reranker,
    VoyageReranker,
    available_rerankers,
    get_reranker,
)
from bunko.types import SearchHit, UsageEvent
from tests.provider_fakes import CohereFake, JinaFake, Reply, VoyageFake

KEY = "test-key-SECRET-rr"
FAST = RetryPolicy(backoff_base=0.001, backoff_max=0.01)
QUERY = "富士山の高さ"
HITS = [
    SearchHit("c1", "d1", "a.txt", "大阪は食の都です。", 0.9, 0, {"page_number": 1}),
    SearchHit("c2", "d2", "b.txt", "富士山の高さは3776メートルです。", 0.8, 3),
    SearchHit("c3", "d3", "c.txt", "富士山は静岡県にあります。", 0.7, 1),
]


def test_registry_names_and_protocol() -> None:
    assert {"cohere", "voyage", "jina", "cross-encoder"} <= set(available_rerankers())
    assert isinstance(get_reranker("cohere:rerank-v3.5", api_key=KEY), Reranker)
    with pytest.raises(UnknownProviderError):
        get_reranker("nope:x")


@pytest.mark.parametrize(
    ("fake_cls", "spec", "path", "top_field", "extra"),
    [
        (CohereFake, "cohere:rerank-v3.5", "/v2/rerank", "top_n", {}),
        (VoyageFake, "voyage:rerank-2.5", "/v1/rerank", "top_k", {"truncation": True}),
        (JinaFake, "jina:jina-reranker-v2-base-multilingual", "/v1/rerank", "top_n", {"return_documents": False}),
    ],
)
def test_hosted_rerankers_reorder_hits_and_keep_the_retrieval_score(fake_cls, spec, path, top_field, extra) -> None:
    events: list[UsageEvent] = []
    with fake_cls(api_key=KEY) as server:
        reranker = get_reranker(spec, base_url=server.url, api_key=KEY, retry=FAST, usage_sink=events.append)
        ranked = asyncio.run(reranker.rerank(QUERY, HITS, top_k=2))
        (request,) = server.requests
    assert request.path == path
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.json == {"model": spec.split(":", 1)[1], "query": QUERY, "documents": [h.content for h in HITS],
                            top_field: 2, **extra}
    assert [h.chunk_id for h in ranked] == ["c2", "c3"]
    assert ranked[0].score > ranked[1].score
    assert ranked[0].metadata == {"retrieval_score": 0.8, "rerank_score": ranked[0].score}
    assert ranked[1].chunk_index == 1 and ranked[1].source == "c.txt"
    assert HITS[1].score == 0.8 and "rerank_score" not in HITS[1].metadata  # inputs untouched
    (event,) = events
    assert (event.operation, event.provider, event.items) == ("rerank", spec.split(":")[0], 3)


def test_without_top_k_every_hit_comes_back_reordered() -> None:
    with CohereFake(api_key=KEY) as server:
        reranker = CohereReranker(base_url=server.url, api_key=KEY, retry=FAST)
        ranked = asyncio.run(reranker.rerank(QUERY, HITS))
        assert "top_n" not in server.requests[0].json
    assert [h.chunk_id for h in ranked] == ["c2", "c3", "c1"]
    assert ranked[2].metadata == {"page_number": 1, "retrieval_score": 0.9, "rerank_score": ranked[2].score}


def test_rerank_validation_and_empty_input() -> None:
    reranker = CohereReranker(api_key=KEY, base_url="http://127.0.0.1:9")
    assert asyncio.run(reranker.rerank(QUERY, [])) == []  # nothing to send
    with pytest.raises(RerankError, match="query is empty"):
        asyncio.run(reranker.rerank("  ", HITS))
    with pytest.raises(RerankError, match="top_k"):
        asyncio.run(reranker.rerank(QUERY, HITS, top_k=0))


def test_rerank_errors_are_typed_retrieval_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("JINA_API_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="JINA_API_KEY"):
        JinaReranker()
    with VoyageFake(api_key=KEY) as server:
        reranker = VoyageReranker(base_url=server.url, api_key=KEY, retry=FAST, max_retries=1)
        server.fail(Reply(429, json={"detail": "rate limited"}, headers={"Retry-After": "0"}),
                    Reply(429, json={"detail": "rate limited"}, headers={"Retry-After": "0"}))
        with pytest.raises(RerankRateLimitError) as info:
            asyncio.run(reranker.rerank(QUERY, HITS))
        assert isinstance(info.value, RetrievalError) and info.value.code == "RERANK_RATE_LIMITED"
        server.fail(Reply(json={"data": [{"index": 7, "relevance_score": 0.5}]}))
        with pytest.raises(RerankError, match="unknown positions"):
            asyncio.run(reranker.rerank(QUERY, HITS))
        server.fail(Reply(json={"object": "list"}))
        with pytest.raises(RerankProviderError, match="unexpected response shape"):
            asyncio.run(reranker.rerank(QUERY, HITS))
        bad = VoyageReranker(base_url=server.url, api_key="nope", retry=FAST)
        with pytest.raises(RerankAuthError, match="Provided API key is invalid"):
            asyncio.run(bad.rerank(QUERY, HITS))


def test_cross_encoder_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if the extra were not installed
    with pytest.raises(ConfigError, match=r'bunko\[local\]'):
        get_reranker("cross-encoder:/models/none")


@pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None,
                    reason="the local extra (sentence-transformers) is not installed")
def test_cross_encoder_missing_model_is_a_clear_error(tmp_path) -> None:
    reranker = get_reranker(f"cross-encoder:{tmp_path / 'none'}")
    with pytest.raises(ConfigError, match="could not load the cross-encoder"):
        reranker.warm_up()
