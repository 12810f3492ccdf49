"""Upload workers: processes apart from the API that claim upload jobs from the store and run them.

The API spools an upload to ``SPOOL/<tenant>/<job id>/<file name>`` and records a job that waits
(``processing``, no lease). Workers -- ``bunko worker`` processes, or the ones each ``bunko serve``
process starts beside itself (``[server] job_workers``, default 1; 0 when separate workers run) --
take jobs from the store:

- **Claim** (:meth:`ServiceRecords.claim_job`): tenants take turns -- the claim goes to the tenant
  with waiting jobs whose last claim is the oldest, in it to the user whose last claim is the oldest,
  and to that user's oldest waiting job (or one whose lease ran out) -- so a tenant (or a user) that
  queued thousands of uploads delays only itself; a tenant with
  ``[server] tenant_jobs_in_flight`` jobs in flight waits its turn (0: no cap). Claims are taken one at
  a time (an advisory lock on PostgreSQL, an immediate transaction on SQLite), so concurrent workers
  never take the same job. Each claim counts an attempt; a job claimed ``job_attempts`` times whose
  worker died again is failed with the reason instead.
- **Heartbeat**: a thread of its own renews the lease every quarter of ``job_lease_seconds``,
  whatever the processing (CPU-bound splitting, a slow provider) is doing, so a live job is never
  declared dead. A renewal that finds the job no longer ours (deleted, erased) is noted.
- **Run**: the ingest runner, as for ``bunko ingest``, in the tenant scope of the job's user
  (``Tenant.for_user``: its usage records carry the user); the document's source is the file name, so
  a file uploaded again under the same name becomes a new version of the same document.
- **Transient failures**: processing that failed on a moment's database failure (``TransientStoreError``:
  a serialization failure, a deadlock, a dropped connection, a busy file; the stores decide which) is
  run again, at least ``STORE_RETRIES`` times and for as long as ``STORE_OUTAGE_SECONDS`` (a database
  restart or failover), with a doubling pause (``STORE_BACKOFF_SECONDS`` up to ``STORE_BACKOFF_CAP_SECONDS``),
  while the job is still ours; any other error fails the job at once.
  Running again is safe: a document is written in one transaction, and one already written is unchanged.
  Recording the job's end is tried again the same way.
- **Finish**: only while this worker holds the job (``WHERE status = 'processing' AND worker = ?``),
  so a job failed or re-claimed meanwhile keeps its state. A job deleted while it ran has its
  document removed again. The spooled file goes when the job has ended.

A worker reaches a tenant's jobs through ``Tenant.jobs`` (:class:`~bunko.jobs.TenantJobs`); only the claim,
which looks across tenants, uses the store's server records directly.

Nothing the API needs lives in a worker: the API processes stay stateless, and any number of them
and of workers can share one PostgreSQL. Workers must see the API's spool folder (``[server]
spool_dir``): run them on the same machine, or put the folder on a shared file system.

Spooled files of jobs that ended without their worker (crash, deletion, erasure) are removed by
:func:`sweep_spool`, which every worker runs when it starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import multiprocessing
import os
import secrets
import shutil
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from .. import crashpoints, metrics
from ..config import Settings
from ..engine import Bunko, Tenant
from ..errors import BunkoError, ConfigError, DocumentNotFoundError, TransientStoreError
from ..ingest import IngestItem
from ..jobs import TenantJobs
from ..loaders import LoadOptions, load_path
from ..spool import remove_job_files, spool_root
from ..stores.base import writing_for_job
from ..stores.service import Claim, Job, service_records
from ..types import Document
from .threads import limit_blas_threads

logger = logging.getLogger(__name__)
T = TypeVar("T")
# Seconds between claims while there is nothing to do.
POLL_SECONDS = 0.5
# A spool folder without a job row is an upload still arriving, unless it is older than this.
ORPHAN_GRACE_SECONDS = 600.0


# -- the spool (see bunko.spool) ------------------------------------------------------------------
def _newest_change(folder: Path) -> float:
    times = [folder.stat().st_mtime]
    times += [p.stat().st_mtime for p in folder.iterdir() if p.exists()]
    return max(times)


def sweep_spool(engine: Bunko, root: Path, *, grace: float = ORPHAN_GRACE_SECONDS) -> int:
    """Remove spooled files whose job has ended or no longer exists; returns the folders removed.

    A job still ``processing`` keeps its file. A folder without a job is left alone for ``grace``
    seconds: its upload may still be arriving (the API spools the file before it records the job).
    """
    if not root.is_dir():
        return 0
    removed = 0
    now = time.time()
    for tenant_dir in [p for p in root.iterdir() if p.is_dir()]:
        try:
            jobs: TenantJobs | None = engine.tenant(tenant_dir.name).jobs
        except ConfigError:
            jobs = None
        if jobs is None or any(p.is_file() for p in tenant_dir.iterdir()):
            # An upload of the older layout (SPOOL/<job id>/<file>): no worker reads it any more.
            if now - _newest_change(tenant_dir) > grace:
                shutil.rmtree(tenant_dir, ignore_errors=True)
                removed += 1
            continue
        for folder in [p for p in tenant_dir.iterdir() if p.is_dir()]:
            try:
                ended = jobs.get(folder.name).status != "processing"
            except DocumentNotFoundError:
                ended = now - _newest_change(folder) > grace
            except OSError:
                continue
            if ended:
                shutil.rmtree(folder, ignore_errors=True)
                removed += 1
        with contextlib.suppress(OSError):
            tenant_dir.rmdir()  # only when empty
    return removed


# -- one upload -------------------------------------------------------------------------------------
def upload_item(job: Job, path: Path, max_bytes: int, options: LoadOptions | None = None) -> IngestItem:
    """The upload as one document whose source is its file name: uploading a changed file with the
    same name into the same collection makes a new version of the same document (R4). ``options``: how
    files are read (the engine's ``[ocr]`` settings), with ``max_bytes`` as the size limit."""

    def load() -> list[Document]:
        documents = load_path(path, dataclasses.replace(options or LoadOptions(), max_bytes=max_bytes))
        document = documents[0] if len(documents) == 1 else Document(
            "\n\n".join(d.content for d in documents), dict(documents[0].metadata) if documents else {})
        document.id = job.id
        document.metadata.update(job.metadata)
        document.metadata.update(source=job.filename, source_type="api", filename=job.filename)
        return [document]

    return IngestItem(job.filename, load)


class Outcome(NamedTuple):
    """How processing one upload ended: its status and chunks (with how they got their vectors), or the error
    (``transient``: a moment's database failure, ``TransientStoreError``, worth trying again)."""

    status: str
    chunks: int
    code: str | None = None
    error: str | None = None
    embedded: int = 0
    reused: int = 0
    transient: bool = False


# Processing that failed on a moment's database failure is tried again at least this many times, and for as
# long as STORE_OUTAGE_SECONDS after the first failure (a restart or a failover of the database), after
# STORE_BACKOFF_SECONDS, doubled each time up to STORE_BACKOFF_CAP_SECONDS.
STORE_RETRIES = 3
STORE_OUTAGE_SECONDS = 120.0
STORE_BACKOFF_SECONDS = 0.5
STORE_BACKOFF_CAP_SECONDS = 8.0


def backoff_delays(retries: int, first: float, cap: float) -> list[float]:
    """The pauses before each retry: ``first``, doubled each time, never more than ``cap``."""
    return [min(cap, first * 2 ** i) for i in range(retries)]


class Heartbeat:
    """Renews a job's lease from its own thread, every quarter of the lease, until stopped."""

    def __init__(self, jobs: TenantJobs, job_id: str, worker: str, lease: float) -> None:
        self.jobs, self.job_id, self.worker, self.lease = jobs, job_id, worker, lease
        self.lost = threading.Event()  # the job is no longer ours (deleted, erased, or failed)
        self.renewals = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"lease-{job_id}", daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.lease / 4):
            try:
                held = self.jobs.renew(self.job_id, time.time() + self.lease, self.worker)
            except BunkoError as exc:  # the next renewal may work: the lease is four renewals long
                logger.warning("could not renew the lease of job %s: %s", self.job_id, exc.message)
                continue
            self.renewals += 1
            if not held:
                self.lost.set()
                return


