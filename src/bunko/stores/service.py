"""The HTTP server's records, kept in the same database as the data: API keys, rate limits, upload jobs.

Everything a server worker needs to answer a request lives here, never in a worker's memory, so
any number of worker processes (``bunko serve --workers N``) can share one store:

- **API keys** are stored as the SHA-256 of a 256-bit random key; the key itself is shown once.
  A key carries its tenant, optionally a user id, and whether it is the tenant's admin key. Keys are
  looked up *before* a tenant is known (the tenant comes from the key, R15), so this table is not
  tenant-scoped; it holds only hashes.
- **Rate-limit windows** count requests per key and fixed one-minute window.
- **Jobs** (tenant data, tenant-scoped like every other table, RLS on PostgreSQL) record each
  uploaded file: ``processing`` → ``completed`` or ``failed`` with the reason. The worker running a
  job renews its lease; a job whose lease ran out (its worker died) is failed with a reason by the
  next reader, so no job stays ``processing`` silently.
- **Erasure** (R34): a user's documents, jobs, search logs, usage records and conversations, or all
  of a tenant's data.

``service_records(backend)`` returns the implementation for a backend (SQLite or PostgreSQL).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import ConfigError, DocumentNotFoundError, VectorStoreError
from .base import StoreBackend, VectorStore

KEY_PREFIX = "bk_"
JOB_STATUSES = ("processing", "completed", "failed")
# A job's worker renews the lease this often; a lease not renewed for LEASE_SECONDS means the worker died.
LEASE_SECONDS = 60.0
_USER_RE = re.compile(r"^[\w][\w.@\-]{0,99}$")


def check_user_id(user_id: str) -> str:
    """A user id as given, or ``ConfigError`` (1-100 letters, digits, ``_ . @ -``)."""
    if not isinstance(user_id, str) or not _USER_RE.match(user_id):
        raise ConfigError(f"invalid user id {user_id!r}: use 1-100 letters, digits, '_', '.', '@' or '-', "
                          "starting with a letter or digit")
    return user_id


def hash_key(api_key: str) -> str:
    """The stored form of an API key (hex SHA-256; the key has 256 random bits, so no salt is needed)."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


def new_api_key() -> str:
    """A fresh API key: ``bk_`` and 43 URL-safe characters (256 random bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def conversation_prefix(user_id: str | None) -> str:
    """The prefix of the stored conversation ids of a user (``u.alice:``) or of tenant keys (``t:``)."""
    return f"u.{user_id}:" if user_id else "t:"


@dataclass(slots=True, frozen=True)
class APIKey:
    """A stored API key (without the key itself)."""

    id: int
    prefix: str
    tenant: str
    user_id: str | None
    admin: bool
    created_at: str
    revoked: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"id": self.id, "prefix": self.prefix, "tenant": self.tenant, "user": self.user_id,
                "admin": self.admin, "created_at": self.created_at, "revoked": self.revoked}


@dataclass(slots=True)
class Job:
    """An uploaded file and its processing state; its id is the document id."""

    id: str
    collection: str
    filename: str
    file_size: int = 0
    mime_type: str = ""
    user_id: str | None = None
    status: str = "processing"
    chunk_count: int = 0
    processing_time_ms: float | None = None
    error_code: str | None = None
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    lease_until: float = 0.0
    created_at: str = ""
    updated_at: str = ""


@dataclass(slots=True)
class Erasure:
    """What an erasure removed (R34)."""

    documents: int = 0
    jobs: int = 0
    search_logs: int = 0
    usage_records: int = 0
    conversation_turns: int = 0
    collections: int = 0

    def to_dict(self) -> dict[str, int]:
        """A JSON-ready dict in the API's camelCase."""
        return {"documents": self.documents, "jobs": self.jobs, "searchLogs": self.search_logs,
                "usageRecords": self.usage_records, "conversationTurns": self.conversation_turns,
                "collections": self.collections}


