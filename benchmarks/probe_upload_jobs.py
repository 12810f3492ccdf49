"""Probes of the upload-job findings of issue 13, against whatever bunko is on PYTHONPATH (before/after figures).

1. Health answers while a 5 MB text upload is prepared: the slowest ``/healthz`` answer while the job runs.
3. A job failed as abandoned, then finished by its (live) worker: does ``finish_job`` resurrect it?
6. A deleted collection's upload: does ``GET /documents/{id}`` still show it?
10. An upload whose server is SIGKILLed mid-processing: are its spooled files left after a restart?

    PYTHONPATH=src python benchmarks/probe_upload_jobs.py [--json]

Runs ``bunko serve`` (SQLite, a temp home) in subprocesses; figures depend on the machine's load.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    def __init__(self, home: Path, **env: str) -> None:
        self.env = {**os.environ, "BUNKO_HOME": str(home), "BUNKO_RATE_LIMIT": "0", **env}
        self.port = _port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen([sys.executable, "-m", "bunko", "serve", "--port", str(self.port), "--log-level",
                                      "warning"], env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        while True:
            try:
                if httpx.get(self.url + "/readyz", timeout=5).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None:
                raise SystemExit("bunko serve did not start")
            time.sleep(0.3)

    def cli(self, *args: str) -> Any:
        out = subprocess.run([sys.executable, "-m", "bunko", *args, "--json"], env=self.env, capture_output=True,
                             text=True, check=True)
        return json.loads(out.stdout)

    def client(self) -> httpx.Client:
        self.cli("admin", "tenants", "create", "acme")
        key = self.cli("admin", "keys", "create", "--tenant", "acme")["api_key"]
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {key}"}, timeout=600)

    def kill(self) -> None:  # the server and the workers it started: its own process group
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.kill()


def _big_text(path: Path, megabytes: int = 5) -> Path:
    line = "第{0}段落：地震への備えとして水と食料を三日分備蓄します。Paragraph {0} about emergency supplies.\n\n"
    with path.open("w", encoding="utf-8") as f:
        i = 0
        while f.tell() < megabytes * 1024 * 1024:
            f.write(line.format(i))
            i += 1
    return path


def _upload(client: httpx.Client, path: Path, **form: str) -> str:
    with path.open("rb") as f:
        r = client.post("/api/v1/documents/upload", files={"file": (path.name, f)}, data=form)
    r.raise_for_status()
    return str(r.json()["documentId"])


def probe_health(tmp: Path, seconds: float) -> dict[str, Any]:
    server = Server(tmp / "h1")
    try:
        client = server.client()
        doc = _upload(client, _big_text(tmp / "big.txt"))
        worst, answers, started = 0.0, 0, time.monotonic()
        while time.monotonic() - started < seconds:
            t = time.monotonic()
            httpx.get(server.url + "/healthz", timeout=600).raise_for_status()
            worst = max(worst, time.monotonic() - t)
            answers += 1
            if client.get(f"/api/v1/documents/{doc}").json()["status"] != "processing":
                break
            time.sleep(0.2)
        return {"healthz_answers": answers, "healthz_slowest_s": round(worst, 3),
                "watched_s": round(time.monotonic() - started, 1)}
    finally:
        server.stop()


def probe_resurrection(tmp: Path) -> dict[str, Any]:
    from bunko.stores import open_backend
    from bunko.stores.service import Job, service_records

    backend = open_backend(f"sqlite:///{tmp / 'r.db'}")
    records, store = service_records(backend), backend.for_tenant("acme")
    extra = {"max_attempts": 0} if "max_attempts" in Job.__dataclass_fields__ else {}
    records.create_job(store, Job("j", "default", "a.txt", 1, lease_until=time.time() - 1, **extra))
    declared = records.get_job(store, "j").status  # its lease ran out: declared dead
    try:
        finished = records.finish_job(store, "j", "completed", chunk_count=3)  # ... but its worker was alive
    except Exception as exc:  # a probe reports whatever happens
        finished = f"refused: {exc}"
    after = records.get_job(store, "j").status
    backend.close()
    return {"declared": declared, "finish_job_returned": finished, "status_after": after}


def probe_collection_ghost(tmp: Path) -> dict[str, Any]:
    server = Server(tmp / "h6")
    try:
        client = server.client()
        note = tmp / "note.txt"
        note.write_text("集合場所は公園です。", encoding="utf-8")
        with note.open("rb") as f:
            doc = client.post("/api/v1/documents/upload?wait=true", files={"file": (note.name, f)},
                              data={"collection": "gone"}).json()["documentId"]
        client.delete("/api/v1/collections/gone").raise_for_status()
        shown = client.get(f"/api/v1/documents/{doc}")
        listed = doc in {d["id"] for d in client.get("/api/v1/documents").json()["documents"]}
        return {"get_after_delete": shown.status_code, "status": shown.json().get("status"), "listed": listed}
    finally:
        server.stop()


def probe_spool(tmp: Path, wait: float) -> dict[str, Any]:
    home = tmp / "h10"
    env = {"BUNKO_JOB_ATTEMPTS": "1", "BUNKO_JOB_LEASE_SECONDS": "3"}  # ignored by a bunko without workers
    server = Server(home, **env)
    client = server.client()
    doc = _upload(client, _big_text(tmp / "big10.txt"))
    time.sleep(2)  # a probe: let processing start, then crash
    server.kill()
    spool = home / "spool"
    files_at_crash = sum(1 for p in spool.rglob("*") if p.is_file())
    server = Server(home, **env)
    try:
        client = server.client()
        started, status = time.monotonic(), "processing"
        while time.monotonic() - started < wait and status == "processing":
            time.sleep(1)
            status = client.get(f"/api/v1/documents/{doc}").json()["status"]
        time.sleep(2)
        left = sum(1 for p in spool.rglob("*") if p.is_file())
        deleted = client.delete(f"/api/v1/documents/{doc}").status_code
        after_delete = sum(1 for p in spool.rglob("*") if p.is_file())
        return {"files_at_crash": files_at_crash, "job_status_after_restart": status, "files_after_restart": left,
                "delete_status": deleted, "files_after_delete": after_delete}
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--watch", type=float, default=90.0, help="seconds to watch /healthz at most")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        results = {"1_health_during_upload": probe_health(tmp, args.watch),
                   "3_resurrection": probe_resurrection(tmp),
                   "6_collection_ghost": probe_collection_ghost(tmp),
                   "10_spool_after_crash": probe_spool(tmp, 120.0)}
    if args.json:
        print(json.dumps(results, ensure_ascii=False))
    else:
        for name, values in results.items():
            print(f"{name}: " + ", ".join(f"{k}={v}" for k, v in values.items()))


if __name__ == "__main__":
    main()
