"""Mixed load against 2 API processes and 2 upload workers on one PostgreSQL: the PostgreSQL server restarted
once, one worker SIGKILLed midway.

Clients (32 by default, over 4 tenants) upload small texts, search (hybrid), chat (RAG with the extractive
answer, SSE) and delete their own uploads, spread over both API processes. A third of the way through, the
PostgreSQL server is shut down (``pg_ctl stop -m fast``: every session ended) and started again
``--db-down`` seconds later (0: no restart; only with the throwaway server); halfway through, one worker is
SIGKILLed and its job is claimed again by the other once its lease runs out. After the load the script
waits for the queue to drain and reports:

- requests made, and answers with a 5xx status (or a stream ending in an error event, or no answer):
  those of requests that overlapped the database's downtime, and the others (expected 0);
- acknowledged uploads (202) not deleted whose document is not ``completed`` afterwards (expected 0);
- documents half written: a document whose chunk count is not its current version's chunks, or chunks
  without their document (expected 0, read with plain SQL);
- deleted documents a keyword search for their unique word still returns (expected 0).

    PYTHONPATH=src python benchmarks/load_jobs.py --seconds 300 [--clients 32] [--db-down 15] [--json]

PostgreSQL: ``--database-url`` (a superuser or owner URL; migrated here; not restarted), or a throwaway
server (bunko.testing.postgres).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

TENANTS = ["acme", "globex", "initech", "umbrella"]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(env: dict[str, str], *args: str) -> Any:
    out = subprocess.run([sys.executable, "-m", "bunko", *args, "--json"], env=env, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(out.stdout + out.stderr)
    return json.loads(out.stdout)


class Stats:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: Counter[str] = Counter()
        self.server_errors: list[str] = []
        self.acked: dict[str, tuple[str, str]] = {}  # document id -> (tenant, word)
        self.deleted: dict[str, tuple[str, str]] = {}
        self.failures: list[tuple[float, float, str]] = []  # (start, end, what) of each failed request
        self.transport_errors: list[str] = []

    def count(self, kind: str, response: httpx.Response, started: float, failed: str | None = None) -> None:
        with self.lock:
            self.requests[kind] += 1
            if failed is None and response.status_code >= 500:
                failed = f"{response.status_code} {response.text[:160]}"
            if failed is not None:
                self.server_errors.append(f"{kind} {failed}")
                self.failures.append((started, time.monotonic(), f"{kind} {failed.split(' ')[0]}"))


def _client_loop(n: int, urls: list[str], keys: dict[str, str], stop: threading.Event, stats: Stats) -> None:
    tenant = TENANTS[n % len(TENANTS)]
    rng = random.Random(n)
    clients = [httpx.Client(base_url=u, headers={"Authorization": f"Bearer {keys[tenant]}"}, timeout=300)
               for u in urls]
    mine: list[tuple[str, str]] = []
    i = 0
    try:
        while not stop.is_set():
            client = clients[i % len(clients)]
            i += 1
            action = rng.random()
            started = time.monotonic()
            try:
                if action < 0.25 or not mine:
                    word = f"zq{n}x{i}w"
                    text = f"# 備蓄メモ {word}\n\n{word} の記録です。非常用の水は一人一日3リットルを目安に備蓄します。"
                    r = client.post("/api/v1/documents/upload", files={"file": (f"{word}.md", text.encode())})
                    stats.count("upload", r, started)
                    if r.status_code == 202:
                        doc = r.json()["documentId"]
                        with stats.lock:
                            stats.acked[doc] = (tenant, word)
                        mine.append((doc, word))
                elif action < 0.65:
                    r = client.post("/api/v1/search/hybrid", json={"query": "水の備蓄は何リットル", "limit": 5})
                    stats.count("search", r, started)
                elif action < 0.85:
                    failed = None
                    with client.stream("POST", "/api/v1/chat/rag", json={"message": "水は一日何リットル？"}) as r:
                        lines = list(r.iter_lines())
                    if r.status_code >= 500:
                        failed = f"{r.status_code} {''.join(lines)[:160]}"
                    for line in lines:
                        if line.startswith("data: ") and '"type": "error"' in line.replace('":"', '": "'):
                            failed = f"SSE {json.loads(line[6:])['error']['code']}"
                    stats.count("chat", r, started, failed)
                else:
                    doc, word = mine.pop(rng.randrange(len(mine)))
                    r = client.delete(f"/api/v1/documents/{doc}")
                    stats.count("delete", r, started)
                    if r.status_code == 200:
                        with stats.lock:
                            stats.deleted[doc] = (tenant, word)
            except httpx.HTTPError as exc:
                with stats.lock:
                    stats.requests["transport_error"] += 1
                    stats.server_errors.append(f"transport {type(exc).__name__}")
                    stats.failures.append((started, time.monotonic(), f"transport {type(exc).__name__}"))
                    stats.transport_errors.append(f"{type(exc).__name__}: {exc}"[:200])
    finally:
        for c in clients:
            c.close()


def _half_written(url: str) -> int:
    """Documents whose chunk count is not the chunks of their current version, plus chunks without their
    document, read with plain SQL as the owner."""
    import psycopg

    with psycopg.connect(url) as conn:
        wrong = conn.execute("SELECT count(*) FROM bunko.documents d WHERE d.chunk_count <> (SELECT count(*) "
                             "FROM bunko.chunks c WHERE c.document_id = d.id AND c.version_id = d.current_version_id)"
                             ).fetchone()[0]
        orphans = conn.execute("SELECT count(*) FROM bunko.chunks c WHERE c.document_id IS NOT NULL AND NOT EXISTS "
                               "(SELECT 1 FROM bunko.documents d WHERE d.id = c.document_id)").fetchone()[0]
    return int(wrong) + int(orphans)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=300.0)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--database-url", default=os.environ.get("BUNKO_TEST_DATABASE_URL"))
    parser.add_argument("--lease", type=float, default=10.0, help="job lease (s): how soon a dead worker's job moves")
    parser.add_argument("--db-down", type=float, default=15.0,
                        help="seconds the PostgreSQL server stays down, a third of the way in (0: no restart)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    folder = Path(tempfile.mkdtemp(prefix="bunko-load-"))
    pg = None
    url = args.database_url
    if not url:
        from bunko.testing.postgres import TemporaryPostgres

        pg = TemporaryPostgres(folder / "pg")
        url = pg.admin_url
    from bunko.stores.postgres import migrate_database

    migrate_database(url)
    env = {**os.environ, "BUNKO_HOME": str(folder / "home"), "BUNKO_DATABASE_URL": url, "BUNKO_RATE_LIMIT": "0",
           "BUNKO_JOB_WORKERS": "0", "BUNKO_JOB_LEASE_SECONDS": str(args.lease)}
    keys = {}
    for tenant in TENANTS:
        _cli(env, "admin", "tenants", "create", tenant)
        keys[tenant] = _cli(env, "admin", "keys", "create", "--tenant", tenant, "--admin")["api_key"]
    ports = [_port(), _port()]
    logs = [(folder / f"p{i}.log").open("wb") for i in range(4)]
    apis = [subprocess.Popen([sys.executable, "-m", "bunko", "serve", "--port", str(p), "--log-level", "warning"],
                             env=env, stdout=logs[i], stderr=subprocess.STDOUT) for i, p in enumerate(ports)]
    workers = [subprocess.Popen([sys.executable, "-m", "bunko", "worker", "--log-level", "warning"], env=env,
                                stdout=logs[2 + i], stderr=subprocess.STDOUT) for i in range(2)]
    urls = [f"http://127.0.0.1:{p}" for p in ports]
    stats = Stats()
    try:
        for u in urls:
            while True:
                try:
                    if httpx.get(u + "/readyz", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    time.sleep(0.5)
        stop = threading.Event()
        threads = [threading.Thread(target=_client_loop, args=(n, urls, keys, stop, stats))
                   for n in range(args.clients)]
        started = time.monotonic()
        for t in threads:
            t.start()
        down_at = up_at = None
        if pg is not None and args.db_down > 0:
            time.sleep(args.seconds / 3)
            down_at = time.monotonic()
            pg.stop()  # every session ended, new connections refused
            time.sleep(args.db_down)
            pg.start()
            up_at = time.monotonic()
        time.sleep(max(0.0, started + args.seconds / 2 - time.monotonic()))
        workers[0].send_signal(signal.SIGKILL)  # one worker dies midway, its job in hand or not
        killed_at = round(time.monotonic() - started, 1)
        time.sleep(max(0.0, started + args.seconds - time.monotonic()))
        stop.set()
        for t in threads:
            t.join()
        load_seconds = time.monotonic() - started

        # Drain: every acknowledged, undeleted upload must end completed.
        live = {d: v for d, v in stats.acked.items() if d not in stats.deleted}
        status: dict[str, str] = {}
        drain_started = time.monotonic()
        with httpx.Client(timeout=300) as c:
            pending = set(live)
            while pending and time.monotonic() - drain_started < 1800:
                for doc in list(pending):
                    tenant = live[doc][0]
                    r = c.get(f"{urls[0]}/api/v1/documents/{doc}", headers={"Authorization": f"Bearer {keys[tenant]}"})
                    status[doc] = r.json().get("status", str(r.status_code)) if r.status_code == 200 else str(
                        r.status_code)
                    if status[doc] != "processing":
                        pending.discard(doc)
                if pending:
                    time.sleep(1)
            missing = [d for d in live if status.get(d) != "completed"]
            searchable = 0
            for doc, (tenant, word) in stats.deleted.items():
                r = c.post(f"{urls[1]}/api/v1/search/keyword", json={"query": word, "limit": 10},
                           headers={"Authorization": f"Bearer {keys[tenant]}"})
                searchable += any(h["documentId"] == doc for h in r.json().get("results", []))
        half_written = _half_written(url)

        def during(start: float, end: float) -> bool:  # the request overlapped the downtime
            return down_at is not None and up_at is not None and start <= up_at and end >= down_at

        while_down = [f for f in stats.failures if during(f[0], f[1])]
        otherwise = [f for f in stats.failures if not during(f[0], f[1])]
        report = {
            "clients": args.clients, "api_processes": 2, "workers": 2, "seconds": round(load_seconds, 1),
            "worker_killed_at_s": killed_at, "requests": dict(stats.requests),
            "db_down_s": None if down_at is None else [round(down_at - started, 1), round(up_at - started, 1)],
            "requests_total": sum(stats.requests.values()), "server_errors": len(stats.server_errors),
            "server_errors_while_db_down": len(while_down),
            "server_errors_while_down_by_kind": dict(Counter(f[2] for f in while_down)),
            "server_errors_otherwise": len(otherwise),
            "last_error_after_db_up_s": (None if up_at is None or not while_down
                                         else round(max(f[1] for f in while_down) - up_at, 1)),
            "server_error_samples": stats.server_errors[:5],
            "other_errors": [(f[2], round(f[0] - started, 1), round(f[1] - started, 1)) for f in otherwise][:10],
            "transport_error_samples": stats.transport_errors[:5], "uploads_acknowledged": len(stats.acked),
            "uploads_deleted": len(stats.deleted), "acknowledged_uploads_missing": len(missing),
            "missing_statuses": dict(Counter(status.get(d, "?") for d in missing)),
            "deleted_still_searchable": searchable, "documents_half_written": half_written,
            "drain_s": round(time.monotonic() - drain_started, 1),
        }
    finally:
        for p in [*apis, *workers]:
            if p.poll() is None:
                p.terminate()
        for p in [*apis, *workers]:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
        for f in logs:
            f.close()
        if pg is not None:
            pg.close()
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        for key, value in report.items():
            print(f"{key}: {value}")


if __name__ == "__main__":
    main()
