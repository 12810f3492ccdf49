"""Usage accounting (R13): every embedding call, LLM call, search and upsert, recorded per tenant.

Embedders and LLMs are shared by every tenant of an engine (one model in memory, one HTTP
client), so their ``usage_sink`` is :func:`route`, set once. ``route`` hands each
``UsageEvent`` to the recorder of the tenant operation that is running, found through a
context variable: concurrent requests of different tenants each see their own recorder,
including inside ``asyncio.to_thread``. Searches and upserts are reported the same way by
the retriever and the index manager. When the operation ends, failed or not, the engine hands
the recorder's events to its :class:`UsageWriter`, which writes them off the request path: a
background thread writes each tenant's usage records and search-log rows together, in one
transaction per batch, after the answer is on its way. ``UsageWriter.flush`` waits for what was
handed over so far (reads of usage and search logs call it first); closing the engine flushes.

A tenant scope's :class:`Meter` says where its usage goes (its store, and the user it works for, whose
id every record and search-log row carries); :meth:`Meter.run` and :meth:`Meter.stream` run an
operation, or iterate a stream, with its usage recorded there.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from .types import UsageEvent

logger = logging.getLogger(__name__)
T = TypeVar("T")

_current: ContextVar[UsageRecorder | None] = ContextVar("bunko_usage_recorder", default=None)


class UsageRecorder:
    """Collects the usage events of one tenant's operations (of ``user_id``, if given) and writes them to its store."""

    def __init__(self, store: Any, *, user_id: str | None = None, anonymize_queries: bool = False) -> None:
        self.store = store
        self.user_id = user_id
        self.anonymize_queries = anonymize_queries
        self.events: list[UsageEvent] = []

    def add(self, event: UsageEvent) -> None:
        """Buffer one event."""
        self.events.append(event)

    def take(self) -> tuple[list[UsageEvent], list[SearchRow]]:
        """The buffered events as usage records and search-log rows (the buffer is emptied)."""
        events, self.events = self.events, []
        records: list[UsageEvent] = []
        searches: list[SearchRow] = []
        for event in events:
            metadata = dict(event.metadata)
            query = metadata.pop("query", None)
            if event.operation == "search":
                searches.append((None if self.anonymize_queries else query, event.items, event.latency_ms,
                                 str(metadata.get("mode", event.model))))
            records.append(UsageEvent(event.operation, event.provider, event.model, event.input_tokens,
                                      event.output_tokens, event.latency_ms, event.items, metadata))
        return records, searches

    def flush(self) -> None:
        """Write the buffered events (and a search-log row per search) now; a failure is logged, not raised."""
        records, searches = self.take()
        write_records(self.store, records, searches, user_id=self.user_id)

    async def aflush(self) -> None:
        """:meth:`flush` in a worker thread (store writes are blocking)."""
        if self.events:
            await asyncio.to_thread(self.flush)


# A search-log row: query (None when anonymised), result count, latency in ms, search type.
SearchRow = tuple[str | None, int, float, str]


def write_records(store: Any, records: list[UsageEvent], searches: list[SearchRow], *,
                  user_id: str | None = None) -> None:
    """Write usage records and search-log rows (of ``user_id``, if given) to a tenant's store, in one
    transaction (``store.usage.record``); a failure is logged, not raised.

    Accounting must never turn a good answer into an error; a store that cannot take the
    records is failing anyway, and the operation's own error (if any) is the one to show.
    """
    if not records and not searches:
        return
    try:
        store.usage.record(records, searches, user_id=user_id)
    except Exception as exc:  # any failure: see the docstring
        logger.warning("could not record %d usage event(s) for tenant %s: %s", len(records),
                       getattr(store, "tenant", "?"), exc)


_IDLE_SECONDS = 10.0  # a writer's thread ends after this long without work
_WRITERS: weakref.WeakSet[UsageWriter] = weakref.WeakSet()


@atexit.register
def _flush_writers() -> None:
    """At interpreter exit, write what engines that were never closed still hold."""
    for writer in list(_WRITERS):
        writer.close()


