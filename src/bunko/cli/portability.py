"""``bunko export``, ``bunko import`` and ``bunko copy``: move a tenant between stores (:mod:`bunko.portability`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from rich.markup import escape

from ..portability import KINDS, Summary, copy_tenant, export_tenant, holds_data, import_tenant, read_manifest
from ..progress import Reporter
from ..stores import open_backend
from .common import (
    confirm,
    emit_json,
    get_engine,
    json_command,
    quiet_option,
    reporter,
    stdout,
    tenant_option,
    yes_option,
)


def _progress(bar: Reporter, verb: str, total: int | None = None) -> Callable[[str, int], None]:
    """A progress callback (kind, records of that kind so far) feeding ``bar``, counting all records."""
    counts: dict[str, int] = {}
    bar.start(verb, total, unit="records")

    def report(kind: str, done: int) -> None:
        counts[kind] = done
        bar.update(sum(counts.values()))

    return report


def _report(summary: Summary, verb: str, as_json: bool) -> None:
    if as_json:
        emit_json(summary.to_dict())
        return
    c = summary.counts
    stdout.print(f"{verb} tenant '{escape(summary.tenant)}': {c['collections']} collections, {c['documents']} "
                 f"documents ({summary.chunks_in_documents} chunks), {c['chunks']} records without a document, "
                 f"{c['conversations']} conversations"
                 + (f" ({summary.skipped_conversations} already there)" if summary.skipped_conversations else ""))
    if summary.path:
        stdout.print(f"  folder: {escape(summary.path)}")
    stdout.print(f"  digest: {summary.digest}" + ("  [green]verified[/]" if summary.verified else ""))


@click.command("export")
@tenant_option()
@click.option("--output", "-o", required=True, type=click.Path(path_type=Path),
              help="A new (or empty) folder to write the export to.")
@click.option("--collection", "-c", "collections", multiple=True,
              help="Export only this collection (repeatable; default: all of the tenant's collections).")
@quiet_option()
@json_command()
def export_command(ctx: click.Context, tenant: str, output: Path, collections: tuple[str, ...], quiet: bool,
                   as_json: bool) -> None:
    """Write a tenant's collections, documents, vectors and conversations to a folder.

    The folder holds JSON Lines files and a manifest with a SHA-256 per file; `bunko import`
    reads it into any store without re-embedding (format: docs/EXPORT.md).
    """
    store = get_engine(ctx).backend.for_tenant(tenant)
    with reporter(ctx, quiet) as bar:
        summary = export_tenant(store, output, collections=list(collections) or None,
                                progress=_progress(bar, "export"))
    _report(summary, "exported", as_json)


@click.command("import")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--tenant", "-t", default=None,
              help="Tenant to import into. Without it, the tenant the export names, after a confirmation "
                   "(or --yes) when that tenant already holds data.")
@yes_option("Import into the tenant the export names even when it holds data, without asking.")
@quiet_option()
@json_command()
def import_command(ctx: click.Context, path: Path, tenant: str | None, yes: bool, quiet: bool, as_json: bool) -> None:
    """Read an export made by `bunko export` into the store of --db: all of it, or nothing.

    Every file's checksum and the digest of its records are checked before anything is written;
    afterwards the imported data is read back and compared with the export's digest. When a check
    or a write fails, what was written is taken back.
    """
    manifest = read_manifest(path)
    store = get_engine(ctx).backend.for_tenant(tenant or str(manifest["tenant"]))
    if tenant is None and holds_data(store):
        confirm(f"The export names tenant '{store.tenant}', which already holds data; import into it?", yes, as_json,
                refused="nothing was imported (name the target with --tenant)")
    counts = manifest.get("counts") or {}
    total = sum(int(counts.get(kind, 0)) for kind in KINDS)
    with reporter(ctx, quiet) as bar:
        summary = import_tenant(store, path, progress=_progress(bar, "import", total))
    _report(summary, "imported into", as_json)


@click.command("copy")
@tenant_option()
@click.option("--to", "target_url", required=True, metavar="URL",
              help="The store to copy to, e.g. postgresql://user@host/db.")
@click.option("--to-tenant", default=None, help="Tenant to copy into (default: the same name).")
@click.option("--collection", "-c", "collections", multiple=True,
              help="Copy only this collection (repeatable; default: all).")
@quiet_option()
@json_command()
def copy_command(ctx: click.Context, tenant: str, target_url: str, to_tenant: str | None,
                 collections: tuple[str, ...], quiet: bool, as_json: bool) -> None:
    """Copy a tenant from the store of --db to another store, vectors as they are (no re-embedding).

    For example, move from the embedded store to PostgreSQL:
    bunko --db sqlite:///bunko.db copy --tenant acme --to postgresql://bunko@db/bunko
    """
    engine = get_engine(ctx)
    target = open_backend(target_url, engine.settings)
    try:
        with reporter(ctx, quiet) as bar:
            summary: Any = copy_tenant(engine.backend.for_tenant(tenant), target.for_tenant(to_tenant or tenant),
                                       collections=list(collections) or None, progress=_progress(bar, "copy"))
    finally:
        target.close()
    _report(summary, "copied into", as_json)
