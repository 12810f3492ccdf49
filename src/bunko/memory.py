"""Agent memory (R31): what each user said in earlier sessions, searched by meaning and by keyword.

A tenant keeps named memory stores (the seed's "corpus"; default ``memories``). A memory is a
text with the seed's metadata -- ``user_id``, ``session_id``, ``timestamp``, ``memory_type``
(``dialogue | weakness | success | curriculum``), ``subject`` -- plus free metadata. Memories
live in their tenant like documents (RLS on PostgreSQL) and, inside it, belong to one user: every
read and delete names the user, and search never leaves that user's memories.

    memory = engine.tenant("school").memory
    with memory.session("child-a", "s-1") as session:          # indexed in one batch at the end
        session.add("前回、繰り上がりの足し算で3回つまずいた", memory_type="weakness", subject="math")
    memory.search_memory("繰り上がりの足し算", user_id="child-a")
    # {"memories": [{"content", "metadata": {...}, "relevance_score"}], "query", "total_results", "fallback"}

Search is hybrid by default: cosine over the user's memory vectors and BM25 over their keyword
tokens (the store's analyzer, Japanese-aware) with the same terms, idf and scoring as a collection's
keyword search (:func:`bunko.search.keyword.rank_texts`, statistics of the user's memories alone),
fused by the documents' fusion (:func:`bunko.search.fusion.fuse_keys`, reciprocal ranks with their
default constant and weights), so ``relevance_score`` is the fused score: it orders memories, it is not a
probability. The query is embedded while the user's memories are read. When that semantic leg fails
(embedder down, an error, or slower than ``[memory] semantic_timeout``), the keyword leg answers alone: the
answer says
``"fallback": true``, a warning is logged, and it is counted (``fallback_count()`` in this process;
a ``search`` usage record with model ``memory-keyword-fallback`` per tenant, R35). A search over
``[memory] timeout`` (2 s) raises ``RagSearchTimeoutError``; a named store that does not exist
``RagCorpusNotFoundError``; both are ``RagSearchError`` s.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

import numpy as np

from .embedders import BaseEmbedder, embedder_info
from .errors import (
    ConfigError,
    InvalidMemoryError,
    InvalidMemoryFieldError,
    RagCorpusNotFoundError,
    RagSearchError,
    RagSearchTimeoutError,
)
from .scope import EngineServices, TenantScope
from .search.fusion import DEFAULT_FUSION, fuse_keys
from .search.keyword import rank_texts
from .stores.sql.memory import (
    MemoryStoreInfo,
    MemoryWrite,
    SQLMemories,
    StoredMemory,
    check_embedder,
    rank_vectors,
)
from .sync import sync_form
from .types import UNSTORABLE, EmbedderInfo, UsageEvent, new_id, unstorable_path
from .usage import route, store_kind

logger = logging.getLogger(__name__)

MEMORY_TYPES: tuple[str, ...] = ("dialogue", "weakness", "success", "curriculum")
DEFAULT_MEMORY_TYPE = "dialogue"
DEFAULT_MEMORY_STORE = "memories"
SEARCH_MODES: tuple[str, ...] = ("hybrid", "semantic", "keyword")
MAX_TOP_K = 100
MAX_CONTENT_CHARS = 20_000
_ID_RE = re.compile(r"^[\w][\w.:@\-]{0,199}$")
_USER_RE = re.compile(r"^[\w][\w.@\-]{0,99}$")
_NAME_RE = re.compile(r"^[\w][\w.\-]{0,99}$")
_SUBJECT_MAX = 100

# Memory reads run here (see Memory._search).
_READS = ThreadPoolExecutor(max_workers=8, thread_name_prefix="bunko-memory-read")
_fallbacks = 0
_fallback_lock = threading.Lock()


def fallback_count() -> int:
    """How many memory searches of this process the keyword leg answered alone (R35)."""
    return _fallbacks


def _count_fallback() -> None:
    global _fallbacks
    with _fallback_lock:
        _fallbacks += 1


# -- validation ---------------------------------------------------------------------------------
def check_user(user_id: Any) -> str:
    """A user id as given, or ``InvalidMemoryError`` (1-100 letters, digits, ``_ . @ -``)."""
    if not isinstance(user_id, str) or not _USER_RE.fullmatch(user_id):
        raise InvalidMemoryError(f"invalid user id {user_id!r}: use 1-100 letters, digits, '_', '.', '@' or '-', "
                                 "starting with a letter or digit")
    return user_id


def check_session(session_id: Any) -> str | None:
    """A session id as given (None allowed), or ``InvalidMemoryError``."""
    if session_id is not None and (not isinstance(session_id, str) or not _ID_RE.fullmatch(session_id)):
        raise InvalidMemoryError(f"invalid session id {session_id!r}: use 1-200 letters, digits, '_', '-', '.', "
                                 "':' or '@', starting with a letter or digit")
    return session_id


def check_store_name(name: Any) -> str:
    """A memory store name as given, or ``InvalidMemoryError``."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise InvalidMemoryError(f"invalid memory store name {name!r}: use 1-100 letters, digits, '_', '-' or '.'")
    return name


