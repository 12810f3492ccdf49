"""The SQL core: one tenant-bound store class, written once, above the backend seam.

:class:`SQLStore` implements every part of the store contract that is the same SQL on
every database -- collections, documents and their versions, write planning, upsert
validation, hit hydration, usage records, search logs and conversations -- through a
:class:`~bunko.stores.sql.dialect.Dialect`. A backend subclasses it and supplies only what
really differs (see the ``_`` hooks below): how chunks are inserted and deleted with their
keyword index, vector and keyword ranking, and index upkeep. :class:`SQLBackend` is the
matching base of a database: transactions that bind a tenant, and the server's records.

Isolation (R15): a store is bound to one tenant; every statement here filters by the
tenant's row id, which :meth:`SQLStore.session` resolves inside the transaction.
"""

from __future__ import annotations

import copy
import re
import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from ... import crashpoints, workers
from ...analysis import Analyzer, check_phrase_shapes, get_analyzer
from ...errors import (
    AnalyzerMismatchError,
    CollectionNotFoundError,
    DimensionMismatchError,
    DocumentNotFoundError,
    EmbedderMismatchError,
    InvalidFieldError,
    VectorStoreError,
)
from ...filters import FilterLike, as_filter
from ...types import (
    UNSTORABLE,
    Collection,
    DocumentInfo,
    EmbedderInfo,
    IngestResult,
    RecordOwner,
    SearchHit,
    VectorRecord,
    new_id,
    unstorable_path,
)
from ..base import (
    ChunkWrite,
    CollectionRow,
    DocumentWrite,
    Ranked,
    StoredChunk,
    check_analyzer,
)
from . import jobs, owners, quotas
from .dialect import Dialect
from .keywords import KeywordBatch, PendingKeywords, PendingWrite
from .plan import PlannedWrite, StoredDocument, plan_writes
from .reader import DOCUMENT_JOIN, SQLReader

if TYPE_CHECKING:
    from ..service import ServiceRecords
    from .postings import PostingsTable

MAX_TOP_K = 1000
_NAME_RE = re.compile(r"^[\w][\w.\-]{0,99}$")

# A chunk to insert: (uid, document row id, version row id, chunk_index, start, end, token_count,
# content, metadata). Vectors and the analyzed keyword payloads travel beside, in the same order.
ChunkRow = tuple[str, int | None, int | None, int, int, int, int, str, dict[str, Any]]


def check_name(kind: str, name: str) -> str:
    """A tenant or collection name as given, or ``VectorStoreError``."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise VectorStoreError(
            f"invalid {kind} name {name!r}: use 1-100 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit"
        )
    return name


def check_top_k(top_k: int) -> int:
    """``top_k`` as given, or ``VectorStoreError`` unless it is an integer from 1 to 1000."""
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
        raise VectorStoreError(f"top_k must be an integer from 1 to {MAX_TOP_K}; got {top_k!r}")
    return top_k


def check_dimension(expected: int, got: int, collection: str) -> None:
    """Refuse vectors whose dimension is not the collection's."""
    if expected != got:
        raise DimensionMismatchError(
            f"collection {collection!r} holds {expected}-dimensional vectors; got {got} dimensions"
        )


def same_analyzer(recorded: str, analyzer: Analyzer, collection: str) -> None:
    """Refuse a write analyzed with another analyzer than the collection records now."""
    if recorded != analyzer.name:  # the collection was dropped and re-created while we analyzed
        raise AnalyzerMismatchError(f"collection {collection!r} now uses the {recorded!r} analyzer; write again")


