"""The HTTP admin API: tenants and their quotas, for the operator (``/api/v1/admin/...``, issue 26).

Every route takes an operator key (``bunko admin operator-keys create``; see :mod:`bunko.server.auth`), never a
tenant's key, an admin one neither: a tenant cannot raise its own quota. An operator key reads what a tenant
holds as counts only (its quota beside its usage), never its documents, searches or logs.
"""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi import Path as PathParam

from ..errors import TenantNotFoundError
from ..stores.quotas import Quota
from . import schemas
from .auth import OperatorDep

router = APIRouter(prefix="/api/v1/admin", tags=["admin"])
TenantParam = Annotated[str, PathParam(pattern=schemas.NAME_PATTERN, description="the tenant's name")]
ADMIN_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": schemas.ProblemDocument, "content": {"application/problem+json": {}}}
    for code in (401, 403, 404, 422)
}


def _state(request: Request) -> Any:
    return request.app.state.bunko


def _status(request: Request, tenant: str) -> schemas.TenantQuotaResponse:
    """The tenant's quota beside its usage (``TenantNotFoundError`` for an unknown tenant)."""
    state = _state(request)
    if not state.records.tenant_exists(tenant):
        raise TenantNotFoundError(f"tenant {tenant!r} does not exist")
    status = state.records.quota_status(state.engine.backend.for_tenant(tenant))
    return schemas.TenantQuotaResponse(
        tenant=tenant, quota=schemas.QuotaLimits.of(status.quota.to_dict()),
        quotas={name: schemas.QuotaFigure(**figures) for name, figures in status.to_dict().items()})


@router.get("/tenants", response_model=schemas.OperatorTenantList, responses=ADMIN_RESPONSES,
            summary="Every tenant with its quota (operator key)")
async def list_tenants(request: Request, operator: OperatorDep) -> schemas.OperatorTenantList:
    """Name, creation time and quota of each registered tenant, by name."""
    tenants = await asyncio.to_thread(_state(request).records.operator_tenants, operator)
    return schemas.OperatorTenantList(tenants=[
        schemas.OperatorTenant(name=t.name, createdAt=t.created_at, quota=schemas.QuotaLimits.of(t.quota.to_dict()))
        for t in tenants])


@router.get("/tenants/{name}/quota", response_model=schemas.TenantQuotaResponse, responses=ADMIN_RESPONSES,
            summary="A tenant's quota beside its usage (operator key)")
async def get_quota(request: Request, operator: OperatorDep, name: TenantParam) -> schemas.TenantQuotaResponse:
    """The limits in force (``quota``, the shape ``PUT`` takes) and each beside the usage (``quotas``)."""
    return await asyncio.to_thread(_status, request, name)


@router.put("/tenants/{name}/quota", response_model=schemas.TenantQuotaResponse, responses=ADMIN_RESPONSES,
            summary="Replace a tenant's quota (operator key)")
async def put_quota(request: Request, operator: OperatorDep, name: TenantParam,
                    body: schemas.QuotaLimits) -> schemas.TenantQuotaResponse:
    """Every quota as given; a field null or absent means no limit. Applies to the tenant's next write
    (its requests-per-minute quota within 5 seconds)."""
    records = _state(request).records
    await asyncio.to_thread(records.operator_set_quota, operator, name, Quota(**body.limits()))
    return await asyncio.to_thread(_status, request, name)


@router.patch("/tenants/{name}/quota", response_model=schemas.TenantQuotaResponse, responses=ADMIN_RESPONSES,
              summary="Change some of a tenant's quotas (operator key)")
async def patch_quota(request: Request, operator: OperatorDep, name: TenantParam,
                      body: schemas.QuotaLimits) -> schemas.TenantQuotaResponse:
    """The fields given change (null: no limit); the others stay as they are."""
    records = _state(request).records

    def change() -> None:
        current = next((t.quota for t in records.operator_tenants(operator) if t.name == name), None)
        if current is None:
            raise TenantNotFoundError(f"tenant {name!r} does not exist")
        given = body.limits()
        named = body.named()
        records.operator_set_quota(operator, name, current.changed(
            {k: v for k, v in given.items() if k in named and v is not None},
            {k for k in named if given[k] is None}))

    await asyncio.to_thread(change)
    return await asyncio.to_thread(_status, request, name)


__all__ = ["router"]
