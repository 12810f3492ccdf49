"""Upload jobs as a queue, on both stores: claims with leases, retries of dead workers' jobs, a status that
only moves forward, collection deletion, spool clean-up, and tenant isolation of all of it."""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from bunko.errors import DocumentNotFoundError
from bunko.stores import StoreBackend, open_backend
from bunko.stores.service import Job, ServiceRecords, service_records


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else f"sqlite:///{tmp_path / 's.db'}"
    b = open_backend(url)
    yield b
    b.close()


@pytest.fixture()
def records(backend: StoreBackend) -> ServiceRecords:
    return service_records(backend)


def _queue(records: ServiceRecords, store, job_id: str, collection: str = "default", **extra) -> None:
    records.create_job(store, Job(job_id, collection, f"{job_id}.txt", 10, lease_until=0.0, **extra))


def _sql(backend: StoreBackend, statement: str, params: tuple = ()) -> None:
    """Run a statement as the application would (PostgreSQL: bunko_app with no tenant bound)."""
    if backend.scheme == "sqlite":
        with closing(sqlite3.connect(backend.url.removeprefix("sqlite:///"))) as conn, conn:
            conn.execute(statement, params)
    else:
        import psycopg

        with psycopg.connect(backend.url, autocommit=True) as conn:  # the owner: RLS binds it too, the trigger too
            conn.execute(statement.replace("jobs", "bunko.jobs").replace("?", "%s"), params)


def test_claims_take_the_oldest_job_of_any_tenant_once(backend: StoreBackend, records: ServiceRecords) -> None:
    acme, globex = backend.for_tenant("acme"), backend.for_tenant("globex")
    _queue(records, acme, "a1")
    _queue(records, globex, "g1")
    _queue(records, acme, "a2")
    first = records.claim_job("w1", 60).claim
    second = records.claim_job("w2", 60).claim
    third = records.claim_job("w1", 60).claim
    assert [(c.tenant, c.job_id, c.attempt) for c in (first, second, third)] == [  # type: ignore[union-attr]
        ("acme", "a1", 1), ("globex", "g1", 1), ("acme", "a2", 1)]
    assert records.claim_job("w3", 60).claim is None  # every lease is live
    job = records.get_job(acme, "a1")
    assert (job.status, job.attempts, job.worker) == ("processing", 1, "w1") and job.lease_until > time.time()
    # Renewing and finishing need the lease: another worker cannot, the holder can.
    assert records.renew_job(acme, "a1", time.time() + 60, "w2") is False
    assert records.finish_job(acme, "a1", "completed", chunk_count=1, worker="w2") is False
    assert records.renew_job(acme, "a1", time.time() + 60, "w1") is True
    assert records.finish_job(acme, "a1", "completed", chunk_count=4, worker="w1") is True
    assert records.get_job(acme, "a1").chunk_count == 4
    # The claimed ids name only their tenant's job: another tenant's scope does not find it.
    with pytest.raises(DocumentNotFoundError):
        records.get_job(globex, "a2")


