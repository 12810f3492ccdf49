"""The server's records on PostgreSQL: API keys and rate windows out of the application role's reach.

The application role (``bunko_app``, or an application login that is a member of it) has no
privilege on ``bunko.api_keys`` or ``bunko.rate_windows`` (migration 6). It authenticates a request
through ``bunko.authenticate_key(hash)``, a ``SECURITY DEFINER`` function that returns the one row
of that hash, and counts it through ``bunko.rate_hit(key id, window)``. Creating, listing and
revoking keys needs the owner login (the one that ran ``bunko db migrate``): those statements run
on a connection of the login role itself, never dropped to ``bunko_app``. Jobs and erasure are
tenant data and stay the shared SQL implementation's.

Operator keys (m021) are kept the same way: the application role authenticates one through
``bunko.operator_key(hash)`` and lists tenants and sets quotas through ``bunko.operator_tenants(hash)`` and
``bunko.operator_set_quota(hash, ...)``, which check the key again, so the server's login can set a quota only
with a valid operator key in hand, and it still cannot write ``tenant_quotas`` itself.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ...errors import ForbiddenError, TenantNotFoundError, VectorStoreError
from ..quotas import QUOTA_NAMES, Quota
from ..service import OperatorKey, TenantQuota
from ..sql.service import KEY_COLUMNS, NOT_OPERATOR, OPERATOR_COLUMNS, SQLServiceRecords

if TYPE_CHECKING:
    from .backend import PostgresBackend


class PostgresServiceRecords(SQLServiceRecords):
    """``ServiceRecords`` on PostgreSQL (see the module doc for who may do what)."""

    backend: PostgresBackend

    # One key's row, through the definer function (the application role may not read the table).
    _AUTHENTICATE = f"SELECT {KEY_COLUMNS}, key_hash FROM bunko.authenticate_key(?)"

    # One operator key's row, through the definer function.
    _OPERATOR_KEY = f"SELECT {OPERATOR_COLUMNS}, key_hash FROM bunko.operator_key(?)"

    def operator_tenants(self, operator: OperatorKey) -> list[TenantQuota]:
        """Every tenant with its quota, through the definer function (an invalid key: ``ForbiddenError``)."""
        if self.authenticate_operator_digest(operator.digest) is None:
            raise ForbiddenError(NOT_OPERATOR)
        with self.backend.transaction(None, None, write=False) as conn:
            rows = conn.execute(f"SELECT name, created_at, {', '.join(QUOTA_NAMES)} "
                                "FROM bunko.operator_tenants(%s)", (operator.digest,)).fetchall()
        return [self._tenant_quota(r) for r in rows]

    def authenticate_operator_digest(self, digest: str) -> OperatorKey | None:
        """The valid operator key of a hash, or None."""
        with self.backend.transaction(None, None, write=False) as conn:
            row = conn.execute(f"SELECT {OPERATOR_COLUMNS}, key_hash FROM bunko.operator_key(%s)",
                               (digest,)).fetchone()
        return None if row is None or row[4] is not None else self._operator_key(row)

    def operator_set_quota(self, operator: OperatorKey, tenant: str, quota: Quota) -> Quota:
        """Replace a tenant's quota through the definer function, which checks the key again."""
        quota = Quota().changed(quota.to_dict())  # checks the values
        with self.backend.transaction(None, None, write=True) as conn:
            done = int(conn.execute("SELECT bunko.operator_set_quota(%s, %s, %s, %s, %s, %s, %s)",
                                    (operator.digest, tenant, *(getattr(quota, n) for n in QUOTA_NAMES))
                                    ).fetchone()[0])
        if done < 0:
            raise ForbiddenError(NOT_OPERATOR)
        if done == 0:
            raise TenantNotFoundError(f"tenant {tenant!r} does not exist")
        return quota

    def _operator(self, what: str, *, write: bool) -> AbstractContextManager[Any]:
        """A transaction of the login role itself, never dropped to ``bunko_app`` (keys, the tenant list)."""
        return self.backend.owner_transaction(what)

    def _require_operator(self, what: str) -> None:
        """Refuse an application login before anything is changed: only the owner sees every tenant."""
        with self.backend.owner_transaction(what) as conn:
            owner = conn.execute("SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class "
                                 "WHERE oid = 'bunko.tenants'::regclass").fetchone()
        if owner is None or not owner[0]:
            raise VectorStoreError(
                f"this PostgreSQL login may not {what}: use the owner login (the one that ran `bunko db migrate`) "
                "for `bunko admin`; the application login sees one tenant at a time")

    def _drop_tenant(self, tenant: str) -> int:
        """Delete the tenant's keys and its row as the owner; the row's own policy admits it only in a
        transaction that names the tenant, so the statement names it first."""
        with self.backend.owner_transaction("delete tenants") as conn:
            keys = int(conn.execute("DELETE FROM bunko.api_keys WHERE tenant = %s", (tenant,)).rowcount)
            conn.execute("SELECT set_config('bunko.tenant', %s, true)", (tenant,))
            conn.execute("DELETE FROM bunko.tenants WHERE name = %s", (tenant,))
        return keys

    def hit(self, key_id: int, window_start: int) -> int:
        """Count one request of a key in a window; returns the window's count so far."""
        with self.backend.transaction(None, None, write=True) as conn:
            return int(conn.execute("SELECT bunko.rate_hit(%s, %s)", (key_id, window_start)).fetchone()[0])

    def rate_count(self, key_id: int, window_start: int) -> tuple[int, int]:
        """Count one request of a key in a window; returns (the window's count so far, the previous window's)."""
        with self.backend.transaction(None, None, write=True) as conn:
            row = conn.execute("SELECT current_hits, previous_hits FROM bunko.rate_count(%s, %s)",
                               (key_id, window_start)).fetchone()
        return int(row[0]), int(row[1])
