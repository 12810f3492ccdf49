"""The records of a tenant export: the kinds, how each is read from a store, and the digest over them.

:mod:`bunko.portability` writes them to files and reads them back; :mod:`.writer` writes them into a
store. A record is a JSON-ready dict; vectors travel as base64 little-endian float32 (exact).
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import ArchiveError, CollectionNotFoundError
from ..stores.base import StoredChunk, VectorStore
from ..types import Collection

FORMAT = "bunko-export"
FORMAT_VERSION = 1
KINDS = ("collections", "documents", "chunks", "conversations", "memory_stores", "memories", "ingest_failures")
# Kinds an export made before they existed does not list: read as empty.
OPTIONAL_KINDS = frozenset({"ingest_failures"})
FILES = {kind: f"{kind}.jsonl" for kind in KINDS}
MANIFEST = "manifest.json"
PAGE = 100  # documents read (or written) per store call
LOOSE_PAGE = 1000  # loose chunks read per store call

Progress = Callable[[str, int], None]  # (kind, records done so far)


# -- records ------------------------------------------------------------------------------------
def vector_text(vector: np.ndarray) -> str:
    """A vector as base64 little-endian float32 (exact)."""
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def vector_from(text: str, dimension: int, where: str) -> np.ndarray:
    """The vector of :func:`vector_text`, checked to have ``dimension`` values (``ArchiveError`` names ``where``)."""
    try:
        vector = np.frombuffer(base64.b64decode(text, validate=True), dtype="<f4").astype(np.float32)
    except (ValueError, TypeError) as exc:
        raise ArchiveError(f"{where}: the vector is not base64 float32 data") from exc
    if vector.shape != (dimension,):
        raise ArchiveError(f"{where}: the vector has {vector.size} values; the collection has {dimension} dimensions")
    return vector


def chunk_record(stored: StoredChunk) -> dict[str, Any]:
    """A document's chunk with its vector, as it travels inside the document's record."""
    c = stored.chunk
    return {"id": c.id, "index": c.index, "start": c.start, "end": c.end, "token_count": c.token_count,
            "content": c.content, "metadata": c.metadata, "vector": vector_text(stored.vector)}


def canonical(kind: str, record: dict[str, Any]) -> bytes:
    """The bytes a record contributes to the digest: what an import must reproduce exactly.

    Conversation turn times are left out (an import stamps its own); everything else counts.
    """
    if kind == "conversations":
        record = {**record, "turns": [{k: v for k, v in t.items() if k != "created_at"} for t in record["turns"]]}
    elif kind == "memories":
        # The memory store normalises vectors that are not of unit length as it writes them: the digest
        # takes them to 5 decimals.
        vector = np.frombuffer(base64.b64decode(record["vector"]), dtype="<f4")
        record = {**record, "vector": [round(float(x), 5) for x in vector]}
    return json.dumps([kind, record], sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


class Digest:
    """An order-independent SHA-256 digest of records: the sum of their hashes modulo 2**256.

    Order-independent because two stores may list the same documents in different orders; constant
    memory whatever the export's size.
    """

    def __init__(self) -> None:
        self._sum = 0
        self.records = 0

    def add(self, kind: str, record: dict[str, Any]) -> None:
        """Count one record of ``kind`` into the digest."""
        self._sum = (self._sum + int.from_bytes(hashlib.sha256(canonical(kind, record)).digest(), "big")) % 2**256
        self.records += 1

    def hexdigest(self) -> str:
        """The digest so far, as 64 hex digits."""
        return f"{self._sum:064x}"


def read_tenant(store: VectorStore, *, collections: Sequence[str] | None = None,
                conversations: bool = True) -> Iterator[tuple[str, dict[str, Any]]]:
    """The tenant's data as (kind, record) pairs: each collection, its documents and loose chunks, then
    the conversations. ``collections`` limits which collections are read (all by default)."""
    known = {c.name: c for c in store.list_collections()}
    names = list(known) if collections is None else list(collections)
    for name in names:
        if name not in known:
            raise CollectionNotFoundError(f"collection {name!r} does not exist in tenant {store.tenant!r}")
        yield "collections", collection_record(known[name])
        yield from read_documents(store, name)
        yield from read_loose(store, name)
    if conversations:
        for conversation_id in store.conversations.ids():
            yield "conversations", conversation_record(store, conversation_id)
        yield from read_memories(store)
    yield from read_failures(store, None if collections is None else set(names))


def read_failures(store: VectorStore, collections: set[str] | None,
                  only: set[tuple[str, str]] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """The failed-ingest records (of ``collections``, or all; ``only``: these (collection, source) pairs).
    Their times and attempt counts stay behind: an import starts them again."""
    for f in sorted(store.failures.list(), key=lambda f: (f.collection, f.source)):
        if (collections is None or f.collection in collections) and (only is None or (f.collection, f.source) in only):
            yield "ingest_failures", {"collection": f.collection, "source": f.source, "error_type": f.error_type,
                                      "error_code": f.error_code, "message": f.message}


def memories_of(store: VectorStore) -> Any:
    """The tenant's agent memories, or None for a store that keeps none."""
    return store.memories()


