"""The PostgreSQL database: a connection pool whose connections work as the application role, with the
tenant of each transaction set for row-level security; schema checks, and HNSW builds that do not block.

Install with ``pip install "bunko[postgres]"`` and point ``BUNKO_DATABASE_URL`` (or ``--db``) at
``postgresql://...``. Isolation (R15): every statement filters by ``tenant_id``, and row-level security
checks the per-transaction setting ``bunko.tenant_id`` on every tenant table (and ``bunko.user_id``, when a
transaction acts for a user, on the per-user tables). The pool runs as
``bunko_app`` (``SET ROLE`` when the login role is a superuser or may bypass RLS), so even a query that
forgot its predicate returns nothing.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import ExitStack, contextmanager, suppress
from typing import Any, TypeVar

from ...config import PostgresSettings, keyword_memory_bytes, redact_url
from ...errors import ConfigError, PgvectorVersionError, StorageFullError, TransientStoreError, VectorStoreError
from ..sql import SQLBackend, StoreCounters, check_name
from .columns import COLUMN_COLLECTIONS, COLUMN_ROWS, MetadataColumns
from .dialect import HAVE_POSTGRES, POSTGRES, PostingsCopy, create_stages
from .migrations import APP_ROLE, MIGRATIONS
from .schema import applied_version, check_pgvector_version, migrate_database, version_tuple
from .service import PostgresServiceRecords
from .store import PostgresVectorStore

if HAVE_POSTGRES:
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg import sql
    from psycopg_pool import ConnectionPool, PoolTimeout

logger = logging.getLogger(__name__)


# SQLSTATEs of a moment's failure that changed nothing: the server shutting down or restarting, or not yet
# accepting connections (class 40, transaction rollback, and class 08, connection exception, count whole).
_TRANSIENT_STATES = frozenset({"57P01", "57P02", "57P03"})


def transient_error(exc: Any) -> TransientStoreError | None:
    """The ``TransientStoreError`` a psycopg error stands for, or None when trying again would not help.

    The one place that decides which PostgreSQL failures are transient: a serialization failure or
    deadlock (SQLSTATE class 40), a connection failure (class 08, or a connection lost with no answer, a
    pool with no free connection in time), the server shutting down or starting (57P01-57P03). Not: bad
    data, a constraint, a full disk, a missing privilege.
    """
    state = getattr(exc, "sqlstate", None) or ""
    if state.startswith("40"):
        return TransientStoreError(f"PostgreSQL rolled the transaction back; nothing was changed, try again: {exc}")
    if state.startswith("08") or state in _TRANSIENT_STATES or (isinstance(exc, psycopg.OperationalError)
                                                                  and not state):
        return TransientStoreError(f"lost the connection to PostgreSQL; nothing was changed, try again: {exc}")
    return None


def disk_full(exc: Any) -> bool:
    """Whether a psycopg error is the server out of disk space (SQLSTATE 53100, or a write the file system
    refused with ENOSPC); PostgreSQL has rolled the transaction back."""
    state = getattr(exc, "sqlstate", None) or ""
    return state == "53100" or (state.startswith(("53", "58")) and "No space left on device" in str(exc))


# How many composed statements (a transaction's BEGIN and settings, a collection row's read) a backend keeps.
_COMPOSED = 4096
_T = TypeVar("_T")

_TCP_OPTIONS = ("keepalives", "keepalives_idle", "keepalives_interval", "keepalives_count", "tcp_user_timeout")


def tcp_options(conninfo: str, settings: PostgresSettings) -> dict[str, Any]:
    """libpq's TCP options for a connection that goes silent (``[postgres] tcp_user_timeout``, ``keepalives_*``):
    keepalive probes on idle connections, and a bound on data left unacknowledged, so a statement on a
    connection whose server or network vanished without a reset fails (``TransientStoreError``) instead of
    waiting for the kernel to give up (about 15 minutes). Options the URL sets itself are kept as they are."""
    given = psycopg.conninfo.conninfo_to_dict(conninfo)
    options: dict[str, Any] = {"keepalives": 1, "keepalives_idle": settings.keepalives_idle,
                               "keepalives_interval": settings.keepalives_interval,
                               "keepalives_count": settings.keepalives_count}
    if settings.tcp_user_timeout > 0:
        options["tcp_user_timeout"] = max(1, round(settings.tcp_user_timeout * 1000))  # milliseconds
    return {name: value for name, value in options.items() if name not in given and name in _TCP_OPTIONS}


# How long a search waits for a second pooled connection to send its vector leg on (``send_piped``) before
# it sends it on its own connection instead: a wait this short is there only to take an idle connection.
SIDE_WAIT = 0.001


def _piped_settings(tenant: str, tenant_pk: int, user: str | None,
                    settings: dict[str, str]) -> tuple[str, list[str]]:
    """The statement that makes the tenant and user settings RLS checks and ``settings``, local to the
    transaction, with its parameters (for :meth:`PostgresBackend.read_piped` and ``send_piped``)."""
    values = {"bunko.tenant": tenant, "bunko.tenant_id": str(int(tenant_pk)), "bunko.user_id": user or "",
              **settings}
    return ("SELECT " + ", ".join(["set_config(%s, %s, true)"] * len(values)),
            [v for name, value in values.items() for v in (name, value)])


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
        self._sweeping = threading.Lock()
        # Set while a transaction takes a connection whose first statement checks it (see _begin).
        self._own_check = threading.local()
        self._composed: dict[Hashable, bytes] = {}  # statements of _checked, by key
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
            # A server that accepts a connection but does not answer fails it after connect_timeout.
            # A connection gone silent fails its statement after tcp_user_timeout (see tcp_options).
            kwargs={"prepare_threshold": None, "connect_timeout": self.settings.connect_timeout,
                    **tcp_options(conninfo, self.settings)},
            # A connection the server dropped (restart, idle timeout) is replaced on checkout; finding one
            # sends every idle connection to be checked (see _check_connection).
            check=self._check_connection,
            # Waiting for a connection (all busy, or the server unreachable) ends in PoolTimeout, a
            # TransientStoreError (503), after pool_timeout instead of psycopg_pool's 30 s.
            timeout=self.settings.pool_timeout,
            # The pool's attempts to reconnect back off (1, 2, 4 ... s) for reconnect_timeout, then give up
            # until the next request asks again. psycopg_pool's 5 minutes would let the backoff grow past a
            # minute, so a server back from a restart would wait that long for its first connection.
            reconnect_timeout=max(1.0, self.settings.pool_timeout / 2),
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
        # Whether filtered searches may use HNSW iterative index scans (pgvector 0.8+, not switched off).
        self.iterative = (
            self.settings.iterative_scan is not False and version_tuple(self.pgvector_version) >= (0, 8)
        )
        self.index_lock = threading.Lock()
        self.indexed: set[int] = set()  # collections whose vector index is known to exist
        # The kind of each indexed collection's index: ("halfvec", 0), ("hnsw", 0) for a former HNSW index
        # over vector, or ("ivfflat", its lists); and the collection's write_seq when it was looked up.
        self.index_kinds: dict[int, tuple[str, int]] = {}
        self.index_seqs: dict[int, int] = {}
        # Filtered search: metadata columns of the most recently filtered collections (see MetadataColumns).
        self._columns: OrderedDict[int, MetadataColumns] = OrderedDict()
        self._columns_lock = threading.Lock()
        self.postings = PostingsCopy(POSTGRES, index_bytes=keyword_memory_bytes(self.settings.keyword_memory_mb))
        self.counters = StoreCounters()

    def metadata_columns(self, collection_pk: int) -> MetadataColumns:
        """The in-memory metadata columns of a collection (created empty; the least recently used go)."""
        with self._columns_lock:
            columns = self._columns.get(collection_pk)
            if columns is None:
                columns = self._columns[collection_pk] = MetadataColumns()
            self._columns.move_to_end(collection_pk)
            held = sum(len(c.ids) for c in self._columns.values())
            while len(self._columns) > 1 and (len(self._columns) > COLUMN_COLLECTIONS or held > COLUMN_ROWS):
                _, gone = self._columns.popitem(last=False)
                held -= len(gone.ids)
            return columns

    def forget_columns(self, collection_pk: int) -> None:
        """Drop a collection's metadata columns (it was deleted)."""
        with self._columns_lock:
            self._columns.pop(collection_pk, None)

    # -- connections ---------------------------------------------------------------------
    def _check_connection(self, conn: Any) -> None:
        """The pool's check on checkout; a dead connection has every idle one checked and replaced at once.

        One dead connection means the server restarted or failed over, so the other idle ones are dead too.
        psycopg_pool would find them one checkout at a time, pausing 1, 2, 4 ... s after each, so with a few
        dead connections in the pool the first requests after the server is back would time out.
        """
        if getattr(self._own_check, "active", False):  # a transaction's BEGIN checks it (see _begin)
            return
        try:
            ConnectionPool.check_connection(conn)
        except Exception:
            self._sweep()
            raise

    def _sweep(self) -> None:
        """Check every idle connection of the pool, replacing the dead ones (one sweep at a time)."""
        if self._sweeping.acquire(blocking=False):  # one sweep at a time; the others just fail their check
            try:
                self._pool.check()  # a dead socket fails at once; new connections are made in the background
            finally:
                self._sweeping.release()

    def _configure(self, conn: Any) -> None:
        """Per pooled connection: vector types, and drop to the application role if needed."""
        register_vector(conn)
        # The search breadth every HNSW scan starts from; a scan that needs more sets it locally.
        conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(self.settings.ef_search),))
        if self.login_risks:  # the login could bypass RLS: drop to the application role (see _login_risks)
            conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(APP_ROLE)))
        # COPY cannot write into a table with row-level security, so bulk rows go through this
        # session-private staging table and then one INSERT ... SELECT that RLS checks.
        # The SQL core writes unqualified table names: bunko's schema first, then the role's own path
        # (where the pgvector types were installed).
        conn.execute("SELECT set_config('search_path', 'bunko, ' || current_setting('search_path'), false)")
        create_stages(conn)
        conn.commit()

    def _check_schema(self) -> None:
        try:
            with psycopg.connect(self._conninfo, connect_timeout=10) as conn:
                version = applied_version(conn)
        except psycopg.errors.UndefinedTable as exc:
            raise VectorStoreError("the database has no bunko schema yet: run `bunko db migrate`") from exc
        except psycopg.OperationalError as exc:
            raise VectorStoreError(f"cannot connect to PostgreSQL: {exc}") from exc
        if version < len(MIGRATIONS):
            raise VectorStoreError(
                f"the database schema is at version {version}, this bunko needs {len(MIGRATIONS)}: "
                "run `bunko db migrate`"
            )

    def _schema_is_current(self) -> bool:
        """Whether every migration is applied (read with the login role; False when unknown)."""
        try:
            with psycopg.connect(self._conninfo, connect_timeout=10) as conn:
                version = applied_version(conn)
        except psycopg.Error:
            return False
        return bool(version >= len(MIGRATIONS))

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
                   f"({'; '.join(self.login_risks)}). Its connections drop to {APP_ROLE} with "
                   "SET ROLE, which a statement could undo with RESET ROLE. Run the server with a separate "
                   f"application login (CREATE ROLE bunko_api LOGIN PASSWORD '...' IN ROLE {APP_ROLE}) "
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
                # The SQL core's statements name tables without the schema.
                conn.execute("SELECT set_config('search_path', 'bunko, ' || current_setting('search_path'), true)")
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
        """The server's records, with API keys behind the definer functions (see :mod:`.service`)."""
        return PostgresServiceRecords(self)

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A pooled connection outside the tenant scopes, for tests and tools (``bunko.testing``)."""
        with self._pool.connection() as conn:
            yield conn

    def _scalar(self, query: str) -> Any:
        with self._pool.connection() as conn:
            return conn.execute(query).fetchone()[0]

    @contextmanager
    def transaction(self, tenant: str | None, tenant_pk: int | None, *, write: bool = True,
                    user: str | None = None) -> Iterator[Any]:
        """A pooled connection in a transaction with the tenant and user settings RLS checks.

        ``tenant`` None binds no tenant: every tenant table then looks empty (keys, rate windows). ``user``
        binds the user the transaction acts for (``bunko.user_id``, m022): the per-user tables then show
        and change only that user's rows; None leaves it empty (a tenant or admin key: the tenant's rows).

        The transaction starts with one round trip (``BEGIN`` and the settings in one message, see
        :meth:`_begin`), which also stands for the pool's check of the connection, and ends with ``COMMIT``
        (``ROLLBACK`` when the body raised).
        """
        try:
            conn = self._begin(tenant, tenant_pk, user)
            try:
                yield conn
            except BaseException:
                self._end(conn, "ROLLBACK")
                raise
            self._end(conn, "COMMIT")
        except psycopg.errors.UndefinedFile as exc:
            raise VectorStoreError(f"PostgreSQL is missing a file or extension: {exc}") from exc
        except psycopg.Error as exc:
            if (transient := transient_error(exc)) is not None:
                raise transient from exc
            if disk_full(exc):
                raise StorageFullError(f"the disk under PostgreSQL is full; nothing was written: {exc}") from exc
            if isinstance(exc, psycopg.errors.DataException):
                raise VectorStoreError(f"PostgreSQL refused the data: {exc}") from exc
            if isinstance(exc, psycopg.OperationalError):
                raise VectorStoreError(f"PostgreSQL could not run the statement: {exc}") from exc
            raise VectorStoreError(f"PostgreSQL error: {exc}") from exc

    def _settings_sql(self, tenant: str | None, tenant_pk: int | None, user: str | None) -> Any:
        """The statement that makes the tenant and user settings RLS checks, for the transaction, values quoted."""
        return sql.SQL("SELECT set_config('bunko.tenant', {}, true), set_config('bunko.tenant_id', {}, true), "
                       "set_config('bunko.user_id', {}, true)").format(
            sql.Literal(tenant or ""), sql.Literal("" if tenant_pk is None else str(int(tenant_pk))),
            sql.Literal(user or ""))

    def _begin(self, tenant: str | None, tenant_pk: int | None, user: str | None) -> Any:
        """A pooled connection with a transaction begun and the tenant and user settings made, in one round trip.

        ``BEGIN`` and the ``set_config`` calls go to the server as one simple-query message (values quoted by
        psycopg), where psycopg's own ``BEGIN``, the settings and the pool's check on checkout were three
        waits for the server. The connection is put in autocommit mode for the transaction, so that psycopg
        sends no ``BEGIN`` of its own; :meth:`_end` ends the transaction and puts it back.
        """
        conn, _ = self._checked(("begin", tenant, tenant_pk, user),
                                lambda: sql.SQL("BEGIN; {}").format(self._settings_sql(tenant, tenant_pk, user)))
        return conn

    def read_once(self, tenant: str, tenant_pk: int, user: str | None, key: Hashable,
                  statement: Callable[[], Any]) -> list[tuple[Any, ...]]:
        """The rows of one read-only statement (``statement()``, a ``psycopg.sql`` composable with its values
        quoted in it, composed once per ``key``) under the tenant and user settings RLS checks, in one round
        trip.

        The settings and the statement go as one simple-query message, which PostgreSQL runs as one implicit
        transaction (the settings, local to it, hold for the statement and end with it): no ``BEGIN``, no
        ``COMMIT``, no check on checkout. A search's collection row is read this way
        (``PostgresVectorStore.read_collection``)."""
        try:
            conn, cur = self._checked(("once", tenant, tenant_pk, user, key), lambda: sql.SQL("{}; {}").format(
                self._settings_sql(tenant, tenant_pk, user), statement()))
            try:
                cur.nextset()
                return cur.fetchall()
            finally:
                self._putconn(conn)
        except psycopg.Error as exc:
            raise self._read_error(exc) from exc

    def read_piped(self, tenant: str, tenant_pk: int, user: str | None, settings: dict[str, str], statement: str,
                   params: list[Any]) -> list[tuple[Any, ...]]:
        """The rows of one read-only ``statement`` (with ``params``) under the tenant and user settings RLS
        checks and ``settings`` (``hnsw.ef_search``), in one round trip and no ``BEGIN`` or ``COMMIT``.

        In autocommit mode the settings and the statement go in pipeline mode with one sync: PostgreSQL runs
        what comes before a sync as one implicit transaction, so the settings (local to it) hold for the
        statement and end with it. A dropped connection fails before anything ran and the next one is tried,
        as for :meth:`_checked`. An unfiltered vector search over an HNSW index takes this way
        (``PostgresVectorStore.nearest_hits``)."""
        setting, flat = _piped_settings(tenant, tenant_pk, user, settings)

        def run(conn: Any) -> list[tuple[Any, ...]]:
            with conn.pipeline():
                conn.execute(setting, flat)
                cur = conn.execute(statement, params)
            return cur.fetchall()

        try:
            conn, rows = self._first_on_live(run)  # the pool's check is left to the statements above
            self._putconn(conn)
            return rows
        except psycopg.Error as exc:
            raise self._read_error(exc) from exc

    def send_piped(self, tenant: str, tenant_pk: int, user: str | None, settings: dict[str, str], statement: str,
                   params: list[Any]) -> Callable[[], list[tuple[Any, ...]] | None] | None:
        """:meth:`read_piped`, sent now on a connection of its own and answered later: the returned function
        waits for the rows, gives the connection back and returns them, or None when the connection turned
        out dead (nothing ran: the caller asks again its own way). None instead of a function when the pool
        has no idle connection within ``SIDE_WAIT`` seconds: this never waits for the pool, so a caller that
        holds a connection of it already cannot wait on itself. The function must be called, once.

        A hybrid search sends its vector leg this way (``PostgresReader.nearest_later``): the server walks
        the index on this connection while the keyword leg's statements run on the reader's, not after it."""
        try:
            conn = self._getconn_unchecked(SIDE_WAIT)
        except PoolTimeout:
            return None
        self.counters.add("side_reads")
        setting, flat = _piped_settings(tenant, tenant_pk, user, settings)
        pipeline = ExitStack()
        try:
            conn.autocommit = True
            pipeline.enter_context(conn.pipeline())
            conn.execute(setting, flat)
            cur = conn.execute(statement, params)
        except BaseException as exc:
            with suppress(psycopg.Error):
                pipeline.close()
            self._putconn(conn)
            if isinstance(exc, psycopg.OperationalError):
                return None  # a dead connection: the pool discards it; the caller asks on its own
            if isinstance(exc, psycopg.Error):
                raise self._read_error(exc) from exc
            raise

        def rows() -> list[tuple[Any, ...]] | None:
            try:
                pipeline.close()  # the sync: the settings, then the statement, as one implicit transaction
                return cur.fetchall()
            except psycopg.OperationalError as exc:
                if conn.closed or conn.broken:
                    return None
                raise self._read_error(exc) from exc
            except psycopg.Error as exc:
                raise self._read_error(exc) from exc
            finally:
                self._putconn(conn)

        return rows

    @staticmethod
    def _read_error(exc: Any) -> Exception:
        """The bunko error a read's psycopg error stands for: transient, or a ``VectorStoreError``."""
        transient = transient_error(exc)
        return transient if transient is not None else VectorStoreError(f"PostgreSQL error: {exc}")

    def _getconn_unchecked(self, timeout: float | None = None) -> Any:
        """A pooled connection without the pool's check on checkout: the caller's first statement checks it."""
        self._own_check.active = True
        try:
            return self._pool.getconn(timeout)
        finally:
            self._own_check.active = False

    def _checked(self, key: Hashable, statement: Callable[[], Any]) -> tuple[Any, Any]:
        """A pooled connection in autocommit mode that has just run ``statement()`` (its first), and the cursor.
        The statement is composed once per ``key`` (its values quoted for the first connection; the pool's
        connections share the server's settings) and kept, up to ``_COMPOSED`` of them.

        That first statement is the connection's check (:meth:`_first_on_live`): a connection the server dropped
        (restart, idle timeout, ``pg_terminate_backend``) fails it before anything ran and the next one is tried.
        """
        def run(conn: Any) -> Any:
            composed = self._composed.get(key)
            if composed is None:
                if len(self._composed) >= _COMPOSED:
                    self._composed.clear()
                composed = self._composed[key] = statement().as_bytes(conn)
            return conn.execute(composed)

        return self._first_on_live(run)

    def _first_on_live(self, first: Callable[[Any], _T]) -> tuple[Any, _T]:
        """A pooled connection in autocommit mode, taken without the pool's check, and what ``first(conn)``
        returned: its first statements are the check. A connection the server dropped fails them before
        anything ran and is given back (the pool discards a closed one); every idle connection is then
        checked and the next one tried, up to ``pool_max + 1`` times. On any other error the connection is
        given back and the error raised; on success the caller gives it back."""
        attempts = self.settings.pool_max + 1
        for attempt in range(attempts):
            conn = self._getconn_unchecked()
            try:
                conn.autocommit = True
                result = first(conn)
            except psycopg.OperationalError:
                dead = conn.closed or conn.broken
                self._putconn(conn)
                if not dead or attempt == attempts - 1:
                    raise
                self._sweep()
                continue
            except BaseException:
                self._putconn(conn)
                raise
            return conn, result
        raise AssertionError("unreachable")  # pragma: no cover

    def _end(self, conn: Any, command: str) -> None:
        """End the transaction :meth:`_begin` started (``COMMIT`` or ``ROLLBACK``) and give the connection back.

        A ``ROLLBACK`` on a connection that broke is skipped (the pool discards it); the error that broke it
        is the one the caller sees."""
        try:
            if not conn.closed and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                if command == "COMMIT":
                    conn.execute(b"COMMIT")
                else:
                    with suppress(psycopg.Error):
                        conn.execute(b"ROLLBACK")
        finally:
            self._putconn(conn)

    def _putconn(self, conn: Any) -> None:
        """Give a connection of :meth:`_begin` back to the pool, out of autocommit mode when it can be."""
        if not conn.closed and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            with suppress(psycopg.Error):
                conn.autocommit = False
        self._pool.putconn(conn)

    def build_index_concurrently(self, collection_pk: int, dim: int, m: int, ef_construction: int,
                                 rows: int = 0) -> str | None:
        """``CREATE INDEX CONCURRENTLY`` a collection's vector index as the login role; None if it may not.

        HNSW over halfvec (``chunks_hnswh_<pk>``; searches re-rank its candidates by the full vectors), or
        IVFFlat over halfvec (``chunks_ivf_<pk>``, see :func:`ivfflat_lists`) when the collection holds
        ``settings.ivfflat_min_rows`` chunks or more. The index a collection had before is dropped once the
        new one is valid: a collection that grew past that size trades its HNSW index for IVFFlat, and a
        former HNSW index over vector (``chunks_hnsw_<pk>``) gives way to the one over halfvec on the next
        write. The caller has checked that the collection is the tenant's. Runs outside any transaction (as
        CONCURRENTLY must); an invalid index left by a failed build is dropped and built again.
        """
        former, hnsw, ivf = (f"chunks_hnsw_{int(collection_pk)}", f"chunks_hnswh_{int(collection_pk)}",
                             f"chunks_ivf_{int(collection_pk)}")
        want_ivf = bool(self.settings.ivfflat_min_rows) and rows >= self.settings.ivfflat_min_rows and dim <= 4000
        name = ivf if want_ivf else hnsw
        try:
            with psycopg.connect(self._conninfo, autocommit=True, connect_timeout=10) as conn:
                owner = conn.execute("SELECT pg_has_role(current_user, tableowner, 'USAGE') FROM pg_tables "
                                     "WHERE schemaname = 'bunko' AND tablename = 'chunks'").fetchone()
                if owner is None or not owner[0]:
                    return None

                def valid(index: str) -> bool | None:
                    found = conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(%s)",
                                         (f"bunko.{index}",)).fetchone()
                    return None if found is None else bool(found[0])

                def drop(index: str) -> None:
                    conn.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS bunko.{}").format(sql.Identifier(index)))

                if valid(ivf):
                    return ivf
                if not want_ivf and valid(hnsw):
                    return hnsw
                if valid(name) is not None:  # left invalid by a failed build
                    drop(name)
                conn.execute("SELECT set_config('maintenance_work_mem', %s, false), "
                             "set_config('max_parallel_maintenance_workers', %s, false)",
                             (self.settings.maintenance_work_mem, str(self.settings.parallel_workers)))
                if want_ivf:
                    method = (f"ivfflat ((embedding::halfvec({int(dim)})) halfvec_cosine_ops) "
                              f"WITH (lists = {ivfflat_lists(rows)})")
                else:
                    method = (f"hnsw ((embedding::halfvec({int(dim)})) halfvec_cosine_ops) "
                              f"WITH (m = {int(m)}, ef_construction = {int(ef_construction)})")
                conn.execute(sql.SQL("CREATE INDEX CONCURRENTLY IF NOT EXISTS {} ON bunko.chunks USING " + method
                                     + " WHERE collection_id = {}").format(sql.Identifier(name),
                                                                          sql.Literal(int(collection_pk))))
                # Searches (of every process) look for IVFFlat first, then HNSW over halfvec, then the former.
                self.indexed.discard(int(collection_pk))
                for index in (former, hnsw) if want_ivf else (former,):
                    drop(index)
        except psycopg.Error as exc:
            raise VectorStoreError(f"could not build the vector index {name}: {exc}") from exc
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


def ivfflat_lists(rows: int) -> int:
    """The lists of an IVFFlat index over ``rows`` vectors: the square root, at least 10 (1,000 at 1,000,000
    rows, as pgvector's rows / 1,000 advice). At 300,000 chunks of ``benchmarks/bench_search.py``, probing 4%
    of them, 548 lists found 0.972 of the top 10 in 8-10 ms of server CPU, where rows / 1,000 (300 lists)
    needed 8% for 0.973 in 16 ms (docs/ARCHITECTURE.md)."""
    return max(10, math.isqrt(rows))


def open_postgres(url: str, settings: PostgresSettings | None = None) -> PostgresBackend:
    """Open a ``postgresql://`` URL as a backend (migrating the schema if needed)."""
    return PostgresBackend(url, settings=settings)
