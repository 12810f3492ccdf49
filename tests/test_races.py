"""Races of the upload path, forced in a chosen order (no sleeps): two uploads of one file name at once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from bunko import Bunko, Tenant
from bunko.embedders import UniversalSentenceEncoderEmbedder
from bunko.errors import BunkoError, UploadInProgressError
from bunko.jobs import TenantJobs
from bunko.server.worker import Worker
from bunko.stores import StoreBackend, open_backend
from bunko.stores.service import Job, service_records
from bunko.testing.hooks import paused_at
from bunko.types import EmbedderInfo


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else f"sqlite:///{tmp_path / 's.db'}"
    b = open_backend(url)
    yield b
    b.close()


def test_two_uploads_of_one_name_checked_before_either_is_recorded_make_one_job(backend: StoreBackend,
                                                                               tmp_path: Path) -> None:
    jobs = TenantJobs(service_records(backend), backend.for_tenant("acme"), tmp_path / "spool")
    first = jobs.upload_target("docs", "a.txt")
    second = jobs.upload_target("docs", "a.txt")  # both checks before either insert
    assert first.busy is None and second.busy is None
    jobs.create(Job("one", "docs", "a.txt", 1, lease_until=0.0))
    with pytest.raises(BunkoError) as refused:
        jobs.create(Job("two", "docs", "a.txt", 1, lease_until=0.0))
    assert refused.value.code == "UPLOAD_IN_PROGRESS"
    assert [j.id for j in jobs.list()] == ["one"]


def _staged(jobs: TenantJobs, text: str) -> Path:
    folder = jobs.staging()
    folder.mkdir(parents=True)
    (folder / "a.txt").write_text(text)
    return folder


def test_two_new_versions_of_one_document_at_once_keep_the_first_ones_file(backend: StoreBackend,
                                                                          tmp_path: Path) -> None:
    """Both uploads name the same document (same id, same job folder): the one refused leaves the other's file."""
    records = service_records(backend)
    store = backend.for_tenant("acme")
    jobs = TenantJobs(records, store, tmp_path / "spool")
    records.create_job(store, Job("doc", "docs", "a.txt", 1, lease_until=0.0))
    assert records.finish_job(store, "doc", "completed")  # the first version is stored
    first, second = _staged(jobs, "version two"), _staged(jobs, "version three")  # both spooled, both checked
    jobs.create(Job("doc", "docs", "a.txt", 1, lease_until=0.0), replace=True, staged=first)
    with pytest.raises(UploadInProgressError):
        jobs.create(Job("doc", "docs", "a.txt", 1, lease_until=0.0), replace=True, staged=second)
    assert (jobs.folder("doc") / "a.txt").read_text() == "version two"
    assert [(j.id, j.status) for j in jobs.list()] == [("doc", "processing")]


def test_two_job_creations_in_flight_at_once_on_postgresql_make_one_job(pg_url: str, tmp_path: Path) -> None:
    """The first creation holds its transaction open (job inserted, not committed) while the second checks:
    the second waits for it, then sees the first job and is refused."""
    import psycopg

    backend = open_backend(pg_url)
    try:
        records = service_records(backend)
        store = backend.for_tenant("acme")
        records.create_tenant("acme")
        inserted, go = threading.Event(), threading.Event()
        outcome: dict[str, BaseException | None] = {}

        def first_inside() -> None:
            inserted.set()
            assert go.wait(600)  # only catches a hang

        def create(name: str, hook: Callable[[], None] | None) -> None:
            try:
                records.create_job(store, Job(name, "docs", "a.txt", 1, lease_until=0.0), before_commit=hook)
                outcome[name] = None
            except BaseException as exc:  # recorded for the assertions below
                outcome[name] = exc

        one = threading.Thread(target=create, args=("one", first_inside))
        one.start()
        assert inserted.wait(600)
        two = threading.Thread(target=create, args=("two", None))
        two.start()
        with psycopg.connect(pg_url, autocommit=True) as conn:  # until the second waits for the first (or ended)
            while two.is_alive() and not conn.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
                                                      "AND NOT granted").fetchone()[0]:
                pass
        go.set()
        one.join()
        two.join()
        assert outcome["one"] is None and isinstance(outcome["two"], UploadInProgressError)
        assert [j.id for j in records.list_jobs(store)] == ["one"]
    finally:
        backend.close()


# -- a collection deleted while an upload job writes to it ------------------------------------------------
TEXT = "避難所には最低3日分の水を備えておきます。非常食も用意します。"


