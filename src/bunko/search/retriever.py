"""``Retriever``: a search of one collection of a tenant-bound store, as stages over candidates (R18–R22, R28).

1. The collection row is read once (embedder check, fusion settings, the write counter): the first of
   the search's two store transactions (three for a hybrid search whose store runs its legs at once).
2. A cached result for the same request and write counter is returned as is (R37).
3. The question is embedded once (or its embedding taken from the cache), outside any transaction.
4. The legs -- the vector leg and the keyword leg, each ranking chunk keys with the restriction
   compiled once -- run in one read transaction in turn, or in hybrid mode on a store that prefers it
   (PostgreSQL) at the same time, each in a read transaction of its own through the same tenant-bound
   store; they are fused (:mod:`bunko.search.fusion`) and the text and metadata
   of what the fusion returns are read once (:func:`bunko.search.session.collect_legs`). A leg with
   weight 0 is not run.
5. When near-duplicate removal, a reranker or MMR trims the list, the candidate pool (a few times
   ``top_k``) is what step 4 reads, with its vectors when MMR needs them.

Store and embedder failures become ``RetrievalError``; "not found", embedder-mismatch and
filter errors pass through unchanged so callers can tell a missing collection from a failing
search. :meth:`Retriever.run` returns a :class:`SearchResult`: the hits, the time, the question's
vector (the extractive answer then does not embed it again) and, with ``explain``, how each leg searched.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..embedders import BaseEmbedder
from ..errors import (
    BunkoError,
    EmbedderMismatchError,
    FilterError,
    NotFoundError,
    RetrievalError,
    StorageFullError,
    TransientStoreError,
)
from ..requests import SearchRequest
from ..stores.base import CollectionRow, Restriction, check_query_vector
from ..stores.sql.store import check_dimension
from ..types import Collection, SearchHit, UsageEvent
from ..usage import route, store_kind
from .cache import SearchCache
from .fusion import DEFAULT_FUSION, HYBRID_DEPTH, Fusion
from .session import Collected, Legs, SearchPort, collect_legs
from .stages import CANDIDATE_FACTOR, mmr, remove_near_duplicates

MAX_POOL = 100  # the most candidates a stage after the search sees
_RETRIES = 2  # reads of the row again when chunks vanished between the row's read and the legs


@dataclass(slots=True)
class SearchResult:
    """One search: its hits (best first), how long it took, the question's vector (None in keyword mode
    or from a cached result without it) and, when asked, how each leg searched."""

    hits: list[SearchHit]
    search_ms: float
    query_vector: np.ndarray | None = None
    cached: bool = False
    explain: dict[str, str] = field(default_factory=dict)


class Retriever:
    """Searches one collection with one embedder."""

    def __init__(self, embedder: Any, vector_store: Any, collection: str = "default", *,
                 rerankers: Callable[[str], Any] | None = None, cache: SearchCache | None = None) -> None:
        """``rerankers`` turns a request's ``rerank`` spec into a reranker (default: ``get_reranker``;
        the engine passes its own, which builds each one once). ``cache`` keeps query embeddings and
        results (the engine passes its own; None: no cache)."""
        self.embedder = embedder
        self.vector_store = vector_store
        self.collection = collection
        self.rerankers = rerankers
        self.cache = cache

    def _reranker(self, spec: str | None) -> Any:
        if not spec:
            return None
        if self.rerankers is not None:
            return self.rerankers(spec)
        from ..rerankers import get_reranker

        return get_reranker(spec)

    async def query_vector(self, query: str) -> Any:
        """The vector of a search query (embedded with the provider's query input type, if it has one);
        taken from the cache when this tenant embedded the same text with the same embedder before."""
        tenant = self.vector_store.tenant
        if self.cache is not None:
            cached = self.cache.query_vector(tenant, self.embedder, query)
            if cached is not None:
                return cached
        if isinstance(self.embedder, BaseEmbedder):
            vector: Any = (await self.embedder.embed_array([query], query=True))[0]
        else:
            embed_query = getattr(self.embedder, "embed_query", None)  # providers with query/document input types
            vector = await (embed_query(query) if embed_query is not None else self.embedder.embed(query))
        if self.cache is not None:
            return self.cache.put_query_vector(tenant, self.embedder, query, vector)
        return vector

    async def prime(self, queries: Sequence[str]) -> int:
        """Embed the queries that are not cached yet in batches, ahead of their searches (``bunko eval``
        knows all its questions at once); returns how many were embedded. Without a cache, nothing."""
        if self.cache is None or not isinstance(self.embedder, BaseEmbedder):
            return 0
        tenant = self.vector_store.tenant
        missing = list(dict.fromkeys(q for q in queries if self.cache.query_vector(tenant, self.embedder, q) is None))
        if missing:
            vectors = await self.embedder.embed_array(missing, query=True)
            for text, vector in zip(missing, vectors, strict=True):
                self.cache.put_query_vector(tenant, self.embedder, text, vector)
        return len(missing)

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

    @staticmethod
    def fusion_for(collection: Collection, fusion: Fusion | Mapping[str, Any] | None) -> Fusion:
        """The request's fusion, over the collection's configured one, over the default."""
        base = Fusion.from_dict(collection.config.get("fusion")) if collection.config.get("fusion") else DEFAULT_FUSION
        if isinstance(fusion, Fusion):
            return fusion
        return Fusion.from_dict(fusion, base)

    # -- the search ------------------------------------------------------------------------
    async def search(self, request: SearchRequest | str, top_k: int | None = None, *, reranker: Any = None,
                     **options: Any) -> list[SearchHit]:
        """The best chunks for a :class:`~bunko.requests.SearchRequest`, best first (:meth:`run`'s hits)."""
        return (await self.run(request, top_k, reranker=reranker, **options)).hits

    async def run(self, request: SearchRequest | str, top_k: int | None = None, *, reranker: Any = None,
                  explain: bool = False, **options: Any) -> SearchResult:
        """Search for a :class:`~bunko.requests.SearchRequest`: its hits, best first, with the time, the
        question's vector and (``explain``) how each leg searched.

        ``run("query", 5, mode="keyword")`` builds the request from the query and its options;
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
        spec_reranker = reranker is None
        reranker = reranker if reranker is not None else self._reranker(request.rerank)
        started = time.perf_counter()
        tenant = self.vector_store.tenant
        result = SearchResult([], 0.0)
        try:
            row: CollectionRow = await asyncio.to_thread(self.vector_store.read_collection, self.collection)
            key = None
            hits: list[SearchHit] | None = None
            if self.cache is not None and self.cache.enabled:
                key = self.cache.result_key(tenant, row, request, self.embedder,
                                            None if spec_reranker else reranker)
                hits = self.cache.results(key)
                if hits is not None:
                    result.cached = True
                    if request.mode != "keyword":  # for the extractive answer, if still cached
                        result.query_vector = self.cache.query_vector(tenant, self.embedder, request.query)
            if hits is None:
                hits = await self._search(row, request, reranker, result)
                if key is not None:
                    self.cache.put_results(key, hits)  # type: ignore[union-attr]
        except (NotFoundError, EmbedderMismatchError, FilterError, TransientStoreError, StorageFullError):
            raise  # a moment's database failure stays one (503, worth trying again), as does a full disk (507)
        except BunkoError as exc:
            raise RetrievalError(f"search failed: {exc.message}") from exc
        result.hits = hits
        result.search_ms = (time.perf_counter() - started) * 1000
        metadata: dict[str, Any] = {"query": request.query, "mode": request.mode, "collection": self.collection}
        if result.cached:
            metadata["cached"] = True
        route(UsageEvent("search", store_kind(self.vector_store), request.mode, latency_ms=result.search_ms,
                         items=len(hits), metadata=metadata))
        if not explain:
            result.explain = {}
        return result

    async def _search(self, row: CollectionRow, request: SearchRequest, reranker: Any,
                      result: SearchResult) -> list[SearchHit]:
        wanted = request.top_k
        trimmed = request.mmr_lambda is not None or request.dedupe or reranker is not None
        pool = min(MAX_POOL, wanted * CANDIDATE_FACTOR) if trimmed else wanted
        how = self.fusion_for(row, request.fusion) if request.mode == "hybrid" else None
        semantic = request.mode == "vector" or (how is not None and how.vector_weight > 0)
        keyword = request.mode == "keyword" or (how is not None and how.keyword_weight > 0)
        vector = None
        if semantic:
            self.check_embedder(row)
            vector = check_query_vector(await self.query_vector(request.query))
            check_dimension(row.dimension, vector.shape[0], self.collection)
            result.query_vector = vector
        legs = Legs(request.query, vector, keyword, min(MAX_POOL, pool * HYBRID_DEPTH), pool,
                    Restriction.of(request.document_ids, request.restriction), request.threshold, how)
        vectors: dict[str, np.ndarray] | None = {} if request.mmr_lambda is not None else None
        collected = await asyncio.to_thread(self._collect, row, legs, vectors)
        result.explain = collected.plans
        hits = collected.hits
        if not trimmed:
            return hits[:wanted]
        if request.dedupe:
            hits = remove_near_duplicates(hits)
        if reranker is not None:
            hits = await reranker.rerank(request.query, hits, top_k=None)
        if request.mmr_lambda is not None:
            hits = mmr(hits, vectors or {}, request.mmr_lambda, wanted)
        return hits[:wanted]

    def _collect(self, row: CollectionRow, legs: Legs, vectors: dict[str, np.ndarray] | None) -> Collected:
        """The legs and the hydration in one read transaction; when chunks the legs ranked are gone by
        the hydration (deleted after the row was read), the row is read again and the search run again."""
        store: SearchPort = self.vector_store
        for attempt in range(_RETRIES + 1):
            collected = collect_legs(store, row, legs, vectors=vectors)
            if len(collected.hits) == collected.ranked or attempt == _RETRIES:
                return collected
            row = store.read_collection(self.collection)
        return collected  # pragma: no cover - the loop returns


__all__ = ["MAX_POOL", "Retriever", "SearchResult"]
