"""The store contract: a backend hands out stores that are bound to one tenant.

A :class:`StoreBackend` owns the database (a SQLite file, later a PostgreSQL pool)
and exposes exactly one way in: :meth:`StoreBackend.for_tenant`. The
:class:`VectorStore` it returns carries its tenant internally; none of its methods
accept a tenant, so no caller can widen the scope (R15). Every SQL statement a
backend runs on behalf of a scoped store filters by that tenant.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import numpy as np

from ..analysis import get_analyzer
from ..errors import AnalyzerMismatchError, VectorStoreError
from ..filters import Filter, FilterLike, as_filter
from ..types import (
    Collection,
    ConversationTurn,
    DocumentInfo,
    EmbedderInfo,
    IngestFailure,
    IngestResult,
    RecordOwner,
    SearchHit,
    UsageEvent,
    UsageTotal,
    VectorRecord,
)

if TYPE_CHECKING:
    from .service import ServiceRecords


# The upload job whose processing runs in this context, and its worker (see writing_for_job).
_JOB_WRITES: ContextVar[tuple[str, str] | None] = ContextVar("bunko_job_writes", default=None)


@contextmanager
def writing_for_job(job_id: str, worker: str) -> Iterator[None]:
    """Inside the block (and the threads and tasks it starts), the writes are an upload job's: a store creates a
    missing collection only while ``worker`` still holds job ``job_id``, checked in the creating transaction.
    A job deleted with its collection then fails with ``CollectionNotFoundError`` instead of creating the
    collection again, empty (docs/ARCHITECTURE.md, "Deleting a collection while its uploads run")."""
    token = _JOB_WRITES.set((job_id, worker))
    try:
        yield
    finally:
        _JOB_WRITES.reset(token)


def job_writing() -> tuple[str, str] | None:
    """(job id, worker) when the writes of this context are an upload job's (:func:`writing_for_job`)."""
    return _JOB_WRITES.get()


@dataclass(slots=True)
class ChunkWrite:
    """One chunk of a document to store, with its vector."""

    id: str
    content: str
    index: int
    start: int
    end: int
    token_count: int
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class DocumentWrite:
    """A whole document to store atomically: identity, metadata, chunks and vectors.

    ``version`` is the version a new document starts at (1 unless an import carries another);
    a document that replaces a stored one always gets the stored version plus one.
    ``reused`` counts the chunks whose vector was taken from a stored chunk instead of being
    embedded again.
    """

    id: str
    source: str
    content_hash: str
    metadata: dict[str, Any]
    chunks: list[ChunkWrite]
    vectors: Any  # 2-D array-like, one row per chunk
    version: int = 1
    reused: int = 0


@dataclass(slots=True)
class StoredChunk:
    """A chunk as the store holds it, with its vector: what an export reads back."""

    chunk: ChunkWrite
    vector: np.ndarray
    document_id: str | None = None  # None for a record upserted without a document


def check_analyzer(collection: Collection, analyzer: str | None) -> None:
    """Refuse a named analyzer that is not the one ``collection`` was created with."""
    if analyzer is not None and get_analyzer(analyzer).name != collection.analyzer:
        raise AnalyzerMismatchError(
            f"collection {collection.name!r} was created with the {collection.analyzer!r} analyzer; it cannot "
            f"be searched or extended with {analyzer!r}. Use the same analyzer, or another collection"
        )


def check_query_vector(vector: Sequence[float] | np.ndarray) -> np.ndarray:
    """A query vector as a flat float32 array; NaN or infinite values are refused."""
    q = np.asarray(vector, dtype=np.float32).ravel()
    if not np.all(np.isfinite(q)):
        raise VectorStoreError("the query vector contains NaN or infinite values")
    return q


