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

Each operation has an async form (``aingest``, ``asearch``, ``aask``, ``aupsert``, ``aquery``)
and a sync convenience that runs it on a fresh event loop. ``astream_ask`` streams an answer
as events (R27), for a server to send as SSE. Searches and questions are
:mod:`bunko.requests` objects; the keyword arguments of ``search`` and ``ask`` build them.

The tenant only wires the layers together: ingest runs in :mod:`bunko.ingest`, search in
:class:`~bunko.retrieval.Retriever`, answers in :class:`~bunko.pipeline.RAGPipeline`, and
conversations in :mod:`bunko.conversations`.

Every embedding call, LLM call, search and upsert a tenant's operation causes is recorded
in that tenant's usage records (R13, see :mod:`bunko.usage`); ``Tenant.usage()`` sums them.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Awaitable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from . import ingest as runner
from . import metrics, vectors
from . import usage as metering
from .config import DEFAULT_COLLECTION, Settings
from .conversations import Conversations
from .embedders import get_embedder
from .errors import (
    BunkoError,
    EmbedderMismatchError,
    NotFoundError,
    RAGPipelineError,
)
from .filters import Filter
from .generation import Generator, LLMProvider
from .indexing import IndexManager
from .ingest import (
    INGEST_BATCH_CHUNKS,
    INGEST_BATCH_DOCUMENTS,
    LOAD_WORKERS,
    IngestError,
    IngestItem,
    IngestProgress,
    IngestReport,
    document_item,
    path_items,
)
from .llm import get_llm
from .loaders import LoadOptions
from .loaders.url import FetchPolicy
from .memory import Memory
from .pipeline import RAGPipeline, StreamEvent
from .preprocess import Preprocessor
from .requests import AskRequest, QueryRequest, SearchRequest
from .rerankers import get_reranker
from .search import Retriever, SearchCache
from .splitters import Splitter, splitter_spec
from .stores import StoreBackend, VectorStore, open_backend
from .types import (
    Collection,
    ConversationTurn,
    Document,
    DocumentInfo,
    GenerationResult,
    IngestFailure,
    IngestResult,
    SearchHit,
    UsageTotal,
    VectorRecord,
)

T = TypeVar("T")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise BunkoError("called a sync bunko method inside a running event loop; await the 'a…' form instead")


@dataclass(slots=True)
class SearchResponse:
    """Search hits and how long the search took."""

    results: list[SearchHit]
    search_time_ms: float
    filter: Filter | None = None  # the metadata filter applied (shortcuts included), if any

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict in the CLI's ``search --json`` shape."""
        data: dict[str, Any] = {"results": [h.to_dict() for h in self.results],
                                "search_time_ms": round(self.search_time_ms, 2)}
        if self.filter is not None:
            data["filter"] = self.filter.spec
        return data