def _timestamp(value: Any) -> str:
    """An ISO-8601 UTC timestamp (``2026-02-01T10:00:00Z``) from a datetime or ISO text; now if None."""
    if value is None:
        moment = datetime.now(UTC)
    elif isinstance(value, datetime):
        moment = value
    elif isinstance(value, str):
        try:
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            raise InvalidMemoryError(f"timestamp {value!r} is not an ISO-8601 date and time") from None
    else:
        raise InvalidMemoryError(f"timestamp must be ISO-8601 text or a datetime; got {type(value).__name__}")
    moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{moment.microsecond // 1000:03d}Z" if moment.microsecond
                                                   else "Z")


@dataclass(slots=True)
class MemoryRecord:
    """One memory to add: its text and the seed's metadata (user and session come from the call)."""

    content: str
    memory_type: str = DEFAULT_MEMORY_TYPE
    subject: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    timestamp: str | datetime | None = None
    id: str | None = None

    @classmethod
    def build(cls, value: MemoryRecord | str | Mapping[str, Any]) -> MemoryRecord:
        """A record from itself, a text, or a dict with ``content`` and the fields above."""
        if isinstance(value, MemoryRecord):
            return value
        if isinstance(value, str):
            return cls(value)
        if not isinstance(value, Mapping):
            raise InvalidMemoryError(f"a memory is a text or a dict with 'content'; got {type(value).__name__}")
        known = {"content", "memory_type", "subject", "metadata", "timestamp", "id"}
        unknown = sorted(set(value) - known)
        if unknown:
            raise InvalidMemoryError(f"unknown memory field(s): {', '.join(unknown)}; "
                                     f"known: {', '.join(sorted(known))}")
        if "content" not in value:
            raise InvalidMemoryError("a memory needs 'content'")
        return cls(value["content"], value.get("memory_type") or DEFAULT_MEMORY_TYPE, value.get("subject"),
                   dict(value.get("metadata") or {}), value.get("timestamp"), value.get("id"))

    def write(self, user_id: str, session_id: str | None) -> MemoryWrite:
        """The validated row to store."""
        if not isinstance(self.content, str) or not self.content.strip():
            raise InvalidMemoryError("a memory's content must be non-empty text")
        if len(self.content) > MAX_CONTENT_CHARS:
            raise InvalidMemoryError(f"a memory's content is limited to {MAX_CONTENT_CHARS} characters; "
                                     f"got {len(self.content)}")
        if self.memory_type not in MEMORY_TYPES:
            raise InvalidMemoryError(f"unknown memory type {self.memory_type!r}; use one of: {', '.join(MEMORY_TYPES)}")
        subject = self.subject
        if subject is not None and (not isinstance(subject, str) or not 0 < len(subject) <= _SUBJECT_MAX):
            raise InvalidMemoryError(f"a memory's subject must be text of 1-{_SUBJECT_MAX} characters")
        if not isinstance(self.metadata, dict):
            raise InvalidMemoryError("a memory's metadata must be a JSON object")
        if self.id is not None and (not isinstance(self.id, str) or not _ID_RE.fullmatch(self.id)):
            raise InvalidMemoryError(f"invalid memory id {self.id!r}: use 1-200 letters, digits, '_', '-', '.', ':' "
                                     "or '@'")
        where = unstorable_path(self.content, "content") or unstorable_path(subject, "subject") or \
            unstorable_path(self.metadata, "metadata")
        if where is not None:  # no store keeps a NUL or an unpaired surrogate (types.unstorable)
            raise InvalidMemoryFieldError(f"{where}: {UNSTORABLE}", field=where)
        return MemoryWrite(self.id or new_id(), user_id, session_id, self.memory_type, self.subject,
                           _timestamp(self.timestamp), self.content.strip(), dict(self.metadata))


def memory_records(store: Any) -> SQLMemories:
    """The agent memories of a tenant-bound store (its backend must keep them)."""
    opener = getattr(store, "memories", None)
    if opener is None:
        raise ConfigError(f"the store backend of tenant {store.tenant!r} keeps no agent memories")
    records = opener()
    assert isinstance(records, SQLMemories)
    return records


