"""The embedded store: one SQLite file (WAL) with exact cosine search in numpy.

* :mod:`.backend` -- the database: connections, transactions, ``open_sqlite``.
* :mod:`.store` -- the tenant-bound store (its writes' keyword index) and its search port.
* :mod:`.matrix` -- vectors and metadata columns held in memory per collection.
* :mod:`.migrations` -- the ordered schema migrations; :mod:`.schema` -- dialect and table names.

Collections, documents and records are the SQL core's (:mod:`bunko.stores.sql`).
"""

from .backend import SQLiteBackend, open_sqlite, use_wal
from .migrations import MIGRATIONS, SCHEMA_VERSION, apply_migrations, split_statements
from .schema import SQLITE, fts_table
from .store import SQLiteReader, SQLiteVectorStore

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "SQLITE", "SQLiteBackend", "SQLiteReader", "SQLiteVectorStore",
           "apply_migrations", "fts_table", "open_sqlite", "split_statements", "use_wal"]