class Worker:
    """Claims upload jobs from the engine's store and processes them, ``concurrency`` at a time."""

    def __init__(self, engine: Bunko, *, spool: Path | None = None, worker_id: str | None = None,
                 concurrency: int | None = None, poll_seconds: float = POLL_SECONDS,
                 store_retries: int = STORE_RETRIES, store_backoff: float = STORE_BACKOFF_SECONDS,
                 store_outage_seconds: float = STORE_OUTAGE_SECONDS) -> None:
        server = engine.settings.server
        self.engine = engine
        self.records = service_records(engine.backend)
        self.spool = spool or spool_root(engine.settings)
        self.id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
        self.concurrency = concurrency or server.job_concurrency
        self.lease = server.job_lease_seconds
        self.tenant_cap = server.tenant_jobs_in_flight
        self.max_bytes = server.max_upload_bytes
        self.load_options = LoadOptions(**engine.settings.ocr.load_options())
        self.poll_seconds = poll_seconds
        self.processed = 0
        self.store_delays = backoff_delays(store_retries, store_backoff, STORE_BACKOFF_CAP_SECONDS)
        self.store_backoff = store_backoff
        self.store_outage_seconds = store_outage_seconds
        self.store_retries = 0  # processing tried again after a transient database failure, all jobs together

    def claim(self) -> Claim | None:
        """Claim one job (failing, on the way, jobs whose workers died too often)."""
        result = self.records.claim_job(self.id, self.lease, tenant_cap=self.tenant_cap)
        for tenant, job_id in result.failed:
            logger.warning("upload %s of tenant %s failed: its workers exited %s", job_id, tenant,
                           "before it finished too often")
            metrics.count_job("abandoned")
            remove_job_files(self.spool, tenant, [job_id])
        if result.claim is not None and result.claim.attempt > 1:
            metrics.count_job("retried")
        return result.claim

    async def process(self, claim: Claim) -> Job | None:
        """Run one claimed job and record its outcome; returns the job as this worker ended it (None: gone)."""
        tenant = Tenant(self.engine, self.engine.backend.for_tenant(claim.tenant), spool=self.spool)
        jobs = tenant.jobs
        try:
            job = await asyncio.to_thread(jobs.get, claim.job_id)
        except DocumentNotFoundError:
            return None
        folder = jobs.folder(job.id)
        path = folder / job.filename
        crashpoints.reach("job.claimed")
        logger.info("worker %s: upload %s of tenant %s, attempt %d", self.id, job.id, claim.tenant, claim.attempt)
        started = time.perf_counter()
        with Heartbeat(jobs, job.id, self.id, self.lease) as beat, writing_for_job(job.id, self.id):
            outcome = await self._run(tenant.for_user(job.user_id), job, path)
            pauses = self._pauses()
            while outcome.transient and not beat.lost.is_set():  # the database away: tried again, not failed
                delay = next(pauses)
                if delay is None:
                    break
                logger.warning("upload %s: %s; trying again in %.1f s", job.id, outcome.error, delay)
                await asyncio.sleep(delay)
                self.store_retries += 1
                outcome = await self._run(tenant.for_user(job.user_id), job, path)
        status, chunks, code, error = outcome.status, outcome.chunks, outcome.code, outcome.error
        elapsed = (time.perf_counter() - started) * 1000
        finish = partial(jobs.finish, job.id, status, chunk_count=chunks, processing_time_ms=elapsed,
                         error_code=code, error=error, worker=self.id, embedded_chunks=outcome.embedded,
                         reused_chunks=outcome.reused)
        try:
            ours = await self._again_if_transient(finish, f"record the end of upload {job.id}")
            if not ours:
                await asyncio.to_thread(self._after_losing, tenant, jobs, job.id, status, folder)
            else:
                metrics.count_job(status)
                shutil.rmtree(folder, ignore_errors=True)
        except BunkoError as exc:  # the lease runs out and the job is claimed again
            logger.error("could not record the end of job %s: %s", job.id, exc.message)
            return None
        self.processed += 1
        crashpoints.reach("job.finished")
        job.status, job.chunk_count, job.processing_time_ms = status, chunks, elapsed
        job.error_code, job.error = code, error
        job.embedded_chunks, job.reused_chunks = outcome.embedded, outcome.reused
        return job if ours else None

    def _pauses(self) -> Iterator[float | None]:
        """The pauses before each try again after a transient failure: the backoff of ``store_delays``, then
        doubling on (capped) while the outage is younger than ``store_outage_seconds``; None: give up."""
        started = time.monotonic()
        yield from self.store_delays
        delay = self.store_delays[-1] if self.store_delays else self.store_backoff
        while True:
            delay = min(STORE_BACKOFF_CAP_SECONDS, max(delay * 2, self.store_backoff))
            left = self.store_outage_seconds - (time.monotonic() - started)
            if left <= 0:
                break
            yield min(delay, left)
        while True:
            yield None

    async def _again_if_transient(self, call: Callable[[], T], what: str) -> T:
        """``call`` in a thread, tried again after the backoff pauses while it fails with ``TransientStoreError``."""
        for delay in self._pauses():
            try:
                return await asyncio.to_thread(call)
            except TransientStoreError as exc:
                if delay is None:
                    raise
                logger.warning("could not %s: %s; trying again in %.1f s", what, exc.message, delay)
            await asyncio.sleep(delay)
            self.store_retries += 1
        raise AssertionError("unreachable")  # pragma: no cover - _pauses never ends

    def _after_losing(self, tenant: Tenant, jobs: TenantJobs, job_id: str, status: str, folder: Path) -> None:
        """The job ended without us: deleted or erased (remove what we wrote), or ended by another."""
        try:
            current = jobs.get(job_id)
        except DocumentNotFoundError:
            if status == "completed":  # deleted or erased while it was processing
                tenant.delete_documents([job_id])
            shutil.rmtree(folder, ignore_errors=True)
            return
        if current.status != "processing":
            shutil.rmtree(folder, ignore_errors=True)
        # else: another worker holds it now and needs the file

    async def _run(self, scope: Tenant, job: Job, path: Path) -> Outcome:
        """Ingest the upload in ``scope`` (the job's user's: usage and logs carry the user)."""

        def hide(message: str) -> str:
            return message.replace(str(path), job.filename).replace(str(path.parent), "")

        if not path.is_file():
            logger.error("upload %s: %s is missing; the API and the workers must share [server] spool_dir",
                         job.id, path)
            return Outcome("failed", 0, "UPLOAD_MISSING", "the uploaded file is not in the spool folder this worker "
                           "reads; upload the file again")
        try:
            item = upload_item(job, path, self.max_bytes, self.load_options)
            report = await scope.aingest_items([item], job.collection)
        except BunkoError as exc:  # the collection refuses (another analyzer, embedder, ...), or the store failed
            return Outcome("failed", 0, exc.code, hide(exc.message), transient=isinstance(exc, TransientStoreError))
        except Exception:
            logger.exception("unexpected error while processing upload %s", job.id)
            return Outcome("failed", 0, "INTERNAL_ERROR", "unexpected error while processing (see the worker's log)")
        if report.errors:
            failure = report.errors[0]
            return Outcome("failed", 0, failure.code, hide(failure.message),
                           transient=isinstance(failure.exception, TransientStoreError))
        result = report.documents[0]
        return Outcome("completed", result.chunks, embedded=result.embedded, reused=result.reused)

    async def run(self, stop: asyncio.Event, *, max_jobs: int | None = None) -> None:
        """Claim and process jobs until ``stop`` is set (or ``max_jobs`` were processed); running jobs finish."""

        async def slot() -> None:
            while not stop.is_set() and (max_jobs is None or self.processed < max_jobs):
                try:
                    claim = await asyncio.to_thread(self.claim)
                except BunkoError as exc:  # the store is away: try again later
                    logger.warning("worker %s could not claim a job: %s", self.id, exc.message)
                    claim = None
                if claim is None:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(stop.wait(), self.poll_seconds)
                    continue
                await self.process(claim)

        await asyncio.gather(*(slot() for _ in range(self.concurrency)))


