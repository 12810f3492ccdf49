"""The ingest runner: the one path from files, URLs, uploads and documents into a collection (R4, R9).

``bunko ingest``, ``Tenant.ingest`` / ``Tenant.add_document`` and the HTTP upload jobs all
hand their work to :func:`run` as :class:`IngestItem` objects: a label (the path, URL or file name
shown in reports) and a function that loads the item's documents. The runner then

* loads items in ``workers`` threads, ahead of the embedder, consuming them in order;
* normalises and splits each document, and skips one whose content did not change (R4:
  nothing is embedded for it);
* embeds the chunks of several documents together, in the embedder's batches, with the
  embedder's ``concurrency`` requests in flight while the next files load;
* writes embedded documents in transactions of about ``INGEST_BATCH_CHUNKS`` chunks: each
  document is stored whole or not at all, and a new version of a source replaces the old one
  atomically, keeping the document's id.

A failing item is reported (:class:`IngestError`) and the others go on. The runner never
builds an LLM client: ingest works without an LLM key.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from . import crashpoints
from .errors import BunkoError, EmbedderMismatchError, NotFoundError, QuotaExceededError, RAGPipelineError
from .indexing import IndexManager
from .loaders import LoadOptions, Skipped, discover, load_path
from .loaders.url import FetchPolicy
from .stores.base import DocumentWrite, RecordStore
from .types import Document, IngestFailure, IngestResult

# Documents are written in transactions of about this many chunks (or documents): one commit
# per document would spend most of bulk ingest in commits (postings segments, index pages).
INGEST_BATCH_CHUNKS = 2000
INGEST_BATCH_DOCUMENTS = 64
# Files read and parsed ahead of the embedder, in threads.
LOAD_WORKERS = 4
# Chunks waiting for the embedder beyond those in flight, in embedder batches per request slot:
# enough that a request slot freed is filled at once, few enough to bound memory.
EMBED_QUEUE_FACTOR = 2

logger = logging.getLogger(__name__)

# Called with (event, label, result_or_error): event is "total" (result = number of items), "start",
# "done" or "error".
IngestProgress = Callable[[str, str, Any], None]


@dataclass(slots=True)
class IngestItem:
    """One thing to ingest: the label reports use (path, URL, file name) and how to load its documents.

    ``load`` runs in a worker thread; a ``BunkoError`` it raises fails this item only.
    """

    label: str
    load: Callable[[], list[Document]]


@dataclass(slots=True)
class IngestError:
    """An item that could not be ingested, and why."""

    path: str
    type: str
    message: str
    code: str = "BUNKO_ERROR"
    exception: BunkoError | None = field(default=None, repr=False, compare=False)

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

    @property
    def embedded(self) -> int:
        """Chunks this run embedded."""
        return sum(d.embedded for d in self.documents)

    @property
    def reused(self) -> int:
        """Chunks of new versions that took the vector of an identical chunk of the version they replace."""
        return sum(d.reused for d in self.documents)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict in the CLI's ``ingest --json`` shape."""
        return {
            "documents": [d.to_dict() for d in self.documents],
            "chunks": self.chunks,
            "embedded": self.embedded,
            "reused": self.reused,
            "errors": [e.to_dict() for e in self.errors],
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
            "elapsed_ms": round(self.elapsed_ms, 1),
        }


def load_url(url: str, options: LoadOptions, policy: FetchPolicy | None = None) -> list[Document]:
    """Fetch and load a URL (through the SSRF guard of ``loaders.url``)."""
    from .loaders.url import load_url as fetch

    return fetch(url, options, policy=policy)


def path_items(paths: Iterable[str | os.PathLike[str]], options: LoadOptions | None = None,
               policy: FetchPolicy | None = None) -> tuple[list[IngestItem], list[Skipped]]:
    """Items for files, folders (walked) and http(s) URLs, and the paths left out with why.

    URLs are fetched under ``policy`` (None: the default policy with the settings' allow-list).
    """
    options = options or LoadOptions()
    found, skipped = discover(paths)
    items = [IngestItem(str(item), partial(load_url, item, options, policy) if isinstance(item, str)
                        else partial(load_path, item, options)) for item in found]
    return items, skipped


def document_item(document: Document) -> IngestItem:
    """An item for a ``Document`` already in memory."""
    return IngestItem(document.source, lambda: [document])


