"""PostgreSQL + pgvector backend: the same contract as the embedded store, for production.

Install with ``pip install "bunko[postgres]"`` and point ``BUNKO_DATABASE_URL`` (or
``--db``) at ``postgresql://...``.

* Schema: versioned migrations in :mod:`bunko.stores.pg_migrations` (``bunko db migrate``).
* Isolation (R15): every statement filters by ``tenant_id``, and Row-Level Security
  checks the per-transaction setting ``bunko.tenant_id`` on every tenant table. The
  pool runs as ``bunko_app`` (``SET ROLE`` when the login role is a superuser or
  may bypass RLS), so even a query that forgot its predicate returns nothing.
* Vectors: a ``vector`` column (dimension fixed per collection and checked on every
  write and query) and, once a collection is large enough, a partial HNSW cosine
  index per collection on ``embedding::vector(d)`` (``halfvec(d)`` above 2,000
  dimensions), built after bulk loads.
* Writes: documents are written in batches with binary ``COPY``, one transaction per
  batch; a new version of a document replaces its chunks inside that transaction.
* Restricted search (R21): a planner that counts the restricted rows and picks an
  exact scan (few rows, or no index), an HNSW iterative index scan (pgvector 0.8+,
  verified with ``SHOW``), or an over-fetch-and-retry loop, so that when k matching
  chunks exist, k come back in the right order.

Collections, documents, records and the server's records are the SQL core's
(:mod:`bunko.stores.sql`), run with ``bunko`` first on the search path; this module keeps
the pool and RLS settings, migrations, COPY, document versions, HNSW upkeep and both searches.
"""

from __future__ import annotations

import logging
import re
import threading
from collections import Counter, OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import crashpoints
from ..analysis import (
    Analyzer,
    get_analyzer,
    pairs_literal,
    token_pairs,
    ts_lexemes_query,
    tsquery_literal,
    tsvector_literal,
)
from ..config import PostgresSettings, redact_url
from ..errors import CollectionNotFoundError, ConfigError, PgvectorVersionError, VectorStoreError
from ..filters import Filter, FilterLike, as_filter, compile_postgres
from ..types import SearchHit
from . import pg_migrations
from .base import DocumentWrite, check_query_vector
from .sql import (
    ChunkRow,
    Dialect,
    PlannedWrite,
    SQLBackend,
    SQLStore,
    check_dimension,
    check_name,
    check_top_k,
    iso_text,
    json_value,
)
from .sql.columns import Column, Misaligned, filter_mask
from .sql.postings import LENGTH_MAX, Counted, PostingsTable, bm25_idf, phrase_term

try:  # optional dependencies: the "postgres" extra
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg import sql
    from psycopg.types.json import Jsonb
    from psycopg_pool import ConnectionPool

    HAVE_POSTGRES = True
except ImportError:  # pragma: no cover - exercised by the optional-dependency test
    HAVE_POSTGRES = False

logger = logging.getLogger(__name__)


# The backend's tuning knobs (pool, HNSW, search paths, keyword ranking) are the [postgres]
# section of the settings tree: ``BUNKO_PG_<KEY>`` or ``[postgres] <key>`` in bunko.toml.


def _one(conn: Any, query: str, params: tuple[Any, ...] = ()) -> Any:
    """The single value of a statement that always returns one row."""
    row = conn.execute(query, params).fetchone()
    if row is None:  # pragma: no cover - the statements passed here always return a row
        raise VectorStoreError(f"PostgreSQL returned no row for {query!r}")
    return row[0]


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


# The pgvector features bunko uses and the release that brought each: HNSW indexes and
# ``hnsw.ef_search`` (0.5.0); ``halfvec`` with HNSW over it, for embeddings above 2,000 dimensions
# (0.7.0). Iterative index scans (0.8.0) are used when present; without them a filtered search
# over-fetches instead ([postgres] iterative_scan).
PGVECTOR_MINIMUM = "0.7.0"
PGVECTOR_RECOMMENDED = "0.8.0"


def check_pgvector_version(installed: str | None, available: str | None = None) -> None:
    """Refuse a pgvector older than :data:`PGVECTOR_MINIMUM`.

    ``installed`` is the extension's version in the database (None: not created yet), ``available``
    the version ``CREATE EXTENSION`` / ``ALTER EXTENSION vector UPDATE`` would install. Neither known:
    nothing to judge (the migration reports a missing pgvector itself).
    """
    minimum = _version_tuple(PGVECTOR_MINIMUM)
    if installed is not None and _version_tuple(installed) < minimum:
        if available is not None and _version_tuple(available) >= minimum:
            hint = f"the server has pgvector {available}: run ALTER EXTENSION vector UPDATE as its owner"
        else:
            hint = f"install pgvector {PGVECTOR_MINIMUM} or later (e.g. the pgvector/pgvector:pg17 image)"
        raise PgvectorVersionError(f"pgvector {installed} is too old: bunko needs {PGVECTOR_MINIMUM} or later "
                                   f"(halfvec and HNSW indexes; {PGVECTOR_RECOMMENDED} for iterative index "
                                   f"scans); {hint}")
    if installed is None and available is not None and _version_tuple(available) < minimum:
        raise PgvectorVersionError(f"this server offers pgvector {available}: bunko needs {PGVECTOR_MINIMUM} or "
                                   f"later (halfvec and HNSW indexes); install a newer pgvector "
                                   f"(e.g. the pgvector/pgvector:pg17 image)")


def _pgvector_versions(conn: Any) -> tuple[str | None, str | None]:
    """pgvector's version in this database (None: not created) and the one the server would install."""
    installed = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    available = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    return (installed[0] if installed else None), (available[0] if available else None)




def _executemany(conn: Any, statement: str, rows: list[Sequence[Any]]) -> None:
    with conn.cursor() as cur:
        cur.executemany(statement, rows)


def _vector(value: Any) -> np.ndarray:
    return np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value, dtype=np.float32)


POSTGRES = Dialect(
    name="postgresql",
    mark="%s",
    now="now()",
    any_list=lambda column, values: (f"{column} = ANY(?)", [values]),
    json_in=lambda value: Jsonb(value),
    json_out=json_value,
    time_out=iso_text,
    vector_out=_vector,
    compile_filter=compile_postgres,
    executemany=_executemany,
    no_limit=None,
    for_update=" FOR UPDATE",
)

# A session's staging table for postings rows (see _Postings).
_POSTINGS_STAGE = ("CREATE TEMP TABLE IF NOT EXISTS bunko_postings_stage (tenant_id int8, collection_id int8, "
                   "segment int8, term text, entries bytea) ON COMMIT DELETE ROWS")


