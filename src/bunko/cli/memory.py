"""``bunko memory add|search|list|delete``: agent memory from the shell."""

from __future__ import annotations

import json
from typing import Any

import click

from ..memory import DEFAULT_MEMORY_STORE, DEFAULT_MEMORY_TYPE, MEMORY_TYPES, SEARCH_MODES
from .common import (
    MEMORY_EMBEDDER_HELP,
    embedder_option,
    emit_json,
    get_engine,
    json_command,
    stdout,
    tenant_option,
)

store_option = click.option("--store", "store", default=DEFAULT_MEMORY_STORE, show_default=True,
                            help="Memory store of the tenant (a tenant may keep several).")
user_option = click.option("--user", "-u", "user_id", required=True, help="The user the memories belong to.")


@click.group("memory")
def memory() -> None:
    """Agent memory: what each user said or did in earlier sessions, to search later."""


@memory.command("add")
@click.argument("text")
@user_option
@click.option("--session", "-s", "session_id", default=None, help="Session the memory comes from.")
@click.option("--type", "memory_type", type=click.Choice(MEMORY_TYPES), default=DEFAULT_MEMORY_TYPE,
              show_default=True, help="Memory type.")
@click.option("--subject", default=None, help="Subject (math, japanese, ...).")
@click.option("--metadata", "metadata_json", default=None, metavar="JSON", help="Free metadata as a JSON object.")
@click.option("--timestamp", default=None, metavar="ISO", help="When it was said (default: now).")
@store_option
@tenant_option()
@embedder_option(MEMORY_EMBEDDER_HELP)
@json_command()
def memory_add(ctx: click.Context, text: str, user_id: str, session_id: str | None, memory_type: str,
               subject: str | None, metadata_json: str | None, timestamp: str | None, store: str, tenant: str,
               embedder: str | None, as_json: bool) -> None:
    """Add one memory of a user."""
    metadata = _metadata(metadata_json)
    memory_ = get_engine(ctx, embedder=embedder).tenant(tenant).memory.store(store)
    [memory_id] = memory_.add([{"content": text, "memory_type": memory_type, "subject": subject,
                                "metadata": metadata, "timestamp": timestamp}], user_id=user_id, session_id=session_id)
    if as_json:
        emit_json({"memory_id": memory_id, "user_id": user_id, "session_id": session_id, "store": store})
    else:
        stdout.print(memory_id)


def _metadata(text: str | None) -> dict[str, Any]:
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--metadata") from None
    if not isinstance(value, dict):
        raise click.BadParameter("must be a JSON object", param_hint="--metadata")
    return value


@memory.command("search")
@click.argument("query")
@user_option
@click.option("--top-k", "-k", default=5, show_default=True, type=click.IntRange(1, 100), help="Memories to return.")
@click.option("--mode", type=click.Choice(SEARCH_MODES), default="hybrid", show_default=True,
              help="hybrid: meaning and exact words; semantic: meaning only; keyword: exact words only.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Time budget in seconds (default [memory] timeout, 2).")
@store_option
@tenant_option()
@embedder_option(MEMORY_EMBEDDER_HELP)
@json_command()
def memory_search(ctx: click.Context, query: str, user_id: str, top_k: int, mode: str, timeout: float | None,
                  store: str, tenant: str, embedder: str | None, as_json: bool) -> None:
    """A user's memories for QUERY, best first (--json prints the memories with their scores and metadata)."""
    memory_ = get_engine(ctx, embedder=embedder).tenant(tenant).memory.store(store)
    result = memory_.search_memory(query, user_id, top_k, mode=mode, timeout=timeout)
    if as_json:
        emit_json(result)
        return
    if result["fallback"]:
        stdout.print("(the semantic search failed; answered by keyword search)")
    if not result["memories"]:
        stdout.print("no memories found")
    for item in result["memories"]:
        meta = item["metadata"]
        stdout.print(f"{item['relevance_score']:.3f}  [{meta['memory_type']}"
                     f"{'/' + meta['subject'] if meta['subject'] else ''}] {item['content']}  "
                     f"(session {meta['session_id']}, {meta['timestamp']})", markup=False)


@memory.command("list")
@user_option
@click.option("--session", "-s", "session_id", default=None, help="Only this session.")
@click.option("--limit", default=100, show_default=True, type=click.IntRange(1, 100_000))
@store_option
@tenant_option()
@json_command()
def memory_list(ctx: click.Context, user_id: str, session_id: str | None, limit: int, store: str, tenant: str,
                as_json: bool) -> None:
    """A user's memories, oldest first."""
    items = get_engine(ctx).tenant(tenant).memory.store(store).list(user_id, session_id=session_id, limit=limit)
    if as_json:
        emit_json({"memories": items})
        return
    for item in items:
        meta = item["metadata"]
        stdout.print(f"{meta['memory_id']}  {meta['timestamp']}  [{meta['memory_type']}] {item['content']}",
                     markup=False)


@memory.command("delete")
@user_option
@click.option("--session", "-s", "session_id", default=None, help="Only this session's memories.")
@click.option("--id", "memory_ids", multiple=True, help="Only these memories (repeatable).")
@store_option
@tenant_option()
@json_command()
def memory_delete(ctx: click.Context, user_id: str, session_id: str | None, memory_ids: tuple[str, ...], store: str,
                  tenant: str, as_json: bool) -> None:
    """Delete a user's memories: all of them in every store, or a session's, or some by id."""
    memory_ = get_engine(ctx).tenant(tenant).memory.store(store)
    everything = session_id is None and not memory_ids
    deleted = memory_.delete(user_id, session_id=session_id, memory_ids=list(memory_ids) or None,
                             all_stores=everything)
    if as_json:
        emit_json({"deleted": deleted})
    else:
        stdout.print(f"deleted {deleted} memories")