async def run(manager: IndexManager, items: Sequence[IngestItem], *, progress: IngestProgress | None = None,
              workers: int = LOAD_WORKERS, bulk: bool = False) -> IngestReport:
    """Ingest ``items`` into ``manager``'s collection; see the module docstring.

    ``bulk`` lets a backend that indexes better after a load (PostgreSQL's HNSW) defer its
    index to the end of the run: for many documents, not for one upload.
    """
    started = time.perf_counter()
    await asyncio.to_thread(manager.check_collection)  # another analyzer or splitter: fail before loading
    runner = _Runner(manager, progress, max(1, workers))
    if not bulk:
        await runner.run(items)
    else:
        # A backend without a bulk mode (SQLite) gives a context that does nothing.
        context = manager.vector_store.bulk_load(manager.collection)
        await asyncio.to_thread(context.__enter__)
        try:
            await runner.run(items)
        finally:
            await asyncio.to_thread(context.__exit__, None, None, None)
    report = runner.report
    report.documents.sort(key=lambda r: runner.order.get(r.source, len(runner.order)))
    report.elapsed_ms = (time.perf_counter() - started) * 1000
    logger.info("ingest into collection %r of tenant %r: %d items, %d documents, %d chunks stored, %d failed in %.1f s",
                manager.collection, manager.vector_store.tenant, len(items), len(report.documents), report.chunks,
                len(report.errors), report.elapsed_ms / 1000)
    return report


class _Runner:
    """The state of one run: loads ahead, chunks waiting for the embedder, embedded documents waiting to be written."""

    def __init__(self, manager: IndexManager, progress: IngestProgress | None, workers: int) -> None:
        self.manager = manager
        self.progress = progress
        self.workers = workers
        self.report = IngestReport()
        self.order: dict[str, int] = {}
        self.to_embed: list[tuple[str, DocumentWrite]] = []  # split, waiting for the embedder
        self.embedding: set[asyncio.Task[None]] = set()  # requests in flight (or queued at the embedder's gate)
        self.embedding_chunks = 0
        self.pending: list[tuple[str, DocumentWrite]] = []  # embedded, waiting to be written
        # The batch being written (in a thread) while the next ones load, embed and are analyzed.
        self.writing: tuple[list[tuple[str, DocumentWrite]], asyncio.Task[list[IngestResult]]] | None = None
        self.batch = manager.batch_size
        self.queue_limit = manager.batch_size * manager.concurrency * EMBED_QUEUE_FACTOR

    def fail(self, labels: Iterable[str], exc: BunkoError) -> None:
        for label in dict.fromkeys(labels):
            error = IngestError(label, type(exc).__name__, exc.message, exc.code, exc)
            logger.debug("ingest of %s failed: %s: %s", label, error.type, error.message)
            self.report.errors.append(error)
            if self.progress:
                self.progress("error", label, error)

    async def run(self, items: Sequence[IngestItem]) -> None:
        if self.progress:
            self.progress("total", "", len(items))
        semaphore = asyncio.Semaphore(self.workers)

        async def load(item: IngestItem) -> list[Document]:
            async with semaphore:
                return await asyncio.to_thread(item.load)

        # Start loading up to ``workers`` items ahead; results are consumed in order.
        loads: dict[int, asyncio.Task[list[Document]]] = {}
        scheduled = 0
        try:
            for i, item in enumerate(items):
                while scheduled < min(len(items), i + 1 + self.workers):
                    loads[scheduled] = asyncio.ensure_future(load(items[scheduled]))
                    scheduled += 1
                if self.progress:
                    self.progress("start", item.label, None)
                try:
                    prepared: list[DocumentWrite | IngestResult] = []
                    for document in await loads.pop(i):
                        crashpoints.reach("ingest.loaded")
                        prepared.append(await self.manager.prepare(document, embed=False))
                        crashpoints.reach("ingest.prepared")
                except BunkoError as exc:
                    self.fail([item.label], exc)
                    continue
                for entry in prepared:  # only now: an item's documents go in together or not at all
                    self.order.setdefault(entry.source, len(self.order))
                    if isinstance(entry, IngestResult):
                        self.report.documents.append(entry)
                    else:
                        self.to_embed.append((item.label, entry))
                if sum(len(w.chunks) for _, w in self.to_embed) >= self.batch:
                    await self.start_embedding()
                if self.progress:
                    self.progress("done", item.label, None)
                await self.write(force=False)
            await self.start_embedding()
            while self.embedding:
                await self.wait_for_embedding()
                await self.write(force=False)
            await self.write(force=True)
        finally:
            for task in [*loads.values(), *self.embedding]:  # interrupted: leave nothing running
                task.cancel()
            await asyncio.gather(*loads.values(), *self.embedding, return_exceptions=True)
            if self.writing is not None:  # a transaction under way ends (committed or not) before the run does
                await asyncio.gather(self.writing[1], return_exceptions=True)

    async def start_embedding(self) -> None:
        """Send the waiting chunks to the embedder in the background; wait while too many are queued."""
        if not self.to_embed:
            return
        group, self.to_embed = self.to_embed, []
        size = sum(len(w.chunks) for _, w in group)
        self.embedding_chunks += size

        async def embed() -> None:
            try:
                await self.manager.embed([write for _, write in group])
            except BunkoError as exc:
                self.fail((label for label, _ in group), exc)
            else:
                self.pending.extend(group)
            finally:
                self.embedding_chunks -= size

        task = asyncio.ensure_future(embed())
        self.embedding.add(task)
        task.add_done_callback(self.embedding.discard)
        while self.embedding_chunks > self.queue_limit:
            await self.wait_for_embedding()

    async def wait_for_embedding(self) -> None:
        if self.embedding:
            await asyncio.wait(set(self.embedding), return_when=asyncio.FIRST_COMPLETED)

    async def write(self, *, force: bool) -> None:
        """Write the embedded documents in batches once a batch is full (and all of them, with ``force``): a batch is
        started (its keyword analysis goes to the worker processes), the batch before it is written meanwhile,
        and this one is written in the background while the run goes on (with ``force``, before returning)."""
        while self.pending:
            # A batch ends at INGEST_BATCH_DOCUMENTS documents or once it holds INGEST_BATCH_CHUNKS chunks, however
            # many documents their embedding finished at once; the rest waits for the next batch.
            size, chunks = 0, 0
            while size < min(len(self.pending), INGEST_BATCH_DOCUMENTS) and chunks < INGEST_BATCH_CHUNKS:
                chunks += len(self.pending[size][1].chunks)
                size += 1
            if not force and size < INGEST_BATCH_DOCUMENTS and chunks < INGEST_BATCH_CHUNKS:
                break
            batch, self.pending = self.pending[:size], self.pending[size:]
            try:
                started = await self.manager.begin_write([write for _, write in batch])
            except BunkoError as exc:
                self.fail((label for label, _ in batch), exc)
            else:
                await self.written()
                self.writing = (batch, asyncio.ensure_future(self.manager.finish_write(started)))
        if force:
            await self.written()

    async def written(self) -> None:
        """Wait for the batch being written, if any, and report its documents (or its failure)."""
        if self.writing is None:
            return
        batch, task = self.writing
        try:
            self.report.documents.extend(await task)
        except BunkoError as exc:
            self.fail((label for label, _ in batch), exc)
        finally:
            self.writing = None


