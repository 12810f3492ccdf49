"""``Retriever``: embed the query and search one collection of a tenant-bound store (R28).

Modes: ``vector`` (cosine over the collection), ``keyword`` (BM25 over the analyzed
text) and ``hybrid`` (both legs, fused by normalised scores, vector 0.2 / keyword 0.8, by default;
weighted reciprocal rank fusion on request). Every mode can be restricted to given
documents and by a metadata filter (R18, R21). Store and embedder
failures become ``RetrievalError``; "not found" errors pass through unchanged so
callers can tell a missing collection from a failing search.
"""

from __future__ import annotations

import asyncio
import time
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .embedders import BaseEmbedder
from .errors import BunkoError, EmbedderMismatchError, FilterError, NotFoundError, RetrievalError
from .filters import Filter
from .requests import MODES, SearchMode, SearchRequest
from .stores.base import VectorStore
from .types import Collection, SearchHit, UsageEvent
from .usage import route, store_kind

# Hybrid fusion (R19). The seed's weights are semantic 0.7 / keyword 0.3 by reciprocal rank
# fusion (SEED_FUSION); they assume a strong hosted embedder. The default is chosen by
# measurement with the bundled embedder on jsquad-dev and cranfield: min-max score fusion,
# vector 0.2 / keyword 0.8 (benchmarks/fusion_sweep.py; docs/ARCHITECTURE.md "Hybrid defaults").
FUSION_METHODS: tuple[str, ...] = ("rrf", "score")
SEED_WEIGHTS = (0.7, 0.3)
RRF_K = 60
# Each leg of a hybrid search fetches this many times top_k candidates before fusing.
HYBRID_DEPTH = 3


