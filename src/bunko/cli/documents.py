"""``bunko documents list|show|delete`` and ``bunko collections [list|delete]``: what a tenant holds."""

from __future__ import annotations

import sys

import click
from rich.markup import escape

from .common import (
    EXIT_ERROR,
    collection_option,
    confirm,
    emit_json,
    get_engine,
    json_command,
    json_option,
    stderr,
    stdout,
    tenant_option,
    yes_option,
)


# -- documents ------------------------------------------------------------------------------------
@click.group()
def documents() -> None:
    """List, show or delete documents, and see which files failed to ingest."""


@documents.command("list")
@collection_option()
@tenant_option()
@click.option("--limit", type=click.IntRange(1), default=None, help="At most this many documents.")
@click.option("--offset", type=click.IntRange(0), default=0, help="Skip this many documents.")
@click.option("--failed", is_flag=True,
              help="List the files and URLs whose last ingest failed, with the reason, instead (kept until "
                   "one is ingested; with --collection given, only that collection's).")
@json_command()
def documents_list(ctx: click.Context, collection: str, tenant: str, limit: int | None, offset: int, failed: bool,
                   as_json: bool) -> None:
    """List the documents of a collection (or, with --failed, what failed to go in).

    A JSON Lines file (or JSON array) gives one document per record; each is shown as
    FILE#INDEX with its title, name or id field when it has one.
    """
    scope = get_engine(ctx).tenant(tenant)
    if failed:
        given = ctx.get_parameter_source("collection") != click.core.ParameterSource.DEFAULT
        failures = scope.ingest_failures(collection if given else None)[offset:None if limit is None
                                                                        else offset + limit]
        if as_json:
            emit_json({"failed": [f.to_dict() for f in failures]})
            return
        for f in failures:
            again = f" ({f.attempts} attempts)" if f.attempts > 1 else ""
            stdout.print(f"{escape(f.collection)}  {escape(f.source)}  {f.failed_at}{again}\n"
                         f"    {escape(f.error_type)}: {escape(f.message)}")
        if not failures:
            stderr.print("no failed ingests recorded")
        return
    items = scope.documents(collection, limit=limit, offset=offset)
    if as_json:
        emit_json({"documents": [{**d.to_dict(), "name": d.name, "version": d.version} for d in items]})
        return
    for d in items:
        version = f", version {d.version}" if d.version > 1 else ""
        stdout.print(f"{d.id}  {escape(d.name)}  ({d.chunks} chunks{version})")
    if not items:
        stderr.print("no documents")


@documents.command("delete")
@click.argument("document_ids", nargs=-1, required=True, metavar="ID...")
@click.option("--collection", "-c", default=None, help="Only delete from this collection (default: any).")
@tenant_option()
@json_command()
def documents_delete(ctx: click.Context, document_ids: tuple[str, ...], collection: str | None, tenant: str,
                     as_json: bool) -> None:
    """Delete documents (and their chunks and vectors) by id."""
    scope = get_engine(ctx).tenant(tenant)
    deleted = scope.delete_documents(list(document_ids), collection)
    missing = len(set(document_ids)) - deleted
    if as_json:
        emit_json({"deleted": deleted, "missing": missing})
    else:
        stderr.print(f"deleted {deleted} document(s)")
    if missing:
        if not as_json:
            stderr.print(f"[red]error:[/] {missing} id(s) not found in tenant '{escape(tenant)}'")
        sys.exit(EXIT_ERROR)


@documents.command("show")
@click.argument("document_id", metavar="ID")
@click.option("--collection", "-c", default=None, help="Only look in this collection (default: any).")
@tenant_option()
@json_command()
def documents_show(ctx: click.Context, document_id: str, collection: str | None, tenant: str,
                   as_json: bool) -> None:
    """Show one document: its collection, source, version, chunk count, times and metadata."""
    document = get_engine(ctx).tenant(tenant).document(document_id, collection)
    data = document.details()
    if as_json:
        emit_json(data)
        return
    for key in ("id", "name", "collection", "source", "version", "chunks", "content_hash", "created_at",
                "updated_at"):
        stdout.print(f"{key + ':':<13} {escape(str(data[key]))}")
    stdout.print("metadata:")
    for key, value in sorted(document.metadata.items()):
        stdout.print(f"  {escape(str(key))}: {escape(str(value))}")


# -- collections ----------------------------------------------------------------------------------
def _inherited(ctx: click.Context, tenant: str, as_json: bool) -> tuple[str, bool]:
    """``bunko collections -t acme --json delete x`` means tenant acme and JSON, as the subcommand's own
    options would: a subcommand option left at its default takes the group's."""
    parent = ctx.parent.params if ctx.parent is not None else {}
    if ctx.get_parameter_source("tenant") == click.core.ParameterSource.DEFAULT and parent.get("tenant"):
        tenant = parent["tenant"]
    return tenant, as_json or bool(parent.get("as_json"))


@click.group("collections", invoke_without_command=True)
@tenant_option()
@json_option()
@click.pass_context
def collections(ctx: click.Context, tenant: str, as_json: bool) -> None:
    """List the tenant's collections (`bunko collections`), or delete one."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(collections_list, tenant=tenant, as_json=as_json)


@collections.command("list")
@tenant_option()
@json_command()
def collections_list(ctx: click.Context, tenant: str, as_json: bool) -> None:
    """List the tenant's collections with their document and chunk counts."""
    tenant, as_json = _inherited(ctx, tenant, as_json)
    items = get_engine(ctx).tenant(tenant).collections()
    if as_json:
        emit_json({"collections": [c.to_dict() for c in items]})
        return
    if not items:
        stderr.print(f"tenant '{escape(tenant)}' has no collections yet; run: bunko ingest PATH")
    for c in items:
        stdout.print(f"{escape(c.name)}  {c.document_count} documents, {c.chunk_count} chunks  "
                     f"[dim]{c.embedding_provider}:{c.embedding_model} ({c.dimension}-d), analyzer {c.analyzer}[/]")


@collections.command("delete")
@click.argument("name")
@tenant_option()
@yes_option()
@json_command()
def collections_delete(ctx: click.Context, name: str, tenant: str, yes: bool, as_json: bool) -> None:
    """Delete collection NAME with all its documents, chunks and vectors (asks first; --yes to skip)."""
    tenant, as_json = _inherited(ctx, tenant, as_json)
    scope = get_engine(ctx).tenant(tenant)
    existing = scope.store.get_collection(name)  # a missing collection fails before the question
    confirm(f"Delete collection '{name}' of tenant '{tenant}' ({existing.document_count} documents, "
             f"{existing.chunk_count} chunks)?", yes, as_json)
    deleted = scope.delete_collection(name)
    if as_json:
        emit_json({"deleted": True, "collection": name, "tenant": tenant, "documents": deleted.document_count,
                    "chunks": deleted.chunk_count})
    else:
        stderr.print(f"deleted collection '{escape(name)}' ({deleted.document_count} documents, "
                     f"{deleted.chunk_count} chunks)")