def test_concurrent_claimers_never_share_a_job(backend: StoreBackend, records: ServiceRecords) -> None:
    stores = [backend.for_tenant(t) for t in ("acme", "globex", "initech")]
    expected = set()
    for i in range(30):
        store = stores[i % 3]
        _queue(records, store, f"j{i}")
        expected.add((store.tenant, f"j{i}"))
    claimed: list[tuple[str, str]] = []
    lock = threading.Lock()

    def claimer(name: str) -> None:
        while (result := records.claim_job(name, 60).claim) is not None:
            with lock:
                claimed.append((result.tenant, result.job_id))

    threads = [threading.Thread(target=claimer, args=(f"w{n}",)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted(expected)  # every job once, none twice


def test_a_dead_workers_job_is_retried_then_failed_with_its_attempts(backend: StoreBackend,
                                                                     records: ServiceRecords) -> None:
    acme = backend.for_tenant("acme")
    _queue(records, acme, "doomed", max_attempts=2)
    # A lease of -1 s has run out as soon as it is taken: each worker "dies" at once.
    first = records.claim_job("w1", -1)
    assert first.claim is not None and first.claim.attempt == 1 and first.failed == []
    assert records.get_job(acme, "doomed").status == "processing"  # a reader does not fail a retryable job
    second = records.claim_job("w2", -1)
    assert second.claim is not None and second.claim.attempt == 2
    assert records.finish_job(acme, "doomed", "completed", worker="w1") is False  # w1 lost it to w2
    third = records.claim_job("w3", -1)
    assert third.claim is None and third.failed == [("acme", "doomed")]
    job = records.get_job(acme, "doomed")
    assert (job.status, job.error_code, job.attempts) == ("failed", "JOB_ABANDONED", 2)
    assert "2 attempts" in (job.error or "") and "upload the file again" in (job.error or "")
    # A zombie of the last attempt cannot resurrect it (finding 3): finish_job is refused.
    assert records.finish_job(acme, "doomed", "completed", chunk_count=9, worker="w2") is False
    assert records.finish_job(acme, "doomed", "completed", chunk_count=9) is False
    assert records.get_job(acme, "doomed").status == "failed"
    # A reader fails an exhausted job whose last lease ran out, with the same reason.
    _queue(records, acme, "once", max_attempts=1)
    assert records.claim_job("w4", -1).claim is not None
    assert records.get_job(acme, "once").error_code == "JOB_ABANDONED"


def test_a_finished_jobs_status_cannot_change_even_in_raw_sql(backend: StoreBackend, records: ServiceRecords) -> None:
    acme = backend.for_tenant("acme")
    _queue(records, acme, "done")
    claim = records.claim_job("w1", 60).claim
    assert claim is not None and records.finish_job(acme, "done", "failed", error_code="X", error="x", worker="w1")
    with pytest.raises(Exception, match="keeps its status"):
        _sql(backend, "UPDATE jobs SET status = 'completed' WHERE uid = ?", ("done",))
    with pytest.raises(Exception, match="keeps its status"):
        _sql(backend, "UPDATE jobs SET status = 'processing' WHERE uid = ?", ("done",))
    _sql(backend, "UPDATE jobs SET error = 'still failed' WHERE uid = ?", ("done",))  # other columns may change
    assert (records.get_job(acme, "done").status, records.get_job(acme, "done").error) == ("failed", "still failed")


def test_deleting_a_collections_jobs_is_confined_to_it_and_the_tenant(backend: StoreBackend,
                                                                      records: ServiceRecords) -> None:
    acme, globex = backend.for_tenant("acme"), backend.for_tenant("globex")
    _queue(records, acme, "a1", "notes")
    _queue(records, acme, "a2", "other")
    _queue(records, globex, "g1", "notes")
    assert records.delete_collection_jobs(globex, "missing") == []
    assert records.delete_collection_jobs(acme, "notes") == ["a1"]
    assert [j.id for j in records.list_jobs(acme)] == ["a2"]
    assert [j.id for j in records.list_jobs(globex)] == ["g1"]
    assert records.delete_collection_jobs(backend.for_tenant("nobody"), "notes") == []


def test_the_app_role_sees_no_other_tenants_jobs_on_postgresql(request: pytest.FixtureRequest) -> None:
    """The claim function looks across tenants as the owner; the application role still cannot."""
    url = request.getfixturevalue("pg_url")
    backend = open_backend(url)
    try:
        records = service_records(backend)
        _queue(records, backend.for_tenant("acme"), "secret")
        with backend.transaction(None, None, write=False) as conn:  # type: ignore[attr-defined]
            assert conn.execute("SELECT current_user").fetchone()[0] == "bunko_app"
            assert conn.execute("SELECT count(*) FROM bunko.jobs").fetchone()[0] == 0
            assert conn.execute("SELECT count(*) FROM bunko.tenants").fetchone()[0] == 0
        globex = backend.for_tenant("globex")
        records.create_tenant("globex")
        with globex.session() as (conn, _):  # type: ignore[attr-defined]
            assert conn.execute("SELECT count(*) FROM bunko.jobs").fetchone()[0] == 0
        assert records.claim_job("w", 60).claim is not None  # the job is there, for a worker
    finally:
        backend.close()


def test_sweep_removes_files_of_ended_and_unknown_jobs_only(backend: StoreBackend, records: ServiceRecords,
                                                           tmp_path: Path) -> None:
    from bunko import Bunko
    from bunko.server.worker import sweep_spool
    from bunko.spool import job_folder

    acme = backend.for_tenant("acme")
    _queue(records, acme, "waiting")
    _queue(records, acme, "ended")
    _queue(records, acme, "dead", max_attempts=1)
    records.claim_job("w", 60)  # "waiting" is claimed
    records.claim_job("w", 60)
    records.finish_job(acme, "ended", "completed", worker="w")
    records.claim_job("w", -1)  # "dead": its only worker died
    records.claim_job("w", 60)  # ... and the next claim fails it
    root = tmp_path / "spool"
    for job_id in ("waiting", "ended", "dead", "never-recorded", "arriving"):
        folder = job_folder(root, "acme", job_id)
        folder.mkdir(parents=True)
        (folder / "f.txt").write_text("x")
    old = time.time() - 3600
    for path in (job_folder(root, "acme", "never-recorded"), job_folder(root, "acme", "never-recorded") / "f.txt"):
        os.utime(path, (old, old))
    (root / "globex" / "ended").mkdir(parents=True)  # the same id in another tenant has no job there
    (root / "globex" / "ended" / "f.txt").write_text("x")
    legacy = root / "0192-old-layout-job"  # SPOOL/<job id>/<file>, from before tenants had folders
    legacy.mkdir()
    (legacy / "f.txt").write_text("x")
    for path in (legacy, legacy / "f.txt"):
        os.utime(path, (old, old))
    with Bunko(backend.url) as engine:
        removed = sweep_spool(engine, root, grace=600)
    assert removed == 4 and not legacy.exists()
    assert sorted(p.name for p in (root / "acme").iterdir()) == ["arriving", "waiting"]
    assert (root / "globex" / "ended" / "f.txt").exists()  # recent and unknown: an upload still arriving


def test_the_heartbeat_keeps_the_lease_while_the_event_loop_is_blocked(backend: StoreBackend,
                                                                       records: ServiceRecords) -> None:
    """Finding 3: the lease is renewed by its own thread, whatever the processing does to the event loop."""
    import asyncio

    from bunko.jobs import TenantJobs
    from bunko.server.worker import Heartbeat

    acme = backend.for_tenant("acme")
    jobs = TenantJobs(records, acme, Path("unused-spool"))
    _queue(records, acme, "busy")
    lease = 2.0
    assert records.claim_job("w1", lease).claim is not None

    async def cpu_bound_on_the_loop() -> tuple[int, object]:
        with Heartbeat(jobs, "busy", "w1", lease) as beat:
            while beat.renewals < 6:  # 1.5 leases of CPU work on the loop's own thread, as splitting was
                sum(range(10_000))
            taken = records.claim_job("w2", lease).claim  # the lease still holds: nobody else may take it
        return beat.renewals, taken

    renewals, taken = asyncio.run(cpu_bound_on_the_loop())
    assert renewals >= 6 and taken is None
    assert records.get_job(acme, "busy").worker == "w1"
    # A deleted job: the heartbeat notices it is no longer ours and stops.
    records.delete_jobs(acme, ["busy"])
    with Heartbeat(jobs, "busy", "w1", 0.2) as beat:
        assert beat.lost.wait(600)


def _run_claims(records: ServiceRecords, stores: dict[str, object], *, cap: int = 0) -> list[tuple[str, str]]:
    """Claim and finish jobs one after the other until none is left; the (tenant, job) pairs in claim order."""
    order: list[tuple[str, str]] = []
    while (claim := records.claim_job("w1", 60, tenant_cap=cap).claim) is not None:
        order.append((claim.tenant, claim.job_id))
        assert records.finish_job(stores[claim.tenant], claim.job_id, "completed", worker="w1")
    return order


def test_tenants_take_turns_so_a_backlog_delays_only_its_own_tenant(backend: StoreBackend,
                                                                    records: ServiceRecords) -> None:
    """Issue 26: jobs were claimed oldest first across all tenants, so one tenant's 10,000 uploads made
    another's one file wait for all of them. Tenant A queues 300 jobs, then B one: B's is the second."""
    stores = {t: backend.for_tenant(t) for t in ("acme", "globex", "initech")}
    for i in range(300):
        _queue(records, stores["acme"], f"a{i:03d}")
    _queue(records, stores["globex"], "g1")
    first = records.claim_job("w1", 60).claim
    assert first is not None and (first.tenant, first.job_id) == ("acme", "a000")
    assert records.finish_job(stores["acme"], "a000", "completed", worker="w1")
    _queue(records, stores["initech"], "i1")  # a third tenant, later still: its turn comes before acme's next
    order = [("acme", "a000"), *_run_claims(records, stores)]
    assert order[:4] == [("acme", "a000"), ("globex", "g1"), ("initech", "i1"), ("acme", "a001")]
    assert order.index(("globex", "g1")) < [i for i, (t, _) in enumerate(order) if t == "acme"][19]
    assert [j for t, j in order if t == "acme"] == [f"a{i:03d}" for i in range(300)]  # a tenant's own: oldest first
    # The job records agree: every job completed, claimed once.
    jobs = [j for s in stores.values() for j in records.list_jobs(s)]
    assert len(jobs) == 302 and {(j.status, j.attempts) for j in jobs} == {("completed", 1)}


def test_a_tenant_with_its_cap_of_jobs_in_flight_waits_its_turn(backend: StoreBackend, records: ServiceRecords,
                                                               embedder: object) -> None:
    from bunko import Bunko
    from bunko.server.worker import Worker

    stores = {t: backend.for_tenant(t) for t in ("acme", "globex")}
    for i in range(4):
        _queue(records, stores["acme"], f"a{i}")
    _queue(records, stores["globex"], "g1")
    with Bunko(backend.url, embedder=embedder, tenant_jobs_in_flight=2) as engine:
        worker = Worker(engine, worker_id="w1")  # the worker takes the cap from [server] tenant_jobs_in_flight
        claims = [worker.claim() for _ in range(4)]
    assert [(c.tenant, c.job_id) if c else None for c in claims] == [
        ("acme", "a0"), ("globex", "g1"), ("acme", "a1"), None]  # acme has 2 in flight; a2 and a3 wait
    assert records.finish_job(stores["acme"], "a0", "completed", worker="w1")
    third = records.claim_job("w2", 60, tenant_cap=2).claim
    assert third is not None and (third.tenant, third.job_id) == ("acme", "a2")
    assert records.claim_job("w2", 60, tenant_cap=2).claim is None
    assert records.claim_job("w2", 60).claim is not None  # without a cap a3 goes too


def test_users_of_a_tenant_take_turns_too(backend: StoreBackend, records: ServiceRecords) -> None:
    """Inside a tenant, the users (its keys without a user count as one) take turns the same way."""
    stores = {t: backend.for_tenant(t) for t in ("acme", "globex")}
    for i in range(5):
        _queue(records, stores["acme"], f"alice{i}", user_id="alice")
    _queue(records, stores["acme"], "bob0", user_id="bob")
    _queue(records, stores["acme"], "tenant0")  # a tenant key's upload, no user
    _queue(records, stores["globex"], "g0", user_id="alice")  # the same user name in another tenant is another user
    order = _run_claims(records, stores)
    assert order == [("acme", "alice0"), ("globex", "g0"), ("acme", "bob0"), ("acme", "tenant0"),
                     ("acme", "alice1"), ("acme", "alice2"), ("acme", "alice3"), ("acme", "alice4")]
