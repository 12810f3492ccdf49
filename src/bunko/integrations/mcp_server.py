"""An MCP server over bunko (``bunko mcp``), on the official ``mcp`` SDK (2.x, ``MCPServer``).

Tools (JSON-Schema'd inputs):

* ``search(query, collection, top_k, mode)`` -- the best chunks of a collection;
* ``ask(question, collection, top_k)`` -- a cited answer;
* ``search_memory(query, top_k)`` -- the seed's memory search for *the caller's* user;
* ``add_memory(content, memory_type, subject, session_id)`` -- a memory of the caller's user.

The user is never an argument the model can set: over stdio it is the ``--user`` the operator
started the server with; over streamable HTTP (``--http HOST:PORT``) each request's API key names
the tenant and the user, as for the REST API, and each tool call counts against the key's rate limit
(``[server] rate_limit`` per minute, in the REST API's sliding windows: :mod:`bunko.ratelimit`). Every
tool works in the tenant scope of that user (``Tenant.for_user``), so its usage records carry the user
as the REST API's do. The tenant's collections are resources (``bunko://collections/{name}``).

Install the extra: ``pip install "bunko[mcp]"``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import Field

from ..config import DEFAULT_COLLECTION, DEFAULT_TENANT
from ..engine import Bunko, Tenant
from ..errors import BunkoError, ConfigError
from ..ratelimit import RateLimiter

try:  # the optional "mcp" extra
    from mcp.server.mcpserver import Context, MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError
    from mcp.types import Resource
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ConfigError('the MCP server needs the "mcp" extra: pip install "bunko[mcp]"') from exc

INSTRUCTIONS = (
    "bunko is a document search engine and an agent memory. Use `search` or `ask` for the tenant's documents "
    "(`ask` answers with [N] citations) and `search_memory` to recall what this user said in earlier sessions; "
    "`add_memory` keeps something worth remembering. The user is fixed by the server, never an argument."
)
MemoryType = Literal["dialogue", "weakness", "success", "curriculum"]


@dataclass(frozen=True, slots=True)
class Caller:
    """Who a tool call works for: a tenant scope (the user's, when there is one) and the user of the memory tools
    (None: no user)."""

    tenant: Tenant
    user_id: str | None


class BunkoMCP(MCPServer):
    """The MCP server: fixed tenant and user (stdio), or both from each request's API key (HTTP)."""

    def __init__(self, engine: Bunko, *, tenant: str | None = None, user_id: str | None = None,
                 by_api_key: bool = False) -> None:
        super().__init__("bunko", instructions=INSTRUCTIONS, log_level="WARNING")
        self.engine = engine
        self.by_api_key = by_api_key
        scope = None if by_api_key else engine.tenant(tenant or DEFAULT_TENANT)
        if user_id is not None:
            from ..memory import check_user

            check_user(user_id)
            scope = scope.for_user(user_id) if scope is not None else None
        self._tenant = scope
        self._user_id = user_id
        self._records: Any = None
        self.limiter: RateLimiter | None = None
        if by_api_key:
            self._records = engine.backend.service_records()
            # Each tool call counts against its key's rate limit, in the windows the REST API counts in.
            self.limiter = RateLimiter(self._records, engine.settings.server.rate_limit_per_minute)
        _register(self)

    async def caller(self, ctx: Context | None) -> Caller:
        """The caller of a request: the server's own tenant and user, or those of its API key."""
        if not self.by_api_key:
            assert self._tenant is not None
            return Caller(self._tenant, self._user_id)
        headers = {k.lower(): v for k, v in ((ctx.headers if ctx is not None else None) or {}).items()}
        token = headers.get("x-api-key") or ""
        authorization = headers.get("authorization", "")
        if authorization.lower().startswith("bearer "):
            token = authorization[7:].strip()
        key = await asyncio.to_thread(self._records.authenticate, token) if token and len(token) <= 200 else None
        if key is None:
            raise ToolError("UNAUTHENTICATED: send a valid API key (Authorization: Bearer <key> or X-API-Key)")
        assert self.limiter is not None
        if self.limiter.limit:
            decision = await asyncio.to_thread(self.limiter.check, key.id)
            if not decision.allowed:
                raise ToolError(f"RATE_LIMITED: {decision.message()}")
        quota = await asyncio.to_thread(self.limiter.check_tenant, key.tenant)
        if not quota.allowed:
            raise ToolError(f"QUOTA_EXCEEDED: {quota.quota_message()}")
        return Caller(self.engine.tenant(key.tenant).for_user(key.user_id, admin=key.admin), key.user_id)

    async def _handle_list_resources(self, ctx: Any, params: Any) -> Any:
        """The caller's collections, one resource each (the SDK's static list cannot depend on the caller)."""
        from mcp.types import ListResourcesResult

        caller = await self.caller(Context(request_context=ctx, mcp_server=self))
        collections = await asyncio.to_thread(caller.tenant.collections)
        return ListResourcesResult(resources=[
            Resource(uri=f"bunko://collections/{c.name}", name=c.name, mime_type="application/json",
                     description=f"collection {c.name}: {c.document_count} documents, {c.chunk_count} chunks")
            for c in collections])


def _fail(exc: BunkoError) -> ToolError:
    return ToolError(f"{exc.code}: {exc.message}")


def _user(caller: Caller) -> str:
    if caller.user_id is None:
        raise ToolError("NO_USER: this server has no user for memories; start it with `bunko mcp --user ID` "
                        "(or use an API key that names a user)")
    return caller.user_id


def _register(server: BunkoMCP) -> None:
    @server.tool(description="Search the tenant's documents; returns the best chunks with scores and sources.")
    async def search(
        query: Annotated[str, Field(min_length=1, max_length=10_000, description="What to look for.")],
        collection: Annotated[str, Field(description="Collection to search.")] = DEFAULT_COLLECTION,
        top_k: Annotated[int, Field(ge=1, le=100, description="How many chunks to return.")] = 5,
        mode: Annotated[Literal["vector", "keyword", "hybrid"], Field(description="Search mode.")] = "hybrid",
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        caller = await server.caller(ctx)
        try:
            response = await caller.tenant.asearch(query, collection, top_k=top_k, mode=mode)
        except BunkoError as exc:
            raise _fail(exc) from None
        return response.to_dict()

    @server.tool(description="Answer a question from the tenant's documents, citing them as [N].")
    async def ask(
        question: Annotated[str, Field(min_length=1, max_length=10_000, description="The question.")],
        collection: Annotated[str, Field(description="Collection to answer from.")] = DEFAULT_COLLECTION,
        top_k: Annotated[int, Field(ge=1, le=50, description="Chunks to read.")] = 5,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        caller = await server.caller(ctx)
        try:
            result = await caller.tenant.aask(question, collection, top_k=top_k)
        except BunkoError as exc:
            raise _fail(exc) from None
        return result.to_dict()

    @server.tool(description="Recall what this user said in earlier sessions (their memories only), best first. "
                             "Returns {memories: [{content, metadata, relevance_score}], query, total_results}.")
    async def search_memory(
        query: Annotated[str, Field(min_length=1, max_length=10_000, description="What to recall, e.g. a topic.")],
        top_k: Annotated[int, Field(ge=1, le=100, description="How many memories to return.")] = 5,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        caller = await server.caller(ctx)
        try:
            return await caller.tenant.memory.asearch_memory(query, _user(caller), top_k)
        except BunkoError as exc:
            raise _fail(exc) from None

    @server.tool(description="Remember something about this user for later sessions.")
    async def add_memory(
        content: Annotated[str, Field(min_length=1, max_length=20_000, description="What to remember.")],
        memory_type: Annotated[MemoryType, Field(description="Kind of memory.")] = "dialogue",
        subject: Annotated[str | None, Field(max_length=100, description="Subject, e.g. math.")] = None,
        session_id: Annotated[str | None, Field(max_length=200, description="The current session.")] = None,
        ctx: Context | None = None,
    ) -> dict[str, Any]:
        caller = await server.caller(ctx)
        try:
            [memory_id] = await caller.tenant.memory.aadd(
                [{"content": content, "memory_type": memory_type, "subject": subject}],
                user_id=_user(caller), session_id=session_id)
        except BunkoError as exc:
            raise _fail(exc) from None
        return {"memory_id": memory_id, "session_id": session_id}

    @server.resource("bunko://collections/{name}", name="collection", mime_type="application/json",
                     description="A collection of the tenant: its settings and first 100 documents.")
    async def collection(name: str, ctx: Context) -> str:
        caller = await server.caller(ctx)
        try:
            info = next((c for c in await asyncio.to_thread(caller.tenant.collections) if c.name == name), None)
            if info is None:
                raise ResourceError(f"collection {name!r} does not exist")
            documents = await asyncio.to_thread(caller.tenant.documents, name, limit=100)
        except BunkoError as exc:
            raise ResourceError(f"{exc.code}: {exc.message}") from None
        return json.dumps({"name": info.name, "documents": info.document_count, "chunks": info.chunk_count,
                           "embedder": f"{info.embedding_provider}:{info.embedding_model}",
                           "analyzer": info.analyzer,
                           "first_documents": [{"id": d.id, "source": d.source} for d in documents]},
                          ensure_ascii=False)


def build_server(engine: Bunko, *, tenant: str | None = None, user_id: str | None = None,
                 by_api_key: bool = False) -> BunkoMCP:
    """The MCP server over ``engine``: bound to ``tenant`` and ``user_id``, or to each request's API key."""
    return BunkoMCP(engine, tenant=tenant, user_id=user_id, by_api_key=by_api_key)


def serve_stdio(engine: Bunko, *, tenant: str | None = None, user_id: str | None = None) -> None:
    """Serve over stdio until the client closes it."""
    build_server(engine, tenant=tenant, user_id=user_id).run("stdio")


def serve_http(engine: Bunko, *, host: str, port: int) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp``; each request's API key names its tenant and user."""
    build_server(engine, by_api_key=True).run("streamable-http", host=host, port=port)


__all__ = ["BunkoMCP", "build_server", "serve_http", "serve_stdio"]