class _Postings(PostingsTable):
    """Keyword postings (see sql/postings.py). A write of 2,000 chunks makes about 70,000 rows: they go
    through the session's staging table, in binary COPY, and one INSERT ... SELECT (COPY cannot write a
    table under row-level security): 0.35 s for 71,000 rows, against 1.0 s as arrays in one INSERT."""

    def _insert(self, conn: Any, rows: Sequence[tuple[int, int, int, str, bytes]]) -> None:
        if not rows:
            return
        with conn.cursor() as cur:
            with cur.copy("COPY bunko_postings_stage FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "int8", "int8", "text", "bytea"])
                for row in rows:
                    copy.write_row(row)
            cur.execute("INSERT INTO keyword_postings SELECT * FROM bunko_postings_stage")
            cur.execute("TRUNCATE bunko_postings_stage")


# Each collection's keyword postings, kept by every chunk write and delete.
_POSTINGS = _Postings(POSTGRES)


class PostgresBackend(SQLBackend):
    """A PostgreSQL database that hands out tenant-bound stores."""

    scheme = "postgresql"
    dialect = POSTGRES

    def __init__(self, url: str, *, settings: PostgresSettings | None = None, migrate: bool = True) -> None:
        if not HAVE_POSTGRES:
            raise ConfigError('the PostgreSQL backend needs extra packages: pip install "bunko[postgres]"')
        self.url = url
        self.settings = settings or PostgresSettings.from_env()
        conninfo = re.sub(r"^postgresql\+psycopg://", "postgresql://", url)
        self._conninfo = conninfo
        if migrate and not self._schema_is_current():  # an application login may not migrate: only when needed
            migrate_database(conninfo)
        self._check_schema()
        self.login_risks = self._login_risks()
        if self.login_risks:
            self._refuse_or_warn()
        self._pool = ConnectionPool(
            conninfo, min_size=self.settings.pool_min, max_size=self.settings.pool_max,
            configure=self._configure, open=False, name="bunko",
            # No server-side prepared statements: a generic plan chosen before ANALYZE (or for
            # one restriction size) would stick to the connection; custom plans fit each query.
            kwargs={"prepare_threshold": None},
            # A connection the server dropped (restart, idle timeout) is replaced on checkout.
            check=ConnectionPool.check_connection,
        )
        try:
            self._pool.open(wait=True, timeout=30)
        except Exception as exc:
            raise VectorStoreError(f"cannot connect to PostgreSQL: {exc}") from exc
        self.pgvector_version = self._scalar("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        try:
            check_pgvector_version(self.pgvector_version or "0")
        except PgvectorVersionError:
            self._pool.close()
            raise
        self._iterative = (
            self.settings.iterative_scan is not False and _version_tuple(self.pgvector_version) >= (0, 8)
        )
        self._index_lock = threading.Lock()
        self._indexed: set[int] = set()  # collections whose HNSW index is known to exist
        # Filtered search: metadata columns of the most recently filtered collections (see _MetadataColumns).
        self._columns: OrderedDict[int, _MetadataColumns] = OrderedDict()
        self._columns_lock = threading.Lock()

    def metadata_columns(self, collection_pk: int) -> _MetadataColumns:
        """The in-memory metadata columns of a collection (created empty; the least recently used go)."""
        with self._columns_lock:
            columns = self._columns.get(collection_pk)
            if columns is None:
                columns = self._columns[collection_pk] = _MetadataColumns()
            self._columns.move_to_end(collection_pk)
            held = sum(len(c.ids) for c in self._columns.values())
            while len(self._columns) > 1 and (len(self._columns) > _COLUMN_COLLECTIONS or held > _COLUMN_ROWS):
                _, gone = self._columns.popitem(last=False)
                held -= len(gone.ids)
            return columns

    def forget_columns(self, collection_pk: int) -> None:
        with self._columns_lock:
            self._columns.pop(collection_pk, None)

    # -- connections ---------------------------------------------------------------------
    def _configure(self, conn: Any) -> None:
        """Per pooled connection: vector types, and drop to the application role if needed."""
        register_vector(conn)
        # The search breadth every HNSW scan starts from; a scan that needs more sets it locally.
        conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(self.settings.ef_search),))
        if self.login_risks:  # the login could bypass RLS: drop to the application role (see _login_risks)
            conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(pg_migrations.APP_ROLE)))
        # COPY cannot write into a table with row-level security, so bulk rows go through this
        # session-private staging table and then one INSERT ... SELECT that RLS checks.
        # The SQL core writes unqualified table names: bunko's schema first, then the role's own path
        # (where the pgvector types were installed).
        conn.execute("SELECT set_config('search_path', 'bunko, ' || current_setting('search_path'), false)")
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS bunko_chunk_stage (uid text, tenant_id int8, collection_id int8, "
            "document_id int8, version_id int8, chunk_index int4, start_offset int4, end_offset int4, "
            "token_count int4, content text, metadata jsonb, embedding vector, fts_text text, fts_length int4, "
            "fts_pairs_text text) "
            "ON COMMIT DELETE ROWS"
        )
        conn.execute(_POSTINGS_STAGE)
        conn.commit()

    def _check_schema(self) -> None:
        try:
            with psycopg.connect(self._conninfo, connect_timeout=10) as conn:
                version = _one(conn, "SELECT coalesce(max(version), 0) FROM bunko.schema_migrations")
        except psycopg.errors.UndefinedTable as exc:
            raise VectorStoreError("the database has no bunko schema yet: run `bunko db migrate`") from exc
        except psycopg.OperationalError as exc:
            raise VectorStoreError(f"cannot connect to PostgreSQL: {exc}") from exc
        if version < len(pg_migrations.MIGRATIONS):
            raise VectorStoreError(
                f"the database schema is at version {version}, this bunko needs {len(pg_migrations.MIGRATIONS)}: "
                "run `bunko db migrate`"
            )

    def _schema_is_current(self) -> bool:
        """Whether every migration is applied (read with the login role; False when unknown)."""
        try:
            with psycopg.connect(self._conninfo, connect_timeout=10) as conn:
                version = _one(conn, "SELECT coalesce(max(version), 0) FROM bunko.schema_migrations")
        except psycopg.Error:
            return False
        return bool(version >= len(pg_migrations.MIGRATIONS))

    def _login_risks(self) -> list[str]:
        """Why the login role could get around row-level security (empty for a proper application login).

        A superuser, a role with BYPASSRLS, and the owner of the bunko tables (or a member of the
        owner role: it may ``ALTER TABLE ... NO FORCE ROW LEVEL SECURITY``) are all risks: the pool
        drops to ``bunko_app`` with ``SET ROLE``, but a statement could undo that with ``RESET ROLE``.
        """
        with psycopg.connect(self._conninfo, connect_timeout=10) as conn:
            row = conn.execute(
                "SELECT r.rolname, r.rolsuper, r.rolbypassrls, pg_has_role(current_user, c.relowner, 'MEMBER') "
                "FROM pg_roles r, pg_class c WHERE r.rolname = current_user AND c.oid = 'bunko.chunks'::regclass"
            ).fetchone()
        if row is None:  # pragma: no cover - the schema check has found bunko.chunks
            raise VectorStoreError("the database has no bunko schema yet: run `bunko db migrate`")
        name, superuser, bypass, owner = row
        risks = []
        if superuser:
            risks.append(f"{name} is a superuser")
        elif bypass:
            risks.append(f"{name} has BYPASSRLS")
        if owner and not superuser:
            risks.append(f"{name} owns the bunko tables")
        return risks

    def _refuse_or_warn(self) -> None:
        """Refuse a risky login when ``[postgres] require_app_login`` is set; otherwise say so loudly, once."""
        problem = (f"bunko logs in to PostgreSQL as a role that can get around row-level security "
                   f"({'; '.join(self.login_risks)}). Its connections drop to {pg_migrations.APP_ROLE} with "
                   "SET ROLE, which a statement could undo with RESET ROLE. Run the server with a separate "
                   f"application login (CREATE ROLE bunko_api LOGIN PASSWORD '...' IN ROLE {pg_migrations.APP_ROLE}) "
                   "and keep the owner login for `bunko db migrate` and `bunko admin` (docs/ARCHITECTURE.md, "
                   '"PostgreSQL logins").')
        if self.settings.require_app_login:
            raise VectorStoreError(problem + " Refused: BUNKO_PG_REQUIRE_APP_LOGIN is set.")
        logger.warning("SECURITY WARNING: %s Set BUNKO_PG_REQUIRE_APP_LOGIN=true to refuse such logins.", problem)

    @contextmanager
    def owner_transaction(self, what: str) -> Iterator[Any]:
        """A transaction on a connection of the login role itself (not dropped to ``bunko_app``).

        For the statements only the owner of the bunko schema may run (API keys); an application
        login gets a ``VectorStoreError`` that says which login to use.
        """
        try:
            with psycopg.connect(self._conninfo, connect_timeout=10) as conn, conn.transaction():
                yield conn
        except psycopg.errors.InsufficientPrivilege as exc:
            raise VectorStoreError(
                f"this PostgreSQL login may not {what}: use the owner login (the one that ran `bunko db migrate`) "
                "for `bunko admin`; the server's application login cannot read or change API keys"
            ) from exc
        except psycopg.OperationalError as exc:
            raise VectorStoreError(f"cannot connect to PostgreSQL: {exc}") from exc
        except psycopg.Error as exc:
            raise VectorStoreError(f"PostgreSQL error: {exc}") from exc

    def service_records(self) -> Any:
        """The server's records, with API keys behind the definer functions (see :mod:`.pg_service`)."""
        from .pg_service import PostgresServiceRecords

        return PostgresServiceRecords(self)

    def _scalar(self, query: str) -> Any:
        with self._pool.connection() as conn:
            return conn.execute(query).fetchone()[0]

    @contextmanager
    def transaction(self, tenant: str | None, tenant_pk: int | None, *, write: bool = True) -> Iterator[Any]:
        """A pooled connection in a transaction with the tenant settings RLS checks.

        ``tenant`` None binds no tenant: every tenant table then looks empty (keys, rate windows).
        """
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute(
                    "SELECT set_config('bunko.tenant', %s, true), set_config('bunko.tenant_id', %s, true)",
                    (tenant or "", "" if tenant_pk is None else str(tenant_pk)),
                )
                yield conn
        except psycopg.errors.UndefinedFile as exc:
            raise VectorStoreError(f"PostgreSQL is missing a file or extension: {exc}") from exc
        except psycopg.errors.TransactionRollback as exc:  # a deadlock or a serialization failure
            raise VectorStoreError(f"PostgreSQL rolled the transaction back; nothing was changed, try again: "
                                   f"{exc}") from exc
        except psycopg.OperationalError as exc:
            raise VectorStoreError(f"lost the connection to PostgreSQL: {exc}") from exc
        except psycopg.errors.DataException as exc:
            raise VectorStoreError(f"PostgreSQL refused the data: {exc}") from exc
        except psycopg.Error as exc:
            raise VectorStoreError(f"PostgreSQL error: {exc}") from exc

    def build_index_concurrently(self, collection_pk: int, dim: int, m: int, ef_construction: int) -> str | None:
        """``CREATE INDEX CONCURRENTLY`` a collection's HNSW index as the login role; None if it may not.

        The caller has checked that the collection is the tenant's. Runs outside any transaction
        (as CONCURRENTLY must); an invalid index left by a failed build is dropped and built again.
        """
        name = f"chunks_hnsw_{int(collection_pk)}"
        cast, ops = ((f"vector({dim})", "vector_cosine_ops") if dim <= 2000
                     else (f"halfvec({dim})", "halfvec_cosine_ops"))
        try:
            with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10) as conn:
                owner = conn.execute("SELECT pg_has_role(current_user, tableowner, 'USAGE') FROM pg_tables "
                                     "WHERE schemaname = 'bunko' AND tablename = 'chunks'").fetchone()
                if owner is None or not owner[0]:
                    return None
                valid = conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)",
                                     (f"bunko.{name}",)).fetchone()
                if valid is not None and valid[0]:
                    return name
                if valid is not None:
                    conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS bunko.{}").format(sql.Identifier(name)))
                conn.execute("SELECT set_config('maintenance_work_mem', %s, false), "
                             "set_config('max_parallel_maintenance_workers', %s, false)",
                             (self.settings.maintenance_work_mem, str(self.settings.parallel_workers)))
                conn.execute(sql.SQL(
                    "CREATE INDEX CONCURRENTLY IF NOT EXISTS {} ON bunko.chunks USING hnsw ((embedding::" + cast
                    + ") " + ops + ") WITH (m = {}, ef_construction = {}) WHERE collection_id = {}"
                ).format(sql.Identifier(name), sql.Literal(int(m)), sql.Literal(int(ef_construction)),
                         sql.Literal(int(collection_pk))))
        except psycopg.Error as exc:
            raise VectorStoreError(f"could not build the HNSW index {name}: {exc}") from exc
        return name

    def bind_tenant(self, conn: Any, tenant_pk: int) -> None:
        """Set the tenant row id that RLS checks, for the rest of the transaction."""
        conn.execute("SELECT set_config('bunko.tenant_id', %s, true)", (str(tenant_pk),))

    def for_tenant(self, tenant: str) -> PostgresVectorStore:
        """A store bound to ``tenant``; the only way to reach data."""
        return PostgresVectorStore(self, check_name("tenant", tenant))

    def close(self) -> None:
        """Close the pool."""
        self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresBackend({redact_url(self.url)!r})"