def _engine_from(settings: Settings) -> Bunko:
    """An engine over exactly these settings (arguments outrank the environment and the file)."""
    return Bunko(**settings.as_arguments(), config=settings.config_path)


def run_worker(settings: Settings, *, parent_pid: int | None = None, max_jobs: int | None = None) -> int:
    """Run a worker process until SIGTERM/SIGINT (or its parent ``parent_pid`` exits); returns jobs processed."""
    limit_blas_threads(settings.server.blas_threads)
    engine = _engine_from(settings)
    worker = Worker(engine)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)

        async def watch_parent() -> None:
            while parent_pid is not None and not stop.is_set():
                if os.getppid() != parent_pid:  # the API process that started us is gone
                    stop.set()
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)

        watcher = asyncio.create_task(watch_parent())
        removed = await asyncio.to_thread(sweep_spool, engine, worker.spool)
        if removed:
            logger.info("worker %s removed %d spooled uploads whose jobs had ended", worker.id, removed)
        logger.info("bunko worker %s ready (spool %s, lease %.0f s, %d at once)", worker.id, worker.spool,
                    worker.lease, worker.concurrency)
        try:
            await worker.run(stop, max_jobs=max_jobs)
        finally:
            stop.set()
            await watcher
            await engine.aclose()

    asyncio.run(main())
    return worker.processed


