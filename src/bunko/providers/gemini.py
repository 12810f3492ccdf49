"""Google's Gemini API (``generativelanguage.googleapis.com/v1beta``): embeddings and chat.

The key goes in the ``x-goog-api-key`` header, never in the ``?key=`` query parameter
the seed mentions: URLs end up in logs and error messages, headers do not.

* Embeddings: ``POST models/{model}:batchEmbedContents`` with up to 100 requests, each
  with ``taskType`` (``RETRIEVAL_DOCUMENT``, or ``RETRIEVAL_QUERY`` for queries) and
  ``outputDimensionality`` (default 1024, as the seed specifies). Shortened vectors are
  L2-normalised, as Google advises for dimensions below the native 3072.
* Chat: ``models/{model}:generateContent`` and ``:streamGenerateContent?alt=sse``;
  system messages become ``systemInstruction``, ``assistant`` becomes ``model``, and
  ``usageMetadata`` gives the tokens (thinking tokens count as output).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np

from ..llm import LLMMessage, LLMResponse
from ._base import HostedClient, HostedEmbedder, HostedLLM, StreamState
from ._http import parse_json_event

GEMINI_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
GEMINI_ENV = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
GEMINI_DEFAULT_DIMENSION = 1024  # the seed's outputDimensionality


def _model_path(model: str) -> str:
    return model if model.startswith(("models/", "tunedModels/")) else f"models/{model}"


class GeminiAPI(HostedClient):
    """Google's Gemini API: the key in ``x-goog-api-key``, from ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``."""

    provider = "gemini"
    default_base_url = GEMINI_BASE_URL
    env_vars: tuple[str, ...] = GEMINI_ENV

    def _headers(self, api_key: str | None) -> dict[str, str]:
        return {"x-goog-api-key": api_key or ""}


class GeminiEmbedder(GeminiAPI, HostedEmbedder):
    """Gemini embeddings (``gemini-embedding-001``) through ``batchEmbedContents``."""

    default_model = "gemini-embedding-001"
    known_dimensions: ClassVar[Mapping[str, int]] = {}
    native_dimensions: ClassVar[Mapping[str, int]] = {"gemini-embedding-001": 3072, "text-embedding-004": 768}

    def __init__(self, model: str | None = None, *, dimensions: int | None = None, **options: Any) -> None:
        super().__init__(model, dimensions=dimensions or GEMINI_DEFAULT_DIMENSION, **options)

    def _request(self, texts: list[str], query: bool) -> tuple[str, dict[str, Any]]:
        model = _model_path(self.model)
        task = "RETRIEVAL_QUERY" if query else "RETRIEVAL_DOCUMENT"
        requests = [{"model": model, "content": {"parts": [{"text": text}]}, "taskType": task,
                     "outputDimensionality": self._dimension} for text in texts]
        return f"{model}:batchEmbedContents", {"requests": requests}

    def _parse(self, data: Any) -> tuple[list[Any], int]:
        vectors = [item["values"] for item in data["embeddings"]]
        if self._dimension != self.native_dimensions.get(self.model) and vectors:
            try:
                matrix = np.asarray(vectors, dtype=np.float32)
            except ValueError:
                return vectors, 0  # ragged: the shape check reports it
            if matrix.ndim == 2:
                norms = np.linalg.norm(matrix, axis=1, keepdims=True)
                vectors = list(matrix / np.where(norms == 0, 1, norms))
        return vectors, 0  # batchEmbedContents reports no token counts


def _gemini_usage(data: Mapping[str, Any]) -> tuple[int, int]:
    usage = data.get("usageMetadata") or {}
    output = int(usage.get("candidatesTokenCount") or 0) + int(usage.get("thoughtsTokenCount") or 0)
    return int(usage.get("promptTokenCount") or 0), output


class GeminiChat(GeminiAPI, HostedLLM):
    """Gemini chat models (``gemini-2.5-flash``, …) with ``GEMINI_API_KEY`` or ``GOOGLE_API_KEY``."""

    default_model = "gemini-2.5-flash"
    _stream_may_end_silently = True  # the SSE stream just ends; the last chunk has finishReason

    def _body(self, messages: list[LLMMessage], temperature: float, max_tokens: int) -> dict[str, Any]:
        contents: list[dict[str, Any]] = []
        for m in messages:
            if m.role == "system":
                continue
            role = "model" if m.role == "assistant" else "user"
            if contents and contents[-1]["role"] == role:
                contents[-1]["parts"].append({"text": m.content})
            else:
                contents.append({"role": role, "parts": [{"text": m.content}]})
        body: dict[str, Any] = {"contents": contents,
                                "generationConfig": {"temperature": temperature, "maxOutputTokens": max_tokens}}
        system = [{"text": m.content} for m in messages if m.role == "system"]
        if system:
            body["systemInstruction"] = {"parts": system}
        return body

    def _text(self, data: Mapping[str, Any]) -> tuple[str, str | None]:
        feedback = data.get("promptFeedback") or {}
        if feedback.get("blockReason"):
            raise self.core.error(f"the prompt was blocked ({feedback['blockReason']})")
        candidates = data.get("candidates") or []
        if not candidates:
            return "", None
        candidate = candidates[0]
        parts = (candidate.get("content") or {}).get("parts") or []
        text = "".join(p.get("text", "") for p in parts if not p.get("thought"))
        return text, candidate.get("finishReason")

    def _complete_request(self, messages: list[LLMMessage], temperature: float,
                          max_tokens: int) -> tuple[str, dict[str, Any], None]:
        return f"{_model_path(self.model)}:generateContent", self._body(messages, temperature, max_tokens), None

    def _parse_complete(self, data: Any) -> LLMResponse:
        if "candidates" not in data and "promptFeedback" not in data:
            raise KeyError("candidates")
        text, finish = self._text(data)
        if not text and finish in ("SAFETY", "RECITATION", "PROHIBITED_CONTENT", "BLOCKLIST", "SPII"):
            raise self.core.error(f"the answer was blocked ({finish})")
        input_tokens, output_tokens = _gemini_usage(data)
        return LLMResponse(text, data.get("modelVersion") or self.model, input_tokens, output_tokens,
                           raw={"finish_reason": finish})

    def _stream_request(self, messages: list[LLMMessage], temperature: float,
                        max_tokens: int) -> tuple[str, dict[str, Any], dict[str, str]]:
        return (f"{_model_path(self.model)}:streamGenerateContent", self._body(messages, temperature, max_tokens),
                {"alt": "sse"})

    def _on_event(self, event: str, data: str, state: StreamState) -> list[str]:
        chunk = parse_json_event(self.core, data)
        if isinstance(chunk, dict) and chunk.get("error"):
            raise self.core.error(f"error in the stream: {chunk['error'].get('message', '')}")
        text, finish = self._text(chunk)
        state.model = chunk.get("modelVersion") or state.model
        if chunk.get("usageMetadata"):
            state.input_tokens, state.output_tokens = _gemini_usage(chunk)
        if finish:
            state.finish_reason = finish
            if not state.parts and not text and finish in ("SAFETY", "RECITATION", "PROHIBITED_CONTENT"):
                raise self.core.error(f"the answer was blocked ({finish})")
        return [text] if text else []