def migrate_database(conninfo: str, *, target: int | None = None) -> list[str]:
    """Apply pending migrations (up to version ``target``, default all); returns the names applied.

    Needs a role that owns the schema.
    """
    if not HAVE_POSTGRES:
        raise ConfigError('the PostgreSQL backend needs extra packages: pip install "bunko[postgres]"')
    applied: list[str] = []
    try:
        with psycopg.connect(conninfo, connect_timeout=10, autocommit=True) as conn:
            # One migrator at a time: other processes wait here, then find nothing to do.
            conn.execute("SELECT pg_advisory_lock(727274)")
            try:
                check_pgvector_version(*_pgvector_versions(conn))  # before anything is changed
                with conn.transaction():
                    for statement in pg_migrations.BOOTSTRAP:
                        conn.execute(statement)
                    conn.execute(pg_migrations.CREATE_APP_ROLE)
                    done = {r[0] for r in conn.execute("SELECT version FROM bunko.schema_migrations")}
                    for number, (name, statements) in enumerate(pg_migrations.MIGRATIONS, start=1):
                        if number in done or (target is not None and number > target):
                            continue
                        for step in statements:
                            if callable(step):
                                step(conn)
                            else:
                                conn.execute(step)
                        conn.execute("INSERT INTO bunko.schema_migrations (version, name) VALUES (%s, %s)",
                                     (number, name))
                        applied.append(name)
                    for statement in pg_migrations.GRANTS:
                        conn.execute(statement)
                    if not _one(conn, "SELECT rolsuper OR pg_has_role(current_user, %s, 'MEMBER') FROM pg_roles "
                                      "WHERE rolname = current_user", (pg_migrations.APP_ROLE,)):
                        conn.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(
                            sql.Identifier(pg_migrations.APP_ROLE)))
            finally:
                conn.execute("SELECT pg_advisory_unlock(727274)")
    except psycopg.errors.InsufficientPrivilege as exc:
        raise VectorStoreError(
            f"not allowed to migrate the bunko schema ({exc}); run `bunko db migrate` as the schema owner"
        ) from exc
    except psycopg.errors.FeatureNotSupported as exc:
        raise VectorStoreError(f"PostgreSQL lacks a feature bunko needs: {exc}") from exc
    except (psycopg.errors.UndefinedFile, psycopg.errors.UndefinedObject) as exc:
        raise VectorStoreError(
            f"the pgvector extension is not available on this server ({exc}); install pgvector"
        ) from exc
    except psycopg.OperationalError as exc:
        raise VectorStoreError(f"cannot connect to PostgreSQL: {exc}") from exc
    return applied


def schema_status(conninfo: str) -> dict[str, Any]:
    """Applied and pending migrations, and the server's versions."""
    if not HAVE_POSTGRES:
        raise ConfigError('the PostgreSQL backend needs extra packages: pip install "bunko[postgres]"')
    try:
        with psycopg.connect(conninfo, connect_timeout=10) as conn:
            server = _one(conn, "SHOW server_version")
            vector = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
            try:
                rows = conn.execute("SELECT version, name, applied_at FROM bunko.schema_migrations ORDER BY version")
                applied = [{"version": v, "name": n, "applied_at": a.isoformat()} for v, n, a in rows]
            except psycopg.errors.UndefinedTable:
                applied = []
    except psycopg.OperationalError as exc:
        raise VectorStoreError(f"cannot connect to PostgreSQL: {exc}") from exc
    names = {a["version"] for a in applied}
    pending = [{"version": i, "name": n} for i, (n, _) in enumerate(pg_migrations.MIGRATIONS, start=1)
               if i not in names]
    return {"server_version": server, "pgvector_version": vector[0] if vector else None,
            "pgvector_required": PGVECTOR_MINIMUM,
            "applied": applied, "pending": pending}


def _vector_literal_type(dim: int) -> str:
    return f"vector({dim})" if dim <= 2000 else f"halfvec({dim})"


