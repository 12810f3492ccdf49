"""Moving a tenant's data: export to files, import from them, and copy between stores (R34).

Everything a tenant owns in a store travels — collections (with their embedder, analyzer and
splitter settings), documents (with their version, metadata and content hash), chunks with their
vectors (exact float32, so nothing is re-embedded), records upserted without a document,
conversations, agent memories of every user, and the record of files whose ingest failed (so
``bunko documents list --failed`` still shows them). Usage records and search logs stay behind: they
are the operator's accounting.

An export is a folder (the format is described in docs/EXPORT.md)::

    manifest.json        format, tenant, counts, a SHA-256 per file and a digest of the data
    collections.jsonl    one collection per line
    documents.jsonl      one document per line, its chunks and vectors inline
    chunks.jsonl         records upserted without a document
    conversations.jsonl  one conversation per line, its turns inline
    memory_stores.jsonl  one agent memory store per line (its embedder and analyzer)
    memories.jsonl       one agent memory per line (user, session, type, subject, time, vector)
    ingest_failures.jsonl one failed file or URL per line (collection, source, error, message)

An import checks every file's checksum before it writes anything, refuses collections whose
embedder or analyzer differs from the target's, then writes through the store's own write path
(so versions, keyword indexes and counters are kept as ingest keeps them), and finally reads the
imported data back and compares its digest with the export's. ``copy_tenant`` does the same
between two open stores without files. Both work through the ``VectorStore`` protocol, so they
run unchanged on every backend and never reach another tenant: the stores are tenant-bound.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ArchiveError, CollectionNotFoundError
from ..stores.base import ChunkWrite, DocumentWrite, StoredChunk, VectorStore
from ..types import Collection, ConversationTurn, EmbedderInfo, VectorRecord
from ..version import __version__

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
def _vector_text(vector: np.ndarray) -> str:
    return base64.b64encode(np.asarray(vector, dtype="<f4").tobytes()).decode("ascii")


def _vector_from(text: str, dimension: int, where: str) -> np.ndarray:
    try:
        vector = np.frombuffer(base64.b64decode(text, validate=True), dtype="<f4").astype(np.float32)
    except (ValueError, TypeError) as exc:
        raise ArchiveError(f"{where}: the vector is not base64 float32 data") from exc
    if vector.shape != (dimension,):
        raise ArchiveError(f"{where}: the vector has {vector.size} values; the collection has {dimension} dimensions")
    return vector


def _chunk_record(stored: StoredChunk) -> dict[str, Any]:
    c = stored.chunk
    return {"id": c.id, "index": c.index, "start": c.start, "end": c.end, "token_count": c.token_count,
            "content": c.content, "metadata": c.metadata, "vector": _vector_text(stored.vector)}


def _canonical(kind: str, record: dict[str, Any]) -> bytes:
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
        self._sum = (self._sum + int.from_bytes(hashlib.sha256(_canonical(kind, record)).digest(), "big")) % 2**256
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
        yield "collections", _collection_record(known[name])
        yield from _read_documents(store, name)
        yield from _read_loose(store, name)
    if conversations:
        for conversation_id in store.conversations.ids():
            yield "conversations", _conversation_record(store, conversation_id)
        yield from _read_memories(store)
    yield from _read_failures(store, None if collections is None else set(names))


def _read_failures(store: VectorStore, collections: set[str] | None,
                   only: set[tuple[str, str]] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """The failed-ingest records (of ``collections``, or all; ``only``: these (collection, source) pairs).
    Their times and attempt counts stay behind: an import starts them again."""
    for f in sorted(store.failures.list(), key=lambda f: (f.collection, f.source)):
        if (collections is None or f.collection in collections) and (only is None or (f.collection, f.source) in only):
            yield "ingest_failures", {"collection": f.collection, "source": f.source, "error_type": f.error_type,
                                      "error_code": f.error_code, "message": f.message}


def _memories_of(store: VectorStore) -> Any:
    """The tenant's agent memories, or None for a store that keeps none."""
    return store.memories()


