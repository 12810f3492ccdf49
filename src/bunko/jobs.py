"""A tenant's upload jobs, and the one rule that deletes them with their data.

An upload through the HTTP API becomes a job (its id is the document's id) that a worker
(:mod:`bunko.server.worker`) claims and processes; the file waits in the spool (:mod:`bunko.spool`).
:class:`TenantJobs` is one tenant's view of them: ``Tenant.jobs`` hands it out, and the API's routes and
the workers use it instead of the store's server records.

Deleting data that may have jobs follows one rule (:meth:`TenantJobs.delete`): **the jobs first**, then
the data, then the spooled files. A worker still processing a deleted job then finds it gone and removes
what it wrote; deleting the data first would let a worker commit a document, and end its job, in between.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from .spool import job_folder, remove_job_files, remove_tenant_files
from .stores.base import VectorStore
from .stores.service import Erasure, Job, ServiceRecords
from .types import Collection

T = TypeVar("T")


@dataclass(slots=True, frozen=True)
class UploadTarget:
    """What an upload of one file name into a collection meets."""

    document_id: str | None  # the document stored under that name (its new version keeps the id)
    previous: Job | None  # that document's job, if it was uploaded
    busy: Job | None  # a job of the same name and collection still being processed


class TenantJobs:
    """One tenant's upload jobs and their spooled files (build it with ``Tenant.jobs``)."""

    def __init__(self, records: ServiceRecords, store: VectorStore, spool: Path, *,
                 flush: Callable[[], None] | None = None) -> None:
        self._records = records
        self._store = store
        self.spool = spool
        self._flush = flush  # waits until usage records handed over are written (before an erasure)

    @property
    def tenant(self) -> str:
        """The tenant of these jobs."""
        return self._store.tenant

    def folder(self, job_id: str) -> Path:
        """Where the upload of a job waits for its worker."""
        return job_folder(self.spool, self.tenant, job_id)

    def check_upload(self, size: int) -> None:
        """Refuse (``QuotaExceededError``) an upload of ``size`` bytes before its job is queued: the tenant is
        at a quota on what it holds, or the upload would pass its uploads-per-day quota."""
        self._records.check_upload(self._store, size)

    # -- one job ----------------------------------------------------------------------------------
    def create(self, job: Job, *, replace: bool = False, staged: Path | None = None) -> None:
        """Record a job waiting for a worker; ``UploadInProgressError`` while a job of the same file name is
        still processing in its collection (checked in the transaction that records it). ``replace``: the job
        of the document's earlier version (same id) gives way to it. ``staged``: the folder (from
        :meth:`staging`) the upload was spooled to, moved to the job's folder before the job is committed, so
        a worker finds the file as soon as it can claim the job and a refused upload never touches it."""
        place = None if staged is None else (lambda: self._place(staged, job.id))
        self._records.create_job(self._store, job, replace=replace, before_commit=place)

    def staging(self) -> Path:
        """A new folder of this request alone to spool an upload to before its job is recorded (two uploads of
        one document share the job's folder); :func:`bunko.server.worker.sweep_spool` removes it if abandoned."""
        return self.spool / self.tenant / f".arriving-{secrets.token_hex(8)}"

    def _place(self, staged: Path, job_id: str) -> None:
        """Move a staged upload into the job's folder (any older one there belongs to an ended job)."""
        target = self.folder(job_id)
        shutil.rmtree(target, ignore_errors=True)
        staged.rename(target)  # an OSError rolls the job back

    def get(self, job_id: str) -> Job:
        """One job, or ``DocumentNotFoundError``."""
        return self._records.get_job(self._store, job_id)

    def list(self) -> list[Job]:
        """Every job of the tenant."""
        return self._records.list_jobs(self._store)

    def renew(self, job_id: str, lease_until: float, worker: str) -> bool:
        """Extend the lease ``worker`` holds on a job; False when it holds it no longer."""
        return self._records.renew_job(self._store, job_id, lease_until, worker)

    def finish(self, job_id: str, status: str, *, worker: str, chunk_count: int = 0,
               processing_time_ms: float | None = None, error_code: str | None = None,
               error: str | None = None, embedded_chunks: int = 0, reused_chunks: int = 0) -> bool:
        """Record how ``worker`` ended a job; False when the job was no longer its to end."""
        return self._records.finish_job(self._store, job_id, status, chunk_count=chunk_count,
                                        processing_time_ms=processing_time_ms, error_code=error_code,
                                        error=error, worker=worker, embedded_chunks=embedded_chunks,
                                        reused_chunks=reused_chunks)

    def upload_target(self, collection: str, filename: str) -> UploadTarget:
        """The document an upload of ``filename`` into ``collection`` makes a new version of, its job, and a job
        of that name still being processed there."""
        existing = self._store.find_by_source(collection, filename)
        jobs = self.list()
        busy = next((j for j in jobs if j.status == "processing" and j.collection == collection
                     and j.filename == filename), None)
        if existing is None:
            return UploadTarget(None, None, busy)
        return UploadTarget(existing.id, next((j for j in jobs if j.id == existing.id), None), busy)

    # -- deletion ---------------------------------------------------------------------------------
    def delete(self, delete_jobs: Callable[[], Sequence[str]], delete_data: Callable[[], T]) -> T:
        """The deletion rule (see the module doc): ``delete_jobs`` (returning the ids it deleted), then
        ``delete_data``, then the spooled files of those jobs; returns what ``delete_data`` returned."""
        job_ids = delete_jobs()
        result = delete_data()
        remove_job_files(self.spool, self.tenant, job_ids)
        return result

    def delete_documents(self, document_ids: Sequence[str], collection: str | None = None) -> int:
        """Delete documents (of ``collection``, if named) with their jobs and spooled files; returns how many
        documents there were."""
        ids = list(document_ids)
        if collection is not None:  # only those of that collection, and their jobs
            wanted = set(ids)
            ids = [d.id for d in self._store.list_documents(collection) if d.id in wanted]

        def jobs() -> list[str]:
            self._records.delete_jobs(self._store, ids)
            return ids

        return self.delete(jobs, lambda: self._store.delete_documents(ids, collection))

    def delete_collection(self, name: str) -> Collection:
        """Delete a collection with its documents and their jobs and spooled files; returns the collection as it
        was (``CollectionNotFoundError`` when there is none)."""
        collection = self._store.get_collection(name)
        self.delete(lambda: self._records.delete_collection_jobs(self._store, name),
                    lambda: self._store.delete_collection(name))
        return collection

    def erase_user(self, user_id: str) -> Erasure:
        """Erase a user's documents, jobs (and their files), search logs, usage and conversations (R34)."""
        if self._flush is not None:
            self._flush()  # nothing of the user's is written after the erasure
        erasure = self._records.erase_user(self._store, user_id)
        remove_job_files(self.spool, self.tenant, erasure.job_ids)
        return erasure

    def erase_tenant(self) -> Erasure:
        """Erase all of the tenant's data and spooled files (R34); its API keys stay."""
        if self._flush is not None:
            self._flush()
        erasure = self._records.erase_tenant(self._store)
        remove_tenant_files(self.spool, self.tenant)
        return erasure


__all__ = ["TenantJobs", "UploadTarget"]
