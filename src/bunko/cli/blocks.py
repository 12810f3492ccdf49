"""``bunko blocks list`` and ``bunko workflow run``: the blocks and workflows from the command line.

``bunko workflow run FILE [--input JSON] [--tenant T] [--json]`` runs a JSON or YAML workflow in
one tenant and prints ``{"workflow", "steps", "output"}``; a failing step exits 1 with
``{"error": {"code", "step", "block", "message"}, "steps": [...]}`` (``--json``) or one line on stderr.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import click

from ..blocks.errors import BlockError, BlockInputError
from .common import EXIT_ERROR, emit_json, get_engine, handle_errors, json_command, json_option, tenant_option


@click.group("blocks")
def blocks_command() -> None:
    """List the building blocks workflows are made of, and their config schemas."""


@blocks_command.command("list")
@json_option("Print every block with its config schema as JSON.")
@handle_errors
def blocks_list(as_json: bool) -> None:
    """Every block: name, category, description and config fields (with --json the whole config schema)."""
    from ..blocks.registry import describe_blocks

    entries = describe_blocks()
    if as_json:
        emit_json({"blocks": entries})
        return
    width = max(len(e["name"]) for e in entries)
    for entry in entries:
        mark = "  (addition)" if entry["addition"] else ""
        click.echo(f"{entry['name']:<{width}}  {entry['category']:<5}  {entry['description']}{mark}")
        fields = entry["config_schema"].get("properties", {})
        shown = [f"{name} ({spec.get('type', 'any')}" + (f", default {json.dumps(spec['default'], ensure_ascii=False)}"
                                                          if "default" in spec else "") + ")"
                 for name, spec in fields.items()]
        click.echo(f"{'':<{width}}  config: {', '.join(shown) or '(none)'}")


@click.group("workflow")
def workflow_command() -> None:
    """Run workflows of blocks."""


def _input(value: str | None) -> dict[str, Any] | None:
    if value is None:
        return None
    text = value
    if value.startswith("@"):
        try:
            text = Path(value[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise BlockInputError("INPUT_001", f"--input {value}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except ValueError as exc:
        raise BlockInputError("INPUT_001", f"--input is not valid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise BlockInputError("INPUT_001", "--input must be a JSON object")
    return data


def _print_output(output: dict[str, Any]) -> None:
    if isinstance(output.get("answer"), str):
        click.echo(output["answer"])
        for source in output.get("sources") or []:
            meta = source.get("metadata") or {}
            where = meta.get("filename") or meta.get("source") or source.get("id")
            click.echo(f"  [{source.get('index')}] {where}  (score {source.get('score', 0):.3f})")
        return
    click.echo(json.dumps(output, ensure_ascii=False, indent=2))


@workflow_command.command("run")
@click.argument("file", type=click.Path(exists=True, dir_okay=False))
@click.option("--input", "input_json", default=None, metavar="JSON",
              help="The workflow input: a JSON object, or @FILE holding one (default: {}).")
@tenant_option("Tenant the workflow runs in; every block works in this tenant only (env BUNKO_TENANT).")
@json_command("Print {workflow, steps, output} as JSON.")
def workflow_run(ctx: click.Context, file: str, input_json: str | None, tenant: str, as_json: bool) -> None:
    """Run the workflow in FILE (JSON or YAML) in one tenant."""
    from ..blocks.ctx import aclose_clients

    data = _input(input_json)
    engine = get_engine(ctx)
    scope = engine.tenant(tenant)

    async def run() -> Any:
        try:
            return await scope.arun_workflow(file, data)
        finally:
            await aclose_clients(engine)
            await engine.aclose_clients()

    try:
        result = asyncio.run(run())
    except BlockError as exc:
        if as_json:
            emit_json({"error": exc.to_dict(), "steps": exc.steps})
        else:
            where = f"step {exc.step} ({exc.block}): " if exc.step else ""
            click.echo(f"error: [{exc.code}] {where}{exc.message}", err=True)
        sys.exit(EXIT_ERROR)
    if as_json:
        emit_json(result.to_dict())
        return
    for step in result.steps:
        click.echo(f"{step['id']} ({step['block']}): {step['status']} in {step['duration_ms']:.1f} ms", err=True)
    _print_output(result.output)
