"""Core value types: documents, chunks, collections, search hits and answers.

These are plain dataclasses with no behaviour beyond conversion to JSON-ready
dicts, so every seam (loaders, splitters, stores, retrieval, generation) can
share them without importing each other.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import asdict, dataclass, field
from typing import Any


def new_id() -> str:
    """A new identifier: a UUIDv7 (RFC 9562) in canonical text form.

    The first 48 bits are the Unix time in milliseconds, so ids made one after the
    other sort together; index inserts then land on the same few B-tree pages
    instead of random ones, which keeps bulk ingest fast. The other 74 bits are random.
    """
    value = (time.time_ns() // 1_000_000) << 80 | int.from_bytes(os.urandom(10), "big")
    value = (value & ~(0xF << 76)) | (0x7 << 76)  # version 7
    value = (value & ~(0x3 << 62)) | (0x2 << 62)  # RFC 4122 variant
    return str(uuid.UUID(int=value))


# What a refusal of such a string says (after the field's path).
UNSTORABLE = "NUL characters and unpaired surrogates are not allowed"


def unstorable(text: str) -> bool:
    """Whether ``text`` holds a character no store can keep: a NUL (PostgreSQL refuses it in text and
    jsonb), or an unpaired surrogate (not Unicode text: it has no UTF-8 form; ``json.loads`` makes one of an
    escape like ``"\\ud800"``)."""
    if "\x00" in text:
        return True
    if text.isascii():
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def unstorable_path(value: Any, path: str = "") -> str | None:
    """The path (``tags[1]``, ``author.name``) of the first string in a JSON-like value that no store can
    keep (:func:`unstorable`: a NUL or an unpaired surrogate), or None.

    Every field that reaches a store is checked with this before it is written or compared.
    """
    if isinstance(value, str):
        return (path or "(value)") if unstorable(value) else None
    if isinstance(value, dict):
        for key, item in value.items():
            here = f"{path}.{key}" if path else str(key)
            if isinstance(key, str) and unstorable(key):
                return here
            found = unstorable_path(item, here)
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = unstorable_path(item, f"{path}[{index}]")
            if found is not None:
                return found
    return None


@dataclass(slots=True)
class DocumentPart:
    """A piece of a document with its own location metadata (a PDF page, a Markdown section).

    Loaders that know structure return parts; indexing then gives every chunk the
    metadata of the part it starts in (``page_number``, ``section``, ``hierarchy``, ...).

    A ``whole`` part is a unit the splitter must not cut or join to its neighbours: a group of
    table rows under their header row. It becomes a chunk of its own when it fits the
    collection's chunk size (loaders keep such parts small: ``loaders.tables.TABLE_CHARS``).
    """

    text: str
    metadata: dict[str, Any] = field(default_factory=dict)
    whole: bool = False


@dataclass(slots=True)
class Document:
    """A document: text ``content`` plus ``metadata`` (LangChain-compatible shape, R1).

    Well-known metadata keys: ``source`` (path, URL or label), ``source_type``
    (``file`` / ``url`` / ``text`` / ``api``), ``filename``, ``filesize``,
    ``mime_type``, ``page_count``, ``author``, ``created_at``, ``language``,
    ``tags``, ``category``, ``description``. Other keys are kept as given.
    """

    content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    parts: list[DocumentPart] | None = None

    @classmethod
    def from_parts(cls, parts: list[DocumentPart], metadata: dict[str, Any] | None = None) -> Document:
        """A document whose content is its parts joined by blank lines."""
        return cls("\n\n".join(p.text for p in parts), metadata or {}, parts=parts)

    @property
    def source(self) -> str:
        """Where the document came from; falls back to its id or ``text``."""
        return str(self.metadata.get("source") or self.id or "text")


@dataclass(slots=True, frozen=True)
class TextChunk:
    """One piece of a text as a splitter returns it (R7).

    ``start`` and ``end`` are character offsets into the text that was split:
    ``text[start:end] == content``.
    """

    content: str
    index: int
    start: int
    end: int


@dataclass(slots=True)
class Chunk:
    """A stored chunk of a document (R2)."""

    content: str
    document_id: str
    index: int
    start: int
    end: int
    id: str = field(default_factory=new_id)
    token_count: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class VectorRecord:
    """A unit of the store's low-level upsert (R14): content, metadata, optional vector."""

    content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    vector: list[float] | None = None
    document_id: str | None = None


