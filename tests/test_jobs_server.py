"""Upload jobs through a real ``bunko serve`` and real ``bunko worker`` processes.

- A large upload is processed by a worker process, never on the API's event loop: while the worker
  is splitting a 5 MB text, ``/healthz`` and a search answer (finding 1).
- A worker SIGKILLed holding a job: another worker claims it again once the lease has run out, and the
  job completes with its two attempts recorded.
- Deleting a collection removes its upload jobs: no ghost documents (finding 6).
- Spooled files go when their job is deleted, when the user or the tenant is erased (finding 10).

Events, not wall clocks: the worker announces the points it reaches (``bunko.crashpoints``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.test_server import TEXT, LiveServer, _problem, _upload, _wait_completed

pytest.importorskip("fastapi")


def _wait_for(path: Path, proc: subprocess.Popen[bytes] | None = None, what: str = "") -> None:
    deadline = time.monotonic() + 1800  # only catches a hang
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the process ended before {what or path.name}")
        assert time.monotonic() < deadline, f"{what or path.name} never happened"
        time.sleep(0.02)


def _pids(reached: Path) -> list[int]:
    return [int(line) for line in reached.read_text().split()]


def _big_text(path: Path, megabytes: int = 5) -> Path:
    line = "第{0}段落：地震への備えとして水と食料を三日分備蓄します。Paragraph {0} about emergency supplies.\n\n"
    with path.open("w", encoding="utf-8") as f:
        i = 0
        while f.tell() < megabytes * 1024 * 1024:
            f.write(line.format(i))
            i += 1
    return path


def test_a_large_upload_never_blocks_the_api(tmp_path: Path) -> None:
    """Finding 1: the health check and a search answer while a worker process splits a 5 MB text."""
    points = tmp_path / "points"
    points.mkdir()
    # The embedded worker (job_workers = 1) inherits these: it announces its points and pauses after splitting.
    server = LiveServer(tmp_path / "home", BUNKO_CRASHPOINT_DIR=str(points), BUNKO_CRASHPOINT_PAUSE="ingest.prepared")
    try:
        client = server.client(server.key("acme"))
        uploaded = _upload(client, _big_text(tmp_path / "big.txt"))
        assert uploaded["status"] == "processing"
        _wait_for(points / "job.claimed.reached", server.proc, "the worker's claim")  # the worker has the job
        health = httpx.get(server.url + "/healthz", timeout=600)
        search = client.post("/api/v1/search/semantic", json={"query": "水の備蓄", "limit": 3})
        # Both answered while the job was still being split: the splitting had not finished.
        assert not (points / "ingest.prepared.reached").exists()
        assert health.status_code == 200 and search.status_code == 200, (health.text, search.text)
        assert client.get(f"/api/v1/documents/{uploaded['documentId']}").json()["status"] == "processing"
        (worker_pid,) = _pids(points / "job.claimed.reached")
        assert worker_pid != server.proc.pid  # the work is in another process
        _wait_for(points / "ingest.prepared.reached", server.proc, "the end of splitting")  # the worker goes on
        os.kill(worker_pid, signal.SIGKILL)  # a started helper process, by its id; the lease lets it go
    finally:
        server.stop()


def _worker(server: LiveServer, *args: str, **env: str) -> subprocess.Popen[bytes]:
    log = (Path(server.env["BUNKO_HOME"]) / f"worker-{time.monotonic_ns()}.log").open("wb")
    return subprocess.Popen([sys.executable, "-m", "bunko", "worker", "--job-lease-seconds", "2", *args],
                            env={**server.env, **env}, stdout=log, stderr=subprocess.STDOUT)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.slow)])
def queue_server(request: pytest.FixtureRequest, tmp_path: Path):
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else None
    live = LiveServer(tmp_path / "home", url, BUNKO_JOB_WORKERS="0")  # separate workers take the jobs
    yield live
    live.stop()


def test_separate_workers_retry_a_dead_workers_job_and_deletes_leave_nothing(queue_server: LiveServer,
                                                                              tmp_path: Path) -> None:
    from bunko import Bunko
    from bunko.stores.service import service_records

    server = queue_server
    admin = server.client(server.key("acme", "root", admin=True))
    alice = server.client(server.key("acme", "alice"))
    spool = Path(server.env["BUNKO_HOME"]) / "spool" / "acme"

    # A worker claims the first upload and is SIGKILLed holding it.
    points = tmp_path / "points"
    points.mkdir()
    first = _upload(admin, TEXT)["documentId"]
    doomed = _worker(server, BUNKO_CRASHPOINT_DIR=str(points), BUNKO_CRASHPOINT_PAUSE="job.claimed")
    _wait_for(points / "job.claimed.reached", doomed, "the first claim")
    doomed.kill()
    doomed.wait(60)
    assert admin.get(f"/api/v1/documents/{first}").json()["status"] == "processing"
    # Another upload, into a collection deleted below; then a worker that lives.
    second = _upload(admin, TEXT, collection="gone")["documentId"]
    survivor = _worker(server, "--max-jobs", "2")
    try:
        assert _wait_completed(admin, first, timeout=1800)["status"] == "completed"
        assert _wait_completed(admin, second, timeout=1800)["status"] == "completed"
        assert survivor.wait(600) == 0
    finally:
        if survivor.poll() is None:
            survivor.kill()
    with Bunko(server.env.get("BUNKO_DATABASE_URL"), home=server.env["BUNKO_HOME"]) as engine:
        job = service_records(engine.backend).get_job(engine.backend.for_tenant("acme"), first)
    assert (job.attempts, job.status) == (2, "completed")  # the dead worker's claim counted
    assert not (spool / first).exists() and not (spool / second).exists()  # ended jobs leave no files

    # Finding 6: the deleted collection's documents are gone from every listing.
    assert admin.delete("/api/v1/collections/gone").json() == {"deleted": True, "id": "gone"}
    _problem(admin.get(f"/api/v1/documents/{second}"), 404, "DOCUMENT_NOT_FOUND")
    assert second not in {d["id"] for d in admin.get("/api/v1/documents").json()["documents"]}
    assert first in {d["id"] for d in admin.get("/api/v1/documents").json()["documents"]}

    # Finding 10: no worker runs now, so uploads wait in the spool until deleted or erased.
    waiting = _upload(admin, TEXT, collection="later")["documentId"]
    assert (spool / waiting / TEXT.name).is_file()
    assert admin.delete(f"/api/v1/documents/{waiting}").status_code == 200
    assert not (spool / waiting).exists()
    hers = _upload(alice, TEXT, collection="hers")["documentId"]
    assert (spool / hers / TEXT.name).is_file()
    assert alice.delete("/api/v1/users/alice/data").json()["deleted"]["jobs"] == 1
    assert not (spool / hers).exists()
    _upload(admin, TEXT, collection="last")
    assert any(spool.iterdir())
    assert admin.delete("/api/v1/tenant/data").status_code == 200
    assert not spool.exists()
