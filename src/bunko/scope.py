"""A tenant scope: one tenant's store, the layers built over it, and where its usage goes.

Agent memory (:mod:`bunko.memory`) and workflow blocks (:mod:`bunko.blocks`) work inside one tenant
but sit below the engine and never import it: they are handed a :class:`TenantScope`, which
:class:`bunko.engine.Tenant` extends with the operations of the façade. The scope holds the
tenant-bound store and builds what works over one of its collections (index manager, retriever,
generator, pipeline), its conversations, its upload jobs (:mod:`bunko.jobs`) and its
:class:`~bunko.usage.Meter`, from the engine's shared clients and settings (:class:`EngineServices`,
which ``Bunko`` implements).

User scoping is typed: ``for_user(user_id)`` gives the same tenant as one user works in it (an API
key's user, or None for a tenant key; an upload job's), as a :class:`UserScope` the scope carries.
The scope's store acts for that user (``VectorStore.for_user``; a tenant or admin key's for the whole
tenant): on PostgreSQL its transactions carry the user, and row-level security shows it only its own
memories, conversations and search logs and lets it change only its own jobs and usage records. Its
usage records and search logs carry its id (through the meter) and its conversations are kept in its
namespace (through ``Conversations``). Documents and chunks stay the tenant's, shared by its users.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, Self, TypeVar

from .config import DEFAULT_COLLECTION
from .conversations import Conversations
from .generation import Generator
from .indexing import IndexManager
from .jobs import TenantJobs
from .pipeline import RAGPipeline
from .search import Retriever
from .splitters import splitter_spec
from .spool import spool_root
from .stores.service import QuotaStatus, conversation_prefix, service_records
from .types import RecordOwner, SearchHit, UsageEvent
from .usage import Meter, route, store_kind

if TYPE_CHECKING:
    from .config import Settings
    from .llm import LLMProvider
    from .preprocess import Preprocessor
    from .search import SearchCache
    from .splitters import Splitter
    from .stores.base import StoreBackend, VectorStore
    from .usage import UsageWriter


@dataclass(frozen=True, slots=True)
class UserScope:
    """The user a tenant scope works for: ``user_id`` (None for a tenant key without a user); ``admin`` for the
    tenant's admin key, which may change every record of the tenant as a tenant key may."""

    user_id: str | None
    admin: bool = False

    @property
    def record_owner(self) -> RecordOwner:
        """Who writes records (R14) in this scope: its user's own only, unless a tenant or admin key."""
        return RecordOwner(self.user_id, restricted=self.user_id is not None and not self.admin)

    @property
    def conversation_prefix(self) -> str:
        """The namespace of this user's conversations: its own (``u.<user>:``), or the tenant keys' (``t:``)."""
        return conversation_prefix(self.user_id)


class EngineServices(Protocol):
    """What an engine shares with its tenant scopes (``Bunko`` implements it)."""

    settings: Settings
    backend: StoreBackend
    preprocessor: Preprocessor
    splitter: Splitter | None
    splitter_spec: dict[str, Any] | None
    analyzer: str | None
    cache: SearchCache
    usage_writer: UsageWriter

    @property
    def embedder(self) -> Any:
        """The shared embedder."""
        ...

    @property
    def llm(self) -> LLMProvider | None:
        """The shared LLM (None: extractive answers)."""
        ...

    def reranker(self, spec: str) -> Any:
        """The shared reranker ``provider:model``."""
        ...

    def flush_usage(self) -> None:
        """Wait until handed-over usage records are written."""
        ...


E = TypeVar("E", bound=EngineServices, covariant=True)