def read_memories(store: VectorStore, only: dict[str, set[str]] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Memory stores and every user's memories (``only``: memory ids per store)."""
    memories = memories_of(store)
    if memories is None:
        return
    for info in memories.list_stores():
        if only is not None and info.name not in only:
            continue
        yield "memory_stores", {"name": info.name, "analyzer": info.analyzer, "embedder": {
            "provider": info.embedding_provider, "model": info.embedding_model, "dimension": info.dimension}}
        for user_id in memories.user_ids(info.name):
            items, vectors = memories.user_memories(info.name, user_id)
            for m, vector in zip(items, vectors, strict=True):
                if only is not None and m.id not in only[info.name]:
                    continue
                yield "memories", {"store": info.name, "id": m.id, "user_id": m.user_id, "session_id": m.session_id,
                                   "memory_type": m.memory_type, "subject": m.subject, "timestamp": m.timestamp,
                                   "content": m.content, "metadata": m.metadata, "vector": vector_text(vector)}


def collection_record(c: Collection) -> dict[str, Any]:
    """A collection's record: its name, description, analyzer, configuration and embedder."""
    return {"name": c.name, "description": c.description, "analyzer": c.analyzer, "config": c.config,
            "embedder": {"provider": c.embedding_provider, "model": c.embedding_model, "dimension": c.dimension}}


def conversation_record(store: VectorStore, conversation_id: str) -> dict[str, Any]:
    """A conversation's record: its id and turns."""
    return {"id": conversation_id, "turns": [
        {"role": t.role, "content": t.content, "metadata": t.metadata, "created_at": t.created_at}
        for t in store.conversations.turns(conversation_id)]}


def read_documents(store: VectorStore, collection: str,
                   only: set[str] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """The documents of ``collection`` (``only``: these ids) with their chunks and vectors, a page at a time."""
    offset = 0
    while True:
        page = store.list_documents(collection, limit=PAGE, offset=offset)
        if not page:
            return
        offset += len(page)
        wanted = [d for d in page if only is None or d.id in only]
        chunks = store.document_chunks(collection, [d.id for d in wanted])
        for d in wanted:
            yield "documents", {"collection": collection, "id": d.id, "source": d.source,
                                "content_hash": d.content_hash, "metadata": d.metadata, "version": d.version,
                                "chunks": [chunk_record(s) for s in chunks.get(d.id, [])]}


def read_loose(store: VectorStore, collection: str,
               only: set[str] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """The records of ``collection`` upserted without a document (``only``: these ids), with their vectors."""
    offset = 0
    while True:
        page = store.loose_chunks(collection, LOOSE_PAGE, offset)
        if not page:
            return
        offset += len(page)
        for stored in page:
            if only is None or stored.chunk.id in only:
                yield "chunks", {"collection": collection, "id": stored.chunk.id, "content": stored.chunk.content,
                                 "metadata": stored.chunk.metadata, "vector": vector_text(stored.vector)}


# -- what an export, import or copy did ---------------------------------------------------------
@dataclass
class Summary:
    """What an export, import or copy did."""

    tenant: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    chunks_in_documents: int = 0
    digest: str = ""
    verified: bool = False
    path: str | None = None
    skipped_conversations: int = 0

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


__all__ = ["FILES", "FORMAT", "FORMAT_VERSION", "KINDS", "LOOSE_PAGE", "MANIFEST", "OPTIONAL_KINDS", "PAGE", "Digest",
           "Progress", "Summary", "canonical", "chunk_record", "collection_record", "conversation_record",
           "memories_of", "read_documents", "read_failures", "read_loose", "read_memories", "read_tenant",
           "vector_from", "vector_text"]
