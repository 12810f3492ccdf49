"""PostgreSQL migrations of many tenants and users on one engine (m016 on), kept apart from
:mod:`.migrations` (which lists them in order) so each module stays readable.

Like every migration they hold what they run: plain SQL, no call into the store's live code.
"""

from __future__ import annotations

# m016: the user who created a record upserted without a document (bunko.stores.sql.owners).
M016_RECORD_OWNERS = [
    "ALTER TABLE bunko.chunks ADD COLUMN owner text",
]

__all__ = ["M016_RECORD_OWNERS"]
