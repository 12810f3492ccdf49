"""The server's records on PostgreSQL: API keys and rate windows out of the application role's reach.

The application role (``bunko_app``, or an application login that is a member of it) has no
privilege on ``bunko.api_keys`` or ``bunko.rate_windows`` (migration 6). It authenticates a request
through ``bunko.authenticate_key(hash)``, a ``SECURITY DEFINER`` function that returns the one row
of that hash, and counts it through ``bunko.rate_hit(key id, window)``. Creating, listing and
revoking keys needs the owner login (the one that ran ``bunko db migrate``): those statements run
on a connection of the login role itself, never dropped to ``bunko_app``. Jobs and erasure are
tenant data and stay the shared SQL implementation's.
"""

from __future__ import annotations

import hmac
from typing import TYPE_CHECKING, Any

from ...errors import ConfigError, VectorStoreError
from ..service import APIKey, check_user_id, hash_key, new_api_key
from ..sql.service import KEY_COLUMNS, SQLServiceRecords

if TYPE_CHECKING:
    from .backend import PostgresBackend


class PostgresServiceRecords(SQLServiceRecords):
    """``ServiceRecords`` on PostgreSQL (see the module doc for who may do what)."""

    backend: PostgresBackend

    def create_api_key(self, tenant: str, user_id: str | None = None, *, admin: bool = False) -> tuple[str, APIKey]:
        """A new key for an existing tenant (needs the owner login)."""
        if user_id is not None:
            check_user_id(user_id)
        if not self.tenant_exists(tenant):
            raise ConfigError(f"tenant {tenant!r} does not exist; create it with `bunko admin tenants create`")
        key = new_api_key()
        with self.backend.owner_transaction("create API keys") as conn:
            row = conn.execute("INSERT INTO bunko.api_keys (key_hash, prefix, tenant, user_id, admin) "
                               f"VALUES (%s, %s, %s, %s, %s) RETURNING {KEY_COLUMNS}",
                               (hash_key(key), key[:8], tenant, user_id, bool(admin))).fetchone()
        return key, self._key(row)

    def authenticate(self, api_key: str) -> APIKey | None:
        """The record of a valid, unrevoked key, or None (one row, by hash, through the definer function)."""
        digest = hash_key(api_key)
        with self.backend.transaction(None, None, write=False) as conn:
            row = conn.execute(f"SELECT {KEY_COLUMNS}, key_hash FROM bunko.authenticate_key(%s)", (digest,)).fetchone()
        if row is None or row[6] is not None or not hmac.compare_digest(row[7], digest):
            return None
        return self._key(row)

    def revoke_api_key(self, key_id: int) -> bool:
        """Revoke a key (needs the owner login); False if there was no such key."""
        with self.backend.owner_transaction("revoke API keys") as conn:
            return int(conn.execute("UPDATE bunko.api_keys SET revoked_at = now() WHERE id = %s "
                                    "AND revoked_at IS NULL", (key_id,)).rowcount) > 0

    def list_api_keys(self, tenant: str) -> list[APIKey]:
        """The keys of a tenant, without the keys themselves (needs the owner login)."""
        with self.backend.owner_transaction("list API keys") as conn:
            rows: list[Any] = conn.execute(f"SELECT {KEY_COLUMNS} FROM bunko.api_keys WHERE tenant = %s "
                                           "ORDER BY id", (tenant,)).fetchall()
        return [self._key(r) for r in rows]

    def _require_operator(self, what: str) -> None:
        """Refuse an application login before anything is changed: only the owner sees every tenant."""
        with self.backend.owner_transaction(what) as conn:
            owner = conn.execute("SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class "
                                 "WHERE oid = 'bunko.tenants'::regclass").fetchone()
        if owner is None or not owner[0]:
            raise VectorStoreError(
                f"this PostgreSQL login may not {what}: use the owner login (the one that ran `bunko db migrate`) "
                "for `bunko admin`; the application login sees one tenant at a time")

    def _tenant_rows(self) -> list[tuple[str, str]]:
        """Every tenant, read as the owner (whose policy on ``bunko.tenants`` shows all rows)."""
        self._require_operator("list tenants")
        with self.backend.owner_transaction("list tenants") as conn:
            rows = conn.execute("SELECT name, created_at FROM bunko.tenants ORDER BY name").fetchall()
        return [(r[0], self._d.time_out(r[1])) for r in rows]

    def _active_keys(self) -> dict[str, int]:
        with self.backend.owner_transaction("count API keys") as conn:
            rows = conn.execute("SELECT tenant, count(*) FROM bunko.api_keys WHERE revoked_at IS NULL "
                                "GROUP BY tenant").fetchall()
        return {r[0]: int(r[1]) for r in rows}

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