@dataclass(slots=True, frozen=True)
class RecordOwner:
    """Who writes or deletes records (R14) and what it may touch.

    ``user_id`` is stamped on the records it creates (None: a tenant key's). ``restricted`` (a user's key
    that is not the tenant's admin key) may touch only records of documents its user uploaded and records
    its user created; the store checks it in the writing transaction and raises ``ForbiddenError``.
    """

    user_id: str | None = None
    restricted: bool = False


@dataclass(slots=True, frozen=True)
class EmbedderInfo:
    """Which embedder produced a collection's vectors; fixed per collection (R3)."""

    provider: str
    model: str
    dimension: int


@dataclass(slots=True)
class Collection:
    """A named set of documents inside one tenant (R3)."""

    name: str
    embedding_provider: str
    embedding_model: str
    dimension: int
    description: str = ""
    document_count: int = 0
    chunk_count: int = 0
    created_at: str = ""
    config: dict[str, Any] = field(default_factory=dict)  # e.g. {"splitter": {"name": "token", ...}}
    analyzer: str = "bigram"  # the keyword analyzer, fixed at creation (bunko.analysis)
    # The write counter: it changes with every ingest, delete or version change of the collection
    # (the search cache keys on it). Read by ``get_collection``; 0 where a listing leaves it out.
    write_seq: int = field(default=0, compare=False)

    @property
    def embedder(self) -> EmbedderInfo:
        """The embedder identity this collection was created with."""
        return EmbedderInfo(self.embedding_provider, self.embedding_model, self.dimension)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        data = asdict(self)
        del data["write_seq"]
        return data


@dataclass(slots=True)
class DocumentInfo:
    """A stored document as listings show it (without its full text)."""

    id: str
    source: str
    chunks: int
    metadata: dict[str, Any]
    content_hash: str = ""
    created_at: str = ""
    version: int = 1
    updated_at: str = ""
    collection: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the listing's shape; :meth:`details` has every field)."""
        return {"id": self.id, "source": self.source, "chunks": self.chunks, "metadata": self.metadata}

    def details(self) -> dict[str, Any]:
        """Every field, as ``bunko documents show --json`` prints them."""
        return {"id": self.id, "collection": self.collection, "source": self.source, "name": self.name,
                "version": self.version, "chunks": self.chunks, "content_hash": self.content_hash,
                "created_at": self.created_at, "updated_at": self.updated_at, "metadata": self.metadata}

    @property
    def name(self) -> str:
        """A short name that tells documents apart: the file name (or URL), and for one record of a
        JSON Lines or JSON array file its index and its title, name or id field when it has one."""
        meta = self.metadata
        base = str(meta.get("filename") or "") or self.source.split("#", 1)[0]
        if "://" in self.source and not meta.get("filename"):
            base = self.source.split("#", 1)[0]
        index = meta.get("json_index")
        if index is None:
            return base
        name = f"{base}#{index}"
        for key in ("title", "name", "id", "_id", "doc_id", "key"):
            value = meta.get(key)
            if isinstance(value, str | int) and str(value).strip():
                return f"{name} ({key} {str(value).strip()[:60]})"
        return name


@dataclass(slots=True)
class IngestFailure:
    """A file or URL whose last ingest into a collection failed, and why; kept until one succeeds."""

    collection: str
    source: str
    error_type: str
    error_code: str
    message: str
    attempts: int = 1
    first_failed_at: str = ""
    failed_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass(slots=True)
