"""API keys and per-key rate limits; the tenant of a request comes from its key alone (R15).

A key is sent as ``Authorization: Bearer bk_...`` or ``X-API-Key: bk_...``. The store keeps only
its SHA-256 (see :mod:`bunko.stores.service`). Each request counts against its key's sliding
one-minute window (:mod:`bunko.ratelimit`), in the store, so the limit holds across worker processes.

A request works in the key's tenant as the key's user: ``Tenant.for_user(key.user_id)`` (see
:mod:`bunko.scope`), whose usage records and search logs carry the user and whose conversations are
kept in the user's namespace (tenant keys share one).

An operator key (``bko_...``, ``bunko admin operator-keys create``) belongs to no tenant: it is accepted on the
HTTP admin API (``/api/v1/admin/...``: tenants and their quotas) and nowhere else, and no tenant key (an admin
key neither) is accepted there. Operator keys count against no rate limit.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer

from ..engine import Tenant
from ..stores.service import APIKey, OperatorKey, is_operator_key
from .problems import Problem

bearer = HTTPBearer(auto_error=False, description="An API key from `bunko admin keys create`.")
# Where the guard (bunko.server.guard) leaves the key it checked, in the ASGI scope's state.
KEY_STATE = "bunko_api_key"
OPERATOR_STATE = "bunko_operator_key"
ADMIN_PREFIX = "/api/v1/admin/"
api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="The same key, in its own header.")


@dataclass(slots=True)
class Caller:
    """Who is calling: the key's tenant, user and rights, and the tenant scope to work in."""

    key: APIKey
    scope: Tenant  # the key's tenant as the key's user works in it (Tenant.for_user)

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
    if is_operator_key(token):
        raise Problem(403, "FORBIDDEN", "an operator key manages tenants and their quotas (/api/v1/admin/...) only; "
                                        "it cannot read or change a tenant's data")
    if len(token) > 200:
        key = None
    else:
        key = await asyncio.to_thread(state.records.authenticate, token)
    if key is None:
        raise _invalid_key()
    if state.limiter.limit:
        decision = await asyncio.to_thread(state.limiter.check, key.id)
        if not decision.allowed:
            raise Problem(429, "RATE_LIMITED", decision.message(),
                          headers={"Retry-After": str(decision.retry_after)})
    tenant_decision = await asyncio.to_thread(state.limiter.check_tenant, key.tenant)
    if not tenant_decision.allowed:
        raise Problem(429, "QUOTA_EXCEEDED", tenant_decision.quota_message(),
                      headers={"Retry-After": str(tenant_decision.retry_after)},
                      extra={"quota": "requests_per_minute", "limit": tenant_decision.limit,
                             "usage": tenant_decision.used})
    return key


def _invalid_key() -> Problem:
    return Problem(401, "INVALID_API_KEY", "the API key is not valid or was revoked",
                   headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})


async def authenticate_operator_headers(state: Any, headers: list[tuple[bytes, bytes]]) -> OperatorKey:
    """The valid operator key of a request's headers; else 401 (no key, not a valid one) or 403 (a tenant's key)."""
    token = _token(headers)
    if not token:
        raise Problem(401, "UNAUTHENTICATED", "send an operator key: Authorization: Bearer <key> (or X-API-Key)",
                      headers={"WWW-Authenticate": "Bearer"})
    if len(token) > 200:
        raise _invalid_key()
    if not is_operator_key(token):
        if await asyncio.to_thread(state.records.authenticate, token) is None:
            raise _invalid_key()
        raise Problem(403, "FORBIDDEN", "the admin API needs an operator key (bunko admin operator-keys create); "
                                        "a tenant's keys, its admin keys too, cannot list tenants or set quotas")
    operator = await asyncio.to_thread(state.records.authenticate_operator, token)
    if operator is None:
        raise _invalid_key()
    return operator


async def operator(request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
                   header_key: Annotated[str | None, Depends(api_key_header)]) -> OperatorKey:
    """The operator key of a request to the admin API (checked by the guard before the body was read)."""
    found = request.scope.get("state", {}).get(OPERATOR_STATE)
    if found is None:
        found = await authenticate_operator_headers(request.app.state.bunko, request.scope["headers"])
        request.scope.setdefault("state", {})[OPERATOR_STATE] = found
    return found


OperatorDep = Annotated[OperatorKey, Depends(operator)]


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
    return Caller(key, state.tenant_for(key.tenant).for_user(key.user_id, admin=key.admin))


CallerDep = Annotated[Caller, Depends(caller)]
