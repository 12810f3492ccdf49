"""The LLM seam (R26): chat message types, the ``LLMProvider`` protocol and a registry by name.

Providers (OpenAI-compatible, Anthropic, Gemini, …) live in ``bunko.providers``
and register here through ``register_llm``; plugins come from the
``bunko.llms`` entry-point group. ``get_llm("provider:model", base_url=...)``
builds one.

Streaming contract: ``stream()`` yields ``LLMDelta`` items; every item but the
last carries a piece of text (``text``), and the last one carries the completed
``LLMResponse`` (full text, model, token usage) in ``response``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

from .errors import UnknownProviderError

logger = logging.getLogger(__name__)


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
_REGISTRY: dict[str, LLMFactory] = {}
_PLUGINS_LOADED = False


def register_llm(name: str, factory: LLMFactory) -> None:
    """Register an LLM factory; it is called as ``factory(model, **options)``."""
    _REGISTRY[name] = factory


def _load_plugins() -> None:
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    try:  # the built-in providers register themselves on import
        from . import providers  # noqa: F401
    except ImportError as exc:  # pragma: no cover - an optional dependency missing
        logger.debug("built-in LLM providers unavailable: %s", exc)
    for ep in entry_points(group="bunko.llms"):
        try:
            register_llm(ep.name, ep.load())
        except Exception as exc:  # a broken plugin must not break the built-ins
            logger.warning("could not load LLM plugin %s: %s", ep.name, exc)


def available_llms() -> list[str]:
    """Names of the registered LLM providers."""
    _load_plugins()
    return sorted(_REGISTRY)


def get_llm(spec: str, **options: Any) -> LLMProvider:
    """Build an LLM from ``"provider:model"``; ``options`` (base_url, api_key, timeout, …) go to the factory."""
    _load_plugins()
    name, _, model = spec.strip().partition(":")
    factory = _REGISTRY.get(name)
    if factory is None:
        raise UnknownProviderError(
            f"unknown LLM provider {name!r}; available: {', '.join(available_llms()) or '(none)'}"
        )
    return factory(model or None, **options)
