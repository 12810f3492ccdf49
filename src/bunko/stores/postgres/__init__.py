"""PostgreSQL + pgvector: the same store contract as the embedded store, for production.

* :mod:`.backend` -- the database: the pool, row-level security per transaction, HNSW builds.
* :mod:`.store` -- the tenant-bound store: COPY of chunks with their keyword columns, versions.
* :mod:`.search` -- its search port: the vector planner and filtered search over :mod:`.columns`.
* :mod:`.migrations` -- the ordered schema migrations; :mod:`.schema` applies them and checks pgvector.
* :mod:`.service` -- the HTTP server's records, API keys out of the application role's reach.

Collections, documents and records are the SQL core's (:mod:`bunko.stores.sql`), run with ``bunko``
first on the search path.
"""

from ...config import PostgresSettings
from .backend import PostgresBackend, open_postgres
from .dialect import HAVE_POSTGRES, POSTGRES
from .schema import PGVECTOR_MINIMUM, check_pgvector_version, migrate_database, schema_status, version_tuple
from .search import PostgresReader
from .store import PostgresVectorStore

__all__ = ["HAVE_POSTGRES", "PGVECTOR_MINIMUM", "POSTGRES", "PostgresBackend", "PostgresReader", "PostgresSettings",
           "PostgresVectorStore", "check_pgvector_version", "migrate_database", "open_postgres", "schema_status",
           "version_tuple"]
