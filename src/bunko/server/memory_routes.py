"""Agent memory over HTTP (R31): add, search, list and delete the memories of the API key's user.

The user is always the key's own (a key without a user is refused): a request never names another
user. Requests use the API's camelCase; the search answer is seed 004's shape as it is
(``memories`` / ``content`` / ``metadata`` / ``relevance_score``, ``query``, ``total_results``),
plus ``fallback``.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from fastapi import Path as PathParam
from pydantic import BaseModel, ConfigDict, Field

from ..memory import DEFAULT_MEMORY_STORE, MAX_TOP_K, Memory
from . import schemas
from .auth import Caller, CallerDep
from .problems import Problem

router = APIRouter(prefix="/api/v1", tags=["memories"])
MemoryType = Literal["dialogue", "weakness", "success", "curriculum"]
StoreName = Annotated[str, Field(pattern=schemas.NAME_PATTERN, description="memory store (the seed's corpus)")]
SESSION_PATTERN = r"^[\w][\w.:@\-]{0,199}$"
#: The memory store a GET or DELETE names in its query string, and a session or memory id in a path.
StoreQuery = Annotated[str, Query(pattern=schemas.NAME_PATTERN)]
IdPath = Annotated[str, PathParam(pattern=SESSION_PATTERN)]
RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": schemas.ProblemDocument, "content": {"application/problem+json": {}}}
    for code in (400, 401, 403, 404, 422, 429, 504)
}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MemoryIn(_Strict):
    content: str = Field(min_length=1, max_length=20_000, pattern=schemas.TEXT_PATTERN)
    memoryType: MemoryType = "dialogue"
    subject: str | None = Field(None, min_length=1, max_length=100)
    metadata: dict[str, Any] = Field(default_factory=dict)
    timestamp: str | None = Field(None, max_length=64, description="ISO-8601; default now")
    id: str | None = Field(None, pattern=SESSION_PATTERN, description="given again, replaces that memory")


class AddMemories(_Strict):
    memories: list[MemoryIn] = Field(min_length=1, max_length=1000)
    sessionId: str | None = Field(None, pattern=SESSION_PATTERN)
    store: StoreName = DEFAULT_MEMORY_STORE


class Added(BaseModel):
    ids: list[str]
    sessionId: str | None
    store: str


class SearchMemories(_Strict):
    query: str = Field(min_length=1, max_length=10_000, pattern=schemas.TEXT_PATTERN)
    topK: int = Field(5, ge=1, le=MAX_TOP_K)
    mode: Literal["hybrid", "semantic", "keyword"] = "hybrid"
    store: StoreName = DEFAULT_MEMORY_STORE


class MemoryItem(BaseModel):
    content: str
    metadata: dict[str, Any]
    relevance_score: float | None = None


class MemorySearchResult(BaseModel):
    """Seed 004's result shape, plus ``fallback`` (true when keyword search answered alone)."""

    memories: list[MemoryItem]
    query: str
    total_results: int
    fallback: bool


class MemoryList(BaseModel):
    memories: list[MemoryItem]


class DeletedCount(BaseModel):
    deleted: int


def _memory(caller: Caller, store: str) -> tuple[Memory, str]:
    """The key's user and the memory store, through the key's scope (usage and logs carry the user)."""
    if caller.user_id is None:
        raise Problem(403, "USER_KEY_REQUIRED", "memories belong to a user: use an API key created with --user")
    return caller.scope.memory.store(store), caller.user_id


@router.post("/memories", status_code=201, response_model=Added, responses=RESPONSES,
             summary="Add memories of the key's user (one batch)")
async def add_memories(caller: CallerDep, body: AddMemories) -> Added:
    """Indexed in one batch: one embedding request and one transaction."""
    memory, user_id = _memory(caller, body.store)
    ids = await memory.aadd([{"content": m.content, "memory_type": m.memoryType, "subject": m.subject,
                              "metadata": m.metadata, "timestamp": m.timestamp, "id": m.id} for m in body.memories],
                            user_id=user_id, session_id=body.sessionId)
    return Added(ids=ids, sessionId=body.sessionId, store=body.store)


@router.post("/memories/search", response_model=MemorySearchResult, responses=RESPONSES,
             summary="search_memory: the key's user's memories for a query (seed 004)")
async def search_memories(caller: CallerDep, body: SearchMemories) -> dict[str, Any]:
    """Hybrid by default; keyword search answers alone when the semantic leg fails (``fallback``). Over the
    time budget: 504 ``RAG_SEARCH_TIMEOUT``; an unknown named store: 404 ``RAG_CORPUS_NOT_FOUND``."""
    memory, user_id = _memory(caller, body.store)
    return await memory.asearch_memory(body.query, user_id, body.topK, mode=body.mode)


@router.get("/memories", response_model=MemoryList, responses=RESPONSES, summary="List the key's user's memories")
async def list_memories(
    caller: CallerDep,
    sessionId: Annotated[str | None, Query(pattern=SESSION_PATTERN)] = None,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 100,
    store: StoreQuery = DEFAULT_MEMORY_STORE,
) -> dict[str, Any]:
    """Oldest first; of one session with ``sessionId``."""
    memory, user_id = _memory(caller, store)
    return {"memories": await asyncio.to_thread(memory.list, user_id, session_id=sessionId, limit=limit)}


@router.delete("/memories", response_model=DeletedCount, responses=RESPONSES,
               summary="Delete every memory of the key's user (all stores)")
async def delete_all_memories(caller: CallerDep) -> DeletedCount:
    """Every memory store of the tenant, this user's memories only."""
    memory, user_id = _memory(caller, DEFAULT_MEMORY_STORE)
    return DeletedCount(deleted=await asyncio.to_thread(memory.delete_user, user_id))


@router.delete("/memories/sessions/{session_id}", response_model=DeletedCount, responses=RESPONSES,
               summary="Delete the memories of one session of the key's user")
async def delete_session_memories(
    caller: CallerDep, session_id: IdPath, store: StoreQuery = DEFAULT_MEMORY_STORE,
) -> DeletedCount:
    """The session's memories in one memory store."""
    memory, user_id = _memory(caller, store)
    return DeletedCount(deleted=await asyncio.to_thread(memory.delete_session, user_id, session_id))


@router.delete("/memories/{memory_id}", response_model=DeletedCount, responses=RESPONSES,
               summary="Delete one memory of the key's user")
async def delete_memory(
    caller: CallerDep, memory_id: IdPath, store: StoreQuery = DEFAULT_MEMORY_STORE,
) -> DeletedCount:
    """By its id; 0 when the user has no memory of that id."""
    memory, user_id = _memory(caller, store)
    deleted = await asyncio.to_thread(memory.delete, user_id, memory_ids=[memory_id])
    if not deleted:
        raise Problem(404, "MEMORY_NOT_FOUND", f"memory {memory_id!r} does not exist for this user")
    return DeletedCount(deleted=deleted)
