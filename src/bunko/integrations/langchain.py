"""LangChain on bunko: ``BunkoVectorStore``, a LangChain ``VectorStore`` over either bunko store.

    from bunko.integrations.langchain import BunkoVectorStore

    store = BunkoVectorStore(embeddings, collection="notes", tenant="acme",
                             database_url="postgresql://bunko@db/bunko")   # or None: the embedded SQLite store
    store.add_documents(documents)
    store.similarity_search("有給休暇", k=4, filter={"year": {"$gte": 2020}})
    retriever = store.as_retriever(search_kwargs={"k": 4})

Texts are embedded by the LangChain ``Embeddings`` given (any provider); records, vectors and
metadata live in the tenant's collection with bunko's isolation (RLS on PostgreSQL). ``filter`` is a
bunko metadata filter (see docs/FILTERS.md). Scores are cosine similarities.

Install the extra: ``pip install "bunko[langchain]"``.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from typing_extensions import override

from ..config import DEFAULT_TENANT
from ..engine import Bunko
from ..errors import CollectionNotFoundError, ConfigError
from ..types import SearchHit

try:  # the optional "langchain" extra
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.vectorstores import VectorStore
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ConfigError('the LangChain integration needs the "langchain" extra: pip install "bunko[langchain]"') from exc

# The stored metadata lists the caller's own keys here, so what comes back is exactly what went in
# (bunko adds position fields such as chunk_index to every hit).
_KEYS = "_langchain_keys"


class LangChainEmbedder:
    """A LangChain ``Embeddings`` as a bunko embedder (provider ``langchain``, model = its class name)."""

    provider = "langchain"

    def __init__(self, embeddings: Embeddings, model: str | None = None) -> None:
        self.embeddings = embeddings
        self.model = model or type(embeddings).__name__
        self._dimension: int | None = None
        self.usage_sink: Callable[..., Any] | None = None

    @property
    def dimension(self) -> int:
        """The vector size, learned from one query embedding on first use."""
        if self._dimension is None:
            self._dimension = len(self.embeddings.embed_query("dimension probe"))
        return self._dimension

    async def embed(self, text: str) -> list[float]:
        """One text's vector (LangChain's query embedding)."""
        return list(await self.embeddings.aembed_query(text))

    async def embed_query(self, text: str) -> list[float]:
        """A search query's vector."""
        return list(await self.embeddings.aembed_query(text))

    async def embed_batch(self, texts: list[str]) -> list[list[float]]:
        """Documents' vectors, in order."""
        return [list(v) for v in await self.embeddings.aembed_documents(texts)]

    async def close(self) -> None:
        """Nothing to close: the LangChain object owns its clients."""
        return None


def _metadata(stored: dict[str, Any]) -> dict[str, Any]:
    keys = stored.get(_KEYS)
    if not isinstance(keys, list):
        return {k: v for k, v in stored.items() if k != _KEYS}
    return {k: stored[k] for k in keys if k in stored}


def _document(hit: SearchHit) -> Document:
    return Document(id=hit.chunk_id, page_content=hit.content, metadata=_metadata(hit.metadata))


