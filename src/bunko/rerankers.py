"""Rerankers (R22): a second, finer scoring of retrieved hits between retrieval and generation.

A ``Reranker`` takes the query and the hits a search returned, scores every hit against
the query with a cross-encoder (hosted or local) and returns them best first. Each hit
keeps its retrieval score in ``metadata["retrieval_score"]``; ``score`` becomes the rerank
score and ``metadata["rerank_score"]`` repeats it. The input hits are not modified.

Built in, by ``get_reranker("provider:model")``:

* ``cohere:rerank-v3.5`` — ``POST /v2/rerank`` (``COHERE_API_KEY``);
* ``voyage:rerank-2.5`` — ``POST /v1/rerank`` (``VOYAGE_API_KEY``);
* ``jina:jina-reranker-v2-base-multilingual`` — ``POST /v1/rerank`` (``JINA_API_KEY``);
* ``cross-encoder:/models/bge-reranker-v2-m3`` — a local sentence-transformers
  ``CrossEncoder`` (the ``local`` extra), from a folder or the user's cache.

Plugins come from the ``bunko.rerankers`` entry-point group.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, ClassVar, Protocol, runtime_checkable

from .errors import BunkoError, RerankError
from .providers._base import HostedClient
from .providers._http import RERANK_ERRORS
from .providers.cohere import CohereAPI
from .providers.local import LocalModel
from .providers.voyage import VoyageAPI
from .registry import Registry
from .types import SearchHit, UsageEvent


@runtime_checkable
class Reranker(Protocol):
    """The reranking seam (R22)."""

    provider: str
    model: str

    async def rerank(self, query: str, hits: list[SearchHit], top_k: int | None = None) -> list[SearchHit]:
        """``hits`` re-scored against ``query``, best first, at most ``top_k`` of them."""
        ...

    async def close(self) -> None:
        """Release clients and models."""
        ...


def _check(provider: str, query: str, hits: Sequence[SearchHit], top_k: int | None) -> None:
    if not isinstance(query, str) or not query.strip():
        raise RerankError(f"{provider}: the query is empty")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 1):
        raise RerankError(f"{provider}: top_k must be a positive integer; got {top_k!r}")
    for position, hit in enumerate(hits):
        if not isinstance(hit, SearchHit):
            raise RerankError(f"{provider}: item {position} is not a SearchHit")


def apply_scores(hits: Sequence[SearchHit], scores: Mapping[int, float], top_k: int | None) -> list[SearchHit]:
    """New hits ordered by ``scores`` (index → rerank score); unscored hits are dropped."""
    ranked = sorted(scores.items(), key=lambda item: (-item[1], item[0]))
    result = []
    for index, score in ranked[: top_k or len(ranked)]:
        hit = hits[index]
        metadata = {**hit.metadata, "retrieval_score": hit.score, "rerank_score": float(score)}
        result.append(replace(hit, score=float(score), metadata=metadata))
    return result


class BaseReranker:
    """Validation, ordering and usage reporting around ``_score(query, documents, top_k)``."""

    provider = ""
    model = ""
    usage_sink: Callable[[UsageEvent], None] | None = None

    async def _score(self, query: str, documents: list[str], top_k: int | None) -> tuple[dict[int, float], int]:
        """Rerank scores by input position (for at least the best ``top_k``) and tokens used."""
        raise NotImplementedError

    async def rerank(self, query: str, hits: list[SearchHit], top_k: int | None = None) -> list[SearchHit]:
        """``hits`` re-scored against ``query``, best first, at most ``top_k`` of them."""
        _check(self.provider, query, hits, top_k)
        if not hits:
            return []
        started = time.perf_counter()
        try:
            scores, tokens = await self._score(query, [hit.content for hit in hits], top_k)
        except BunkoError as exc:
            self._report(started, len(hits), 0, error=exc.code)
            if isinstance(exc, RerankError):
                raise
            raise RerankError(str(exc)) from exc
        except Exception as exc:
            self._report(started, len(hits), 0, error="RERANK_ERROR")
            raise RerankError(f"{self.provider}:{self.model} failed: {type(exc).__name__}: {exc}") from exc
        bad = [i for i in scores if not 0 <= i < len(hits)]
        if bad:
            raise RerankError(f"{self.provider}:{self.model}: the reranker returned unknown positions {bad[:5]}")
        self._report(started, len(hits), tokens)
        return apply_scores(hits, scores, top_k)

    def _report(self, started: float, items: int, tokens: int, **metadata: Any) -> None:
        if self.usage_sink is not None:
            self.usage_sink(UsageEvent("rerank", self.provider, self.model, input_tokens=tokens, items=items,
                                       latency_ms=(time.perf_counter() - started) * 1000, metadata=metadata))

    async def close(self) -> None:
        """Release clients and models (nothing by default)."""
        return None


class HostedReranker(HostedClient, BaseReranker):
    """A rerank API on the shared client base: the query and documents in, indexed scores out."""

    errors = RERANK_ERRORS
    path = "v1/rerank"
    #: The body field that limits how many results come back.
    top_field = "top_n"
    #: Fields every request carries besides model, query, documents and the limit.
    extra_body: ClassVar[Mapping[str, Any]] = {}
    #: The response field that lists ``{"index", "relevance_score"}`` items.
    results_field = "results"

    def _body(self, query: str, documents: list[str], top_k: int | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "query": query, "documents": documents, **self.extra_body}
        if top_k is not None:
            body[self.top_field] = min(top_k, len(documents))
        return body

    def _scores(self, data: Any) -> tuple[dict[int, float], int]:
        scores = {int(item["index"]): float(item["relevance_score"]) for item in data[self.results_field]}
        return scores, int((data.get("usage") or {}).get("total_tokens") or 0)

    async def _score(self, query: str, documents: list[str], top_k: int | None) -> tuple[dict[int, float], int]:
        result = await self.core.post_json(self.path, self._body(query, documents, top_k))
        return self._read(self._scores, result.data)


class CohereReranker(CohereAPI, HostedReranker):
    """Cohere Rerank v2 (``rerank-v3.5``, multilingual)."""

    default_model = "rerank-v3.5"
    path = "v2/rerank"


class VoyageReranker(VoyageAPI, HostedReranker):
    """Voyage rerankers (``rerank-2.5``, ``rerank-2.5-lite``)."""

    default_model = "rerank-2.5"
    top_field = "top_k"
    extra_body: ClassVar[Mapping[str, Any]] = {"truncation": True}
    results_field = "data"


class JinaReranker(HostedReranker):
    """Jina rerankers (``jina-reranker-v2-base-multilingual``, ``jina-reranker-m0``)."""

    provider = "jina"
    default_base_url = "https://api.jina.ai"
    env_vars: tuple[str, ...] = ("JINA_API_KEY",)
    default_model = "jina-reranker-v2-base-multilingual"
    extra_body: ClassVar[Mapping[str, Any]] = {"return_documents": False}


class CrossEncoderReranker(LocalModel, BaseReranker):
    """A local sentence-transformers ``CrossEncoder`` (the ``local`` extra), run in a worker thread."""

    provider = "cross-encoder"
    example = "/models/bge-reranker"

    def __init__(self, model: str | None = None, *, device: str | None = None, batch_size: int = 32,
                 max_length: int | None = None, allow_download: bool = False, trust_remote_code: bool = False,
                 usage_sink: Callable[[UsageEvent], None] | None = None) -> None:
        super().__init__(model, device=device, allow_download=allow_download, trust_remote_code=trust_remote_code,
                         usage_sink=usage_sink)
        self.batch_size = batch_size
        self.max_length = max_length

    def _model(self) -> Any:
        return self._load("cross-encoder", "CrossEncoder", max_length=self.max_length)

    def _predict(self, query: str, documents: list[str]) -> list[float]:
        scores = self._model().predict([(query, d) for d in documents], batch_size=self.batch_size,
                                      show_progress_bar=False)
        return [float(s) for s in scores]

    async def _score(self, query: str, documents: list[str], top_k: int | None) -> tuple[dict[int, float], int]:
        scores = await asyncio.to_thread(self._predict, query, documents)
        return dict(enumerate(scores)), 0


RerankerFactory = Callable[..., Reranker]
_REGISTRY: Registry[Reranker] = Registry("reranker", "bunko.rerankers", {
    "cohere": CohereReranker, "voyage": VoyageReranker, "jina": JinaReranker, "cross-encoder": CrossEncoderReranker,
})


def register_reranker(name: str, factory: RerankerFactory) -> None:
    """Register a reranker factory; it is called as ``factory(model, **options)``."""
    _REGISTRY.register(name, factory)


def available_rerankers() -> list[str]:
    """Names of the registered rerankers."""
    return _REGISTRY.names()


def get_reranker(spec: str, **options: Any) -> Reranker:
    """Build a reranker from ``"provider:model"``; ``options`` (api_key, base_url, timeout, …) go to the factory."""
    return _REGISTRY.build(spec, **options)


__all__ = [
    "BaseReranker",
    "CohereReranker",
    "CrossEncoderReranker",
    "HostedReranker",
    "JinaReranker",
    "Reranker",
    "VoyageReranker",
    "available_rerankers",
    "get_reranker",
    "register_reranker",
]
