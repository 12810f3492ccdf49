"""Per-tenant quotas over any SQL backend (see :mod:`bunko.stores.quotas` for what each one limits).

:func:`begin` runs first in a write transaction: it takes the tenant's quota lock (an advisory lock on
PostgreSQL; on SQLite the write transaction already holds the database's) and counts what the tenant holds.
:func:`enforce` runs after the write's own statements: it counts again, with this write in, and raises
``QuotaExceededError`` when the write grew a count past its limit; the caller's transaction then rolls back
whole. Two writers of one tenant therefore
count one after the other, each seeing the other's committed rows, and cannot pass a quota together.
Without a quota on what it holds, a tenant's writes take no lock and count nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..quotas import QUOTA_NAMES, Quota, exceeded

if TYPE_CHECKING:
    from .store import SQLStore

# The advisory lock class of quota checks (one lock per tenant: the tenant's row id is the second key).
_QUOTA_LOCK = 727276
_HELD = ("documents", "chunks", "bytes")


def read_quota(store: SQLStore, conn: Any, tenant_pk: int | None) -> Quota:
    """The tenant's quota (no limits when it has none or no row yet)."""
    if tenant_pk is None:
        return Quota()
    row = store.run(conn, f"SELECT {', '.join(QUOTA_NAMES)} FROM tenant_quotas WHERE tenant_id = ?",
                    (tenant_pk,)).fetchone()
    if row is None:
        return Quota()
    return Quota(*(None if v is None else int(v) for v in row))


def _bytes_expression(store: SQLStore) -> str:
    """The UTF-8 size of a chunk's text in this dialect."""
    return "octet_length(content)" if store.dialect.name == "postgresql" else "length(CAST(content AS BLOB))"


def held(store: SQLStore, conn: Any, tenant_pk: int | None, *, with_bytes: bool = True) -> dict[str, int]:
    """What the tenant holds: documents, chunks and (``with_bytes``: a scan of its chunks) bytes of chunk text."""
    if tenant_pk is None:
        return {"documents": 0, "chunks": 0, "bytes": 0}
    documents, chunks = store.run(conn, "SELECT coalesce(sum(document_count), 0), coalesce(sum(chunk_count), 0) "
                                        "FROM collections WHERE tenant_id = ?", (tenant_pk,)).fetchone()
    size = 0
    if with_bytes:
        size = int(store.run(conn, f"SELECT coalesce(sum({_bytes_expression(store)}), 0) FROM chunks "
                                   "WHERE tenant_id = ?", (tenant_pk,)).fetchone()[0])
    return {"documents": int(documents), "chunks": int(chunks), "bytes": size}


def uploaded_today(store: SQLStore, conn: Any, tenant_pk: int | None) -> int:
    """Bytes of the files the tenant uploaded over HTTP in the last 24 hours (its upload jobs' sizes)."""
    if tenant_pk is None:
        return 0
    since = ("now() - interval '1 day'" if store.dialect.name == "postgresql"
             else "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', '-1 day')")
    return int(store.run(conn, f"SELECT coalesce(sum(file_size), 0) FROM jobs WHERE tenant_id = ? "
                               f"AND created_at > {since}", (tenant_pk,)).fetchone()[0])


def lock(store: SQLStore, conn: Any, tenant_pk: int) -> None:
    """Hold the tenant's quota lock until the transaction ends (SQLite: its write lock is already held)."""
    if store.dialect.name == "postgresql":
        store.run(conn, "SELECT pg_advisory_xact_lock(CAST(? AS integer), CAST(? AS integer))",
                  (_QUOTA_LOCK, tenant_pk % 2**31))


@dataclass(slots=True)
class QuotaGuard:
    """The held quotas of a tenant and what it held when a write began (under the quota lock)."""

    limits: dict[str, int]
    before: dict[str, int]


def begin(store: SQLStore, conn: Any, tenant_pk: int) -> QuotaGuard | None:
    """At the start of a write transaction: take the tenant's quota lock and count what it holds (None, and
    no lock, when no quota limits what it holds)."""
    quota = read_quota(store, conn, tenant_pk)
    limits = {name: int(getattr(quota, name)) for name in _HELD if getattr(quota, name) is not None}
    if not limits:
        return None
    lock(store, conn, tenant_pk)
    return QuotaGuard(limits, held(store, conn, tenant_pk, with_bytes="bytes" in limits))


def enforce(store: SQLStore, conn: Any, tenant_pk: int, guard: QuotaGuard | None) -> None:
    """At the end of a write transaction begun with :func:`begin`: refuse (``QuotaExceededError``, and the
    transaction rolls back whole) a write that grew a count past its quota."""
    if guard is None:
        return
    now = held(store, conn, tenant_pk, with_bytes="bytes" in guard.limits)
    for name, limit in guard.limits.items():
        grew = now[name] - guard.before[name]
        if grew > 0 and now[name] > limit:
            raise exceeded(name, limit, guard.before[name], grew, " bytes" if name == "bytes" else "")


def check_room(store: SQLStore, conn: Any, tenant_pk: int | None, quota: Quota, *, upload_bytes: int = 0) -> None:
    """Before work starts: refuse (``QuotaExceededError``) when a held quota is already reached, or when
    ``upload_bytes`` more would pass the uploads-per-day quota. What a write adds is checked by :func:`enforce`."""
    limits = {name: getattr(quota, name) for name in _HELD if getattr(quota, name) is not None}
    if limits:
        now = held(store, conn, tenant_pk, with_bytes="bytes" in limits)
        for name, limit in limits.items():
            if now[name] >= limit:
                raise exceeded(name, limit, now[name], None, " bytes" if name == "bytes" else "")
    if quota.upload_bytes_per_day is not None and upload_bytes:
        used = uploaded_today(store, conn, tenant_pk)
        if used + upload_bytes > quota.upload_bytes_per_day:
            raise exceeded("upload_bytes_per_day", quota.upload_bytes_per_day, used, upload_bytes, " bytes")


__all__ = ["QuotaGuard", "begin", "check_room", "enforce", "held", "lock", "read_quota", "uploaded_today"]
