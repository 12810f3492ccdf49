"""Everyday management commands: ``bunko collections [list|delete]``, ``bunko documents show`` and
``bunko admin tenants list|delete``.

Attached to the ``bunko`` group by :func:`attach` (one line in :mod:`bunko.cli`).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import click
from rich.markup import escape

from .cli import _emit_json, _engine, _fail, _records, handle_errors, stderr, stdout
from .config import DEFAULT_TENANT

# The options as bunko.cli words them (declared here: this module is imported by bunko.cli itself).
tenant_option = click.option("--tenant", "-t", default=DEFAULT_TENANT, show_default=True, envvar="BUNKO_TENANT",
                             help="Tenant whose data to use (env BUNKO_TENANT).")
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")
yes_option = click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")


def _confirm(question: str, yes: bool, as_json: bool) -> None:
    """Ask on a terminal; without one (or with --json) refuse unless --yes was given."""
    if yes:
        return
    if as_json or not stderr.is_terminal:
        _fail("ConfirmationRequired", f"{question} Nothing was deleted: add --yes to confirm", as_json)
    if not click.confirm(question, default=False, err=True):
        _fail("Aborted", "nothing was deleted", as_json)


def _inherited(ctx: click.Context, tenant: str, as_json: bool) -> tuple[str, bool]:
    """``bunko collections -t acme --json delete x`` means tenant acme and JSON, as the subcommand's own
    options would: a subcommand option left at its default takes the group's."""
    parent = ctx.parent.params if ctx.parent is not None else {}
    if ctx.get_parameter_source("tenant") == click.core.ParameterSource.DEFAULT and parent.get("tenant"):
        tenant = parent["tenant"]
    return tenant, as_json or bool(parent.get("as_json"))


# -- collections ---------------------------------------------------------------------------------
@click.group("collections", invoke_without_command=True)
@tenant_option
@json_option
@click.pass_context
def collections(ctx: click.Context, tenant: str, as_json: bool) -> None:
    """List the tenant's collections (`bunko collections`), or delete one."""
    if ctx.invoked_subcommand is None:
        ctx.invoke(collections_list, tenant=tenant, as_json=as_json)


@collections.command("list")
@tenant_option
@json_option
@click.pass_context
@handle_errors
def collections_list(ctx: click.Context, tenant: str, as_json: bool) -> None:
    """List the tenant's collections with their document and chunk counts."""
    tenant, as_json = _inherited(ctx, tenant, as_json)
    items = _engine(ctx).tenant(tenant).collections()
    if as_json:
        _emit_json({"collections": [c.to_dict() for c in items]})
        return
    if not items:
        stderr.print(f"tenant '{escape(tenant)}' has no collections yet; run: bunko ingest PATH")
    for c in items:
        stdout.print(f"{escape(c.name)}  {c.document_count} documents, {c.chunk_count} chunks  "
                     f"[dim]{c.embedding_provider}:{c.embedding_model} ({c.dimension}-d), analyzer {c.analyzer}[/]")


@collections.command("delete")
@click.argument("name")
@tenant_option
@yes_option
@json_option
@click.pass_context
@handle_errors
def collections_delete(ctx: click.Context, name: str, tenant: str, yes: bool, as_json: bool) -> None:
    """Delete collection NAME with all its documents, chunks and vectors (asks first; --yes to skip)."""
    tenant, as_json = _inherited(ctx, tenant, as_json)
    scope = _engine(ctx).tenant(tenant)
    existing = scope.store.get_collection(name)  # a missing collection fails before the question
    _confirm(f"Delete collection '{name}' of tenant '{tenant}' ({existing.document_count} documents, "
             f"{existing.chunk_count} chunks)?", yes, as_json)
    deleted = scope.delete_collection(name)
    if as_json:
        _emit_json({"deleted": True, "collection": name, "tenant": tenant, "documents": deleted.document_count,
                    "chunks": deleted.chunk_count})
    else:
        stderr.print(f"deleted collection '{escape(name)}' ({deleted.document_count} documents, "
                     f"{deleted.chunk_count} chunks)")