class PostgresVectorStore(SQLStore):
    """The PostgreSQL store bound to one tenant. Build it with ``PostgresBackend.for_tenant``.

    The SQL core does collections, documents, records and hydration; this class adds the binary
    COPY of chunks with their tsvector, document versions, the HNSW index's upkeep, the vector
    search planner and BM25 in SQL.
    """

    _backend: PostgresBackend
    _collection_extra = ", keyword_tokens"

    def __init__(self, backend: PostgresBackend, tenant: str) -> None:
        super().__init__(backend, tenant)
        self._bulk = False
        self.last_plan = ""  # the strategy of the last vector search (for tests and benchmarks)
        self.last_keyword_plan = ""  # and of the last keyword search: "postings" or "pruned" (SQL)

    # -- what the core asks of a backend ---------------------------------------------------
    def _keywords(self, analyzer: Analyzer, content: str) -> tuple[str, int, Counter[str], str]:
        return _keyword_columns(analyzer, content)

    def _collection_settings(self) -> dict[str, Any]:
        settings = self._backend.settings
        return {"hnsw_m": settings.hnsw_m, "hnsw_ef_construction": settings.hnsw_ef_construction}

    @staticmethod
    def _count(conn: Any, tenant_pk: int, collection_pk: int, chunks: int, tokens: int) -> None:
        conn.execute(
            "UPDATE bunko.collections SET chunk_count = chunk_count + %s, keyword_tokens = keyword_tokens + %s, "
            "mutation_seq = mutation_seq + %s WHERE tenant_id = %s AND id = %s",
            (chunks, tokens, 1 if chunks < 0 else 0, tenant_pk, collection_pk),
        )

    def _insert_chunks(self, conn: Any, tenant_pk: int, collection_pk: int, rows: list[ChunkRow],
                       vectors: np.ndarray, keywords: list[Any]) -> None:
        ids = self._copy_chunks(conn, [
            (uid, tenant_pk, collection_pk, doc_pk, version_pk, index, start, end, tokens, content, Jsonb(meta),
             vectors[i], keywords[i][0], keywords[i][1], keywords[i][3])
            for i, (uid, doc_pk, version_pk, index, start, end, tokens, content, meta) in enumerate(rows)
        ])
        # The collection row's lock (taken here) orders writers before their postings and statistics.
        self._count(conn, tenant_pk, collection_pk, len(rows), sum(k[1] for k in keywords))
        at = {row[0]: i for i, row in enumerate(rows)}
        counts = _POSTINGS.add(conn, (tenant_pk, collection_pk), [  # each term's number of new chunks
            (chunk_pk, keywords[at[uid]][2], _posting_size(keywords[at[uid]][1])) for chunk_pk, uid in ids])
        if counts:
            terms = sorted(counts)  # one lock order for every writer: concurrent loads never deadlock
            conn.execute(
                "INSERT INTO bunko.keyword_df (tenant_id, collection_id, term, df) SELECT %s, %s, t, n "
                "FROM unnest(%s::text[], %s::int8[]) AS x(t, n) ORDER BY t "
                "ON CONFLICT (tenant_id, collection_id, term) DO UPDATE SET df = keyword_df.df + excluded.df",
                (tenant_pk, collection_pk, terms, [counts[t] for t in terms]),
            )

    def _delete_chunks(self, conn: Any, tenant_pk: int, collection_pk: int, *,
                       document_pks: Sequence[int] | None = None, uids: Sequence[str] | None = None) -> int:
        params: tuple[Any, ...]
        if document_pks is not None:
            where, params = "tenant_id = %s AND document_id = ANY(%s)", (tenant_pk, list(document_pks))
        else:
            where, params = ("tenant_id = %s AND collection_id = %s AND uid = ANY(%s)",
                             (tenant_pk, collection_pk, list(uids or [])))
        removed, tokens, terms, counts, ids = conn.execute(
            f"WITH gone AS (DELETE FROM bunko.chunks WHERE {where} RETURNING id, fts, fts_length), "
            "terms AS (SELECT t.term, count(*) AS n FROM gone g, LATERAL ("
            + pg_migrations.KEYWORD_TERMS.format(fts="g.fts") + ") t GROUP BY t.term) "
            "SELECT (SELECT count(*) FROM gone), (SELECT coalesce(sum(fts_length), 0) FROM gone), "
            "ARRAY(SELECT term FROM terms ORDER BY term), ARRAY(SELECT n FROM terms ORDER BY term), "
            "ARRAY(SELECT id FROM gone)",
            params,
        ).fetchone()
        if removed:
            # Every writer locks the collection row before any keyword_df row, and those rows in term
            # order (as _insert_chunks does): concurrent deletes and loads into one collection never
            # deadlock.
            self._count(conn, tenant_pk, collection_pk, -int(removed), -int(tokens))
            _POSTINGS.remove(conn, (tenant_pk, collection_pk), (int(i) for i in ids))
            if terms:
                conn.execute("SELECT 1 FROM bunko.keyword_df WHERE tenant_id = %s AND collection_id = %s "
                             "AND term = ANY(%s) ORDER BY term FOR UPDATE", (tenant_pk, collection_pk, list(terms)))
                conn.execute(
                    "UPDATE bunko.keyword_df k SET df = k.df - x.n FROM unnest(%s::text[], %s::int8[]) AS x(t, n) "
                    "WHERE k.tenant_id = %s AND k.collection_id = %s AND k.term = x.t",
                    (list(terms), [int(n) for n in counts], tenant_pk, collection_pk),
                )
        return int(removed)

    def _record_versions(self, conn: Any, tenant_pk: int,
                         written: list[tuple[int, PlannedWrite, DocumentWrite]]) -> list[int | None]:
        """One ``document_versions`` row per written document, and the documents point at it."""
        if not written:
            return []
        rows = conn.execute(
            "INSERT INTO bunko.document_versions (tenant_id, document_id, version, content_hash, metadata, "
            "chunk_count) SELECT %s, d, v, h, m, n "
            "FROM unnest(%s::int8[], %s::int4[], %s::text[], %s::jsonb[], %s::int4[]) AS t(d, v, h, m, n) "
            "RETURNING document_id, id",
            (tenant_pk, [pk for pk, _, _ in written], [p.version for _, p, _ in written],
             [d.content_hash for _, _, d in written], [Jsonb(d.metadata) for _, _, d in written],
             [p.chunk_count for _, p, _ in written]),
        ).fetchall()
        by_document = {int(d): int(v) for d, v in rows}
        conn.execute(
            "UPDATE bunko.documents d SET current_version_id = t.v FROM unnest(%s::int8[], %s::int8[]) "
            "AS t(d, v) WHERE d.tenant_id = %s AND d.id = t.d",
            ([pk for pk, _, _ in written], [by_document[pk] for pk, _, _ in written], tenant_pk),
        )
        return [by_document[pk] for pk, _, _ in written]

    def _drop_collection(self, conn: Any, tenant_pk: int, collection_pk: int) -> None:
        conn.execute("SELECT bunko.drop_hnsw_index(%s)", (collection_pk,))

    def _forget_collection(self, collection_pk: int) -> None:
        self._backend._indexed.discard(collection_pk)
        self._backend.forget_columns(collection_pk)

    def _after_write(self, collection_pk: int, chunk_count: int) -> None:
        self._maybe_build_index(collection_pk, chunk_count)

    _CHUNK_COLUMNS = ("uid, tenant_id, collection_id, document_id, version_id, chunk_index, start_offset, end_offset, "
                      "token_count, content, metadata, embedding")

    @classmethod
    def _copy_chunks(cls, conn: Any, rows: list[tuple]) -> list[tuple[int, str]]:
        """COPY rows (the chunk columns plus the analyzed keyword text) in binary, then one checked INSERT;
        returns the new rows' (id, uid)."""
        if not rows:
            return []
        columns = cls._CHUNK_COLUMNS
        with conn.cursor() as cur:
            with cur.copy(f"COPY bunko_chunk_stage ({columns}, fts_text, fts_length, fts_pairs_text) FROM STDIN "
                          "(FORMAT BINARY)") as copy:
                copy.set_types(["text", "int8", "int8", "int8", "int8", "int4", "int4", "int4", "int4", "text",
                                "jsonb", "vector", "text", "int4", "text"])
                for r in rows:
                    copy.write_row(r)
            # The analyzer's tokens arrive as a tsvector literal: the cast only parses it, no text-search
            # parser or dictionary runs, so the lexemes are exactly the tokens the queries ask for.
            cur.execute(f"INSERT INTO bunko.chunks ({columns}, fts, fts_length, fts_pairs) SELECT {columns}, "
                        "fts_text::tsvector, fts_length, fts_pairs_text::tsvector FROM bunko_chunk_stage "
                        "RETURNING id, uid")
            ids = [(int(r[0]), str(r[1])) for r in cur.fetchall()]
            cur.execute("TRUNCATE bunko_chunk_stage")
        return ids

    def _maybe_build_index(self, collection_pk: int, chunk_count: int) -> None:
        """Build the collection's HNSW index once it is big enough -- unless a bulk load is on.

        Inserting through an HNSW index is several times slower than building it once after
        the load, so ``bulk_load()`` defers the build to its end. The data is committed
        already, so a failing build is logged, not raised into the write.
        """
        if self._bulk or chunk_count < self._backend.settings.hnsw_min_rows:
            return
        try:
            self.build_index(collection_pk=collection_pk)
        except VectorStoreError as exc:
            logger.warning("could not build the HNSW index of collection %s: %s", collection_pk, exc)

    @contextmanager
    def bulk_load(self, collection: str) -> Iterator[None]:
        """Defer index builds while many documents are written; build and ANALYZE at the end."""
        self._bulk = True
        try:
            yield
        finally:
            self._bulk = False
            try:
                with self.session() as (conn, tenant_pk):
                    row = self._collection_row(conn, tenant_pk, collection)
                    collection_pk, total = int(row[0]), int(row[8])
            except CollectionNotFoundError:
                return
            self._maybe_build_index(collection_pk, total)
            with self.session() as (conn, _):
                conn.execute("SELECT bunko.analyze_tables()")

    def build_index(self, collection: str | None = None, *, collection_pk: int | None = None) -> str | None:
        """Build (if missing) the HNSW index of a collection; returns its name.

        When the login role owns the schema the index is built with ``CREATE INDEX CONCURRENTLY``
        on a connection of its own: searches and writes (of every tenant) go on meanwhile, the
        searches with the exact plan until the index is valid. Otherwise the schema's
        ``build_hnsw_index`` function builds it in one transaction (writes wait, reads do not).
        """
        settings = self._backend.settings
        with self._backend._index_lock:
            with self.session() as (conn, tenant_pk):
                if collection_pk is None:
                    collection_pk = int(self._collection_row(conn, tenant_pk, collection or "")[0])
                row = conn.execute("SELECT dimension, hnsw_m, hnsw_ef_construction FROM bunko.collections "
                                   "WHERE tenant_id = %s AND id = %s", (tenant_pk, collection_pk)).fetchone()
                if row is None:
                    return None
            crashpoints.reach("store.hnsw.build")
            name = self._backend.build_index_concurrently(int(collection_pk), *(int(v) for v in row))
            with self.session() as (conn, _):
                if name is None:
                    return conn.execute(
                        "SELECT bunko.build_hnsw_index(%s, %s, %s)",
                        (collection_pk, settings.maintenance_work_mem, settings.parallel_workers),
                    ).fetchone()[0]
                conn.execute("SELECT bunko.analyze_tables()")  # or the planner keeps estimating an empty table
            return name

    def _has_index(self, conn: Any, collection_pk: int) -> bool:
        # Only "it is valid" is cached: an index goes away only with its collection, and then the
        # collection lookup before this fails first. One round trip less per search. An index
        # still being built concurrently exists but is not valid: searches scan exactly meanwhile.
        if collection_pk in self._backend._indexed:
            return True
        found = bool(conn.execute(
            "SELECT coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)), false)",
            (f"bunko.chunks_hnsw_{collection_pk}",)).fetchone()[0])
        if found:
            self._backend._indexed.add(collection_pk)
        return found

    # -- search ---------------------------------------------------------------------------
    def query(
        self,
        collection: str,
        vector: Sequence[float] | np.ndarray,
        top_k: int = 5,
        *,
        threshold: float | None = None,
        document_ids: Sequence[str] | None = None,
        include_content: bool = True,
        filter: FilterLike = None,
    ) -> list[SearchHit]:
        """Top-k by cosine similarity, best first; restricted to ``document_ids`` and ``filter`` if given (R21)."""
        top_k = check_top_k(top_k)
        q = check_query_vector(vector)
        flt = as_filter(filter)
        with self.session() as (conn, tenant_pk):
            row = self._collection_row(conn, tenant_pk, collection)
            assert tenant_pk is not None
            collection_pk, dim, total = int(row[0]), int(row[5]), int(row[8])
            check_dimension(dim, q.shape[0], collection)
            plan = self.plan(conn, tenant_pk, collection_pk, dim, total, top_k, document_ids, flt)
            ranked = plan.run(conn, q)
            if threshold is not None:
                ranked = [(pk, s) for pk, s in ranked if s >= threshold]
            self.last_plan = plan.strategy
            return self._hits(conn, tenant_pk, collection_pk, ranked, include_content)

    @staticmethod
    def _document_pks(conn: Any, tenant_pk: int, collection_pk: int, document_ids: Sequence[str]) -> list[int]:
        return [int(r[0]) for r in conn.execute(
            "SELECT id FROM bunko.documents WHERE tenant_id = %s AND collection_id = %s AND uid = ANY(%s)",
            (tenant_pk, collection_pk, [str(d) for d in document_ids]))]

    def _restricted_ids(self, conn: Any, tenant_pk: int, collection_pk: int, flt: Filter | None,
                        document_ids: Sequence[str] | None) -> np.ndarray | None:
        """The ids (ascending) of the collection's chunks in ``document_ids`` that pass ``flt``, from the
        metadata columns in memory; None when they do not line up with the table."""
        doc_pks = None if document_ids is None else self._document_pks(conn, tenant_pk, collection_pk,
                                                                       document_ids)
        if flt is None:
            return np.sort(np.fromiter((r[0] for r in conn.execute(
                "SELECT id FROM bunko.chunks WHERE tenant_id = %s AND document_id = ANY(%s)",
                (tenant_pk, doc_pks))), dtype=np.int64))
        passing = self._backend.metadata_columns(collection_pk).passing(conn, tenant_pk, collection_pk, flt, doc_pks)
        return None if passing is None else np.sort(passing)

    def plan(self, conn: Any, tenant_pk: int, collection_pk: int, dim: int, total: int, top_k: int,
             document_ids: Sequence[str] | None, flt: Filter | None = None) -> _Plan:
        """Choose how to search: exact scan, HNSW (iterative or over-fetch), from the restriction's size.

        A ``document_ids`` restriction is sized from the documents' chunk counts. A filter is sized
        by counting the chunks that pass it, stopping one past the exact-scan limit: a selective
        filter is known exactly and takes the exact path; a broad one is known to leave more than
        that, which is all the index strategies need (they fall back to the exact scan whenever
        they come back with fewer than min(k, matching) hits).
        """
        settings = self._backend.settings
        doc_pks: list[int] | None = None
        matching = total
        if document_ids is not None:
            doc_pks = self._document_pks(conn, tenant_pk, collection_pk, document_ids)
            matching = sum(r[0] for r in conn.execute(
                "SELECT chunk_count FROM bunko.documents WHERE tenant_id = %s AND id = ANY(%s)",
                (tenant_pk, doc_pks))) if doc_pks else 0
        has_index = total >= settings.hnsw_min_rows and self._has_index(conn, collection_pk)
        where: tuple[str, list[Any]] | None = compile_postgres(flt) if flt is not None else None
        restricted = doc_pks is not None or where is not None
        passing: np.ndarray | None = None
        if where is not None and flt is not None and has_index and matching > 0:
            # Without an index the exact scan applies the filter itself; no need to count first.
            # With one, the filter is evaluated over the collection's metadata columns in memory:
            # the chunks that pass, exactly, in about a millisecond instead of a scan of every row.
            passing = self._backend.metadata_columns(collection_pk).passing(conn, tenant_pk, collection_pk, flt,
                                                                          doc_pks)
            if passing is not None:
                matching = len(passing)
        if where is not None and has_index and matching > 0 and passing is None:
            # The columns did not line up with the table (see _MetadataColumns): count in SQL.
            bound = max(settings.exact_max_rows, top_k) + 1
            docs = " AND c.document_id = ANY(%s)" if doc_pks is not None else ""
            matching = int(conn.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM bunko.chunks c{_DOC_JOIN} WHERE c.tenant_id = %s "
                f"AND c.collection_id = %s{docs} AND {where[0]} LIMIT %s) AS passing",
                [tenant_pk, collection_pk, *([doc_pks] if doc_pks is not None else []), *where[1], bound],
            ).fetchone()[0])
        if matching == 0:
            strategy = "empty"
        elif not has_index or (restricted and matching <= settings.exact_max_rows):
            strategy = "exact"
        elif not restricted:
            strategy = "hnsw"
        elif self._backend._iterative:
            strategy = "hnsw-iterative"
        else:
            strategy = "hnsw-overfetch"
        return _Plan(strategy, tenant_pk, collection_pk, dim, top_k, doc_pks, matching, total, settings, where,
                     passing if strategy == "exact" else None)

    def keyword_search(
        self,
        collection: str,
        query: str,
        top_k: int = 5,
        *,
        document_ids: Sequence[str] | None = None,
        filter: FilterLike = None,
        include_content: bool = True,
    ) -> list[SearchHit]:
        """Top-k by BM25 (or ``ts_rank``, see ``PostgresSettings.keyword_ranking``) over the analyzed text.

        ``document_ids`` and ``filter`` restrict the matches; BM25's document frequencies are the
        collection's.
        """
        top_k = check_top_k(top_k)
        flt = as_filter(filter)
        with self.session() as (conn, tenant_pk):
            row = self._collection_row(conn, tenant_pk, collection)
            assert tenant_pk is not None
            # The query is analyzed as the collection's chunks were, and sent as a tsquery literal:
            # user text is never parsed as tsquery syntax.
            phrases = get_analyzer(row[10]).query_phrases(query)
            tsquery = tsquery_literal(phrases)
            if tsquery is None:
                return []
            restrict, restrict_params = "", []
            if document_ids is not None:
                restrict = (" AND c.document_id IN (SELECT id FROM bunko.documents WHERE tenant_id = %s "
                            "AND uid = ANY(%s))")
                restrict_params = [tenant_pk, [str(d) for d in document_ids]]
            join = ""
            if flt is not None:
                where, where_params = compile_postgres(flt)
                join = _DOC_JOIN
                restrict += f" AND {where}"
                restrict_params += where_params
            settings = self._backend.settings
            if settings.keyword_ranking == "ts_rank":
                ranked = conn.execute(
                    "SELECT c.id, ts_rank(c.fts, %s::tsquery) AS score FROM bunko.keyword_match(%s, %s::tsquery, "
                    "NULL) AS m(id) JOIN bunko.chunks c ON c.id = m.id" + join +
                    " WHERE c.tenant_id = %s AND c.collection_id = %s" + restrict
                    + " ORDER BY score DESC, c.id LIMIT %s",
                    [tsquery, row[0], tsquery, tenant_pk, row[0], *restrict_params, top_k],
                ).fetchall()
            else:
                if any(len(p) > 2 for p in phrases):
                    raise VectorStoreError(f"BM25 on PostgreSQL scores phrases of one or two tokens; the "
                                           f"{row[10]!r} analyzer made a longer one. Set keyword_ranking='ts_rank'")
                chunks, tokens = int(row[8]), int(row[11])
                if all(phrase_term(p) is not None for p in phrases):
                    found = None
                    # The chunks a restriction allows, from the metadata columns (None: rank in SQL).
                    allowed = (None if not restrict else
                               self._restricted_ids(conn, tenant_pk, int(row[0]), flt, document_ids))
                    if not restrict or allowed is not None:  # scored here from the postings
                        found = self._bm25_postings(conn, tenant_pk, int(row[0]), phrases, chunks, tokens, top_k,
                                                    allowed)
                        self.last_keyword_plan = "postings"
                    if found and flt is not None:  # the restriction holds for the answer in SQL too (one lookup)
                        held = {int(r[0]) for r in conn.execute(
                            f"SELECT c.id FROM bunko.chunks c{join} WHERE c.tenant_id = %s AND c.id = ANY(%s)"
                            f"{restrict}", [tenant_pk, [r for r, _ in found], *restrict_params])}
                        if len(held) < len(found):
                            found = None  # a concurrent change the columns have not seen
                    if found is None:
                        found = self._bm25(conn, tenant_pk, int(row[0]), phrases, chunks, tokens, top_k, join,
                                           restrict, restrict_params)
                        self.last_keyword_plan = "pruned"
                    return self._hits(conn, tenant_pk, int(row[0]), found, include_content)
                ranked = conn.execute(
                    _BM25_SQL.format(join=join, restrict=restrict),
                    [[p[0] for p in phrases], [p[1] if len(p) > 1 else "" for p in phrases],
                     row[0], tsquery, tenant_pk, row[0], sorted({t for p in phrases for t in p}), chunks,
                     settings.bm25_k1,
                     settings.bm25_k1,
                     settings.bm25_b, settings.bm25_b, max(tokens, 1) / max(chunks, 1),
                     tenant_pk, *restrict_params, top_k],
                ).fetchall()
            return self._hits(conn, tenant_pk, int(row[0]), [(r[0], float(r[1])) for r in ranked],
                              include_content)

    @staticmethod
    def _phrase_df(conn: Any, tenant_pk: int, collection_pk: int, terms: list[str]) -> dict[str, int]:
        return {t: int(n) for t, n in conn.execute(
            "SELECT term, df FROM bunko.keyword_df WHERE tenant_id = %s AND collection_id = %s AND term = ANY(%s)",
            (tenant_pk, collection_pk, terms)).fetchall()}

    def _bm25_postings(self, conn: Any, tenant_pk: int, collection_pk: int, phrases: list[tuple[str, ...]],
                       chunks: int, tokens: int, top_k: int,
                       allowed: np.ndarray | None = None) -> list[tuple[int, float]] | None:
        """The exact BM25 top-k of the collection (of its ``allowed`` chunks), ranked in numpy over its
        postings (``bm25_top``); None when a saturated count sends it to SQL."""
        settings = self._backend.settings
        terms = [" ".join(p) for p in phrases]
        df = self._phrase_df(conn, tenant_pk, collection_pk, terms)
        counts = [df.get(t, 0) for t in terms]
        if not any(counts):
            return []
        ranked = _POSTINGS.rank(conn, (tenant_pk, collection_pk), terms, counts,
                                [bm25_idf(max(chunks, n), n) for n in counts], max(tokens, 1) / max(chunks, 1),
                                top_k, settings.keyword_candidates, k1=settings.bm25_k1, b=settings.bm25_b,
                                allowed=allowed)
        if ranked is None:
            return None
        return list(zip(ranked[0].tolist(), ranked[1].tolist(), strict=True))

    def _bm25(self, conn: Any, tenant_pk: int, collection_pk: int, phrases: list[tuple[str, ...]], chunks: int,
              tokens: int, top_k: int, join: str, restrict: str, restrict_params: list[Any]) -> list[tuple[int, float]]:
        """Exact BM25 top-k that reads only the chunks holding the query's rarer phrases (MaxScore).

        Document frequencies come from ``keyword_df`` in one lookup. A phrase adds at most
        idf x (k1 + 1) to a chunk's score, so with the phrases ranked by that bound, the chunks
        that hold none of the first ("essential") phrases score below the sum of the others'
        bounds. The search scores every phrase of the chunks that hold an essential phrase and
        stops as soon as its k-th score reaches that sum; otherwise it makes more phrases
        essential and looks again (in the end all of them: the full evaluation). Common bigrams
        then cost one statistics row each instead of a scan of every chunk that holds them.
        """
        settings = self._backend.settings
        k1, b = settings.bm25_k1, settings.bm25_b
        terms = [" ".join(p) for p in phrases]
        df = self._phrase_df(conn, tenant_pk, collection_pk, terms)
        known = [(p, df[t]) for p, t in zip(phrases, terms, strict=True) if df.get(t, 0) > 0]
        if not known:
            return []
        idf = [bm25_idf(max(chunks, n), n) for _, n in known]  # as FTS5 computes it: both stores score alike
        order = sorted(range(len(known)), key=lambda j: (-idf[j], j))
        bound = [idf[j] * (k1 + 1) for j in order]
        budget, split, total = settings.keyword_candidates, 0, 0
        while split < len(order) and (split == 0 or total + known[order[split]][1] <= budget):
            total += known[order[split]][1]
            split += 1
        # A phrase of one token is a lexeme of ``fts``, a pair of one-character tokens a lexeme of ``fts_pairs``.
        known_terms = [" ".join(p) for p, _ in known]
        singles = sorted({t for (p, _), t in zip(known, known_terms, strict=True) if len(p) == 1})
        pairs = sorted({t for (p, _), t in zip(known, known_terms, strict=True) if len(p) == 2})
        average = max(tokens, 1) / max(chunks, 1)
        statement = _BM25_CANDIDATES_SQL.format(join=join, restrict=restrict)
        while True:
            rest = sum(bound[split:])
            essential = [known[j][0] for j in order[:split]]
            match = [ts_lexemes_query(sorted({" ".join(p) for p in essential if len(p) == size})) for size in (1, 2)]
            rows = conn.execute(statement, [known_terms, idf, collection_pk, *match, tenant_pk, collection_pk,
                                            *restrict_params, singles, pairs, k1, k1, b, b, average,
                                            top_k]).fetchall()
            if split == len(order) or (len(rows) == top_k and float(rows[-1][1]) > rest):
                return [(int(r[0]), float(r[1])) for r in rows]
            total += known[order[split]][1]
            split += 1
            if len(rows) == top_k:
                # These scores are exact, so the k-th is a floor for the final one: make essential just
                # enough phrases that the others' bounds sum below it, and the next round is the last.
                kth = float(rows[-1][1])
                while split < len(order) and sum(bound[split:]) >= kth:
                    total += known[order[split]][1]
                    split += 1
            else:  # fewer than k chunks so far (a narrow restriction): widen by df
                budget *= 4
                while split < len(order) and total + known[order[split]][1] <= budget:
                    total += known[order[split]][1]
                    split += 1


