"""``bunko db migrate|status``: the store's schema (PostgreSQL; the embedded store migrates itself)."""

from __future__ import annotations

from typing import Any

import click

from .common import database_url, emit_json, json_command, stderr, stdout


@click.group()
def db() -> None:
    """Database schema: migrate and status (PostgreSQL; the embedded store migrates itself)."""


def _postgres_url(ctx: click.Context) -> str | None:
    from ..stores import url_scheme

    url = database_url(ctx)
    return url if url_scheme(url) in ("postgresql", "postgres") else None


@db.command("migrate")
@click.option("--force", is_flag=True, help="Upgrade even while other sessions (an older version's servers and "
              "workers) are connected to the database; their writes meanwhile may miss what a migration adds.")
@json_command()
def db_migrate(ctx: click.Context, force: bool, as_json: bool) -> None:
    """Create or upgrade the schema (run as the schema owner)."""
    url = _postgres_url(ctx)
    if url is None:
        from ..stores import open_backend

        open_backend(database_url(ctx)).close()  # the embedded store migrates when opened
        applied: list[str] = []
    else:
        from ..stores.postgres import migrate_database

        applied = migrate_database(url, force=force)
    if as_json:
        emit_json({"applied": applied})
    else:
        stderr.print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else
                                                                 "; the schema is up to date"))


@db.command("status")
@json_command()
def db_status(ctx: click.Context, as_json: bool) -> None:
    """Show the schema version, pending migrations and server versions."""
    url = _postgres_url(ctx)
    if url is None:
        from ..stores import open_backend
        from ..stores.sqlite import SCHEMA_VERSION, SQLiteBackend

        backend = open_backend(database_url(ctx))
        assert isinstance(backend, SQLiteBackend)
        import sqlite3

        data: dict[str, Any] = {"backend": "sqlite", "path": backend.path, "schema_version": SCHEMA_VERSION,
                                "sqlite_version": sqlite3.sqlite_version, "pending": []}
        backend.close()
    else:
        from ..stores.postgres import schema_status

        data = {"backend": "postgresql", **schema_status(url)}
    if as_json:
        emit_json(data)
        return
    for key, value in data.items():
        if key == "applied":
            for m in value:
                stdout.print(f"applied  {m['version']:>3}  {m['name']}  ({m['applied_at']})")
        elif key == "pending":
            for m in value:
                stdout.print(f"pending  {m['version']:>3}  {m['name']}")
            if not value:
                stdout.print("pending  none")
        else:
            stdout.print(f"{key}: {value}")
