"""The library entry point: ``Bunko`` opens a store; ``Bunko.tenant(name)`` scopes it.

Everything a caller can do with data goes through a :class:`Tenant`, which holds
a store bound to one tenant (R15). The tenant is chosen once, by whoever builds
the scope (the operator's CLI flag, later the server from an API key); no method
below takes a tenant id.

    from bunko import Bunko

    with Bunko() as engine:                 # embedded SQLite under BUNKO_HOME
        acme = engine.tenant("acme")
        acme.ingest(["handbook/"], collection="docs")
        print(acme.ask("有給休暇は何日ですか？", collection="docs").answer)

Each operation has an async form (``aingest``, ``asearch``, ``aask``) and a sync
convenience that runs it on a fresh event loop.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .config import DEFAULT_COLLECTION, Settings
from .embedders import get_embedder
from .errors import BunkoError
from .generation import Generator, LLMProvider
from .indexing import IndexManager
from .loaders import LoadOptions, Skipped, discover, load_path
from .pipeline import RAGPipeline
from .preprocess import Preprocessor
from .retrieval import Retriever, SearchMode
from .splitters import Splitter, splitter_spec
from .stores import DocumentWrite, StoreBackend, VectorStore, open_backend
from .types import Collection, Document, DocumentInfo, GenerationResult, IngestResult, SearchHit

T = TypeVar("T")

# Documents are written in transactions of about this many chunks (or documents): one commit
# per document would spend most of bulk ingest in commits (FTS5 segments, index pages).
INGEST_BATCH_CHUNKS = 2000
INGEST_BATCH_DOCUMENTS = 64
# Files read and parsed ahead of the embedder, in threads.
LOAD_WORKERS = 4
# Chunks of several small documents are embedded together, so the embedder sees full batches.
EMBED_BATCH_CHUNKS = 256


def load_url(url: str, options: LoadOptions) -> list[Document]:
    """Fetch and load a URL (through the SSRF guard of ``loaders.url``)."""
    from .loaders.url import load_url as fetch

    return fetch(url, options)


def _run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise BunkoError("called a sync bunko method inside a running event loop; await the 'a…' form instead")


@dataclass(slots=True)
class IngestError:
    """A file that could not be ingested, and why."""

    path: str
    type: str
    message: str

    def to_dict(self) -> dict[str, str]:
        """A JSON-ready dict."""
        return {"path": self.path, "type": self.type, "message": self.message}


@dataclass(slots=True)
class IngestReport:
    """What an ingest run did: per-document results, failures and skipped files."""

    documents: list[IngestResult] = field(default_factory=list)
    errors: list[IngestError] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    elapsed_ms: float = 0.0

    @property
    def chunks(self) -> int:
        """Chunks stored by this run (unchanged documents count zero)."""
        return sum(d.chunks for d in self.documents if d.status != "unchanged")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict in the CLI's ``ingest --json`` shape."""
        return {
            "documents": [d.to_dict() for d in self.documents],
            "chunks": self.chunks,
            "errors": [e.to_dict() for e in self.errors],
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
            "elapsed_ms": round(self.elapsed_ms, 1),
        }


@dataclass(slots=True)
class SearchResponse:
    """Search hits and how long the search took."""

    results: list[SearchHit]
    search_time_ms: float

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict in the CLI's ``search --json`` shape."""
        return {"results": [h.to_dict() for h in self.results], "search_time_ms": round(self.search_time_ms, 2)}


# Called with (event, path, result_or_error): event is "total" (result = number of files), "start",
# "done" or "error".
IngestProgress = Callable[[str, str, Any], None]


