"""Upload jobs: the file is spooled under ``BUNKO_HOME/spool`` and processed in the background.

Processing is the ingest runner's (:mod:`bunko.ingest`), as for ``bunko ingest``. The document's
source is the file name within its collection, so an upload of a file with the same name is a new
version of the same document; its job then carries the document's id (see ``routes.upload_document``).

The job's state lives in the store (:mod:`bunko.stores.service`), so any worker answers
``GET /documents/{id}``. The worker that took the upload processes it, renewing the job's lease
while it runs; if that worker dies, the lease runs out and the next reader marks the job
``failed`` with the reason. The spooled bytes are removed when processing ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from pathlib import Path
from typing import Any

from ..engine import Tenant
from ..errors import BunkoError
from ..ingest import IngestItem
from ..loaders import LoadOptions, load_path
from ..stores.base import VectorStore
from ..stores.service import LEASE_SECONDS, Job, ServiceRecords
from ..types import Document

logger = logging.getLogger(__name__)


def upload_item(job: Job, path: Path, max_bytes: int) -> IngestItem:
    """The upload as one document whose source is its file name: uploading a changed file with the
    same name into the same collection makes a new version of the same document (R4)."""

    def load() -> list[Document]:
        documents = load_path(path, LoadOptions(max_bytes=max_bytes))
        document = documents[0] if len(documents) == 1 else Document(
            "\n\n".join(d.content for d in documents), dict(documents[0].metadata) if documents else {})
        document.id = job.id
        document.metadata.update(job.metadata)
        document.metadata.update(source=job.filename, source_type="api", filename=job.filename)
        return [document]

    return IngestItem(job.filename, load)


class JobRunner:
    """Processes this worker's uploads, at most ``concurrency`` at a time."""

    def __init__(self, records: ServiceRecords, spool: Path, concurrency: int, max_bytes: int) -> None:
        self.records = records
        self.spool = spool
        self.max_bytes = max_bytes
        self._semaphore = asyncio.Semaphore(concurrency)
        self._tasks: set[asyncio.Task[Any]] = set()

    def start(self, scope: Tenant, store: VectorStore, job: Job, path: Path) -> asyncio.Task[Job]:
        """Process ``job`` in the background; the task's result is the finished job."""
        task = asyncio.create_task(self.run(scope, store, job, path))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _renew(self, store: VectorStore, job_id: str) -> None:
        while True:
            await asyncio.sleep(LEASE_SECONDS / 4)
            try:
                await asyncio.to_thread(self.records.renew_job, store, job_id, time.time() + LEASE_SECONDS)
            except BunkoError as exc:  # the next renewal may work; the lease is four times longer
                logger.warning("could not renew the lease of job %s: %s", job_id, exc.message)

    async def run(self, scope: Tenant, store: VectorStore, job: Job, path: Path) -> Job:
        """Load, index and record the outcome of one upload (through the same runner as ``bunko ingest``)."""
        renew = asyncio.create_task(self._renew(store, job.id))
        started = time.perf_counter()
        status, chunks, code, error = "completed", 0, None, None
        try:
            async with self._semaphore:
                report = await scope.aingest_items([upload_item(job, path, self.max_bytes)], job.collection)
            if report.errors:
                failure = report.errors[0]
                status, code = "failed", failure.code
                error = failure.message.replace(str(path), job.filename).replace(str(path.parent), "")
            else:
                chunks = report.documents[0].chunks
        except BunkoError as exc:  # the collection refuses (another analyzer, embedder, ...)
            status, code = "failed", exc.code
            error = exc.message.replace(str(path), job.filename).replace(str(path.parent), "")
        except Exception:
            logger.exception("unexpected error while processing upload %s", job.id)
            status, code, error = "failed", "INTERNAL_ERROR", "unexpected error while processing (see the server log)"
        finally:
            renew.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renew
            shutil.rmtree(path.parent, ignore_errors=True)
        elapsed = (time.perf_counter() - started) * 1000
        try:
            kept = await asyncio.to_thread(self.records.finish_job, store, job.id, status, chunk_count=chunks,
                                           processing_time_ms=elapsed, error_code=code, error=error)
            if not kept and status == "completed":  # deleted or erased while it was processing
                await asyncio.to_thread(store.delete_documents, [job.id])
        except BunkoError as exc:  # the lease runs out and a reader marks the job failed
            logger.error("could not record the end of job %s: %s", job.id, exc.message)
        job.status, job.chunk_count, job.processing_time_ms = status, chunks, elapsed
        job.error_code, job.error = code, error
        return job

    async def aclose(self) -> None:
        """Wait for running jobs (bounded by the server's shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