# BM25 over the analyzer's phrases (of one or two tokens), in one statement:
# * ``candidates``: chunks matching any phrase, through the GIN index (bunko.keyword_match, see m012);
# * ``lexemes``: each query token's positions in each candidate, cut out of the tsvector in C
#   (setweight marks the query's lexemes, ts_filter keeps only them);
# * ``tf``: per (phrase, chunk), how often the phrase occurs: the token's positions, or for a
#   two-token phrase the positions p of the first with p + 1 among the second's; a phrase's
#   document frequency is its number of chunks, counted
#   before any restriction so that a restricted search scores like an unrestricted one;
# * idf = ln((N - df + 0.5) / (df + 0.5)), at least 1e-6, as SQLite's FTS5 computes it, so a phrase in
#   half the chunks or more counts for (almost) nothing; N and the average length come from the
#   collection's counters (chunk_count, keyword_tokens).
_BM25_SQL = """
WITH q AS (
    SELECT i, t1, nullif(t2, '') AS t2 FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS x(t1, t2, i)
), candidates AS MATERIALIZED (
    SELECT c.id, c.fts, c.fts_length
    FROM bunko.keyword_match(%s, %s::tsquery, NULL) AS m(id) JOIN bunko.chunks c ON c.id = m.id
    WHERE c.tenant_id = %s AND c.collection_id = %s
), lexemes AS MATERIALIZED (
    SELECT k.id, u.lexeme, u.positions
    FROM candidates k, unnest(ts_filter(setweight(k.fts, 'A', %s::text[]), '{{a}}')) AS u
), tf AS (
    SELECT q.i, l.id, cardinality(l.positions) AS tf FROM q JOIN lexemes l ON l.lexeme = q.t1 WHERE q.t2 IS NULL
    UNION ALL
    SELECT i, id, tf FROM (
        SELECT q.i, a.id, (SELECT count(*) FROM unnest(a.positions) AS p WHERE p + 1 = ANY (b.positions)) AS tf
        FROM q JOIN lexemes a ON a.lexeme = q.t1 JOIN lexemes b ON b.id = a.id AND b.lexeme = q.t2
    ) pairs WHERE tf > 0
), idf AS (
    SELECT i, greatest(ln((greatest(%s, count(*)) - count(*) + 0.5) / (count(*) + 0.5)), 1e-6) AS idf
    FROM tf GROUP BY i
), scored AS (
    SELECT t.id, sum(idf.idf * t.tf * (%s + 1) / (t.tf + %s * (1 - %s + %s * k.fts_length / %s::float8))) AS score
    FROM tf t JOIN idf USING (i) JOIN candidates k ON k.id = t.id GROUP BY t.id
)
SELECT s.id, s.score FROM scored s JOIN bunko.chunks c ON c.id = s.id{join}
WHERE c.tenant_id = %s{restrict}
ORDER BY s.score DESC, s.id LIMIT %s
"""