# -- documents show ------------------------------------------------------------------------------
@click.command("show")
@click.argument("document_id", metavar="ID")
@click.option("--collection", "-c", default=None, help="Only look in this collection (default: any).")
@tenant_option
@json_option
@click.pass_context
@handle_errors
def documents_show(ctx: click.Context, document_id: str, collection: str | None, tenant: str,
                   as_json: bool) -> None:
    """Show one document: its collection, source, version, chunk count, times and metadata."""
    document = _engine(ctx).tenant(tenant).document(document_id, collection)
    data = document.details()
    if as_json:
        _emit_json(data)
        return
    for key in ("id", "name", "collection", "source", "version", "chunks", "content_hash", "created_at",
                "updated_at"):
        stdout.print(f"{key + ':':<13} {escape(str(data[key]))}")
    stdout.print("metadata:")
    for key, value in sorted(document.metadata.items()):
        stdout.print(f"  {escape(str(key))}: {escape(str(value))}")


# -- admin tenants -------------------------------------------------------------------------------
@click.command("list")
@json_option
@click.pass_context
@handle_errors
def tenants_list(ctx: click.Context, as_json: bool) -> None:
    """List every tenant with its collections, documents and active API keys (on PostgreSQL: the owner login)."""
    tenants = _records(ctx).list_tenants()
    if as_json:
        _emit_json({"tenants": [t.to_dict() for t in tenants]})
        return
    if not tenants:
        stderr.print("no tenants yet")
    for t in tenants:
        stdout.print(f"{escape(t.name)}  {t.collections} collections, {t.documents} documents, "
                     f"{t.api_keys} active keys  [dim]created {t.created_at}[/]")


@click.command("delete")
@click.argument("name")
@yes_option
@json_option
@click.pass_context
@handle_errors
def tenants_delete(ctx: click.Context, name: str, yes: bool, as_json: bool) -> None:
    """Delete tenant NAME: every collection, document, job, log, usage record, conversation, memory and
    API key it has, and the tenant itself (asks first; --yes to skip). Spooled uploads go too."""
    records = _records(ctx)
    if not records.tenant_exists(name):
        _fail("NotFoundError", f"tenant {name!r} does not exist", as_json)
    _confirm(f"Delete tenant '{name}' and all of its data and API keys?", yes, as_json)
    erasure = records.delete_tenant(name)
    _remove_spooled(ctx, name)
    counts: dict[str, Any] = {f.name: getattr(erasure, f.name) for f in fields(erasure) if f.name != "job_ids"}
    if as_json:
        _emit_json({"deleted": True, "tenant": name, "removed": counts})
    else:
        stderr.print(f"deleted tenant '{escape(name)}': "
                     + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items()))


def _remove_spooled(ctx: click.Context, tenant: str) -> None:
    """The tenant's uploads waiting in the spool folder (files only: their jobs went with the data)."""
    from .config import Settings
    from .worker import remove_tenant_files, spool_root

    obj = ctx.find_root().obj
    settings = Settings.resolve(obj.get("db"), home=obj.get("home"), config=obj.get("config"))
    remove_tenant_files(spool_root(settings), tenant)


def attach(group: click.Group) -> None:
    """Add ``collections`` and ``documents show`` and ``admin tenants list|delete`` to the ``bunko`` group."""
    group.add_command(collections)
    documents = group.commands["documents"]
    assert isinstance(documents, click.Group)
    documents.add_command(documents_show)
    admin = group.commands["admin"]
    assert isinstance(admin, click.Group)
    tenants = admin.commands["tenants"]
    assert isinstance(tenants, click.Group)
    tenants.add_command(tenants_list)
    tenants.add_command(tenants_delete)
