"""Test hooks into the stores, so tests read what they need without private attributes.

* :func:`counting` -- what a backend's tenant stores did around one operation: read and write
  transactions and reads of a collection's row.
* :func:`connection` -- a raw connection to a backend's database, for tests that look at tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


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
    ``write_transactions`` and ``collection_reads`` (reads of a collection's row)."""
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


__all__ = ["Counts", "connection", "counting"]