def empty_result(query: str, *, fallback: bool = False) -> dict[str, Any]:
    """The seed's result shape with no memories."""
    return {"memories": [], "query": query, "total_results": 0, "fallback": fallback}


# -- the tenant's memory ------------------------------------------------------------------------------
class Memory:
    """One memory store of a tenant: ``tenant.memory`` (the default store) or ``tenant.memory.store(name)``.

    It works through the tenant's :class:`~bunko.scope.TenantScope`: its store, the engine's embedder and
    settings, and its meter (usage of a user-scoped tenant carries the user).
    """

    def __init__(self, tenant: TenantScope[EngineServices], name: str = DEFAULT_MEMORY_STORE) -> None:
        self._tenant = tenant
        self.name = check_store_name(name)

    def __repr__(self) -> str:
        return f"Memory(tenant={self._tenant.name!r}, store={self.name!r})"

    def store(self, name: str) -> Memory:
        """Another memory store of the same tenant."""
        return Memory(self._tenant, name)

    @property
    def _records(self) -> SQLMemories:
        return memory_records(self._tenant.store)

    def stores(self) -> list[MemoryStoreInfo]:
        """This tenant's memory stores."""
        return self._records.list_stores()

    def info(self) -> MemoryStoreInfo:
        """This memory store, or ``RagCorpusNotFoundError``."""
        return self._records.get_store(self.name)

    # -- adding -----------------------------------------------------------------------------------
    async def aadd(self, records: Iterable[MemoryRecord | str | Mapping[str, Any]] | str, *, user_id: str,
                   session_id: str | None = None) -> list[str]:
        """Add memories of one user (and session) in one batch: one embedding request, one transaction.

        A record is a text, a :class:`MemoryRecord` or a dict (``content``, ``memory_type``,
        ``subject``, ``metadata``, ``timestamp``, ``id``). The store is created on first use for
        the engine's embedder. An ``id`` given again for the same user replaces that memory.
        """
        user_id = check_user(user_id)
        session_id = check_session(session_id)
        items = [MemoryRecord.build(r) for r in ([records] if isinstance(records, str) else records)]
        writes = [r.write(user_id, session_id) for r in items]
        if not writes:
            return []
        if len({w.id for w in writes}) != len(writes):
            raise InvalidMemoryError("the same memory id was given twice in one batch")
        tenant = self._tenant

        async def work() -> list[str]:
            embedder = tenant.engine.embedder
            info = embedder_info(embedder)
            records_ = self._records
            await asyncio.to_thread(records_.ensure_store, self.name, info, tenant.engine.analyzer)
            texts = [w.content for w in writes]
            if isinstance(embedder, BaseEmbedder):
                vectors = await embedder.embed_array(texts)
            else:
                vectors = np.asarray(await embedder.embed_batch(texts), dtype=np.float32)
            started = time.perf_counter()
            ids = await asyncio.to_thread(records_.add, self.name, writes, vectors)
            route(UsageEvent("upsert", store_kind(tenant.store), "memory", latency_ms=(time.perf_counter() - started)
                             * 1000, items=len(ids), metadata={"memory_store": self.name}))
            return ids

        return await tenant.meter.run(work())

    add = sync_form(aadd)

    def session(self, user_id: str, session_id: str | None = None) -> MemorySession:
        """A session that collects memories and indexes them in one batch when it ends.

        ``with memory.session(user, sid) as s: s.add(...)`` (or ``async with``) ends it on a clean exit;
        on an exception nothing is indexed. ``end()`` / ``aend()`` end it by hand.
        """
        return MemorySession(self, check_user(user_id), check_session(session_id) or new_id())

    # -- searching ---------------------------------------------------------------------------------
    async def asearch_memory(self, query: str, user_id: str, top_k: int = 5, *, mode: str = "hybrid",
                             timeout: float | None = None) -> dict[str, Any]:
        """The seed's ``search_memory``: the user's ``top_k`` memories for ``query``, best first.

        Returns ``{"memories": [{"content", "metadata", "relevance_score"}], "query", "total_results",
        "fallback"}``. ``mode`` is ``hybrid`` (default), ``semantic`` or ``keyword``; ``timeout``
        overrides ``[memory] timeout`` for this call.
        """
        if not isinstance(query, str) or not query.strip():
            raise InvalidMemoryError("the memory search query must be non-empty text")
        user_id = check_user(user_id)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= MAX_TOP_K:
            raise InvalidMemoryError(f"top_k must be an integer from 1 to {MAX_TOP_K}; got {top_k!r}")
        if mode not in SEARCH_MODES:
            raise InvalidMemoryError(f"unknown memory search mode {mode!r}; use one of: {', '.join(SEARCH_MODES)}")
        settings = self._tenant.engine.settings.memory
        budget = settings.timeout if timeout is None else float(timeout)
        if not budget > 0:
            raise InvalidMemoryError(f"the memory search timeout must be above 0 seconds; got {timeout!r}")
        semantic_budget = min(settings.semantic_timeout, budget)
        started = time.perf_counter()
        try:
            return await self._tenant.meter.run(asyncio.wait_for(
                self._search(query, user_id, top_k, mode, started, semantic_budget), budget))
        except TimeoutError:
            raise RagSearchTimeoutError(
                f"memory search in store {self.name!r} took longer than its {budget:g} s budget") from None

    search_memory = sync_form(asearch_memory)

    async def _query_vector(self, query: str) -> Any:
        embedder = self._tenant.engine.embedder
        if isinstance(embedder, BaseEmbedder):
            return (await embedder.embed_array([query], query=True))[0]
        embed_query = getattr(embedder, "embed_query", None)
        return await (embed_query(query) if embed_query is not None else embedder.embed(query))

    async def _search(self, query: str, user_id: str, top_k: int, mode: str, started: float,
                      semantic_budget: float) -> dict[str, Any]:
        records = self._records
        semantic = mode != "keyword"
        embedding = asyncio.ensure_future(self._query_vector(query)) if semantic else None
        try:
            try:
                # Not the loop's default executor: a read that outlives the budget must not hold up the
                # caller (asyncio.run waits for the default executor's threads before it returns).
                read = functools.partial(self._read, records, user_id, semantic)
                memories, vectors, info = await asyncio.get_running_loop().run_in_executor(_READS, read)
            except RagCorpusNotFoundError:
                if self.name != DEFAULT_MEMORY_STORE:
                    raise
                return empty_result(query)  # the default store exists once something was added
            vector: Any = None
            reason: str | None = None
            if embedding is not None:
                # Provider and model here (the dimension is checked against the query vector: reading it
                # from a hosted embedder that has not answered yet would call it).
                _same_embedder(info, self._tenant.engine.embedder)
                try:
                    left = semantic_budget - (time.perf_counter() - started)
                    vector = await asyncio.wait_for(asyncio.shield(embedding), max(left, 0.0))
                except TimeoutError:
                    reason = f"the query embedding took longer than {semantic_budget:g} s"
                except Exception as exc:  # embedder down or failing: the keyword leg answers
                    reason = f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"
        finally:
            if embedding is not None:
                if not embedding.done():
                    embedding.cancel()
                elif not embedding.cancelled():
                    embedding.exception()  # retrieved: a failure already handled is not logged again at exit
        ranked = await asyncio.to_thread(_rank, memories, vectors, vector, info.analyzer, query, top_k,
                                         "keyword" if reason is not None else mode)
        fallback = reason is not None
        used = "keyword-fallback" if fallback else mode
        if fallback:
            _count_fallback()
            logger.warning("memory search of tenant %s (store %s) fell back to keyword search: %s",
                           self._tenant.name, self.name, reason)
        elapsed = (time.perf_counter() - started) * 1000
        route(UsageEvent("search", store_kind(self._tenant.store), f"memory-{used}", latency_ms=elapsed,
                         items=len(ranked), metadata={"query": query, "mode": f"memory-{used}",
                                                      "memory_store": self.name, "fallback": fallback,
                                                      **({"fallback_reason": reason} if reason else {})}))
        return {"memories": [memories[i].to_dict(score) for i, score in ranked], "query": query,
                "total_results": len(ranked), "fallback": fallback}

    def _read(self, records: SQLMemories, user_id: str,
              vectors: bool) -> tuple[list[StoredMemory], np.ndarray, MemoryStoreInfo]:
        info = records.get_store(self.name)
        memories, matrix = records.user_memories(self.name, user_id, vectors=vectors)
        return memories, matrix, info

    # -- listing and deletion ------------------------------------------------------------------------
    def list(self, user_id: str, *, session_id: str | None = None, limit: int | None = 100) -> list[dict[str, Any]]:
        """One user's memories in this store (of one session, if given), oldest first."""
        user_id, session_id = check_user(user_id), check_session(session_id)
        try:
            rows = self._records.list_memories(user_id, store=self.name, session_id=session_id, limit=limit)
        except RagCorpusNotFoundError:
            if self.name != DEFAULT_MEMORY_STORE:
                raise
            return []
        return [m.to_dict() for m in rows]

    def delete(self, user_id: str, *, session_id: str | None = None, memory_ids: Sequence[str] | None = None,
               all_stores: bool = False) -> int:
        """Delete one user's memories (of a session, or these ids; in every store with ``all_stores``)."""
        user_id, session_id = check_user(user_id), check_session(session_id)
        try:
            return self._records.delete(user_id, store=None if all_stores else self.name, session_id=session_id,
                                        memory_ids=memory_ids)
        except RagCorpusNotFoundError:
            if self.name != DEFAULT_MEMORY_STORE:
                raise
            return 0

    def delete_user(self, user_id: str) -> int:
        """Delete every memory of a user in every memory store of the tenant."""
        return self.delete(user_id, all_stores=True)

    def delete_session(self, user_id: str, session_id: str) -> int:
        """Delete the memories of one session of a user (in this store)."""
        if session_id is None:
            raise InvalidMemoryError("name the session to delete")
        return self.delete(user_id, session_id=session_id)