class ServiceRecords(Protocol):
    """Backend-level records of the server (keys, rate limits) and tenant-bound jobs."""

    def create_tenant(self, tenant: str) -> bool:
        """Register a tenant; False if it already existed."""
        ...

    def tenant_exists(self, tenant: str) -> bool:
        """Whether the tenant is registered (or has data)."""
        ...

    def create_api_key(self, tenant: str, user_id: str | None = None, *, admin: bool = False) -> tuple[str, APIKey]:
        """A new key for an existing tenant: (the key, shown once; its record)."""
        ...

    def authenticate(self, api_key: str) -> APIKey | None:
        """The record of a valid, unrevoked key, or None."""
        ...

    def revoke_api_key(self, key_id: int) -> bool:
        """Revoke a key; False if there was no such key."""
        ...

    def list_api_keys(self, tenant: str) -> list[APIKey]:
        """The keys of a tenant (without the keys themselves)."""
        ...

    def hit(self, key_id: int, window_start: int) -> int:
        """Count one request of a key in a window; returns the window's count so far."""
        ...

    def create_job(self, store: VectorStore, job: Job) -> None:
        """Record a new job in the store's tenant."""
        ...

    def get_job(self, store: VectorStore, job_id: str) -> Job:
        """A job of the store's tenant, or ``DocumentNotFoundError``; a job whose worker died is failed first."""
        ...

    def list_jobs(self, store: VectorStore) -> list[Job]:
        """All jobs of the store's tenant, oldest first (dead workers' jobs failed first)."""
        ...

    def renew_job(self, store: VectorStore, job_id: str, lease_until: float) -> None:
        """Extend a processing job's lease."""
        ...

    def finish_job(self, store: VectorStore, job_id: str, status: str, *, chunk_count: int = 0,
                   processing_time_ms: float | None = None, error_code: str | None = None,
                   error: str | None = None) -> bool:
        """Set a processing job's final state; False if the job no longer exists (erased meanwhile)."""
        ...

    def delete_jobs(self, store: VectorStore, job_ids: list[str]) -> int:
        """Delete jobs of the store's tenant; returns how many existed."""
        ...

    def erase_user(self, store: VectorStore, user_id: str) -> Erasure:
        """Delete a user's documents (with chunks and vectors), jobs, search logs, usage records, conversations."""
        ...

    def erase_tenant(self, store: VectorStore) -> Erasure:
        """Delete all data of the store's tenant (its keys stay valid)."""
        ...


def _stale_error() -> tuple[str, str]:
    return ("JOB_ABANDONED", "processing stopped: the server worker handling this upload exited before it "
            "finished (restart or crash); upload the file again")


class _Common:
    """Logic shared by both backends; subclasses provide the SQL."""

    def _user_document_ids(self, store: VectorStore, user_id: str) -> list[str]:
        raise NotImplementedError

    def _erase_user_rows(self, store: VectorStore, user_id: str) -> Erasure:
        raise NotImplementedError

    def _erase_tenant_rows(self, store: VectorStore) -> Erasure:
        raise NotImplementedError

    def erase_user(self, store: VectorStore, user_id: str) -> Erasure:
        check_user_id(user_id)
        document_ids = self._user_document_ids(store, user_id)
        deleted = store.delete_documents(document_ids) if document_ids else 0
        erasure = self._erase_user_rows(store, user_id)
        erasure.documents = deleted
        return erasure

    def erase_tenant(self, store: VectorStore) -> Erasure:
        collections = store.list_collections()
        documents = sum(c.document_count for c in collections)
        for collection in collections:
            store.delete_collection(collection.name)
        erasure = self._erase_tenant_rows(store)
        erasure.documents, erasure.collections = documents, len(collections)
        return erasure


# -- SQLite -----------------------------------------------------------------------------------------
_JOB_COLUMNS = ("uid, collection, filename, file_size, mime_type, user_id, status, chunk_count, processing_time_ms, "
                "error_code, error, metadata, lease_until, created_at, updated_at")


