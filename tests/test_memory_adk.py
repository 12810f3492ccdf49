"""Google ADK on bunko: the memory service and the seed's ``search_memory`` FunctionTool (seed 004)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("google.adk")

from google.adk.agents import LlmAgent
from google.adk.agents.invocation_context import InvocationContext
from google.adk.events import Event
from google.adk.sessions import InMemorySessionService
from google.adk.tools import ToolContext
from google.genai import types

from bunko import Bunko
from bunko.embedders import UniversalSentenceEncoderEmbedder
from bunko.errors import InvalidMemoryError
from bunko.integrations.adk import BunkoMemoryService, search_memory_tool
from tests.test_memory import QUERY, SESSIONS

APP = "coach"


@pytest.fixture()
def engine(tmp_path: Path, embedder: UniversalSentenceEncoderEmbedder) -> Iterator[Bunko]:
    e = Bunko(f"sqlite:///{tmp_path / 'adk.db'}", embedder=embedder, memory_timeout=120, memory_semantic_timeout=120)
    yield e
    e.close()


def _event(text: str, author: str = "user") -> Event:
    return Event(author=author, invocation_id="inv", content=types.Content(role="user", parts=[types.Part(text=text)]))


async def _scenario(engine: Bunko) -> dict[str, Any]:
    school = engine.tenant("school")
    service = BunkoMemoryService(school)
    sessions = InMemorySessionService()
    for user, by_session in SESSIONS.items():
        for session_id, events in by_session.items():
            session = await sessions.create_session(app_name=APP, user_id=user, session_id=session_id,
                                                    state={"user_id": user})
            for content, memory_type, subject in events:
                if memory_type == "dialogue":
                    await sessions.append_event(session, _event(content))
                else:  # typed memories arrive as deltas with the seed's metadata
                    await service.add_events_to_memory(app_name=APP, user_id=user, events=[_event(content)],
                                                       session_id=session_id,
                                                       custom_metadata={"memory_type": memory_type,
                                                                        "subject": subject})
            await service.add_session_to_memory(session)
            await service.add_session_to_memory(session)  # again: replaced, not doubled

    found = await service.search_memory(app_name=APP, user_id="child-a", query=QUERY)
    unknown_app = await service.search_memory(app_name="other-app", user_id="child-a", query=QUERY)

    tool = search_memory_tool(school, store=APP)
    agent = LlmAgent(name="coach", model="gemini-2.0-flash", tools=[tool])
    session = await sessions.get_session(app_name=APP, user_id="child-a", session_id="a-s1")
    context = ToolContext(InvocationContext(session_service=sessions, invocation_id="i1", agent=agent,
                                            session=session))
    result = await tool.run_async(args={"query": QUERY, "top_k": 3}, tool_context=context)
    smuggled = await tool.run_async(args={"query": QUERY, "user_id": "child-b"}, tool_context=context)
    anonymous = await sessions.create_session(app_name=APP, user_id="child-c", state={})
    no_user = ToolContext(InvocationContext(session_service=sessions, invocation_id="i2", agent=agent,
                                            session=anonymous))
    try:
        await tool.run_async(args={"query": QUERY}, tool_context=no_user)
        missing_user: Exception | None = None
    except InvalidMemoryError as exc:
        missing_user = exc
    return {"found": found, "unknown_app": unknown_app, "tool": tool, "result": result, "smuggled": smuggled,
            "missing_user": missing_user, "listed": school.memory.store(APP).list("child-a")}


def test_adk_memory_service_and_search_memory_tool(engine: Bunko) -> None:
    out = asyncio.run(_scenario(engine))

    found = out["found"].memories
    assert found[0].content.parts[0].text == "前回、繰り上がりの足し算で3回つまずいた"
    assert found[0].custom_metadata["memory_type"] == "weakness"
    assert {m.custom_metadata["user_id"] for m in found} == {"child-a"}
    assert out["unknown_app"].memories == []
    assert len(out["listed"]) == 5  # each session once, though it was added twice

    tool = out["tool"]
    assert tool.name == "search_memory"
    params = tool._get_declaration().parameters_json_schema
    assert set(params["properties"]) == {"query", "top_k"}  # the user is not the model's to choose

    result = out["result"]
    assert set(result) >= {"memories", "query", "total_results"} and result["query"] == QUERY
    assert result["memories"][0]["content"] == "前回、繰り上がりの足し算で3回つまずいた"
    assert result["memories"][0]["metadata"]["memory_type"] == "weakness"
    assert {m["metadata"]["user_id"] for m in result["memories"]} == {"child-a"}
    smuggled = out["smuggled"]
    assert "error" in smuggled or {m["metadata"]["user_id"] for m in smuggled["memories"]} == {"child-a"}
    assert isinstance(out["missing_user"], ValueError) and "user_id not found" in str(out["missing_user"])