def make_hit(row: Sequence[Any], score: float, document_metadata: dict[str, Any], chunk_metadata: dict[str, Any],
             include_content: bool) -> SearchHit:
    """A ``SearchHit`` from a fetched row, in the column order both backends select.

    Row: chunk rowid, chunk id, document id, source, content, chunk_index, -, -, start, end,
    token_count, chunk_total. Document metadata comes first; the chunk's own metadata
    (page, section) wins; position fields fill in what neither has.
    """
    metadata = dict(document_metadata)
    metadata.update(chunk_metadata)
    metadata.setdefault("chunk_index", row[5])
    metadata.setdefault("start", row[8])
    metadata.setdefault("end", row[9])
    if row[11] is not None:
        metadata.setdefault("chunk_total", row[11])
    if row[10]:
        metadata.setdefault("token_count", row[10])
    return SearchHit(chunk_id=row[1], document_id=row[2], source=row[3] or str(metadata.get("source", "")),
                     content=row[4] if include_content else "", score=float(score), chunk_index=row[5],
                     metadata=metadata)


@dataclass(slots=True)
class CollectionRow(Collection):
    """A collection as one read of its store's row found it: the collection, and the store's own handles
    that its search port works from (so one search reads the row once).

    ``key`` is the row's id in its store; ``mutation_seq`` changes with every removal of chunks and
    ``high_water`` is the highest chunk key when the row was read (the in-memory caches of vectors and
    metadata check themselves against both); ``keyword_tokens`` is the number of analyzed tokens of
    all the collection's chunks (BM25's average length), None where the store counts them elsewhere.
    """

    key: int = 0
    mutation_seq: int = 0
    high_water: int = 0
    keyword_tokens: int | None = None

    @property
    def collection(self) -> Collection:
        """The collection as callers see it, without the store's handles."""
        return Collection(**{f.name: getattr(self, f.name) for f in fields(Collection)})


@dataclass(frozen=True, slots=True)
class Restriction:
    """Which chunks a search may return: those of ``document_ids`` (if given) that pass ``filter``."""

    document_ids: tuple[str, ...] | None = None
    filter: Filter | None = None

    @classmethod
    def of(cls, document_ids: Sequence[str] | None = None, filter: FilterLike = None) -> Restriction | None:
        """The restriction of a search's options, None when they restrict nothing; a malformed filter
        raises ``FilterError``."""
        flt = as_filter(filter)
        if document_ids is None and flt is None:
            return None
        return cls(None if document_ids is None else tuple(str(d) for d in document_ids), flt)


@dataclass(frozen=True, slots=True)
class Ranked:
    """Chunks ranked by a search leg: their keys in the store and their scores, best first."""

    keys: np.ndarray  # int64
    scores: np.ndarray  # float64
    plan: str = ""  # how the leg searched (``exact``, ``hnsw``, ``postings``, ...): for ``explain``

    @classmethod
    def empty(cls, plan: str = "") -> Ranked:
        """No chunk."""
        return cls(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64), plan)

    def __len__(self) -> int:
        return len(self.keys)

    def pairs(self) -> list[tuple[int, float]]:
        """(key, score) pairs, best first."""
        return list(zip(self.keys.tolist(), self.scores.tolist(), strict=True))


# A term's postings: (chunk keys ascending int64, the term's counts, the chunks' token counts).
Postings = tuple[np.ndarray, np.ndarray, np.ndarray]


@dataclass(frozen=True, slots=True)
class KeywordTotals:
    """A collection's keyword statistics, as BM25 needs them: chunks, their mean token count, and the
    number of chunks that hold each asked-for term."""

    rows: int
    average_length: float
    document_frequency: dict[str, int]


