"""Hosted embedding providers against local servers that speak their wire formats."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from bunko import Bunko, Document
from bunko.embedders import BaseEmbedder, get_embedder
from bunko.errors import (
    ConfigError,
    EmbeddingAuthError,
    EmbeddingError,
    EmbeddingProviderError,
    EmbeddingRateLimitError,
    EmbeddingTimeoutError,
    MissingAPIKeyError,
)
from bunko.providers import (
    CohereEmbedder,
    GeminiEmbedder,
    OpenAICompatibleEmbedder,
    OpenAIEmbedder,
    RetryPolicy,
    VoyageEmbedder,
)
from bunko.types import UsageEvent
from tests.provider_fakes import (
    CohereFake,
    GeminiFake,
    OpenAIFake,
    Reply,
    VoyageFake,
    fake_vector,
    gemini_error,
    openai_error,
)

KEY = "test-key-SECRET-42"
FAST = RetryPolicy(backoff_base=0.001, backoff_max=0.01)
TEXTS = ["東京は日本の首都です。", "大阪は食の都です。", "富士山は日本一高い山です。"]


def run(coro):
    return asyncio.run(coro)


# -- OpenAI and OpenAI-compatible ----------------------------------------------------------------


def test_openai_embeddings_wire_format_order_and_usage() -> None:
    events: list[UsageEvent] = []
    with OpenAIFake(api_key=KEY, dimension=1536) as server:
        embedder = OpenAIEmbedder("text-embedding-3-small", base_url=server.url + "/v1", api_key=KEY, retry=FAST,
                                  usage_sink=events.append)
        assert embedder.dimension == 1536
        vectors = run(embedder.embed_batch(TEXTS))
        (request,) = server.requests
    assert request.path == "/v1/embeddings"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.json == {"model": "text-embedding-3-small", "input": TEXTS, "encoding_format": "float"}
    # The fake answers in reverse order; the client sorts by index.
    assert np.allclose(vectors, [fake_vector(t, 1536) for t in TEXTS], atol=1e-6)
    (event,) = events  # one event per API call, with the tokens the API counted
    assert (event.operation, event.provider, event.items) == ("embedding", "openai", 3)
    assert event.input_tokens == sum(len(t) for t in TEXTS)
    assert event.metadata == {"attempts": 1}


def test_openai_dimensions_parameter_shortens_vectors() -> None:
    with OpenAIFake(api_key=KEY, dimension=3072) as server:
        embedder = OpenAIEmbedder("text-embedding-3-large", base_url=server.url + "/v1", api_key=KEY,
                                  dimensions=256, retry=FAST)
        assert embedder.dimension == 256
        vector = run(embedder.embed("東京"))
        assert server.requests[0].json["dimensions"] == 256
    assert len(vector) == 256


def test_openai_key_from_the_environment_only_when_not_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="OPENAI_API_KEY") as info:
        get_embedder("openai:text-embedding-3-small")
    assert info.value.code == "MISSING_API_KEY"
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with OpenAIFake(api_key=KEY) as server:
        embedder = get_embedder("openai:text-embedding-3-small", base_url=server.url + "/v1", dimensions=8)
        run(embedder.embed("x"))
        assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_openai_compatible_learns_the_dimension_from_the_first_response() -> None:
    with OpenAIFake(dimension=24) as server:  # a local vLLM/TEI without auth
        embedder = get_embedder("openai-compatible:cl-nagoya/ruri-v3-310m", base_url=server.url + "/v1",
                                retry=FAST)
        assert isinstance(embedder, OpenAICompatibleEmbedder)
        assert "dimension=unknown" in repr(embedder)
        vectors = run(embedder.embed_batch(TEXTS))
        assert len(server.requests) == 1  # learned from the answer, no extra call
        assert embedder.dimension == 24 and len(vectors[0]) == 24
        assert "authorization" not in server.requests[0].headers
        assert "dimensions" not in server.requests[0].json
        # Once learned, a different size from the same server is an error.
        server.dimension = 12
        with pytest.raises(EmbeddingError, match="12-d vectors; this embedder is 24-d"):
            run(embedder.embed("別の文"))


def test_unknown_dimension_is_probed_once_when_asked_for_first() -> None:
    events: list[UsageEvent] = []
    with OpenAIFake(dimension=24) as server:
        embedder = OpenAICompatibleEmbedder("m", base_url=server.url + "/v1", retry=FAST, usage_sink=events.append)
        assert embedder.dimension == 24  # a collection needs it before the first embedding call
        assert embedder.dimension == 24
        (probe,) = server.requests
        assert probe.json["input"] == ["dimension probe"]
        assert events[0].metadata == {"probe": True}

        async def inside_a_loop() -> int:
            other = OpenAICompatibleEmbedder("m", base_url=server.url + "/v1", retry=FAST)
            return other.dimension

        assert asyncio.run(inside_a_loop()) == 24
    down = OpenAICompatibleEmbedder("m", base_url="http://127.0.0.1:9/v1", retry=FAST, max_retries=0)
    with pytest.raises(EmbeddingProviderError, match="connection failed"):
        _ = down.dimension


def test_wrong_dimension_from_the_api_is_an_embedding_error() -> None:
    with OpenAIFake(api_key=KEY, dimension=768) as server:
        embedder = OpenAIEmbedder("text-embedding-3-small", base_url=server.url + "/v1", api_key=KEY, retry=FAST)
        with pytest.raises(EmbeddingProviderError) as info:
            run(embedder.embed("東京"))
    assert "768-d vectors; this embedder is 1536-d" in str(info.value)
    assert "openai:text-embedding-3-small" in str(info.value)


def test_too_few_vectors_and_ragged_vectors_are_errors() -> None:
    with OpenAIFake(api_key=KEY) as server:
        embedder = OpenAIEmbedder("m", base_url=server.url + "/v1", api_key=KEY, dimensions=2, retry=FAST)
        server.fail(Reply(json={"data": [{"index": 0, "embedding": [0.1, 0.2]}], "usage": {}}))
        with pytest.raises(EmbeddingProviderError, match="1 vectors for 2 texts"):
            run(embedder.embed_batch(["a", "b"]))
        server.fail(Reply(json={"data": [{"index": 0, "embedding": [0.1, 0.2]},
                                         {"index": 1, "embedding": [0.1]}]}))
        with pytest.raises(EmbeddingProviderError, match="different lengths"):
            run(embedder.embed_batch(["a", "b"]))


def test_batches_split_at_the_limit_run_concurrently_and_keep_order() -> None:
    texts = [f"文書その{i}です。" for i in range(250)]
    events: list[UsageEvent] = []
    with OpenAIFake(dimension=8) as server:
        embedder = OpenAICompatibleEmbedder("m", base_url=server.url + "/v1", batch_size=100, concurrency=2,
                                            retry=FAST, usage_sink=events.append)
        vectors = run(embedder.embed_batch(texts))
        sizes = sorted(len(r.json["input"]) for r in server.requests)
    assert sizes == [50, 100, 100]
    assert np.allclose(vectors, [fake_vector(t, 8) for t in texts], atol=1e-6)
    assert [e.items for e in events].count(100) == 2 and len(events) == 3
    assert sum(e.input_tokens for e in events) == sum(len(t) for t in texts)


def test_concurrency_is_bounded() -> None:
    texts = [f"t{i}" for i in range(8)]
    with OpenAIFake(dimension=4) as server:
        active, peak = [0], [0]
        original = server.routes[0][2]

        def slow(request):
            active[0] += 1
            peak[0] = max(peak[0], active[0])
            time.sleep(0.1)
            active[0] -= 1
            return original(request)

        server.routes[0] = (server.routes[0][0], server.routes[0][1], slow)
        embedder = OpenAICompatibleEmbedder("m", base_url=server.url + "/v1", batch_size=1, concurrency=3,
                                            retry=FAST)
        run(embedder.embed_batch(texts))
    assert len(server.requests) == 8
    assert peak[0] == 3


def test_batch_size_cannot_exceed_the_api_limit() -> None:
    assert CohereEmbedder("embed-v4.0", api_key=KEY, batch_size=500).batch_size == 96
    assert OpenAIEmbedder(api_key=KEY).batch_size == 100
    with pytest.raises(ConfigError, match="batch_size"):
        OpenAIEmbedder(api_key=KEY, batch_size=0)


def test_embedding_retries_then_typed_errors() -> None:
    with OpenAIFake(api_key=KEY, dimension=8) as server:
        embedder = OpenAIEmbedder("m", base_url=server.url + "/v1", api_key=KEY, dimensions=8, retry=FAST)
        server.fail(Reply(429, json=openai_error("Rate limit", "requests"), headers={"Retry-After": "0"}),
                    Reply(500, json=openai_error("oops", "server_error")), Reply(drop=True))
        assert len(run(embedder.embed("東京"))) == 8
        assert len(server.requests) == 4

        server.requests.clear()
        server.fail(*[Reply(429, json=openai_error("Rate limit", "requests"), headers={"Retry-After": "0"})] * 5)
        with pytest.raises(EmbeddingRateLimitError, match="HTTP 429"):
            run(embedder.embed("東京"))
        assert len(server.requests) == 5  # at most 5 tries in all

        slow = OpenAIEmbedder("m", base_url=server.url + "/v1", api_key=KEY, dimensions=8, retry=FAST,
                              timeout=0.2, max_retries=0)
        server.fail(Reply(delay=1.0))
        with pytest.raises(EmbeddingTimeoutError):
            run(slow.embed("東京"))

        wrong = OpenAIEmbedder("m", base_url=server.url + "/v1", api_key="wrong-key", dimensions=8, retry=FAST)
        with pytest.raises(EmbeddingAuthError) as info:
            run(wrong.embed("東京"))
        assert "wrong-key" not in str(info.value)

        server.fail(Reply(body=b"<html>gateway</html>", headers={"content-type": "text/html"}))
        with pytest.raises(EmbeddingProviderError, match="malformed JSON"):
            run(embedder.embed("東京"))


def test_failed_calls_are_reported_once_with_their_code() -> None:
    events: list[UsageEvent] = []
    with OpenAIFake(api_key=KEY) as server:
        embedder = OpenAIEmbedder("m", base_url=server.url + "/v1", api_key="bad", dimensions=8, retry=FAST,
                                  usage_sink=events.append)
        with pytest.raises(EmbeddingAuthError):
            run(embedder.embed_batch(["a", "b"]))
    (event,) = events
    assert event.metadata == {"error": "EMBEDDING_AUTH"} and event.items == 2 and event.input_tokens == 0


def test_get_embedder_checks_options_and_keeps_the_bundled_default() -> None:
    assert get_embedder("use").provider == "use"
    assert get_embedder().provider == "use"
    with pytest.raises(ConfigError, match="does not take"):
        get_embedder("use", base_url="http://x")
    with pytest.raises(ConfigError, match="base_url"):
        get_embedder("openai-compatible:m")


def test_engine_ingests_and_searches_with_a_hosted_embedder(tmp_path: Path) -> None:
    with OpenAIFake(dimension=16) as server:
        embedder = get_embedder("openai-compatible:ruri", base_url=server.url + "/v1", retry=FAST)
        with Bunko(f"sqlite:///{tmp_path / 'e.db'}", embedder=embedder) as engine:
            tenant = engine.tenant("acme")
            for text in TEXTS:
                tenant.add_document(Document(text, {"source": text}), collection="docs")
            (collection,) = tenant.collections()
            assert (collection.embedding_provider, collection.embedding_model, collection.dimension) == (
                "openai-compatible", "ruri", 16)
            hits = tenant.search(TEXTS[1], collection="docs").results
        assert hits[0].content == TEXTS[1]  # the same text gives the same fake vector
        assert server.requests  # the vectors really came over HTTP


# -- Gemini --------------------------------------------------------------------------------------


def test_gemini_batch_embed_contents_task_types_and_normalisation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", KEY)
    with GeminiFake(api_key=KEY) as server:
        embedder = get_embedder("gemini:gemini-embedding-001", base_url=server.url + "/v1beta", retry=FAST)
        assert isinstance(embedder, GeminiEmbedder) and embedder.dimension == 1024  # the seed's default
        docs = run(embedder.embed_batch(TEXTS))
        query = run(embedder.embed_query(TEXTS[0]))
        doc_request, query_request = server.requests
    assert doc_request.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert doc_request.headers["x-goog-api-key"] == KEY and "key" not in doc_request.query
    assert doc_request.json["requests"][0] == {
        "model": "models/gemini-embedding-001", "content": {"parts": [{"text": TEXTS[0]}]},
        "taskType": "RETRIEVAL_DOCUMENT", "outputDimensionality": 1024}
    assert query_request.json["requests"][0]["taskType"] == "RETRIEVAL_QUERY"
    assert np.allclose(np.linalg.norm(docs, axis=1), 1.0, atol=1e-5)  # shortened vectors are normalised
    assert not np.allclose(docs[0], query, atol=1e-3)  # the query task type gives another vector


def test_gemini_splits_at_100_and_maps_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="GEMINI_API_KEY or GOOGLE_API_KEY"):
        GeminiEmbedder()
    with GeminiFake(api_key=KEY) as server:
        embedder = GeminiEmbedder(base_url=server.url + "/v1beta", api_key=KEY, dimensions=3072, retry=FAST)
        vectors = run(embedder.embed_batch([f"文{i}" for i in range(205)]))
        assert sorted(len(r.json["requests"]) for r in server.requests) == [5, 100, 100]
        assert len(vectors) == 205 and len(vectors[0]) == 3072
        server.fail(Reply(429, json=gemini_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded"),
                          headers={"Retry-After": "0"}))
        assert run(embedder.embed("x"))
        bad = GeminiEmbedder(base_url=server.url + "/v1beta", api_key="nope", retry=FAST)
        with pytest.raises(EmbeddingProviderError, match="INVALID_ARGUMENT: API key not valid"):
            run(bad.embed("x"))


# -- Cohere and Voyage ---------------------------------------------------------------------------


def test_cohere_v2_embed_input_types_and_billed_tokens() -> None:
    events: list[UsageEvent] = []
    with CohereFake(api_key=KEY) as server:
        embedder = get_embedder("cohere:embed-multilingual-v3.0", base_url=server.url, api_key=KEY, retry=FAST,
                                usage_sink=events.append)
        assert embedder.dimension == 1024
        docs = run(embedder.embed_batch(TEXTS))
        query = run(embedder.embed_query(TEXTS[0]))
        doc_request, query_request = server.requests
    assert doc_request.path == "/v2/embed"
    assert doc_request.json == {"model": "embed-multilingual-v3.0", "texts": TEXTS, "input_type": "search_document",
                                "embedding_types": ["float"], "truncate": "END"}
    assert query_request.json["input_type"] == "search_query"
    assert np.allclose(docs[0], fake_vector("search_document" + TEXTS[0], 1024), atol=1e-6)
    assert np.allclose(query, fake_vector("search_query" + TEXTS[0], 1024), atol=1e-6)
    assert events[0].input_tokens == sum(len(t) for t in TEXTS)


def test_cohere_batches_of_96_and_error_message() -> None:
    with CohereFake(api_key=KEY) as server:
        embedder = CohereEmbedder("embed-v4.0", base_url=server.url, api_key=KEY, dimensions=256, retry=FAST)
        run(embedder.embed_batch([f"t{i}" for i in range(100)]))
        assert sorted(len(r.json["texts"]) for r in server.requests) == [4, 96]
        assert server.requests[0].json["output_dimension"] == 256
        bad = CohereEmbedder(base_url=server.url, api_key="nope", retry=FAST)
        with pytest.raises(EmbeddingAuthError, match=r"HTTP 401.*invalid api token"):
            run(bad.embed("x"))


def test_voyage_input_types_and_usage() -> None:
    events: list[UsageEvent] = []
    with VoyageFake(api_key=KEY) as server:
        embedder = get_embedder("voyage:voyage-3.5", base_url=server.url, api_key=KEY, retry=FAST,
                                usage_sink=events.append)
        assert isinstance(embedder, VoyageEmbedder) and embedder.dimension == 1024
        run(embedder.embed_batch(TEXTS))
        query = run(embedder.embed_query("首都"))
        doc_request, query_request = server.requests
        bad = VoyageEmbedder(base_url=server.url, api_key="nope", retry=FAST)
        with pytest.raises(EmbeddingAuthError, match="Provided API key is invalid"):
            run(bad.embed("x"))
    assert doc_request.path == "/v1/embeddings"
    assert doc_request.json == {"model": "voyage-3.5", "input": TEXTS, "input_type": "document"}
    assert query_request.json["input_type"] == "query"
    assert np.allclose(query, fake_vector("query首都", 1024), atol=1e-6)
    assert [e.input_tokens for e in events[:2]] == [sum(len(t) for t in TEXTS), 2]


# -- local models --------------------------------------------------------------------------------


def test_importing_providers_needs_no_optional_extra() -> None:
    import bunko.providers  # noqa: F401 - must import whatever extras are installed


def test_sentence_transformers_without_the_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # as if the extra were not installed
    with pytest.raises(ConfigError, match=r'bunko\[local\]'):
        get_embedder("sentence-transformers:/models/none")


@pytest.mark.skipif(importlib.util.find_spec("sentence_transformers") is None,
                    reason="the local extra (sentence-transformers) is not installed")
def test_sentence_transformers_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    embedder = get_embedder(f"sentence-transformers:{tmp_path / 'no-such-model'}")
    assert isinstance(embedder, BaseEmbedder)
    with pytest.raises(ConfigError, match="could not load the model"):
        embedder.warm_up()