def checked_vectors(collection: str, dim: int, document: DocumentWrite) -> np.ndarray:
    """A document's vectors as float32, one finite row of the collection's dimension per chunk."""
    if not document.chunks:
        return np.zeros((0, dim), dtype=np.float32)
    vectors = np.asarray(document.vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != len(document.chunks):
        raise VectorStoreError(
            f"document {document.source!r}: {len(document.chunks)} chunks but vectors of shape {vectors.shape}"
        )
    check_dimension(dim, vectors.shape[1], collection)
    if not np.all(np.isfinite(vectors)):
        raise VectorStoreError("vectors contain NaN or infinite values")
    return vectors


def check_storable(document: DocumentWrite) -> None:
    """``InvalidFieldError`` for a document holding a string no store can keep (a NUL or an unpaired
    surrogate, :func:`bunko.types.unstorable`), naming the field, before anything is written."""
    where = unstorable_path(document.source, "source") or unstorable_path(document.metadata, "metadata")
    for chunk in document.chunks:
        if where is not None:
            break
        where = (unstorable_path(chunk.content, f"chunks[{chunk.index}].content")
                 or unstorable_path(chunk.metadata, f"chunks[{chunk.index}].metadata"))
    if where is not None:
        raise InvalidFieldError(f"document {document.source!r}: {where}: {UNSTORABLE}", field=where)


class StoreCounters:
    """What a backend's stores did, counted for tests and benchmarks: transactions by kind and reads of a
    collection's row (``bunko.testing.hooks.counting`` reads them around one operation)."""

    __slots__ = ("_lock", "counts")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[str, int] = {}

    def add(self, name: str) -> None:
        """Count one more ``name``."""
        with self._lock:
            self.counts[name] = self.counts.get(name, 0) + 1

    def snapshot(self) -> dict[str, int]:
        """The counts so far."""
        with self._lock:
            return dict(self.counts)


class SQLBackend(ABC):
    """A SQL database that hands out tenant-bound :class:`SQLStore` s and serves the server's records."""

    scheme: str
    url: str
    dialect: Dialect
    postings: PostingsTable
    counters: StoreCounters

    @abstractmethod
    def transaction(self, tenant: str | None, tenant_pk: int | None, *,
                    write: bool, user: str | None = None) -> AbstractContextManager[Any]:
        """A connection inside one transaction, bound to ``tenant`` (None: no tenant's data is visible) and,
        when given, to ``user`` (a database with row security then shows and changes only that user's rows of
        the per-user tables; None: the tenant's, as a tenant or admin key sees them).

        Driver errors come out as ``VectorStoreError``.
        """

    def bind_tenant(self, conn: Any, tenant_pk: int) -> None:
        """Tell the open transaction which tenant row it works on (for databases that check it)."""
        return None

    @abstractmethod
    def for_tenant(self, tenant: str) -> SQLStore:
        """A store bound to ``tenant``; the only way to reach data."""

    @abstractmethod
    def close(self) -> None:
        """Release connections and caches."""

    @abstractmethod
    def service_records(self) -> ServiceRecords:
        """The HTTP server's records (API keys, rate windows, jobs, erasure) in this database."""


class _TenantRow:
    """The row id of a store's tenant, learnt once and shared by the store and its copies acting for users."""

    __slots__ = ("pk",)

    def __init__(self) -> None:
        self.pk: int | None = None


class SQLStore:
    """The store contract over a SQL database, bound to one tenant. Backends subclass it."""

    # Columns of a collection row, in CollectionRow's order; a backend adds what it keeps of its own as
    # two more expressions: the collection's keyword token count and its highest chunk key (or NULL).
    _COLLECTION_COLUMNS = ("id, name, description, embedding_provider, embedding_model, dimension, created_at, "
                           "document_count, chunk_count, config, analyzer, write_seq, mutation_seq")
    _collection_extra = ", NULL, NULL"
    # How a document row reports its chunk count.
    _document_chunks = "d.chunk_count"
    # The search port of this backend (see bunko.stores.sql.reader).
    _reader = SQLReader
    # Whether a hybrid search runs its two legs at the same time, each in a transaction of its own
    # (bunko.search.session.collect_legs): where the legs wait on a database server, not on this process.
    # Measured at 100,000 chunks of benchmarks/bench_search.py at load 2-4 (docs/ARCHITECTURE.md "Hybrid
    # legs at the same time"): SQLite's hybrid p50 7.3-7.5 ms at once against 6.9-7.0 ms in turn.
    concurrent_legs = False

    def legs_at_once(self, row: CollectionRow, restricted: bool) -> bool:
        """Whether a hybrid search over ``row`` (``restricted``: with a filter or documents) runs its legs at
        the same time: the backend's ``concurrent_legs``, unless it knows better for this search."""
        return self.concurrent_legs

    def __init__(self, backend: SQLBackend, tenant: str) -> None:
        self._backend = backend
        self._tenant = tenant
        self._user: str | None = None  # the user its transactions act for (see for_user)
        # The tenant's row id, once a transaction that saw it committed; shared with the copies for_user makes.
        self._tenant_row = _TenantRow()
        self._d = backend.dialect

    @property
    def tenant(self) -> str:
        """The tenant this store is bound to (read-only)."""
        return self._tenant

    @property
    def user(self) -> str | None:
        """The user this store's transactions act for (None: the whole tenant)."""
        return self._user

    def for_user(self, user_id: str | None) -> Self:
        """The same tenant's store acting for ``user_id`` (None: for the whole tenant, as a tenant or admin key).

        Its transactions carry the user as they carry the tenant: on PostgreSQL, row-level security then shows
        that user only its own memories, conversations and search logs, and lets it change only its own jobs
        and usage records (see docs/ARCHITECTURE.md, "Users inside a tenant"). Every statement keeps its own
        user predicate too; SQLite has no row security and relies on those.
        """
        if user_id == self._user:
            return self
        bound = copy.copy(self)
        bound._user = user_id
        return bound

    @property
    def kind(self) -> str:
        """The kind of database behind this store (its backend's URL scheme)."""
        return self._backend.scheme

    @property
    def database(self) -> int:
        """Which database this store works in: equal for the stores of one backend (a grouping key)."""
        return id(self._backend)

    @property
    def dialect(self) -> Dialect:
        """The SQL dialect of this store's database."""
        return self._d

    def served_by(self, backend: SQLBackend) -> bool:
        """Whether this store reads and writes through ``backend``.

        The backend itself is not handed out: it opens any tenant, and a store is bound to one.
        """
        return self._backend is backend

    def __repr__(self) -> str:
        return f"{type(self).__name__}(tenant={self._tenant!r}, backend={self._backend!r})"

    # -- scope: every statement runs inside one of these ---------------------------------------
    @contextmanager
    def session(self, *, write: bool = False, create: bool = False,
                user: str | None = None) -> Iterator[tuple[Any, int | None]]:
        """A transaction scoped to this tenant: (connection, the tenant's row id or None if it has no data).

        ``create`` registers the tenant if it is missing (and implies ``write``). The transaction acts for the
        store's user (:meth:`for_user`), or else for ``user`` when given (a repository whose call names its user,
        as agent memories do); a store bound to a user never works for another.
        """
        known = self._tenant_row.pk
        pk = known
        self._backend.counters.add("write_transactions" if write or create else "read_transactions")
        acting = self._user if self._user is not None else user
        with self._backend.transaction(self._tenant, known, write=write or create, user=acting) as conn:
            if pk is None:
                pk = self._find_tenant(conn, create)
                if pk is not None:
                    self._backend.bind_tenant(conn, pk)
            yield conn, pk
        if known is None and pk is not None:  # only a committed row id is remembered
            self._tenant_row.pk = pk

    def run(self, conn: Any, statement: str, params: Sequence[Any] = ()) -> Any:
        """Execute a core statement (``?`` placeholders, unqualified tables) in this backend's dialect."""
        return conn.execute(self._d.sql(statement), params)

    def run_many(self, conn: Any, statement: str, rows: list[Sequence[Any]]) -> None:
        """Execute a core statement once per row of parameters."""
        if rows:
            self._d.executemany(conn, self._d.sql(statement), rows)

    def _find_tenant(self, conn: Any, create: bool) -> int | None:
        self._backend.counters.add("tenant_lookups")
        row = self.run(conn, "SELECT id FROM tenants WHERE name = ?", (self._tenant,)).fetchone()
        if row is None and create:
            self.run(conn, "INSERT INTO tenants (name) VALUES (?) ON CONFLICT (name) DO NOTHING", (self._tenant,))
            row = self.run(conn, "SELECT id FROM tenants WHERE name = ?", (self._tenant,)).fetchone()
        return None if row is None else int(row[0])

    def _collection_row(self, conn: Any, tenant_pk: int | None, name: str) -> CollectionRow:
        """A collection's row in this tenant, or ``CollectionNotFoundError``."""
        row = None
        if tenant_pk is not None:
            self._backend.counters.add("collection_reads")
            row = self.run(conn, f"SELECT {self._COLLECTION_COLUMNS}{self._collection_extra} FROM collections "
                                 "WHERE tenant_id = ? AND name = ?", (tenant_pk, name)).fetchone()
        if row is None:
            raise CollectionNotFoundError(f"collection {name!r} does not exist in tenant {self._tenant!r}")
        return self._named(row)

    def _named(self, row: Sequence[Any]) -> CollectionRow:
        """A selected row of ``_COLLECTION_COLUMNS`` and the backend's two extras, by name."""
        return CollectionRow(name=row[1], description=row[2], embedding_provider=row[3], embedding_model=row[4],
                             dimension=int(row[5]), created_at=self._d.time_out(row[6]), document_count=int(row[7]),
                             chunk_count=int(row[8]), config=self._d.json_out(row[9]), analyzer=row[10],
                             write_seq=int(row[11]), key=int(row[0]), mutation_seq=int(row[12]),
                             keyword_tokens=None if row[13] is None else int(row[13]),
                             high_water=0 if row[14] is None else int(row[14]))

    def read_collection(self, name: str) -> CollectionRow:
        """The collection's row, read once for a search to work from (``reader``), or
        ``CollectionNotFoundError``."""
        with self.session() as (conn, tenant_pk):
            return self._collection_row(conn, tenant_pk, name)

    @contextmanager
    def reader(self, row: CollectionRow) -> Iterator[SQLReader]:
        """The search port over a collection read before: one read transaction, for one search."""
        with self.session() as (conn, tenant_pk):
            if tenant_pk is None:  # the tenant has no data (any more): a reader over nothing
                tenant_pk = -1
            yield self._reader(self, self._backend, conn, tenant_pk, row)

    def _wrote(self, conn: Any, tenant_pk: int, collection_pk: int) -> None:
        """Bump the collection's write counter (in the writing transaction)."""
        self.run(conn, "UPDATE collections SET write_seq = write_seq + 1 WHERE tenant_id = ? AND id = ?",
                 (tenant_pk, collection_pk))

    def _count_documents(self, conn: Any, tenant_pk: int, collection_pk: int, delta: int) -> None:
        if delta:
            self.run(conn, "UPDATE collections SET document_count = document_count + ? WHERE tenant_id = ? AND id = ?",
                     (delta, tenant_pk, collection_pk))

    def _analyzer(self, collection: str) -> Analyzer:
        """The analyzer a collection records (fixed at creation)."""
        return get_analyzer(self.read_collection(collection).analyzer)

    # -- what a backend supplies ----------------------------------------------------------------
    # How a backend renders a chunk's tokens for its own columns (a module-level function: it runs in the
    # worker processes), and the last token position at which a pair of tokens still counts (None: all).
    _render: staticmethod[[list[str]], Any]
    _pair_limit: int | None = None

    def _analyze(self, analyzer: Analyzer, texts: list[str]) -> PendingKeywords:
        """Start analyzing chunk texts (in the worker processes when there are many); computed before the
        write transaction opens."""
        return PendingKeywords(type(self)._render, analyzer, texts, self._pair_limit)

    def _insert_chunks(self, conn: Any, tenant_pk: int, collection_pk: int, rows: list[ChunkRow],
                       vectors: np.ndarray, keywords: KeywordBatch) -> None:
        """Insert chunks with their vectors and keyword index, and add them to the collection's counters."""
        raise NotImplementedError

    def _delete_chunks(self, conn: Any, tenant_pk: int, collection_pk: int, *,
                       document_pks: Sequence[int] | None = None, uids: Sequence[str] | None = None) -> int:
        """Delete a collection's chunks of these documents (or with these ids) with their keyword index,
        take them off the collection's counters; returns how many there were."""
        raise NotImplementedError

    def _drop_collection(self, conn: Any, tenant_pk: int, collection_pk: int) -> None:
        """Remove what deleting the collection's row does not cascade to (called before that delete)."""

    def _forget_collection(self, collection_pk: int) -> None:
        """Drop what this process keeps about a deleted collection (after the commit)."""

    def _record_versions(self, conn: Any, tenant_pk: int,
                         written: list[tuple[int, PlannedWrite, DocumentWrite]]) -> list[int | None]:
        """Record a version row per written (document row id, plan, document); their ids, or None each."""
        return [None] * len(written)

    def _after_write(self, collection_pk: int, chunk_count: int) -> None:
        """Upkeep after a committed write (an index build, say); must not raise into the write."""

    def _collection_settings(self) -> dict[str, Any]:
        """Extra columns a new collection row records (index parameters, say)."""
        return {}

    # -- capabilities every store has (the backend may do more) ---------------------------------
    @contextmanager
    def bulk_load(self, collection: str) -> Iterator[None]:
        """Many writes to ``collection`` follow; a backend may defer index upkeep to the end."""
        yield

    def build_index(self, collection: str) -> str | None:
        """Build the collection's vector index if this backend keeps one; its name, or None."""
        self.get_collection(collection)
        return None

    # -- collections ----------------------------------------------------------------------------
    def ensure_collection(self, name: str, embedder: EmbedderInfo, description: str = "",
                          config: dict[str, Any] | None = None, *, analyzer: str | None = None) -> Collection:
        """Return the collection, creating it for this embedder and analyzer if missing; refuse others."""
        check_name("collection", name)
        chosen = get_analyzer(analyzer)  # an unknown name fails before anything is written
        check_phrase_shapes(chosen)
        analyzer_name = chosen.name
        extra = self._collection_settings()
        columns = "".join(f", {c}" for c in extra)
        marks = ", ?" * len(extra)
        with self.session(create=True) as (conn, tenant_pk):
            jobs.check_job_may_create(self, conn, tenant_pk, name)
            # The write counter starts anywhere: a collection deleted and created again under its
            # name never repeats a counter value its predecessor had (cached results key on it).
            self.run(conn, "INSERT INTO collections (tenant_id, name, description, embedding_provider, "
                           f"embedding_model, dimension, analyzer, config, write_seq{columns}) "
                           f"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?{marks}) "
                           "ON CONFLICT (tenant_id, name) DO NOTHING",
                     (tenant_pk, name, description, embedder.provider, embedder.model, embedder.dimension,
                      analyzer_name, self._d.json_in(config or {}), secrets.randbits(40), *extra.values()))
            collection = self._collection_row(conn, tenant_pk, name).collection
        if collection.embedder != embedder:
            raise EmbedderMismatchError(
                f"collection {name!r} was built with {collection.embedding_provider}:{collection.embedding_model} "
                f"({collection.dimension} dimensions); the embedder in use is {embedder.provider}:{embedder.model} "
                f"({embedder.dimension} dimensions). Use the same embedder, or another collection"
            )
        check_analyzer(collection, analyzer)
        return collection

    def get_collection(self, name: str) -> Collection:
        """The collection (with its write counter), or ``CollectionNotFoundError``."""
        return self.read_collection(name).collection

    def list_collections(self) -> list[Collection]:
        """This tenant's collections, by name."""
        with self.session() as (conn, tenant_pk):
            if tenant_pk is None:
                return []
            rows = self.run(conn, f"SELECT {self._COLLECTION_COLUMNS}{self._collection_extra} FROM collections "
                                  "WHERE tenant_id = ? ORDER BY name", (tenant_pk,)).fetchall()
        return [self._named(r).collection for r in rows]

    def delete_collection(self, name: str) -> None:
        """Delete a collection with all its documents, chunks and vectors."""
        with self.session(write=True) as (conn, tenant_pk):
            collection_pk = self._collection_row(conn, tenant_pk, name).key
            assert tenant_pk is not None
            self._drop_collection(conn, tenant_pk, collection_pk)
            self.run(conn, "DELETE FROM collections WHERE tenant_id = ? AND id = ?", (tenant_pk, collection_pk))
            self.run(conn, "DELETE FROM ingest_failures WHERE tenant_id = ? AND collection = ?", (tenant_pk, name))
        self._forget_collection(collection_pk)
        self._backend.postings.cache.forget(collection_pk)
        self._backend.postings.index.forget(collection_pk)

    # -- documents ------------------------------------------------------------------------------
    def write_document(self, collection: str, document: DocumentWrite) -> IngestResult:
        """Store a document and its chunks atomically; replace an older one with the same source."""
        return self.write_documents(collection, [document])[0]

    def write_documents(self, collection: str, documents: Sequence[DocumentWrite]) -> list[IngestResult]:
        """Store several documents in one transaction, each replacing an older one with its source.

        A fixed number of statements per batch, whatever its size: one lookup of the stored
        sources, one delete of replaced chunks, one update and one insert of document rows, and
        one bulk insert of the chunks. One commit per batch is what makes bulk ingest fast.
        """
        return self.finish_write(self.begin_write(collection, documents))

    def begin_write(self, collection: str, documents: Sequence[DocumentWrite], *,
                    analyzer: Analyzer | None = None, whole: bool = False) -> PendingWrite:
        """Start a write: its chunks' keyword analysis begins (in the worker processes when there are
        many) and nothing is written yet; :meth:`finish_write` writes it as ``write_documents`` does.
        A writer starts the next batch before it finishes this one, so the workers analyze while it writes."""
        started = time.perf_counter()
        for document in documents:
            check_storable(document)
        # Analysis (possibly morphological, so slow) runs before the transaction opens.
        analyzer = analyzer or self._analyzer(collection)
        texts = [c.content for d in documents for c in d.chunks]
        return PendingWrite(collection, list(documents), analyzer, PendingKeywords(
            type(self)._render, analyzer, texts, self._pair_limit, whole=whole), started)

    def finish_write(self, pending: PendingWrite) -> list[IngestResult]:
        """Write a started write once its analysis is done: one transaction, whole documents."""
        return self._write_analyzed(pending.collection, pending.documents, pending.analyzer,
                                    pending.analysis.result(), pending.started)

    def write_batches(self, collection: str,
                      batches: Iterable[Sequence[DocumentWrite]]) -> Iterator[list[IngestResult]]:
        """Write batches of documents in turn, each as ``write_documents`` does (one transaction, whole
        documents), yielding each batch's results once it is committed. While one batch is written the
        next ones are analyzed, one per worker process, each by one worker whole (no join of parts).

        The first batch is cut into one part per worker instead: nothing is written until it is analyzed,
        so the writer waits for it alone, and its parts take every core meanwhile."""
        ahead = max(1, workers.worker_count())
        queue: deque[PendingWrite] = deque()
        analyzer: Analyzer | None = None
        first = True
        for batch in batches:
            queue.append(self.begin_write(collection, batch, analyzer=analyzer, whole=ahead > 1 and not first))
            first = False
            analyzer = queue[-1].analyzer
            if len(queue) > ahead:
                yield self.finish_write(queue.popleft())
        while queue:
            yield self.finish_write(queue.popleft())

    def _write_analyzed(self, collection: str, documents: Sequence[DocumentWrite], analyzer: Analyzer,
                        keywords: KeywordBatch, started: float) -> list[IngestResult]:
        """``write_documents`` with its chunks analyzed already (``keywords``, in the documents' order)."""
        d = self._d
        with self.session(write=True) as (conn, tenant_pk):
            row = self._collection_row(conn, tenant_pk, collection)
            assert tenant_pk is not None
            guard = quotas.begin(self, conn, tenant_pk)
            crashpoints.reach("store.write.begin")
            same_analyzer(row.analyzer, analyzer, collection)
            collection_pk, dim = row.key, row.dimension
            vectors = [checked_vectors(collection, dim, document) for document in documents]
            listed, params = d.any("source", [doc.source for doc in documents])
            existing = {
                r[0]: StoredDocument(int(r[1]), r[2], r[3], int(r[4]), int(r[5]))
                for r in self.run(conn, "SELECT source, id, uid, content_hash, chunk_count, version FROM documents "
                                        f"WHERE tenant_id = ? AND collection_id = ? AND {listed}{d.for_update}",
                                  (tenant_pk, collection_pk, *params))
            }
            plans = plan_writes(existing, documents)
            replaced = [p for p in plans if p.status == "replaced"]
            created = [p for p in plans if p.status == "created"]
            doc_pks: dict[int, int] = {p.position: p.pk for p in replaced if p.pk is not None}
            if replaced:
                # A new version of a document: same id, old chunks out, new chunks in, in this transaction.
                self._delete_chunks(conn, tenant_pk, collection_pk, document_pks=list(doc_pks.values()))
                crashpoints.reach("store.version.swap")
                self.run_many(conn, "UPDATE documents SET content_hash = ?, metadata = ?, chunk_count = ?, "
                                    "version = ?, updated_at = {now} WHERE tenant_id = ? AND id = ?",
                              [(documents[p.position].content_hash, d.json_in(documents[p.position].metadata),
                                p.chunk_count, p.version, tenant_pk, p.pk) for p in replaced])
            if created:
                self.run_many(conn, "INSERT INTO documents (uid, tenant_id, collection_id, source, content_hash, "
                                    "metadata, chunk_count, version) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                              [(p.uid, tenant_pk, collection_pk, documents[p.position].source,
                                documents[p.position].content_hash, d.json_in(documents[p.position].metadata),
                                p.chunk_count, p.version) for p in created])
                listed, params = d.any("uid", [p.uid for p in created])
                pk_by_uid = {uid: int(pk) for uid, pk in self.run(
                    conn, f"SELECT uid, id FROM documents WHERE tenant_id = ? AND {listed}", (tenant_pk, *params))}
                doc_pks.update((p.position, pk_by_uid[p.uid]) for p in created)
                self._count_documents(conn, tenant_pk, collection_pk, len(created))
            written = [p for p in plans if p.status != "unchanged"]
            version_pks = self._record_versions(
                conn, tenant_pk, [(doc_pks[p.position], p, documents[p.position]) for p in written])
            rows: list[ChunkRow] = []
            firsts = np.cumsum([0, *(len(doc.chunks) for doc in documents)]).tolist()
            picked: list[int] = []
            for plan, version_pk in zip(written, version_pks, strict=True):
                doc_pk = doc_pks[plan.position]
                rows.extend((c.id, doc_pk, version_pk, c.index, c.start, c.end, c.token_count, c.content, c.metadata)
                            for c in documents[plan.position].chunks)
                picked.extend(range(firsts[plan.position], firsts[plan.position + 1]))
            if rows:
                block = np.concatenate([vectors[p.position] for p in written]) if len(written) > 1 \
                    else vectors[written[0].position]
                self._insert_chunks(conn, tenant_pk, collection_pk, rows, block, keywords.select(picked))
            if written:
                self._wrote(conn, tenant_pk, collection_pk)
            total = int(self.run(conn, "SELECT chunk_count FROM collections WHERE tenant_id = ? AND id = ?",
                                 (tenant_pk, collection_pk)).fetchone()[0])
            quotas.enforce(self, conn, tenant_pk, guard)
            crashpoints.reach("store.write.chunks")
        crashpoints.reach("store.write.committed")
        self._after_write(collection_pk, total)
        elapsed = (time.perf_counter() - started) * 1000
        return [IngestResult(p.uid, documents[p.position].source, p.chunk_count, p.status, version=p.version,
                             processing_time_ms=elapsed / max(1, len(plans))) for p in plans]

    def _document_select(self) -> str:
        return (f"SELECT d.uid, d.source, {self._document_chunks}, d.metadata, d.content_hash, d.created_at, "
                "d.version, d.updated_at, (SELECT c.name FROM collections c WHERE c.tenant_id = d.tenant_id "
                "AND c.id = d.collection_id) FROM documents d WHERE d.tenant_id = ?")

    def _document(self, row: Any) -> DocumentInfo:
        return DocumentInfo(row[0], row[1], int(row[2]), self._d.json_out(row[3]), row[4], self._d.time_out(row[5]),
                            int(row[6]), self._d.time_out(row[7]), row[8] or "")

    def find_by_source(self, collection: str, source: str) -> DocumentInfo | None:
        """The document stored under ``source``, or None (also when the collection is missing)."""
        with self.session() as (conn, tenant_pk):
            try:
                collection_pk = self._collection_row(conn, tenant_pk, collection).key
            except CollectionNotFoundError:
                return None
            found = self.run(conn, self._document_select() + " AND d.collection_id = ? AND d.source = ?",
                             (tenant_pk, collection_pk, source)).fetchone()
        return None if found is None else self._document(found)

    def list_documents(self, collection: str, limit: int | None = None, offset: int = 0) -> list[DocumentInfo]:
        """Documents of a collection, oldest first."""
        with self.session() as (conn, tenant_pk):
            collection_pk = self._collection_row(conn, tenant_pk, collection).key
            rows = self.run(conn, self._document_select() + " AND d.collection_id = ? ORDER BY d.id LIMIT ? OFFSET ?",
                            (tenant_pk, collection_pk, self._d.limit(limit), int(offset))).fetchall()
        return [self._document(r) for r in rows]

    def get_document(self, document_id: str, collection: str | None = None) -> DocumentInfo:
        """One document of this tenant, or ``DocumentNotFoundError``."""
        with self.session() as (conn, tenant_pk):
            found = None
            if tenant_pk is not None:
                query, params = self._document_select() + " AND d.uid = ?", [tenant_pk, document_id]
                if collection is not None:
                    query += " AND d.collection_id = ?"
                    params.append(self._collection_row(conn, tenant_pk, collection).key)
                found = self.run(conn, query, params).fetchone()
        if found is None:
            raise DocumentNotFoundError(f"document {document_id!r} does not exist in tenant {self._tenant!r}")
        return self._document(found)

    def delete_documents(self, document_ids: Sequence[str], collection: str | None = None) -> int:
        """Delete documents (and their chunks); returns how many existed in this tenant."""
        ids = [str(i) for i in document_ids]
        if not ids:
            return 0
        d = self._d
        with self.session(write=True) as (conn, tenant_pk):
            if tenant_pk is None:
                return 0
            listed, listed_params = d.any("uid", ids)
            query, params = f"SELECT id, collection_id FROM documents WHERE tenant_id = ? AND {listed}", \
                [tenant_pk, *listed_params]
            if collection is not None:
                query += " AND collection_id = ?"
                params.append(self._collection_row(conn, tenant_pk, collection).key)
            rows = self.run(conn, query + d.for_update, params).fetchall()
            by_collection: dict[int, list[int]] = {}
            for doc_pk, collection_pk in rows:
                by_collection.setdefault(int(collection_pk), []).append(int(doc_pk))
            for collection_pk, doc_pks in by_collection.items():
                self._delete_chunks(conn, tenant_pk, collection_pk, document_pks=doc_pks)
                listed, listed_params = d.any("id", doc_pks)
                self.run(conn, f"DELETE FROM documents WHERE tenant_id = ? AND {listed}", (tenant_pk, *listed_params))
                self._count_documents(conn, tenant_pk, collection_pk, -len(doc_pks))
                self._wrote(conn, tenant_pk, collection_pk)
        return len(rows)

    # -- chunks and vectors ---------------------------------------------------------------------
    def upsert(self, collection: str, records: Sequence[VectorRecord], *,
               owner: RecordOwner | None = None) -> list[str]:
        """Insert or update records that carry vectors; ids are generated when missing (R14). ``owner`` is the
        writer (:mod:`bunko.stores.sql.owners`): a restricted one may replace only its user's records."""
        if not records:
            return []
        for record in records:
            if record.vector is None:
                raise VectorStoreError("upsert needs a vector on every record; embed the content first")
        ids = [r.id or new_id() for r in records]
        if len(set(ids)) != len(ids):
            raise VectorStoreError("upsert got the same id twice in one call")
        vectors = np.asarray([r.vector for r in records], dtype=np.float32)
        analyzer = self._analyzer(collection)
        keywords = self._analyze(analyzer, [r.content for r in records]).result()
        with self.session(write=True) as (conn, tenant_pk):
            row = self._collection_row(conn, tenant_pk, collection)
            assert tenant_pk is not None
            guard = quotas.begin(self, conn, tenant_pk)
            same_analyzer(row.analyzer, analyzer, collection)
            collection_pk = row.key
            check_dimension(row.dimension, vectors.shape[1] if vectors.ndim == 2 else -1, collection)
            if not np.all(np.isfinite(vectors)):
                raise VectorStoreError("vectors contain NaN or infinite values")
            doc_pks: dict[str, int] = {}
            for record in records:
                if record.document_id and record.document_id not in doc_pks:
                    found = self.run(conn, "SELECT id FROM documents WHERE tenant_id = ? AND collection_id = ? "
                                           "AND uid = ?", (tenant_pk, collection_pk, record.document_id)).fetchone()
                    if found is None:
                        raise DocumentNotFoundError(
                            f"document {record.document_id!r} does not exist in collection {collection!r}"
                        )
                    doc_pks[record.document_id] = int(found[0])
            found = owners.existing_owners(self, conn, tenant_pk, collection_pk, ids)
            if owner is not None:
                owners.check_records(owner, found, "replace")
                owners.check_documents(self, conn, tenant_pk, owner, list(doc_pks))
            self._delete_chunks(conn, tenant_pk, collection_pk, uids=ids)
            rows: list[ChunkRow] = [
                (ids[i], doc_pks.get(r.document_id or ""), None, int(r.metadata.get("chunk_index", 0)), 0,
                 len(r.content), 0, r.content, r.metadata) for i, r in enumerate(records)]
            self._insert_chunks(conn, tenant_pk, collection_pk, rows, vectors, keywords)
            owners.stamp(self, conn, tenant_pk, collection_pk, owner, records, ids, found)
            quotas.enforce(self, conn, tenant_pk, guard)
            self._wrote(conn, tenant_pk, collection_pk)
        return ids

    def delete(self, collection: str, ids: Sequence[str], *, owner: RecordOwner | None = None) -> int:
        """Delete chunks by id; returns how many existed in this tenant's collection. A restricted ``owner``
        may delete only its user's records (:mod:`bunko.stores.sql.owners`)."""
        if not ids:
            return 0
        with self.session(write=True) as (conn, tenant_pk):
            collection_pk = self._collection_row(conn, tenant_pk, collection).key
            assert tenant_pk is not None
            if owner is not None and owner.restricted:
                owners.check_records(owner, owners.existing_owners(self, conn, tenant_pk, collection_pk,
                                                                   [str(i) for i in ids]), "delete")
            removed = self._delete_chunks(conn, tenant_pk, collection_pk, uids=[str(i) for i in ids])
            if removed:
                self._wrote(conn, tenant_pk, collection_pk)
            return removed

    def chunk_vectors(self, collection: str, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored vectors of these chunks of this tenant's collection (unknown ids are left out)."""
        if not chunk_ids:
            return {}
        d = self._d
        with self.session() as (conn, tenant_pk):
            collection_pk = self._collection_row(conn, tenant_pk, collection).key
            listed, params = d.any("uid", [str(i) for i in chunk_ids])
            rows = self.run(conn, f"SELECT uid, embedding FROM chunks WHERE tenant_id = ? AND collection_id = ? "
                                  f"AND {listed}", (tenant_pk, collection_pk, *params)).fetchall()
        return {uid: d.vector_out(vector) for uid, vector in rows}

    def get_chunks(self, collection: str, chunk_ids: Sequence[str]) -> list[SearchHit]:
        """These chunks of this tenant's collection as hits (score 0), in the order asked; unknown ids are left out."""
        wanted = list(dict.fromkeys(str(i) for i in chunk_ids))
        if not wanted:
            return []
        row = self.read_collection(collection)
        with self.reader(row) as reader:
            keys = reader.keys_of(wanted)
            found = np.asarray([keys[i] for i in wanted if i in keys], dtype=np.int64)
            return reader.hits(Ranked(found, np.zeros(len(found))))

    def count(self, collection: str, *, filter: FilterLike = None) -> int:
        """Number of chunks in a collection (that pass ``filter``, if given)."""
        flt = as_filter(filter)
        where, params = self._d.compile_filter(flt) if flt is not None else ("", [])
        with self.session() as (conn, tenant_pk):
            row = self._collection_row(conn, tenant_pk, collection)
            if flt is None:
                return row.chunk_count
            return int(self.run(conn, f"SELECT count(*) FROM chunks c{DOCUMENT_JOIN} WHERE c.tenant_id = ? "
                                      f"AND c.collection_id = ? AND {where}",
                                (tenant_pk, row.key, *params)).fetchone()[0])

    # -- reading chunks back (exports) -----------------------------------------------------------
    _EXPORT_COLUMNS = ("c.uid, c.chunk_index, c.start_offset, c.end_offset, c.token_count, c.content, c.metadata, "
                      "c.embedding")

    def _stored_chunk(self, row: Sequence[Any], document_id: str | None) -> StoredChunk:
        d = self._d
        chunk = ChunkWrite(row[0], row[5], int(row[1]), int(row[2]), int(row[3]), int(row[4]), d.json_out(row[6]))
        return StoredChunk(chunk, np.array(d.vector_out(row[7]), dtype=np.float32), document_id)

    def document_chunks(self, collection: str, document_ids: Sequence[str]) -> dict[str, list[StoredChunk]]:
        """The chunks (with vectors, in order) of these documents of this tenant's collection, by document id."""
        ids = [str(i) for i in document_ids]
        if not ids:
            return {}
        d = self._d
        with self.session() as (conn, tenant_pk):
            collection_pk = self._collection_row(conn, tenant_pk, collection).key
            listed, params = d.any("d.uid", ids)
            rows = self.run(conn, f"SELECT d.uid, {self._EXPORT_COLUMNS} FROM chunks c JOIN documents d "
                                  "ON d.tenant_id = c.tenant_id AND d.id = c.document_id "
                                  f"WHERE c.tenant_id = ? AND c.collection_id = ? AND {listed} "
                                  "ORDER BY d.id, c.chunk_index, c.id",
                            (tenant_pk, collection_pk, *params)).fetchall()
        found: dict[str, list[StoredChunk]] = {i: [] for i in ids}
        for row in rows:
            found[row[0]].append(self._stored_chunk(row[1:], row[0]))
        return found

    # Texts looked up per statement (SQLite: keys as literal marks, see Dialect.any).
    _TEXTS_PER_READ = 5_000

    def stored_vectors(self, collection: str, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """The vector of a document chunk of this tenant's collection for each of ``texts`` that one holds.

        Found through the store's index of document chunks' texts (``Dialect.chunk_texts``), then compared
        as text. Chunks upserted without a document are left out: their vectors were given by the caller and
        need not be the collection embedder's."""
        unique = set(texts)
        wanted = sorted(unique)
        if not wanted:
            return {}
        d = self._d
        found: dict[str, np.ndarray] = {}
        with self.session() as (conn, tenant_pk):
            collection_pk = self._collection_row(conn, tenant_pk, collection).key
            for start in range(0, len(wanted), self._TEXTS_PER_READ):
                listed, params = d.chunk_texts(wanted[start : start + self._TEXTS_PER_READ])
                for content, vector in self.run(
                        conn, "SELECT c.content, c.embedding FROM chunks c WHERE c.tenant_id = ? "
                              f"AND c.collection_id = ? AND c.document_id IS NOT NULL AND {listed}",
                        (tenant_pk, collection_pk, *params)).fetchall():
                    if content in unique and content not in found:  # a key matches; the text must too
                        found[content] = d.vector_out(vector)
        return found

    def loose_chunks(self, collection: str, limit: int, offset: int = 0) -> list[StoredChunk]:
        """Chunks upserted without a document, oldest first, a page at a time."""
        with self.session() as (conn, tenant_pk):
            collection_pk = self._collection_row(conn, tenant_pk, collection).key
            rows = self.run(conn, f"SELECT {self._EXPORT_COLUMNS} FROM chunks c WHERE c.tenant_id = ? "
                                  "AND c.collection_id = ? AND c.document_id IS NULL ORDER BY c.id LIMIT ? OFFSET ?",
                            (tenant_pk, collection_pk, int(limit), int(offset))).fetchall()
        return [self._stored_chunk(row, None) for row in rows]