def _read_memories(store: VectorStore, only: dict[str, set[str]] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Memory stores and every user's memories (``only``: memory ids per store)."""
    memories = _memories_of(store)
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
                                   "content": m.content, "metadata": m.metadata, "vector": _vector_text(vector)}


def _collection_record(c: Collection) -> dict[str, Any]:
    return {"name": c.name, "description": c.description, "analyzer": c.analyzer, "config": c.config,
            "embedder": {"provider": c.embedding_provider, "model": c.embedding_model, "dimension": c.dimension}}


def _conversation_record(store: VectorStore, conversation_id: str) -> dict[str, Any]:
    return {"id": conversation_id, "turns": [
        {"role": t.role, "content": t.content, "metadata": t.metadata, "created_at": t.created_at}
        for t in store.conversations.turns(conversation_id)]}


def _read_documents(store: VectorStore, collection: str,
                    only: set[str] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
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
                                "chunks": [_chunk_record(s) for s in chunks.get(d.id, [])]}


def _read_loose(store: VectorStore, collection: str,
                only: set[str] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    offset = 0
    while True:
        page = store.loose_chunks(collection, LOOSE_PAGE, offset)
        if not page:
            return
        offset += len(page)
        for stored in page:
            if only is None or stored.chunk.id in only:
                yield "chunks", {"collection": collection, "id": stored.chunk.id, "content": stored.chunk.content,
                                 "metadata": stored.chunk.metadata, "vector": _vector_text(stored.vector)}


# -- writing records into a store ---------------------------------------------------------------
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


class _Writer:
    """Writes records into a tenant-bound store through its ordinary write path, in batches."""

    def __init__(self, store: VectorStore, progress: Progress | None) -> None:
        self.store = store
        self.progress = progress
        self.dimensions: dict[str, int] = {}
        self.batch: list[DocumentWrite] = []
        self.batch_collection: str | None = None
        self.summary = Summary(store.tenant)
        self.written: dict[str, dict[str, set[str]]] = {}  # collection -> {"documents"|"chunks": ids}
        self.conversations: list[str] = []
        self.loading = ExitStack()  # the open bulk load of the collection being written
        self.loading_collection: str | None = None
        self.memory_dimensions: dict[str, int] = {}
        self.written_memories: dict[str, set[str]] = {}
        self.written_failures: set[tuple[str, str]] = set()

    def _memory_store(self) -> Any:
        memories = _memories_of(self.store)
        if memories is None:
            raise ArchiveError(f"the target store ({self.store.kind}) keeps no agent memories")
        return memories

    def check_collection(self, record: dict[str, Any]) -> None:
        """Refuse, before anything is written, a collection the target holds with another embedder or analyzer."""
        try:
            existing = self.store.get_collection(record["name"])
        except CollectionNotFoundError:
            return
        e = record["embedder"]
        if (existing.embedding_provider, existing.embedding_model, existing.dimension) != \
                (e["provider"], e["model"], int(e["dimension"])) or existing.analyzer != record["analyzer"]:
            raise ArchiveError(
                f"collection {record['name']!r} exists in tenant {self.store.tenant!r} with the embedder "
                f"{existing.embedding_provider}:{existing.embedding_model} ({existing.dimension} dimensions) and "
                f"the {existing.analyzer!r} analyzer; the export has {e['provider']}:{e['model']} "
                f"({e['dimension']} dimensions) and {record['analyzer']!r}. Import into another tenant or "
                "delete the collection first")

    def check_memory_store(self, record: dict[str, Any]) -> None:
        """Refuse, before anything is written, a memory store the target holds with another embedder or analyzer."""
        from ..errors import RagCorpusNotFoundError

        try:
            existing = self._memory_store().get_store(record["name"])
        except RagCorpusNotFoundError:
            return
        e = record["embedder"]
        if (existing.embedding_provider, existing.embedding_model, existing.dimension, existing.analyzer) != \
                (e["provider"], e["model"], int(e["dimension"]), record["analyzer"]):
            raise ArchiveError(f"memory store {record['name']!r} exists in tenant {self.store.tenant!r} with another "
                               "embedder or analyzer; import into another tenant or delete its memories first")

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

    def add(self, kind: str, record: dict[str, Any]) -> None:
        if kind == "collections":
            self.flush()
            e = record["embedder"]
            self.store.ensure_collection(record["name"], EmbedderInfo(e["provider"], e["model"], int(e["dimension"])),
                                         record.get("description", ""), record.get("config") or {},
                                         analyzer=record["analyzer"])
            self.dimensions[record["name"]] = int(e["dimension"])
            self.written.setdefault(record["name"], {"documents": set(), "chunks": set()})
        elif kind == "documents":
            collection = self._collection_of(record)
            if self.batch_collection not in (None, collection) or len(self.batch) >= PAGE:
                self.flush()
            self.batch_collection = collection
            self.batch.append(self._document(record, self.dimensions[collection]))
            self.written[collection]["documents"].add(record["id"])
            self.summary.chunks_in_documents += len(record["chunks"])
        elif kind == "chunks":
            self.flush()
            collection = self._collection_of(record)
            where = f"chunk {record['id']!r}"
            self.store.upsert(collection, [VectorRecord(record["content"], record.get("metadata") or {}, record["id"],
                                                        _vector_from(record["vector"], self.dimensions[collection],
                                                                     where).tolist())])
            self.written[collection]["chunks"].add(record["id"])
        elif kind == "conversations":
            self.flush()
            self.end_load()
            if self.check_conversation(record):
                turns = [ConversationTurn(t["role"], t["content"], t.get("metadata") or {}) for t in record["turns"]]
                self.store.conversations.append(record["id"], turns)
            else:
                self.summary.skipped_conversations += 1
            self.conversations.append(record["id"])
        elif kind == "memory_stores":
            self.flush()
            self.end_load()
            e = record["embedder"]
            self._memory_store().ensure_store(record["name"], EmbedderInfo(e["provider"], e["model"],
                                                                           int(e["dimension"])), record["analyzer"])
            self.memory_dimensions[record["name"]] = int(e["dimension"])
            self.written_memories.setdefault(record["name"], set())
        elif kind == "memories":
            self.flush()
            name = record["store"]
            if name not in self.memory_dimensions:
                raise ArchiveError(f"memory {record.get('id')!r} belongs to memory store {name!r}, which the export "
                                   "does not describe before it")
            from ..stores.sql.memory import MemoryWrite

            vector = _vector_from(record["vector"], self.memory_dimensions[name], f"memory {record['id']!r}")
            self._memory_store().add(name, [MemoryWrite(
                record["id"], record["user_id"], record.get("session_id"), record["memory_type"], record.get("subject"),
                record["timestamp"], record["content"], record.get("metadata") or {})], vector[None, :])
            self.written_memories[name].add(record["id"])
        elif kind == "ingest_failures":
            self.flush()
            from ..types import IngestFailure

            failure = IngestFailure(str(record["collection"]), str(record["source"]), str(record["error_type"]),
                                    str(record["error_code"]), str(record["message"]))
            self.store.failures.record(failure.collection, [failure])
            self.written_failures.add((failure.collection, failure.source))
        else:
            raise ArchiveError(f"unknown record kind {kind!r}")
        self.summary.counts[kind] += 1
        if self.progress is not None:
            self.progress(kind, self.summary.counts[kind])

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
            vectors.append(_vector_from(c["vector"], dimension, f"chunk {c['id']!r} of document {record['id']!r}"))
        block = np.vstack(vectors) if vectors else np.zeros((0, dimension), dtype=np.float32)
        return DocumentWrite(record["id"], record["source"], record.get("content_hash", ""),
                             record.get("metadata") or {}, chunks, block, version=int(record.get("version", 1)))

    def flush(self) -> None:
        if not self.batch:
            return
        assert self.batch_collection is not None
        if self.loading_collection != self.batch_collection:
            self.end_load()
            self.loading.enter_context(self.store.bulk_load(self.batch_collection))
            self.loading_collection = self.batch_collection
        self.store.write_documents(self.batch_collection, self.batch)
        self.batch = []

    def end_load(self) -> None:
        """Close the open bulk load: a backend with a vector index builds or extends it now."""
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
                    f"{digest.hexdigest()[:16]}… against {expected_digest[:16]}…): the target held other versions of "
                    "some documents. Import into an empty tenant to get an exact copy")
            self.summary.verified = True
        return self.summary

    def read_back(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The written records as the target store now holds them."""
        for kind, record in read_tenant(self.store, collections=list(self.written), conversations=False):
            if kind == "collections":
                yield kind, record
        for collection, ids in self.written.items():
            yield from _read_documents(self.store, collection, ids["documents"])
            if ids["chunks"]:
                yield from _read_loose(self.store, collection, ids["chunks"])
        for conversation_id in self.conversations:
            turns = self.store.conversations.turns(conversation_id)
            yield "conversations", {"id": conversation_id, "turns": [
                {"role": t.role, "content": t.content, "metadata": t.metadata} for t in turns]}
        if self.written_memories:
            yield from _read_memories(self.store, self.written_memories)
        if self.written_failures:
            yield from _read_failures(self.store, None, self.written_failures)


def write_tenant(store: VectorStore, records: Iterable[tuple[str, dict[str, Any]]], *,
                 expected_digest: str | None = None, progress: Progress | None = None) -> Summary:
    """Write (kind, record) pairs into a tenant-bound store and verify them against ``expected_digest``."""
    writer = _Writer(store, progress)
    for kind, record in records:
        writer.add(kind, record)
    return writer.finish(expected_digest)


# -- files --------------------------------------------------------------------------------------
def export_tenant(store: VectorStore, path: str | os.PathLike[str], *, collections: Sequence[str] | None = None,
                  progress: Progress | None = None) -> Summary:
    """Write the tenant's data to the folder ``path`` (new, or empty) and return what was written."""
    folder = Path(path)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ArchiveError(f"{folder} exists and is not an empty folder; choose a new path for the export")
    folder.mkdir(parents=True, exist_ok=True)
    summary = Summary(store.tenant, path=str(folder))
    digest = Digest()
    hashes = {kind: hashlib.sha256() for kind in KINDS}
    sizes = dict.fromkeys(KINDS, 0)
    handles = {kind: (folder / f"{FILES[kind]}.partial").open("wb") for kind in KINDS}
    try:
        for kind, record in read_tenant(store, collections=collections):
            line = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
            handles[kind].write(line)
            hashes[kind].update(line)
            sizes[kind] += len(line)
            digest.add(kind, record)
            summary.counts[kind] += 1
            if kind == "documents":
                summary.chunks_in_documents += len(record["chunks"])
            if progress is not None:
                progress(kind, summary.counts[kind])
    finally:
        for handle in handles.values():
            handle.close()
    for kind in KINDS:
        (folder / f"{FILES[kind]}.partial").replace(folder / FILES[kind])
    summary.digest = digest.hexdigest()
    manifest = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "bunko_version": __version__, "tenant": store.tenant,
        "store": store.kind, "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "counts": {**summary.counts, "chunks_in_documents": summary.chunks_in_documents},
        "digest": summary.digest,
        "files": {FILES[k]: {"sha256": hashes[k].hexdigest(), "records": summary.counts[k], "bytes": sizes[k]}
                  for k in KINDS},
    }
    # The manifest is written last: a folder without one is an export that did not finish.
    (folder / MANIFEST).write_text(json.dumps(manifest, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    summary.verified = True
    return summary


def read_manifest(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The export's manifest, after checking its format and every file's size and SHA-256."""
    folder = Path(path)
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ArchiveError(f"{folder} has no {MANIFEST}: not a bunko export, or one that did not finish") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ArchiveError(f"{folder / MANIFEST} cannot be read: {exc}") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise ArchiveError(f"{folder / MANIFEST} is not a bunko export manifest")
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ArchiveError(f"{folder} has export format version {manifest.get('format_version')!r}; this bunko "
                           f"reads version {FORMAT_VERSION}")
    for kind in KINDS:
        expected = (manifest.get("files") or {}).get(FILES[kind])
        if expected is None and kind in OPTIONAL_KINDS and not (folder / FILES[kind]).exists():
            continue
        if not isinstance(expected, dict):
            raise ArchiveError(f"{folder / MANIFEST} does not list {FILES[kind]}")
        file = folder / FILES[kind]
        sha, size = hashlib.sha256(), 0
        try:
            with file.open("rb") as handle:
                while block := handle.read(1 << 20):
                    sha.update(block)
                    size += len(block)
        except OSError as exc:
            raise ArchiveError(f"{file} cannot be read: {exc}") from exc
        if size != expected.get("bytes") or sha.hexdigest() != expected.get("sha256"):
            raise ArchiveError(f"{file} does not match its checksum in the manifest: the export is damaged or was "
                               "changed; nothing was imported")
    return manifest


def _file_records(folder: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """Records in import order: the collections, their documents and loose chunks, then conversations."""
    yield from (("collections", r) for r in _lines(folder, "collections"))
    yield from (("documents", r) for r in _lines(folder, "documents"))
    yield from (("chunks", r) for r in _lines(folder, "chunks"))
    yield from (("conversations", r) for r in _lines(folder, "conversations"))
    yield from (("memory_stores", r) for r in _lines(folder, "memory_stores"))
    yield from (("memories", r) for r in _lines(folder, "memories"))
    yield from (("ingest_failures", r) for r in _lines(folder, "ingest_failures"))


def _lines(folder: Path, kind: str) -> Iterator[dict[str, Any]]:
    file = folder / FILES[kind]
    if kind in OPTIONAL_KINDS and not file.exists():  # an export made before this kind existed
        return
    with file.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ArchiveError(f"{file}, line {number}: not JSON ({exc.msg})") from exc
            if not isinstance(record, dict):
                raise ArchiveError(f"{file}, line {number}: not a JSON object")
            yield record


def import_tenant(store: VectorStore, path: str | os.PathLike[str], *, progress: Progress | None = None) -> Summary:
    """Import the export at ``path`` into the tenant-bound ``store``; checked before and verified after."""
    folder = Path(path)
    manifest = read_manifest(folder)
    writer = _Writer(store, progress)
    # Conflicts are found before anything is written.
    for record in _lines(folder, "collections"):
        writer.check_collection(record)
    for record in _lines(folder, "conversations"):
        writer.check_conversation(record)
    for record in _lines(folder, "memory_stores"):
        writer.check_memory_store(record)
    try:
        for kind, record in _file_records(folder):
            writer.add(kind, record)
    except (KeyError, TypeError, ValueError) as exc:
        raise ArchiveError(f"{folder}: a record lacks a field or has a wrong value ({type(exc).__name__}: {exc})") \
            from exc
    summary = writer.finish(manifest.get("digest"))
    summary.path = str(folder)
    return summary


def copy_tenant(source: VectorStore, target: VectorStore, *, collections: Sequence[str] | None = None,
                progress: Progress | None = None) -> Summary:
    """Copy a tenant's data from one store to another (or to another tenant), vectors as they are."""
    writer = _Writer(target, progress)
    known = {c.name: c for c in source.list_collections()}
    for name in known if collections is None else collections:
        if name in known:
            writer.check_collection(_collection_record(known[name]))
    for conversation_id in source.conversations.ids():
        writer.check_conversation(_conversation_record(source, conversation_id))
    digest = Digest()
    for kind, record in read_tenant(source, collections=collections):
        digest.add(kind, record)
        writer.add(kind, record)
    return writer.finish(digest.hexdigest())
