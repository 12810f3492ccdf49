"""The HTTP server's records, kept in the same database as the data: API keys, rate limits, upload jobs.

Everything a server worker needs to answer a request lives here, never in a worker's memory, so
any number of worker processes (``bunko serve --workers N``) can share one store:

- **API keys** are stored as the SHA-256 of a 256-bit random key; the key itself is shown once.
  A key carries its tenant, optionally a user id, and whether it is the tenant's admin key. Keys are
  looked up *before* a tenant is known (the tenant comes from the key, R15), so this table is not
  tenant-scoped; it holds only hashes.
- **Rate-limit windows** count requests per key and one-minute window; the limiter (:mod:`bunko.ratelimit`)
  weighs the previous window's count in, a sliding window.
- **Jobs** (tenant data, tenant-scoped like every other table, RLS on PostgreSQL) record each
  uploaded file: ``processing`` → ``completed`` or ``failed`` with the reason, never backwards (the
  updates say ``WHERE status = 'processing'`` and a trigger refuses any other change). A job is a
  queue entry too: a worker process (:mod:`bunko.server.worker`) claims it with a lease
  (:meth:`ServiceRecords.claim_job`), renews the lease from a heartbeat thread while it works, and
  finishes it only while it still holds it. A job whose lease ran out (its worker died) is claimed
  again, up to ``max_attempts`` claims in all, then failed with the reason (by the next claimer or
  reader), so no job stays ``processing`` silently.
- **Operator keys** belong to no tenant: the operator's credential over HTTP (``/api/v1/admin/...``). One may
  list tenants and read and set their quotas, and nothing else: it reads no tenant's data, and a tenant's keys
  (its admin keys too) may not do what it does. Stored as the SHA-256 of 256 random bits like API keys, with
  the prefix ``bko_`` so neither kind is taken for the other; made, listed and revoked by ``bunko admin
  operator-keys`` on the server machine (the owner login on PostgreSQL, where the application role reaches
  them only through definer functions that check the key again).
- **Erasure** (R34): a user's documents, jobs, search logs, usage records and conversations, or all
  of a tenant's data.

``service_records(backend)`` returns a backend's implementation (``StoreBackend.service_records``); the
SQL backends share one, :class:`bunko.stores.sql.service.SQLServiceRecords`.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..errors import ConfigError
from .base import StoreBackend, VectorStore
from .quotas import Quota

KEY_PREFIX = "bk_"
OPERATOR_KEY_PREFIX = "bko_"
JOB_STATUSES = ("processing", "completed", "failed")
# A job's worker renews its lease every quarter of it; a lease not renewed for this long means the worker died.
LEASE_SECONDS = 60.0
# Claims of one job, counting the first: a job whose workers died this often is failed.
MAX_ATTEMPTS = 3
_USER_RE = re.compile(r"^[\w][\w.@\-]{0,99}$")


def check_user_id(user_id: str) -> str:
    """A user id as given, or ``ConfigError`` (1-100 letters, digits, ``_ . @ -``)."""
    if not isinstance(user_id, str) or not _USER_RE.fullmatch(user_id):
        raise ConfigError(f"invalid user id {user_id!r}: use 1-100 letters, digits, '_', '.', '@' or '-', "
                          "starting with a letter or digit")
    return user_id


def hash_key(api_key: str) -> str:
    """The stored form of an API key (hex SHA-256; the key has 256 random bits, so no salt is needed)."""
    return hashlib.sha256(api_key.encode("utf-8")).hexdigest()


def new_api_key() -> str:
    """A fresh API key: ``bk_`` and 43 URL-safe characters (256 random bits)."""
    return KEY_PREFIX + secrets.token_urlsafe(32)


def new_operator_key() -> str:
    """A fresh operator key: ``bko_`` and 43 URL-safe characters (256 random bits)."""
    return OPERATOR_KEY_PREFIX + secrets.token_urlsafe(32)


def is_operator_key(token: str) -> bool:
    """Whether a presented key has the operator keys' form (not whether it is valid)."""
    return token.startswith(OPERATOR_KEY_PREFIX)


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