# BM25 of the chunks that hold an essential phrase (found by bunko.keyword_match: its one-token phrases
# in ``fts``, its pairs in ``fts_pairs``; see migration m012), over all the phrases, each with its
# idf given (from keyword_df): a one-token phrase's term frequency is its positions in ``fts``, a pair's
# its positions in ``fts_pairs`` (lexemes "a b"; a token never holds a space, so the two never meet).
# The GIN indexes answer the match exactly (no row is rechecked). A phrase counts as often as the query
# names it, and the score is FTS5's bm25() to the bit: its expression, summed in the query's phrase order
# (phrases a chunk lacks add 0.0), so both stores break ties between equal scores alike.
_BM25_CANDIDATES_SQL = """
WITH q AS (
    SELECT i, term, idf FROM unnest(%s::text[], %s::float8[]) WITH ORDINALITY AS x(term, idf, i)
), candidates AS MATERIALIZED (
    SELECT c.id, c.fts, c.fts_pairs, c.fts_length
    FROM bunko.keyword_match(%s, %s::tsquery, %s::tsquery) AS m(id) JOIN bunko.chunks c ON c.id = m.id{join}
    WHERE c.tenant_id = %s AND c.collection_id = %s{restrict}
), tf AS (
    SELECT k.id, k.fts_length, u.lexeme, cardinality(u.positions) AS tf
    FROM candidates k, unnest(ts_filter(setweight(k.fts, 'A', %s::text[]), '{{a}}')) AS u
    UNION ALL
    SELECT k.id, k.fts_length, u.lexeme, cardinality(u.positions) AS tf
    FROM candidates k, unnest(ts_filter(setweight(k.fts_pairs, 'A', %s::text[]), '{{a}}')) AS u
)
SELECT t.id, sum(q.idf * ((t.tf * (%s + 1.0)) / (t.tf + %s * (1 - %s + %s * t.fts_length / %s::float8)))
                 ORDER BY q.i) AS score
FROM tf t JOIN q ON q.term = t.lexeme GROUP BY t.id ORDER BY score DESC, t.id LIMIT %s
"""


