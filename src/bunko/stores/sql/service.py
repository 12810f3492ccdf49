"""The HTTP server's records over any :class:`~bunko.stores.sql.store.SQLBackend`, written once.

API keys and rate-limit windows are looked up before a tenant is known (the key names it), so
they run in a transaction bound to no tenant; jobs and erasure are tenant data and run in the
tenant store's own scoped transactions. See :mod:`bunko.stores.service` for the records' rules.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from ...errors import (
    ConfigError,
    DocumentNotFoundError,
    ForbiddenError,
    NotFoundError,
    TenantNotFoundError,
    UploadInProgressError,
    VectorStoreError,
)
from ..base import VectorStore
from ..quotas import QUOTA_NAMES, Quota
from ..service import (
    LEASE_SECONDS,
    APIKey,
    Claim,
    ClaimResult,
    Erasure,
    Job,
    OperatorKey,
    QuotaStatus,
    TenantInfo,
    TenantQuota,
    check_user_id,
    conversation_prefix,
    hash_key,
    new_api_key,
    new_operator_key,
)
from . import quotas
from .memory import SQLMemories
from .store import SQLBackend, SQLStore

_JOB_COLUMNS = ("uid, collection, filename, file_size, mime_type, user_id, status, chunk_count, processing_time_ms, "
                "error_code, error, metadata, lease_until, created_at, updated_at, attempts, max_attempts, worker, "
                "embedded_chunks, reused_chunks")
KEY_COLUMNS = "id, prefix, tenant, user_id, admin, created_at, revoked_at"
OPERATOR_COLUMNS = "id, prefix, label, created_at, revoked_at"
NOT_OPERATOR = "the operator key is not valid or was revoked"
_ABANDONED = "JOB_ABANDONED"
# PostgreSQL: the advisory lock class under which a tenant's job creations (check, then insert) take turns.
_CREATE_LOCK = 727276


def abandoned_message(attempts: int | str) -> str:
    """The reason given for a job whose workers died ``attempts`` times."""
    return (f"processing stopped: the workers handling this upload exited before it finished ({attempts} attempts; "
            "restart or crash); upload the file again")


_USER_TABLES = ("jobs", "search_logs", "usage_records")


class SQLServiceRecords:
    """API keys, rate windows, jobs and erasure in a SQL backend (implements ``ServiceRecords``)."""

    def __init__(self, backend: SQLBackend) -> None:
        self.backend = backend
        self._d = backend.dialect

    # -- not tenant-bound: keys and rate windows ------------------------------------------------
    def _run(self, conn: Any, statement: str, params: tuple[Any, ...] = ()) -> Any:
        return conn.execute(self._d.sql(statement), params)

    def _key(self, row: Any) -> APIKey:
        return APIKey(int(row[0]), row[1], row[2], row[3], bool(row[4]), self._d.time_out(row[5]), row[6] is not None)

    # The lookup of one key's row (its columns and hash) by its hash.
    _AUTHENTICATE = f"SELECT {KEY_COLUMNS}, key_hash FROM api_keys WHERE key_hash = ?"

    def _operator(self, what: str, *, write: bool) -> AbstractContextManager[Any]:
        """A transaction for what only the operator does: API keys and the list of tenants. A backend with
        row security opens it as the login that owns the schema."""
        return self.backend.transaction(None, None, write=write)

    def _scoped(self, store: VectorStore) -> SQLStore:
        """The store as this backend's SQL store of the same tenant."""
        if isinstance(store, SQLStore) and store.served_by(self.backend):
            return store
        return self.backend.for_tenant(store.tenant).for_user(store.user)

    def create_tenant(self, tenant: str) -> bool:
        """Register a tenant; False if it already existed."""
        existed = self.tenant_exists(tenant)
        with self.backend.for_tenant(tenant).session(create=True):
            pass
        return not existed

    def tenant_exists(self, tenant: str) -> bool:
        """Whether the tenant is registered (or has data)."""
        with self.backend.for_tenant(tenant).session() as (_, tenant_pk):
            return tenant_pk is not None

    def _require_operator(self, what: str) -> None:
        """Refuse a login that may not see every tenant (nothing to check in a database without row security)."""

    def _tenant_rows(self) -> list[tuple[str, str]]:
        """(name, created_at) of every tenant, by name (a backend with row security reads them as the owner)."""
        self._require_operator("list tenants")
        with self._operator("list tenants", write=False) as conn:
            rows = self._run(conn, "SELECT name, created_at FROM tenants ORDER BY name").fetchall()
        return [(r[0], self._d.time_out(r[1])) for r in rows]

    def _active_keys(self) -> dict[str, int]:
        """Active API keys per tenant name."""
        with self._operator("count API keys", write=False) as conn:
            rows = self._run(conn, "SELECT tenant, count(*) FROM api_keys WHERE revoked_at IS NULL "
                                   "GROUP BY tenant").fetchall()
        return {r[0]: int(r[1]) for r in rows}

    def list_tenants(self) -> list[TenantInfo]:
        """Every registered tenant with its collection, document and active key counts."""
        keys = self._active_keys()
        tenants = []
        for name, created_at in self._tenant_rows():
            collections = self.backend.for_tenant(name).list_collections()
            tenants.append(TenantInfo(name, created_at, len(collections), sum(c.document_count for c in collections),
                                      keys.get(name, 0)))
        return tenants

    def _drop_tenant(self, tenant: str) -> int:
        """Delete the tenant's API keys and its row (what is left below it cascades); returns the key count."""
        with self.backend.transaction(None, None, write=True) as conn:
            keys = int(self._run(conn, "DELETE FROM api_keys WHERE tenant = ?", (tenant,)).rowcount)
            self._run(conn, "DELETE FROM tenants WHERE name = ?", (tenant,))
        return keys

    def delete_tenant(self, tenant: str) -> Erasure:
        """Erase all of a tenant's data, its API keys and the tenant itself; ``NotFoundError`` if unknown."""
        self._require_operator("delete tenants")
        if not self.tenant_exists(tenant):
            raise NotFoundError(f"tenant {tenant!r} does not exist")
        erasure = self.erase_tenant(self.backend.for_tenant(tenant))  # type: ignore[arg-type]
        erasure.api_keys = self._drop_tenant(tenant)
        return erasure

    def create_api_key(self, tenant: str, user_id: str | None = None, *, admin: bool = False) -> tuple[str, APIKey]:
        """A new key for an existing tenant: (the key, shown once; its record)."""
        if user_id is not None:
            check_user_id(user_id)
        if not self.tenant_exists(tenant):
            raise ConfigError(f"tenant {tenant!r} does not exist; create it with `bunko admin tenants create`")
        key = new_api_key()
        with self._operator("create API keys", write=True) as conn:
            row = self._run(conn, "INSERT INTO api_keys (key_hash, prefix, tenant, user_id, admin) "
                                  f"VALUES (?, ?, ?, ?, ?) RETURNING {KEY_COLUMNS}",
                            (hash_key(key), key[:8], tenant, user_id, bool(admin))).fetchone()
        return key, self._key(row)

    def authenticate(self, api_key: str) -> APIKey | None:
        """The record of a valid, unrevoked key, or None."""
        digest = hash_key(api_key)
        with self.backend.transaction(None, None, write=False) as conn:
            row = self._run(conn, self._AUTHENTICATE, (digest,)).fetchone()
        if row is None or row[6] is not None or not hmac.compare_digest(row[7], digest):
            return None
        return self._key(row)

    def revoke_api_key(self, key_id: int) -> bool:
        """Revoke a key; False if there was no such key."""
        with self._operator("revoke API keys", write=True) as conn:
            return int(self._run(conn, "UPDATE api_keys SET revoked_at = {now} WHERE id = ? AND revoked_at IS NULL",
                                 (key_id,)).rowcount) > 0

    def list_api_keys(self, tenant: str) -> list[APIKey]:
        """The keys of a tenant (without the keys themselves)."""
        with self._operator("list API keys", write=False) as conn:
            rows = self._run(conn, f"SELECT {KEY_COLUMNS} FROM api_keys WHERE tenant = ? ORDER BY id",
                             (tenant,)).fetchall()
        return [self._key(r) for r in rows]

    def hit(self, key_id: int, window_start: int) -> int:
        """Count one request of a key in a window; returns the window's count so far."""
        with self.backend.transaction(None, None, write=True) as conn:
            count = int(self._run(
                conn, "INSERT INTO rate_windows (key_id, window_start, hits) VALUES (?, ?, 1) ON CONFLICT "
                      "(key_id, window_start) DO UPDATE SET hits = rate_windows.hits + 1 RETURNING hits",
                (key_id, window_start)).fetchone()[0])
            if count == 1:  # a new window: forget the old ones of this key
                self._run(conn, "DELETE FROM rate_windows WHERE key_id = ? AND window_start < ?",
                          (key_id, window_start))
        return count

    def rate_count(self, key_id: int, window_start: int) -> tuple[int, int]:
        """Count one request of a key in a window; returns (the window's count so far, the previous window's)."""
        with self.backend.transaction(None, None, write=True) as conn:
            count = int(self._run(
                conn, "INSERT INTO rate_windows (key_id, window_start, hits) VALUES (?, ?, 1) ON CONFLICT "
                      "(key_id, window_start) DO UPDATE SET hits = rate_windows.hits + 1 RETURNING hits",
                (key_id, window_start)).fetchone()[0])
            if count == 1:  # a new window: forget those before the previous one
                self._run(conn, "DELETE FROM rate_windows WHERE key_id = ? AND window_start < ?",
                          (key_id, window_start - 1))
            previous = self._run(conn, "SELECT hits FROM rate_windows WHERE key_id = ? AND window_start = ?",
                                 (key_id, window_start - 1)).fetchone()
        return count, 0 if previous is None else int(previous[0])

    # -- quotas (bunko.stores.quotas) ------------------------------------------------------------
    def get_quota(self, tenant: str) -> Quota:
        """A tenant's quota (no limits when none was set)."""
        store = self.backend.for_tenant(tenant)
        with store.session() as (conn, tenant_pk):
            return quotas.read_quota(store, conn, tenant_pk)

    def set_quota(self, tenant: str, values: dict[str, int | None], clear: set[str] | frozenset[str] = frozenset(),
                  ) -> Quota:
        """Set and clear a registered tenant's quotas, as the operator; returns the quota now in force."""
        self._require_operator("set quotas")
        quota = self.get_quota(tenant).changed(values, clear)  # checks the names and values first
        with self._operator("set quotas", write=True) as conn:
            row = self._run(conn, "SELECT id FROM tenants WHERE name = ?", (tenant,)).fetchone()
            if row is None:
                raise TenantNotFoundError(
                    f"tenant {tenant!r} does not exist; create it with `bunko admin tenants create`")
            self._write_quota(conn, int(row[0]), quota)
        return quota

    def _write_quota(self, conn: Any, tenant_pk: int, quota: Quota) -> None:
        limits = [getattr(quota, name) for name in QUOTA_NAMES]
        self._run(conn, f"INSERT INTO tenant_quotas (tenant_id, {', '.join(QUOTA_NAMES)}) "
                        f"VALUES (?, {', '.join('?' for _ in QUOTA_NAMES)}) ON CONFLICT (tenant_id) DO UPDATE SET "
                        + ", ".join(f"{name} = excluded.{name}" for name in QUOTA_NAMES),
                  (tenant_pk, *limits))

    # -- operator keys: tenants and their quotas over HTTP ---------------------------------------
    def _operator_key(self, row: Any) -> OperatorKey:
        return OperatorKey(int(row[0]), row[1], row[2], self._d.time_out(row[3]), row[4] is not None,
                           row[5] if len(row) > 5 else "")

    # The lookup of one operator key's row (its columns and hash) by its hash.
    _OPERATOR_KEY = f"SELECT {OPERATOR_COLUMNS}, key_hash FROM operator_keys WHERE key_hash = ?"

    def create_operator_key(self, label: str | None = None) -> tuple[str, OperatorKey]:
        """A new operator key: (the key, shown once; its record)."""
        if label is not None and (not label.strip() or len(label) > 200 or "\x00" in label):
            raise ConfigError("an operator key's label is 1-200 characters (no NUL)")
        key = new_operator_key()
        with self._operator("create operator keys", write=True) as conn:
            row = self._run(conn, "INSERT INTO operator_keys (key_hash, prefix, label) "
                                  f"VALUES (?, ?, ?) RETURNING {OPERATOR_COLUMNS}",
                            (hash_key(key), key[:9], label)).fetchone()
        return key, self._operator_key(row)

    def list_operator_keys(self) -> list[OperatorKey]:
        """Every operator key (without the keys themselves)."""
        with self._operator("list operator keys", write=False) as conn:
            rows = self._run(conn, f"SELECT {OPERATOR_COLUMNS} FROM operator_keys ORDER BY id").fetchall()
        return [self._operator_key(r) for r in rows]

    def revoke_operator_key(self, key_id: int) -> bool:
        """Revoke an operator key; False if there was no such active key."""
        with self._operator("revoke operator keys", write=True) as conn:
            return int(self._run(conn, "UPDATE operator_keys SET revoked_at = {now} "
                                       "WHERE id = ? AND revoked_at IS NULL", (key_id,)).rowcount) > 0

    def authenticate_operator(self, token: str) -> OperatorKey | None:
        """The record of a valid, unrevoked operator key, or None."""
        digest = hash_key(token)
        with self.backend.transaction(None, None, write=False) as conn:
            row = self._run(conn, self._OPERATOR_KEY, (digest,)).fetchone()
        if row is None or row[4] is not None or not hmac.compare_digest(row[5], digest):
            return None
        return self._operator_key(row)

    def _valid_operator(self, conn: Any, operator: OperatorKey) -> None:
        row = self._run(conn, "SELECT 1 FROM operator_keys WHERE key_hash = ? AND revoked_at IS NULL",
                        (operator.digest,)).fetchone()
        if row is None:
            raise ForbiddenError(NOT_OPERATOR)

    def operator_tenants(self, operator: OperatorKey) -> list[TenantQuota]:
        """Every tenant with its quota, as ``operator``."""
        with self.backend.transaction(None, None, write=False) as conn:
            self._valid_operator(conn, operator)
            rows = self._run(conn, f"SELECT t.name, t.created_at, {', '.join('q.' + n for n in QUOTA_NAMES)} "
                                   "FROM tenants t LEFT JOIN tenant_quotas q ON q.tenant_id = t.id "
                                   "ORDER BY t.name").fetchall()
        return [self._tenant_quota(r) for r in rows]

    def _tenant_quota(self, row: Any) -> TenantQuota:
        return TenantQuota(row[0], self._d.time_out(row[1]),
                           Quota(*(None if v is None else int(v) for v in row[2:2 + len(QUOTA_NAMES)])))

    def operator_set_quota(self, operator: OperatorKey, tenant: str, quota: Quota) -> Quota:
        """Replace a tenant's quota, as ``operator``."""
        quota = Quota().changed(quota.to_dict())  # checks the values
        with self.backend.transaction(None, None, write=True) as conn:
            self._valid_operator(conn, operator)
            row = self._run(conn, "SELECT id FROM tenants WHERE name = ?", (tenant,)).fetchone()
            if row is None:
                raise TenantNotFoundError(f"tenant {tenant!r} does not exist")
            self._write_quota(conn, int(row[0]), quota)
        return quota

    def quota_status(self, store: VectorStore) -> QuotaStatus:
        """The store's tenant's quotas with its usage."""
        scoped = self._scoped(store)
        with scoped.session() as (conn, tenant_pk):
            quota = quotas.read_quota(scoped, conn, tenant_pk)
            held = quotas.held(scoped, conn, tenant_pk)
            uploaded = quotas.uploaded_today(scoped, conn, tenant_pk)
            requests = 0
            if tenant_pk is not None and quota.requests_per_minute is not None:
                found = scoped.run(conn, "SELECT hits FROM tenant_rate_windows WHERE tenant_id = ? "
                                         "AND window_start = ?", (tenant_pk, int(time.time() // 60))).fetchone()
                requests = 0 if found is None else int(found[0])
        return QuotaStatus(quota, held["documents"], held["chunks"], held["bytes"], uploaded, requests)

    def check_upload(self, store: VectorStore, size: int) -> None:
        """Refuse (``QuotaExceededError``) an upload of ``size`` bytes before its job is queued."""
        scoped = self._scoped(store)
        with scoped.session() as (conn, tenant_pk):
            quota = quotas.read_quota(scoped, conn, tenant_pk)
            if not quota.is_empty():
                quotas.check_room(scoped, conn, tenant_pk, quota, upload_bytes=size)

    def tenant_rate_count(self, tenant: str, window_start: int) -> tuple[int, int]:
        """The contract's ``tenant_rate_count`` (the caller knows the quota: ``RateLimiter`` keeps it)."""
        scoped = self.backend.for_tenant(tenant)
        with scoped.session(write=True) as (conn, tenant_pk):
            if tenant_pk is None:  # no such tenant: nothing to count
                return 0, 0
            count = int(scoped.run(
                conn, "INSERT INTO tenant_rate_windows (tenant_id, window_start, hits) VALUES (?, ?, 1) ON CONFLICT "
                      "(tenant_id, window_start) DO UPDATE SET hits = tenant_rate_windows.hits + 1 RETURNING hits",
                (tenant_pk, window_start)).fetchone()[0])
            if count == 1:  # a new window: forget those before the previous one
                scoped.run(conn, "DELETE FROM tenant_rate_windows WHERE tenant_id = ? AND window_start < ?",
                           (tenant_pk, window_start - 1))
            previous = scoped.run(conn, "SELECT hits FROM tenant_rate_windows WHERE tenant_id = ? "
                                        "AND window_start = ?", (tenant_pk, window_start - 1)).fetchone()
        return count, 0 if previous is None else int(previous[0])

    # -- tenant data: jobs and erasure ----------------------------------------------------------
    def _job(self, row: Any) -> Job:
        d = self._d
        return Job(row[0], row[1], row[2], int(row[3]), row[4], row[5], row[6], int(row[7]),
                   None if row[8] is None else float(row[8]), row[9], row[10], dict(d.json_out(row[11]) or {}),
                   float(row[12]), d.time_out(row[13]), d.time_out(row[14]), int(row[15]), int(row[16]), row[17],
                   int(row[18]), int(row[19]))

    def create_job(self, store: VectorStore, job: Job, *, replace: bool = False,
                   before_commit: Callable[[], None] | None = None) -> None:
        """Record a new job in the store's tenant; refused with ``UploadInProgressError`` while a job of the same
        file name is processing in the collection. The check and the insert are one transaction, taken one
        at a time per tenant (an advisory lock on PostgreSQL, the write lock on SQLite), so two uploads of
        one name at once make one job. ``replace``: the job of the same id gives way to it."""
        scoped = self._scoped(store)
        with scoped.session(create=True) as (conn, tenant_pk):
            if self._d.name == "postgresql":
                self._run(conn, "SELECT pg_advisory_xact_lock(?, ?)", (_CREATE_LOCK, int(tenant_pk or 0) % 2**31))
            busy = scoped.run(conn, "SELECT uid FROM jobs WHERE tenant_id = ? AND collection = ? AND filename = ? "
                                    "AND status = 'processing' LIMIT 1",
                              (tenant_pk, job.collection, job.filename)).fetchone()
            if busy is not None:
                raise UploadInProgressError(
                    f"{job.filename!r} is still being processed in collection {job.collection!r} (document "
                    f"{busy[0]}); upload the new version when it has finished")
            if replace:
                scoped.run(conn, "DELETE FROM jobs WHERE tenant_id = ? AND uid = ?", (tenant_pk, job.id))
            scoped.run(conn, "INSERT INTO jobs (uid, tenant_id, collection, filename, file_size, mime_type, user_id, "
                             "status, metadata, lease_until, max_attempts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (job.id, tenant_pk, job.collection, job.filename, job.file_size, job.mime_type, job.user_id,
                        job.status, self._d.json_in(job.metadata), job.lease_until, job.max_attempts))
            if before_commit is not None:
                before_commit()

    def _fail_abandoned(self, scoped: SQLStore) -> None:
        """Fail the tenant's processing jobs whose last allowed lease ran out (their workers died): the tenant's
        upkeep, whichever user's read found them, so it acts for the whole tenant."""
        scoped = scoped.for_user(None)
        with scoped.session(write=True) as (conn, tenant_pk):
            for uid, attempts in scoped.run(
                    conn, "SELECT uid, attempts FROM jobs WHERE tenant_id = ? AND status = 'processing' "
                          "AND attempts >= max_attempts AND lease_until < ?", (tenant_pk, time.time())).fetchall():
                scoped.run(conn, "UPDATE jobs SET status = 'failed', error_code = ?, error = ?, worker = NULL, "
                                 "updated_at = {now} WHERE tenant_id = ? AND uid = ? AND status = 'processing'",
                           (_ABANDONED, abandoned_message(int(attempts)), tenant_pk, uid))

    def get_job(self, store: VectorStore, job_id: str) -> Job:
        """A job of the store's tenant, or ``DocumentNotFoundError``; a job whose worker died is failed first."""
        scoped = self._scoped(store)
        for _ in range(2):
            with scoped.session() as (conn, tenant_pk):
                row = None if tenant_pk is None else scoped.run(
                    conn, f"SELECT {_JOB_COLUMNS} FROM jobs WHERE tenant_id = ? AND uid = ?",
                    (tenant_pk, job_id)).fetchone()
            if row is None:
                raise DocumentNotFoundError(f"document {job_id!r} does not exist in tenant {store.tenant!r}")
            job = self._job(row)
            if job.status != "processing" or job.attempts < job.max_attempts or job.lease_until >= time.time():
                return job
            self._fail_abandoned(scoped)
        return job

    def list_jobs(self, store: VectorStore) -> list[Job]:
        """All jobs of the store's tenant, oldest first (dead workers' jobs failed first)."""
        scoped = self._scoped(store)
        with scoped.session() as (conn, tenant_pk):
            if tenant_pk is None:
                return []
            abandoned = scoped.run(conn, "SELECT 1 FROM jobs WHERE tenant_id = ? AND status = 'processing' "
                                         "AND attempts >= max_attempts AND lease_until < ? LIMIT 1",
                                   (tenant_pk, time.time())).fetchone()
        if abandoned is not None:
            self._fail_abandoned(scoped)
        with scoped.session() as (conn, tenant_pk):
            rows = scoped.run(conn, f"SELECT {_JOB_COLUMNS} FROM jobs WHERE tenant_id = ? ORDER BY id",
                              (tenant_pk,)).fetchall()
        return [self._job(r) for r in rows]

    def claim_job(self, worker: str, lease_seconds: float = LEASE_SECONDS, *, tenant_cap: int = 0) -> ClaimResult:
        """Claim a waiting (or abandoned) job for ``worker``, with a lease, taking turns across tenants.

        The claim goes to the tenant with waiting jobs whose last claim is the oldest (a tenant never
        claimed from first), within it to the user whose last claim is the oldest (the tenant's keys
        without a user count as one), and to that user's oldest waiting job: a tenant's (or a user's)
        backlog delays only itself. A tenant with ``tenant_cap`` jobs in flight (claimed, lease live) waits (0: no cap).
        Claims are taken one at a time (an advisory lock on PostgreSQL, an immediate transaction on
        SQLite), so concurrent claimers never get the same job and the cap holds. A job already claimed
        ``max_attempts`` times is failed instead.
        """
        result = ClaimResult()
        now = time.time()
        if self._d.name != "postgresql":  # SQLite: look before taking the write lock, which blocks every writer
            with self.backend.transaction(None, None, write=False) as conn:
                if self._run(conn, "SELECT 1 FROM jobs WHERE status = 'processing' AND lease_until < ? LIMIT 1",
                             (now,)).fetchone() is None:
                    return result
        with self.backend.transaction(None, None, write=True) as conn:
            if self._d.name == "postgresql":
                # Across tenants under RLS: the owner's SECURITY DEFINER function picks the job.
                rows = conn.execute("SELECT tenant, job_uid, attempt, claimed FROM bunko.claim_job(%s, %s, %s, %s, %s)",
                                    (worker, now, lease_seconds, abandoned_message("%s"), tenant_cap)).fetchall()
                for tenant, uid, attempt, claimed in rows:
                    if claimed:
                        result.claim = Claim(tenant, uid, int(attempt))
                    else:
                        result.failed.append((tenant, uid))
                return result
            # The same turns as PostgreSQL's bunko.claim_job (m018), in SQLite's dialect.
            turns = self._run(conn, "SELECT w.tenant_id, t.name FROM (SELECT tenant_id, min(id) AS first_id FROM jobs "
                                    "WHERE status = 'processing' AND lease_until < ? GROUP BY tenant_id) w "
                                    "JOIN tenants t ON t.id = w.tenant_id WHERE ? <= 0 OR (SELECT count(*) FROM jobs f "
                                    "WHERE f.tenant_id = w.tenant_id AND f.status = 'processing' "
                                    "AND f.lease_until >= ?) < ? ORDER BY (SELECT max(c.claimed_at) FROM jobs c "
                                    "WHERE c.tenant_id = w.tenant_id) NULLS FIRST, w.first_id",
                              (now, tenant_cap, now, tenant_cap)).fetchall()
            for tenant_pk, tenant in turns:
                users = self._run(conn, "SELECT q.user_id FROM jobs q WHERE q.tenant_id = ? "
                                        "AND q.status = 'processing' AND q.lease_until < ? "
                                        "GROUP BY q.user_id ORDER BY (SELECT max(c.claimed_at) "
                                        "FROM jobs c WHERE c.tenant_id = q.tenant_id AND c.user_id IS q.user_id) "
                                        "NULLS FIRST, min(q.id)", (tenant_pk, now)).fetchall()
                for (user_id,) in users:
                    if self._claim_of_user(conn, result, (tenant_pk, tenant, user_id), worker, now, lease_seconds):
                        return result
            return result

    def _claim_of_user(self, conn: Any, result: ClaimResult, who: tuple[int, str, str | None], worker: str,
                       now: float, lease_seconds: float) -> bool:
        """SQLite: claim the oldest waiting job of one user of a tenant into ``result`` (failing, on the way,
        jobs claimed too often); False when the user has none left to claim."""
        tenant_pk, tenant, user_id = who
        while True:
            row = self._run(conn, "SELECT id, uid, attempts, max_attempts FROM jobs WHERE tenant_id = ? "
                                  "AND user_id IS ? AND status = 'processing' AND lease_until < ? "
                                  "ORDER BY lease_until, id LIMIT 1",
                            (tenant_pk, user_id, now)).fetchone()
            if row is None:
                return False
            pk, uid, attempts, max_attempts = row
            if attempts >= max_attempts:
                self._run(conn, "UPDATE jobs SET status = 'failed', error_code = ?, error = ?, worker = NULL, "
                                "updated_at = {now} WHERE id = ?", (_ABANDONED, abandoned_message(attempts), pk))
                result.failed.append((tenant, uid))
                continue
            self._run(conn, "UPDATE jobs SET attempts = attempts + 1, worker = ?, lease_until = ?, claimed_at = ?, "
                            "updated_at = {now} WHERE id = ?", (worker, now + lease_seconds, now, pk))
            result.claim = Claim(tenant, uid, int(attempts) + 1)
            return True

    def renew_job(self, store: VectorStore, job_id: str, lease_until: float, worker: str | None = None) -> bool:
        """Extend a processing job's lease (held by ``worker``, when given); False if it is no longer held."""
        scoped = self._scoped(store)
        held = "" if worker is None else " AND worker = ?"
        with scoped.session(write=True) as (conn, tenant_pk):
            return int(scoped.run(conn, "UPDATE jobs SET lease_until = ? WHERE tenant_id = ? AND uid = ? "
                                        f"AND status = 'processing'{held}",
                                  (lease_until, tenant_pk, job_id, *([] if worker is None else [worker]))
                                  ).rowcount) > 0

    def finish_job(self, store: VectorStore, job_id: str, status: str, *, chunk_count: int = 0,
                   processing_time_ms: float | None = None, error_code: str | None = None,
                   error: str | None = None, worker: str | None = None, embedded_chunks: int = 0,
                   reused_chunks: int = 0) -> bool:
        """The contract's ``finish_job``: one UPDATE guarded by the job's status and, when given, its worker."""
        if status not in ("completed", "failed"):
            raise VectorStoreError(f"a job ends completed or failed, not {status!r}")
        scoped = self._scoped(store)
        held = "" if worker is None else " AND worker = ?"
        with scoped.session(write=True) as (conn, tenant_pk):
            return int(scoped.run(
                conn, "UPDATE jobs SET status = ?, chunk_count = ?, processing_time_ms = ?, error_code = ?, error = ?, "
                      "embedded_chunks = ?, reused_chunks = ?, "
                      f"updated_at = {{now}} WHERE tenant_id = ? AND uid = ? AND status = 'processing'{held}",
                (status, chunk_count, processing_time_ms, error_code, error, embedded_chunks, reused_chunks,
                 tenant_pk, job_id,
                 *([] if worker is None else [worker]))).rowcount) > 0

    def delete_jobs(self, store: VectorStore, job_ids: list[str]) -> int:
        """Delete jobs of the store's tenant; returns how many existed."""
        if not job_ids:
            return 0
        scoped = self._scoped(store)
        with scoped.session(write=True) as (conn, tenant_pk):
            listed, params = self._d.any("uid", job_ids)
            return int(scoped.run(conn, f"DELETE FROM jobs WHERE tenant_id = ? AND {listed}",
                                  (tenant_pk, *params)).rowcount)

    def delete_collection_jobs(self, store: VectorStore, collection: str) -> list[str]:
        """Delete the jobs of a collection of the store's tenant; returns their ids. Every user's: the collection
        goes (the caller decided who may delete it), so this acts for the whole tenant."""
        scoped = self._scoped(store).for_user(None)
        with scoped.session(write=True) as (conn, tenant_pk):
            if tenant_pk is None:
                return []
            return [r[0] for r in scoped.run(conn, "DELETE FROM jobs WHERE tenant_id = ? AND collection = ? "
                                                   "RETURNING uid", (tenant_pk, collection)).fetchall()]

    def erase_user(self, store: VectorStore, user_id: str) -> Erasure:
        """Delete a user's documents (with chunks and vectors), jobs, search logs, usage records, conversations
        and agent memories."""
        check_user_id(user_id)
        scoped = self._scoped(store)
        if scoped.user is not None and scoped.user != user_id:  # documents are not the user policies' to guard
            raise ForbiddenError(f"a store acting for user {scoped.user!r} may erase only that user's data")
        with scoped.session() as (conn, tenant_pk):
            document_ids = [] if tenant_pk is None else [r[0] for r in scoped.run(
                conn, "SELECT uid FROM jobs WHERE tenant_id = ? AND user_id = ?", (tenant_pk, user_id))]
        erasure = Erasure(documents=scoped.delete_documents(document_ids) if document_ids else 0,
                          job_ids=document_ids)
        prefix = conversation_prefix(user_id)
        with scoped.session(write=True) as (conn, tenant_pk):
            if tenant_pk is None:
                return erasure
            counts = [int(scoped.run(conn, f"DELETE FROM {table} WHERE tenant_id = ? AND user_id = ?",
                                     (tenant_pk, user_id)).rowcount) for table in _USER_TABLES]
            erasure.jobs, erasure.search_logs, erasure.usage_records = counts
            erasure.conversation_turns = int(scoped.run(
                conn, "DELETE FROM conversation_turns WHERE tenant_id = ? AND substr(conversation_id, 1, ?) = ?",
                (tenant_pk, len(prefix), prefix)).rowcount)
        erasure.memories = SQLMemories(scoped).delete(user_id)
        return erasure

    def erase_tenant(self, store: VectorStore) -> Erasure:
        """Delete all data of the store's tenant (its keys stay valid)."""
        scoped = self._scoped(store)
        collections = scoped.list_collections()
        erasure = Erasure(documents=sum(c.document_count for c in collections), collections=len(collections))
        # First the jobs (a worker still processing one then creates no collection again: jobs.py), and the
        # failed-ingest records (deleting a collection drops its own).
        with scoped.session(write=True) as (conn, tenant_pk):
            if tenant_pk is not None:
                erasure.job_ids = [r[0] for r in scoped.run(conn, "DELETE FROM jobs WHERE tenant_id = ? RETURNING uid",
                                                            (tenant_pk,)).fetchall()]
                erasure.jobs = len(erasure.job_ids)
                erasure.ingest_failures = int(scoped.run(conn, "DELETE FROM ingest_failures WHERE tenant_id = ?",
                                                         (tenant_pk,)).rowcount)
        for collection in collections:
            scoped.delete_collection(collection.name)
        with scoped.session(write=True) as (conn, tenant_pk):
            if tenant_pk is None:
                return erasure
            counts = [int(scoped.run(conn, f"DELETE FROM {table} WHERE tenant_id = ?", (tenant_pk,)).rowcount)
                      for table in ("search_logs", "usage_records", "conversation_turns")]
            # Postings of a collection created while the ones above were deleted (on PostgreSQL no foreign
            # key removes them with the tenant's row: m026).
            scoped.run(conn, "DELETE FROM keyword_postings WHERE tenant_id = ?", (tenant_pk,))
            erasure.search_logs, erasure.usage_records, erasure.conversation_turns = counts
        erasure.memories = SQLMemories(scoped).erase_tenant()
        return erasure
