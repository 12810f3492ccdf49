"""Usage accounting (R13): every embedding call, LLM call, search and upsert, recorded per tenant.

Embedders and LLMs are shared by every tenant of an engine (one model in memory, one HTTP
client), so their ``usage_sink`` is :func:`route`, set once. ``route`` hands each
``UsageEvent`` to the recorder of the tenant operation that is running, found through a
context variable: concurrent requests of different tenants each see their own recorder,
including inside ``asyncio.to_thread``. Searches and upserts are reported the same way by
the retriever and the index manager. The engine flushes a recorder into the tenant's store
(``record_usage``, and ``log_search`` for searches) when the operation ends, failed or not.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from .types import UsageEvent

logger = logging.getLogger(__name__)
T = TypeVar("T")

_current: ContextVar[UsageRecorder | None] = ContextVar("bunko_usage_recorder", default=None)


class UsageRecorder:
    """Collects the usage events of one tenant's operations and writes them to its store."""

    def __init__(self, store: Any, *, anonymize_queries: bool = False) -> None:
        self.store = store
        self.anonymize_queries = anonymize_queries
        self.events: list[UsageEvent] = []

    def add(self, event: UsageEvent) -> None:
        """Buffer one event."""
        self.events.append(event)

    def flush(self) -> None:
        """Write the buffered events (and a search-log row per search); a failure is logged, not raised.

        Accounting must never turn a good answer into an error; a store that cannot take the
        records is failing anyway, and the operation's own error (if any) is the one to show.
        """
        events, self.events = self.events, []
        if not events:
            return
        records = []
        try:
            for event in events:
                metadata = dict(event.metadata)
                query = metadata.pop("query", None)
                if event.operation == "search":
                    self.store.log_search(None if self.anonymize_queries else query, event.items,
                                          event.latency_ms, str(metadata.get("mode", event.model)))
                records.append(UsageEvent(event.operation, event.provider, event.model, event.input_tokens,
                                          event.output_tokens, event.latency_ms, event.items, metadata))
            self.store.record_usage(records)
        except Exception as exc:  # any failure: see the docstring
            logger.warning("could not record %d usage event(s) for tenant %s: %s", len(events),
                           getattr(self.store, "tenant", "?"), exc)

    async def aflush(self) -> None:
        """:meth:`flush` in a worker thread (store writes are blocking)."""
        if self.events:
            await asyncio.to_thread(self.flush)


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


async def metered(recorder: UsageRecorder, stream: AsyncIterator[T]) -> AsyncIterator[T]:
    """Iterate ``stream`` with its usage going to ``recorder``; flushes at the end, also on error or close.

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
        await recorder.aflush()


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
