"""``?wait=true`` uploads and encrypted PDFs over a real ``bunko serve`` (and real ``bunko worker`` processes).

- Waiting, the upload answers 200 with the result when its job completed, the job's typed error as a
  problem (422 ``ENCRYPTED_DOCUMENT``, ...) when it failed, and 202 (with ``Location``) only when
  ``[server] upload_wait_seconds`` ran out -- as it does when no worker runs at all.
- The ``password`` form field opens an encrypted PDF: the API decrypts the upload, so a separate worker
  process ingests it without ever seeing the password; a wrong one is refused at once; the password is
  nowhere in the server's home (store, spool, logs) afterwards.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import FIXTURES
from tests.test_server import TEXT, LiveServer, _problem

pytest.importorskip("fastapi")
pytest.importorskip("pypdfium2")
pytestmark = pytest.mark.slow

ENCRYPTED = FIXTURES / "encrypted.pdf"  # RC4 128-bit, user password below (tests/data/README.md)
PASSWORD = "openpassword"
SECRET_TEXT = "Night opening hours begin in the spring term."


def _post(client: httpx.Client, path: Path, *, wait: bool = True, name: str | None = None,
          **form: str) -> httpx.Response:
    return client.post("/api/v1/documents/upload", params={"wait": "true"} if wait else None, data=form,
                       files={"file": (name or path.name, path.read_bytes())}, timeout=1800)


def _worker(server: LiveServer, *args: str, **env: str) -> subprocess.Popen[bytes]:
    log = (Path(server.env["BUNKO_HOME"]) / f"worker-{time.monotonic_ns()}.log").open("wb")
    return subprocess.Popen([sys.executable, "-m", "bunko", "worker", *args], env={**server.env, **env},
                            stdout=log, stderr=subprocess.STDOUT)


def _stop(worker: subprocess.Popen[bytes]) -> None:
    if worker.poll() is None:
        worker.terminate()
        try:
            worker.wait(120)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait()


@pytest.fixture()
def queue_server(tmp_path: Path) -> Iterator[LiveServer]:
    """An API without workers of its own (job_workers = 0) that waits at most 1 s."""
    live = LiveServer(tmp_path / "home", BUNKO_JOB_WORKERS="0", BUNKO_UPLOAD_WAIT_SECONDS="1")
    yield live
    live.stop()


def test_wait_answers_the_result_or_the_typed_error(tmp_path: Path) -> None:
    """The API's own worker (job_workers = 1): 200 with the chunks, or the job's error with its status."""
    server = LiveServer(tmp_path / "home")
    try:
        client = server.client(server.key("acme"))
        done = _post(client, TEXT)
        assert done.status_code == 200, done.text
        body = done.json()
        assert body["status"] == "completed" and body["chunkCount"] > 0 and body["processingTime"] > 0
        assert "location" not in done.headers
        # Not waiting: 202 at once, and where to look.
        queued = _post(client, TEXT, wait=False, name="again.txt")
        assert queued.status_code == 202 and queued.json()["status"] == "processing", queued.text
        assert queued.headers["location"] == f"/api/v1/documents/{queued.json()['documentId']}"
        # Failed jobs: the problem carries the job's code, its message and the document id.
        locked = _problem(_post(client, ENCRYPTED), 422, "ENCRYPTED_DOCUMENT")
        assert "password is needed" in locked["detail"] and locked["filename"] == "encrypted.pdf"
        assert str(tmp_path) not in locked["detail"]
        shown = client.get(f"/api/v1/documents/{locked['documentId']}").json()
        assert shown["status"] == "failed" and shown["error"]["code"] == "ENCRYPTED_DOCUMENT"
        _problem(_post(client, FIXTURES / "invalid.pdf"), 422, "CORRUPT_DOCUMENT")
    finally:
        server.stop()


def test_wait_without_a_worker_answers_202_when_its_time_runs_out(queue_server: LiveServer) -> None:
    server = queue_server
    client = server.client(server.key("acme"))
    pending = _post(client, TEXT)  # nobody takes the job: the wait ends after upload_wait_seconds
    assert pending.status_code == 202, pending.text
    document = pending.json()["documentId"]
    assert pending.json()["status"] == "processing" and pending.headers["location"].endswith(document)
    assert client.get(pending.headers["location"]).json()["status"] == "processing"
    assert "no worker took it" in server.log.read_text()  # the operator is told why
    worker = _worker(server, "--max-jobs", "1")  # a worker comes: the queued job completes
    try:
        assert worker.wait(1800) == 0
    finally:
        _stop(worker)
    assert client.get(f"/api/v1/documents/{document}").json()["status"] == "completed"


def test_a_document_deleted_during_the_wait_is_404(tmp_path: Path) -> None:
    """The worker holds the job (paused at its claim) while the document is deleted: the waiting upload is 404."""
    server = LiveServer(tmp_path / "home", BUNKO_JOB_WORKERS="0")  # the default wait (300 s) outlasts the test
    points = tmp_path / "points"
    points.mkdir()
    worker = _worker(server, BUNKO_CRASHPOINT_DIR=str(points), BUNKO_CRASHPOINT_PAUSE="job.claimed")
    answers: list[httpx.Response] = []
    try:
        client = server.client(server.key("acme"))
        waiting = threading.Thread(target=lambda: answers.append(_post(client, TEXT)))
        waiting.start()
        deadline = time.monotonic() + 1800  # only catches a hang
        while not (points / "job.claimed.reached").exists():
            assert worker.poll() is None and time.monotonic() < deadline, "the worker never claimed the job"
            time.sleep(0.02)
        (only,) = client.get("/api/v1/documents").json()["documents"]
        assert client.delete(f"/api/v1/documents/{only['id']}").status_code == 200
        waiting.join()
        body = _problem(answers[0], 404, "DOCUMENT_NOT_FOUND")
        assert "deleted while" in body["detail"]
    finally:
        (points / "job.claimed.go").touch()
        _stop(worker)
        server.stop()


def _files_holding(root: Path, secret: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret in p.read_bytes()]


def test_an_encrypted_pdf_with_its_password_is_ingested_by_a_separate_worker(queue_server: LiveServer) -> None:
    server = queue_server
    home = Path(server.env["BUNKO_HOME"])
    client = server.client(server.key("acme"))
    # Refused at once, before any job: a wrong password, a password for another kind of file.
    wrong = _problem(_post(client, ENCRYPTED, password="not-the-password"), 422, "ENCRYPTED_DOCUMENT")
    assert "password given does not open it" in wrong["detail"] and str(home) not in wrong["detail"]
    field = _problem(_post(client, TEXT, password=PASSWORD), 422, "VALIDATION_ERROR")
    assert field["field"] == "password"
    assert client.get("/api/v1/documents").json()["totalCount"] == 0
    # The right password: queued (no worker yet), then a separate worker process ingests it.
    queued = _post(client, ENCRYPTED, password=PASSWORD)
    assert queued.status_code == 202, queued.text
    spooled = list((home / "spool").rglob("encrypted.pdf"))
    assert len(spooled) == 1 and spooled[0].read_bytes() != ENCRYPTED.read_bytes()  # the decrypted copy
    worker = _worker(server)
    try:
        done = _post(client, ENCRYPTED, name="encrypted-again.pdf", password=PASSWORD)
        # the worker takes both; this one waits up to 1 s, so it may still be processing
        document = done.json()["documentId"]
        info = _completed(client, document)
        assert info["status"] == "completed" and info["chunkCount"] > 0, info
        assert _completed(client, queued.json()["documentId"])["status"] == "completed"
    finally:
        _stop(worker)
    found = client.post("/api/v1/search/keyword", json={"query": "night opening hours spring"}).json()["results"]
    assert found and SECRET_TEXT in found[0]["content"]
    # The password went nowhere: not the store, the spool, the worker's or the server's log.
    assert _files_holding(home, PASSWORD.encode()) == []


def _completed(client: httpx.Client, document: str) -> dict[str, Any]:
    deadline = time.monotonic() + 1800  # only catches a hang
    while (info := client.get(f"/api/v1/documents/{document}").json())["status"] == "processing":
        assert time.monotonic() < deadline, info
        time.sleep(0.1)
    return info