class BunkoVectorStore(VectorStore):
    """A LangChain vector store in one collection of one bunko tenant, on SQLite or PostgreSQL."""

    def __init__(self, embedding: Embeddings, *, collection: str = "langchain", tenant: str = DEFAULT_TENANT,
                 database_url: str | None = None) -> None:
        self._embedding = embedding
        self.collection = collection
        self.engine = Bunko(database_url, embedder=LangChainEmbedder(embedding))
        self.tenant = self.engine.tenant(tenant)

    @property
    @override
    def embeddings(self) -> Embeddings:
        return self._embedding

    def close(self) -> None:
        """Close the store's connections."""
        self.engine.close()

    # -- writes -------------------------------------------------------------------------------------
    @staticmethod
    def _records(texts: Sequence[str], vectors: Sequence[Sequence[float]], metadatas: Sequence[dict[str, Any]] | None,
                 ids: Sequence[str | None] | None) -> list[dict[str, Any]]:
        # ids may hold None for documents without one (LangChain's add_documents passes them so)
        records = []
        for i, text in enumerate(texts):
            metadata = dict(metadatas[i]) if metadatas and i < len(metadatas) and metadatas[i] else {}
            given = ids[i] if ids and i < len(ids) else None
            stored: dict[str, Any] = dict(metadata)
            stored[_KEYS] = list(metadata)
            records.append({"id": given or str(uuid.uuid4()), "content": text, "vector": list(vectors[i]),
                            "metadata": stored})
        return records

    def add_texts(self, texts: Iterable[str], metadatas: list[dict[str, Any]] | None = None, *,
                  ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        """Embed and store texts (an id given again replaces that record); returns their ids."""
        items = list(texts)
        if not items:
            return []
        vectors = self._embedding.embed_documents(items)
        return list(self.tenant.upsert(self.collection, self._records(items, vectors, metadatas, ids)))

    @override
    async def aadd_texts(self, texts: Iterable[str], metadatas: list[dict[str, Any]] | None = None, *,
                         ids: list[str] | None = None, **kwargs: Any) -> list[str]:
        items = list(texts)
        if not items:
            return []
        vectors = await self._embedding.aembed_documents(items)
        return list(await self.tenant.aupsert(self.collection, self._records(items, vectors, metadatas, ids)))

    def delete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        """Delete records by id (unknown ids are ignored); with no ids, the whole collection."""
        try:
            if ids is None:
                self.tenant.delete_collection(self.collection)  # with its upload jobs, if any (bunko.jobs)
            else:
                self.tenant.delete_records(self.collection, ids)
        except CollectionNotFoundError:
            pass
        return True

    @override
    async def adelete(self, ids: list[str] | None = None, **kwargs: Any) -> bool:
        return await asyncio.to_thread(self.delete, ids)

    # -- reads --------------------------------------------------------------------------------------
    def get_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        """The records with these ids (unknown ids are left out)."""
        try:
            hits = self.tenant.records(self.collection, list(ids))
        except CollectionNotFoundError:
            return []
        return [_document(h) for h in hits]

    @override
    async def aget_by_ids(self, ids: Sequence[str], /) -> list[Document]:
        return await asyncio.to_thread(self.get_by_ids, ids)

    def similarity_search_by_vector_with_score(self, embedding: list[float], k: int = 4,
                                               filter: Any = None, **kwargs: Any) -> list[tuple[Document, float]]:
        """The ``k`` nearest records to a vector, with cosine similarity; ``filter`` is a bunko metadata filter."""
        try:
            hits = self.tenant.query(self.collection, vector=embedding, top_k=k, filter=filter)
        except CollectionNotFoundError:
            return []
        return [(_document(h), float(h.score)) for h in hits]

    async def _asearch_vector(self, embedding: list[float], k: int, filter: Any) -> list[tuple[Document, float]]:
        try:
            hits = await self.tenant.aquery(self.collection, vector=embedding, top_k=k, filter=filter)
        except CollectionNotFoundError:
            return []
        return [(_document(h), float(h.score)) for h in hits]

    @override
    def similarity_search_with_score(self, query: str, k: int = 4, filter: Any = None,
                                     **kwargs: Any) -> list[tuple[Document, float]]:
        return self.similarity_search_by_vector_with_score(self._embedding.embed_query(query), k, filter)

    @override
    async def asimilarity_search_with_score(self, query: str, k: int = 4, filter: Any = None,
                                            **kwargs: Any) -> list[tuple[Document, float]]:
        return await self._asearch_vector(await self._embedding.aembed_query(query), k, filter)

    @override
    def similarity_search(self, query: str, k: int = 4, filter: Any = None, **kwargs: Any) -> list[Document]:
        return [d for d, _ in self.similarity_search_with_score(query, k, filter)]

    @override
    async def asimilarity_search(self, query: str, k: int = 4, filter: Any = None, **kwargs: Any) -> list[Document]:
        return [d for d, _ in await self.asimilarity_search_with_score(query, k, filter)]

    @override
    def similarity_search_by_vector(self, embedding: list[float], k: int = 4, filter: Any = None,
                                    **kwargs: Any) -> list[Document]:
        return [d for d, _ in self.similarity_search_by_vector_with_score(embedding, k, filter)]

    @override
    async def asimilarity_search_by_vector(self, embedding: list[float], k: int = 4, filter: Any = None,
                                           **kwargs: Any) -> list[Document]:
        return [d for d, _ in await self._asearch_vector(embedding, k, filter)]

    def _select_relevance_score_fn(self) -> Callable[[float], float]:
        return lambda score: max(0.0, min(1.0, score))  # cosine similarity, clipped to [0, 1]

    @classmethod
    def from_texts(cls, texts: list[str], embedding: Embeddings, metadatas: list[dict[str, Any]] | None = None, *,
                   ids: list[str] | None = None, collection: str = "langchain", tenant: str = DEFAULT_TENANT,
                   database_url: str | None = None, **kwargs: Any) -> BunkoVectorStore:
        """A store with ``texts`` added."""
        store = cls(embedding, collection=collection, tenant=tenant, database_url=database_url)
        store.add_texts(texts, metadatas, ids=list(ids) if ids is not None else None)
        return store


__all__ = ["BunkoVectorStore", "LangChainEmbedder"]