class SearchHit:
    """One chunk returned by a search, best first; ``score`` is cosine similarity or BM25."""

    chunk_id: str
    document_id: str
    source: str
    content: str
    score: float
    chunk_index: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict in the CLI's ``search --json`` shape."""
        return {
            "chunk_id": self.chunk_id,
            "document_id": self.document_id,
            "source": self.source,
            "content": self.content,
            "score": round(float(self.score), 6),
            "metadata": self.metadata,
        }


@dataclass(slots=True)
class Source:
    """A cited source of an answer (R25): ``index`` is the ``[N]`` used in the answer."""

    index: int
    document_id: str
    source: str
    chunk_id: str
    score: float
    excerpt: str
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def document_name(self) -> str:
        """A short human name for the document (its file name when it has one)."""
        return str(self.metadata.get("filename") or self.source)

    @property
    def page_number(self) -> int | None:
        """The page the chunk came from, when the loader knew it."""
        value = self.metadata.get("page_number")
        return int(value) if value is not None else None

    @property
    def section(self) -> str | None:
        """The section heading the chunk came from, when the loader knew it."""
        value = self.metadata.get("section")
        return str(value) if value is not None else None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict in the CLI's ``ask --json`` shape."""
        return {
            "index": self.index,
            "document_id": self.document_id,
            "source": self.source,
            "chunk_id": self.chunk_id,
            "score": round(float(self.score), 6),
            "excerpt": self.excerpt,
            "metadata": self.metadata,
        }


@dataclass(slots=True)
class GenerationResult:
    """An answer with the sources it cites (R25)."""

    answer: str
    sources: list[Source]
    model: str
    usage: dict[str, int] = field(default_factory=dict)
    processing_time_ms: float = 0.0
    confidence: float = 0.0
    extractive: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict in the CLI's ``ask --json`` shape."""
        return {
            "answer": self.answer,
            "sources": [s.to_dict() for s in self.sources],
            "model": self.model,
            "usage": dict(self.usage),
            "extractive": self.extractive,
            "confidence": round(self.confidence, 4),
            "processing_time_ms": round(self.processing_time_ms, 2),
        }


@dataclass(slots=True)
class IngestResult:
    """What indexing one document did."""

    document_id: str
    source: str
    chunks: int
    status: str  # "created", "replaced" (a new version) or "unchanged"
    processing_time_ms: float = 0.0
    version: int = 1
    embedded: int = 0  # chunks embedded for this version
    reused: int = 0  # chunks whose vector was taken from the stored version (same text, same embedder)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


@dataclass(slots=True)
class UsageEvent:
    """One metered operation (R13): an embedding call, an LLM call, a rerank, a search or an upsert.

    Providers hand these to their ``usage_sink`` (a callable set by the engine),
    which records them per tenant.
    """

    operation: str  # "embedding", "llm", "rerank", "search", "upsert"
    provider: str = ""
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    latency_ms: float = 0.0
    items: int = 0  # texts embedded, documents reranked, hits returned, chunks written
    metadata: dict[str, Any] = field(default_factory=dict)



@dataclass(slots=True)
class UsageTotal:
    """Usage of one (operation, provider, model) summed over a period (R13)."""

    operation: str
    provider: str
    model: str
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    items: int = 0
    latency_ms: float = 0.0  # summed over the calls

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict in the CLI's ``usage --json`` shape."""
        return {
            "operation": self.operation,
            "provider": self.provider,
            "model": self.model,
            "calls": self.calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "items": self.items,
            "latency_ms_total": round(self.latency_ms, 2),
            "latency_ms_avg": round(self.latency_ms / self.calls, 2) if self.calls else 0.0,
        }


@dataclass(slots=True)
class ConversationTurn:
    """One message of a stored conversation: the user's question or the assistant's answer."""

    role: str  # "user" or "assistant"
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: str = ""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)