@dataclass(slots=True, frozen=True)
class OperatorKey:
    """A stored operator key (without the key itself; ``digest`` is its hash, which the store checks again
    in each operator statement)."""

    id: int
    prefix: str
    label: str | None
    created_at: str
    revoked: bool = False
    digest: str = field(default="", repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (never the hash)."""
        return {"id": self.id, "prefix": self.prefix, "label": self.label, "created_at": self.created_at,
                "revoked": self.revoked}


@dataclass(slots=True, frozen=True)
class TenantQuota:
    """A tenant as an operator key sees it: its name, when it was made, and its quota."""

    name: str
    created_at: str
    quota: Quota


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
    lease_until: float = 0.0  # 0: waiting for a worker
    created_at: str = ""
    updated_at: str = ""
    attempts: int = 0  # claims by workers so far
    max_attempts: int = MAX_ATTEMPTS
    worker: str | None = None  # the worker holding the lease
    embedded_chunks: int = 0  # chunks of the upload embedded ...
    reused_chunks: int = 0  # ... and chunks that took the vector of the same chunk of the version replaced


@dataclass(slots=True, frozen=True)
class Claim:
    """A job a worker claimed: its tenant, id and attempt number (1 for the first claim)."""

    tenant: str
    job_id: str
    attempt: int


@dataclass(slots=True)
class ClaimResult:
    """What one claim did: the job claimed (None: nothing to do), and jobs failed on the way
    because their workers died ``max_attempts`` times (``(tenant, job id)``; their spooled files can go)."""

    claim: Claim | None = None
    failed: list[tuple[str, str]] = field(default_factory=list)


@dataclass(slots=True, frozen=True)
class TenantInfo:
    """A registered tenant and what it holds."""

    name: str
    created_at: str
    collections: int = 0
    documents: int = 0
    api_keys: int = 0  # active (unrevoked) keys

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"name": self.name, "created_at": self.created_at, "collections": self.collections,
                "documents": self.documents, "api_keys": self.api_keys}


@dataclass(slots=True)
class Erasure:
    """What an erasure removed (R34)."""

    documents: int = 0
    jobs: int = 0
    search_logs: int = 0
    usage_records: int = 0
    conversation_turns: int = 0
    collections: int = 0
    memories: int = 0
    api_keys: int = 0  # keys removed with a deleted tenant (erasing a tenant's data keeps them)
    ingest_failures: int = 0  # failure records of path and URL ingests (tenant erasure; they name no user)
    job_ids: list[str] = field(default_factory=list)  # the jobs removed (their spooled files go too)

    def to_dict(self) -> dict[str, int]:
        """A JSON-ready dict in the API's camelCase."""
        return {"documents": self.documents, "jobs": self.jobs, "searchLogs": self.search_logs,
                "usageRecords": self.usage_records, "conversationTurns": self.conversation_turns,
                "collections": self.collections, "memories": self.memories, "ingestFailures": self.ingest_failures}


@dataclass(slots=True, frozen=True)
class QuotaStatus:
    """A tenant's quotas beside what it holds and used (``bunko usage``, ``GET /usage``)."""

    quota: Quota
    documents: int = 0
    chunks: int = 0
    bytes: int = 0  # UTF-8 size of the stored chunk text
    upload_bytes_per_day: int = 0  # bytes uploaded over HTTP in the last 24 hours
    requests_per_minute: int = 0  # requests counted in the current minute (only while that quota is set)

    def to_dict(self) -> dict[str, dict[str, int | None]]:
        """Each quota name -> {"limit": the limit or None, "usage": the usage}."""
        return {name: {"limit": getattr(self.quota, name), "usage": getattr(self, name)}
                for name in self.quota.to_dict()}


class ServiceRecords(Protocol):
    """Backend-level records of the server (keys, rate limits) and tenant-bound jobs."""

    def get_quota(self, tenant: str) -> Quota:
        """A tenant's quota (no limits when none was set)."""
        ...

    def set_quota(self, tenant: str, values: dict[str, int | None], clear: set[str] | frozenset[str] = frozenset(),
                  ) -> Quota:
        """Set (``values``; None leaves one as it is) and clear (``clear``) a registered tenant's quotas, as the
        operator; returns the quota now in force. ``NotFoundError`` for an unknown tenant."""
        ...

    def create_operator_key(self, label: str | None = None) -> tuple[str, OperatorKey]:
        """A new operator key (the key, shown once; its record); on PostgreSQL the owner login only."""
        ...

    def list_operator_keys(self) -> list[OperatorKey]:
        """Every operator key (without the keys themselves)."""
        ...

    def revoke_operator_key(self, key_id: int) -> bool:
        """Revoke an operator key; False if there was no such active key."""
        ...

    def authenticate_operator(self, token: str) -> OperatorKey | None:
        """The record of a valid, unrevoked operator key, or None (any login: the server checks with it)."""
        ...

    def operator_tenants(self, operator: OperatorKey) -> list[TenantQuota]:
        """Every tenant with its quota, as ``operator`` (``ForbiddenError`` when the key is no longer valid)."""
        ...

    def operator_set_quota(self, operator: OperatorKey, tenant: str, quota: Quota) -> Quota:
        """Replace a tenant's quota with ``quota``, as ``operator``: ``ForbiddenError`` when the key is no longer
        valid, ``TenantNotFoundError`` for an unknown tenant. Works on the application login too (the store
        checks the key, not the login)."""
        ...

    def quota_status(self, store: VectorStore) -> QuotaStatus:
        """The store's tenant's quotas with its usage."""
        ...

    def check_upload(self, store: VectorStore, size: int) -> None:
        """Refuse (``QuotaExceededError``) an upload of ``size`` bytes before its job is queued: a quota on what
        the tenant holds is already reached, or the upload would pass its uploads-per-day quota."""
        ...

    def tenant_rate_count(self, tenant: str, window_start: int) -> tuple[int, int]:
        """Count one request of a tenant (one with a requests-per-minute quota) in a window: (the window's count
        so far, the previous window's)."""
        ...

    def create_tenant(self, tenant: str) -> bool:
        """Register a tenant; False if it already existed."""
        ...

    def tenant_exists(self, tenant: str) -> bool:
        """Whether the tenant is registered (or has data)."""
        ...

    def list_tenants(self) -> list[TenantInfo]:
        """Every registered tenant with its counts (an operator's view: the owner login on PostgreSQL)."""
        ...

    def delete_tenant(self, tenant: str) -> Erasure:
        """Erase all of a tenant's data, its API keys and the tenant itself; ``NotFoundError`` if unknown."""
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

    def rate_count(self, key_id: int, window_start: int) -> tuple[int, int]:
        """Count one request of a key in a window; returns (the window's count so far, the previous window's),
        for the sliding limiter (:mod:`bunko.ratelimit`)."""
        ...

    def create_job(self, store: VectorStore, job: Job, *, replace: bool = False,
                   before_commit: Callable[[], None] | None = None) -> None:
        """Record a new job in the store's tenant, in one transaction with the check that no job of the same
        file name is still processing in its collection (``UploadInProgressError``); ``replace``: the job of
        the same id (the document's earlier version) gives way to it. ``before_commit`` runs inside that
        transaction once the job row is in (the upload's file is moved into place there)."""
        ...

    def get_job(self, store: VectorStore, job_id: str) -> Job:
        """A job of the store's tenant, or ``DocumentNotFoundError``; a job whose worker died is failed first."""
        ...

    def list_jobs(self, store: VectorStore) -> list[Job]:
        """All jobs of the store's tenant, oldest first (dead workers' jobs failed first)."""
        ...

    def claim_job(self, worker: str, lease_seconds: float = LEASE_SECONDS, *, tenant_cap: int = 0) -> ClaimResult:
        """Claim a waiting (or abandoned) job for ``worker``, with a lease, taking turns across tenants: the
        tenant whose last claim is the oldest goes first, and in it the user whose last claim is the oldest,
        with that user's oldest waiting job; a tenant with ``tenant_cap`` jobs in flight waits (0: no cap).

        Concurrent claimers never get the same job, and the cap holds. A job already claimed
        ``max_attempts`` times is failed instead.
        """
        ...

    def renew_job(self, store: VectorStore, job_id: str, lease_until: float, worker: str | None = None) -> bool:
        """Extend a processing job's lease (held by ``worker``, when given); False if it is no longer held."""
        ...

    def finish_job(self, store: VectorStore, job_id: str, status: str, *, chunk_count: int = 0,
                   processing_time_ms: float | None = None, error_code: str | None = None,
                   error: str | None = None, worker: str | None = None, embedded_chunks: int = 0,
                   reused_chunks: int = 0) -> bool:
        """Set a processing job's final state (only while ``worker``, when given, holds it); False if the
        job is no longer processing for this worker (erased, deleted, failed or claimed by another).
        ``embedded_chunks`` and ``reused_chunks`` say how the chunks of a completed job got their vectors."""
        ...

    def delete_jobs(self, store: VectorStore, job_ids: list[str]) -> int:
        """Delete jobs of the store's tenant; returns how many existed."""
        ...

    def delete_collection_jobs(self, store: VectorStore, collection: str) -> list[str]:
        """Delete the jobs of a collection of the store's tenant; returns their ids."""
        ...

    def erase_user(self, store: VectorStore, user_id: str) -> Erasure:
        """Delete a user's documents (with chunks and vectors), jobs, search logs, usage records, conversations."""
        ...

    def erase_tenant(self, store: VectorStore) -> Erasure:
        """Delete all data of the store's tenant (its keys stay valid)."""
        ...


def service_records(backend: StoreBackend) -> ServiceRecords:
    """The server records of a backend: any registered backend serves them (``StoreBackend.service_records``)."""
    return backend.service_records()
