"""Anthropic's Messages API: ``POST {base_url}/v1/messages`` with ``x-api-key`` and ``anthropic-version``.

System messages become the top-level ``system`` parameter; the rest must alternate user and
assistant, starting with user, so consecutive messages of one role are joined. Streaming
sends named SSE events: ``message_start`` (input tokens), ``content_block_delta`` (text),
``message_delta`` (output tokens, stop reason), ``message_stop``; ``ping`` is ignored and
``error`` ends the stream with an error.
"""

from __future__ import annotations

from typing import Any

from ..llm import LLMMessage, LLMResponse
from ._base import HostedLLM, StreamState
from ._http import parse_json_event

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"


class AnthropicChat(HostedLLM):
    """Claude models through the Messages API (``ANTHROPIC_API_KEY``)."""

    provider = "anthropic"
    default_base_url = ANTHROPIC_BASE_URL
    env_vars: tuple[str, ...] = ("ANTHROPIC_API_KEY",)
    default_model = "claude-sonnet-4-5"

    def _headers(self, api_key: str | None) -> dict[str, str]:
        return {"x-api-key": api_key or "", "anthropic-version": ANTHROPIC_VERSION}

    def _body(self, messages: list[LLMMessage], temperature: float, max_tokens: int) -> dict[str, Any]:
        system = "\n\n".join(m.content for m in messages if m.role == "system")
        turns: list[dict[str, Any]] = []
        for m in messages:
            if m.role == "system":
                continue
            if turns and turns[-1]["role"] == m.role:
                turns[-1]["content"] += "\n\n" + m.content
            else:
                turns.append({"role": m.role, "content": m.content})
        if turns[0]["role"] != "user":
            turns.insert(0, {"role": "user", "content": "(continue)"})
        body: dict[str, Any] = {"model": self.model, "max_tokens": max_tokens, "messages": turns,
                                "temperature": temperature}
        if system:
            body["system"] = system
        return body

    def _complete_request(self, messages: list[LLMMessage], temperature: float,
                          max_tokens: int) -> tuple[str, dict[str, Any], None]:
        return "v1/messages", self._body(messages, temperature, max_tokens), None

    def _parse_complete(self, data: Any) -> LLMResponse:
        if data.get("type") == "error":
            raise self.core.error(f"error: {data['error'].get('message')}")
        text = "".join(block.get("text", "") for block in data["content"] if block.get("type") == "text")
        usage = data.get("usage") or {}
        return LLMResponse(text, data.get("model") or self.model, int(usage.get("input_tokens") or 0),
                           int(usage.get("output_tokens") or 0),
                           raw={"finish_reason": data.get("stop_reason"), "id": data.get("id")})

    def _stream_request(self, messages: list[LLMMessage], temperature: float,
                        max_tokens: int) -> tuple[str, dict[str, Any], None]:
        body = self._body(messages, temperature, max_tokens)
        body["stream"] = True
        return "v1/messages", body, None

    def _on_event(self, event: str, data: str, state: StreamState) -> list[str]:
        payload = parse_json_event(self.core, data)
        kind = payload.get("type") or event
        if kind == "message_start":
            message = payload["message"]
            state.model = message.get("model") or state.model
            usage = message.get("usage") or {}
            state.input_tokens = int(usage.get("input_tokens") or 0)
            state.output_tokens = int(usage.get("output_tokens") or 0)
        elif kind == "content_block_delta":
            delta = payload["delta"]
            if delta.get("type") == "text_delta":
                return [delta.get("text", "")]
        elif kind == "message_delta":
            usage = payload.get("usage") or {}
            if "output_tokens" in usage:
                state.output_tokens = int(usage["output_tokens"])
            if usage.get("input_tokens"):
                state.input_tokens = int(usage["input_tokens"])
            state.finish_reason = (payload.get("delta") or {}).get("stop_reason") or state.finish_reason
        elif kind == "message_stop":
            state.done = True
        elif kind == "error":
            error = payload.get("error") or {}
            raise self.core.error(f"error in the stream: {error.get('type', 'error')}: {error.get('message', '')}")
        return []
