"""Named points in ingest and job processing where a test can see a process arrive, and stop it there.

Crash-safety tests SIGKILL a process at a chosen moment (inside a write transaction, during an
index build, halfway through a version swap) without guessing with wall clocks: the process
announces each point it reaches, and pauses at the ones it was told to.

Two environment variables, read once per process; without them :func:`reach` costs one dict lookup:

- ``BUNKO_CRASHPOINT_DIR``: a folder. Reaching point ``NAME`` appends this process's id to
  ``DIR/NAME.reached`` (a test waits for that file).
- ``BUNKO_CRASHPOINT_PAUSE``: comma-separated point names. Reaching one of them, the process
  waits until ``DIR/NAME.go`` exists (the test kills it meanwhile, or writes the file to let it on).

In the same process, a test may instead run a function at a point (:func:`on`, through
``bunko.testing.hooks.paused_at``): it sees the point reached and holds the thread there until it lets it go.

Points in the code: ``ingest.loaded`` (a file read, nothing written), ``ingest.prepared`` (split
and counted, not yet embedded), ``store.write.begin`` (write transaction open), ``store.version.swap``
(old versions' chunks deleted, new ones not yet in), ``store.write.chunks`` (new chunks inserted, not
committed), ``store.write.committed`` (the batch committed), ``store.hnsw.build`` (PostgreSQL: the HNSW
index built, its transaction not committed), ``job.claimed`` and ``job.finished`` (a worker),
``keywords.worker`` (a worker process holds a part of a write's keyword analysis).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

_DIR_ENV = "BUNKO_CRASHPOINT_DIR"
_PAUSE_ENV = "BUNKO_CRASHPOINT_PAUSE"
_config: tuple[Path | None, frozenset[str]] | None = None
_hooks: dict[str, Callable[[], None]] = {}  # in-process: what to run at a point (tests only)


def _settings() -> tuple[Path | None, frozenset[str]]:
    global _config
    if _config is None:
        folder = os.environ.get(_DIR_ENV)
        pause = frozenset(p.strip() for p in os.environ.get(_PAUSE_ENV, "").split(",") if p.strip())
        _config = (Path(folder) if folder else None, pause)
    return _config


def reach(name: str) -> None:
    """Announce point ``name``; pause here if the test asked to (see the module docstring)."""
    hook = _hooks.get(name)
    if hook is not None:
        hook()
    folder, pause = _settings()
    if folder is None:
        return
    with (folder / f"{name}.reached").open("a", encoding="utf-8") as f:
        f.write(f"{os.getpid()}\n")
    if name in pause:
        go = folder / f"{name}.go"
        while not go.exists():  # a test hook: the test kills the process here or lets it go on
            time.sleep(0.01)


def on(name: str, hook: Callable[[], None] | None) -> None:
    """Run ``hook`` in the thread that reaches point ``name`` (None: no longer); for tests in one process."""
    if hook is None:
        _hooks.pop(name, None)
    else:
        _hooks[name] = hook


__all__ = ["on", "reach"]