class TenantScope(Generic[E]):
    """One tenant's store, the layers over it and its meter, with the engine ``E``'s clients (see the module doc).

    ``spool`` is the upload spool folder (default ``[server] spool_dir``); ``user`` the user the scope
    works for (see :meth:`for_user`).
    """

    def __init__(self, engine: E, store: VectorStore, *, spool: Path | None = None,
                 user: UserScope | None = None) -> None:
        self._engine = engine
        self._store = store
        self._spool = spool
        self._user = user
        # Where this scope's usage goes: the tenant's records, with the user's id on each.
        self.meter = Meter(store, engine.usage_writer, user.user_id if user else None,
                           engine.settings.anonymize_search_logs)

    def for_user(self, user_id: str | None, *, admin: bool = False) -> Self:
        """This tenant as one user works in it: an API key's user (None: a tenant key without one), an upload
        job's. Its usage records and search logs carry the user and its conversations are kept in the user's
        namespace (tenant keys share one); its store acts for the user (an admin key's for the tenant), so on
        PostgreSQL row-level security keeps it to that user's per-user rows. Documents are the tenant's.
        Records (R14) it writes are its user's, and it may replace or delete only its user's records unless
        ``admin`` (the tenant's admin key) or without a user."""
        store = self._store.for_user(None if admin else user_id)  # an admin key acts for the whole tenant
        return type(self)(self._engine, store, spool=self._spool, user=UserScope(user_id, admin))

    @property
    def record_owner(self) -> RecordOwner | None:
        """Who writes records (R14) through this scope (None: the tenant itself, unrestricted)."""
        return self._user.record_owner if self._user is not None else None

    @property
    def engine(self) -> E:
        """The engine this scope belongs to."""
        return self._engine

    @property
    def name(self) -> str:
        """The tenant this scope is bound to."""
        return self._store.tenant

    @property
    def store(self) -> VectorStore:
        """The tenant-bound store (for low-level access; ``upsert`` and ``query`` embed for you)."""
        return self._store

    @property
    def jobs(self) -> TenantJobs:
        """This tenant's upload jobs, the rule that deletes them with their data, and erasure (:mod:`bunko.jobs`)."""
        engine = self._engine
        return TenantJobs(service_records(engine.backend), self._store,
                          self._spool or spool_root(engine.settings), flush=engine.flush_usage)

    def quota(self) -> QuotaStatus:
        """This tenant's quotas (set by the operator) beside its usage (:mod:`bunko.stores.quotas`)."""
        return service_records(self._engine.backend).quota_status(self._store)

    def index_manager(self, collection: str = DEFAULT_COLLECTION, *, splitter: str | None = None,
                      analyzer: str | None = None, embedder: Any = None) -> IndexManager:
        """An ``IndexManager`` over one collection (no LLM involved), with the engine's embedder or ``embedder``;
        ``splitter`` and ``analyzer`` name those of a new collection (an existing one must match)."""
        engine = self._engine
        spec = splitter_spec(splitter) if splitter else engine.splitter_spec
        return IndexManager(engine.preprocessor, engine.splitter, engine.embedder if embedder is None else embedder,
                            self._store, collection, splitter=spec, analyzer=analyzer or engine.analyzer)

    def retriever(self, collection: str = DEFAULT_COLLECTION, *, embedder: Any = None) -> Retriever:
        """A ``Retriever`` over one collection with the engine's rerankers, and its embedder and search cache
        (or ``embedder``, uncached)."""
        engine = self._engine
        return Retriever(engine.embedder if embedder is None else embedder, self._store, collection,
                         rerankers=engine.reranker, cache=engine.cache if embedder is None else None)

    def generator(self, *, temperature: float | None = None, max_tokens: int | None = None,
                  system_prompt: str | None = None) -> Generator:
        """A ``Generator`` with the engine's LLM and settings; arguments override them for one call."""
        engine, llm = self._engine, self._engine.settings.llm
        return Generator(engine.llm, system_prompt=system_prompt or llm.system_prompt, embedder=engine.embedder,
                         temperature=llm.temperature if temperature is None else temperature,
                         max_tokens=max_tokens or llm.max_tokens, context_tokens=llm.context_tokens)

    def pipeline(self, collection: str = DEFAULT_COLLECTION, *, splitter: str | None = None,
                 analyzer: str | None = None, generator: Generator | None = None) -> RAGPipeline:
        """A ``RAGPipeline`` over one collection, answering with ``generator`` (default: :meth:`generator`)."""
        return RAGPipeline(self.index_manager(collection, splitter=splitter, analyzer=analyzer),
                           self.retriever(collection), generator or self.generator())

    def delete_records(self, collection: str, ids: Sequence[str]) -> int:
        """Delete records (chunks) of one collection by id (R14); returns how many there were. A missing
        collection raises ``CollectionNotFoundError``, records of another user ``ForbiddenError`` (see
        :meth:`for_user`); the deletion is metered as a ``delete``."""
        started = time.perf_counter()
        self._store.get_collection(collection)
        deleted = self._store.delete(collection, list(ids), owner=self.record_owner)
        route(UsageEvent("delete", store_kind(self._store), items=deleted,
                         latency_ms=(time.perf_counter() - started) * 1000,
                         metadata={"collection": collection, "requested": len(ids)}))
        return deleted

    def records(self, collection: str, ids: Sequence[str]) -> list[SearchHit]:
        """Records (chunks) of one collection by id, in the order asked; unknown ids are left out."""
        return self._store.get_chunks(collection, ids)

    def conversations(self) -> Conversations:
        """This tenant's conversations (in its user's namespace), as questions with a ``conversation_id`` use them."""
        return Conversations(self._store, self._engine.settings.llm.history_turns,
                             prefix=self._user.conversation_prefix if self._user else "")


__all__ = ["EngineServices", "TenantScope", "UserScope"]
