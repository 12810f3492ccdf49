"""Google ADK on bunko: a ``BaseMemoryService`` and the seed's ``search_memory`` tool (seed 004).

    from bunko import Bunko
    from bunko.integrations.adk import BunkoMemoryService, search_memory_tool

    school = Bunko().tenant("school")
    runner = Runner(agent=LlmAgent(..., tools=[search_memory_tool(school)]), app_name="coach",
                    session_service=..., memory_service=BunkoMemoryService(school))

* ``BunkoMemoryService.add_session_to_memory(session)`` indexes the session's text events in one
  batch (event id = memory id, so adding a session again replaces its memories instead of
  doubling them); ``search_memory(app_name=, user_id=, query=)`` searches that user's memories.
  The memory store is ``store`` if given, else the ADK app name.
* ``search_memory_tool(tenant)`` is the seed's ``FunctionTool``: ``search_memory(query, top_k=5)``,
  with the user taken from ``tool_context.state["user_id"]`` -- never from the model -- returning
  the seed's result shape.

Install the extra: ``pip install "bunko[adk]"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from ..engine import Tenant
from ..errors import ConfigError, InvalidMemoryError, RagCorpusNotFoundError
from ..memory import DEFAULT_MEMORY_STORE, Memory, MemoryRecord

try:  # the optional "adk" extra
    from google.adk.memory import BaseMemoryService
    from google.adk.memory.base_memory_service import SearchMemoryResponse
    from google.adk.memory.memory_entry import MemoryEntry
    from google.adk.tools import FunctionTool, ToolContext
    from google.genai import types
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ConfigError('the Google ADK integration needs the "adk" extra: pip install "bunko[adk]"') from exc

DEFAULT_SEARCH_LIMIT = 10
_MEMORY_TYPE_KEY = "memory_type"


def _text(event: Any) -> str:
    content = getattr(event, "content", None)
    parts = getattr(content, "parts", None) or []
    return " ".join(p.text for p in parts if getattr(p, "text", None)).strip()


def _record(event: Any, custom_metadata: Mapping[str, object] | None = None) -> MemoryRecord | None:
    text = _text(event)
    if not text:
        return None
    extra = dict(custom_metadata or {})
    memory_type = str(extra.pop(_MEMORY_TYPE_KEY, "dialogue"))
    subject = extra.pop("subject", None)
    stamp = getattr(event, "timestamp", None)
    moment = datetime.fromtimestamp(stamp, UTC) if isinstance(stamp, int | float) else None
    return MemoryRecord(text, memory_type, str(subject) if subject else None,
                        {"author": getattr(event, "author", None), **extra}, moment,
                        getattr(event, "id", None) or None)


class BunkoMemoryService(BaseMemoryService):
    """ADK memory in a bunko tenant: one memory store per app (or ``store``), memories per user."""

    def __init__(self, tenant: Tenant, *, store: str | None = None, limit: int = DEFAULT_SEARCH_LIMIT) -> None:
        self.tenant = tenant
        self.store = store
        self.limit = limit

    def _memory(self, app_name: str) -> Memory:
        return self.tenant.memory.store(self.store or app_name)

    async def add_session_to_memory(self, session: Any) -> None:
        """Index the session's text events in one batch (again: its memories are replaced, not doubled)."""
        records = [r for r in (_record(e) for e in session.events) if r is not None]
        if records:
            await self._memory(session.app_name).aadd(records, user_id=session.user_id, session_id=session.id)

    async def add_events_to_memory(self, *, app_name: str, user_id: str, events: Sequence[Any],
                                   session_id: str | None = None,
                                   custom_metadata: Mapping[str, object] | None = None) -> None:
        """Index some events (a delta) in one batch; ``custom_metadata`` may set ``memory_type`` and ``subject``."""
        records = [r for r in (_record(e, custom_metadata) for e in events) if r is not None]
        if records:
            await self._memory(app_name).aadd(records, user_id=user_id, session_id=session_id)

    async def search_memory(self, *, app_name: str, user_id: str, query: str) -> SearchMemoryResponse:
        """The user's best memories for ``query`` as ADK ``MemoryEntry`` s (none when the store is new)."""
        try:
            result = await self._memory(app_name).asearch_memory(query, user_id, self.limit)
        except RagCorpusNotFoundError:
            return SearchMemoryResponse()
        entries = []
        for item in result["memories"]:
            meta = item["metadata"]
            author = meta.get("author")
            entries.append(MemoryEntry(
                content=types.Content(role="model" if author not in (None, "user") else "user",
                                      parts=[types.Part(text=item["content"])]),
                id=meta["memory_id"], author=author, timestamp=meta["timestamp"],
                custom_metadata={**meta, "relevance_score": item["relevance_score"]}))
        return SearchMemoryResponse(memories=entries)


def search_memory_tool(tenant: Tenant, *, store: str = DEFAULT_MEMORY_STORE) -> FunctionTool:
    """The seed's ``search_memory_tool``: a ``FunctionTool`` over ``tenant``'s memory store ``store``.

    The user comes from ``tool_context.state["user_id"]``; the model only gives the query and ``top_k``.
    """
    memory = tenant.memory.store(store)

    async def search_memory(query: str, top_k: int = 5, tool_context: ToolContext | None = None) -> dict[str, Any]:
        """Search what this child said in earlier sessions (their own memories only).

        Args:
            query: What to recall, e.g. "繰り上がりの足し算".
            top_k: How many memories to return (1-100).

        Returns:
            {"memories": [{"content", "metadata", "relevance_score"}], "query", "total_results", "fallback"}
        """
        if tool_context is None:
            raise InvalidMemoryError("ToolContext is required")
        user_id = tool_context.state.get("user_id")
        if not user_id:
            raise InvalidMemoryError("user_id not found in session state")
        return await memory.asearch_memory(query, str(user_id), top_k)

    return FunctionTool(func=search_memory)


__all__ = ["BunkoMemoryService", "search_memory_tool"]
