"""``bunko usage`` and ``bunko stats``: what a tenant used, and what the server counted.

``usage`` reads a tenant's usage records from the store. ``stats`` (R35) reads the figures that ``bunko
serve``'s workers keep under ``$BUNKO_HOME/metrics`` (or ``PROMETHEUS_MULTIPROC_DIR``), the same ones
``GET /metrics`` answers, summed over the workers, without a server.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from .common import emit_json, get_engine, json_command, resolve_settings, stderr, stdout, tenant_option


def parse_since(value: str | None) -> datetime | None:
    """``7d``, ``24h``, ``30m`` (ago) or an ISO date/time (UTC unless it says otherwise)."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*([dhm])\s*", value)
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        delta = {"d": timedelta(days=amount), "h": timedelta(hours=amount), "m": timedelta(minutes=amount)}[unit]
        return datetime.now(UTC) - delta
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: use 7d, 24h, 30m or a date like 2026-11-01") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@click.command()
@tenant_option()
@click.option("--since", default=None, metavar="WHEN",
              help="Only usage since then: 7d, 24h, 30m, or an ISO date/time like 2026-11-01.")
@json_command()
def usage(ctx: click.Context, tenant: str, since: str | None, as_json: bool) -> None:
    """Summarise a tenant's usage: embedding and LLM tokens, searches and upserts, and each quota beside its usage."""
    start = parse_since(since)
    scope = get_engine(ctx).tenant(tenant)
    totals = scope.usage(start)
    quotas = scope.quota()
    if as_json:
        emit_json({"tenant": tenant, "since": start.isoformat() if start else None,
                   "usage": [t.to_dict() for t in totals], "quotas": quotas.to_dict()})
        return
    if not totals:
        stderr.print(f"no usage recorded for tenant '{escape(tenant)}'" + (f" since {start:%Y-%m-%d %H:%M} UTC"
                                                                          if start else ""))
    else:
        table = Table(title=f"usage of tenant '{escape(tenant)}'"
                      + (f" since {start:%Y-%m-%d %H:%M} UTC" if start else ""), title_justify="left")
        for name in ("operation", "provider", "model"):
            table.add_column(name, overflow="fold")
        for name in ("calls", "input tokens", "output tokens", "items", "avg ms"):
            table.add_column(name, justify="right")
        for t in totals:
            row = t.to_dict()
            table.add_row(escape(t.operation), escape(t.provider), escape(t.model), str(t.calls),
                          str(t.input_tokens), str(t.output_tokens), str(t.items), f"{row['latency_ms_avg']:.1f}")
        stdout.print(table)
    stdout.print(quota_table(tenant, quotas.to_dict()))


def quota_table(tenant: str, quotas: dict[str, dict[str, int | None]]) -> Table:
    """Each quota of a tenant beside its usage (now; uploads over the last 24 hours, requests this minute)."""
    table = Table(title=f"quotas of tenant '{escape(tenant)}'", title_justify="left")
    for name in ("quota", "usage", "limit"):
        table.add_column(name, justify="left" if name == "quota" else "right")
    for name, figures in quotas.items():
        limit = figures["limit"]
        table.add_row(name.replace("_", " "), str(figures["usage"]), "no limit" if limit is None else str(limit))
    return table


@click.command("stats")
@json_command()
def stats(ctx: click.Context, as_json: bool) -> None:
    """Request, search, provider, job and cache figures of the server under this BUNKO_HOME."""
    from .. import metrics

    home = resolve_settings(ctx).home
    folder = metrics.metrics_dir(home)
    try:
        figures = metrics.snapshot(folder)
    except ImportError:
        raise click.ClickException('metrics need prometheus-client: pip install "bunko[server]"') from None
    if as_json:
        emit_json({"metrics_dir": str(folder), "metrics": figures})
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
