"""The clients an engine shares between its tenants: one embedder, one LLM, and the rerankers named.

Each is built on first use from the settings (or taken as given), and its usage is routed to the tenant
operation that calls it (:func:`bunko.usage.install`): a model is loaded, and an HTTP client opened,
once per engine whatever the number of tenants.
"""

from __future__ import annotations

from typing import Any

from . import usage as metering
from .config import Settings
from .embedders import get_embedder
from .llm import LLMProvider, get_llm
from .rerankers import get_reranker


class EngineClients:
    """An engine's embedder, LLM and rerankers (see the module doc)."""

    def __init__(self, settings: Settings, embedder: Any = None, llm: LLMProvider | None = None) -> None:
        self._settings = settings
        self._embedder = embedder
        self._llm = llm
        self._rerankers: dict[str, Any] = {}
        metering.install(embedder)
        metering.install(llm)

    @property
    def embedder(self) -> Any:
        """The embedder, built on first use (the bundled model loads in about a second)."""
        if self._embedder is None:
            self._embedder = get_embedder(self._settings.embedder, **self._settings.embedder_options())
            metering.install(self._embedder)
        return self._embedder

    @property
    def llm(self) -> LLMProvider | None:
        """The LLM, built on first use; None when none is configured."""
        if self._llm is None and self._settings.llm.spec:
            self._llm = get_llm(self._settings.llm.spec, **self._settings.llm.client_options())
            metering.install(self._llm)
        return self._llm

    @llm.setter
    def llm(self, value: LLMProvider | None) -> None:
        self._llm = value
        metering.install(value)

    def reranker(self, spec: str) -> Any:
        """The reranker ``"provider:model"``, built once (``[rerank] base_url`` points a hosted one elsewhere)."""
        if spec not in self._rerankers:
            base_url = self._settings.rerank.base_url
            reranker = get_reranker(spec, **({"base_url": base_url} if base_url else {}))
            metering.install(reranker)
            self._rerankers[spec] = reranker
        return self._rerankers[spec]

    async def aclose(self) -> None:
        """Close the HTTP clients built so far (of the running event loop); best effort."""
        for client in (self._llm, self._embedder, *self._rerankers.values()):
            close = getattr(client, "close", None)
            if close is not None:
                try:
                    await close()
                except Exception:  # closing is best effort; the store must still close
                    pass


__all__ = ["EngineClients"]