@dataclass(slots=True)
class _Plan:
    """A chosen way to run one vector search."""

    strategy: str  # "empty", "exact", "hnsw", "hnsw-iterative" or "hnsw-overfetch"
    tenant_pk: int
    collection_pk: int
    dim: int
    top_k: int
    doc_pks: list[int] | None
    matching: int  # exact, or (for a broad filter) a lower bound above settings.exact_max_rows
    total: int
    settings: PostgresSettings
    where: tuple[str, list[Any]] | None = None  # a compiled metadata filter over c (chunks) and d (documents)
    # The ids of the chunks that pass the restriction, when known (from the metadata columns): the
    # exact scan then reads those rows by primary key instead of testing every row of the collection.
    ids: np.ndarray | None = None

    def run(self, conn: Any, q: np.ndarray) -> list[tuple[int, float]]:
        if self.strategy == "empty":
            return []
        if self.strategy == "exact":
            return self._exact(conn, q)
        want = min(self.top_k, self.matching)
        if self.strategy == "hnsw":
            found = self._index(conn, q, ef_search=max(self.settings.ef_search, self.top_k), limit=self.top_k)
        elif self.strategy == "hnsw-iterative":
            found = self._iterative(conn, q)
        else:
            found = self._overfetch(conn, q)
        if len(found) < want:  # never come back short: the exact scan is the last word
            self.strategy += "+exact"
            return self._exact(conn, q)
        return found

    def _restriction(self) -> tuple[str, str, list[Any]]:
        """(join, conditions, parameters) restricting ``c`` to the documents and the filter."""
        join, restrict, params = "", "", []
        if self.ids is not None:
            # The filter and the documents are applied again below, to these rows only.
            restrict, params = " AND c.id = ANY(%s)", [self.ids.tolist()]
        if self.doc_pks is not None:
            restrict += " AND c.document_id = ANY(%s)"
            params.append(self.doc_pks)
        if self.where is not None:
            join = _DOC_JOIN
            restrict += f" AND {self.where[0]}"
            params += self.where[1]
        return join, restrict, params

    def _exact(self, conn: Any, q: np.ndarray) -> list[tuple[int, float]]:
        # The ORDER BY expression differs from the index expression, so the planner cannot use HNSW here.
        join, restrict, params = self._restriction()
        rows = conn.execute(
            "SELECT c.id, c.embedding <=> %s::vector AS distance FROM bunko.chunks c" + join +
            " WHERE c.tenant_id = %s AND c.collection_id = %s" + restrict + " ORDER BY distance, c.id LIMIT %s",
            [q, self.tenant_pk, self.collection_pk, *params, self.top_k],
        ).fetchall()
        return [(int(r[0]), 1.0 - float(r[1])) for r in rows]

    def _index_sql(self) -> str:
        cast = _vector_literal_type(self.dim)
        join, restrict, _ = self._restriction()
        # collection_id is inlined as an integer literal so the partial index's predicate matches.
        return (
            f"SELECT c.id, 1 - ((c.embedding::{cast}) <=> %s::{cast}) AS score FROM bunko.chunks c{join} "
            f"WHERE c.tenant_id = %s AND c.collection_id = {int(self.collection_pk)}" + restrict +
            f" ORDER BY (c.embedding::{cast}) <=> %s::{cast} LIMIT %s"
        )

    def _index(self, conn: Any, q: np.ndarray, *, ef_search: int, limit: int) -> list[tuple[int, float]]:
        if ef_search != self.settings.ef_search:  # the session default is settings.ef_search (see _configure)
            conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(min(1000, ef_search)),))
        _, _, params = self._restriction()
        rows = conn.execute(self._index_sql(), [q, self.tenant_pk, *params, q, limit]).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def _iterative(self, conn: Any, q: np.ndarray) -> list[tuple[int, float]]:
        conn.execute("SELECT set_config('hnsw.iterative_scan', 'strict_order', true)")
        conn.execute("SELECT set_config('hnsw.max_scan_tuples', %s, true)", (str(self.settings.max_scan_tuples),))
        # An invalid or unsupported value silently leaves iterative scans off: read it back.
        if conn.execute("SHOW hnsw.iterative_scan").fetchone()[0] != "strict_order":
            self.strategy = "hnsw-overfetch"
            return self._overfetch(conn, q)
        return self._index(conn, q, ef_search=max(self.settings.ef_search, self.top_k), limit=self.top_k)

    def _overfetch(self, conn: Any, q: np.ndarray) -> list[tuple[int, float]]:
        """Ask the index for more candidates than k, filter, and widen until k match."""
        selectivity = max(self.matching / max(self.total, 1), 1e-6)
        fetch = int(min(self.total, max(self.top_k * 4, self.top_k / selectivity * 2)))
        if fetch > 1000:  # ef_search tops out at 1000: the index cannot reach this deep
            self.strategy = "hnsw-overfetch+exact"
            return self._exact(conn, q)
        cast = _vector_literal_type(self.dim)
        join, restrict, params = self._restriction()
        while True:
            conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(min(1000, max(fetch, 40))),))
            rows = conn.execute(
                f"SELECT c.id, candidates.score FROM (SELECT id, 1 - ((embedding::{cast}) <=> %s::{cast}) AS score "
                f"FROM bunko.chunks WHERE tenant_id = %s AND collection_id = {int(self.collection_pk)} "
                f"ORDER BY (embedding::{cast}) <=> %s::{cast} LIMIT %s) candidates "
                f"JOIN bunko.chunks c ON c.id = candidates.id{join} WHERE c.tenant_id = %s{restrict} "
                "ORDER BY candidates.score DESC, c.id LIMIT %s",
                [q, self.tenant_pk, q, fetch, self.tenant_pk, *params, self.top_k],
            ).fetchall()
            if len(rows) >= min(self.top_k, self.matching) or fetch >= min(self.total, 1000):
                return [(int(r[0]), float(r[1])) for r in rows]
            fetch = min(self.total, fetch * 4)