def document_result(report: IngestReport, document: Document) -> IngestResult:
    """The result of ingesting one document (``add_document``), or its failure raised: a missing collection,
    another embedder's collection, a tenant quota, or any other error as ``RAGPipelineError`` naming the source."""
    if report.errors:
        error = report.errors[0].exception
        if error is None or isinstance(error, NotFoundError | EmbedderMismatchError | QuotaExceededError):
            raise error or BunkoError(report.errors[0].message)
        raise RAGPipelineError(f"{document.source}: {error.message}") from error
    result = report.documents[0]
    result.processing_time_ms = report.elapsed_ms
    return result


def note_outcome(store: RecordStore, collection: str, items: Sequence[IngestItem], report: IngestReport,
                 paths: Iterable[str | os.PathLike[str]] = ()) -> None:
    """Record the items that failed (``documents list --failed``) and forget earlier failures of those that
    went in now, and of files gone from a folder of ``paths`` (ingested again)."""
    failed = {e.path: e for e in report.errors}
    done = [item.label for item in items if item.label not in failed]
    names = [str(os.fspath(p)) for p in paths]
    folders = [os.path.realpath(p) for p in names if "://" not in p and os.path.isdir(p)]
    if folders:
        for earlier in store.failures.list(collection):
            source = earlier.source
            if earlier.source not in failed and "://" not in source and not os.path.exists(source) and any(
                    os.path.commonpath([folder, source]) == folder for folder in folders if os.path.isabs(source)):
                done.append(source)
    store.failures.record(
        collection, [IngestFailure(collection, e.path, e.type, e.code, e.message) for e in failed.values()], done)


__all__ = ["IngestError", "IngestItem", "IngestProgress", "IngestReport", "document_item", "document_result",
           "note_outcome", "path_items", "run"]
