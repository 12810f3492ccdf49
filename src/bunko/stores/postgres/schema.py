"""The PostgreSQL schema's state: applying the migrations, reading their status, and pgvector's version."""

from __future__ import annotations

import re
from typing import Any

from ...errors import ConfigError, PgvectorVersionError, VectorStoreError
from .dialect import HAVE_POSTGRES
from .migrations import APP_ROLE, BOOTSTRAP, CREATE_APP_ROLE, GRANTS, MIGRATIONS

if HAVE_POSTGRES:
    import psycopg
    from psycopg import sql


def _one(conn: Any, query: str, params: tuple[Any, ...] = ()) -> Any:
    """The single value of a statement that always returns one row."""
    row = conn.execute(query, params).fetchone()
    if row is None:  # pragma: no cover - the statements passed here always return a row
        raise VectorStoreError(f"PostgreSQL returned no row for {query!r}")
    return row[0]


def version_tuple(text: str) -> tuple[int, ...]:
    """The numbers of a version ("0.8.2" -> (0, 8, 2))."""
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


def applied_version(conn: Any) -> int:
    """The newest migration applied to the database (``psycopg.errors.UndefinedTable`` before any)."""
    return int(_one(conn, "SELECT coalesce(max(version), 0) FROM bunko.schema_migrations"))


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
    minimum = version_tuple(PGVECTOR_MINIMUM)
    if installed is not None and version_tuple(installed) < minimum:
        if available is not None and version_tuple(available) >= minimum:
            hint = f"the server has pgvector {available}: run ALTER EXTENSION vector UPDATE as its owner"
        else:
            hint = f"install pgvector {PGVECTOR_MINIMUM} or later (e.g. the pgvector/pgvector:pg17 image)"
        raise PgvectorVersionError(f"pgvector {installed} is too old: bunko needs {PGVECTOR_MINIMUM} or later "
                                   f"(halfvec and HNSW indexes; {PGVECTOR_RECOMMENDED} for iterative index "
                                   f"scans); {hint}")
    if installed is None and available is not None and version_tuple(available) < minimum:
        raise PgvectorVersionError(f"this server offers pgvector {available}: bunko needs {PGVECTOR_MINIMUM} or "
                                   f"later (halfvec and HNSW indexes); install a newer pgvector "
                                   f"(e.g. the pgvector/pgvector:pg17 image)")


def _pgvector_versions(conn: Any) -> tuple[str | None, str | None]:
    """pgvector's version in this database (None: not created) and the one the server would install."""
    installed = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    available = conn.execute("SELECT default_version FROM pg_available_extensions WHERE name = 'vector'").fetchone()
    return (installed[0] if installed else None), (available[0] if available else None)


# Other sessions of the database an upgrade does not wait for: processes of this version waiting for the
# migration lock (they find nothing to do once it is free).
_OTHER_SESSIONS = (
    "SELECT count(*), string_agg(DISTINCT coalesce(nullif(application_name, ''), usename::text), ', ') "
    "FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
    "AND backend_type = 'client backend' AND pid NOT IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory' "
    "AND NOT granted AND classid = 0 AND objid = 727274 AND objsubid = 1)"
)


def migrate_database(conninfo: str, *, target: int | None = None, force: bool = False) -> list[str]:
    """Apply pending migrations (up to version ``target``, default all); returns the names applied.

    Needs a role that owns the schema. An upgrade (a schema that exists, migrations pending) is refused while
    other sessions are connected to the database -- the servers and workers of the older version: what they
    write while a migration runs would miss what it adds (m014's postings) -- unless ``force``. Processes of
    this version waiting for the migration lock do not count.
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
                    for statement in BOOTSTRAP:
                        conn.execute(statement)
                    conn.execute(CREATE_APP_ROLE)
                    done = {r[0] for r in conn.execute("SELECT version FROM bunko.schema_migrations")}
                    pending = [n for n in range(1, len(MIGRATIONS) + 1)
                               if n not in done and (target is None or n <= target)]
                    if done and pending and not force:
                        others, names = conn.execute(_OTHER_SESSIONS).fetchone() or (0, None)
                        if others:
                            raise VectorStoreError(
                                f"{others} other session(s) are connected to this database ({names}): stop the "
                                "bunko servers and workers of the older version before upgrading the schema "
                                f"({len(pending)} migration(s) pending; rows they write meanwhile would miss what "
                                "the migrations add), or run `bunko db migrate --force` to upgrade anyway")
                    for number, (name, statements) in enumerate(MIGRATIONS, start=1):
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
                    for statement in GRANTS:
                        conn.execute(statement)
                    if not _one(conn, "SELECT rolsuper OR pg_has_role(current_user, %s, 'MEMBER') FROM pg_roles "
                                      "WHERE rolname = current_user", (APP_ROLE,)):
                        conn.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(
                            sql.Identifier(APP_ROLE)))
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
    pending = [{"version": i, "name": n} for i, (n, _) in enumerate(MIGRATIONS, start=1)
               if i not in names]
    return {"server_version": server, "pgvector_version": vector[0] if vector else None,
            "pgvector_required": PGVECTOR_MINIMUM,
            "applied": applied, "pending": pending}
