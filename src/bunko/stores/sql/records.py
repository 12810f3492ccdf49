"""The records a tenant keeps beside its documents, over any SQL store: usage and search logs (R13,
R33), conversations, failed ingests and agent memories -- one repository each, bound to the store's
tenant as the store is (every statement runs in its tenant-scoped session and filters by the tenant's
row id), reached from the store: ``store.usage``, ``store.conversations``, ``store.failures``,
``store.memories()``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ...types import ConversationTurn, IngestFailure, UsageEvent, UsageTotal
from ..base import add_usage, check_conversation_id, check_turns, utc
from .memory import SQLMemories

if TYPE_CHECKING:
    from .store import SQLStore

# A search-log row: (query, or None when anonymised; result count; milliseconds; search type).
SearchRow = tuple[str | None, int, float, str]


class SQLUsageRecords:
    """A tenant's usage records and search logs."""

    def __init__(self, store: SQLStore) -> None:
        self._store = store

    def record(self, events: Sequence[UsageEvent], searches: Sequence[SearchRow] = (), *,
               user_id: str | None = None) -> None:
        """Store metered operations and search-log rows together, in one transaction (for ``user_id``)."""
        items, rows = list(events), list(searches)
        if not items and not rows:
            return
        store, d = self._store, self._store.dialect
        with store.session(create=True) as (conn, tenant_pk):
            store.run_many(conn, "INSERT INTO usage_records (tenant_id, user_id, operation, provider, model, "
                                 "input_tokens, output_tokens, latency_ms, items, metadata) "
                                 "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           [(tenant_pk, user_id, e.operation, e.provider, e.model, int(e.input_tokens),
                             int(e.output_tokens), float(e.latency_ms), int(e.items), d.json_in(e.metadata))
                            for e in items])
            store.run_many(conn, "INSERT INTO search_logs (tenant_id, user_id, query, result_count, search_time_ms, "
                                 "search_type) VALUES (?, ?, ?, ?, ?, ?)",
                           [(tenant_pk, user_id, query, int(count), float(ms), kind)
                            for query, count, ms, kind in rows])

    def summary(self, since: datetime | None = None) -> list[UsageTotal]:
        """The tenant's usage grouped by operation, provider and model (since ``since`` if given)."""
        store = self._store
        with store.session() as (conn, tenant_pk):
            if tenant_pk is None:
                return []
            where, params = "tenant_id = ?", [tenant_pk]
            if since is not None:
                where += " AND created_at >= ?"
                params.append(store.dialect.time_in(utc(since)))
            rows = store.run(conn, "SELECT operation, provider, model, count(*), sum(input_tokens), "
                                   f"sum(output_tokens), sum(items), sum(latency_ms) FROM usage_records WHERE {where} "
                                   "GROUP BY operation, provider, model ORDER BY operation, provider, model",
                             params).fetchall()
        totals: dict[tuple[str, str, str], UsageTotal] = {}
        for row in rows:
            add_usage(totals, row)
        return list(totals.values())

    def searches(self, limit: int = 100, *, user_id: str | None = None) -> list[dict[str, Any]]:
        """The tenant's latest searches (only ``user_id``'s when given), newest first."""
        store = self._store
        with store.session() as (conn, tenant_pk):
            if tenant_pk is None:
                return []
            mine, params = ("", ()) if user_id is None else (" AND user_id = ?", (user_id,))
            rows = store.run(conn, "SELECT query, result_count, search_time_ms, search_type, created_at "
                                   f"FROM search_logs WHERE tenant_id = ?{mine} ORDER BY id DESC LIMIT ?",
                             (tenant_pk, *params, int(limit))).fetchall()
        return [{"query": r[0], "result_count": r[1], "search_time_ms": r[2], "search_type": r[3],
                 "created_at": store.dialect.time_out(r[4])} for r in rows]


