"""Agent memories in a SQL store, written once for every backend (see :mod:`bunko.memory`).

Two tables per database: ``memory_stores`` (a named store per tenant, fixing the embedder and the
keyword analyzer of its memories) and ``memories`` (one row per memory: its user, session, type,
subject, time, content, free metadata, the analyzer's tokens and a normalised float32 vector).

Isolation: every statement runs in the tenant store's own scoped transaction and filters by the
tenant's row id (and, on PostgreSQL, row-level security checks it again); inside a tenant every
read and delete also names the user, so one user never sees another's memories, and runs in a
transaction acting for that user (on PostgreSQL, row-level security checks the user too: m022).

Ranking is the search layer's (:mod:`bunko.memory`, :func:`bunko.search.keyword.rank_texts`), over one
user's memories only: exact cosine over their vectors, and BM25 over their tokens with statistics of
that user's memories alone (so scores say nothing about other users' data). One user's memories are
few (hundreds to thousands), so one indexed read of them answers both legs; see
``benchmarks/bench_memory.py`` for the figures.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ...analysis import get_analyzer
from ...errors import EmbedderMismatchError, RagCorpusNotFoundError, VectorStoreError
from ...types import EmbedderInfo

if TYPE_CHECKING:
    from .store import SQLStore


_STORE_COLUMNS = "id, name, embedding_provider, embedding_model, dimension, analyzer, created_at"
_MEMORY_COLUMNS = "m.id, m.uid, m.user_id, m.session_id, m.memory_type, m.subject, m.occurred_at, m.content, m.metadata"


@dataclass(frozen=True, slots=True)
class MemoryStoreInfo:
    """A named memory store of a tenant: the embedder and analyzer its memories were written with."""

    name: str
    embedding_provider: str
    embedding_model: str
    dimension: int
    analyzer: str
    created_at: str

    @property
    def embedder(self) -> EmbedderInfo:
        """The embedder the store's memories were written with."""
        return EmbedderInfo(self.embedding_provider, self.embedding_model, self.dimension)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"name": self.name, "embedder": f"{self.embedding_provider}:{self.embedding_model}",
                "dimension": self.dimension, "analyzer": self.analyzer, "created_at": self.created_at}


@dataclass(slots=True)
class MemoryWrite:
    """One memory to store (validated by :mod:`bunko.memory`); the vector travels beside it."""

    id: str
    user_id: str
    session_id: str | None
    memory_type: str
    subject: str | None
    timestamp: str
    content: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class StoredMemory(MemoryWrite):
    """A memory as read back (its row id in ``pk``), with the analyzer's tokens when they were asked for."""

    pk: int = 0
    terms: list[str] = field(default_factory=list)

    def to_dict(self, relevance_score: float | None = None) -> dict[str, Any]:
        """The seed's memory shape: ``content``, ``metadata`` (its five keys first), ``relevance_score``."""
        metadata = {"user_id": self.user_id, "session_id": self.session_id, "timestamp": self.timestamp,
                    "memory_type": self.memory_type, "subject": self.subject}
        for key, value in self.metadata.items():
            metadata.setdefault(key, value)
        metadata["memory_id"] = self.id
        item: dict[str, Any] = {"content": self.content, "metadata": metadata}
        if relevance_score is not None:
            item["relevance_score"] = round(float(relevance_score), 4)
        return item


