"""OpenAI and OpenAI-compatible servers (vLLM, Ollama, llama.cpp, TEI, LM Studio): embeddings and chat.

Wire format: ``POST {base_url}/embeddings`` and ``POST {base_url}/chat/completions`` with
``Authorization: Bearer``. Streaming chat is Server-Sent Events, one ``data:`` JSON chunk
per delta, ending with ``data: [DONE]``; ``stream_options.include_usage`` asks for a last
chunk carrying token usage.

``openai-compatible`` never reads ``OPENAI_API_KEY``: sending the OpenAI key to another
server by accident would leak it. Give ``api_key`` explicitly when the server wants one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..llm import LLMMessage, LLMResponse
from ._base import HostedClient, HostedEmbedder, HostedLLM, StreamState
from ._http import parse_json_event

OPENAI_BASE_URL = "https://api.openai.com/v1"


class OpenAIAPI(HostedClient):
    """OpenAI's own API, with ``OPENAI_API_KEY``."""

    provider = "openai"
    default_base_url = OPENAI_BASE_URL
    env_vars: tuple[str, ...] = ("OPENAI_API_KEY",)
    key_required = True  # stated: OpenAIChat also inherits the compatible chat, which needs none


class OpenAICompatibleAPI(HostedClient):
    """Another server with OpenAI's API: ``base_url`` is required, a key only if given."""

    provider = "openai-compatible"
    default_base_url = ""
    env_vars: tuple[str, ...] = ()
    key_required = False


class OpenAIEmbedder(OpenAIAPI, HostedEmbedder):
    """OpenAI embeddings (``text-embedding-3-small`` 1536-d, ``-large`` 3072-d; ``dimensions`` shortens them)."""

    default_model = "text-embedding-3-small"
    known_dimensions: ClassVar[Mapping[str, int]] = {"text-embedding-3-small": 1536, "text-embedding-3-large": 3072,
                                                     "text-embedding-ada-002": 1536}
    max_batch_size = 2048

    def _request(self, texts: list[str], query: bool) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.requested_dimensions:
            body["dimensions"] = self.requested_dimensions
        return "embeddings", body

    def _parse(self, data: Any) -> tuple[list[Any], int]:
        items = sorted(data["data"], key=lambda item: item.get("index", 0))
        usage = data.get("usage") or {}
        return [item["embedding"] for item in items], usage.get("prompt_tokens") or usage.get("total_tokens") or 0


class OpenAICompatibleEmbedder(OpenAICompatibleAPI, OpenAIEmbedder):
    """Any server with an OpenAI ``/embeddings`` endpoint; the dimension is given or learned from the first answer.

    ``dimensions`` here states the model's dimension; it is not sent, because many servers
    reject the parameter. Pass ``send_dimensions=True`` for servers that shorten vectors.
    """

    default_model = ""
    known_dimensions: ClassVar[Mapping[str, int]] = {}

    def __init__(self, model: str | None = None, *, send_dimensions: bool = False, **options: Any) -> None:
        super().__init__(model, **options)
        self.send_dimensions = send_dimensions

    def _request(self, texts: list[str], query: bool) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"model": self.model, "input": texts, "encoding_format": "float"}
        if self.send_dimensions and self.requested_dimensions:
            body["dimensions"] = self.requested_dimensions
        return "embeddings", body


def _openai_messages(messages: list[LLMMessage]) -> list[dict[str, str]]:
    return [{"role": m.role, "content": m.content} for m in messages]


class OpenAICompatibleChat(OpenAICompatibleAPI, HostedLLM):
    """Chat completions on any OpenAI-compatible server (``base_url`` such as ``http://127.0.0.1:8000/v1``)."""

    #: The field that caps output tokens; OpenAI's own reasoning models only take ``max_completion_tokens``.
    max_tokens_field = "max_tokens"

    def _body(self, messages: list[LLMMessage], temperature: float, max_tokens: int) -> dict[str, Any]:
        return {"model": self.model, "messages": _openai_messages(messages), "temperature": temperature,
                self.max_tokens_field: max_tokens}

    def _complete_request(self, messages: list[LLMMessage], temperature: float,
                          max_tokens: int) -> tuple[str, dict[str, Any], None]:
        return "chat/completions", self._body(messages, temperature, max_tokens), None

    def _parse_complete(self, data: Any) -> LLMResponse:
        choices = data["choices"]
        if not choices:
            raise self.core.error("the response has no choices")
        choice = choices[0]
        usage = data.get("usage") or {}
        return LLMResponse(
            text=(choice.get("message") or {}).get("content") or "",
            model=data.get("model") or self.model,
            input_tokens=int(usage.get("prompt_tokens") or 0),
            output_tokens=int(usage.get("completion_tokens") or 0),
            raw={"finish_reason": choice.get("finish_reason"), "id": data.get("id")},
        )

    def _stream_request(self, messages: list[LLMMessage], temperature: float,
                        max_tokens: int) -> tuple[str, dict[str, Any], None]:
        body = self._body(messages, temperature, max_tokens)
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
        return "chat/completions", body, None

    def _on_event(self, event: str, data: str, state: StreamState) -> list[str]:
        if data.strip() == "[DONE]":
            state.done = True
            return []
        chunk = parse_json_event(self.core, data)
        if isinstance(chunk, dict) and chunk.get("error"):
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else str(error)
            raise self.core.error(f"error in the stream: {message}")
        state.model = chunk.get("model") or state.model
        usage = chunk.get("usage")
        if usage:
            state.input_tokens = int(usage.get("prompt_tokens") or 0)
            state.output_tokens = int(usage.get("completion_tokens") or 0)
        pieces = []
        for choice in chunk.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            content = (choice.get("delta") or {}).get("content")
            if content:
                pieces.append(content)
            if choice.get("finish_reason"):
                state.finish_reason = choice["finish_reason"]
        return pieces


class OpenAIChat(OpenAIAPI, OpenAICompatibleChat):
    """OpenAI chat completions (``gpt-4o-mini``, ``gpt-4.1``, …) with ``OPENAI_API_KEY``."""

    default_model = "gpt-4o-mini"
    max_tokens_field = "max_completion_tokens"
