"""``Retriever``: embed the query and search one collection of a tenant-bound store (R28).

Modes: ``vector`` (cosine over the collection), ``keyword`` (BM25 over the analyzed
text) and ``hybrid`` (both, fused by RRF). Every mode can be restricted to given
documents and by a metadata filter (R18, R21). Store and embedder
failures become ``RetrievalError``; "not found" errors pass through unchanged so
callers can tell a missing collection from a failing search.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any, Literal

from .embedders import BaseEmbedder
from .errors import BunkoError, EmbedderMismatchError, FilterError, NotFoundError, RetrievalError
from .filters import Filter, FilterLike, as_filter
from .stores.base import VectorStore
from .types import Collection, SearchHit, UsageEvent
from .usage import route, store_kind

SearchMode = Literal["vector", "keyword", "hybrid"]
MODES: tuple[str, ...] = ("vector", "keyword", "hybrid")

# Weighted reciprocal rank fusion (R19): the seed's semantic 0.7 / keyword 0.3, k = 60.
HYBRID_WEIGHTS = (0.7, 0.3)
RRF_K = 60
# Each leg of a hybrid search fetches this many times top_k candidates before fusing.
HYBRID_DEPTH = 3


def fuse_rrf(legs: Sequence[tuple[str, float, list[SearchHit]]], top_k: int, k: int = RRF_K) -> list[SearchHit]:
    """Weighted reciprocal rank fusion of ranked lists: score = sum(weight / (k + rank)).

    Each fused hit records its per-leg rank and score in ``metadata["legs"]``.
    """
    fused: dict[str, SearchHit] = {}
    scores: dict[str, float] = {}
    for name, weight, hits in legs:
        for rank, hit in enumerate(hits, start=1):
            if hit.chunk_id not in fused:
                fused[hit.chunk_id] = SearchHit(hit.chunk_id, hit.document_id, hit.source, hit.content, 0.0,
                                                hit.chunk_index, {**hit.metadata, "legs": {}})
            fused[hit.chunk_id].metadata["legs"][name] = {"rank": rank, "score": round(float(hit.score), 6)}
            scores[hit.chunk_id] = scores.get(hit.chunk_id, 0.0) + weight / (k + rank)
    order = sorted(scores, key=lambda cid: (-scores[cid], cid))[:top_k]
    for cid in order:
        fused[cid].score = scores[cid]
    return [fused[cid] for cid in order]


class Retriever:
    """Searches one collection with one embedder."""

    def __init__(self, embedder: Any, vector_store: VectorStore, collection: str = "default") -> None:
        self.embedder = embedder
        self.vector_store = vector_store
        self.collection = collection
        self.last_search_ms = 0.0

    async def _query_vector(self, query: str) -> Any:
        if isinstance(self.embedder, BaseEmbedder):
            return (await self.embedder.embed_array([query], query=True))[0]
        embed_query = getattr(self.embedder, "embed_query", None)  # providers with query/document input types
        return await (embed_query(query) if embed_query is not None else self.embedder.embed(query))

    async def _keyword_leg(self, query: str, top_k: int, document_ids: Sequence[str] | None,
                           flt: Filter | None) -> list[SearchHit]:
        return await asyncio.to_thread(
            self.vector_store.keyword_search, self.collection, query, top_k, document_ids=document_ids, filter=flt
        )

    async def _vector_leg(self, collection: Collection, query: str, top_k: int, document_ids: Sequence[str] | None,
                          threshold: float | None, flt: Filter | None) -> list[SearchHit]:
        # Provider and model first: a hosted embedder may learn its dimension only from its first answer.
        provider, model = str(getattr(self.embedder, "provider", "")), str(getattr(self.embedder, "model", ""))
        dimension = int(getattr(self.embedder, "dimension", 0) or 0)
        if (collection.embedding_provider, collection.embedding_model) != (provider, model) or (
            dimension and dimension != collection.dimension
        ):
            shown = f"{dimension}-d" if dimension else "dimension not known yet"
            raise EmbedderMismatchError(
                f"collection {self.collection!r} was built with {collection.embedding_provider}:"
                f"{collection.embedding_model} ({collection.dimension}-d); the query embedder is "
                f"{provider}:{model} ({shown}). A collection keeps the embedder it was built with: use that "
                "one (--embedder / BUNKO_EMBEDDER), or another collection"
            )
        vector = await self._query_vector(query)
        return await asyncio.to_thread(
            self.vector_store.query, self.collection, vector, top_k, threshold=threshold, document_ids=document_ids,
            filter=flt,
        )

    async def search(
        self,
        query: str,
        top_k: int = 5,
        *,
        document_ids: Sequence[str] | None = None,
        threshold: float | None = None,
        mode: SearchMode = "vector",
        filter: FilterLike = None,
    ) -> list[SearchHit]:
        """The ``top_k`` best chunks for ``query``, best first.

        ``document_ids`` and ``filter`` (a metadata filter, see :mod:`bunko.filters`) restrict every
        mode; in hybrid mode both legs get the same restriction. A malformed filter raises
        ``FilterError`` before anything is embedded.
        """
        if not isinstance(query, str) or not query.strip():
            raise RetrievalError("the query is empty")
        if mode not in MODES:
            raise RetrievalError(f"unknown search mode {mode!r}; use one of: {', '.join(MODES)}")
        if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= 100:
            raise RetrievalError(f"top_k must be an integer from 1 to 100; got {top_k!r}")
        flt = as_filter(filter)
        started = time.perf_counter()
        try:
            collection = await asyncio.to_thread(self.vector_store.get_collection, self.collection)
            if mode == "hybrid":
                # Both legs run in the same tenant scope with the same restriction.
                depth = min(100, top_k * HYBRID_DEPTH)
                semantic = await self._vector_leg(collection, query, depth, document_ids, threshold, flt)
                keyword = await self._keyword_leg(query, depth, document_ids, flt)
                hits = fuse_rrf([("vector", HYBRID_WEIGHTS[0], semantic), ("keyword", HYBRID_WEIGHTS[1], keyword)],
                                top_k)
            elif mode == "keyword":
                hits = await self._keyword_leg(query, top_k, document_ids, flt)
            else:
                hits = await self._vector_leg(collection, query, top_k, document_ids, threshold, flt)
        except (NotFoundError, EmbedderMismatchError, FilterError):
            raise
        except BunkoError as exc:
            raise RetrievalError(f"search failed: {exc.message}") from exc
        self.last_search_ms = (time.perf_counter() - started) * 1000
        route(UsageEvent("search", store_kind(self.vector_store), mode, latency_ms=self.last_search_ms,
                         items=len(hits), metadata={"query": query, "mode": mode, "collection": self.collection}))
        return hits
