"""API keys and per-key rate limits; the tenant of a request comes from its key alone (R15).

A key is sent as ``Authorization: Bearer bk_...`` or ``X-API-Key: bk_...``. The store keeps only
its SHA-256 (see :mod:`bunko.stores.service`). Each request counts against its key's window of
the current minute, in the store, so the limit holds across worker processes.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from ..engine import Tenant
from ..stores.base import VectorStore
from ..stores.service import APIKey, conversation_prefix
from .guard import KEY_STATE
from .problems import Problem

bearer = HTTPBearer(auto_error=False, description="An API key from `bunko admin keys create`.")
api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="The same key, in its own header.")


class UserStore:
    """A tenant's store seen through one API key: usage and search logs carry the key's user id,
    and conversation ids are kept in the key's namespace (a user's own, or the tenant keys' one).

    Everything else is the tenant store's own method.
    """

    def __init__(self, store: VectorStore, user_id: str | None) -> None:
        self._store = store
        self._user_id = user_id
        self._prefix = conversation_prefix(user_id)

    @property
    def tenant(self) -> str:
        """The tenant (read-only)."""
        return self._store.tenant

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def record_usage(self, events: Any) -> None:
        """Record usage for this tenant and the key's user."""
        self._store.record_usage(events, user_id=self._user_id)

    @property
    def user_id(self) -> str | None:
        """The key's user (None for a tenant key)."""
        return self._user_id

    def record_activity(self, events: Any, searches: Any = ()) -> None:
        """Record usage and search-log rows for this tenant and the key's user, in one transaction."""
        self._store.record_activity(events, searches, user_id=self._user_id)  # type: ignore[attr-defined]

    def log_search(self, query: str | None, result_count: int, search_time_ms: float, search_type: str) -> None:
        """Log a search for this tenant and the key's user."""
        self._store.log_search(query, result_count, search_time_ms, search_type,
                               user_id=self._user_id)

    def append_turns(self, conversation_id: str, turns: Any) -> None:
        """Append turns to a conversation of the key's namespace."""
        self._store.append_turns(self._prefix + conversation_id, turns)

    def conversation(self, conversation_id: str, limit: int | None = None) -> Any:
        """Turns of a conversation of the key's namespace."""
        return self._store.conversation(self._prefix + conversation_id, limit)

    def delete_conversation(self, conversation_id: str) -> int:
        """Delete a conversation of the key's namespace."""
        return self._store.delete_conversation(self._prefix + conversation_id)


@dataclass(slots=True)
class Caller:
    """Who is calling: the key's tenant, user and rights, and the scopes to work with."""

    key: APIKey
    store: VectorStore  # the tenant's raw store (for the server's records)
    scope: Tenant  # the engine scope, through the key's UserStore

    @property
    def tenant(self) -> str:
        """The key's tenant."""
        return self.key.tenant

    @property
    def user_id(self) -> str | None:
        """The key's user, if any."""
        return self.key.user_id

    def may_manage(self, owner: str | None) -> bool:
        """Whether this key may delete something owned by ``owner`` (a tenant admin or service key, or the owner)."""
        return self.key.admin or self.key.user_id is None or (owner is not None and owner == self.key.user_id)


def _token(headers: list[tuple[bytes, bytes]]) -> str | None:
    """The API key of a request: ``Authorization: Bearer <key>`` or ``X-API-Key: <key>``."""
    bearer_value = header_value = None
    for name, value in headers:
        if name == b"authorization":
            scheme, _, credentials = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and credentials.strip():
                bearer_value = credentials.strip()
        elif name == b"x-api-key" and value.strip():
            header_value = value.decode("latin-1").strip()
    return bearer_value or header_value


async def authenticate_headers(state: Any, headers: list[tuple[bytes, bytes]]) -> APIKey:
    """The valid key of a request's headers, counted against its rate limit; else a 401 or 429 ``Problem``.

    Runs on the headers alone, before the body is read (see :mod:`bunko.server.guard`).
    """
    token = _token(headers)
    if not token:
        raise Problem(401, "UNAUTHENTICATED", "send an API key: Authorization: Bearer <key> (or X-API-Key)",
                      headers={"WWW-Authenticate": "Bearer"})
    if len(token) > 200:
        key = None
    else:
        key = await asyncio.to_thread(state.records.authenticate, token)
    if key is None:
        raise Problem(401, "INVALID_API_KEY", "the API key is not valid or was revoked",
                      headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})
    limit = state.settings.rate_limit_per_minute
    if limit:
        now = time.time()
        window = int(now // 60)
        count = await asyncio.to_thread(state.records.hit, key.id, window)
        if count > limit:
            retry = max(1, math.ceil((window + 1) * 60 - now))
            raise Problem(429, "RATE_LIMITED", f"this API key made more than {limit} requests this minute; "
                          f"retry in {retry} s", headers={"Retry-After": str(retry)})
    return key  # type: ignore[no-any-return]


async def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
    header_key: Annotated[str | None, Depends(api_key_header)],
) -> Caller:
    """The authenticated caller of a request (the guard has checked the key before the body was read).

    ``credentials`` and ``header_key`` are declared for the OpenAPI document; the key itself comes
    from the guard, or is checked here for a route outside its reach.
    """
    state = request.app.state.bunko
    key = request.scope.get("state", {}).get(KEY_STATE)
    if key is None:
        key = await authenticate_headers(state, request.scope["headers"])
        request.scope.setdefault("state", {})[KEY_STATE] = key
    store = state.store_for(key.tenant)
    return Caller(key, store, Tenant(state.engine, UserStore(store, key.user_id)))  # type: ignore[arg-type]


CallerDep = Annotated[Caller, Depends(caller)]
