"""The worker processes bulk work runs on: one pool per process, as many workers as the machine has cores
(or as ``[ingest] workers`` / ``BUNKO_INGEST_WORKERS`` says, which an engine applies with
:func:`set_worker_count`; 0 runs everything in the calling process).

Keyword analysis (Sudachi, bigrams, stemming) is pure Python and holds the GIL, so threads would take
turns on one core: measured on 20,000 JSQuAD chunks with ``combined_en`` on this 2-core machine,
2 threads took as long as 1 (docs/ARCHITECTURE.md, "Bulk writes"), 2 processes half as long. The
workers are started with ``spawn`` (a fork of a process that runs threads could inherit a held
lock), on first use, and build what they need (an analyzer and its dictionary) on their first task;
a task's arguments and answer travel pickled. A task is a function of a bunko module, so a worker
does not run the main script again (as ``spawn`` does by default): a script without an
``if __name__ == "__main__"`` guard would otherwise ingest its data once more in every worker. A
pool whose worker died is replaced at the next call, and the work it held is done in the calling
process instead.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing import spawn
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_start_lock = threading.Lock()
_pool: ProcessPoolExecutor | None = None
_pool_size = 0
_configured: int | None = None


def machine_cores() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def worker_count() -> int:
    """How many worker processes bulk work uses: the setting, else one per core; 0 means none."""
    return machine_cores() if _configured is None else _configured


def set_worker_count(workers: int | None) -> None:
    """Use ``workers`` worker processes from now on (None: follow the machine); a pool of another size
    is shut down and the next call starts one of the new size."""
    global _configured
    with _lock:
        _configured = None if workers is None else max(0, int(workers))
    if worker_count() != _pool_size:
        shutdown()


def _executor() -> ProcessPoolExecutor | None:
    global _pool, _pool_size
    size = worker_count()
    if size <= 0:
        return None
    with _lock:
        if _pool is None or _pool_size != size:
            old, _pool = _pool, ProcessPoolExecutor(size, mp_context=multiprocessing.get_context("spawn"))
            _pool_size = size
            if old is not None:
                old.shutdown(wait=False, cancel_futures=False)
        return _pool


@contextmanager
def _without_main() -> Iterator[None]:
    """Processes started meanwhile do not import the main module (tasks name their functions by module)."""
    original = spawn.get_preparation_data

    def prepared(name: str) -> dict[str, Any]:
        data = original(name)
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
        return data

    with _start_lock:
        spawn.get_preparation_data = prepared
        try:
            yield
        finally:
            spawn.get_preparation_data = original


def submit(function: Callable[..., T], *args: Any) -> Future[T]:
    """Run ``function(*args)`` in a worker process (``function`` must be importable by name); with no
    workers, or when the pool is broken, it runs here and the future is already done."""
    pool = _executor()
    if pool is not None:
        try:
            with _without_main():  # a submit may start a worker
                return pool.submit(function, *args)
        except (BrokenProcessPool, RuntimeError):  # a worker died, or the pool is shutting down
            shutdown()
    done: Future[T] = Future()
    try:
        done.set_result(function(*args))
    except BaseException as exc:  # handed to whoever waits on the future, as a pool would
        done.set_exception(exc)
    return done


def result(future: Future[T], function: Callable[..., T], *args: Any) -> T:
    """A submitted task's answer; when its worker died on the way, ``function(*args)`` done here."""
    try:
        return future.result()
    except BrokenProcessPool:
        shutdown()
        return function(*args)


def shutdown() -> None:
    """Stop the pool's workers (a later call starts new ones)."""
    global _pool, _pool_size
    with _lock:
        pool, _pool, _pool_size = _pool, None, 0
    if pool is not None:
        pool.shutdown(wait=True, cancel_futures=True)


__all__ = ["machine_cores", "result", "set_worker_count", "shutdown", "submit", "worker_count"]