def _same_embedder(info: MemoryStoreInfo, embedder: Any) -> None:
    provider, model = str(getattr(embedder, "provider", "")), str(getattr(embedder, "model", ""))
    if (provider, model) != (info.embedding_provider, info.embedding_model):
        check_embedder(info, EmbedderInfo(provider, model, info.dimension))


# Memories fuse as documents do: the same method, constant and weights.
MEMORY_FUSION = DEFAULT_FUSION


def _rank(memories: list[StoredMemory], vectors: np.ndarray, query_vector: Any, analyzer: str, query: str,
          top_k: int, mode: str) -> list[tuple[int, float]]:
    """(position, fused score) of the best ``top_k`` memories for the legs of ``mode`` (one leg alone: its
    reciprocal ranks)."""
    if not memories:
        return []
    n = len(memories)
    legs: list[tuple[str, float, list[int], list[float]]] = []
    if mode in ("hybrid", "keyword"):
        keyword = rank_texts(analyzer, query, [m.terms for m in memories], n)
        legs.append(("keyword", MEMORY_FUSION.keyword_weight if mode == "hybrid" else 1.0, keyword.keys.tolist(),
                     keyword.scores.tolist()))
    if mode in ("hybrid", "semantic"):
        semantic = rank_vectors(vectors, query_vector, n)
        legs.append(("vector", MEMORY_FUSION.vector_weight if mode == "hybrid" else 1.0, [i for i, _ in semantic],
                     [s for _, s in semantic]))
    return [(int(key), float(score)) for key, score, _ in fuse_keys(legs, top_k, MEMORY_FUSION)]


