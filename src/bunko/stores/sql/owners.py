"""Who may write and delete records (R14) inside a tenant: the ownership rule of ``DELETE /documents``.

A record (a chunk) belongs to the user who uploaded its document (the document's upload job names
the user) or, for a record upserted without a document, to the user who created it (the chunk's
``owner`` column, SQLite migration 12 and PostgreSQL m016). A restricted writer (a user's API key that
is not the tenant's admin key) may replace or delete only those; tenant keys, admin keys and the
library (no user) may touch any record of the tenant. Documents ingested without an upload (the CLI,
the library) and uploads of tenant keys belong to no user, so only the tenant may change their records.

The rule is checked inside the writing transaction, so no other write can slip in between the check
and the change.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...errors import ForbiddenError
from ...types import RecordOwner, VectorRecord

if TYPE_CHECKING:
    from .store import SQLStore

_SHOWN = 5  # ids named in a refusal


def _refuse(user: str | None, what: str, ids: Sequence[str]) -> ForbiddenError:
    shown = ", ".join(repr(i) for i in ids[:_SHOWN]) + (f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else "")
    return ForbiddenError(f"the key of user {user!r} may {what} only records of the documents its user uploaded "
                          f"and records its user created; not {shown}")


def existing_owners(store: SQLStore, conn: Any, tenant_pk: int, collection_pk: int,
                    ids: Sequence[str]) -> dict[str, tuple[str | None, bool]]:
    """The stored records among ``ids``: id -> (the user who owns it or None, whether it is a document's)."""
    if not ids:
        return {}
    listed, params = store.dialect.any("c.uid", list(ids))
    rows = store.run(conn, "SELECT c.uid, c.owner, d.uid, j.user_id FROM chunks c "
                           "LEFT JOIN documents d ON d.tenant_id = c.tenant_id AND d.id = c.document_id "
                           "LEFT JOIN jobs j ON j.tenant_id = c.tenant_id AND j.uid = d.uid "
                           f"WHERE c.tenant_id = ? AND c.collection_id = ? AND {listed}",
                     (tenant_pk, collection_pk, *params)).fetchall()
    return {uid: ((job_user if document is not None else owner), document is not None)
            for uid, owner, document, job_user in rows}


def check_documents(store: SQLStore, conn: Any, tenant_pk: int, owner: RecordOwner,
                    document_ids: Sequence[str]) -> None:
    """Refuse a restricted writer attaching records to documents its user did not upload."""
    if not owner.restricted or not document_ids:
        return
    listed, params = store.dialect.any("d.uid", list(document_ids))
    rows = store.run(conn, "SELECT d.uid, j.user_id FROM documents d LEFT JOIN jobs j "
                           f"ON j.tenant_id = d.tenant_id AND j.uid = d.uid WHERE d.tenant_id = ? AND {listed}",
                     (tenant_pk, *params)).fetchall()
    foreign = sorted(uid for uid, user in rows if user is None or user != owner.user_id)
    if foreign:
        raise _refuse(owner.user_id, "attach records to", foreign)


def check_records(owner: RecordOwner | None, found: dict[str, tuple[str | None, bool]], what: str) -> None:
    """Refuse a restricted writer touching stored records (``found``: :func:`existing_owners`) of another."""
    if owner is None or not owner.restricted:
        return
    foreign = [uid for uid, (user, _) in found.items() if user is None or user != owner.user_id]
    if foreign:
        raise _refuse(owner.user_id, what, sorted(foreign))


def stamp(store: SQLStore, conn: Any, tenant_pk: int, collection_pk: int, owner: RecordOwner | None,
          records: Sequence[VectorRecord], ids: Sequence[str], found: dict[str, tuple[str | None, bool]]) -> None:
    """Record who owns the records just written: a replaced loose record keeps its owner, a new one gets the
    writer's user (records of documents are their document's)."""
    by_owner: dict[str, list[str]] = {}
    for uid, record in zip(ids, records, strict=True):
        if record.document_id:
            continue
        before = found.get(uid)
        user = before[0] if before is not None and not before[1] else (owner.user_id if owner else None)
        if user is not None:
            by_owner.setdefault(user, []).append(uid)
    for user, uids in by_owner.items():
        listed, params = store.dialect.any("uid", uids)
        store.run(conn, f"UPDATE chunks SET owner = ? WHERE tenant_id = ? AND collection_id = ? AND {listed}",
                  (user, tenant_pk, collection_pk, *params))


__all__ = ["check_documents", "check_records", "existing_owners", "stamp"]