# How many collections' metadata columns a backend keeps, and about how many rows in all (16 bytes
# a row, plus 4 a field): the least recently filtered go first.
_COLUMN_COLLECTIONS = 32
_COLUMN_ROWS = 4_000_000


class _MetadataColumns:
    """One collection's chunk ids and the metadata fields filters have read, in memory (per process).

    The rows are the collection's chunks in id order. A refresh reads, in one statement (one
    snapshot), the collection's ``mutation_seq`` and ``chunk_count`` and the rows above the highest
    id held: while ``mutation_seq`` (bumped by every removal of chunks) is unchanged, new chunks are
    only appended. When the rows held then differ in number from ``chunk_count`` (a writer that took
    its ids before another but committed after it), or a field is new, or ``mutation_seq`` moved, the
    columns are read again whole. The filter itself is evaluated by :func:`filter_mask`.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids = np.empty(0, dtype=np.int64)
        self.docs = np.empty(0, dtype=np.int64)  # the chunk's document id, -1 for none
        self.fields: dict[tuple[str, ...], Column] = {}
        self.mutation_seq = -1
        self.high_water = 0

    def passing(self, conn: Any, tenant_pk: int, collection_pk: int, flt: Filter,
                doc_pks: list[int] | None) -> np.ndarray | None:
        """The ids of the collection's chunks that pass ``flt`` (and belong to ``doc_pks``); None if unsure."""
        wanted = {tuple(f.split(".")) for f in flt.fields()}
        with self.lock:
            if not self._refresh(conn, tenant_pk, collection_pk, wanted, whole=not wanted <= self.fields.keys()):
                return None
            try:
                mask = filter_mask(flt, len(self.ids), self.fields.__getitem__)
            except Misaligned:  # pragma: no cover - every field was read with the ids
                return None
            if doc_pks is not None:
                mask &= np.isin(self.docs, np.asarray(doc_pks, dtype=np.int64))
            return self.ids[mask]

    def _refresh(self, conn: Any, tenant_pk: int, collection_pk: int, wanted: set[tuple[str, ...]],
                 *, whole: bool) -> bool:
        fields = sorted(set(self.fields) | wanted)
        for _attempt in range(2):
            start = 0 if whole else self.high_water
            values = ", ".join("coalesce(c.metadata #> %s::text[], d.metadata #> %s::text[])::text"
                               for _ in fields)
            rows = conn.execute(
                "SELECT s.mutation_seq, s.chunk_count, x.* FROM (SELECT mutation_seq, chunk_count "
                "FROM bunko.collections WHERE tenant_id = %s AND id = %s) s LEFT JOIN LATERAL ("
                f"SELECT c.id, coalesce(c.document_id, -1), {values} FROM bunko.chunks c{_DOC_JOIN} "
                "WHERE c.tenant_id = %s AND c.collection_id = %s AND c.id > %s ORDER BY c.id) x ON true",
                [tenant_pk, collection_pk, *[list(f) for f in fields for _ in (0, 1)], tenant_pk, collection_pk,
                 start],
            ).fetchall()
            if not rows:  # the collection is gone
                return False
            seq, count = int(rows[0][0]), int(rows[0][1])
            if not whole and seq != self.mutation_seq:
                whole = True
                continue
            found = [r for r in rows if r[2] is not None]
            ids = np.fromiter((r[2] for r in found), dtype=np.int64, count=len(found))
            docs = np.fromiter((r[3] for r in found), dtype=np.int64, count=len(found))
            if whole:
                self.ids, self.docs, self.fields = ids, docs, {f: Column() for f in fields}
            else:
                self.ids, self.docs = np.concatenate([self.ids, ids]), np.concatenate([self.docs, docs])
            for j, field in enumerate(fields):
                self.fields[field].append([r[4 + j] for r in found])
            self.mutation_seq = seq
            if len(self.ids):
                self.high_water = int(self.ids[-1])
            if len(self.ids) == count:
                return True
            self.mutation_seq = -1  # out of line with the table: read everything again
            whole = True
        return False


# Metadata filters read the chunk as c and its document as d.
_DOC_JOIN = " LEFT JOIN bunko.documents d ON d.tenant_id = c.tenant_id AND d.id = c.document_id"


# tsvector positions stop at 16383; pairs of tokens are counted while both positions are distinct.
_TS_POSITIONS = 16383
_PAIR_POSITIONS = _TS_POSITIONS - 1


def _pairs(tokens: list[str]) -> dict[str, list[int]]:
    """Each pair "a b" of adjacent one-character tokens, with the positions of its first token."""
    pairs: dict[str, list[int]] = {}
    for i, term in token_pairs(tokens[:_PAIR_POSITIONS + 1]):
        pairs.setdefault(term, []).append(i + 1)  # tsvector positions start at 1
    return pairs


def _keyword_columns(analyzer: Analyzer, content: str) -> tuple[str, int, Counter[str], str]:
    """The keyword columns of a chunk: its tsvector literal, its token count, its statistics terms (its
    tokens and its pairs) with their counts as the tsvectors hold them, and the tsvector literal of its
    pairs (``fts_pairs``)."""
    tokens = analyzer.index_tokens(content)
    pairs = _pairs(tokens)
    counts = Counter(tokens)
    counts.update({term: len(positions) for term, positions in pairs.items()})
    return tsvector_literal(tokens), len(tokens), counts, pairs_literal(pairs)


def _posting_size(tokens: int) -> int:
    """A chunk's token count for its postings: past the last tsvector position, counts in the tsvectors
    (which BM25 in SQL reads) fall short of the tokens, so the count saturates and the search ranks in SQL."""
    return tokens if tokens <= _TS_POSITIONS else LENGTH_MAX


def fill_keyword_postings(conn: Any) -> None:
    """Migration m014: the postings of every chunk stored, from its ``fts`` and ``fts_pairs`` (as the
    owner; each collection under its own tenant, which the table's policy checks)."""
    path = conn.execute("SELECT current_setting('search_path')").fetchone()[0]
    conn.execute("SELECT set_config('search_path', 'bunko, ' || %s, true)", (path,))  # the core's table names
    conn.execute(_POSTINGS_STAGE)
    scopes = conn.execute("SELECT DISTINCT tenant_id, collection_id FROM bunko.chunks").fetchall()
    for tenant_pk, collection_pk in scopes:
        conn.execute("SELECT set_config('bunko.tenant_id', %s, true)", (str(tenant_pk),))
        with conn.cursor(name="bunko_fill_postings") as cur:
            cur.execute(
                "SELECT c.id, c.fts_length, ARRAY(SELECT u.lexeme FROM unnest(c.fts) u), "
                "ARRAY(SELECT cardinality(u.positions) FROM unnest(c.fts) u), "
                "ARRAY(SELECT u.lexeme FROM unnest(c.fts_pairs) u), "
                "ARRAY(SELECT cardinality(u.positions) FROM unnest(c.fts_pairs) u) "
                "FROM bunko.chunks c WHERE c.tenant_id = %s AND c.collection_id = %s ORDER BY c.id",
                (tenant_pk, collection_pk))
            done = 0
            while batch := cur.fetchmany(8192):
                rows: list[Counted] = [
                    (int(r[0]), {**dict(zip(r[2], r[3], strict=True)), **dict(zip(r[4], r[5], strict=True))},
                     _posting_size(int(r[1]))) for r in batch]
                _POSTINGS.add(conn, (int(tenant_pk), int(collection_pk)), rows)
                done += len(rows)
                if done % (8192 * 16) < len(rows):
                    logger.info("keyword postings of collection %s: %d chunks so far", collection_pk, done)
    conn.execute("SELECT set_config('bunko.tenant_id', '', true), set_config('search_path', %s, true)", (path,))


def open_postgres(url: str, settings: PostgresSettings | None = None) -> PostgresBackend:
    """Open a ``postgresql://`` URL as a backend (migrating the schema if needed)."""
    return PostgresBackend(url, settings=settings)
