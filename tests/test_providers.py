"""The shared HTTP core and the OpenAI / OpenAI-compatible clients, against a local fake server."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from bunko.errors import (
    ConfigError,
    GenerationError,
    LLMAuthError,
    LLMProviderError,
    LLMRateLimitError,
    LLMTimeoutError,
    MissingAPIKeyError,
    ProviderTimeout,
    RateLimited,
)
from bunko.llm import LLMMessage, get_llm
from bunko.providers import (
    AnthropicChat,
    CohereEmbedder,
    GeminiChat,
    GeminiEmbedder,
    HostedClient,
    HostedLLM,
    OpenAIChat,
    OpenAICompatibleChat,
    OpenAICompatibleEmbedder,
    OpenAIEmbedder,
    RetryPolicy,
    VoyageEmbedder,
    parse_retry_after,
)
from bunko.rerankers import CohereReranker, JinaReranker, VoyageReranker
from bunko.types import UsageEvent
from tests.provider_fakes import OpenAIFake, Reply, openai_error, sse_frame

KEY = "sk-test-SECRET-0123456789"
FAST = RetryPolicy(backoff_base=0.001, backoff_max=0.01)
MESSAGES = [LLMMessage("system", "資料に基づいて答えてください。"), LLMMessage("user", "日本の首都は？")]


@pytest.fixture()
def server() -> Iterator[OpenAIFake]:
    with OpenAIFake(api_key=KEY) as fake:
        yield fake


def chat(server: OpenAIFake, events: list[UsageEvent] | None = None, **options) -> OpenAICompatibleChat:
    options.setdefault("retry", FAST)
    return OpenAICompatibleChat("qwen3-8b", base_url=server.url + "/v1", api_key=KEY,
                                usage_sink=events.append if events is not None else None, **options)


async def _collect(llm, **kwargs):
    return [delta async for delta in llm.stream(MESSAGES, temperature=0.1, max_tokens=64, **kwargs)]


# -- complete ------------------------------------------------------------------------------------


def test_complete_sends_the_openai_wire_format_and_reads_the_answer(server: OpenAIFake) -> None:
    events: list[UsageEvent] = []
    llm = chat(server, events)
    response = asyncio.run(llm.complete(MESSAGES, temperature=0.1, max_tokens=64))
    assert response.text == "東京です[1]。"
    assert response.model == "qwen3-8b"
    assert response.input_tokens > 0 and response.output_tokens == 3
    (request,) = server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    assert request.json == {"model": "qwen3-8b", "temperature": 0.1, "max_tokens": 64,
                            "messages": [{"role": "system", "content": "資料に基づいて答えてください。"},
                                         {"role": "user", "content": "日本の首都は？"}]}
    (event,) = events
    assert (event.operation, event.provider, event.model) == ("llm", "openai-compatible", "qwen3-8b")
    assert (event.input_tokens, event.output_tokens) == (response.input_tokens, 3)
    assert event.latency_ms > 0 and "error" not in event.metadata


def test_openai_sends_max_completion_tokens_and_needs_a_key(server: OpenAIFake,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="OPENAI_API_KEY"):
        OpenAIChat("gpt-4o-mini")
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    llm = OpenAIChat("gpt-4o-mini", base_url=server.url + "/v1", retry=FAST)
    assert asyncio.run(llm.complete(MESSAGES, temperature=0, max_tokens=10)).text
    body = server.requests[0].json
    assert body["max_completion_tokens"] == 10 and "max_tokens" not in body
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


def test_openai_compatible_never_sends_the_openai_key(server: OpenAIFake, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    server.api_key = None  # a local vLLM without auth
    llm = OpenAICompatibleChat("m", base_url=server.url + "/v1", retry=FAST)
    asyncio.run(llm.complete(MESSAGES))
    assert "authorization" not in server.requests[0].headers


def test_registry_builds_the_client_with_options(server: OpenAIFake) -> None:
    llm = get_llm("openai-compatible:qwen3-8b", base_url=server.url + "/v1", api_key=KEY, retry=FAST)
    assert isinstance(llm, OpenAICompatibleChat)
    assert asyncio.run(llm.complete(MESSAGES)).text == "東京です[1]。"
    with pytest.raises(ConfigError, match="base_url"):
        get_llm("openai-compatible:qwen3-8b")


def test_one_client_serves_several_event_loops(server: OpenAIFake) -> None:
    llm = chat(server)
    for _ in range(3):  # the CLI and tests call asyncio.run repeatedly with the same provider
        assert asyncio.run(llm.complete(MESSAGES)).text


# -- streaming -----------------------------------------------------------------------------------


def test_stream_yields_text_deltas_then_one_response_with_usage(server: OpenAIFake) -> None:
    events: list[UsageEvent] = []
    deltas = asyncio.run(_collect(chat(server, events)))
    texts = [d.text for d in deltas[:-1]]
    assert texts == ["東京で", "す[1", "]。"]
    assert all(d.response is None for d in deltas[:-1])
    final = deltas[-1].response
    assert final is not None and deltas[-1].text == ""
    assert final.text == "東京です[1]。" and final.output_tokens == 3 and final.input_tokens > 0
    assert final.raw["finish_reason"] == "stop"
    body = server.requests[0].json
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert server.requests[0].headers["accept"] == "text/event-stream"
    (event,) = events
    assert event.metadata["stream"] is True and event.output_tokens == 3


def test_stream_delivers_each_event_as_it_is_flushed(server: OpenAIFake) -> None:
    server.stream_pieces = ["最初", "の", "答え"]

    async def run() -> tuple[str, bool, list[str]]:
        llm = chat(server)
        stream = llm.stream(MESSAGES, temperature=0, max_tokens=16)
        first = await stream.__anext__()
        while not first.text:
            first = await stream.__anext__()
        # The server reaches its gate right after writing the first piece (the wait covers that
        # race); the rest stays unsent until released, so the client had the first piece early.
        held = server.holding.wait(5)
        server.release.set()
        rest = [d.text async for d in stream]
        return first.text, held, rest

    server.stream_gate_after = 2  # hold the stream after the role chunk and the first piece
    first, held, rest = asyncio.run(run())
    assert first == "最初" and held
    assert "".join(rest) == "の答え"


def test_abandoned_stream_is_closed_and_reported_as_cancelled(server: OpenAIFake) -> None:
    events: list[UsageEvent] = []

    async def run() -> str:
        stream = chat(server, events).stream(MESSAGES)
        first = await stream.__anext__()
        while not first.text:
            first = await stream.__anext__()
        await stream.aclose()
        return first.text

    assert asyncio.run(run()) == "東京で"
    (event,) = events
    assert event.metadata == {"stream": True, "error": "CANCELLED"}


def test_stream_retries_before_the_first_event(server: OpenAIFake) -> None:
    server.fail(Reply(503, json=openai_error("overloaded", "server_error")), Reply(drop=True))
    deltas = asyncio.run(_collect(chat(server)))
    assert deltas[-1].response.text == "東京です[1]。"
    assert len(server.requests) == 3


def test_stream_that_breaks_after_the_first_event_is_not_replayed(server: OpenAIFake) -> None:
    broken = [sse_frame({"id": "x", "model": "m", "choices": [{"index": 0, "delta": {"content": "東"}}]}),
              "data: {\"choices\": [{\"index\": 0, \"delta\": {\"content\": \"京"]  # cut off mid-event
    server.fail(Reply(sse=broken))
    events: list[UsageEvent] = []

    async def run() -> list[str]:
        seen = []
        with pytest.raises(LLMProviderError) as info:
            async for delta in chat(server, events).stream(MESSAGES):
                seen.append(delta.text)
        assert "qwen3-8b" in str(info.value)
        return seen

    assert asyncio.run(run()) == ["東"]
    assert len(server.requests) == 1
    assert events[0].metadata["error"] == "LLM_PROVIDER_ERROR"


def test_stream_error_event_from_the_server_is_a_generation_error(server: OpenAIFake) -> None:
    server.fail(Reply(sse=[sse_frame({"error": {"message": "context length exceeded", "type": "invalid"}})]))
    with pytest.raises(LLMProviderError, match="context length exceeded"):
        asyncio.run(_collect(chat(server)))


# -- retries and errors --------------------------------------------------------------------------


def test_429_waits_for_retry_after_then_succeeds(server: OpenAIFake) -> None:
    server.fail(Reply(429, json=openai_error("Rate limit reached", "requests"), headers={"Retry-After": "0.3"}))
    started = time.perf_counter()
    response = asyncio.run(chat(server).complete(MESSAGES))
    assert response.text
    assert len(server.requests) == 2
    assert time.perf_counter() - started >= 0.3  # the backoff alone would be ~1 ms


def test_429_forever_is_a_rate_limit_error_after_five_tries(server: OpenAIFake) -> None:
    server.fail(*[Reply(429, json=openai_error("Rate limit reached for gpt", "requests"),
                        headers={"Retry-After": "0"}) for _ in range(10)])
    events: list[UsageEvent] = []
    with pytest.raises(LLMRateLimitError) as info:
        asyncio.run(chat(server, events).complete(MESSAGES))
    error = info.value
    assert isinstance(error, RateLimited) and error.code == "LLM_RATE_LIMITED"
    assert error.status == 429 and error.provider == "openai-compatible" and error.model == "qwen3-8b"
    assert "HTTP 429" in str(error) and "Rate limit reached for gpt" in str(error) and "5 tries" in str(error)
    assert len(server.requests) == 5
    assert events[0].metadata["error"] == "LLM_RATE_LIMITED"


def test_retry_after_longer_than_the_limit_fails_at_once(server: OpenAIFake) -> None:
    server.fail(Reply(429, json=openai_error("quota"), headers={"Retry-After": "3600"}))
    with pytest.raises(LLMRateLimitError) as info:
        asyncio.run(chat(server).complete(MESSAGES))
    assert info.value.retry_after == 3600
    assert len(server.requests) == 1


def test_500s_are_retried_and_max_retries_is_configurable(server: OpenAIFake) -> None:
    server.fail(Reply(500, json=openai_error("The server had an error", "server_error")),
                Reply(502, body=b"<html>Bad Gateway</html>", headers={"content-type": "text/html"}))
    assert asyncio.run(chat(server).complete(MESSAGES)).text
    assert len(server.requests) == 3
    server.requests.clear()
    server.fail(*[Reply(500, json=openai_error("boom", "server_error"))] * 3)
    with pytest.raises(LLMProviderError, match=r"HTTP 500 .*boom"):
        asyncio.run(chat(server, max_retries=1).complete(MESSAGES))
    assert len(server.requests) == 2


def test_timeout_is_a_typed_error(server: OpenAIFake) -> None:
    # Each answer comes only after the client's timeout; had the timeout not fired, the call would succeed.
    server.fail(Reply(delay=1.0), Reply(delay=1.0))
    with pytest.raises(LLMTimeoutError) as info:
        asyncio.run(chat(server, timeout=0.2, max_retries=1).complete(MESSAGES))
    assert isinstance(info.value, ProviderTimeout) and info.value.code == "LLM_TIMEOUT"
    assert "0.2s" in str(info.value)
    assert len(server.requests) == 2


def test_auth_failure_is_not_retried_and_never_shows_the_key(server: OpenAIFake) -> None:
    llm = OpenAICompatibleChat("m", base_url=server.url + "/v1", api_key="sk-wrong-key-987", retry=FAST)
    with pytest.raises(LLMAuthError) as info:
        asyncio.run(llm.complete(MESSAGES))
    text = str(info.value)
    assert "HTTP 401" in text and "Incorrect API key" in text
    assert "sk-wrong-key-987" not in text and "sk-wrong-key-987" not in repr(llm) and KEY not in text
    assert len(server.requests) == 1


def test_echoed_key_is_masked(server: OpenAIFake) -> None:
    server.fail(Reply(400, json=openai_error(f"bad request for key {KEY}")))
    with pytest.raises(LLMProviderError) as info:
        asyncio.run(chat(server).complete(MESSAGES))
    assert KEY not in str(info.value) and "***" in str(info.value)


def test_malformed_json_is_a_provider_error(server: OpenAIFake) -> None:
    server.fail(Reply(body=b'{"choices": [', headers={"content-type": "application/json"}))
    with pytest.raises(LLMProviderError, match="malformed JSON"):
        asyncio.run(chat(server).complete(MESSAGES))
    server.fail(Reply(json={"object": "chat.completion"}))  # valid JSON, wrong shape
    with pytest.raises(LLMProviderError, match="unexpected response shape"):
        asyncio.run(chat(server).complete(MESSAGES))


def test_connection_refused_is_a_provider_error() -> None:
    llm = OpenAICompatibleChat("m", base_url="http://127.0.0.1:9/v1", retry=FAST, max_retries=1)
    with pytest.raises(LLMProviderError, match="connection failed"):
        asyncio.run(llm.complete(MESSAGES))


def test_bad_messages_are_rejected_before_any_call(server: OpenAIFake) -> None:
    llm = chat(server)
    with pytest.raises(GenerationError):
        asyncio.run(llm.complete([]))
    with pytest.raises(GenerationError, match="no user message"):
        asyncio.run(llm.complete([LLMMessage("system", "x")]))
    assert server.requests == []


# -- Retry-After parsing -------------------------------------------------------------------------


# -- the client base every hosted provider builds on ------------------------------------------------

HOSTED = [OpenAIEmbedder, OpenAICompatibleEmbedder, GeminiEmbedder, CohereEmbedder, VoyageEmbedder, OpenAIChat,
          OpenAICompatibleChat, AnthropicChat, GeminiChat, CohereReranker, VoyageReranker, JinaReranker]


@pytest.mark.parametrize("cls", HOSTED, ids=lambda cls: cls.__name__)
def test_every_hosted_client_resolves_model_url_key_timeout_and_retries_alike(
        cls: type[HostedClient], monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "ANTHROPIC_API_KEY", "COHERE_API_KEY",
                "CO_API_KEY", "VOYAGE_API_KEY", "JINA_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    where = {} if cls.default_base_url else {"base_url": "http://127.0.0.1:9/v1/"}
    client = cls(api_key=KEY, timeout=7, max_retries=2, **where) if cls.default_model else None
    if client is None:  # servers of any model: the model must be named
        with pytest.raises(ConfigError, match="a model name is required"):
            cls(api_key=KEY, **where)
        client = cls("m", api_key=KEY, timeout=7, max_retries=2, **where)
    assert isinstance(client, HostedClient)
    assert client.model == (cls.default_model or "m")
    assert client.core.base_url == (cls.default_base_url or "http://127.0.0.1:9/v1")
    assert (client.core.timeout, client.core.retry.max_retries) == (7, 2)
    assert KEY not in repr(client) and KEY in str(client.core._headers)
    default_timeout = cls("m", api_key=KEY, **where).core.timeout
    assert default_timeout == (120.0 if isinstance(client, HostedLLM) else 60.0)
    with pytest.raises(ConfigError, match=r"does not take the option\(s\) colour"):
        cls("m", api_key=KEY, colour="red", **where)  # type: ignore[call-arg]
    if not cls.default_base_url:
        with pytest.raises(ConfigError, match="base_url is required"):
            cls("m", api_key=KEY)
    if not cls.key_required:
        monkeypatch.setenv("OPENAI_API_KEY", "sk-not-for-other-servers")
        assert "sk-not" not in str(cls("m", **where).core._headers)  # no key: none is read or sent
        return
    with pytest.raises(MissingAPIKeyError, match=" or ".join(cls.env_vars)) as missing:
        cls("m", **where)
    assert missing.value.code == "MISSING_API_KEY"
    monkeypatch.setenv(cls.env_vars[-1], "key-from-the-environment")
    assert "key-from-the-environment" in str(cls("m", **where).core._headers)


@pytest.mark.parametrize("option", [{"timeout": 0}, {"timeout": -1.5}, {"timeout": "soon"}, {"max_retries": -1},
                                    {"max_retries": 1.5}, {"max_retries": True}])
def test_bad_timeout_or_retries_is_a_config_error(option: dict[str, object]) -> None:
    with pytest.raises(ConfigError, match=next(iter(option))):
        OpenAICompatibleChat("m", base_url="http://127.0.0.1:9/v1", **option)  # type: ignore[arg-type]


def test_parse_retry_after_reads_seconds_and_http_dates() -> None:
    now = datetime(2025, 10, 21, 7, 28, 0, tzinfo=UTC)
    assert parse_retry_after("7") == 7.0
    assert parse_retry_after("Tue, 21 Oct 2025 07:28:30 GMT", now=now) == 30.0
    assert parse_retry_after("Tue, 21 Oct 2025 07:27:00 GMT", now=now) == 0.0  # in the past: no wait
    assert parse_retry_after("soon") is None and parse_retry_after(None) is None


def test_backoff_grows_exponentially_with_jitter() -> None:
    policy = RetryPolicy(backoff_base=1.0, backoff_max=8.0)
    for retry, full in enumerate([1.0, 2.0, 4.0, 8.0, 8.0]):
        waits = {policy.backoff(retry) for _ in range(20)}
        assert all(full / 2 <= w <= full for w in waits)
        assert len(waits) > 1  # jittered