@runtime_checkable
class CollectionReader(Protocol):
    """The search port: one read transaction over one collection of one tenant.

    A search opens one with ``store.reader(row)`` for the row it read before, runs its legs, and
    reads only the hits it returns. Legs rank chunk keys and read no text but the keyword leg's few
    candidates (``texts``, for phrase and proximity); ``hits`` reads the
    final ones whole, in one query. Keys of other tenants or collections are never returned.
    """

    @property
    def row(self) -> CollectionRow:
        """The collection row this reader works on (read before it opened)."""
        ...

    def nearest(self, vector: np.ndarray, top_k: int, restriction: Restriction | None = None, *,
                threshold: float | None = None) -> Ranked:
        """The ``top_k`` chunks most similar (cosine) to ``vector`` inside ``restriction``, exactly or
        by the collection's index; when k chunks pass the restriction, k come back (R21)."""
        ...

    def allowed(self, restriction: Restriction) -> np.ndarray:
        """The keys (ascending) of the collection's chunks that pass ``restriction``."""
        ...

    def keyword_totals(self, terms: Sequence[str]) -> KeywordTotals:
        """The collection's keyword statistics, with the document frequencies of ``terms``."""
        ...

    def postings(self, terms: Sequence[str]) -> dict[str, Postings]:
        """The postings of ``terms`` in the collection (terms no chunk holds are left out)."""
        ...

    def texts(self, keys: np.ndarray) -> dict[int, tuple[str, int, str]]:
        """The text of these chunks of the collection, by key, with their document's key and title (""
        without one); keys of chunks gone are left out. The reader keeps the chunks it read for
        :meth:`hits` (``rows_read``)."""
        ...

    def rows_read(self) -> Mapping[int, Any]:
        """The chunks :meth:`texts` read, by key, as :meth:`hits` takes them (``read``)."""
        ...

    def hits(self, ranked: Ranked, *, include_content: bool = True, vectors: dict[str, np.ndarray] | None = None,
             extra: Mapping[int, Mapping[str, Any]] | None = None,
             read: Mapping[int, Any] | None = None) -> list[SearchHit]:
        """Hits with content and metadata for ranked chunks, in order, in one query; chunks deleted
        meanwhile are left out. ``vectors``, if a dict, receives their stored vectors by chunk id;
        ``extra`` adds metadata to the hits of some keys (a search's per-leg ranks); chunks already read
        by this reader's or another reader's (``read``) :meth:`texts` are not read again."""
        ...


class UsageRecords(Protocol):
    """A tenant's usage records and search logs (R13, R33): ``store.usage``."""

    def record(self, events: Sequence[UsageEvent], searches: Sequence[tuple[str | None, int, float, str]] = (), *,
               user_id: str | None = None) -> None:
        """Store metered operations and search-log rows ``(query or None, result count, ms, search type)``
        together, in one transaction (for ``user_id``, if given)."""
        ...

    def summary(self, since: datetime | None = None) -> list[UsageTotal]:
        """The tenant's usage grouped by operation, provider and model (since ``since`` if given)."""
        ...

    def searches(self, limit: int = 100, *, user_id: str | None = None) -> list[dict[str, Any]]:
        """The tenant's latest searches (only ``user_id``'s when given), newest first."""
        ...


class ConversationRecords(Protocol):
    """A tenant's conversations: ``store.conversations``."""

    def append(self, conversation_id: str, turns: Sequence[ConversationTurn]) -> None:
        """Append turns to a conversation (created on first use)."""
        ...

    def turns(self, conversation_id: str, limit: int | None = None) -> list[ConversationTurn]:
        """The last ``limit`` turns (all if None) of a conversation, oldest first; [] if it does not exist."""
        ...

    def ids(self) -> list[str]:
        """The ids of the tenant's conversations, oldest first."""
        ...

    def delete(self, conversation_id: str) -> int:
        """Delete a conversation; returns how many turns it had."""
        ...


class FailureRecords(Protocol):
    """The sources of a tenant's collections whose last ingest failed: ``store.failures``."""

    def record(self, collection: str, failed: Sequence[IngestFailure], succeeded: Sequence[str] = ()) -> None:
        """Remember the sources of ``collection`` whose ingest failed; forget those in ``succeeded``."""
        ...

    def list(self, collection: str | None = None) -> list[IngestFailure]:
        """The sources whose last ingest failed (in ``collection``, or in any), latest first."""
        ...


@runtime_checkable
class RecordStore(Protocol):
    """The records a tenant keeps beside its documents, as repositories bound to its tenant: ``usage`` (usage
    records and search logs), ``conversations``, ``failures`` (failed ingests) and ``memories()`` (agent
    memories; a SQL store's are :class:`~bunko.stores.sql.memory.SQLMemories`)."""

    @property
    def usage(self) -> UsageRecords: ...  # noqa: D102 - named in the class docstring

    @property
    def conversations(self) -> ConversationRecords: ...  # noqa: D102

    @property
    def failures(self) -> FailureRecords: ...  # noqa: D102

    def memories(self) -> Any: ...  # noqa: D102