@dataclass(frozen=True, slots=True)
class Fusion:
    """How a hybrid search fuses its legs: method, per-leg weights (0 allowed) and the RRF constant.

    * ``rrf``: score = sum over legs of weight / (k + rank).
    * ``score``: each leg's scores min-max normalised to [0, 1] over its candidates, then
      the weighted sum (a hit a leg did not return gets 0 from it).
    """

    method: str = "score"
    vector_weight: float = 0.2
    keyword_weight: float = 0.8
    k: int = RRF_K

    def __post_init__(self) -> None:
        if self.method not in FUSION_METHODS:
            raise RetrievalError(f"unknown fusion method {self.method!r}; use one of: {', '.join(FUSION_METHODS)}")
        for name in ("vector_weight", "keyword_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise RetrievalError(f"{name} must be a number from 0 to 1; got {value!r}")
        if self.vector_weight + self.keyword_weight <= 0:
            raise RetrievalError("at least one hybrid weight must be above 0")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k <= 1000:
            raise RetrievalError(f"the RRF constant k must be an integer from 1 to 1000; got {self.k!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, base: Fusion | None = None) -> Fusion:
        """A fusion from ``{"method", "vector_weight", "keyword_weight", "k"}``; missing keys from ``base``."""
        base = base or DEFAULT_FUSION
        if not data:
            return base
        unknown = sorted(set(data) - {"method", "vector_weight", "keyword_weight", "k"})
        if unknown:
            raise RetrievalError(f"unknown fusion option(s): {', '.join(unknown)}")
        return replace(base, **dict(data))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"method": self.method, "vector_weight": self.vector_weight, "keyword_weight": self.keyword_weight,
                "k": self.k}


DEFAULT_FUSION = Fusion()
SEED_FUSION = Fusion("rrf", *SEED_WEIGHTS, RRF_K)


def _normalised(hits: Sequence[SearchHit]) -> list[float]:
    if not hits:
        return []
    scores = [float(h.score) for h in hits]
    low, high = min(scores), max(scores)
    if high - low <= 1e-12:
        return [1.0] * len(scores)
    return [(v - low) / (high - low) for v in scores]


def fuse(legs: Sequence[tuple[str, float, list[SearchHit]]], top_k: int,
         fusion: Fusion = DEFAULT_FUSION) -> list[SearchHit]:
    """Fuse ranked lists ``(leg name, weight, hits)`` into the ``top_k`` best, by ``fusion.method``.

    Each fused hit records its per-leg rank and raw score in ``metadata["legs"]``.
    """
    fused: dict[str, SearchHit] = {}
    scores: dict[str, float] = {}
    for name, weight, hits in legs:
        normalised = _normalised(hits) if fusion.method == "score" else None
        for rank, hit in enumerate(hits, start=1):
            if hit.chunk_id not in fused:
                fused[hit.chunk_id] = SearchHit(hit.chunk_id, hit.document_id, hit.source, hit.content, 0.0,
                                                hit.chunk_index, {**hit.metadata, "legs": {}})
            fused[hit.chunk_id].metadata["legs"][name] = {"rank": rank, "score": round(float(hit.score), 6)}
            part = weight * normalised[rank - 1] if normalised is not None else weight / (fusion.k + rank)
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + part
    order = sorted(scores, key=lambda cid: (-scores[cid], cid))[:top_k]
    for cid in order:
        fused[cid].score = scores[cid]
    return [fused[cid] for cid in order]


def fuse_rrf(legs: Sequence[tuple[str, float, list[SearchHit]]], top_k: int, k: int = RRF_K) -> list[SearchHit]:
    """Weighted reciprocal rank fusion: score = sum(weight / (k + rank))."""
    return fuse(legs, top_k, Fusion("rrf", 0.5, 0.5, k))


CANDIDATE_FACTOR = 3  # candidates per wanted hit when dedupe, a reranker or MMR trims the list
NEAR_DUPLICATE_JACCARD = 0.85  # shingle overlap above which two chunks count as the same text
_SHINGLE = 5


def _shingles(text: str) -> set[str]:
    flat = " ".join(unicodedata.normalize("NFKC", text).lower().split())
    if len(flat) <= _SHINGLE:
        return {flat}
    return {flat[i : i + _SHINGLE] for i in range(len(flat) - _SHINGLE + 1)}


def remove_near_duplicates(hits: Sequence[SearchHit], threshold: float = NEAR_DUPLICATE_JACCARD) -> list[SearchHit]:
    """Hits in order, without those whose text nearly repeats a better-ranked one (character 5-gram Jaccard)."""
    kept: list[SearchHit] = []
    seen: list[set[str]] = []
    for hit in hits:
        shingles = _shingles(hit.content)
        if any(len(shingles & other) / max(1, len(shingles | other)) >= threshold for other in seen):
            continue
        kept.append(hit)
        seen.append(shingles)
    return kept


def mmr(hits: Sequence[SearchHit], vectors: Mapping[str, Any], lam: float, top_k: int) -> list[SearchHit]:
    """Maximal marginal relevance over ``hits`` (best first): relevance is the min-max normalised score,
    redundancy the highest cosine similarity to a hit already chosen. Hits without a stored vector
    keep their relevance and count as unlike every other.
    """
    if not hits:
        return []
    relevance = _normalised(hits)
    dim = next((len(v) for v in vectors.values()), 0)
    matrix = np.zeros((len(hits), dim), dtype=np.float32)
    for i, hit in enumerate(hits):
        vector = vectors.get(hit.chunk_id)
        if vector is not None and dim:
            norm = float(np.linalg.norm(vector))
            matrix[i] = np.asarray(vector, dtype=np.float32) / (norm or 1.0)
    similarity = matrix @ matrix.T if dim else np.zeros((len(hits), len(hits)), dtype=np.float32)
    chosen: list[int] = []
    left = list(range(len(hits)))
    while left and len(chosen) < top_k:
        def value(i: int) -> float:
            redundancy = max((float(similarity[i, j]) for j in chosen), default=0.0)
            return lam * relevance[i] - (1 - lam) * redundancy

        best = max(left, key=lambda i: (value(i), -i))
        chosen.append(best)
        left.remove(best)
    return [hits[i] for i in chosen]


class Retriever:
    """Searches one collection with one embedder."""

    def __init__(self, embedder: Any, vector_store: VectorStore, collection: str = "default", *,
                 rerankers: Callable[[str], Any] | None = None) -> None:
        """``rerankers`` turns a request's ``rerank`` spec into a reranker (default: ``get_reranker``;
        the engine passes its own, which builds each one once)."""
        self.embedder = embedder
        self.vector_store = vector_store
        self.collection = collection
        self.rerankers = rerankers
        self.last_search_ms = 0.0

    def _reranker(self, spec: str | None) -> Any:
        if not spec:
            return None
        if self.rerankers is not None:
            return self.rerankers(spec)
        from .rerankers import get_reranker

        return get_reranker(spec)

    async def query_vector(self, query: str) -> Any:
        """The vector of a search query (embedded with the provider's query input type, if it has one)."""
        if isinstance(self.embedder, BaseEmbedder):
            return (await self.embedder.embed_array([query], query=True))[0]
        embed_query = getattr(self.embedder, "embed_query", None)  # providers with query/document input types
        return await (embed_query(query) if embed_query is not None else self.embedder.embed(query))

    def check_embedder(self, collection: Collection) -> None:
        """Refuse to embed queries for ``collection`` with an embedder other than the one it was built with."""
        # Provider and model first: a hosted embedder may learn its dimension only from its first answer.
        provider, model = str(getattr(self.embedder, "provider", "")), str(getattr(self.embedder, "model", ""))
        dimension = int(getattr(self.embedder, "dimension", 0) or 0)
        if (collection.embedding_provider, collection.embedding_model) != (provider, model) or (
            dimension and dimension != collection.dimension
        ):
            shown = f"{dimension}-d" if dimension else "dimension not known yet"
            raise EmbedderMismatchError(
                f"collection {collection.name!r} was built with {collection.embedding_provider}:"
                f"{collection.embedding_model} ({collection.dimension}-d); the query embedder is "
                f"{provider}:{model} ({shown}). A collection keeps the embedder it was built with: use that "
                "one (--embedder / BUNKO_EMBEDDER), or another collection"
            )

    async def _keyword_leg(self, query: str, top_k: int, document_ids: Sequence[str] | None,
                           flt: Filter | None) -> list[SearchHit]:
        return await asyncio.to_thread(
            self.vector_store.keyword_search, self.collection, query, top_k, document_ids=document_ids, filter=flt
        )

    async def _vector_leg(self, collection: Collection, query: str, top_k: int, document_ids: Sequence[str] | None,
                          threshold: float | None, flt: Filter | None) -> list[SearchHit]:
        self.check_embedder(collection)
        vector = await self.query_vector(query)
        return await asyncio.to_thread(
            self.vector_store.query, self.collection, vector, top_k, threshold=threshold, document_ids=document_ids,
            filter=flt,
        )

    @staticmethod
    def fusion_for(collection: Collection, fusion: Fusion | Mapping[str, Any] | None) -> Fusion:
        """The request's fusion, over the collection's configured one, over the default."""
        base = Fusion.from_dict(collection.config.get("fusion")) if collection.config.get("fusion") else DEFAULT_FUSION
        if isinstance(fusion, Fusion):
            return fusion
        return Fusion.from_dict(fusion, base)

    async def search(self, request: SearchRequest | str, top_k: int | None = None, *, reranker: Any = None,
                     **options: Any) -> list[SearchHit]:
        """The best chunks for a :class:`~bunko.requests.SearchRequest`, best first.

        ``search("query", 5, mode="hybrid")`` builds the request from the query and its options;
        the request's ``collection`` is this retriever's. The request's ``rerank`` names the
        reranker (R22, see :mod:`bunko.rerankers`); ``reranker`` passes a reranker object instead.

        ``fusion`` (hybrid only) overrides the fusion method and weights per request; the
        default is the collection's ``config["fusion"]``, else ``DEFAULT_FUSION``.

        After the search, on a wider candidate pool (``CANDIDATE_FACTOR`` × ``top_k``):
        ``dedupe`` drops chunks whose text nearly repeats a better one; the reranker reorders
        the candidates; ``mmr_lambda`` (R20, 0–1) picks by maximal marginal relevance:
        ``lambda`` × relevance − (1 − ``lambda``) × the highest cosine similarity to a chunk
        already picked (1 = relevance only).

        ``document_ids`` and ``filter`` (a metadata filter, see :mod:`bunko.filters`) restrict every
        mode; in hybrid mode both legs get the same restriction. A malformed filter raises
        ``FilterError`` before anything is embedded.
        """
        if top_k is not None:
            options["top_k"] = top_k
        request = SearchRequest.build(request, self.collection, **options).resolved()
        reranker = reranker if reranker is not None else self._reranker(request.rerank)
        query, mode, document_ids, threshold = request.query, request.mode, request.document_ids, request.threshold
        fusion, mmr_lambda, dedupe = request.fusion, request.mmr_lambda, request.dedupe
        top_k = request.top_k
        flt = request.restriction
        wanted = top_k
        if mmr_lambda is not None or dedupe or reranker is not None:
            top_k = min(100, top_k * CANDIDATE_FACTOR)
        started = time.perf_counter()
        try:
            collection = await asyncio.to_thread(self.vector_store.get_collection, self.collection)
            if mode == "hybrid":
                how = self.fusion_for(collection, fusion)
                # Both legs run in the same tenant scope with the same restriction; a leg with
                # weight 0 is not run at all.
                depth = min(100, top_k * HYBRID_DEPTH)
                semantic = (await self._vector_leg(collection, query, depth, document_ids, threshold, flt)
                            if how.vector_weight > 0 else [])
                keyword = await self._keyword_leg(query, depth, document_ids, flt) if how.keyword_weight > 0 else []
                hits = fuse([("vector", how.vector_weight, semantic), ("keyword", how.keyword_weight, keyword)],
                            top_k, how)
            elif mode == "keyword":
                hits = await self._keyword_leg(query, top_k, document_ids, flt)
            else:
                hits = await self._vector_leg(collection, query, top_k, document_ids, threshold, flt)
            if dedupe:
                hits = remove_near_duplicates(hits)
            if reranker is not None:
                hits = await reranker.rerank(query, hits, top_k=None)
            if mmr_lambda is not None:
                vectors = await asyncio.to_thread(self.vector_store.chunk_vectors, self.collection,
                                                  [h.chunk_id for h in hits])
                hits = mmr(hits, vectors, mmr_lambda, wanted)
            hits = hits[:wanted]
        except (NotFoundError, EmbedderMismatchError, FilterError):
            raise
        except BunkoError as exc:
            raise RetrievalError(f"search failed: {exc.message}") from exc
        self.last_search_ms = (time.perf_counter() - started) * 1000
        route(UsageEvent("search", store_kind(self.vector_store), mode, latency_ms=self.last_search_ms,
                         items=len(hits), metadata={"query": query, "mode": mode, "collection": self.collection}))
        return hits


__all__ = ["DEFAULT_FUSION", "MODES", "Fusion", "Retriever", "SearchMode", "fuse", "fuse_rrf", "mmr",
           "remove_near_duplicates"]
