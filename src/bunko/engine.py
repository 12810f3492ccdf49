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
convenience that runs it on a fresh event loop. ``astream_ask`` streams an answer as
events (R27), for a server to send as SSE.

Every embedding call, LLM call, search and upsert a tenant's operation causes is recorded
in that tenant's usage records (R13, see :mod:`bunko.usage`); ``Tenant.usage()`` sums them.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from . import usage as metering
from .config import DEFAULT_COLLECTION, Settings
from .embedders import get_embedder
from .errors import BunkoError
from .filters import Filter, FilterLike, build_filter
from .generation import Generator, LLMProvider
from .indexing import IndexManager
from .llm import LLMMessage, get_llm
from .loaders import LoadOptions, Skipped, discover, load_path
from .pipeline import RAGPipeline, StreamEvent
from .preprocess import Preprocessor
from .rerankers import get_reranker
from .retrieval import Retriever, SearchMode
from .splitters import Splitter, splitter_spec
from .stores import DocumentWrite, StoreBackend, VectorStore, open_backend
from .stores.base import check_conversation_id
from .types import (
    Collection,
    ConversationTurn,
    Document,
    DocumentInfo,
    GenerationResult,
    IngestResult,
    SearchHit,
    UsageTotal,
)

T = TypeVar("T")

# Documents are written in transactions of about this many chunks (or documents): one commit
# per document would spend most of bulk ingest in commits (FTS5 segments, index pages).
INGEST_BATCH_CHUNKS = 2000
INGEST_BATCH_DOCUMENTS = 64
# Files read and parsed ahead of the embedder, in threads.
LOAD_WORKERS = 4
# Chunks of several small documents are embedded together, so the embedder sees full batches.
EMBED_BATCH_CHUNKS = 256
# Earlier turns fed back to the LLM are cut to this many characters each (the turn count is a setting).
HISTORY_TURN_CHARS = 2000


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
    filter: Filter | None = None  # the metadata filter applied (shortcuts included), if any

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict in the CLI's ``search --json`` shape."""
        data: dict[str, Any] = {"results": [h.to_dict() for h in self.results],
                                "search_time_ms": round(self.search_time_ms, 2)}
        if self.filter is not None:
            data["filter"] = self.filter.spec
        return data


