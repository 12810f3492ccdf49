"""``Retriever``: a search of one collection of a tenant-bound store, as stages over candidates (R18–R22, R28).

1. The collection row is read once (embedder check, fusion settings, the write counter).
2. A cached result for the same request and write counter is returned as is (R37).
3. The legs run concurrently, each in a worker thread: the vector leg (the question embedded
   once, or its embedding taken from the cache) and the keyword leg. They return chunk ids and
   scores, no text (``include_content=False``); a hybrid search runs both, a leg with weight 0
   is not run.
4. Fusion (:mod:`bunko.search.fusion`) ranks the candidates.
5. When near-duplicate removal, a reranker or MMR trims the list, the candidate pool (a few times
   ``top_k``) is read whole in one query, with its vectors when MMR needs them; otherwise only
   the final ``top_k`` are. Either way content and metadata are read once per search.

Store and embedder failures become ``RetrievalError``; "not found", embedder-mismatch and
filter errors pass through unchanged so callers can tell a missing collection from a failing
search. The question's vector stays on the retriever (``last_query_vector``) for the extractive
answer, which then does not embed it again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from ..embedders import BaseEmbedder
from ..errors import BunkoError, EmbedderMismatchError, FilterError, NotFoundError, RetrievalError
from ..filters import Filter
from ..requests import SearchRequest
from ..stores.base import VectorStore
from ..types import Collection, SearchHit, UsageEvent
from ..usage import route, store_kind
from .cache import SearchCache
from .fusion import DEFAULT_FUSION, HYBRID_DEPTH, Fusion, fuse
from .stages import CANDIDATE_FACTOR, mmr, remove_near_duplicates

MAX_POOL = 100  # the most candidates a stage after the search sees


class Retriever:
    """Searches one collection with one embedder."""

    def __init__(self, embedder: Any, vector_store: VectorStore, collection: str = "default", *,
                 rerankers: Callable[[str], Any] | None = None, cache: SearchCache | None = None) -> None:
        """``rerankers`` turns a request's ``rerank`` spec into a reranker (default: ``get_reranker``;
        the engine passes its own, which builds each one once). ``cache`` keeps query embeddings and
        results (the engine passes its own; None: no cache)."""
        self.embedder = embedder
        self.vector_store = vector_store
        self.collection = collection
        self.rerankers = rerankers
        self.cache = cache
        self.last_search_ms = 0.0
        self.last_query_vector: np.ndarray | None = None

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

    # -- the legs: ids and scores --------------------------------------------------------
    async def _keyword_leg(self, query: str, depth: int, document_ids: Sequence[str] | None,
                           flt: Filter | None) -> list[SearchHit]:
        return await asyncio.to_thread(self.vector_store.keyword_search, self.collection, query, depth,
                                       document_ids=document_ids, filter=flt, include_content=False)

    async def _vector_leg(self, collection: Collection, query: str, depth: int, document_ids: Sequence[str] | None,
                          threshold: float | None, flt: Filter | None) -> list[SearchHit]:
        self.check_embedder(collection)
        vector = await self.query_vector(query)
        self.last_query_vector = np.asarray(vector, dtype=np.float32)
        return await asyncio.to_thread(self.vector_store.query, self.collection, vector, depth, threshold=threshold,
                                       document_ids=document_ids, include_content=False, filter=flt)

    async def _candidates(self, collection: Collection, request: SearchRequest, pool: int) -> list[SearchHit]:
        """The ranked candidates of the request's mode (without text), at most ``pool``."""
        query, document_ids, flt = request.query, request.document_ids, request.restriction
        if request.mode == "keyword":
            return await self._keyword_leg(query, pool, document_ids, flt)
        if request.mode == "vector":
            return await self._vector_leg(collection, query, pool, document_ids, request.threshold, flt)
        how = self.fusion_for(collection, request.fusion)
        depth = min(MAX_POOL, pool * HYBRID_DEPTH)
        # Both legs run at once, in the same tenant scope with the same restriction.
        legs: list[Any] = [
            self._vector_leg(collection, query, depth, document_ids, request.threshold, flt)
            if how.vector_weight > 0 else _nothing(),
            self._keyword_leg(query, depth, document_ids, flt) if how.keyword_weight > 0 else _nothing(),
        ]
        semantic, keyword = await _gather(legs)
        return fuse([("vector", how.vector_weight, semantic), ("keyword", how.keyword_weight, keyword)], pool, how)

    async def _hydrate(self, candidates: list[SearchHit], vectors: dict[str, np.ndarray] | None = None
                       ) -> list[SearchHit]:
        """The candidates with their text and metadata (one query); fusion's per-leg ranks are kept."""
        hits = await asyncio.to_thread(self.vector_store.fetch_hits, self.collection,
                                       [(c.chunk_id, c.score) for c in candidates], vectors=vectors)
        legs = {c.chunk_id: c.metadata["legs"] for c in candidates if "legs" in c.metadata}
        for hit in hits:
            if hit.chunk_id in legs:
                hit.metadata["legs"] = legs[hit.chunk_id]
        return hits

    # -- the search ------------------------------------------------------------------------
    async def search(self, request: SearchRequest | str, top_k: int | None = None, *, reranker: Any = None,
                     **options: Any) -> list[SearchHit]:
        """The best chunks for a :class:`~bunko.requests.SearchRequest`, best first.

        ``search("query", 5, mode="keyword")`` builds the request from the query and its options;
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
        self.last_query_vector = None
        cached = False
        started = time.perf_counter()
        try:
            collection = await asyncio.to_thread(self.vector_store.get_collection, self.collection)
            key = None
            hits: list[SearchHit] | None = None
            if self.cache is not None and self.cache.enabled:
                key = self.cache.result_key(self.vector_store.tenant, collection, request, self.embedder,
                                            None if spec_reranker else reranker)
                hits = self.cache.results(key)
                cached = hits is not None
                if cached and request.mode != "keyword":  # for the extractive answer, if still cached
                    self.last_query_vector = self.cache.query_vector(self.vector_store.tenant, self.embedder,
                                                                     request.query)
            if hits is None:
                hits = await self._search(collection, request, reranker)
                if key is not None:
                    self.cache.put_results(key, hits)  # type: ignore[union-attr]
        except (NotFoundError, EmbedderMismatchError, FilterError):
            raise
        except BunkoError as exc:
            raise RetrievalError(f"search failed: {exc.message}") from exc
        self.last_search_ms = (time.perf_counter() - started) * 1000
        metadata: dict[str, Any] = {"query": request.query, "mode": request.mode, "collection": self.collection}
        if cached:
            metadata["cached"] = True
        route(UsageEvent("search", store_kind(self.vector_store), request.mode, latency_ms=self.last_search_ms,
                         items=len(hits), metadata=metadata))
        return hits

    async def _search(self, collection: Collection, request: SearchRequest, reranker: Any) -> list[SearchHit]:
        wanted = request.top_k
        trimmed = request.mmr_lambda is not None or request.dedupe or reranker is not None
        pool = min(MAX_POOL, wanted * CANDIDATE_FACTOR) if trimmed else wanted
        candidates = await self._candidates(collection, request, pool)
        if not trimmed:
            return await self._hydrate(candidates[:wanted])
        vectors: dict[str, np.ndarray] | None = {} if request.mmr_lambda is not None else None
        hits = await self._hydrate(candidates, vectors)
        if request.dedupe:
            hits = remove_near_duplicates(hits)
        if reranker is not None:
            hits = await reranker.rerank(request.query, hits, top_k=None)
        if request.mmr_lambda is not None:
            hits = mmr(hits, vectors or {}, request.mmr_lambda, wanted)
        return hits[:wanted]


async def _nothing() -> list[SearchHit]:
    return []


async def _gather(legs: list[Any]) -> list[list[SearchHit]]:
    """Run the legs at once; if one fails, cancel the other and raise the failure."""
    tasks = [asyncio.ensure_future(leg) for leg in legs]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


__all__ = ["MAX_POOL", "Retriever"]