def _child(settings: Settings, parent_pid: int) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_worker(settings, parent_pid=parent_pid)


class WorkerProcesses:
    """The worker processes an API process starts beside itself (``[server] job_workers``); restarted if they die."""

    def __init__(self, settings: Settings, count: int) -> None:
        self.settings = settings
        self.count = count
        self._context = multiprocessing.get_context("spawn")
        self._processes: list[Any] = []
        self._stop = threading.Event()
        self._keeper = threading.Thread(target=self._keep, name="bunko-workers", daemon=True)

    def _spawn(self) -> Any:
        process = self._context.Process(target=_child, args=(self.settings, os.getpid()), name="bunko-worker")
        process.start()
        return process

    def start(self) -> None:
        """Start the worker processes and the thread that replaces any that exits."""
        self._processes = [self._spawn() for _ in range(self.count)]
        self._keeper.start()

    def _keep(self) -> None:
        while not self._stop.wait(1.0):
            for i, process in enumerate(self._processes):
                if not process.is_alive() and not self._stop.is_set():
                    logger.warning("upload worker %s exited (code %s); starting another", process.pid,
                                   process.exitcode)
                    self._processes[i] = self._spawn()

    @property
    def pids(self) -> list[int]:
        """The process ids of the workers running now."""
        return [p.pid for p in self._processes]

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM the workers (they finish their running jobs), then kill what is left after ``timeout``."""
        self._stop.set()
        for process in self._processes:
            if process.is_alive():
                process.terminate()
        deadline = time.monotonic() + timeout
        for process in self._processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():  # its job is claimed again once the lease runs out
                process.kill()
                process.join()


__all__ = ["Heartbeat", "Worker", "WorkerProcesses", "run_worker", "sweep_spool", "upload_item"]
