"""Workflows: named steps of blocks, run in a tenant scope.

A workflow is a JSON or YAML document::

    name: ingest
    steps:
      - id: load                       # optional; default: the block name (made unique)
        block: doc-loader
        config: {source_type: text}
      - block: text-splitter           # input: the previous step's output
        config: {chunk_size: 500, chunk_overlap: 50}
      - block: vector-upsert
        input: {documents: $text-splitter.documents, collection: $input.collection}

By default a step's input is the previous step's output (the first step's is the workflow's
input). ``input`` takes another step's whole output by name (``input: load``), the workflow
input (``input: $input``), or an object whose ``$``-strings are references
(``$load.documents``, ``$input.collection``) and whose other values are taken as written; a
reference may name only the workflow input or an earlier step.

:func:`arun` checks the whole spec first (shape, block names, every config against its block's
schema, references), so a bad workflow fails before any step writes anything, then runs the
steps in order, each with a ``ctx`` bound to the tenant scope it was given (see :mod:`.ctx`) and
its usage recorded in that tenant's records, tagged with the workflow and step. The result is
``{"workflow", "steps": [{"id", "block", "status", "duration_ms"}], "output"}``; a failure raises a
:class:`~.errors.BlockError` naming the step and block, with the step records so far.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import usage as metering
from ..errors import BunkoError, UnknownProviderError
from ..scope import EngineServices, TenantScope
from .base import check_config, field_path, tenant_key
from .ctx import BlockContext, ExecutionContext, StepRecorder
from .errors import BlockError, BlockInputError, StepError, WorkflowError
from .registry import get_block

WORKFLOW_INPUT = "input"
STEP_ID = r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$"
WORKFLOW_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["steps"],
    "properties": {
        "name": {"type": "string", "minLength": 1},
        "description": {"type": "string"},
        "steps": {"type": "array", "minItems": 1, "items": {
            "type": "object",
            "additionalProperties": False,
            "required": ["block"],
            "properties": {
                "id": {"type": "string", "pattern": STEP_ID, "not": {"const": WORKFLOW_INPUT}},
                "block": {"type": "string", "minLength": 1},
                "description": {"type": "string"},
                "config": {"type": "object"},
                "input": {"type": ["string", "object"]},
            },
        }},
    },
}


@dataclass(slots=True)
class Step:
    """One checked step: its id, block, config (defaults filled in) and input reference."""

    id: str
    block: str
    config: dict[str, Any]
    input: str | dict[str, Any] | None
    runner: Any = field(repr=False, default=None)


@dataclass(slots=True)
class Workflow:
    """A checked workflow, ready to run."""

    name: str
    steps: list[Step]

    @classmethod
    def parse(cls, spec: Mapping[str, Any] | str | os.PathLike[str]) -> Workflow:
        """Check ``spec`` (a dict, or the path of a JSON/YAML file) and build the workflow."""
        data = load_spec(spec) if isinstance(spec, str | os.PathLike) else spec
        from jsonschema import Draft202012Validator

        if not isinstance(data, Mapping):
            raise WorkflowError("WORKFLOW_001", "a workflow must be an object with steps")
        steps_given = data.get("steps")
        named = tenant_key({k: v for k, v in data.items() if k != "steps"}, "workflow") or next(
            (found for i, raw in enumerate(steps_given if isinstance(steps_given, list) else [])
             if isinstance(raw, Mapping)
             and (found := tenant_key({k: v for k, v in raw.items() if k != "config"}, f"workflow.steps[{i}]"))),
            None)  # a step's config is checked with its block, which names the step
        if named:
            raise WorkflowError("TENANT_001", f"{named}: a workflow cannot name a tenant; it runs in the tenant of "
                                              "the caller (the API key or --tenant)", path=named)
        errors = sorted(Draft202012Validator(WORKFLOW_SCHEMA).iter_errors(dict(data)),
                        key=lambda e: list(map(str, e.absolute_path)))
        if errors:
            path = field_path(errors[0].absolute_path, "workflow")
            raise WorkflowError("WORKFLOW_001", f"{path}: {errors[0].message}", path=path)
        raw_steps = data["steps"]
        blocks = [s["block"] for s in raw_steps]
        steps: list[Step] = []
        seen: set[str] = set()
        for index, raw in enumerate(raw_steps):
            block_name = raw["block"]
            step_id = raw.get("id") or (block_name if blocks.count(block_name) == 1 else f"{block_name}-{index + 1}")
            if step_id in seen:
                raise WorkflowError("WORKFLOW_001", f"workflow.steps[{index}].id: step id {step_id!r} is used twice",
                                    step=step_id, block=block_name, path=f"workflow.steps[{index}].id")
            try:
                runner = get_block(block_name)
            except UnknownProviderError as exc:
                raise WorkflowError("WORKFLOW_002", exc.message, step=step_id, block=block_name) from None
            try:
                config = check_config(runner, raw.get("config"))
            except BlockError as exc:
                raise exc.at(step_id, block_name) from None
            reference = raw.get("input")
            _check_references(reference, seen, f"workflow.steps[{index}].input", step_id, block_name)
            seen.add(step_id)
            steps.append(Step(step_id, block_name, config, reference, runner))
        return cls(str(data.get("name") or "workflow"), steps)


def load_spec(path: str | os.PathLike[str]) -> Any:
    """The workflow in a ``.json``, ``.yaml`` or ``.yml`` file (other names: JSON, else YAML)."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkflowError("WORKFLOW_001", f"cannot read the workflow file {file}: {exc.strerror or exc}") from None
    if file.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except ValueError as exc:
            raise WorkflowError("WORKFLOW_001", f"{file}: not valid JSON ({exc})") from None
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WorkflowError("WORKFLOW_001", f"{file}: not valid YAML ({exc})") from None


