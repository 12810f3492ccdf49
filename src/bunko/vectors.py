"""Vector operations at the tenant level (R14): upsert records with or without vectors, query by vector or text.

The store's own ``upsert`` and ``query`` take vectors only. Here a record without a vector is
embedded by the collection's embedder (through the ``IndexManager``, in its batches and with its
concurrency), a query may be a text (embedded as a search query by the ``Retriever``), a missing
collection is created for the engine's embedder, and a vector of another dimension than the
collection's is refused with ``DimensionMismatchError`` before anything is written.
``Tenant.upsert`` and ``Tenant.query`` call these inside the tenant's usage recording.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import numpy as np

from .errors import CollectionNotFoundError, DimensionMismatchError, InvalidFieldError, VectorStoreError
from .filters import as_filter
from .indexing import IndexManager
from .requests import QueryRequest
from .search import Retriever, vector_query
from .types import UNSTORABLE, RecordOwner, SearchHit, UsageEvent, VectorRecord, unstorable_path
from .usage import route, store_kind

RECORD_FIELDS = ("content", "metadata", "id", "vector", "document_id")


def vector(value: Any, what: str) -> list[float]:
    """A vector as a list of finite floats, or ``VectorStoreError`` naming ``what`` it is."""
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise VectorStoreError(f"{what} is not a list of numbers") from None
    if array.ndim != 1 or array.size == 0 or not np.all(np.isfinite(array)):
        raise VectorStoreError(f"{what} must be a non-empty list of finite numbers")
    return [float(v) for v in array]


def record(value: VectorRecord | Mapping[str, Any], position: int) -> VectorRecord:
    """A record to upsert, checked: text content, dict metadata (neither holding a NUL character:
    ``InvalidFieldError`` naming the field), an optional vector of finite numbers.

    ``value`` is a ``VectorRecord`` or a dict with the same fields (``content``, ``metadata``,
    ``id``, ``vector``, ``document_id``). A record without a vector needs content to embed.
    """
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(RECORD_FIELDS))
        if unknown:
            raise VectorStoreError(f"record {position}: unknown field(s) {', '.join(unknown)}")
        value = VectorRecord(content=value.get("content", ""), metadata=value.get("metadata") or {},
                             id=value.get("id"), vector=value.get("vector"), document_id=value.get("document_id"))
    elif not isinstance(value, VectorRecord):
        raise VectorStoreError(f"record {position}: expected a VectorRecord or a dict, got {type(value).__name__}")
    if not isinstance(value.content, str):
        raise VectorStoreError(f"record {position}: content must be text")
    if not isinstance(value.metadata, dict):
        raise VectorStoreError(f"record {position}: metadata must be a dict")
    if value.id is not None and (not isinstance(value.id, str) or not value.id):
        raise VectorStoreError(f"record {position}: id must be a non-empty string")
    where = unstorable_path(value.content, "content") or unstorable_path(value.metadata, "metadata")
    if where is not None:  # no store keeps a NUL or an unpaired surrogate (types.unstorable)
        raise InvalidFieldError(f"record {position}: {where}: {UNSTORABLE}", field=where)
    given = None if value.vector is None else vector(value.vector, f"record {position}'s vector")
    if given is None and not value.content.strip():
        raise VectorStoreError(f"record {position}: give a vector, or content to embed")
    return VectorRecord(value.content, dict(value.metadata), value.id, given, value.document_id)


def records(values: Sequence[VectorRecord | Mapping[str, Any]]) -> list[VectorRecord]:
    """Every record of an upsert, checked (see :func:`record`)."""
    return [record(value, position) for position, value in enumerate(values)]


def query_request(collection: str | QueryRequest, options: Mapping[str, Any]) -> QueryRequest:
    """A checked query: ``collection`` if it is a request already, else one built from it and ``options``."""
    request = collection if isinstance(collection, QueryRequest) else QueryRequest(collection=collection, **options)
    request.check()
    return request


async def upsert(manager: IndexManager, retriever: Retriever, records: list[VectorRecord], *,
                 owner: RecordOwner | None = None) -> list[str]:
    """Store checked ``records`` in the manager's collection (created if missing); returns their ids. ``owner``
    is who writes them (a restricted one may replace only its user's records: ``ForbiddenError``)."""
    store, name = manager.vector_store, manager.collection
    try:
        collection = await asyncio.to_thread(store.get_collection, name)
    except CollectionNotFoundError:
        collection = await manager.ensure_collection()
    for position, item in enumerate(records):
        if item.vector is not None and len(item.vector) != collection.dimension:
            raise DimensionMismatchError(
                f"record {position} ({item.id or 'no id'}) has a {len(item.vector)}-d vector; collection "
                f"{name!r} holds {collection.dimension}-d vectors ({collection.embedding_provider}:"
                f"{collection.embedding_model})")
    missing = [r for r in records if r.vector is None]
    if missing:
        retriever.check_embedder(collection)
        vectors = await manager.embed_texts([r.content for r in missing])
        for item, row in zip(missing, vectors, strict=True):
            item.vector = row.tolist()
    started = time.perf_counter()
    ids = await asyncio.to_thread(partial(store.upsert, name, records, owner=owner))
    route(UsageEvent("upsert", store_kind(store), items=len(ids), latency_ms=(time.perf_counter() - started) * 1000,
                     metadata={"collection": name, "embedded": len(missing)}))
    return ids


async def query(retriever: Retriever, request: QueryRequest) -> list[SearchHit]:
    """The records nearest to the request's vector or text, best first (``request`` checked by the caller)."""
    store, name = retriever.vector_store, request.collection
    started = time.perf_counter()
    collection = await asyncio.to_thread(store.get_collection, name)
    if request.text is not None:
        retriever.check_embedder(collection)
        target = await retriever.query_vector(request.text)
    else:
        target = vector(request.vector, "the query vector")
        if len(target) != collection.dimension:
            raise DimensionMismatchError(f"the query vector has {len(target)} dimensions; collection {name!r} "
                                         f"holds {collection.dimension}-d vectors")
    hits = await asyncio.to_thread(
        vector_query, store, name, target, request.top_k, threshold=request.threshold,
        document_ids=request.document_ids, include_content=request.include_content, filter=as_filter(request.filter))
    route(UsageEvent("search", store_kind(store), "vector", latency_ms=(time.perf_counter() - started) * 1000,
                     items=len(hits), metadata={"query": request.text, "mode": "vector", "collection": name}))
    return hits


__all__ = ["query", "query_request", "record", "records", "upsert", "vector"]
