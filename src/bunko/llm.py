"""The LLM seam (R26): chat message types, the ``LLMProvider`` protocol and a registry by name.

Providers (OpenAI-compatible, Anthropic, Gemini, …) live in ``bunko.providers``
and are named in this seam's ``Registry``; plugins come from the ``bunko.llms``
entry-point group, and ``register_llm`` adds (or replaces) one. ``get_llm("provider:model", base_url=...)``
builds one.

Streaming contract: ``stream()`` yields ``LLMDelta`` items; every item but the
last carries a piece of text (``text``), and the last one carries the completed
``LLMResponse`` (full text, model, token usage) in ``response``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from .registry import Registry


@dataclass(slots=True)
class LLMMessage:
    """One chat message."""

    role: str  # "system", "user" or "assistant"
    content: str


@dataclass(slots=True)
class LLMResponse:
    """A completed chat response with the token usage the provider reported."""

    text: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    raw: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class LLMDelta:
    """One streamed item: a piece of text, or (last) the completed response."""

    text: str = ""
    response: LLMResponse | None = None


@runtime_checkable
class LLMProvider(Protocol):
    """The seam for chat models (R26)."""

    name: str
    model: str

    async def complete(
        self, messages: list[LLMMessage], *, temperature: float, max_tokens: int
    ) -> LLMResponse:
        """One non-streaming chat completion."""
        ...

    def stream(
        self, messages: list[LLMMessage], *, temperature: float, max_tokens: int
    ) -> AsyncIterator[LLMDelta]:
        """A streaming completion: text deltas, then one final delta with ``response`` set."""
        ...

    async def close(self) -> None:
        """Release HTTP clients."""
        ...


LLMFactory = Callable[..., LLMProvider]
_REGISTRY: Registry[LLMProvider] = Registry("LLM provider", "bunko.llms", {
    "openai": "bunko.providers.openai:OpenAIChat",
    "openai-compatible": "bunko.providers.openai:OpenAICompatibleChat",
    "anthropic": "bunko.providers.anthropic:AnthropicChat",
    "gemini": "bunko.providers.gemini:GeminiChat",
})


def register_llm(name: str, factory: LLMFactory) -> None:
    """Register an LLM factory; it is called as ``factory(model, **options)``."""
    _REGISTRY.register(name, factory)


def available_llms() -> list[str]:
    """Names of the registered LLM providers."""
    return _REGISTRY.names()


def get_llm(spec: str, **options: Any) -> LLMProvider:
    """Build an LLM from ``"provider:model"``; ``options`` (base_url, api_key, timeout, …) go to the factory."""
    return _REGISTRY.build(spec, **options)