class UsageWriter:
    """Writes usage records and search logs in a background thread, batched per tenant store.

    :meth:`submit` never blocks on the database; the thread takes everything queued, groups it by
    store (tenant and user) and writes each group in one transaction. :meth:`flush` waits until
    what was submitted before it is written; :meth:`close` flushes and stops the thread. Events
    submitted after ``close`` are written at once, in the caller's thread.
    """

    def __init__(self) -> None:
        _WRITERS.add(self)
        self._pending: list[tuple[Any, str | None, list[UsageEvent], list[SearchRow]]] = []
        self._lock = threading.Condition()
        self._submitted = 0
        self._written = 0
        self._closed = False
        self._thread: threading.Thread | None = None

    def submit(self, recorder: UsageRecorder) -> None:
        """Queue a recorder's buffered events for writing."""
        records, searches = recorder.take()
        if not records and not searches:
            return
        with self._lock:
            if not self._closed:
                self._pending.append((recorder.store, recorder.user_id, records, searches))
                self._submitted += 1
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="bunko-usage-writer", daemon=True)
                    self._thread.start()
                self._lock.notify_all()
                return
        write_records(recorder.store, records, searches, user_id=recorder.user_id)

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._pending and not self._closed:
                    self._lock.wait(_IDLE_SECONDS)
                if not self._pending:
                    # Closed, or idle for a while: end the thread (the next submit starts another).
                    self._thread = None
                    return
                batch, self._pending = self._pending, []
            groups: dict[tuple[Any, ...], tuple[Any, str | None, list[UsageEvent], list[SearchRow]]] = {}
            for store, user_id, records, searches in batch:
                key = (type(store), getattr(store, "database", None), getattr(store, "tenant", None), user_id)
                group = groups.setdefault(key, (store, user_id, [], []))
                group[2].extend(records)
                group[3].extend(searches)
            for store, user_id, records, searches in groups.values():
                write_records(store, records, searches, user_id=user_id)
            with self._lock:
                self._written += len(batch)
                self._lock.notify_all()

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything submitted so far is written; False if ``timeout`` (s) ran out first."""
        with self._lock:
            target = self._submitted
            return self._lock.wait_for(lambda: self._written >= target, timeout)

    def close(self) -> None:
        """Write what is queued, then stop the thread."""
        with self._lock:
            self._closed = True
            self._lock.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()


def route(event: UsageEvent) -> None:
    """The ``usage_sink`` of shared embedders and LLMs: give ``event`` to the running tenant operation."""
    recorder = _current.get()
    if recorder is None:
        logger.debug("usage event outside a tenant operation dropped: %s", event)
        return
    recorder.add(event)


@contextmanager
def recording(recorder: UsageRecorder) -> Iterator[UsageRecorder]:
    """Route usage events of the code inside (and the tasks and threads it starts) to ``recorder``."""
    token = _current.set(recorder)
    try:
        yield recorder
    finally:
        _current.reset(token)


async def metered(recorder: UsageRecorder, stream: AsyncIterator[T],
                  writer: UsageWriter | None = None) -> AsyncIterator[T]:
    """Iterate ``stream`` with its usage going to ``recorder``; at the end, also on error or close, the
    events go to ``writer`` (or are written at once without one).

    The context variable is set and reset around each step, never across a ``yield``, so the
    consumer's context is left as it was between items.
    """
    try:
        while True:
            with recording(recorder):
                try:
                    item = await anext(stream)
                except StopAsyncIteration:
                    break
            yield item
    finally:
        close: Callable[[], Any] | None = getattr(stream, "aclose", None)
        if close is not None:
            with recording(recorder):
                await close()
        if writer is not None:
            writer.submit(recorder)
        else:
            await recorder.aflush()


@dataclass(frozen=True, slots=True)
class Meter:
    """Where one tenant scope's usage goes: its store and the user it works for (see the module doc).

    ``writer`` writes the records off the request path (the engine's :class:`UsageWriter`); without
    one they are written when the operation ends.
    """

    store: Any
    writer: UsageWriter | None = None
    user_id: str | None = None
    anonymize_queries: bool = False

    def recorder(self) -> UsageRecorder:
        """A recorder for one operation of this scope."""
        return UsageRecorder(self.store, user_id=self.user_id, anonymize_queries=self.anonymize_queries)

    async def run(self, work: Awaitable[T]) -> T:
        """Await ``work`` with its usage recorded for this scope (handed over when it ends, also on error)."""
        recorder = self.recorder()
        try:
            with recording(recorder):
                return await work
        finally:
            if self.writer is not None:
                self.writer.submit(recorder)
            else:
                await recorder.aflush()

    def stream(self, items: AsyncIterator[T]) -> AsyncIterator[T]:
        """Iterate ``items`` with its usage recorded for this scope (see :func:`metered`)."""
        return metered(self.recorder(), items, self.writer)


def install(target: Any) -> None:
    """Make :func:`route` the ``usage_sink`` of an embedder or LLM (keeping a sink it already had)."""
    if target is None:
        return
    previous = getattr(target, "usage_sink", None)
    if previous is route or getattr(previous, "_bunko_route", False):
        return
    if previous is None:
        sink: Callable[[UsageEvent], None] = route
    else:
        def sink(event: UsageEvent) -> None:
            route(event)
            previous(event)

        sink._bunko_route = True  # type: ignore[attr-defined]
    try:
        target.usage_sink = sink
    except AttributeError:  # an object without the attribute (a plugin that does not meter)
        logger.debug("%r takes no usage_sink; its usage is not recorded", target)


def store_kind(store: Any) -> str:
    """The backend a store runs on (``sqlite``, ``postgresql``), the ``provider`` of search and upsert records."""
    return str(store.kind)
