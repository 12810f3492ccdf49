"""Conversations: the earlier turns an answer sees, and the turns it leaves behind.

A conversation lives in one tenant's records (``RecordStore.append_turns`` / ``conversation``),
under an id the caller chooses. When a question names a conversation:

* its last ``history_turns`` turns go to the LLM (each cut to ``HISTORY_TURN_CHARS``);
* a follow-up ("それは何日分？") is searched together with the question asked before it,
  so the search sees what "それ" refers to;
* the question and its answer (with the cited chunk ids and the model) are appended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .llm import LLMMessage
from .stores.base import RecordStore, check_conversation_id
from .types import ConversationTurn

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

    def annotate(self, usage: dict[str, Any]) -> None:
        """Note in an answer's usage how many earlier turns the LLM saw."""
        if self.history:
            usage["history_turns"] = len(self.history)


class Conversations:
    """One tenant's conversations, as the answering path uses them."""

    def __init__(self, store: RecordStore, history_turns: int) -> None:
        self._store = store
        self._history_turns = history_turns

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
        turns = await asyncio.to_thread(self._store.conversation, conversation_id, limit) if limit else []
        history = [LLMMessage(t.role, t.content[:HISTORY_TURN_CHARS]) for t in turns]
        last_question = next((t.content for t in reversed(turns) if t.role == "user"), None)
        return ConversationContext(conversation_id, history, last_question)

    async def remember(self, conversation_id: str | None, question: str, response: Mapping[str, Any]) -> None:
        """Append the question and its answer (``GenerationResult.to_dict()``) to the conversation."""
        if conversation_id is None:
            return
        sources = [s["chunk_id"] for s in response.get("sources", [])]
        await asyncio.to_thread(self._store.append_turns, conversation_id, [
            ConversationTurn("user", question),
            ConversationTurn("assistant", response["answer"], {"sources": sources, "model": response["model"]}),
        ])

    def turns(self, conversation_id: str) -> list[ConversationTurn]:
        """The stored turns of a conversation, oldest first ([] if it does not exist)."""
        return self._store.conversation(conversation_id)

    def delete(self, conversation_id: str) -> int:
        """Delete a conversation; returns how many turns it had."""
        return self._store.delete_conversation(conversation_id)


__all__ = ["HISTORY_TURN_CHARS", "ConversationContext", "Conversations"]