class MemorySession:
    """Memories of one user's session, collected as it runs and indexed in one batch when it ends."""

    def __init__(self, memory: Memory, user_id: str, session_id: str) -> None:
        self.memory = memory
        self.user_id = user_id
        self.session_id = session_id
        self.pending: list[MemoryRecord] = []
        self.ended = False
        self.ids: list[str] = []

    def add(self, content: str | MemoryRecord | Mapping[str, Any], *, memory_type: str | None = None,
            subject: str | None = None, metadata: Mapping[str, Any] | None = None,
            timestamp: str | datetime | None = None) -> MemoryRecord:
        """Collect one event of the session (checked now, indexed when the session ends)."""
        if self.ended:
            raise InvalidMemoryError(f"session {self.session_id!r} has ended; start a new one")
        record = MemoryRecord.build(content)
        if memory_type is not None:
            record.memory_type = memory_type
        if subject is not None:
            record.subject = subject
        if metadata is not None:
            record.metadata = {**record.metadata, **metadata}
        if record.timestamp is None:
            record.timestamp = timestamp or datetime.now(UTC)
        record.write(self.user_id, self.session_id)  # validate now, not at the end
        self.pending.append(record)
        return record

    async def aend(self) -> list[str]:
        """Index the collected memories in one batch; returns their ids (ending twice is refused)."""
        if self.ended:
            raise InvalidMemoryError(f"session {self.session_id!r} has already ended")
        self.ended = True
        self.ids = await self.memory.aadd(self.pending, user_id=self.user_id, session_id=self.session_id)
        self.pending = []
        return self.ids

    end = sync_form(aend)

    def __enter__(self) -> MemorySession:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if kind is None and not self.ended:
            self.end()

    async def __aenter__(self) -> MemorySession:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        if kind is None and not self.ended:
            await self.aend()


__all__ = ["DEFAULT_MEMORY_STORE", "MEMORY_TYPES", "SEARCH_MODES", "Memory", "MemoryRecord", "MemorySession",
           "RagCorpusNotFoundError", "RagSearchError", "RagSearchTimeoutError", "check_user", "empty_result",
           "fallback_count", "memory_records"]