class SQLMemories:
    """The memories of one tenant in a SQL store; every method that reads or deletes names the user."""

    def __init__(self, store: SQLStore) -> None:
        self._store = store
        self._d = store.dialect

    @property
    def tenant(self) -> str:
        """The tenant these memories belong to."""
        return self._store.tenant

    # -- memory stores --------------------------------------------------------------------------
    def _store_info(self, row: Sequence[Any]) -> MemoryStoreInfo:
        return MemoryStoreInfo(row[1], row[2], row[3], int(row[4]), row[5], self._d.time_out(row[6]))

    def _store_row(self, conn: Any, tenant_pk: int | None, name: str) -> Any:
        row = None
        if tenant_pk is not None:
            row = self._store.run(conn, f"SELECT {_STORE_COLUMNS} FROM memory_stores WHERE tenant_id = ? AND name = ?",
                                  (tenant_pk, name)).fetchone()
        if row is None:
            raise RagCorpusNotFoundError(f"memory store {name!r} does not exist in tenant {self.tenant!r}")
        return row

    def ensure_store(self, name: str, embedder: EmbedderInfo, analyzer: str | None = None) -> MemoryStoreInfo:
        """The memory store ``name``, created for this embedder and analyzer if missing; another embedder is refused."""
        analyzer_name = get_analyzer(analyzer).name
        with self._store.session(create=True) as (conn, tenant_pk):
            self._store.run(conn, "INSERT INTO memory_stores (tenant_id, name, embedding_provider, embedding_model, "
                                  "dimension, analyzer) VALUES (?, ?, ?, ?, ?, ?) "
                                  "ON CONFLICT (tenant_id, name) DO NOTHING",
                            (tenant_pk, name, embedder.provider, embedder.model, embedder.dimension, analyzer_name))
            info = self._store_info(self._store_row(conn, tenant_pk, name))
        check_embedder(info, embedder)
        return info

    def get_store(self, name: str) -> MemoryStoreInfo:
        """The memory store ``name``, or ``RagCorpusNotFoundError``."""
        with self._store.session() as (conn, tenant_pk):
            return self._store_info(self._store_row(conn, tenant_pk, name))

    def list_stores(self) -> list[MemoryStoreInfo]:
        """This tenant's memory stores, by name."""
        with self._store.session() as (conn, tenant_pk):
            if tenant_pk is None:
                return []
            rows = self._store.run(conn, f"SELECT {_STORE_COLUMNS} FROM memory_stores WHERE tenant_id = ? "
                                         "ORDER BY name", (tenant_pk,)).fetchall()
        return [self._store_info(r) for r in rows]

    # -- writes -----------------------------------------------------------------------------------
    def add(self, store: str, memories: Sequence[MemoryWrite], vectors: Any) -> list[str]:
        """Store memories with their vectors in one transaction; a memory id given again for the same
        user replaces that memory. Returns the ids."""
        items = list(memories)
        if not items:
            return []
        matrix = np.asarray(vectors, dtype=np.float32)
        if matrix.ndim != 2 or matrix.shape[0] != len(items):
            raise VectorStoreError(f"{len(items)} memories but vectors of shape {matrix.shape}")
        if not np.all(np.isfinite(matrix)):
            raise VectorStoreError("vectors contain NaN or infinite values")
        # Rows already of unit length are kept as they are: normalising them again moves the last bits, so
        # a memory exported and imported would not come back bit for bit.
        norms = np.linalg.norm(matrix.astype(np.float64), axis=1, keepdims=True)
        norms = np.where((norms == 0) | (np.abs(norms - 1.0) <= 1e-5), 1.0, norms)
        matrix = (matrix / norms).astype(np.float32)
        with self._store.session() as (conn, tenant_pk):
            info = self._store_info(self._store_row(conn, tenant_pk, store))
        if matrix.shape[1] != info.dimension:
            raise EmbedderMismatchError(f"memory store {store!r} holds {info.dimension}-dimensional vectors; "
                                        f"got {matrix.shape[1]} dimensions")
        analyzer = get_analyzer(info.analyzer)
        terms = [" ".join(analyzer.index_tokens(m.content)) for m in items]  # analyzed before the write lock
        run = self._store.run
        users = {m.user_id for m in items}
        # One user's memories (a session, an API key's add) are written acting for that user; several users'
        # at once (an import) for the tenant.
        with self._store.session(write=True, user=next(iter(users)) if len(users) == 1 else None) as (conn,
                                                                                                     tenant_pk):
            store_pk = int(self._store_row(conn, tenant_pk, store)[0])
            by_user: dict[str, list[str]] = {}
            for m in items:
                by_user.setdefault(m.user_id, []).append(m.id)
            for user_id, ids in by_user.items():
                listed, params = self._d.any("uid", ids)
                run(conn, f"DELETE FROM memories WHERE tenant_id = ? AND store_id = ? AND user_id = ? AND {listed}",
                    (tenant_pk, store_pk, user_id, *params))
            self._store.run_many(
                conn, "INSERT INTO memories (uid, tenant_id, store_id, user_id, session_id, memory_type, subject, "
                      "occurred_at, content, metadata, terms, embedding) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [(m.id, tenant_pk, store_pk, m.user_id, m.session_id, m.memory_type, m.subject, m.timestamp, m.content,
                  self._d.json_in(m.metadata), terms[i], matrix[i].tobytes()) for i, m in enumerate(items)])
        return [m.id for m in items]

    # -- reads ------------------------------------------------------------------------------------
    def _memory(self, row: Sequence[Any], terms: str | None = None) -> StoredMemory:
        return StoredMemory(row[1], row[2], row[3], row[4], row[5], row[6], row[7], self._d.json_out(row[8]),
                            pk=int(row[0]), terms=terms.split(" ") if terms else [])

    def user_memories(self, store: str, user_id: str, *, vectors: bool = True) -> tuple[list[StoredMemory], np.ndarray]:
        """All of one user's memories in ``store`` with their tokens, and their vectors (one row each,
        normalised; an empty matrix when ``vectors`` is False). ``RagCorpusNotFoundError`` if the store is missing."""
        extra = ", m.terms, m.embedding" if vectors else ", m.terms"
        with self._store.session(user=user_id) as (conn, tenant_pk):
            row = self._store_row(conn, tenant_pk, store)
            info, store_pk = self._store_info(row), int(row[0])
            rows = self._store.run(conn, f"SELECT {_MEMORY_COLUMNS}{extra} FROM memories m WHERE m.tenant_id = ? "
                                         "AND m.user_id = ? AND m.store_id = ? ORDER BY m.id",
                                   (tenant_pk, user_id, store_pk)).fetchall()
        memories = [self._memory(r, r[9]) for r in rows]
        if not vectors or not rows:
            return memories, np.zeros((0, info.dimension), dtype=np.float32)
        blob = b"".join(bytes(r[10]) for r in rows)
        return memories, np.frombuffer(blob, dtype=np.float32).reshape(len(rows), info.dimension)

    def user_ids(self, store: str) -> list[str]:
        """The users who have memories in ``store``, sorted: for tenant-wide work (exports), never for search."""
        with self._store.session() as (conn, tenant_pk):
            store_pk = int(self._store_row(conn, tenant_pk, store)[0])
            rows = self._store.run(conn, "SELECT DISTINCT user_id FROM memories WHERE tenant_id = ? AND store_id = ? "
                                         "ORDER BY user_id", (tenant_pk, store_pk)).fetchall()
        return [r[0] for r in rows]

    def list_memories(self, user_id: str, *, store: str | None = None, session_id: str | None = None,
             limit: int | None = None) -> list[StoredMemory]:
        """One user's memories (of one store and session, if given), oldest first."""
        where, params = "m.tenant_id = ? AND m.user_id = ?", [user_id]  # type: tuple[str, list[Any]]
        with self._store.session(user=user_id) as (conn, tenant_pk):
            if tenant_pk is None:
                return []
            params.insert(0, tenant_pk)
            if session_id is not None:
                where += " AND m.session_id = ?"
                params.append(session_id)
            if store is not None:
                where += " AND m.store_id = ?"
                params.append(int(self._store_row(conn, tenant_pk, store)[0]))
            rows = self._store.run(conn, f"SELECT {_MEMORY_COLUMNS} FROM memories m WHERE {where} "
                                         "ORDER BY m.occurred_at, m.id LIMIT ?",
                                   (*params, self._d.limit(limit))).fetchall()
        return [self._memory(r) for r in rows]

    # -- deletion ---------------------------------------------------------------------------------
    def delete(self, user_id: str, *, store: str | None = None, session_id: str | None = None,
               memory_ids: Sequence[str] | None = None) -> int:
        """Delete one user's memories: all of them, or those of a session, or these ids (in ``store`` if
        given, else in every store). Returns how many there were."""
        if memory_ids is not None and not memory_ids:
            return 0
        where, params = "tenant_id = ? AND user_id = ?", [user_id]  # type: tuple[str, list[Any]]
        with self._store.session(write=True, user=user_id) as (conn, tenant_pk):
            if tenant_pk is None:
                return 0
            params.insert(0, tenant_pk)
            if store is not None:
                where += " AND store_id = ?"
                params.append(int(self._store_row(conn, tenant_pk, store)[0]))
            if session_id is not None:
                where += " AND session_id = ?"
                params.append(session_id)
            if memory_ids is not None:
                listed, values = self._d.any("uid", [str(i) for i in memory_ids])
                where += f" AND {listed}"
                params.extend(values)
            return int(self._store.run(conn, f"DELETE FROM memories WHERE {where}", params).rowcount)

    def drop_store(self, name: str) -> int:
        """Delete one memory store with every user's memories in it; returns how many memories there were."""
        with self._store.session(write=True) as (conn, tenant_pk):
            if tenant_pk is None:
                return 0
            row = self._store.run(conn, "SELECT id FROM memory_stores WHERE tenant_id = ? AND name = ?",
                                  (tenant_pk, name)).fetchone()
            if row is None:
                return 0
            count = int(self._store.run(conn, "SELECT count(*) FROM memories WHERE tenant_id = ? AND store_id = ?",
                                        (tenant_pk, row[0])).fetchone()[0])
            self._store.run(conn, "DELETE FROM memories WHERE tenant_id = ? AND store_id = ?", (tenant_pk, row[0]))
            self._store.run(conn, "DELETE FROM memory_stores WHERE tenant_id = ? AND id = ?", (tenant_pk, row[0]))
        return count

    def erase_tenant(self) -> int:
        """Delete every memory store and memory of this tenant; returns how many memories there were."""
        with self._store.session(write=True) as (conn, tenant_pk):
            if tenant_pk is None:
                return 0
            count = int(self._store.run(conn, "DELETE FROM memories WHERE tenant_id = ?", (tenant_pk,)).rowcount)
            self._store.run(conn, "DELETE FROM memory_stores WHERE tenant_id = ?", (tenant_pk,))
        return count


