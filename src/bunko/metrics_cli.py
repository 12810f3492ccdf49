"""``bunko stats [--json]``: the server's metrics without a server (R35).

Reads the figures that ``bunko serve``'s workers keep under ``$BUNKO_HOME/metrics`` (or
``PROMETHEUS_MULTIPROC_DIR``), the same ones ``GET /metrics`` answers, summed over the workers.
"""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from .cli import _emit_json, handle_errors, stderr, stdout


@click.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")
@click.pass_context
@handle_errors
def stats(ctx: click.Context, as_json: bool) -> None:
    """Request, search, provider, job and cache figures of the server under this BUNKO_HOME."""
    from . import metrics
    from .config import Settings

    obj = ctx.find_root().obj or {}
    home = Settings.resolve(obj.get("db"), home=obj.get("home"), config=obj.get("config")).home
    folder = metrics.metrics_dir(home)
    try:
        figures = metrics.snapshot(folder)
    except ImportError:
        raise click.ClickException('metrics need prometheus-client: pip install "bunko[server]"') from None
    if as_json:
        _emit_json({"metrics_dir": str(folder), "metrics": figures})
        return
    if not figures:
        stderr.print(f"no metrics under {escape(str(folder))}: `bunko serve` writes them there while it runs")
        return
    for name, rows in figures.items():
        table = Table(title=name, title_justify="left")
        table.add_column("labels")
        histogram = any("count" in r for r in rows)
        for column in (("count", "sum (s)", "mean (ms)") if histogram else ("value",)):
            table.add_column(column, justify="right")
        for row in rows:
            labels = ", ".join(f"{k}={v}" for k, v in row["labels"].items())
            cells: list[Any]
            if histogram:
                count, total = row.get("count", 0), row.get("sum", 0.0)
                cells = [str(count), f"{total:.3f}", f"{total / count * 1000:.1f}" if count else "-"]
            else:
                cells = [f"{row.get('value', 0):g}"]
            table.add_row(escape(labels), *cells)
        stdout.print(table)