class Bunko:
    """An engine over one store; hands out tenant scopes.

    Settings come from the arguments, then environment variables, then ``bunko.toml``
    (or ``config=PATH``), then defaults; see :mod:`bunko.config`. ``embedder`` and
    ``llm`` may be objects (used as given) or ``"provider:model"`` names. ``settings``
    takes any other setting by name (``llm_base_url``, ``temperature``, ``max_tokens``,
    ``system_prompt``, ``context_tokens``, ...).
    """

    def __init__(
        self,
        database_url: str | None = None,
        *,
        home: str | os.PathLike[str] | None = None,
        embedder: Any = None,
        splitter: Splitter | str | dict[str, Any] | None = None,
        llm: LLMProvider | str | None = None,
        analyzer: str | None = None,
        config: str | os.PathLike[str] | None = None,
        **settings: Any,
    ) -> None:
        self.settings = Settings.resolve(database_url, home=home, config=config,
                                         embedder=embedder if isinstance(embedder, str) else None,
                                         llm=llm if isinstance(llm, str) else None, **settings)
        self.backend: StoreBackend = open_backend(self.settings.database_url, self.settings)
        self._embedder = None if isinstance(embedder, str) else embedder
        metering.install(self._embedder)
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
        self._llm: LLMProvider | None = None if isinstance(llm, str) else llm
        metering.install(self._llm)
        self._rerankers: dict[str, Any] = {}
        # Query embeddings and search results, per tenant (R37); sizes from the [cache] settings.
        self.cache = SearchCache(self.settings.cache.query_vectors, self.settings.cache.search_results)
        # Usage records and search logs are written by a background thread, off the request path.
        self.usage_writer = metering.UsageWriter()
        # The keyword analyzer of new collections (None: bunko.analysis.DEFAULT_ANALYZER_NAME);
        # existing collections keep the one they were created with.
        self.analyzer = analyzer

    @property
    def embedder(self) -> Any:
        """The embedder, built on first use (the bundled model loads in about a second)."""
        if self._embedder is None:
            self._embedder = get_embedder(self.settings.embedder, **self.settings.embedder_options())
            metering.install(self._embedder)
        return self._embedder

    @property
    def llm(self) -> LLMProvider | None:
        """The LLM that writes answers, built on first use; None means extractive answers."""
        if self._llm is None and self.settings.llm.spec:
            self._llm = get_llm(self.settings.llm.spec, **self.settings.llm.client_options())
            metering.install(self._llm)
        return self._llm

    @llm.setter
    def llm(self, value: LLMProvider | None) -> None:
        self._llm = value
        metering.install(value)

    def reranker(self, spec: str) -> Any:
        """The reranker ``"provider:model"`` (R22), built once.

        API keys come from the provider's environment variable; the ``rerank.base_url`` setting
        (``BUNKO_RERANK_BASE_URL``, ``[rerank] base_url``) points a hosted reranker at another server
        (a proxy, a self-hosted Jina-compatible one).
        """
        if spec not in self._rerankers:
            base_url = self.settings.rerank.base_url
            reranker = get_reranker(spec, **({"base_url": base_url} if base_url else {}))
            metering.install(reranker)
            self._rerankers[spec] = reranker
        return self._rerankers[spec]

    def tenant(self, name: str) -> Tenant:
        """A scope bound to tenant ``name``; all data access goes through it."""
        return Tenant(self, self.backend.for_tenant(name))

    async def aclose_clients(self) -> None:
        """Close the LLM's and embedder's HTTP clients (of the running event loop); the store stays open."""
        for client in (self._llm, self._embedder, *self._rerankers.values()):
            close = getattr(client, "close", None)
            if close is not None:
                try:
                    await close()
                except Exception:  # closing is best effort; the store must still close
                    pass

    def flush_usage(self) -> None:
        """Wait until the usage records and search logs of finished operations are written."""
        self.usage_writer.flush()

    async def aclose(self) -> None:
        """Close the LLM's and embedder's clients, write the pending usage records, then close the store."""
        await self.aclose_clients()
        await asyncio.to_thread(self.usage_writer.close)
        self.backend.close()

    def close(self) -> None:
        """Close clients, write pending usage records and close the store (inside a running event loop
        the clients stay open; use :meth:`aclose`)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(self.aclose())
        else:
            self.usage_writer.close()
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
        """The tenant-bound store (for low-level access; ``upsert`` and ``query`` below embed for you)."""
        return self._store

    def index_manager(self, collection: str = DEFAULT_COLLECTION, *, splitter: str | None = None,
                      analyzer: str | None = None) -> IndexManager:
        """An ``IndexManager`` over one collection of this tenant (no LLM involved).

        ``splitter`` and ``analyzer`` name the splitter and keyword analyzer of a new collection;
        an existing collection must have been created with the ones named.
        """
        engine = self._engine
        spec = splitter_spec(splitter) if splitter else engine.splitter_spec
        return IndexManager(engine.preprocessor, engine.splitter, engine.embedder, self._store, collection,
                            splitter=spec, analyzer=analyzer or engine.analyzer)

    def pipeline(self, collection: str = DEFAULT_COLLECTION, *, splitter: str | None = None,
                 analyzer: str | None = None, generator: Generator | None = None) -> RAGPipeline:
        """A ``RAGPipeline`` over one collection of this tenant, answering with ``generator``
        (default: :meth:`generator`, which builds the LLM client if one is configured)."""
        return RAGPipeline(self.index_manager(collection, splitter=splitter, analyzer=analyzer),
                           self.retriever(collection), generator or self.generator())

    def retriever(self, collection: str = DEFAULT_COLLECTION) -> Retriever:
        """A ``Retriever`` over one collection of this tenant, with the engine's embedder and rerankers."""
        return Retriever(self._engine.embedder, self._store, collection, rerankers=self._engine.reranker,
                         cache=self._engine.cache)

    def generator(self, *, temperature: float | None = None, max_tokens: int | None = None,
                  system_prompt: str | None = None) -> Generator:
        """A ``Generator`` with the engine's LLM and settings; arguments override them for one call."""
        engine, llm = self._engine, self._engine.settings.llm
        return Generator(
            engine.llm,
            system_prompt=system_prompt or llm.system_prompt,
            embedder=engine.embedder,
            temperature=llm.temperature if temperature is None else temperature,
            max_tokens=max_tokens or llm.max_tokens,
            context_tokens=llm.context_tokens,
        )

    def conversations(self) -> Conversations:
        """This tenant's conversations, as questions with a ``conversation_id`` use them."""
        return Conversations(self._store, self._engine.settings.llm.history_turns)  # type: ignore[arg-type]

    def _recorder(self) -> metering.UsageRecorder:
        return metering.UsageRecorder(self._store, anonymize_queries=self._engine.settings.anonymize_search_logs)

    async def _metered(self, work: Awaitable[T]) -> T:
        """Run ``work`` with its usage recorded for this tenant (written when it ends, also on error)."""
        recorder = self._recorder()
        try:
            with metering.recording(recorder):
                return await work
        finally:
            self._engine.usage_writer.submit(recorder)

    # -- ingest ---------------------------------------------------------------------
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

        See :mod:`bunko.ingest`: files are read by ``workers`` threads ahead of the embedder,
        embedded with the embedder's concurrency and written in batches; each document is
        stored whole or not at all, so an interrupted run leaves only whole documents behind
        and running again finishes it.
        """
        paths = list(paths)  # read twice: to ingest, then to see which folders were ingested again
        items, skipped = path_items(paths, options, FetchPolicy.from_settings(self._engine.settings))
        report = await self.aingest_items(items, collection, progress=progress, splitter=splitter,
                                          analyzer=analyzer, workers=workers, bulk=True)
        report.skipped[:0] = skipped
        await asyncio.to_thread(self._note_outcome, collection, items, report, paths)
        return report

    def _note_outcome(self, collection: str, items: Sequence[IngestItem], report: IngestReport,
                      paths: Iterable[str | os.PathLike[str]] = ()) -> None:
        """Record the items that failed (``documents list --failed``) and forget earlier failures of those
        that went in now, and of files gone from a folder ingested again."""
        failed = {e.path: e for e in report.errors}
        done = [item.label for item in items if item.label not in failed]
        names = [str(os.fspath(p)) for p in paths]
        folders = [os.path.realpath(p) for p in names if "://" not in p and os.path.isdir(p)]
        if folders:
            for earlier in self._store.ingest_failures(collection):  # type: ignore[attr-defined]
                source = earlier.source
                if earlier.source not in failed and "://" not in source and not os.path.exists(source) and any(
                        os.path.commonpath([folder, source]) == folder for folder in folders if os.path.isabs(source)):
                    done.append(source)
        self._store.record_ingest_outcome(  # type: ignore[attr-defined]
            collection, [IngestFailure(collection, e.path, e.type, e.code, e.message) for e in failed.values()], done)

    async def aingest_items(self, items: Sequence[IngestItem], collection: str = DEFAULT_COLLECTION, *,
                            progress: IngestProgress | None = None, splitter: str | None = None,
                            analyzer: str | None = None, workers: int = LOAD_WORKERS,
                            bulk: bool = False) -> IngestReport:
        """Ingest prepared items (:class:`~bunko.ingest.IngestItem`: what uploads and ``aingest`` hand over)."""
        manager = self.index_manager(collection, splitter=splitter, analyzer=analyzer)
        return await self._metered(runner.run(manager, items, progress=progress, workers=workers, bulk=bulk))

    async def aadd_document(self, document: Document, collection: str = DEFAULT_COLLECTION) -> IngestResult:
        """Index one ``Document``; a new version of its source replaces the old one."""
        report = await self.aingest_items([document_item(document)], collection)
        if report.errors:
            error = report.errors[0].exception
            if error is None or isinstance(error, NotFoundError | EmbedderMismatchError):
                raise error or BunkoError(report.errors[0].message)
            raise RAGPipelineError(f"{document.source}: {error.message}") from error
        result = report.documents[0]
        result.processing_time_ms = report.elapsed_ms
        return result

    def ingest(self, paths: Iterable[str | os.PathLike[str]], collection: str = DEFAULT_COLLECTION,
               **options: Any) -> IngestReport:
        """Sync form of :meth:`aingest`."""
        return _run(self.aingest(paths, collection, **options))

    def add_document(self, document: Document, collection: str = DEFAULT_COLLECTION) -> IngestResult:
        """Sync form of :meth:`aadd_document`."""
        return _run(self.aadd_document(document, collection))

    # -- search and answers -------------------------------------------------------------
    async def asearch(self, query: str | SearchRequest, collection: str | None = None,
                      **options: Any) -> SearchResponse:
        """The best chunks for a :class:`~bunko.requests.SearchRequest` (R18–R22).

        ``asearch("水", "docs", top_k=3, mode="hybrid")`` builds the request from the query and
        the options (``top_k``, ``mode``, ``document_ids``, ``threshold``, ``filter``,
        ``file_types``, ``since``, ``until``, ``date_field``, ``fusion``, ``mmr_lambda``,
        ``dedupe``, ``rerank``); a request is taken as it is.
        """
        started = time.perf_counter()
        request = SearchRequest.build(query, collection, **options).resolved()
        hits = await self._metered(self.retriever(request.collection).search(request))
        seconds = time.perf_counter() - started
        metrics.observe_search(str(request.mode), self.engine.backend.scheme, seconds)
        return SearchResponse(hits, seconds * 1000, request.restriction)

    def search(self, query: str | SearchRequest, collection: str | None = None, **options: Any) -> SearchResponse:
        """Sync form of :meth:`asearch`."""
        return _run(self.asearch(query, collection, **options))

    def _answering(self, request: AskRequest) -> RAGPipeline:
        """The pipeline that answers ``request``: one Generator, with the request's LLM settings."""
        return self.pipeline(request.collection, generator=self.generator(
            temperature=request.temperature, max_tokens=request.max_tokens, system_prompt=request.system_prompt))

    async def aask(self, question: str | AskRequest, collection: str | None = None,
                   **options: Any) -> GenerationResult:
        """An answer to an :class:`~bunko.requests.AskRequest` with ``[N]`` citations and the cited sources.

        Takes the options of :meth:`asearch`, plus ``conversation_id``, ``temperature``,
        ``max_tokens`` and ``system_prompt``. With ``conversation_id``, the conversation's last
        turns go to the LLM, a follow-up question is searched together with the one before it,
        and this question and its answer are added to the conversation (stored in this tenant only).
        """
        request = AskRequest.build(question, collection, **options).resolved()
        conversations = self.conversations()
        conversations.check_id(request.conversation_id)

        async def answer() -> GenerationResult:
            context = await conversations.context(request.conversation_id)
            result = await self._answering(request).query(
                request, history=context.history, search_query=context.search_query(request.query))
            context.annotate(result.usage)
            await conversations.remember(request.conversation_id, request.query, result.to_dict())
            return result

        return await self._metered(answer())

    def ask(self, question: str | AskRequest, collection: str | None = None, **options: Any) -> GenerationResult:
        """Sync form of :meth:`aask`."""
        return _run(self.aask(question, collection, **options))

    def astream_ask(self, question: str | AskRequest, collection: str | None = None,
                    **options: Any) -> AsyncIterator[StreamEvent]:
        """:meth:`aask` as a stream of events (R27): ``async for event in scope.astream_ask(...)``.

        Events: ``search_start``, ``search_results {count}``, ``generation_start``,
        ``token {content}``, ``citation {source}``, ``done {response}``. Errors are raised
        from the iteration. Usage is recorded when the stream ends, also when it is closed early.
        """
        request = AskRequest.build(question, collection, **options).resolved()
        conversations = self.conversations()
        conversations.check_id(request.conversation_id)

        async def events() -> AsyncIterator[StreamEvent]:
            context = await conversations.context(request.conversation_id)
            stream = self._answering(request).stream(
                request, history=context.history, search_query=context.search_query(request.query))
            try:
                async for event in stream:
                    if event.type == "done":
                        response = event.data["response"]
                        context.annotate(response["usage"])
                        await conversations.remember(request.conversation_id, request.query, response)
                    yield event
            finally:
                await stream.aclose()  # type: ignore[attr-defined]

        return metering.metered(self._recorder(), events(), self._engine.usage_writer)

    # -- vectors (R14) -------------------------------------------------------------------
    async def aupsert(self, collection: str, records: Sequence[VectorRecord | Mapping[str, Any]]) -> list[str]:
        """Insert or update records; returns their ids (generated when missing, R14).

        A record (a ``VectorRecord``, or a dict with ``content``, ``metadata``, ``id``, ``vector``,
        ``document_id``) may carry its own vector; one without is embedded from its content by the
        engine's embedder, which must be the collection's. A missing collection is created for the
        engine's embedder. A vector of another dimension than the collection's raises
        ``DimensionMismatchError``; one that is not a list of finite numbers ``VectorStoreError``.
        """
        items = [vectors.record(r, i) for i, r in enumerate(records)]
        if not items:
            return []
        return await self._metered(vectors.upsert(self.index_manager(collection), self.retriever(collection), items))

    def upsert(self, collection: str, records: Sequence[VectorRecord | Mapping[str, Any]]) -> list[str]:
        """Sync form of :meth:`aupsert`."""
        return _run(self.aupsert(collection, records))

    async def aquery(self, collection: str | QueryRequest = DEFAULT_COLLECTION, **options: Any) -> list[SearchHit]:
        """The ``top_k`` records nearest to a vector, or to a text embedded by the collection's embedder (R14).

        ``aquery("notes", vector=[...])`` or ``aquery("notes", text="...")``, with ``top_k``,
        ``threshold``, ``filter``, ``document_ids`` and ``include_content``; or a
        :class:`~bunko.requests.QueryRequest`. A vector of another dimension than the
        collection's raises ``DimensionMismatchError``.
        """
        request = collection if isinstance(collection, QueryRequest) else QueryRequest(collection=collection,
                                                                                      **options)
        request.check()
        return await self._metered(vectors.query(self.retriever(request.collection), request))

    def query(self, collection: str | QueryRequest = DEFAULT_COLLECTION, **options: Any) -> list[SearchHit]:
        """Sync form of :meth:`aquery`."""
        return _run(self.aquery(collection, **options))

    # -- workflows (R30) -------------------------------------------------------------------
    async def arun_workflow(self, spec: Any, input: Mapping[str, Any] | None = None) -> Any:
        """Run a workflow of blocks (a dict, or a JSON/YAML file) in this tenant; see :mod:`bunko.blocks`.

        Returns a ``WorkflowResult`` (``to_dict()``: ``{"workflow", "steps", "output"}``); a failing step
        raises ``BlockError`` naming the step and block. Every block works in this tenant only.
        """
        from .blocks.workflow import arun

        return await arun(self, spec, input)

    def run_workflow(self, spec: Any, input: Mapping[str, Any] | None = None) -> Any:
        """Sync form of :meth:`arun_workflow`."""
        return _run(self.arun_workflow(spec, input))

    # -- agent memory (R31) -------------------------------------------------------------
    @property
    def memory(self) -> Memory:
        """This tenant's agent memory: the default memory store (``.store(name)`` for another); see
        :mod:`bunko.memory`."""
        return Memory(self)

    # -- usage and conversations -------------------------------------------------------
    def usage(self, since: datetime | None = None) -> list[UsageTotal]:
        """This tenant's usage (R13) per operation, provider and model, since ``since`` if given."""
        self._engine.flush_usage()
        return self._store.usage_summary(since)  # type: ignore[attr-defined, no-any-return]

    def search_log(self, limit: int = 100) -> list[dict[str, Any]]:
        """This tenant's latest searches (R33), newest first."""
        self._engine.flush_usage()
        return self._store.search_log(limit)  # type: ignore[attr-defined, no-any-return]

    def conversation(self, conversation_id: str) -> list[ConversationTurn]:
        """The stored turns of one of this tenant's conversations, oldest first."""
        return self.conversations().turns(conversation_id)

    def delete_conversation(self, conversation_id: str) -> int:
        """Delete one of this tenant's conversations; returns how many turns it had."""
        return self.conversations().delete(conversation_id)

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

    def document(self, document_id: str, collection: str | None = None) -> DocumentInfo:
        """One document by id (its source, version, chunk count, times and metadata), or
        ``DocumentNotFoundError``."""
        return self._store.get_document(document_id, collection)

    def ingest_failures(self, collection: str | None = None) -> list[IngestFailure]:
        """Files and URLs whose last ingest failed (in ``collection``, or in any), with the reason; a
        later successful ingest of the same source removes its record."""
        return self._store.ingest_failures(collection)  # type: ignore[attr-defined, no-any-return]

    def delete_collection(self, name: str) -> Collection:
        """Delete a collection with its documents, chunks, vectors and failure records, and the upload
        jobs (and spooled files) of its documents; returns the collection as it was, or raises
        ``CollectionNotFoundError``."""
        from .stores.service import service_records
        from .worker import remove_job_files, spool_root

        collection = self._store.get_collection(name)
        # The jobs first: a worker still processing one then finds it gone and removes what it wrote.
        job_ids = service_records(self._engine.backend).delete_collection_jobs(self._store, name)
        self._store.delete_collection(name)
        if job_ids:
            remove_job_files(spool_root(self._engine.settings), self.name, job_ids)
        return collection


__all__ = ["INGEST_BATCH_CHUNKS", "INGEST_BATCH_DOCUMENTS", "Bunko", "IngestError", "IngestReport",
           "SearchResponse", "Tenant"]
