"""Progress of long commands (ingest, eval, export, import, copy), whatever stderr is.

On a terminal a live bar is drawn (and removed at the end). Otherwise -- output piped to a
file, a CI log, ``nohup`` -- one plain line is written every ``BUNKO_PROGRESS_SECONDS``
seconds (default 10) with the counts, the rate and the time left, plus one line when a phase
ends, so a 20-minute ingest shows it is alive. ``quiet`` writes nothing.

    with Reporter(console, quiet=False) as progress:
        progress.start("ingest", total=120, unit="files")
        for path in paths:
            ...
            progress.advance(failed=not ok)

A phase is one counted piece of work (``ingest``, ``query hybrid``, ``export``); starting the
next one ends the one before. The line format (stable, for log scrapers)::

    ingest: 40/120 files (33%), 2 failed, 3.9 files/s, 10 s elapsed, about 20 s left, at manual.pdf

(``at``: what the phase works on now, when the caller says so with :meth:`Reporter.describe`.)
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as _Bar

INTERVAL_ENV = "BUNKO_PROGRESS_SECONDS"
DEFAULT_INTERVAL = 10.0


def _interval() -> float:
    raw = os.environ.get(INTERVAL_ENV, "").strip()
    if not raw:
        return DEFAULT_INTERVAL
    try:
        return max(0.0, float(raw))
    except ValueError:
        return DEFAULT_INTERVAL


def _duration(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


class Reporter:
    """Progress of one command on ``console`` (stderr): a bar on a terminal, periodic lines elsewhere."""

    def __init__(self, console: Console, *, quiet: bool = False, interval: float | None = None,
                 live: bool | None = None) -> None:
        self.console = console
        self.quiet = quiet
        self.interval = _interval() if interval is None else interval
        self.live = (console.is_terminal if live is None else live) and not quiet
        self._bar: _Bar | None = None
        self._task: Any = None
        self.phase: str | None = None
        self.unit = "items"
        self.total: int | None = None
        self.done = 0
        self.failed = 0
        self.detail = ""
        self._started = 0.0
        self._last_line = 0.0
        self._lines = 0
        self._phase_lines = 0
        self._lock = threading.Lock()
        self._ticker: threading.Thread | None = None
        self._stop = threading.Event()

    # -- context --------------------------------------------------------------------------------
    def __enter__(self) -> Reporter:
        if self.live:
            self._bar = _Bar(SpinnerColumn(), TextColumn("[progress.description]{task.description}"), BarColumn(),
                             MofNCompleteColumn(), TimeElapsedColumn(), console=self.console, transient=True)
            self._bar.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_ticker()
        if exc[0] is None:
            self._finish_phase()
        if self._bar is not None:
            self._bar.__exit__(None, None, None)
            self._bar = None

    # -- phases ---------------------------------------------------------------------------------
    def note(self, description: str) -> None:
        """Something without a count is happening (loading the embedder, say): a spinner on a terminal."""
        self._finish_phase()
        if self.quiet:
            return
        if self._bar is not None:  # plain output stays silent: a short run writes no progress at all
            self._new_task(description, None)

    def start(self, phase: str, total: int | None = None, *, unit: str = "items") -> None:
        """Begin counting ``phase`` (ends the phase before it)."""
        self._finish_phase()
        with self._lock:
            self.phase, self.total, self.unit = phase, total, unit
            self.done = self.failed = self._phase_lines = 0
            self.detail = ""
            self._started = self._last_line = time.monotonic()
        if self._bar is not None:
            self._new_task(phase, total)
        elif not self.quiet and self.interval > 0 and self._ticker is None:
            # Lines also while nothing finishes (one large file, a slow provider): the work itself
            # may hold the thread that reports, so a timer thread writes them.
            self._stop.clear()
            self._ticker = threading.Thread(target=self._tick, name="bunko-progress", daemon=True)
            self._ticker.start()

    def set_total(self, total: int) -> None:
        """The phase's total, once known."""
        self.total = total
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, total=total)

    def describe(self, detail: str) -> None:
        """What the phase works on now (the bar's label; the end of a plain line)."""
        self.detail = detail
        if self._bar is not None and self._task is not None:
            self._bar.update(self._task, description=escape(f"{self.phase} {detail}"))

    def advance(self, count: int = 1, *, failed: bool = False) -> None:
        """``count`` more items are done (``failed``: they failed)."""
        self.update(self.done + count, failed=self.failed + (count if failed else 0))

    def update(self, done: int, total: int | None = None, *, failed: int | None = None) -> None:
        """The phase has done ``done`` items (of ``total``, if given)."""
        self.done = done
        if total is not None:
            self.total = total
        if failed is not None:
            self.failed = failed
        if self.quiet:
            return
        if self._bar is not None:
            if self._task is not None:
                self._bar.update(self._task, completed=done, total=self.total)
            return
        self._maybe_print()

    def _maybe_print(self) -> None:
        with self._lock:
            now = time.monotonic()
            if self.phase is not None and now - self._last_line >= self.interval:
                self._last_line = now
                self._print(self.line(now))

    def _tick(self) -> None:
        while not self._stop.wait(max(0.05, self.interval / 10)):
            self._maybe_print()

    def _stop_ticker(self) -> None:
        if self._ticker is not None:
            self._stop.set()
            self._ticker.join()
            self._ticker = None

    # -- lines ----------------------------------------------------------------------------------
    def line(self, now: float | None = None, *, final: bool = False) -> str:
        """The progress line of the current phase."""
        elapsed = (time.monotonic() if now is None else now) - self._started
        parts = [f"{self.done}/{self.total} {self.unit}" if self.total is not None else f"{self.done} {self.unit}"]
        if self.total and not final:
            parts[0] += f" ({100 * self.done / self.total:.0f}%)"
        if self.failed:
            parts.append(f"{self.failed} failed")
        rate = self.done / elapsed if elapsed > 0 else 0.0
        if self.done:
            parts.append(f"{rate:.1f} {self.unit}/s")
        if final:
            parts.append(f"done in {_duration(elapsed)}")
        else:
            parts.append(f"{_duration(elapsed)} elapsed")
            if self.total and rate > 0 and self.done < self.total:
                parts.append(f"about {_duration((self.total - self.done) / rate)} left")
            if self.detail and (self.total is None or self.done < self.total):
                parts.append(f"at {self.detail}")
        return f"{self.phase}: " + ", ".join(parts)

    @property
    def lines_written(self) -> int:
        """How many plain progress lines were written so far."""
        return self._lines

    def _print(self, text: str) -> None:
        self._lines += 1
        self._phase_lines += 1
        self.console.print(escape(text), highlight=False, soft_wrap=True)

    def _new_task(self, description: str, total: int | None) -> None:
        assert self._bar is not None
        if self._task is not None:
            self._bar.remove_task(self._task)
        self._task = self._bar.add_task(escape(description), total=total)

    def _finish_phase(self) -> None:
        """A plain last line for a phase that wrote lines or ran past one interval; nothing on a terminal."""
        with self._lock:
            if self.phase is not None and not self.quiet and self._bar is None:
                if self._phase_lines or time.monotonic() - self._started >= self.interval:
                    self._print(self.line(final=True))
            self.phase = None


__all__ = ["DEFAULT_INTERVAL", "INTERVAL_ENV", "Reporter"]
