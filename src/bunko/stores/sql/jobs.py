"""What an upload job's writes may do (``stores.base.writing_for_job``): the check a store runs in the
transaction that would create a missing collection, so a collection deleted while its upload runs stays
deleted (docs/ARCHITECTURE.md, "Deleting a collection while its uploads run")."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ...errors import CollectionNotFoundError
from ..base import job_writing

if TYPE_CHECKING:
    from .store import SQLStore


def check_job_may_create(store: SQLStore, conn: Any, tenant_pk: int | None, name: str) -> None:
    """Inside an upload job's processing: refuse to create the missing collection ``name`` unless the job is
    still its worker's. The job row is locked until this transaction ends, so a deletion of the collection
    (its jobs first) either comes after the collection exists or before this check."""
    held = job_writing()
    if held is None or store.run(conn, "SELECT 1 FROM collections WHERE tenant_id = ? AND name = ?",
                                 (tenant_pk, name)).fetchone() is not None:
        return
    job_id, worker = held
    if store.run(conn, "SELECT 1 FROM jobs WHERE tenant_id = ? AND uid = ? AND status = 'processing' "
                       f"AND worker = ?{store.dialect.for_update}", (tenant_pk, job_id, worker)).fetchone() is None:
        raise CollectionNotFoundError(f"collection {name!r} was deleted while upload {job_id} was being "
                                      "processed; nothing was written")


__all__ = ["check_job_may_create"]
