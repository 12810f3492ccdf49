"""Load benchmark of the HTTP API: ``POST /api/v1/search/hybrid`` with many concurrent clients.

For each store (the embedded SQLite store, then PostgreSQL started by ``bunko.testing.postgres`` in a
temporary folder, as ``tests/pg.py`` does), the benchmark:

1. creates a fresh BUNKO_HOME (and database), a tenant and an API key with the real
   ``bunko admin`` commands, and ingests a sample corpus with ``bunko ingest`` (untimed):
   ``examples/docs`` and the readable files of ``../shared/data/documents`` (or of
   ``$BUNKO_SHARED_DATA/documents``; without that corpus, the small files of ``tests/data``);
2. starts ``bunko serve --workers W`` (uvicorn, a real socket) with the rate limit set out of
   reach (the per-key counter still runs on every request, so its cost is measured);
3. runs C concurrent clients (httpx async, one connection each) for D seconds after a warm-up;
   each sends hybrid searches (top 10) drawn round-robin from mixed Japanese/English queries;
4. prints requests/s, p50/p95/p99 latency and the count of non-200 answers.

Every search also writes its usage record and search-log row (R13, R33), as in production.

Usage::

    python benchmarks/bench_server.py [--clients 32] [--duration 20] [--workers 2] [--stores sqlite,postgresql]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
# The shared corpus (beside the checkout, or named by BUNKO_SHARED_DATA); without it, the repository's test files.
SHARED = Path(os.environ.get("BUNKO_SHARED_DATA") or ROOT.parent / "shared" / "data") / "documents"
CORPUS = [ROOT / "examples" / "docs", SHARED if SHARED.is_dir() else ROOT / "tests" / "data"]
QUERIES = [
    "水は何日分備蓄すればいいですか？", "地震が起きたらまず何をする？", "非常用持ち出し袋の中身", "避難所の場所",
    "What should I pack in a go-bag?", "family communication plan", "ownership in Rust", "t-SNE perplexity",
    "Creative Commons license", "因果交流電燈", "羅生門の下人", "earthquake drop cover hold on",
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(env: dict[str, str], *args: str, check: bool = True) -> Any:
    done = subprocess.run([sys.executable, "-m", "bunko", *args], env=env, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise SystemExit(f"bunko {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout) if "--json" in args and done.stdout.strip() else None


async def _load(url: str, key: str, clients: int, duration: float, warmup: float) -> dict[str, Any]:
    latencies: list[float] = []
    failures = 0
    stop_at = 0.0
    record = False

    async def client(n: int) -> None:
        nonlocal failures
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=60,
                                     limits=httpx.Limits(max_connections=1)) as http:
            i = n
            while time.perf_counter() < stop_at:
                body = {"query": QUERIES[i % len(QUERIES)], "limit": 10}
                i += 1
                started = time.perf_counter()
                response = await http.post("/api/v1/search/hybrid", json=body)
                elapsed = time.perf_counter() - started
                if record:
                    if response.status_code == 200:
                        latencies.append(elapsed)
                    else:
                        failures += 1

    stop_at = time.perf_counter() + warmup
    await asyncio.gather(*(client(n) for n in range(clients)))
    record = True
    started = time.perf_counter()
    stop_at = started + duration
    await asyncio.gather(*(client(n) for n in range(clients)))
    wall = time.perf_counter() - started
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))] * 1000 if latencies else float("nan")

    return {"requests": len(latencies), "failed": failures, "seconds": round(wall, 1),
            "requests_per_s": round(len(latencies) / wall, 1), "p50_ms": round(pct(0.50), 1),
            "p95_ms": round(pct(0.95), 1), "p99_ms": round(pct(0.99), 1)}


def bench(store: str, args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix=f"bunko-bench-server-{store}-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "BUNKO_HOME": str(home), "BUNKO_RATE_LIMIT": "100000000"}
    pg = None
    if store == "postgresql":
        from bunko.testing.postgres import TemporaryPostgres

        pg = TemporaryPostgres(home / "pg")
        env["BUNKO_DATABASE_URL"] = pg.admin_url
    server = None
    try:
        _run(env, "admin", "tenants", "create", "bench", "--json")
        key = _run(env, "admin", "keys", "create", "--tenant", "bench", "--json")["api_key"]
        started = time.perf_counter()
        report = _run(env, "ingest", *map(str, CORPUS), "--tenant", "bench", "--json", check=False)
        ingest_s = time.perf_counter() - started
        port = _free_port()
        url = f"http://127.0.0.1:{port}"
        server = subprocess.Popen([sys.executable, "-m", "bunko", "serve", "--port", str(port), "--workers",
                                   str(args.workers), "--log-level", "warning"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"the server did not start: {server.stderr.read().decode() if server.stderr else ''}")
            time.sleep(0.3)
        result = asyncio.run(_load(url, key, args.clients, args.duration, args.warmup))
        return {"store": store, "workers": args.workers, "clients": args.clients,
                "documents": report["documents"] if report else None,
                "chunks": report["chunks"] if report else None, "ingest_s": round(ingest_s, 1), **result}
    finally:
        if server is not None and server.poll() is None:
            server.terminate()
            server.wait(timeout=60)
        if pg is not None:
            pg.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--duration", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--stores", default="sqlite,postgresql")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    print(f"# {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", file=sys.stderr)
    results = [bench(store, args) for store in args.stores.split(",")]
    if args.json:
        print(json.dumps(results, indent=2))
        return
    print("| store | workers | clients | chunks | requests/s | p50 ms | p95 ms | p99 ms | failed |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['store']} | {r['workers']} | {r['clients']} | {r['chunks']} | {r['requests_per_s']} | "
              f"{r['p50_ms']} | {r['p95_ms']} | {r['p99_ms']} | {r['failed']} |")
    print(f"# load average after {os.getloadavg()[0]:.2f}", file=sys.stderr)


if __name__ == "__main__":
    main()