@pytest.mark.parametrize("deletion", ["collection", "tenant erasure"])
def test_a_collection_deleted_while_its_upload_runs_stays_deleted(store_url: str, tmp_path: Path, deletion: str,
                                                                  embedder: UniversalSentenceEncoderEmbedder) -> None:
    """The worker has read the upload and not yet written; the collection is deleted (with its jobs, or with
    all of the tenant's data); the worker goes on: it fails the job without creating the collection again,
    and leaves no file."""
    engine = Bunko(store_url, embedder=embedder)
    try:
        spool = tmp_path / "spool"
        tenant = Tenant(engine, engine.backend.for_tenant("acme"), spool=spool)
        tenant.upsert("docs", [{"content": TEXT}])
        jobs = tenant.jobs
        staged = jobs.staging()
        staged.mkdir(parents=True)
        (staged / "a.txt").write_text(TEXT)
        jobs.create(Job("up1", "docs", "a.txt", len(TEXT.encode()), lease_until=0.0), staged=staged)
        worker = Worker(engine, spool=spool, worker_id="w1")
        claim = worker.claim()
        assert claim is not None and claim.job_id == "up1"
        ended: list[Job | None] = []
        with paused_at("ingest.loaded") as pause:  # the file read, nothing written
            thread = threading.Thread(target=lambda: ended.append(asyncio.run(worker.process(claim))))
            thread.start()
            assert pause.reached.wait(600)  # only catches a hang
            if deletion == "collection":
                assert tenant.delete_collection("docs").name == "docs"
            else:
                assert jobs.erase_tenant().job_ids == ["up1"]
            pause.go.set()
            thread.join()
        assert ended == [None]  # the job was no longer the worker's to end
        assert [c.name for c in tenant.collections()] == []  # not created again, empty
        assert jobs.list() == [] and not jobs.folder("up1").exists()
    finally:
        engine.close()


# -- a moment's database failure while a worker processes an upload --------------------------------------
def _queued_upload(tenant: Tenant, job_id: str = "up1") -> TenantJobs:
    jobs = tenant.jobs
    staged = jobs.staging()
    staged.mkdir(parents=True)
    (staged / "a.txt").write_text(TEXT)
    jobs.create(Job(job_id, "docs", "a.txt", len(TEXT.encode()), lease_until=0.0), staged=staged)
    return jobs


def test_a_worker_whose_connection_is_killed_mid_write_tries_again_and_completes(
        pg_url: str, tmp_path: Path, embedder: UniversalSentenceEncoderEmbedder) -> None:
    """The worker's PostgreSQL connection is terminated (pg_terminate_backend) inside its write transaction: a
    transient failure, so the job is processed again and completes, instead of failing."""
    import psycopg

    engine = Bunko(pg_url, embedder=embedder)
    try:
        spool = tmp_path / "spool"
        tenant = Tenant(engine, engine.backend.for_tenant("acme"), spool=spool)
        jobs = _queued_upload(tenant)
        worker = Worker(engine, spool=spool, worker_id="w1", store_backoff=0.0)
        claim = worker.claim()
        assert claim is not None
        ended: list[Job | None] = []
        with paused_at("store.write.begin") as pause:  # the worker's write transaction is open
            thread = threading.Thread(target=lambda: ended.append(asyncio.run(worker.process(claim))))
            thread.start()
            assert pause.reached.wait(600)  # only catches a hang
            with psycopg.connect(pg_url, autocommit=True) as conn:
                killed = conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = "
                                      "current_database() AND pid <> pg_backend_pid() "
                                      "AND state = 'idle in transaction'").fetchall()
            assert killed == [(True,)]
            pause.go.set()
            thread.join()
        job = jobs.get("up1")
        assert (job.status, job.error_code) == ("completed", None) and job.chunk_count > 0
        assert worker.store_retries == 1
        assert ended[0] is not None and ended[0].status == "completed"
        assert [d.id for d in tenant.documents("docs")] == ["up1"]
    finally:
        engine.close()


def test_a_permanent_error_fails_the_job_at_once(store_url: str, tmp_path: Path,
                                                  embedder: UniversalSentenceEncoderEmbedder) -> None:
    """A collection built with another embedder refuses the upload: no retry, the job fails with its code."""
    engine = Bunko(store_url, embedder=embedder)
    try:
        spool = tmp_path / "spool"
        store = engine.backend.for_tenant("acme")
        store.ensure_collection("docs", EmbedderInfo("test", "another", 3))
        jobs = _queued_upload(Tenant(engine, store, spool=spool))
        worker = Worker(engine, spool=spool, worker_id="w1", store_backoff=0.0)
        claim = worker.claim()
        assert claim is not None
        ended = asyncio.run(worker.process(claim))
        assert ended is not None and (ended.status, ended.error_code) == ("failed", "EMBEDDER_MISMATCH")
        assert worker.store_retries == 0 and jobs.get("up1").status == "failed"
    finally:
        engine.close()


def test_a_locked_sqlite_file_is_a_transient_error(tmp_path: Path) -> None:
    """SQLite's "database is locked" (another connection holds the write lock) is classed as transient; a
    read-only file is not."""
    import sqlite3

    from bunko.errors import TransientStoreError, VectorStoreError
    from bunko.stores.sqlite.backend import sqlite_error

    path = tmp_path / "locked.db"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    other = sqlite3.connect(path, timeout=0, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError) as locked:
        other.execute("BEGIN IMMEDIATE")
    holder.execute("ROLLBACK")
    assert isinstance(sqlite_error("write", locked.value), TransientStoreError)
    path.chmod(0o444)
    readonly = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    with pytest.raises(sqlite3.OperationalError) as refused:
        readonly.execute("INSERT INTO t VALUES (1)")
    error = sqlite_error("write", refused.value)
    assert isinstance(error, VectorStoreError) and not isinstance(error, TransientStoreError)
    for conn in (holder, other, readonly):
        conn.close()