class SQLConversations:
    """A tenant's conversations: turns by conversation id."""

    def __init__(self, store: SQLStore) -> None:
        self._store = store

    def append(self, conversation_id: str, turns: Sequence[ConversationTurn]) -> None:
        """Append turns to a conversation (created on first use)."""
        check_conversation_id(conversation_id)
        items = check_turns(turns)
        if not items:
            return
        store = self._store
        with store.session(create=True) as (conn, tenant_pk):
            store.run_many(conn, "INSERT INTO conversation_turns (tenant_id, conversation_id, role, content, metadata) "
                                 "VALUES (?, ?, ?, ?, ?)",
                           [(tenant_pk, conversation_id, t.role, t.content, store.dialect.json_in(t.metadata))
                            for t in items])

    def turns(self, conversation_id: str, limit: int | None = None) -> list[ConversationTurn]:
        """The last ``limit`` turns (all if None) of a conversation, oldest first; [] if it does not exist."""
        check_conversation_id(conversation_id)
        store, d = self._store, self._store.dialect
        with store.session() as (conn, tenant_pk):
            if tenant_pk is None:
                return []
            rows = store.run(conn, "SELECT role, content, metadata, created_at FROM conversation_turns "
                                   "WHERE tenant_id = ? AND conversation_id = ? ORDER BY id DESC LIMIT ?",
                             (tenant_pk, conversation_id, d.limit(limit))).fetchall()
        return [ConversationTurn(r[0], r[1], d.json_out(r[2]), d.time_out(r[3])) for r in reversed(rows)]

    def ids(self) -> list[str]:
        """The ids of the tenant's conversations, oldest first."""
        store = self._store
        with store.session() as (conn, tenant_pk):
            if tenant_pk is None:
                return []
            rows = store.run(conn, "SELECT conversation_id, min(id) AS first FROM conversation_turns "
                                   "WHERE tenant_id = ? GROUP BY conversation_id ORDER BY first",
                             (tenant_pk,)).fetchall()
        return [r[0] for r in rows]

    def delete(self, conversation_id: str) -> int:
        """Delete a conversation; returns how many turns it had."""
        check_conversation_id(conversation_id)
        store = self._store
        with store.session(write=True) as (conn, tenant_pk):
            if tenant_pk is None:
                return 0
            return int(store.run(conn, "DELETE FROM conversation_turns WHERE tenant_id = ? AND conversation_id = ?",
                                 (tenant_pk, conversation_id)).rowcount)


class SQLIngestFailures:
    """The sources of a tenant's collections whose last ingest failed, with the reason."""

    def __init__(self, store: SQLStore) -> None:
        self._store = store

    def record(self, collection: str, failed: Sequence[IngestFailure], succeeded: Sequence[str] = ()) -> None:
        """Remember the sources of ``collection`` whose ingest failed (again: one more attempt, the latest
        reason) and forget those in ``succeeded``, in one transaction."""
        if not failed and not succeeded:
            return
        store, d = self._store, self._store.dialect
        with store.session(create=bool(failed), write=True) as (conn, tenant_pk):
            if tenant_pk is None:
                return
            for start in range(0, len(succeeded), 1000):
                listed, params = d.any("source", [str(s) for s in succeeded[start:start + 1000]])
                store.run(conn, f"DELETE FROM ingest_failures WHERE tenant_id = ? AND collection = ? AND {listed}",
                          (tenant_pk, collection, *params))
            store.run_many(conn, "INSERT INTO ingest_failures (tenant_id, collection, source, error_type, error_code, "
                                 "message) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant_id, collection, source) "
                                 "DO UPDATE SET error_type = excluded.error_type, error_code = excluded.error_code, "
                                 "message = excluded.message, attempts = ingest_failures.attempts + 1, "
                                 "failed_at = {now}",
                           [(tenant_pk, collection, f.source, f.error_type, f.error_code, f.message) for f in failed])

    def list(self, collection: str | None = None) -> list[IngestFailure]:
        """The sources whose last ingest failed (in ``collection``, or in any), latest failure first."""
        store = self._store
        with store.session() as (conn, tenant_pk):
            if tenant_pk is None:
                return []
            where, params = "tenant_id = ?", [tenant_pk, *([] if collection is None else [collection])]
            if collection is not None:
                where += " AND collection = ?"
            rows = store.run(conn, "SELECT collection, source, error_type, error_code, message, attempts, "
                                   f"first_failed_at, failed_at FROM ingest_failures WHERE {where} "
                                   "ORDER BY failed_at DESC, collection, source", params).fetchall()
        t = store.dialect.time_out
        return [IngestFailure(r[0], r[1], r[2], r[3], r[4], int(r[5]), t(r[6]), t(r[7])) for r in rows]


class TenantRecords:
    """The record repositories of a tenant-bound SQL store (a store class mixes this in)."""

    @property
    def usage(self) -> SQLUsageRecords:
        """Usage records and search logs (R13, R33)."""
        return SQLUsageRecords(self)  # type: ignore[arg-type]

    @property
    def conversations(self) -> SQLConversations:
        """Conversations, turn by turn."""
        return SQLConversations(self)  # type: ignore[arg-type]

    @property
    def failures(self) -> SQLIngestFailures:
        """Sources whose last ingest failed."""
        return SQLIngestFailures(self)  # type: ignore[arg-type]

    def memories(self) -> SQLMemories:
        """Agent memories (:mod:`bunko.stores.sql.memory`)."""
        return SQLMemories(self)  # type: ignore[arg-type]


__all__ = ["SQLConversations", "SQLIngestFailures", "SQLUsageRecords", "SearchRow", "TenantRecords"]
