"""The HTTP API of blocks and workflows: ``GET /api/v1/blocks``, ``POST /api/v1/workflows/run``.

The workflow runs in the tenant of the API key (R15), through the key's scope (usage is recorded
for the key's user). A failing step answers problem+json whose ``code`` is the step's error code
and whose ``error`` member is ``{"code", "step", "block", "message"}``, next to the step records.
The workflow travels in the body as an object; a server never reads a workflow file.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, Field

from ..blocks.errors import BlockError, StepError
from ..blocks.registry import describe_blocks
from . import schemas
from .auth import CallerDep
from .problems import Problem, status_of

logger = logging.getLogger(__name__)
router = APIRouter(prefix="/api/v1", tags=["workflows"])
PROBLEMS: dict[int | str, dict[str, Any]] = {
    code: {"model": schemas.ProblemDocument, "content": {"application/problem+json": {}}}
    for code in (401, 404, 409, 422, 429, 502)
}


class BlockInfo(BaseModel):
    """One block of the registry."""

    name: str
    category: str
    description: str
    config_schema: dict[str, Any]
    addition: bool = Field(description="true for a block that is not one of seed 000's seven")


class BlockList(BaseModel):
    """Every registered block."""

    blocks: list[BlockInfo]


class WorkflowRun(BaseModel):
    """A workflow to run and its input."""

    workflow: dict[str, Any] = Field(description="{name, steps: [{id?, block, config?, input?}]}")
    input: dict[str, Any] | None = Field(default=None, description="The first step's input")


class StepRecord(BaseModel):
    """What one step did."""

    id: str
    block: str
    status: str = Field(description="completed, failed or skipped")
    duration_ms: float


class WorkflowResponse(BaseModel):
    """The run: each step's status and time, and the last step's output."""

    workflow: str
    steps: list[StepRecord]
    output: dict[str, Any]


def problem(exc: BlockError) -> Problem:
    """The problem document of a failed run."""
    cause = exc.__cause__ if isinstance(exc, StepError) else None
    if cause is not None:
        status = status_of(cause)  # type: ignore[arg-type]
    else:
        status = 502 if exc.code == "PROVIDER_001" else 422
    error = exc.to_dict()
    if status >= 500 and status not in (502, 503, 504):
        logger.error("workflow step %s (%s) failed: %s: %s", exc.step, exc.block, exc.code, exc.message)
        error["message"] = "the server could not complete the step (its log has the details)"
    return Problem(status, exc.code, f"{exc.step or 'workflow'}: {error['message']}" if exc.step else error["message"],
                   extra={"error": error, "steps": exc.steps})


@router.get("/blocks", response_model=BlockList, responses=PROBLEMS, summary="The workflow blocks")
async def list_blocks(caller: CallerDep) -> BlockList:
    return BlockList(blocks=[BlockInfo(**entry) for entry in describe_blocks()])


@router.post("/workflows/run", response_model=WorkflowResponse, responses=PROBLEMS,
             summary="Run a workflow of blocks in the key's tenant")
async def run_workflow(caller: CallerDep, body: WorkflowRun) -> WorkflowResponse:
    try:
        result = await caller.scope.arun_workflow(body.workflow, body.input)
    except BlockError as exc:
        raise problem(exc) from None
    return WorkflowResponse(**result.to_dict())


__all__ = ["router"]
