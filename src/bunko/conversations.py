"""Conversations: the earlier turns an answer sees, and the turns it leaves behind.

A conversation lives in one tenant's records (``RecordStore.append_turns`` / ``conversation``),
under an id the caller chooses. When a question names a conversation:

* its last ``history_turns`` turns go to the LLM (each cut to ``HISTORY_TURN_CHARS``);
* a follow-up ("それは何日分？") is searched together with the question asked before it,
  so the search sees what "それ" refers to;
* the question and its answer (with the cited chunk ids and the model) are appended.

:meth:`Conversations.converse` is that flow, written once for ``Tenant.aask`` and ``Tenant.astream_ask``.
A tenant scope working for a user (``Tenant.for_user``) keeps its conversations in the user's
namespace: the ids it is given are stored under the namespace's prefix, so two users' conversations of
the same id never meet.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .llm import LLMMessage
from .stores.base import RecordStore, check_conversation_id
from .types import ConversationTurn

if TYPE_CHECKING:
    from .pipeline import StreamEvent

# Earlier turns fed back to the LLM are cut to this many characters each (the turn count is a setting).
HISTORY_TURN_CHARS = 2000


@dataclass(slots=True)
class ConversationContext:
    """What one question takes from its conversation: the turns for the LLM and the question before it."""

    conversation_id: str | None = None
    history: list[LLMMessage] = field(default_factory=list)
    last_question: str | None = None

    def search_query(self, question: str) -> str:
        """What to search for ``question``: with the question before it, when there was one."""
        return f"{self.last_question}\n{question}" if self.last_question else question


class Conversations:
    """One tenant's conversations, as the answering path uses them (in the namespace ``prefix``, if given)."""

    def __init__(self, store: RecordStore, history_turns: int, *, prefix: str = "") -> None:
        self._store = store
        self._history_turns = history_turns
        self._prefix = prefix

    @staticmethod
    def check_id(conversation_id: str | None) -> None:
        """Refuse a malformed conversation id (``VectorStoreError``) before any work is done."""
        if conversation_id is not None:
            check_conversation_id(conversation_id)

    async def context(self, conversation_id: str | None) -> ConversationContext:
        """The earlier turns of a conversation for the LLM (bounded), and the last question asked in it."""
        if conversation_id is None:
            return ConversationContext()
        limit = self._history_turns
        stored = self._prefix + conversation_id
        turns = await asyncio.to_thread(self._store.conversations.turns, stored, limit) if limit else []
        history = [LLMMessage(t.role, t.content[:HISTORY_TURN_CHARS]) for t in turns]
        last_question = next((t.content for t in reversed(turns) if t.role == "user"), None)
        return ConversationContext(conversation_id, history, last_question)

    async def remember(self, conversation_id: str | None, question: str, response: Mapping[str, Any]) -> None:
        """Append the question and its answer (``GenerationResult.to_dict()``) to the conversation."""
        if conversation_id is None:
            return
        sources = [s["chunk_id"] for s in response.get("sources", [])]
        await asyncio.to_thread(self.append, conversation_id, [
            ConversationTurn("user", question),
            ConversationTurn("assistant", response["answer"], {"sources": sources, "model": response["model"]}),
        ])

    def append(self, conversation_id: str, turns: Sequence[ConversationTurn]) -> None:
        """Append turns to a conversation (created on first use)."""
        self._store.conversations.append(self._prefix + conversation_id, turns)

    def turns(self, conversation_id: str) -> list[ConversationTurn]:
        """The stored turns of a conversation, oldest first ([] if it does not exist)."""
        return self._store.conversations.turns(self._prefix + conversation_id)

    def delete(self, conversation_id: str) -> int:
        """Delete a conversation; returns how many turns it had."""
        return self._store.conversations.delete(self._prefix + conversation_id)

    async def converse(self, conversation_id: str | None, question: str,
                       answer: Callable[[ConversationContext], AsyncIterator[StreamEvent]],
                       ) -> AsyncIterator[StreamEvent]:
        """One question in its conversation: the context it takes, the events of ``answer(context)`` passed on,
        and the turn it leaves behind (appended as the ``done`` event passes)."""
        context = await self.context(conversation_id)
        events = answer(context)
        try:
            async for event in events:
                if event.type == "done":
                    await self.remember(conversation_id, question, event.data["response"])
                yield event
        finally:
            await events.aclose()  # type: ignore[attr-defined]


__all__ = ["HISTORY_TURN_CHARS", "ConversationContext", "Conversations"]
