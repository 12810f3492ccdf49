"""Resources (issue 13, finding 14): the sync and async API leak no connections, threads or descriptors.

Counts open file descriptors and live threads before and after many calls, on both stores. A short
form runs by default; the 10,000-call form is marked ``long`` (run it with ``-m long``).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bunko import Bunko

from .conftest import EXAMPLES

SLACK_FDS = 8  # the counts may move by a few (a pool connection replaced, a log file): never by the call count
SLACK_THREADS = 3


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _counts() -> tuple[int, int]:
    return _fds(), threading.active_count()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_engine(request: pytest.FixtureRequest, tmp_path: Path, embedder: object) -> Iterator[Bunko]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else f"sqlite:///{tmp_path / 'r.db'}"
    engine = Bunko(url, embedder=embedder)
    engine.tenant("acme").ingest([EXAMPLES / "bichiku.txt", EXAMPLES / "emergency-kit.md"])
    yield engine
    engine.close()


def _calls(engine: Bunko, n: int) -> None:
    tenant = engine.tenant("acme")
    for i in range(n):
        mode = "hybrid" if i % 50 == 0 else "keyword"  # the embedder is not what is measured here
        assert tenant.search("非常食の備蓄", mode=mode, top_k=3).results
        if i % 10 == 0:
            tenant.search_log(5)
            tenant.collections()

    async def concurrently() -> None:
        for _ in range(max(1, n // 20)):
            found = await asyncio.gather(*[tenant.asearch("水の備え", mode="keyword", top_k=3) for _ in range(20)])
            assert all(r.results for r in found)

    asyncio.run(concurrently())


def _check_no_leak(engine: Bunko, n: int) -> None:
    _calls(engine, 20)  # warm: pools, caches, lazily opened files
    fds, threads = _counts()
    _calls(engine, n)
    after_fds, after_threads = _counts()
    assert after_fds <= fds + SLACK_FDS, f"{after_fds - fds} descriptors more after {n} calls"
    assert after_threads <= threads + SLACK_THREADS, f"{after_threads - threads} threads more after {n} calls"


def test_many_calls_leak_nothing(store_engine: Bunko) -> None:
    _check_no_leak(store_engine, 200)


@pytest.mark.slow
@pytest.mark.long
def test_ten_thousand_calls_leak_nothing(store_engine: Bunko) -> None:
    _check_no_leak(store_engine, 10_000)


def test_the_sqlite_store_closes_connections_of_ended_threads(tmp_path: Path) -> None:
    from bunko.stores import SQLiteBackend

    backend = SQLiteBackend(tmp_path / "t.db")
    store = backend.for_tenant("acme")
    try:
        store.list_collections()
        fds = _fds()
        for _ in range(100):
            worker = threading.Thread(target=store.list_collections)
            worker.start()
            worker.join()
        store.list_collections()
        assert _fds() <= fds + SLACK_FDS
        assert backend.connection_count() <= 2
    finally:
        backend.close()
