"""A real PostgreSQL with pgvector for tests: BUNKO_TEST_DATABASE_URL, or a pgserver in a temp folder."""

from __future__ import annotations

import itertools
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

try:
    import psycopg
except ImportError:  # the "postgres" extra is not installed: PostgreSQL tests skip
    psycopg = None


def _with_dbname(url: str, dbname: str) -> str:
    """The same server URL pointing at another database."""
    if re.match(r"^postgres(ql)?://[^/?]*/[^?]*", url):
        return re.sub(r"^(postgres(?:ql)?://[^/?]*/)[^?]*", rf"\g<1>{dbname}", url)
    return re.sub(r"^(postgres(?:ql)?://[^/?]*)", rf"\g<1>/{dbname}", url)


class PostgresServer:
    """One server per test session; a fresh database (from a migrated template) per test."""

    def __init__(self) -> None:
        self._server: Any = None
        url = os.environ.get("BUNKO_TEST_DATABASE_URL")
        if not url:
            # pgserver asks platformdirs for a runtime folder; give it one instead of a warning.
            os.environ.setdefault("XDG_RUNTIME_DIR", tempfile.mkdtemp(prefix="bunko-run-"))
            import pgserver

            folder = Path(tempfile.mkdtemp(prefix="bunko-pg-"))
            self._server = pgserver.get_server(folder, cleanup_mode="stop")
            url = self._server.get_uri()
        self.admin_url = url
        self._counter = itertools.count()
        self._prefix = f"bunko_test_{os.getpid()}"
        from bunko.stores.postgres import migrate_database

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self._prefix}_template")
            conn.execute(f"CREATE DATABASE {self._prefix}_template")
        migrate_database(_with_dbname(url, f"{self._prefix}_template"))

    def new_database(self) -> str:
        name = f"{self._prefix}_{next(self._counter)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {self._prefix}_template")
        return _with_dbname(self.admin_url, name)

    def drop_database(self, url: str) -> None:
        name = re.search(r"://[^/?]*/([^?]*)", url).group(1)  # type: ignore[union-attr]
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def close(self) -> None:
        if self._server is not None:
            self._server.cleanup()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[PostgresServer]:
    if psycopg is None:
        pytest.skip('the "postgres" extra is not installed')
    server = PostgresServer()
    yield server
    server.close()


@pytest.fixture()
def pg_url(pg_server: PostgresServer) -> Iterator[str]:
    url = pg_server.new_database()
    yield url
    pg_server.drop_database(url)
