"""The search cache (R37): query embeddings and search results, per tenant, in process memory.

* Query embeddings are keyed by tenant, embedder (provider, model, dimension) and the query's
  text: a repeated question is not embedded again.
* Search results are keyed by tenant, the collection (its name and creation time), the
  collection's write counter (``Collection.write_seq``, bumped by every ingest, delete or version
  change, also by another process sharing the database) and the whole request. A write makes the
  collection's cached results unreachable; least recently used entries make room for new ones.

The tenant is part of every key, so one tenant's entries are never served to another. Hits and
misses are counted; :meth:`SearchCache.stats` reads them.
"""

from __future__ import annotations

import copy
import json
import threading
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import fields
from typing import Any

import numpy as np

from .. import metrics
from ..filters import Filter
from ..requests import SearchRequest
from ..types import Collection, SearchHit


class _LRU:
    """A bounded, thread-safe least-recently-used map with hit and miss counters."""

    def __init__(self, capacity: int, name: str) -> None:
        self.name = name  # the cache's label in bunko_cache_requests_total
        self.capacity = max(0, int(capacity))
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    def get(self, key: Hashable) -> Any:
        with self._lock:
            found = key in self._items
            if found:
                self._items.move_to_end(key)
                self.hits += 1
                value = self._items[key]
            else:
                self.misses += 1
                value = None
        metrics.count_cache("hit" if found else "miss", self.name)
        return value

    def put(self, key: Hashable, value: Any) -> None:
        if self.capacity <= 0:
            return
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {"hits": self.hits, "misses": self.misses, "size": len(self._items), "capacity": self.capacity}


def _embedder_key(embedder: Any) -> tuple[str, str, int]:
    return (str(getattr(embedder, "provider", type(embedder).__name__)), str(getattr(embedder, "model", "")),
            int(getattr(embedder, "dimension", 0) or 0))


def _request_key(request: SearchRequest, reranker: Any) -> str:
    """The whole request (and the reranker object's identity, when one was passed in) as one string."""
    values: dict[str, Any] = {}
    for f in fields(request):
        value = getattr(request, f.name)
        if isinstance(value, Filter):
            value = value.spec
        values[f.name] = value
    if reranker is not None:
        values["reranker"] = f"{type(reranker).__module__}.{type(reranker).__qualname__}@{id(reranker)}"
    return json.dumps(values, sort_keys=True, ensure_ascii=False, default=str)


class SearchCache:
    """Per-tenant query embeddings and search results of one engine (see the module docstring)."""

    def __init__(self, query_vectors: int = 2048, search_results: int = 512) -> None:
        self._vectors = _LRU(query_vectors, "query_vectors")
        self._results = _LRU(search_results, "search_results")

    @property
    def enabled(self) -> bool:
        """Whether search results are cached at all."""
        return self._results.capacity > 0

    # -- query embeddings ------------------------------------------------------------------
    def query_vector(self, tenant: str, embedder: Any, text: str) -> np.ndarray | None:
        """The cached embedding of ``text`` for this tenant and embedder, or None (counted as a miss)."""
        if self._vectors.capacity <= 0:
            return None
        return self._vectors.get((tenant, _embedder_key(embedder), text))

    def put_query_vector(self, tenant: str, embedder: Any, text: str, vector: Any) -> np.ndarray:
        """Remember ``text``'s embedding; returns it as a read-only float32 array."""
        array = np.array(vector, dtype=np.float32)
        array.setflags(write=False)
        self._vectors.put((tenant, _embedder_key(embedder), text), array)
        return array

    # -- search results --------------------------------------------------------------------
    def result_key(self, tenant: str, collection: Collection, request: SearchRequest, embedder: Any,
                   reranker: Any = None) -> Hashable:
        """The key of a search's results: tenant, collection and its write counter, embedder, request."""
        return (tenant, collection.name, collection.created_at, collection.write_seq, _embedder_key(embedder),
                _request_key(request, reranker))

    def results(self, key: Hashable) -> list[SearchHit] | None:
        """A copy of the cached hits under ``key``, or None (counted as a miss)."""
        if not self.enabled:
            return None
        found = self._results.get(key)
        return None if found is None else copy.deepcopy(found)

    def put_results(self, key: Hashable, hits: list[SearchHit]) -> None:
        """Remember a search's hits (a copy: callers may change theirs)."""
        if self.enabled:
            self._results.put(key, copy.deepcopy(hits))

    def clear(self) -> None:
        """Forget everything (counters stay)."""
        self._vectors.clear()
        self._results.clear()

    def stats(self) -> dict[str, dict[str, int]]:
        """Hits, misses, size and capacity of each part: ``{"query_vectors": {...}, "search_results": {...}}``."""
        return {"query_vectors": self._vectors.stats(), "search_results": self._results.stats()}


__all__ = ["SearchCache"]