@runtime_checkable
class VectorStore(RecordStore, Protocol):
    """Storage and search inside one tenant (R14, R15), with its records. Every method is tenant-bound."""

    @property
    def tenant(self) -> str:
        """The tenant this store is bound to (read-only)."""
        ...

    @property
    def user(self) -> str | None:
        """The user this store acts for (None: the whole tenant); see :meth:`for_user`."""
        ...

    def for_user(self, user_id: str | None) -> VectorStore:
        """The same tenant's store acting for ``user_id`` (None: for the whole tenant). Its transactions carry
        the user, which a database with row security checks on the per-user tables (memories, conversations,
        search logs; writes of jobs and usage records)."""
        ...

    @property
    def kind(self) -> str:
        """The kind of database behind this store (its backend's URL scheme: ``sqlite``, ``postgresql``)."""
        ...

    @property
    def database(self) -> int:
        """Which database this store works in: equal for the stores of one backend (a grouping key)."""
        ...

    # Collections (R3)
    def ensure_collection(self, name: str, embedder: EmbedderInfo, description: str = "",
                          config: dict[str, Any] | None = None, *, analyzer: str | None = None) -> Collection:
        """Return the collection, creating it (with ``config`` and ``analyzer``) for this embedder if missing.

        Refuses another embedder, or a named analyzer other than the collection's. ``config`` is
        only stored on creation (the splitter, ...).
        """
        ...

    def get_collection(self, name: str) -> Collection:
        """The collection, or ``CollectionNotFoundError``."""
        ...

    def list_collections(self) -> list[Collection]:
        """This tenant's collections, by name."""
        ...

    def delete_collection(self, name: str) -> None:
        """Delete a collection with all its documents, chunks and vectors."""
        ...

    # Documents
    def write_document(self, collection: str, document: DocumentWrite) -> IngestResult:
        """Store a document and its chunks atomically; replace an older one with the same source."""
        ...

    def write_documents(self, collection: str, documents: Sequence[DocumentWrite]) -> list[IngestResult]:
        """Store several documents in one transaction (the bulk-ingest path)."""
        ...

    def begin_write(self, collection: str, documents: Sequence[DocumentWrite]) -> Any:
        """Start writing documents as ``write_documents`` does: their analysis begins, nothing is written
        until ``finish_write``; a writer starts its next batch before it finishes this one."""
        ...

    def finish_write(self, pending: Any) -> list[IngestResult]:
        """Write what ``begin_write`` started, in one transaction (each document whole or not at all)."""
        ...

    def write_batches(self, collection: str,
                      batches: Iterable[Sequence[DocumentWrite]]) -> Iterator[list[IngestResult]]:
        """Write batches in turn, each as ``write_documents`` does, analyzing the next ones meanwhile;
        yields each batch's results once committed."""
        ...

    def find_by_source(self, collection: str, source: str) -> DocumentInfo | None:
        """The document stored under ``source``, or None (also when the collection is missing)."""
        ...

    def list_documents(self, collection: str, limit: int | None = None, offset: int = 0) -> list[DocumentInfo]:
        """Documents of a collection, oldest first."""
        ...

    def get_document(self, document_id: str, collection: str | None = None) -> DocumentInfo:
        """One document, or ``DocumentNotFoundError``."""
        ...

    def delete_documents(self, document_ids: Sequence[str], collection: str | None = None) -> int:
        """Delete documents (and their chunks); returns how many existed in this tenant."""
        ...

    def bulk_load(self, collection: str) -> AbstractContextManager[None]:
        """A context for many writes to ``collection``; a backend may defer index upkeep to its end."""
        ...

    def build_index(self, collection: str) -> str | None:
        """Build the collection's vector index if the backend keeps one (name returned), else None."""
        ...

    # Chunks and vectors (R14)
    def upsert(self, collection: str, records: Sequence[VectorRecord], *,
               owner: RecordOwner | None = None) -> list[str]:
        """Insert or update records that carry vectors; ids are generated when missing. ``owner`` is who writes:
        a restricted one may replace only its user's records (``ForbiddenError``), and new records are its user's."""
        ...

    def delete(self, collection: str, ids: Sequence[str], *, owner: RecordOwner | None = None) -> int:
        """Delete chunks by id; returns how many existed in this tenant's collection (a restricted ``owner``:
        only its user's records, else ``ForbiddenError`` and nothing deleted)."""
        ...

    def chunk_vectors(self, collection: str, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored vectors of these chunks (for MMR); ids of other tenants or collections are left out."""
        ...

    def count(self, collection: str, *, filter: FilterLike = None) -> int:
        """Number of chunks in a collection (that pass ``filter``, if given)."""
        ...

    def document_chunks(self, collection: str, document_ids: Sequence[str]) -> dict[str, list[StoredChunk]]:
        """The chunks (with vectors, in order) of these documents of this tenant's collection, by document id."""
        ...

    def stored_vectors(self, collection: str, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The vector of a stored document chunk of this tenant's collection for each of ``texts`` that one
        holds, by text (chunk reuse: ingest embeds only the texts the collection does not hold yet)."""
        ...

    def loose_chunks(self, collection: str, limit: int, offset: int = 0) -> list[StoredChunk]:
        """Chunks upserted without a document, oldest first, a page at a time."""
        ...

    def get_chunks(self, collection: str, chunk_ids: Sequence[str]) -> list[SearchHit]:
        """These chunks of the collection as hits (score 0), in the order asked; unknown ids are left out."""
        ...

    # The search port (see CollectionReader; search itself is bunko.search's)
    def read_collection(self, name: str) -> CollectionRow:
        """The collection's row, read once for a search to work from, or ``CollectionNotFoundError``."""
        ...

    def reader(self, row: CollectionRow) -> AbstractContextManager[CollectionReader]:
        """The search port over a collection read before: one read transaction, for one search."""
        ...


@runtime_checkable
class StoreBackend(Protocol):
    """A database that hands out tenant-bound stores, and keeps the HTTP server's records."""

    url: str
    scheme: str

    def for_tenant(self, tenant: str) -> VectorStore:
        """A store bound to ``tenant``; the only way to reach data."""
        ...

    def close(self) -> None:
        """Release connections and caches."""
        ...

    def service_records(self) -> ServiceRecords:
        """The HTTP server's records (API keys, rate windows, jobs, erasure) in this database."""
        ...


# -- usage records, search logs and conversations -----------------------------------------------
_CONVERSATION_ID_RE = re.compile(r"^[\w][\w.:\-]{0,199}$")
TURN_ROLES = ("user", "assistant")


def check_conversation_id(conversation_id: str) -> str:
    """A conversation id as given, or ``VectorStoreError`` (1-200 letters, digits, ``_ - . :``)."""
    if not isinstance(conversation_id, str) or not _CONVERSATION_ID_RE.fullmatch(conversation_id):
        raise VectorStoreError(
            f"invalid conversation id {conversation_id!r}: use 1-200 letters, digits, '_', '-', '.' or ':', "
            "starting with a letter or digit"
        )
    return conversation_id


def check_turns(turns: Sequence[ConversationTurn]) -> list[ConversationTurn]:
    """Turns to store, each with a known role and text."""
    items = list(turns)
    for turn in items:
        if turn.role not in TURN_ROLES:
            raise VectorStoreError(f"a conversation turn has role {turn.role!r}; use one of {', '.join(TURN_ROLES)}")
        if not isinstance(turn.content, str):
            raise VectorStoreError("a conversation turn's content must be text")
    return items


def utc(moment: datetime) -> datetime:
    """``moment`` as an aware UTC datetime (naive values are taken as UTC)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def add_usage(totals: dict[tuple[str, str, str], UsageTotal], row: Sequence[Any]) -> None:
    """Fold one grouped row (operation, provider, model, calls, in, out, items, latency) into ``totals``."""
    key = (row[0], row[1] or "", row[2] or "")
    total = totals.setdefault(key, UsageTotal(*key))
    total.calls += int(row[3])
    total.input_tokens += int(row[4] or 0)
    total.output_tokens += int(row[5] or 0)
    total.items += int(row[6] or 0)
    total.latency_ms += float(row[7] or 0.0)
