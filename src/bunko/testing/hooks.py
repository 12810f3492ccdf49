"""Test hooks into the stores, so tests read what they need without private attributes.

* :func:`counting` -- what a backend's tenant stores did around one operation: read and write
  transactions and reads of a collection's row.
* :func:`connection` -- a raw connection to a backend's database, for tests that look at tables.
* :func:`paused_at` -- hold the thread that reaches a crash point (:mod:`bunko.crashpoints`) until the test
  lets it go: a forced interleaving inside one process.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .. import crashpoints


@dataclass(slots=True)
class Counts:
    """The counts of :func:`counting`: filled when its block ends (``delta``), by name."""

    before: dict[str, int]
    delta: dict[str, int] = field(default_factory=dict)

    def __getitem__(self, name: str) -> int:
        return self.delta.get(name, 0)


@contextmanager
def counting(backend: Any) -> Iterator[Counts]:
    """Count what the backend's tenant stores do inside the block: ``read_transactions``,
    ``write_transactions``, ``collection_reads`` (reads of a collection's row), ``tenant_lookups`` (reads of
    the tenant's row id, which a store and its copies acting for users learn once) and, on PostgreSQL,
    ``side_reads`` (a statement sent on a second pooled connection beside a read transaction: a hybrid
    search's vector leg)."""
    counts = Counts(backend.counters.snapshot())
    try:
        yield counts
    finally:
        after = backend.counters.snapshot()
        counts.delta = {name: after.get(name, 0) - counts.before.get(name, 0) for name in after}


@contextmanager
def connection(backend: Any) -> Iterator[Any]:
    """A connection to the backend's database outside every tenant scope (SQLite: this thread's; PostgreSQL:
    a pooled one, working as the application role)."""
    if backend.scheme == "sqlite":
        yield backend.open_connection()
    else:
        with backend.connection() as conn:
            yield conn


@dataclass(slots=True)
class Pause:
    """What :func:`paused_at` hands out: ``reached`` is set when a thread arrives at the point (it then waits
    until ``go`` is set). Only the first arrival is held; later ones pass."""

    reached: threading.Event = field(default_factory=threading.Event)
    go: threading.Event = field(default_factory=threading.Event)


@contextmanager
def paused_at(point: str) -> Iterator[Pause]:
    """Hold the first thread that reaches crash point ``point`` there until ``pause.go`` is set; the block's end
    lets it go in any case."""
    pause = Pause()
    lock = threading.Lock()

    def hold() -> None:
        with lock:
            first = not pause.reached.is_set()
            pause.reached.set()
        if first:
            pause.go.wait()

    crashpoints.on(point, hold)
    try:
        yield pause
    finally:
        crashpoints.on(point, None)
        pause.go.set()


__all__ = ["Counts", "Pause", "connection", "counting", "paused_at"]