class Bunko:
    """An engine over one store; hands out tenant scopes."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        home: str | os.PathLike[str] | None = None,
        embedder: Any = None,
        splitter: Splitter | str | dict[str, Any] | None = None,
        llm: LLMProvider | None = None,
        analyzer: str | None = None,
    ) -> None:
        self.settings = Settings.resolve(database_url, home=home,
                                         embedder=embedder if isinstance(embedder, str) else None)
        self.backend: StoreBackend = open_backend(self.settings.database_url)
        self._embedder = None if isinstance(embedder, str) else embedder
        # A Splitter instance is used as is; a name or spec picks the splitter of new collections
        # (existing collections keep the one they were built with).
        self.splitter: Splitter | None = None
        self.splitter_spec: dict[str, Any] | None = None
        if isinstance(splitter, str):
            self.splitter_spec = splitter_spec(splitter)
        elif isinstance(splitter, dict):
            self.splitter_spec = splitter_spec(**splitter)
        else:
            self.splitter = splitter
        self.preprocessor = Preprocessor()
        self.llm = llm
        # The keyword analyzer of new collections (None: bunko.analysis.DEFAULT_ANALYZER_NAME);
        # existing collections keep the one they were created with.
        self.analyzer = analyzer

    @property
    def embedder(self) -> Any:
        """The embedder, built on first use (the bundled model loads in about a second)."""
        if self._embedder is None:
            self._embedder = get_embedder(self.settings.embedder)
        return self._embedder

    def tenant(self, name: str) -> Tenant:
        """A scope bound to tenant ``name``; all data access goes through it."""
        return Tenant(self, self.backend.for_tenant(name))

    def close(self) -> None:
        """Close the store."""
        self.backend.close()

    def __enter__(self) -> Bunko:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Tenant:
    """Everything one tenant can do. Build it with ``Bunko.tenant(name)``."""

    def __init__(self, engine: Bunko, store: VectorStore) -> None:
        self._engine = engine
        self._store = store

    @property
    def engine(self) -> Bunko:
        """The engine this scope belongs to."""
        return self._engine

    @property
    def name(self) -> str:
        """The tenant this scope is bound to."""
        return self._store.tenant

    @property
    def store(self) -> VectorStore:
        """The tenant-bound store (for low-level upsert/query/delete, R14)."""
        return self._store

    def pipeline(self, collection: str = DEFAULT_COLLECTION, *, splitter: str | None = None,
                 analyzer: str | None = None) -> RAGPipeline:
        """A ``RAGPipeline`` over one collection of this tenant.

        ``splitter`` and ``analyzer`` name the splitter and keyword analyzer of a new collection;
        an existing collection must have been created with the ones named.
        """
        engine = self._engine
        spec = splitter_spec(splitter) if splitter else engine.splitter_spec
        index_manager = IndexManager(engine.preprocessor, engine.splitter, engine.embedder, self._store, collection,
                                     splitter=spec, analyzer=analyzer or engine.analyzer)
        retriever = Retriever(engine.embedder, self._store, collection)
        generator = Generator(engine.llm, embedder=engine.embedder)
        return RAGPipeline(index_manager, retriever, generator)

    # -- ingest ---------------------------------------------------------------------
    async def aadd_document(self, document: Document, collection: str = DEFAULT_COLLECTION) -> IngestResult:
        """Index one ``Document``."""
        return await self.pipeline(collection).index_document(document)

    async def aingest(
        self,
        paths: Iterable[str | os.PathLike[str]],
        collection: str = DEFAULT_COLLECTION,
        *,
        progress: IngestProgress | None = None,
        splitter: str | None = None,
        analyzer: str | None = None,
        options: LoadOptions | None = None,
        workers: int = LOAD_WORKERS,
    ) -> IngestReport:
        """Load and index files, folders and URLs; a failing one is reported, the rest go on.

        Files are read and parsed by ``workers`` threads ahead of the embedder, in order.
        Embedded documents are written in batches (one transaction per batch of about
        ``INGEST_BATCH_CHUNKS`` chunks): each document is stored whole or not at all, and
        an interrupted run leaves only whole documents behind; running again finishes it.
        """
        started = time.perf_counter()
        files, skipped = discover(paths)
        report = IngestReport(skipped=skipped)
        if progress:
            progress("total", "", len(files))
        manager = self.pipeline(collection, splitter=splitter, analyzer=analyzer).index_manager
        await asyncio.to_thread(manager.check_collection)  # another analyzer or splitter: fail before loading
        options = options or LoadOptions()
        semaphore = asyncio.Semaphore(max(1, workers))

        async def load(item: Path | str) -> list[Document]:
            async with semaphore:
                return await asyncio.to_thread(load_url if isinstance(item, str) else load_path, item, options)

        # Start loading up to ``workers`` files ahead; results are consumed in order.
        loads: dict[int, asyncio.Task[list[Document]]] = {}
        scheduled = 0

        def schedule(upto: int) -> None:
            nonlocal scheduled
            while scheduled < min(upto, len(files)):
                loads[scheduled] = asyncio.ensure_future(load(files[scheduled]))
                scheduled += 1

        order: dict[str, int] = {}
        to_embed: list[tuple[str, DocumentWrite]] = []  # split, waiting for the embedder
        pending: list[tuple[str, DocumentWrite]] = []  # embedded, waiting to be written

        def fail(paths: Iterable[str], exc: BunkoError) -> None:
            for path in dict.fromkeys(paths):
                error = IngestError(path, type(exc).__name__, exc.message)
                report.errors.append(error)
                if progress:
                    progress("error", path, error)

        async def embed() -> None:
            if not to_embed:
                return
            batch = list(to_embed)
            to_embed.clear()
            try:
                await manager.embed([write for _, write in batch])
            except BunkoError as exc:
                fail((p for p, _ in batch), exc)
                return
            pending.extend(batch)

        async def flush() -> None:
            await embed()
            if not pending:
                return
            batch = list(pending)
            pending.clear()
            try:
                report.documents.extend(await manager.write([write for _, write in batch]))
            except BunkoError as exc:
                fail((p for p, _ in batch), exc)

        async def run_all() -> None:
            for i, path in enumerate(files):
                schedule(i + 1 + max(1, workers))
                if progress:
                    progress("start", str(path), None)
                try:
                    prepared: list[DocumentWrite | IngestResult] = []
                    for document in await loads.pop(i):
                        prepared.append(await manager.prepare(document, embed=False))
                except BunkoError as exc:
                    fail([str(path)], exc)
                    continue
                for item in prepared:  # only now: a file's documents go in together or not at all
                    order.setdefault(item.source, len(order))
                    if isinstance(item, IngestResult):
                        report.documents.append(item)
                    else:
                        to_embed.append((str(path), item))
                if sum(len(w.chunks) for _, w in to_embed) >= EMBED_BATCH_CHUNKS:
                    await embed()
                if progress:
                    progress("done", str(path), None)
                waiting = sum(len(w.chunks) for _, w in pending)
                if waiting >= INGEST_BATCH_CHUNKS or len(pending) >= INGEST_BATCH_DOCUMENTS:
                    await flush()
            await flush()

        # A backend that indexes better after a load (PostgreSQL's HNSW) defers its index to the end.
        bulk = getattr(self._store, "bulk_load", None)
        if bulk is None:
            await run_all()
        else:
            context = bulk(collection)
            await asyncio.to_thread(context.__enter__)
            try:
                await run_all()
            finally:
                await asyncio.to_thread(context.__exit__, None, None, None)
        report.documents.sort(key=lambda r: order.get(r.source, len(order)))
        report.elapsed_ms = (time.perf_counter() - started) * 1000
        return report

    def ingest(self, paths: Iterable[str | os.PathLike[str]], collection: str = DEFAULT_COLLECTION,
               **options: Any) -> IngestReport:
        """Sync form of :meth:`aingest`."""
        return _run(self.aingest(paths, collection, **options))

    def add_document(self, document: Document, collection: str = DEFAULT_COLLECTION) -> IngestResult:
        """Sync form of :meth:`aadd_document`."""
        return _run(self.aadd_document(document, collection))

    # -- search and answers -------------------------------------------------------------
    async def asearch(
        self,
        query: str,
        collection: str = DEFAULT_COLLECTION,
        *,
        top_k: int = 5,
        document_ids: Sequence[str] | None = None,
        threshold: float | None = None,
        mode: SearchMode = "vector",
    ) -> SearchResponse:
        """The best chunks for ``query`` (R21: ``document_ids`` restricts to those documents)."""
        started = time.perf_counter()
        retriever = Retriever(self._engine.embedder, self._store, collection)
        hits = await retriever.search(query, top_k, document_ids=document_ids, threshold=threshold, mode=mode)
        return SearchResponse(hits, (time.perf_counter() - started) * 1000)

    def search(self, query: str, collection: str = DEFAULT_COLLECTION, **options: Any) -> SearchResponse:
        """Sync form of :meth:`asearch`."""
        return _run(self.asearch(query, collection, **options))

    async def aask(
        self,
        question: str,
        collection: str = DEFAULT_COLLECTION,
        *,
        top_k: int = 5,
        document_ids: Sequence[str] | None = None,
        mode: SearchMode = "vector",
    ) -> GenerationResult:
        """An answer to ``question`` with ``[N]`` citations and the cited sources."""
        return await self.pipeline(collection).query(question, top_k, document_ids, mode=mode)

    def ask(self, question: str, collection: str = DEFAULT_COLLECTION, **options: Any) -> GenerationResult:
        """Sync form of :meth:`aask`."""
        return _run(self.aask(question, collection, **options))

    # -- listing and deletion --------------------------------------------------------------
    def collections(self) -> list[Collection]:
        """This tenant's collections."""
        return self._store.list_collections()

    def documents(self, collection: str = DEFAULT_COLLECTION, *, limit: int | None = None,
                  offset: int = 0) -> list[DocumentInfo]:
        """Documents of one collection."""
        return self._store.list_documents(collection, limit, offset)

    def delete_documents(self, document_ids: Sequence[str], collection: str | None = None) -> int:
        """Delete documents by id (in any of this tenant's collections unless one is named)."""
        return self._store.delete_documents(document_ids, collection)
