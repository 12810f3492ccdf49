"""Writing export records into a tenant-bound store: all of them, or nothing.

:class:`TenantWriter` writes through the store's ordinary write path (so versions, keyword indexes and
counters are kept as ingest keeps them), in batches. What the target already holds is checked before
each write: a record the target holds as it is (an import run twice) is left alone; a record it holds
otherwise (another version of a document, another text under a loose record's id, another memory under
its id, a conversation with other turns, a collection or memory store with another embedder) is a
conflict, ``ArchiveError``. Everything the writer wrote is therefore new, and it keeps the list: when a
write fails, a conflict turns up midway, or the data read back does not match the digest, :meth:`undo`
deletes exactly what this writer wrote (collections and memory stores it created go whole), so a failed
import or copy leaves the target as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import numpy as np

from ..errors import ArchiveError, CollectionNotFoundError, RagCorpusNotFoundError
from ..stores.base import ChunkWrite, DocumentWrite, VectorStore
from ..types import ConversationTurn, DocumentInfo, EmbedderInfo, IngestFailure, VectorRecord
from .records import (
    Digest,
    Progress,
    Summary,
    memories_of,
    read_documents,
    read_failures,
    read_loose,
    read_memories,
    read_tenant,
    vector_from,
)

logger = logging.getLogger(__name__)
# Documents are written in transactions of about this many chunks (or documents). Larger than the ingest
# runner's (which waits for the embedder, and whose documents should be searchable soon): fewer postings
# rows per chunk (PostgreSQL 1,600 -> 2,100 chunks/s at 100k, SQLite 3,000 -> 4,400; docs/ARCHITECTURE.md,
# "Bulk writes"), while a SQLite write lock, which every tenant's writes wait for, stays under about 2 s.
WRITE_CHUNKS = 8000
WRITE_DOCUMENTS = 500
_POSITION = frozenset({"chunk_index", "start", "end", "chunk_total", "token_count"})


class TenantWriter:
    """Writes records into a tenant-bound store in batches, and can take back what it wrote (see the module doc)."""

    def __init__(self, store: VectorStore, progress: Progress | None) -> None:
        self.store = store
        self.progress = progress
        self.dimensions: dict[str, int] = {}
        self.batch: list[DocumentWrite] = []
        self.batch_chunks = 0
        self.batch_collection: str | None = None
        self.writing: Any = None  # the batch started last (``begin_write``): analyzed while the next one gathers
        self.summary = Summary(store.tenant)
        self.written: dict[str, dict[str, set[str]]] = {}  # collection -> {"documents"|"chunks": ids}, to read back
        self.conversations: list[str] = []
        self.loading = ExitStack()  # the open bulk load of the collection being written
        self.loading_collection: str | None = None
        self.memory_dimensions: dict[str, int] = {}
        self.written_memories: dict[str, set[str]] = {}
        self.written_failures: set[tuple[str, str]] = set()
        # What the target held before (read once per collection, memory store and user), and what is new.
        self._held_documents: dict[str, dict[str, DocumentInfo]] = {}
        self._held_memories: dict[tuple[str, str], dict[str, Any]] = {}
        self._held_failures: dict[str, set[str]] = {}
        self.created_collections: set[str] = set()
        self.created_memory_stores: set[str] = set()
        self.new: dict[str, dict[str, list[str]]] = {}  # collection -> {"documents"|"chunks": ids written new}
        self.new_conversations: list[str] = []
        self.new_memories: dict[tuple[str, str], list[str]] = {}  # (memory store, user) -> ids
        self.new_failures: dict[str, list[str]] = {}  # collection -> sources

    def _memory_store(self) -> Any:
        memories = memories_of(self.store)
        if memories is None:
            raise ArchiveError(f"the target store ({self.store.kind}) keeps no agent memories")
        return memories

    # -- conflicts -----------------------------------------------------------------------------
    def check_collection(self, record: dict[str, Any]) -> bool:
        """Refuse a collection the target holds with another embedder or analyzer; True when it holds none."""
        try:
            existing = self.store.get_collection(record["name"])
        except CollectionNotFoundError:
            return True
        e = record["embedder"]
        if (existing.embedding_provider, existing.embedding_model, existing.dimension) != \
                (e["provider"], e["model"], int(e["dimension"])) or existing.analyzer != record["analyzer"]:
            raise ArchiveError(
                f"collection {record['name']!r} exists in tenant {self.store.tenant!r} with the embedder "
                f"{existing.embedding_provider}:{existing.embedding_model} ({existing.dimension} dimensions) and "
                f"the {existing.analyzer!r} analyzer; the export has {e['provider']}:{e['model']} "
                f"({e['dimension']} dimensions) and {record['analyzer']!r}. Import into another tenant or "
                "delete the collection first")
        return False

    def check_memory_store(self, record: dict[str, Any]) -> bool:
        """Refuse a memory store the target holds with another embedder or analyzer; True when it holds none."""
        try:
            existing = self._memory_store().get_store(record["name"])
        except RagCorpusNotFoundError:
            return True
        e = record["embedder"]
        if (existing.embedding_provider, existing.embedding_model, existing.dimension, existing.analyzer) != \
                (e["provider"], e["model"], int(e["dimension"]), record["analyzer"]):
            raise ArchiveError(f"memory store {record['name']!r} exists in tenant {self.store.tenant!r} with another "
                               "embedder or analyzer; import into another tenant or delete its memories first")
        return False

    def check_conversation(self, record: dict[str, Any]) -> bool:
        """True when the conversation must be written; False when the target already holds it as is."""
        stored = self.store.conversations.turns(record["id"])
        if not stored:
            return True
        same = [(t.role, t.content, t.metadata) for t in stored] == \
            [(t["role"], t["content"], t.get("metadata") or {}) for t in record["turns"]]
        if not same:
            raise ArchiveError(f"conversation {record['id']!r} exists in tenant {self.store.tenant!r} with other "
                               "turns; import into another tenant or delete the conversation first")
        return False

    def _document_is_new(self, collection: str, document: DocumentWrite) -> bool:
        """True when the target holds no document of this source; False when it holds this very one."""
        if collection in self.created_collections:
            return True
        held = self._held_documents.get(collection)
        if held is None:
            held = self._held_documents[collection] = {d.source: d for d in self.store.list_documents(collection)}
        existing = held.get(document.source)
        if existing is None:
            return True
        if (existing.id, existing.content_hash, existing.version) != (document.id, document.content_hash,
                                                                        document.version):
            raise ArchiveError(f"document {document.source!r} exists in collection {collection!r} of tenant "
                               f"{self.store.tenant!r} as another document or version ({existing.id}, version "
                               f"{existing.version}); import into another tenant or delete it first")
        return False

    def _chunk_is_new(self, collection: str, record: VectorRecord) -> bool:
        """True when the target holds no record of this id; False when it holds this very one."""
        assert record.id is not None and record.vector is not None
        if collection in self.created_collections:
            return True
        found = self.store.get_chunks(collection, [record.id])
        if not found:
            return True
        # A hit's metadata has the record's, plus its position where the record names none.
        metadata = {k: v for k, v in found[0].metadata.items() if k not in _POSITION or k in record.metadata}
        vector = self.store.chunk_vectors(collection, [record.id]).get(record.id)
        if found[0].content != record.content or metadata != record.metadata or vector is None or \
                not np.array_equal(np.asarray(vector, dtype=np.float32), np.asarray(record.vector, dtype=np.float32)):
            raise ArchiveError(f"record {record.id!r} exists in collection {collection!r} of tenant "
                               f"{self.store.tenant!r} with other content; import into another tenant or delete "
                               "it first")
        return False

    def _memory_is_new(self, name: str, record: dict[str, Any]) -> bool:
        """True when the user has no memory of this id in the store; False when it has this very one."""
        if name in self.created_memory_stores:
            return True
        key = (name, record["user_id"])
        held = self._held_memories.get(key)
        if held is None:
            items, _ = self._memory_store().user_memories(name, record["user_id"], vectors=False)
            held = self._held_memories[key] = {m.id: m for m in items}
        existing = held.get(record["id"])
        if existing is None:
            return True
        if (existing.content, existing.memory_type, existing.subject, existing.session_id) != \
                (record["content"], record["memory_type"], record.get("subject"), record.get("session_id")):
            raise ArchiveError(f"memory {record['id']!r} of user {record['user_id']!r} exists in tenant "
                               f"{self.store.tenant!r} with other content; import into another tenant or delete "
                               "it first")
        return False

    def _failure_is_new(self, failure: IngestFailure) -> bool:
        held = self._held_failures.get(failure.collection)
        if held is None:
            held = self._held_failures[failure.collection] = {f.source for f in
                                                              self.store.failures.list(failure.collection)}
        return failure.source not in held

    # -- writing -------------------------------------------------------------------------------
    def add(self, kind: str, record: dict[str, Any]) -> None:
        """Write one record of ``kind`` (documents are batched), after checking the target does not hold it
        otherwise; remember what was new."""
        if kind == "collections":
            self.flush()
            if self.check_collection(record):
                self.created_collections.add(record["name"])
            e = record["embedder"]
            self.store.ensure_collection(record["name"], EmbedderInfo(e["provider"], e["model"], int(e["dimension"])),
                                         record.get("description", ""), record.get("config") or {},
                                         analyzer=record["analyzer"])
            self.dimensions[record["name"]] = int(e["dimension"])
            self.written.setdefault(record["name"], {"documents": set(), "chunks": set()})
        elif kind == "documents":
            collection = self._collection_of(record)
            if self.batch_collection not in (None, collection):
                self.flush()
            elif len(self.batch) >= WRITE_DOCUMENTS or self.batch_chunks >= WRITE_CHUNKS:
                self.flush(wait=False)
            self.batch_collection = collection
            self.batch.append(self._document(record, self.dimensions[collection]))
            self.batch_chunks += len(record["chunks"])
            self.written[collection]["documents"].add(record["id"])
            self.summary.chunks_in_documents += len(record["chunks"])
        elif kind == "chunks":
            self.flush()
            collection = self._collection_of(record)
            vector = vector_from(record["vector"], self.dimensions[collection], f"chunk {record['id']!r}")
            item = VectorRecord(record["content"], record.get("metadata") or {}, record["id"], vector.tolist())
            if self._chunk_is_new(collection, item):
                self._new(collection, "chunks").append(record["id"])
                self.store.upsert(collection, [item])
            self.written[collection]["chunks"].add(record["id"])
        elif kind == "conversations":
            self.flush()
            self.end_load()
            if self.check_conversation(record):
                turns = [ConversationTurn(t["role"], t["content"], t.get("metadata") or {}) for t in record["turns"]]
                self.new_conversations.append(record["id"])
                self.store.conversations.append(record["id"], turns)
            else:
                self.summary.skipped_conversations += 1
            self.conversations.append(record["id"])
        elif kind == "memory_stores":
            self.flush()
            self.end_load()
            if self.check_memory_store(record):
                self.created_memory_stores.add(record["name"])
            e = record["embedder"]
            self._memory_store().ensure_store(record["name"], EmbedderInfo(e["provider"], e["model"],
                                                                           int(e["dimension"])), record["analyzer"])
            self.memory_dimensions[record["name"]] = int(e["dimension"])
            self.written_memories.setdefault(record["name"], set())
        elif kind == "memories":
            self.flush()
            self._add_memory(record)
        elif kind == "ingest_failures":
            self.flush()
            failure = IngestFailure(str(record["collection"]), str(record["source"]), str(record["error_type"]),
                                    str(record["error_code"]), str(record["message"]))
            if self._failure_is_new(failure):
                self.new_failures.setdefault(failure.collection, []).append(failure.source)
                self.store.failures.record(failure.collection, [failure])
            self.written_failures.add((failure.collection, failure.source))
        else:
            raise ArchiveError(f"unknown record kind {kind!r}")
        self.summary.counts[kind] += 1
        if self.progress is not None:
            self.progress(kind, self.summary.counts[kind])

    def _add_memory(self, record: dict[str, Any]) -> None:
        from ..stores.sql.memory import MemoryWrite

        name = record["store"]
        if name not in self.memory_dimensions:
            raise ArchiveError(f"memory {record.get('id')!r} belongs to memory store {name!r}, which the export "
                               "does not describe before it")
        vector = vector_from(record["vector"], self.memory_dimensions[name], f"memory {record['id']!r}")
        if self._memory_is_new(name, record):
            self.new_memories.setdefault((name, record["user_id"]), []).append(record["id"])
            self._memory_store().add(name, [MemoryWrite(
                record["id"], record["user_id"], record.get("session_id"), record["memory_type"], record.get("subject"),
                record["timestamp"], record["content"], record.get("metadata") or {})], vector[None, :])
        self.written_memories[name].add(record["id"])

    def _new(self, collection: str, kind: str) -> list[str]:
        return self.new.setdefault(collection, {"documents": [], "chunks": []})[kind]

    def _collection_of(self, record: dict[str, Any]) -> str:
        collection = record.get("collection")
        if collection not in self.dimensions:
            raise ArchiveError(f"{record.get('id')!r} belongs to collection {collection!r}, which the export "
                               "does not describe before it")
        return str(collection)

    @staticmethod
    def _document(record: dict[str, Any], dimension: int) -> DocumentWrite:
        chunks, vectors = [], []
        for c in record["chunks"]:
            chunks.append(ChunkWrite(c["id"], c["content"], int(c["index"]), int(c["start"]), int(c["end"]),
                                     int(c["token_count"]), c.get("metadata") or {}))
            vectors.append(vector_from(c["vector"], dimension, f"chunk {c['id']!r} of document {record['id']!r}"))
        block = np.vstack(vectors) if vectors else np.zeros((0, dimension), dtype=np.float32)
        return DocumentWrite(record["id"], record["source"], record.get("content_hash", ""),
                             record.get("metadata") or {}, chunks, block, version=int(record.get("version", 1)))

    def flush(self, *, wait: bool = True) -> None:
        """Write the batched documents that are new to the target, inside the collection's bulk load.

        The batch is started (``begin_write``: its keyword analysis goes to the worker processes) and the
        batch started before it is written meanwhile; with ``wait`` this one is written too before returning
        (a record of another kind follows, or the import ends)."""
        if self.batch:
            collection = self.batch_collection
            assert collection is not None
            batch = [d for d in self.batch if self._document_is_new(collection, d)]
            self.batch, self.batch_chunks = [], 0
            if batch:
                if self.loading_collection != collection:
                    self.end_load()
                    self.loading.enter_context(self.store.bulk_load(collection))
                    self.loading_collection = collection
                self._new(collection, "documents").extend(d.id for d in batch)
                started = self.store.begin_write(collection, batch)
                self._written()
                self.writing = started
        if wait:
            self._written()

    def _written(self) -> None:
        """Write the batch started last, if any."""
        if self.writing is not None:
            started, self.writing = self.writing, None
            self.store.finish_write(started)

    def end_load(self) -> None:
        """Close the open bulk load: a backend with a vector index builds or extends it now."""
        self._written()
        self.loading.close()
        self.loading = ExitStack()
        self.loading_collection = None

    def finish(self, expected_digest: str | None) -> Summary:
        """Flush, read back what was written and compare it with ``expected_digest`` (if given)."""
        self.flush()
        self.end_load()
        digest = Digest()
        for kind, record in self.read_back():
            digest.add(kind, record)
        self.summary.digest = digest.hexdigest()
        if expected_digest is not None:
            if digest.hexdigest() != expected_digest:
                raise ArchiveError(
                    f"the imported data of tenant {self.store.tenant!r} does not match the export (digest "
                    f"{digest.hexdigest()[:16]}… against {expected_digest[:16]}…); nothing was imported")
            self.summary.verified = True
        return self.summary

    def read_back(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The written records as the target store now holds them."""
        for kind, record in read_tenant(self.store, collections=list(self.written), conversations=False):
            if kind == "collections":
                yield kind, record
        for collection, ids in self.written.items():
            yield from read_documents(self.store, collection, ids["documents"])
            if ids["chunks"]:
                yield from read_loose(self.store, collection, ids["chunks"])
        for conversation_id in self.conversations:
            turns = self.store.conversations.turns(conversation_id)
            yield "conversations", {"id": conversation_id, "turns": [
                {"role": t.role, "content": t.content, "metadata": t.metadata} for t in turns]}
        if self.written_memories:
            yield from read_memories(self.store, self.written_memories)
        if self.written_failures:
            yield from read_failures(self.store, None, self.written_failures)

    # -- taking it back ------------------------------------------------------------------------
    def undo(self) -> None:
        """Delete what this writer wrote (everything it wrote was new to the target); a step that fails is logged
        and the others still run."""
        self.batch, self.writing = [], None  # a batch started and not written is not written now
        steps: list[tuple[str, Any]] = []
        memories = memories_of(self.store)
        for (name, user), ids in self.new_memories.items():
            if name not in self.created_memory_stores:
                steps.append((f"memories of {user!r}", lambda n=name, u=user, i=ids: memories.delete(
                    u, store=n, memory_ids=i)))
        for name in self.created_memory_stores:
            steps.append((f"memory store {name!r}", lambda n=name: memories.drop_store(n)))
        for conversation_id in self.new_conversations:
            steps.append((f"conversation {conversation_id!r}",
                          lambda c=conversation_id: self.store.conversations.delete(c)))
        for collection, sources in self.new_failures.items():
            steps.append((f"failure records of {collection!r}",
                          lambda c=collection, s=sources: self.store.failures.record(c, [], s)))
        for collection, new in self.new.items():
            if collection in self.created_collections:
                continue
            steps.append((f"records of {collection!r}", lambda c=collection, i=new["chunks"]: self.store.delete(c, i)))
            steps.append((f"documents of {collection!r}",
                          lambda c=collection, i=new["documents"]: self.store.delete_documents(i, c)))
        for collection in self.created_collections:
            steps.append((f"collection {collection!r}", lambda c=collection: self.store.delete_collection(c)))
        try:
            self.end_load()
        except Exception:  # the bulk load's index build; the data goes below anyway
            logger.exception("import into tenant %r: closing the bulk load failed", self.store.tenant)
        for what, step in steps:
            try:
                step()
            except Exception:
                logger.exception("import into tenant %r: taking back %s failed", self.store.tenant, what)


__all__ = ["TenantWriter"]
