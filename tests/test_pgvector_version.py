"""bunko refuses a pgvector older than the features it uses (halfvec and HNSW: 0.7.0), at ``db migrate``
and when the store opens, with a typed error that names the version needed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bunko.errors import PgvectorVersionError, VectorStoreError
from bunko.stores.postgres import PGVECTOR_MINIMUM, check_pgvector_version, version_tuple

from .conftest import ROOT
from .pg import psycopg


@pytest.mark.parametrize("installed", ["0.7.0", "0.7.4", "0.8.0", "0.8.2", "0.10.0", "1.0.0"])
def test_new_enough_versions_pass(installed: str) -> None:
    check_pgvector_version(installed)
    check_pgvector_version(installed, "0.8.2")


@pytest.mark.parametrize("installed", ["0.6.2", "0.6.0", "0.5.1", "0.4.4", "0.1.8"])
def test_older_versions_are_refused_with_the_version_needed(installed: str) -> None:
    with pytest.raises(PgvectorVersionError) as info:
        check_pgvector_version(installed)
    error = info.value
    assert isinstance(error, VectorStoreError) and error.code == "PGVECTOR_TOO_OLD"
    assert f"pgvector {installed} is too old" in error.message and "0.7.0 or later" in error.message
    assert "install pgvector 0.7.0 or later" in error.message
    # The server already has a newer one: say how to update the database's extension.
    with pytest.raises(PgvectorVersionError, match="ALTER EXTENSION vector UPDATE"):
        check_pgvector_version(installed, "0.8.2")


def test_a_server_offering_only_an_old_pgvector_is_refused_before_it_is_created() -> None:
    with pytest.raises(PgvectorVersionError, match=r"offers pgvector 0\.6\.1: bunko needs 0\.7\.0"):
        check_pgvector_version(None, "0.6.1")
    check_pgvector_version(None, "0.7.0")
    check_pgvector_version(None, None)  # not installable at all: the migration says so itself


def test_the_installed_pgvector_passes(pg_url: str) -> None:
    """The real server of the tests: migrate and open work, and the version reported is new enough."""
    from bunko.stores.postgres import PostgresBackend, migrate_database, schema_status

    assert migrate_database(pg_url) == []
    status = schema_status(pg_url)
    assert status["pgvector_required"] == PGVECTOR_MINIMUM
    assert version_tuple(status["pgvector_version"]) >= version_tuple(PGVECTOR_MINIMUM)
    backend = PostgresBackend(pg_url)
    try:
        assert backend.pgvector_version == status["pgvector_version"]
    finally:
        backend.close()


def test_a_database_with_an_old_pgvector_is_refused(pg_url: str) -> None:
    """The database's extension reports 0.6.2 (set in the catalog of this throwaway database): ``db migrate``
    and opening the store refuse it; the server's own newer pgvector is named in the advice."""
    from bunko.stores.postgres import PostgresBackend, migrate_database

    with psycopg.connect(pg_url, autocommit=True) as conn:
        if not conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]:
            pytest.skip("changing the extension's catalog row needs a superuser login (the test server has one)")
        conn.execute("UPDATE pg_extension SET extversion = '0.6.2' WHERE extname = 'vector'")
    with pytest.raises(PgvectorVersionError, match=r"pgvector 0\.6\.2 is too old: bunko needs 0\.7\.0") as info:
        migrate_database(pg_url)
    assert "ALTER EXTENSION vector UPDATE" in info.value.message
    with pytest.raises(PgvectorVersionError):
        PostgresBackend(pg_url)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "BUNKO_DATABASE_URL": pg_url}
    done = subprocess.run([sys.executable, "-m", "bunko", "db", "migrate", "--json"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    error = json.loads(done.stdout)["error"]
    assert error["type"] == "PgvectorVersionError" and error["code"] == "PGVECTOR_TOO_OLD", error