def _references(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [v for v in value.values() if isinstance(v, str) and v.startswith("$")]
    return []


def _check_references(value: Any, earlier: set[str], path: str, step: str, block: str) -> None:
    for reference in _references(value):
        name = reference.removeprefix("$").split(".", 1)[0]
        if name != WORKFLOW_INPUT and name not in earlier:
            raise WorkflowError("WORKFLOW_001", f"{path}: {reference!r} names no earlier step (earlier: "
                                                f"{', '.join(sorted(earlier)) or 'none'}; the workflow input is "
                                                f"${WORKFLOW_INPUT})", step=step, block=block, path=path)


def _lookup(reference: str, outputs: Mapping[str, Any]) -> Any:
    name, _, rest = reference.removeprefix("$").partition(".")
    value = outputs[name]
    for part in rest.split(".") if rest else []:
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise BlockInputError("INPUT_001", f"{reference}: {part!r} is not in the output of {name!r}")
    return value


def _step_input(step: Step, previous: Any, outputs: Mapping[str, Any]) -> dict[str, Any]:
    if step.input is None:
        value = previous
    elif isinstance(step.input, str):
        value = _lookup(step.input, outputs)
    else:
        value = {k: _lookup(v, outputs) if isinstance(v, str) and v.startswith("$") else v
                 for k, v in step.input.items()}
    if not isinstance(value, dict):
        raise BlockInputError("INPUT_001", f"the step's input must be an object, got {type(value).__name__}")
    return value


@dataclass(slots=True)
class WorkflowResult:
    """What a run did: each step's status and time, and the last step's output."""

    workflow: str
    steps: list[dict[str, Any]]
    output: dict[str, Any]
    outputs: dict[str, Any] = field(default_factory=dict, repr=False)  # every step's output, by id

    def to_dict(self) -> dict[str, Any]:
        """``{"workflow", "steps", "output"}``."""
        return {"workflow": self.workflow, "steps": self.steps, "output": self.output}


async def arun(tenant: TenantScope[EngineServices], spec: Mapping[str, Any] | str | os.PathLike[str] | Workflow,
               input: Mapping[str, Any] | None = None) -> WorkflowResult:
    """Run ``spec`` in ``tenant``'s scope with ``input`` as the first step's input."""
    workflow = spec if isinstance(spec, Workflow) else Workflow.parse(spec)
    if input is not None and not isinstance(input, Mapping):
        raise BlockInputError("INPUT_001", f"the workflow input must be an object, got {type(input).__name__}")
    outputs: dict[str, Any] = {WORKFLOW_INPUT: dict(input or {})}
    previous: Any = outputs[WORKFLOW_INPUT]
    records: list[dict[str, Any]] = []
    for index, step in enumerate(workflow.steps):
        record: dict[str, Any] = {"id": step.id, "block": step.block, "status": "running", "duration_ms": 0.0}
        records.append(record)
        meter = tenant.meter  # the tenant's records, with its user's id (Tenant.for_user)
        recorder = StepRecorder(meter.store, anonymize_queries=meter.anonymize_queries, workflow=workflow.name,
                                step=step.id, block=step.block, user_id=meter.user_id)
        ctx = BlockContext(ExecutionContext(tenant, workflow.name, step.id, step.block, recorder))
        started = time.perf_counter()
        try:
            with metering.recording(recorder):
                step_input = _step_input(step, previous, outputs)
                output = await step.runner.run(ctx, step_input, dict(step.config))
            if not isinstance(output, dict):
                raise BlockInputError("INPUT_001", f"block {step.block} returned {type(output).__name__}, not an "
                                                   "object")
        except BunkoError as exc:
            error = exc.at(step.id, step.block) if isinstance(exc, BlockError) else StepError.wrap(exc, step.id,
                                                                                                   step.block)
            record.update(status="failed", duration_ms=round((time.perf_counter() - started) * 1000, 2))
            records.extend({"id": s.id, "block": s.block, "status": "skipped", "duration_ms": 0.0}
                           for s in workflow.steps[index + 1:])
            error.steps = records
            raise error from (exc if error is not exc else exc.__cause__)
        finally:
            await recorder.aflush()
        record.update(status="completed", duration_ms=round((time.perf_counter() - started) * 1000, 2))
        outputs[step.id] = previous = output
    return WorkflowResult(workflow.name, records, previous, outputs)


__all__ = ["WORKFLOW_SCHEMA", "Step", "Workflow", "WorkflowResult", "arun", "load_spec"]