def _job(row: Any) -> Job:
    metadata = row[11]
    if isinstance(metadata, str):
        metadata = json.loads(metadata)
    created, updated = row[13], row[14]
    return Job(row[0], row[1], row[2], int(row[3]), row[4], row[5], row[6], int(row[7]),
               None if row[8] is None else float(row[8]), row[9], row[10], dict(metadata or {}), float(row[12]),
               created if isinstance(created, str) else created.isoformat(),
               updated if isinstance(updated, str) else updated.isoformat())


def _key(row: Any) -> APIKey:
    created = row[5] if isinstance(row[5], str) else row[5].isoformat()
    return APIKey(int(row[0]), row[1], row[2], row[3], bool(row[4]), created, row[6] is not None)


class SQLiteServiceRecords(_Common):
    """Server records in the embedded SQLite store."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def create_tenant(self, tenant: str) -> bool:
        store = self.backend.for_tenant(tenant)
        with self.backend._write_translated() as conn:
            existed = store._tenant_pk(conn, create=False) is not None
            store._tenant_pk(conn, create=True)
        return not existed

    def tenant_exists(self, tenant: str) -> bool:
        store = self.backend.for_tenant(tenant)
        with self.backend._read() as conn:
            return store._tenant_pk(conn, create=False) is not None

    def create_api_key(self, tenant: str, user_id: str | None = None, *, admin: bool = False) -> tuple[str, APIKey]:
        if user_id is not None:
            check_user_id(user_id)
        if not self.tenant_exists(tenant):
            raise ConfigError(f"tenant {tenant!r} does not exist; create it with `bunko admin tenants create`")
        key = new_api_key()
        with self.backend._write_translated() as conn:
            key_id = conn.execute(
                "INSERT INTO api_keys (key_hash, prefix, tenant, user_id, admin) VALUES (?, ?, ?, ?, ?)",
                (hash_key(key), key[:8], tenant, user_id, int(admin)),
            ).lastrowid
            row = conn.execute("SELECT id, prefix, tenant, user_id, admin, created_at, revoked_at FROM api_keys "
                               "WHERE id = ?", (key_id,)).fetchone()
        return key, _key(row)

    def authenticate(self, api_key: str) -> APIKey | None:
        digest = hash_key(api_key)
        with self.backend._read() as conn:
            row = conn.execute("SELECT id, prefix, tenant, user_id, admin, created_at, revoked_at, key_hash "
                               "FROM api_keys WHERE key_hash = ?", (digest,)).fetchone()
        if row is None or row[6] is not None or not hmac.compare_digest(row[7], digest):
            return None
        return _key(row)

    def revoke_api_key(self, key_id: int) -> bool:
        with self.backend._write_translated() as conn:
            return conn.execute("UPDATE api_keys SET revoked_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') "
                                "WHERE id = ? AND revoked_at IS NULL", (key_id,)).rowcount > 0

    def list_api_keys(self, tenant: str) -> list[APIKey]:
        with self.backend._read() as conn:
            rows = conn.execute("SELECT id, prefix, tenant, user_id, admin, created_at, revoked_at FROM api_keys "
                                "WHERE tenant = ? ORDER BY id", (tenant,)).fetchall()
        return [_key(r) for r in rows]

    def hit(self, key_id: int, window_start: int) -> int:
        with self.backend._write_translated() as conn:
            count = conn.execute(
                "INSERT INTO rate_windows (key_id, window_start, hits) VALUES (?, ?, 1) "
                "ON CONFLICT (key_id, window_start) DO UPDATE SET hits = hits + 1 RETURNING hits",
                (key_id, window_start),
            ).fetchone()[0]
            if count == 1:  # a new window: forget the old ones of this key
                conn.execute("DELETE FROM rate_windows WHERE key_id = ? AND window_start < ?", (key_id, window_start))
        return int(count)

    # -- jobs ------------------------------------------------------------------------
    def create_job(self, store: VectorStore, job: Job) -> None:
        with self.backend._write_translated() as conn:
            tenant_pk = store._tenant_pk(conn, create=True)  # type: ignore[attr-defined]
            conn.execute(
                "INSERT INTO jobs (uid, tenant_id, collection, filename, file_size, mime_type, user_id, status, "
                "metadata, lease_until) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (job.id, tenant_pk, job.collection, job.filename, job.file_size, job.mime_type, job.user_id,
                 job.status, json.dumps(job.metadata, ensure_ascii=False), job.lease_until),
            )

    def _fail_stale(self, conn: Any, tenant_pk: int, now: float) -> None:
        code, message = _stale_error()
        conn.execute("UPDATE jobs SET status = 'failed', error_code = ?, error = ?, "
                     "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') "
                     "WHERE tenant_id = ? AND status = 'processing' AND lease_until < ?",
                     (code, message, tenant_pk, now))

    def get_job(self, store: VectorStore, job_id: str) -> Job:
        with self.backend._read() as conn:
            tenant_pk = store._tenant_pk(conn, create=False)  # type: ignore[attr-defined]
            row = None if tenant_pk is None else conn.execute(
                f"SELECT {_JOB_COLUMNS} FROM jobs WHERE tenant_id = ? AND uid = ?", (tenant_pk, job_id)).fetchone()
        if row is None:
            raise DocumentNotFoundError(f"document {job_id!r} does not exist in tenant {store.tenant!r}")
        job = _job(row)
        if job.status == "processing" and job.lease_until < time.time():
            with self.backend._write_translated() as conn:
                self._fail_stale(conn, tenant_pk, time.time())  # type: ignore[arg-type]
            return self.get_job(store, job_id)
        return job

    def list_jobs(self, store: VectorStore) -> list[Job]:
        with self.backend._read() as conn:
            tenant_pk = store._tenant_pk(conn, create=False)  # type: ignore[attr-defined]
            if tenant_pk is None:
                return []
            stale = conn.execute("SELECT 1 FROM jobs WHERE tenant_id = ? AND status = 'processing' "
                                 "AND lease_until < ? LIMIT 1", (tenant_pk, time.time())).fetchone()
        if stale is not None:
            with self.backend._write_translated() as conn:
                self._fail_stale(conn, tenant_pk, time.time())
        with self.backend._read() as conn:
            rows = conn.execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE tenant_id = ? ORDER BY id",
                                (tenant_pk,)).fetchall()
        return [_job(r) for r in rows]

    def renew_job(self, store: VectorStore, job_id: str, lease_until: float) -> None:
        with self.backend._write_translated() as conn:
            tenant_pk = store._tenant_pk(conn, create=False)  # type: ignore[attr-defined]
            conn.execute("UPDATE jobs SET lease_until = ? WHERE tenant_id = ? AND uid = ? AND status = 'processing'",
                         (lease_until, tenant_pk, job_id))

    def finish_job(self, store: VectorStore, job_id: str, status: str, *, chunk_count: int = 0,
                   processing_time_ms: float | None = None, error_code: str | None = None,
                   error: str | None = None) -> bool:
        if status not in ("completed", "failed"):
            raise VectorStoreError(f"a job ends completed or failed, not {status!r}")
        with self.backend._write_translated() as conn:
            tenant_pk = store._tenant_pk(conn, create=False)  # type: ignore[attr-defined]
            return conn.execute(
                "UPDATE jobs SET status = ?, chunk_count = ?, processing_time_ms = ?, error_code = ?, error = ?, "
                "updated_at = strftime('%Y-%m-%dT%H:%M:%fZ', 'now') WHERE tenant_id = ? AND uid = ?",
                (status, chunk_count, processing_time_ms, error_code, error, tenant_pk, job_id),
            ).rowcount > 0

    def delete_jobs(self, store: VectorStore, job_ids: list[str]) -> int:
        if not job_ids:
            return 0
        with self.backend._write_translated() as conn:
            tenant_pk = store._tenant_pk(conn, create=False)  # type: ignore[attr-defined]
            marks = ",".join("?" * len(job_ids))
            return conn.execute(f"DELETE FROM jobs WHERE tenant_id = ? AND uid IN ({marks})",
                                (tenant_pk, *job_ids)).rowcount

    def _user_document_ids(self, store: VectorStore, user_id: str) -> list[str]:
        with self.backend._read() as conn:
            tenant_pk = store._tenant_pk(conn, create=False)  # type: ignore[attr-defined]
            rows = conn.execute("SELECT uid FROM jobs WHERE tenant_id = ? AND user_id = ?",
                                (tenant_pk, user_id)).fetchall()
        return [r[0] for r in rows]

    def _erase_user_rows(self, store: VectorStore, user_id: str) -> Erasure:
        prefix = conversation_prefix(user_id)
        with self.backend._write_translated() as conn:
            tenant_pk = store._tenant_pk(conn, create=False)  # type: ignore[attr-defined]
            erasure = Erasure()
            if tenant_pk is None:
                return erasure
            args = (tenant_pk, user_id)
            erasure.jobs = conn.execute("DELETE FROM jobs WHERE tenant_id = ? AND user_id = ?", args).rowcount
            erasure.search_logs = conn.execute("DELETE FROM search_logs WHERE tenant_id = ? AND user_id = ?",
                                               args).rowcount
            erasure.usage_records = conn.execute("DELETE FROM usage_records WHERE tenant_id = ? AND user_id = ?",
                                                 args).rowcount
            erasure.conversation_turns = conn.execute(
                "DELETE FROM conversation_turns WHERE tenant_id = ? AND substr(conversation_id, 1, ?) = ?",
                (tenant_pk, len(prefix), prefix)).rowcount
        return erasure

    def _erase_tenant_rows(self, store: VectorStore) -> Erasure:
        with self.backend._write_translated() as conn:
            tenant_pk = store._tenant_pk(conn, create=False)  # type: ignore[attr-defined]
            erasure = Erasure()
            if tenant_pk is None:
                return erasure
            erasure.jobs = conn.execute("DELETE FROM jobs WHERE tenant_id = ?", (tenant_pk,)).rowcount
            erasure.search_logs = conn.execute("DELETE FROM search_logs WHERE tenant_id = ?", (tenant_pk,)).rowcount
            erasure.usage_records = conn.execute("DELETE FROM usage_records WHERE tenant_id = ?",
                                                 (tenant_pk,)).rowcount
            erasure.conversation_turns = conn.execute("DELETE FROM conversation_turns WHERE tenant_id = ?",
                                                      (tenant_pk,)).rowcount
        return erasure


# -- PostgreSQL -------------------------------------------------------------------------------------
class PostgresServiceRecords(_Common):
    """Server records in PostgreSQL; jobs go through the tenant's RLS-checked transactions."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    def _global(self) -> Any:
        # Keys and rate windows are not tenant data; an empty tenant setting makes RLS tables invisible.
        return self.backend.transaction("", None)

    def create_tenant(self, tenant: str) -> bool:
        store = self.backend.for_tenant(tenant)
        existed = self.tenant_exists(tenant)
        with store._tx(create=True):
            pass
        return not existed

    def tenant_exists(self, tenant: str) -> bool:
        store = self.backend.for_tenant(tenant)
        with store._tx() as (_, tenant_pk):
            return tenant_pk is not None

    def create_api_key(self, tenant: str, user_id: str | None = None, *, admin: bool = False) -> tuple[str, APIKey]:
        if user_id is not None:
            check_user_id(user_id)
        if not self.tenant_exists(tenant):
            raise ConfigError(f"tenant {tenant!r} does not exist; create it with `bunko admin tenants create`")
        key = new_api_key()
        with self._global() as conn:
            row = conn.execute(
                "INSERT INTO bunko.api_keys (key_hash, prefix, tenant, user_id, admin) VALUES (%s, %s, %s, %s, %s) "
                "RETURNING id, prefix, tenant, user_id, admin, created_at, revoked_at",
                (hash_key(key), key[:8], tenant, user_id, admin),
            ).fetchone()
        return key, _key(row)

    def authenticate(self, api_key: str) -> APIKey | None:
        digest = hash_key(api_key)
        with self._global() as conn:
            row = conn.execute("SELECT id, prefix, tenant, user_id, admin, created_at, revoked_at, key_hash "
                               "FROM bunko.api_keys WHERE key_hash = %s", (digest,)).fetchone()
        if row is None or row[6] is not None or not hmac.compare_digest(row[7], digest):
            return None
        return _key(row)

    def revoke_api_key(self, key_id: int) -> bool:
        with self._global() as conn:
            return conn.execute("UPDATE bunko.api_keys SET revoked_at = now() WHERE id = %s AND revoked_at IS NULL",
                                (key_id,)).rowcount > 0

    def list_api_keys(self, tenant: str) -> list[APIKey]:
        with self._global() as conn:
            rows = conn.execute("SELECT id, prefix, tenant, user_id, admin, created_at, revoked_at "
                                "FROM bunko.api_keys WHERE tenant = %s ORDER BY id", (tenant,)).fetchall()
        return [_key(r) for r in rows]

    def hit(self, key_id: int, window_start: int) -> int:
        with self._global() as conn:
            count = conn.execute(
                "INSERT INTO bunko.rate_windows (key_id, window_start, hits) VALUES (%s, %s, 1) "
                "ON CONFLICT (key_id, window_start) DO UPDATE SET hits = bunko.rate_windows.hits + 1 RETURNING hits",
                (key_id, window_start),
            ).fetchone()[0]
            if count == 1:
                conn.execute("DELETE FROM bunko.rate_windows WHERE key_id = %s AND window_start < %s",
                             (key_id, window_start))
        return int(count)

    # -- jobs ------------------------------------------------------------------------
    def create_job(self, store: VectorStore, job: Job) -> None:
        from psycopg.types.json import Jsonb

        with store._tx(create=True) as (conn, tenant_pk):  # type: ignore[attr-defined]
            conn.execute(
                "INSERT INTO bunko.jobs (uid, tenant_id, collection, filename, file_size, mime_type, user_id, status, "
                "metadata, lease_until) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (job.id, tenant_pk, job.collection, job.filename, job.file_size, job.mime_type, job.user_id,
                 job.status, Jsonb(job.metadata), job.lease_until),
            )

    @staticmethod
    def _fail_stale(conn: Any, tenant_pk: int, now: float) -> None:
        code, message = _stale_error()
        conn.execute("UPDATE bunko.jobs SET status = 'failed', error_code = %s, error = %s, updated_at = now() "
                     "WHERE tenant_id = %s AND status = 'processing' AND lease_until < %s",
                     (code, message, tenant_pk, now))

    def get_job(self, store: VectorStore, job_id: str) -> Job:
        with store._tx() as (conn, tenant_pk):  # type: ignore[attr-defined]
            row = None
            if tenant_pk is not None:
                self._fail_stale(conn, tenant_pk, time.time())
                row = conn.execute(f"SELECT {_JOB_COLUMNS} FROM bunko.jobs WHERE tenant_id = %s AND uid = %s",
                                   (tenant_pk, job_id)).fetchone()
        if row is None:
            raise DocumentNotFoundError(f"document {job_id!r} does not exist in tenant {store.tenant!r}")
        return _job(row)

    def list_jobs(self, store: VectorStore) -> list[Job]:
        with store._tx() as (conn, tenant_pk):  # type: ignore[attr-defined]
            if tenant_pk is None:
                return []
            self._fail_stale(conn, tenant_pk, time.time())
            rows = conn.execute(f"SELECT {_JOB_COLUMNS} FROM bunko.jobs WHERE tenant_id = %s ORDER BY id",
                                (tenant_pk,)).fetchall()
        return [_job(r) for r in rows]

    def renew_job(self, store: VectorStore, job_id: str, lease_until: float) -> None:
        with store._tx() as (conn, tenant_pk):  # type: ignore[attr-defined]
            conn.execute("UPDATE bunko.jobs SET lease_until = %s WHERE tenant_id = %s AND uid = %s "
                         "AND status = 'processing'", (lease_until, tenant_pk, job_id))

    def finish_job(self, store: VectorStore, job_id: str, status: str, *, chunk_count: int = 0,
                   processing_time_ms: float | None = None, error_code: str | None = None,
                   error: str | None = None) -> bool:
        if status not in ("completed", "failed"):
            raise VectorStoreError(f"a job ends completed or failed, not {status!r}")
        with store._tx() as (conn, tenant_pk):  # type: ignore[attr-defined]
            return conn.execute(
                "UPDATE bunko.jobs SET status = %s, chunk_count = %s, processing_time_ms = %s, error_code = %s, "
                "error = %s, updated_at = now() WHERE tenant_id = %s AND uid = %s",
                (status, chunk_count, processing_time_ms, error_code, error, tenant_pk, job_id),
            ).rowcount > 0

    def delete_jobs(self, store: VectorStore, job_ids: list[str]) -> int:
        if not job_ids:
            return 0
        with store._tx() as (conn, tenant_pk):  # type: ignore[attr-defined]
            return conn.execute("DELETE FROM bunko.jobs WHERE tenant_id = %s AND uid = ANY(%s)",
                                (tenant_pk, list(job_ids))).rowcount

    def _user_document_ids(self, store: VectorStore, user_id: str) -> list[str]:
        with store._tx() as (conn, tenant_pk):  # type: ignore[attr-defined]
            rows = conn.execute("SELECT uid FROM bunko.jobs WHERE tenant_id = %s AND user_id = %s",
                                (tenant_pk, user_id)).fetchall()
        return [r[0] for r in rows]

    def _erase_user_rows(self, store: VectorStore, user_id: str) -> Erasure:
        prefix = conversation_prefix(user_id)
        erasure = Erasure()
        with store._tx() as (conn, tenant_pk):  # type: ignore[attr-defined]
            if tenant_pk is None:
                return erasure
            args = (tenant_pk, user_id)
            erasure.jobs = conn.execute("DELETE FROM bunko.jobs WHERE tenant_id = %s AND user_id = %s", args).rowcount
            erasure.search_logs = conn.execute("DELETE FROM bunko.search_logs WHERE tenant_id = %s AND user_id = %s",
                                               args).rowcount
            erasure.usage_records = conn.execute(
                "DELETE FROM bunko.usage_records WHERE tenant_id = %s AND user_id = %s", args).rowcount
            erasure.conversation_turns = conn.execute(
                "DELETE FROM bunko.conversation_turns WHERE tenant_id = %s AND left(conversation_id, %s) = %s",
                (tenant_pk, len(prefix), prefix)).rowcount
        return erasure

    def _erase_tenant_rows(self, store: VectorStore) -> Erasure:
        erasure = Erasure()
        with store._tx() as (conn, tenant_pk):  # type: ignore[attr-defined]
            if tenant_pk is None:
                return erasure
            erasure.jobs = conn.execute("DELETE FROM bunko.jobs WHERE tenant_id = %s", (tenant_pk,)).rowcount
            erasure.search_logs = conn.execute("DELETE FROM bunko.search_logs WHERE tenant_id = %s",
                                               (tenant_pk,)).rowcount
            erasure.usage_records = conn.execute("DELETE FROM bunko.usage_records WHERE tenant_id = %s",
                                                 (tenant_pk,)).rowcount
            erasure.conversation_turns = conn.execute("DELETE FROM bunko.conversation_turns WHERE tenant_id = %s",
                                                      (tenant_pk,)).rowcount
        return erasure


def service_records(backend: StoreBackend) -> ServiceRecords:
    """The server records of a backend (SQLite or PostgreSQL)."""
    scheme = getattr(backend, "scheme", "")
    if scheme == "sqlite":
        return SQLiteServiceRecords(backend)
    if scheme == "postgresql":
        return PostgresServiceRecords(backend)
    raise ConfigError(f"the HTTP server does not support the {type(backend).__name__} store")
