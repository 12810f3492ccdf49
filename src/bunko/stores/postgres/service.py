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

from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from ...errors import VectorStoreError
from ..sql.service import KEY_COLUMNS, SQLServiceRecords

if TYPE_CHECKING:
    from .backend import PostgresBackend


class PostgresServiceRecords(SQLServiceRecords):
    """``ServiceRecords`` on PostgreSQL (see the module doc for who may do what)."""

    backend: PostgresBackend

    # One key's row, through the definer function (the application role may not read the table).
    _AUTHENTICATE = f"SELECT {KEY_COLUMNS}, key_hash FROM bunko.authenticate_key(?)"

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
