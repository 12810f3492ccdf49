"""The library entry point: ``Bunko`` opens a store; ``Bunko.tenant(name)`` scopes it.

Everything a caller can do with data goes through a :class:`Tenant`, which holds a store bound to
one tenant (R15). The tenant is chosen once, by whoever builds the scope (the operator's CLI flag,
the server from an API key); no method below takes a tenant id. ``Tenant.for_user(user_id)`` is the
same tenant as one user works in it (an API key's, an upload job's): its usage records and search
logs carry the user, and its conversations are kept in the user's namespace.

    from bunko import Bunko

    with Bunko() as engine:                 # embedded SQLite under BUNKO_HOME
        acme = engine.tenant("acme")
        acme.ingest(["handbook/"], collection="docs")
        print(acme.ask("有給休暇は何日ですか？", collection="docs").answer)

Each operation has an async form (``aingest``, ``asearch``, ``aask``, ``aupsert``, ``aquery``) and a
sync form that runs it on a fresh event loop (:mod:`bunko.sync`). ``astream_ask`` streams an answer as
events (R27), for a server to send as SSE. Searches and questions are :mod:`bunko.requests` objects;
the keyword arguments of ``search`` and ``ask`` build them.

The tenant only wires the layers below it together: ingest runs in :mod:`bunko.ingest`, search in
:class:`~bunko.search.Retriever`, answers in :class:`~bunko.pipeline.RAGPipeline`, conversations in
:mod:`bunko.conversations`, upload jobs in :mod:`bunko.jobs`, agent memory in :mod:`bunko.memory`
and workflows in :mod:`bunko.blocks`. Those never import this module: memory and blocks are handed
the tenant as a :class:`~bunko.scope.TenantServices`.

Every embedding call, LLM call, search and upsert a tenant's operation causes is recorded in that
tenant's usage records (R13) through its :class:`~bunko.usage.Meter`; ``Tenant.usage()`` sums them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from . import ingest as runner
from . import metrics, vectors, workers
from . import usage as metering
from .blocks.workflow import WorkflowResult
from .blocks.workflow import arun as run_workflow_in
from .clients import EngineClients
from .config import DEFAULT_COLLECTION, Settings
from .conversations import ConversationContext
from .errors import StorageFullError
from .generation import LLMProvider
from .ingest import (
    INGEST_BATCH_CHUNKS,
    INGEST_BATCH_DOCUMENTS,
    LOAD_WORKERS,
    IngestError,
    IngestItem,
    IngestProgress,
    IngestReport,
)
from .loaders import LoadOptions
from .loaders.url import FetchPolicy
from .memory import Memory
from .pipeline import StreamEvent, final_result
from .preprocess import Preprocessor
from .requests import AskRequest, QueryRequest, SearchRequest, SearchResponse
from .scope import TenantScope
from .search import SearchCache
from .splitters import Splitter, splitter_spec
from .stores import StoreBackend, open_backend
from .sync import sync_form
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

logger = logging.getLogger(__name__)


class Bunko:
    """An engine over one store; hands out tenant scopes.

    Settings come from the arguments, then environment variables, then ``bunko.toml``
    (or ``config=PATH``), then defaults; see :mod:`bunko.config`. ``embedder`` and
    ``llm`` may be objects (used as given) or ``"provider:model"`` names. ``settings``
    takes any other setting by name (``llm_base_url``, ``temperature``, ``max_tokens``,
    ``system_prompt``, ``context_tokens``, ...).
    """

    def __init__(self, database_url: str | None = None, *, home: str | os.PathLike[str] | None = None,
                 embedder: Any = None, splitter: Splitter | str | dict[str, Any] | None = None,
                 llm: LLMProvider | str | None = None, analyzer: str | None = None,
                 config: str | os.PathLike[str] | None = None, **settings: Any) -> None:
        self.settings = Settings.resolve(database_url, home=home, config=config,
                                         embedder=embedder if isinstance(embedder, str) else None,
                                         llm=llm if isinstance(llm, str) else None, **settings)
        workers.set_worker_count(self.settings.ingest.workers)  # bulk writes' worker processes (None: per core)
        self.backend: StoreBackend = open_backend(self.settings.database_url, self.settings)
        # The embedder, LLM and rerankers every tenant shares (objects given are used as they are).
        self.clients = EngineClients(self.settings, None if isinstance(embedder, str) else embedder,
                                     None if isinstance(llm, str) else llm)
        # A Splitter instance is used as is; a name or spec picks the splitter of new collections
        # (existing collections keep the one they were built with).
        self.splitter: Splitter | None = None if isinstance(splitter, str | dict) else splitter
        self.splitter_spec: dict[str, Any] | None = (splitter_spec(splitter) if isinstance(splitter, str) else
                                                     splitter_spec(**splitter) if isinstance(splitter, dict) else None)
        self.preprocessor = Preprocessor()
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
        return self.clients.embedder

    @property
    def llm(self) -> LLMProvider | None:
        """The LLM that writes answers, built on first use; None means extractive answers."""
        return self.clients.llm

    @llm.setter
    def llm(self, value: LLMProvider | None) -> None:
        self.clients.llm = value

    def reranker(self, spec: str) -> Any:
        """The reranker ``"provider:model"`` (R22), built once; API keys come from the provider's environment
        variable, and ``[rerank] base_url`` points a hosted reranker at another server."""
        return self.clients.reranker(spec)

    def tenant(self, name: str) -> Tenant:
        """A scope bound to tenant ``name``; all data access goes through it."""
        return Tenant(self, self.backend.for_tenant(name))

    async def aclose_clients(self) -> None:
        """Close the LLM's and embedder's HTTP clients (of the running event loop); the store stays open."""
        await self.clients.aclose()

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


class Tenant(TenantScope["Bunko"]):
    """Everything one tenant can do. Build it with ``Bunko.tenant(name)``; ``for_user`` scopes it to a user.

    The store, the layers over it, conversations, jobs and the meter come from :class:`~bunko.scope.TenantScope`.
    """

    # -- ingest (R4, R9; see bunko.ingest) ----------------------------------------------
    async def aingest(self, paths: Iterable[str | os.PathLike[str]], collection: str = DEFAULT_COLLECTION, *,
                      progress: IngestProgress | None = None, splitter: str | None = None,
                      analyzer: str | None = None, options: LoadOptions | None = None,
                      workers: int = LOAD_WORKERS) -> IngestReport:
        """Load and index files, folders and URLs (``workers`` threads read ahead of the embedder); a failing one
        is reported and the rest go on. Each document is stored whole or not at all. Without ``options``, files
        are read with the engine's ``[ocr]`` settings."""
        paths = list(paths)  # read twice: to ingest, then to see which folders were ingested again
        options = options or LoadOptions(**self._engine.settings.ocr.load_options())
        items, skipped = runner.path_items(paths, options, FetchPolicy.from_settings(self._engine.settings))
        report = await self.aingest_items(items, collection, progress=progress, splitter=splitter,
                                          analyzer=analyzer, workers=workers, bulk=True)
        report.skipped[:0] = skipped
        try:
            await asyncio.to_thread(runner.note_outcome, self._store, collection, items, report, paths)
        except StorageFullError as exc:  # the report says what failed (STORAGE_FULL too); the list of failures waits
            if not report.errors:
                raise
            logger.warning("could not record the failed files of this ingest: %s", exc.message)
        return report

    async def aingest_items(self, items: Sequence[IngestItem], collection: str = DEFAULT_COLLECTION, *,
                            progress: IngestProgress | None = None, splitter: str | None = None,
                            analyzer: str | None = None, workers: int = LOAD_WORKERS,
                            bulk: bool = False) -> IngestReport:
        """Ingest prepared items (:class:`~bunko.ingest.IngestItem`: what uploads and ``aingest`` hand over)."""
        manager = self.index_manager(collection, splitter=splitter, analyzer=analyzer)
        return await self.meter.run(runner.run(manager, items, progress=progress, workers=workers, bulk=bulk))

    async def aadd_document(self, document: Document, collection: str = DEFAULT_COLLECTION) -> IngestResult:
        """Index one ``Document``; a new version of its source replaces the old one."""
        report = await self.aingest_items([runner.document_item(document)], collection)
        return runner.document_result(report, document)

    ingest = sync_form(aingest)
    add_document = sync_form(aadd_document)

    # -- search and answers (R18-R22, R27) ----------------------------------------------
    async def asearch(self, query: str | SearchRequest, collection: str | None = None,
                      **options: Any) -> SearchResponse:
        """The best chunks for a :class:`~bunko.requests.SearchRequest`, or one built from ``query`` and the
        options (``top_k``, ``mode``, ``filter``, ``threshold``, ``fusion``, ``rerank``, ... its fields)."""
        started = time.perf_counter()
        request = SearchRequest.build(query, collection, **options).resolved()
        hits = await self.meter.run(self.retriever(request.collection).search(request))
        seconds = time.perf_counter() - started
        metrics.observe_search(str(request.mode), self._engine.backend.scheme, seconds)
        return SearchResponse(hits, seconds * 1000, request.restriction)

    def _answering(self, request: AskRequest, *, stream: bool) -> AsyncIterator[StreamEvent]:
        """The one answering flow of :meth:`aask` and :meth:`astream_ask`: the question in its conversation
        (``Conversations.converse``), answered with the request's LLM settings, streamed or not."""
        conversations = self.conversations()
        conversations.check_id(request.conversation_id)

        def answer(context: ConversationContext) -> AsyncIterator[StreamEvent]:
            generator = self.generator(temperature=request.temperature, max_tokens=request.max_tokens,
                                       system_prompt=request.system_prompt)
            return self.pipeline(request.collection, generator=generator).answer(
                request, history=context.history, search_query=context.search_query(request.query), stream=stream)

        return conversations.converse(request.conversation_id, request.query, answer)

    async def aask(self, question: str | AskRequest, collection: str | None = None,
                   **options: Any) -> GenerationResult:
        """An answer with ``[N]`` citations to an :class:`~bunko.requests.AskRequest` (or one built from the
        search options plus ``conversation_id``, ``temperature``, ``max_tokens``, ``system_prompt``). In a
        conversation, its last turns go to the LLM and the question and answer are added to it."""
        request = AskRequest.build(question, collection, **options).resolved()
        return await self.meter.run(final_result(self._answering(request, stream=False)))

    def astream_ask(self, question: str | AskRequest, collection: str | None = None,
                    **options: Any) -> AsyncIterator[StreamEvent]:
        """:meth:`aask` as a stream of events (``search_start``, ``search_results``, ``generation_start``,
        ``token``, ``citation``, ``done``); errors are raised from the iteration, and usage is recorded when
        the stream ends, also when it is closed early."""
        request = AskRequest.build(question, collection, **options).resolved()
        return self.meter.stream(self._answering(request, stream=True))

    search = sync_form(asearch)
    ask = sync_form(aask)

    # -- vectors (R14; see bunko.vectors) -------------------------------------------------
    async def aupsert(self, collection: str, records: Sequence[VectorRecord | Mapping[str, Any]]) -> list[str]:
        """Insert or update records (``VectorRecord`` s or dicts of their fields); returns their ids. A record
        without a vector is embedded by the engine's embedder, which must be the collection's; a missing
        collection is created for it."""
        items = vectors.records(records)
        if not items:
            return []
        return await self.meter.run(vectors.upsert(self.index_manager(collection), self.retriever(collection), items,
                                                   owner=self.record_owner))

    async def aquery(self, collection: str | QueryRequest = DEFAULT_COLLECTION, **options: Any) -> list[SearchHit]:
        """The ``top_k`` records nearest to a vector or a text: a :class:`~bunko.requests.QueryRequest`, or
        one built from the options (``vector`` or ``text``, ``top_k``, ``threshold``, ``filter``, ...)."""
        request = vectors.query_request(collection, options)
        return await self.meter.run(vectors.query(self.retriever(request.collection), request))

    upsert = sync_form(aupsert)
    query = sync_form(aquery)

    # -- workflows (R30) and agent memory (R31) -------------------------------------------
    async def arun_workflow(self, spec: Any, input: Mapping[str, Any] | None = None) -> WorkflowResult:
        """Run a workflow of blocks (a dict, or a JSON/YAML file) in this tenant; see :mod:`bunko.blocks`. A
        failing step raises ``BlockError`` naming the step and block."""
        return await run_workflow_in(self, spec, input)

    run_workflow = sync_form(arun_workflow)

    @property
    def memory(self) -> Memory:
        """This tenant's agent memory: the default store (``.store(name)`` for another); see :mod:`bunko.memory`."""
        return Memory(self)

    # -- records, listing and deletion ------------------------------------------------------
    def usage(self, since: datetime | None = None) -> list[UsageTotal]:
        """This tenant's usage (R13) per operation, provider and model, since ``since`` if given."""
        self._engine.flush_usage()
        return self._store.usage.summary(since)

    def search_log(self, limit: int = 100, *, user_id: str | None = None) -> list[dict[str, Any]]:
        """This tenant's latest searches (R33), newest first (only ``user_id``'s, when given)."""
        self._engine.flush_usage()
        return self._store.usage.searches(limit, user_id=user_id)

    def conversation(self, conversation_id: str) -> list[ConversationTurn]:
        """The stored turns of one of this tenant's conversations, oldest first."""
        return self.conversations().turns(conversation_id)

    def delete_conversation(self, conversation_id: str) -> int:
        """Delete one of this tenant's conversations; returns how many turns it had."""
        return self.conversations().delete(conversation_id)

    def collections(self) -> list[Collection]:
        """This tenant's collections."""
        return self._store.list_collections()

    def collection(self, name: str) -> Collection:
        """One of this tenant's collections, or ``CollectionNotFoundError``."""
        return self._store.get_collection(name)

    def documents(self, collection: str = DEFAULT_COLLECTION, *, limit: int | None = None,
                  offset: int = 0) -> list[DocumentInfo]:
        """Documents of one collection."""
        return self._store.list_documents(collection, limit, offset)

    def document(self, document_id: str, collection: str | None = None) -> DocumentInfo:
        """One document by id (source, version, chunk count, times and metadata), or ``DocumentNotFoundError``."""
        return self._store.get_document(document_id, collection)

    def delete_documents(self, document_ids: Sequence[str], collection: str | None = None) -> int:
        """Delete documents by id (in any of this tenant's collections unless one is named), their upload jobs
        first and their spooled files after (``bunko.jobs``)."""
        return self.jobs.delete_documents(document_ids, collection)

    def ingest_failures(self, collection: str | None = None) -> list[IngestFailure]:
        """Files and URLs whose last ingest failed (in ``collection``, or in any), with the reason."""
        return self._store.failures.list(collection)

    def delete_collection(self, name: str) -> Collection:
        """Delete a collection with its documents, failure records, upload jobs and spooled files; returns it as
        it was (``CollectionNotFoundError`` when there is none)."""
        return self.jobs.delete_collection(name)


__all__ = ["INGEST_BATCH_CHUNKS", "INGEST_BATCH_DOCUMENTS", "Bunko", "IngestError", "IngestReport",
           "SearchResponse", "Tenant"]