# Called with (event, path, result_or_error): event is "total" (result = number of files), "start",
# "done" or "error".
IngestProgress = Callable[[str, str, Any], None]


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
        self.backend: StoreBackend = open_backend(self.settings.database_url)
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

        API keys come from the provider's environment variable; ``BUNKO_RERANK_BASE_URL`` points
        a hosted reranker at another server (a proxy, a self-hosted Jina-compatible one).
        """
        if spec not in self._rerankers:
            base_url = os.environ.get("BUNKO_RERANK_BASE_URL")
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

    async def aclose(self) -> None:
        """Close the LLM's and embedder's clients, then the store."""
        await self.aclose_clients()
        self.backend.close()

    def close(self) -> None:
        """Close clients and the store (inside a running event loop only the store; use :meth:`aclose`)."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            asyncio.run(self.aclose())
        else:
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
        return RAGPipeline(index_manager, retriever, self.generator())

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

    def _recorder(self) -> metering.UsageRecorder:
        return metering.UsageRecorder(self._store, anonymize_queries=self._engine.settings.anonymize_search_logs)

    # -- ingest ---------------------------------------------------------------------
    async def aadd_document(self, document: Document, collection: str = DEFAULT_COLLECTION) -> IngestResult:
        """Index one ``Document``."""
        recorder = self._recorder()
        try:
            with metering.recording(recorder):
                return await self.pipeline(collection).index_document(document)
        finally:
            await recorder.aflush()

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
        recorder = self._recorder()
        try:
            with metering.recording(recorder):
                return await self._ingest(paths, collection, progress=progress, splitter=splitter,
                                          analyzer=analyzer, options=options, workers=workers)
        finally:
            await recorder.aflush()

    async def _ingest(self, paths: Iterable[str | os.PathLike[str]], collection: str, *,
                      progress: IngestProgress | None, splitter: str | None, analyzer: str | None,
                      options: LoadOptions | None, workers: int) -> IngestReport:
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
        filter: FilterLike = None,
        file_types: Sequence[str] | None = None,
        since: str | None = None,
        until: str | None = None,
        date_field: str | None = None,
        fusion: Mapping[str, Any] | None = None,
        mmr_lambda: float | None = None,
        dedupe: bool = False,
        rerank: str | None = None,
    ) -> SearchResponse:
        """The best chunks for ``query``, inside the restriction (R18, R21).

        ``document_ids`` restricts to those documents; ``filter`` is a metadata filter
        (:mod:`bunko.filters`); ``file_types`` (``["pdf", "md"]``) and ``since``/``until`` on
        ``date_field`` (default ``created_at``) are shortcuts ANDed with it. ``fusion``
        (``{"method", "vector_weight", "keyword_weight", "k"}``) tunes a hybrid search;
        ``mmr_lambda``, ``dedupe`` and ``rerank`` (``"cohere:rerank-v3.5"``) trim and reorder
        the hits (see ``Retriever.search``).
        """
        started = time.perf_counter()
        flt = build_filter(filter, file_types=file_types, since=since, until=until, date_field=date_field)
        recorder = self._recorder()
        try:
            with metering.recording(recorder):
                retriever = Retriever(self._engine.embedder, self._store, collection)
                hits = await retriever.search(query, top_k, document_ids=document_ids, threshold=threshold,
                                              mode=mode, filter=flt, **self._search_options(
                                                  fusion, mmr_lambda, dedupe, rerank))
        finally:
            await recorder.aflush()
        return SearchResponse(hits, (time.perf_counter() - started) * 1000, flt)

    def _search_options(self, fusion: Mapping[str, Any] | None, mmr_lambda: float | None, dedupe: bool,
                        rerank: str | None) -> dict[str, Any]:
        """Retriever options beyond the restriction; the reranker is built once per engine and spec."""
        options: dict[str, Any] = {"fusion": fusion, "mmr_lambda": mmr_lambda, "dedupe": dedupe}
        if rerank:
            options["reranker"] = self._engine.reranker(rerank)
        return options

    def search(self, query: str, collection: str = DEFAULT_COLLECTION, **options: Any) -> SearchResponse:
        """Sync form of :meth:`asearch`."""
        return _run(self.asearch(query, collection, **options))

    async def _history(self, conversation_id: str | None) -> tuple[list[LLMMessage], str | None]:
        """Earlier turns of a conversation for the LLM (bounded), and the last question asked in it."""
        limit = self._engine.settings.llm.history_turns
        if conversation_id is None:
            return [], None
        turns = await asyncio.to_thread(self._store.conversation, conversation_id, limit) if limit else []
        history = [LLMMessage(t.role, t.content[:HISTORY_TURN_CHARS]) for t in turns]
        last_question = next((t.content for t in reversed(turns) if t.role == "user"), None)
        return history, last_question

    async def _remember(self, conversation_id: str | None, question: str, response: dict[str, Any]) -> None:
        if conversation_id is None:
            return
        sources = [s["chunk_id"] for s in response.get("sources", [])]
        await asyncio.to_thread(self._store.append_turns, conversation_id, [
            ConversationTurn("user", question),
            ConversationTurn("assistant", response["answer"], {"sources": sources, "model": response["model"]}),
        ])

    def _ask_arguments(self, question: str, history: list[LLMMessage], last_question: str | None) -> dict[str, Any]:
        # A follow-up ("それは何日分？") searches together with the question before it.
        search_query = f"{last_question}\n{question}" if last_question else None
        return {"history": history, "search_query": search_query}

    async def aask(
        self,
        question: str,
        collection: str = DEFAULT_COLLECTION,
        *,
        top_k: int = 5,
        document_ids: Sequence[str] | None = None,
        mode: SearchMode = "vector",
        filter: FilterLike = None,
        file_types: Sequence[str] | None = None,
        since: str | None = None,
        until: str | None = None,
        date_field: str | None = None,
        fusion: Mapping[str, Any] | None = None,
        mmr_lambda: float | None = None,
        dedupe: bool = False,
        rerank: str | None = None,
        conversation_id: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        system_prompt: str | None = None,
    ) -> GenerationResult:
        """An answer to ``question`` with ``[N]`` citations and the cited sources.

        The chunks come from inside the restriction (``document_ids``, ``filter`` and the
        shortcuts, as in :meth:`asearch`). With ``conversation_id``, the conversation's last
        turns go to the LLM, a follow-up question is searched together with the one before it,
        and this question and its answer are added to the conversation (stored in this tenant only).
        """
        if conversation_id is not None:
            check_conversation_id(conversation_id)
        flt = build_filter(filter, file_types=file_types, since=since, until=until, date_field=date_field)
        recorder = self._recorder()
        try:
            with metering.recording(recorder):
                history, last_question = await self._history(conversation_id)
                pipeline = self.pipeline(collection)
                pipeline.generator = self.generator(temperature=temperature, max_tokens=max_tokens,
                                                    system_prompt=system_prompt)
                result = await pipeline.query(question, top_k, document_ids, mode=mode, filter=flt,
                                              search_options=self._search_options(fusion, mmr_lambda, dedupe, rerank),
                                              **self._ask_arguments(question, history, last_question))
                if history:
                    result.usage["history_turns"] = len(history)
                await self._remember(conversation_id, question, result.to_dict())
                return result
        finally:
            await recorder.aflush()

    def ask(self, question: str, collection: str = DEFAULT_COLLECTION, **options: Any) -> GenerationResult:
        """Sync form of :meth:`aask`."""
        return _run(self.aask(question, collection, **options))

    def astream_ask(
        self,
        question: str,
        collection: str = DEFAULT_COLLECTION,
        *,
        top_k: int = 5,
        document_ids: Sequence[str] | None = None,
        mode: SearchMode = "vector",
        filter: FilterLike = None,
        file_types: Sequence[str] | None = None,
        since: str | None = None,
        until: str | None = None,
        date_field: str | None = None,
        fusion: Mapping[str, Any] | None = None,
        mmr_lambda: float | None = None,
        dedupe: bool = False,
        rerank: str | None = None,
        conversation_id: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        system_prompt: str | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """:meth:`aask` as a stream of events (R27): ``async for event in scope.astream_ask(...)``.

        Events: ``search_start``, ``search_results {count}``, ``generation_start``,
        ``token {content}``, ``citation {source}``, ``done {response}``. Errors are raised
        from the iteration. Usage is recorded when the stream ends, also when it is closed early.
        """
        if conversation_id is not None:
            check_conversation_id(conversation_id)
        flt = build_filter(filter, file_types=file_types, since=since, until=until, date_field=date_field)

        async def events() -> AsyncIterator[StreamEvent]:
            history, last_question = await self._history(conversation_id)
            pipeline = self.pipeline(collection)
            pipeline.generator = self.generator(temperature=temperature, max_tokens=max_tokens,
                                                system_prompt=system_prompt)
            stream = pipeline.stream(question, top_k, document_ids, mode=mode, filter=flt,
                                     search_options=self._search_options(fusion, mmr_lambda, dedupe, rerank),
                                     **self._ask_arguments(question, history, last_question))
            try:
                async for event in stream:
                    if event.type == "done":
                        if history:
                            event.data["response"]["usage"]["history_turns"] = len(history)
                        await self._remember(conversation_id, question, event.data["response"])
                    yield event
            finally:
                await stream.aclose()

        return metering.metered(self._recorder(), events())

    # -- usage and conversations -------------------------------------------------------
    def usage(self, since: datetime | None = None) -> list[UsageTotal]:
        """This tenant's usage (R13) per operation, provider and model, since ``since`` if given."""
        return self._store.usage_summary(since)

    def search_log(self, limit: int = 100) -> list[dict[str, Any]]:
        """This tenant's latest searches (R33), newest first."""
        return self._store.search_log(limit)

    def conversation(self, conversation_id: str) -> list[ConversationTurn]:
        """The stored turns of one of this tenant's conversations, oldest first."""
        return self._store.conversation(conversation_id)

    def delete_conversation(self, conversation_id: str) -> int:
        """Delete one of this tenant's conversations; returns how many turns it had."""
        return self._store.delete_conversation(conversation_id)

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