def check_embedder(info: MemoryStoreInfo, embedder: EmbedderInfo) -> None:
    """Refuse an embedder other than the one a memory store was created with."""
    if info.embedder != embedder:
        raise EmbedderMismatchError(
            f"memory store {info.name!r} was built with {info.embedding_provider}:{info.embedding_model} "
            f"({info.dimension} dimensions); the embedder in use is {embedder.provider}:{embedder.model} "
            f"({embedder.dimension} dimensions). A memory store keeps its embedder: use that one, or another store"
        )


# -- ranking over one user's memories -------------------------------------------------------------
def rank_vectors(vectors: np.ndarray, query: Any, top_k: int) -> list[tuple[int, float]]:
    """(position, cosine) of the ``top_k`` rows nearest to ``query``, best first (rows are normalised)."""
    if not len(vectors):
        return []
    q = np.asarray(query, dtype=np.float32).ravel()
    if q.shape[0] != vectors.shape[1]:
        raise EmbedderMismatchError(f"the query vector has {q.shape[0]} dimensions; the memories have "
                                    f"{vectors.shape[1]}")
    if not np.all(np.isfinite(q)):
        raise VectorStoreError("the query vector contains NaN or infinite values")
    norm = float(np.linalg.norm(q))
    scores = vectors @ (q / norm if norm > 0 else q)
    order = np.lexsort((np.arange(len(scores)), -scores))[:top_k]
    return [(int(i), float(scores[i])) for i in order]


__all__ = ["MemoryStoreInfo", "MemoryWrite", "SQLMemories", "StoredMemory", "check_embedder", "rank_vectors"]
