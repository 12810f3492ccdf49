"""Anthropic and Gemini chat clients against local servers that speak their wire formats."""

from __future__ import annotations

import asyncio

import pytest

from bunko.config import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE
from bunko.errors import LLMAuthError, LLMProviderError, LLMRateLimitError, MissingAPIKeyError
from bunko.llm import LLMMessage, LLMProvider, available_llms, get_llm
from bunko.providers import AnthropicChat, GeminiChat, RetryPolicy
from bunko.types import UsageEvent
from tests.provider_fakes import (
    AnthropicFake,
    GeminiFake,
    OpenAIFake,
    Reply,
    anthropic_error,
    gemini_error,
    sse_frame,
)

KEY = "test-key-SECRET-77"
FAST = RetryPolicy(backoff_base=0.001, backoff_max=0.01)
MESSAGES = [
    LLMMessage("system", "資料に基づいて答えてください。"),
    LLMMessage("user", "日本の首都は？"),
    LLMMessage("assistant", "どの資料ですか？"),
    LLMMessage("user", "[1] の資料です。"),
    LLMMessage("user", "短く答えて。"),
]


async def _collect(llm):
    return [d async for d in llm.stream(MESSAGES, temperature=0.3, max_tokens=50)]


def test_every_llm_is_registered_and_implements_the_protocol() -> None:
    assert {"openai", "openai-compatible", "anthropic", "gemini"} <= set(available_llms())
    for llm in (AnthropicChat("claude-sonnet-4-5", api_key=KEY), GeminiChat("gemini-2.5-flash", api_key=KEY)):
        assert isinstance(llm, LLMProvider)


@pytest.mark.parametrize(("spec", "fake", "path", "read"), [
    ("openai-compatible:qwen3-8b", OpenAIFake, "/v1", lambda body: (body["temperature"], body["max_tokens"])),
    ("anthropic", AnthropicFake, "", lambda body: (body["temperature"], body["max_tokens"])),
    ("gemini", GeminiFake, "/v1beta",
     lambda body: (body["generationConfig"]["temperature"], body["generationConfig"]["maxOutputTokens"])),
])
def test_a_call_without_options_sends_the_settings_defaults(spec, fake, path, read) -> None:
    assert (DEFAULT_TEMPERATURE, DEFAULT_MAX_TOKENS) == (0.1, 1000)  # one place: bunko.config
    with fake(api_key=KEY) as server:
        llm = get_llm(spec, base_url=server.url + path, api_key=KEY, retry=FAST)
        assert asyncio.run(llm.complete(MESSAGES)).text
        deltas = asyncio.run(_collect_defaults(llm))
        assert deltas[-1].response is not None
        complete_body, stream_body = server.requests[0].json, server.requests[-1].json
    assert read(complete_body) == read(stream_body) == (DEFAULT_TEMPERATURE, DEFAULT_MAX_TOKENS)


async def _collect_defaults(llm):
    return [d async for d in llm.stream(MESSAGES)]


# -- Anthropic -----------------------------------------------------------------------------------


def test_anthropic_messages_wire_format() -> None:
    events: list[UsageEvent] = []
    with AnthropicFake(api_key=KEY) as server:
        llm = get_llm("anthropic:claude-sonnet-4-5", base_url=server.url, api_key=KEY, retry=FAST,
                      usage_sink=events.append)
        response = asyncio.run(llm.complete(MESSAGES, temperature=0.3, max_tokens=50))
        (request,) = server.requests
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == KEY and request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert request.json == {
        "model": "claude-sonnet-4-5", "max_tokens": 50, "temperature": 0.3,
        "system": "資料に基づいて答えてください。",
        "messages": [{"role": "user", "content": "日本の首都は？"},
                     {"role": "assistant", "content": "どの資料ですか？"},
                     {"role": "user", "content": "[1] の資料です。\n\n短く答えて。"}],  # consecutive turns joined
    }
    assert response.text == "東京です[1]。" and response.output_tokens == 2 and response.input_tokens > 0
    assert response.raw["finish_reason"] == "end_turn"
    assert (events[0].provider, events[0].input_tokens, events[0].output_tokens) == (
        "anthropic", response.input_tokens, 2)


def test_anthropic_stream_reads_named_events_and_usage() -> None:
    events: list[UsageEvent] = []
    with AnthropicFake(api_key=KEY) as server:
        llm = AnthropicChat("claude-sonnet-4-5", base_url=server.url, api_key=KEY, retry=FAST,
                            usage_sink=events.append)
        deltas = asyncio.run(_collect(llm))
        assert server.requests[0].json["stream"] is True
    assert [d.text for d in deltas[:-1]] == ["東京です", "[1]。"]
    final = deltas[-1].response
    assert final.text == "東京です[1]。" and final.output_tokens == 2 and final.input_tokens > 0
    assert final.model == "claude-sonnet-4-5" and final.raw["finish_reason"] == "end_turn"
    assert events[0].output_tokens == 2 and events[0].metadata["stream"] is True


def test_anthropic_errors_overload_retry_and_stream_error_event(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with pytest.raises(MissingAPIKeyError, match="ANTHROPIC_API_KEY"):
        AnthropicChat()
    with AnthropicFake(api_key=KEY) as server:
        llm = AnthropicChat(base_url=server.url, api_key=KEY, retry=FAST)
        server.fail(Reply(529, json=anthropic_error("overloaded_error", "Overloaded")),
                    Reply(429, json=anthropic_error("rate_limit_error", "slow down"), headers={"retry-after": "0"}))
        assert asyncio.run(llm.complete(MESSAGES)).text
        assert len(server.requests) == 3
        bad = AnthropicChat(base_url=server.url, api_key="nope", retry=FAST)
        with pytest.raises(LLMAuthError, match="authentication_error: invalid x-api-key"):
            asyncio.run(bad.complete(MESSAGES))
        server.fail(Reply(sse=[
            sse_frame({"type": "message_start", "message": {"model": "c", "usage": {"input_tokens": 3}}},
                      "message_start"),
            sse_frame({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "東"}},
                      "content_block_delta"),
            sse_frame({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "error"),
        ]))
        with pytest.raises(LLMProviderError, match="overloaded_error: Overloaded"):
            asyncio.run(_collect(llm))
        server.fail(Reply(sse=[sse_frame({"type": "message_start", "message": {"usage": {}}}, "message_start")]))
        with pytest.raises(LLMProviderError, match="before the provider's end-of-stream marker"):
            asyncio.run(_collect(llm))


# -- Gemini --------------------------------------------------------------------------------------


def test_gemini_generate_content_wire_format(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    events: list[UsageEvent] = []
    with GeminiFake(api_key=KEY) as server:
        llm = get_llm("gemini:gemini-2.5-flash", base_url=server.url + "/v1beta", retry=FAST,
                      usage_sink=events.append)
        response = asyncio.run(llm.complete(MESSAGES, temperature=0.3, max_tokens=50))
        (request,) = server.requests
    assert request.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert request.headers["x-goog-api-key"] == KEY and not request.query
    assert request.json == {
        "contents": [{"role": "user", "parts": [{"text": "日本の首都は？"}]},
                     {"role": "model", "parts": [{"text": "どの資料ですか？"}]},
                     {"role": "user", "parts": [{"text": "[1] の資料です。"}, {"text": "短く答えて。"}]}],
        "generationConfig": {"temperature": 0.3, "maxOutputTokens": 50},
        "systemInstruction": {"parts": [{"text": "資料に基づいて答えてください。"}]},
    }
    assert response.text == "東京です[1]。" and response.model == "gemini-2.5-flash-001"
    assert response.output_tokens == 2 + 2  # candidates + thoughts
    assert events[0].input_tokens == response.input_tokens > 0


def test_gemini_stream_uses_alt_sse_and_reads_usage_metadata() -> None:
    with GeminiFake(api_key=KEY) as server:
        llm = GeminiChat("gemini-2.5-flash", base_url=server.url + "/v1beta", api_key=KEY, retry=FAST)
        deltas = asyncio.run(_collect(llm))
        (request,) = server.requests
    assert request.path == "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert request.query == {"alt": ["sse"]}
    assert [d.text for d in deltas[:-1]] == ["東京です", "[1]。"]
    final = deltas[-1].response
    assert final.text == "東京です[1]。" and final.output_tokens == 4 and final.raw["finish_reason"] == "STOP"


def test_gemini_blocked_prompt_and_quota_errors() -> None:
    with GeminiFake(api_key=KEY) as server:
        llm = GeminiChat("gemini-2.5-flash", base_url=server.url + "/v1beta", api_key=KEY, retry=FAST,
                         max_retries=1)
        server.fail(Reply(json={"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {}}))
        with pytest.raises(LLMProviderError, match=r"prompt was blocked \(SAFETY\)"):
            asyncio.run(llm.complete(MESSAGES))
        server.fail(*[Reply(429, json=gemini_error(429, "RESOURCE_EXHAUSTED", "Quota exceeded for metric"),
                            headers={"Retry-After": "0"})] * 2)
        with pytest.raises(LLMRateLimitError, match="RESOURCE_EXHAUSTED: Quota exceeded"):
            asyncio.run(llm.complete(MESSAGES))
        assert len(server.requests) == 3
