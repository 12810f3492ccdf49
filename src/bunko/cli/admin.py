"""``bunko admin``: tenants (create, list, delete, quotas), the API keys of the HTTP API and operator keys.

These commands work on the store's service records, not through a tenant: on PostgreSQL they need the
owner login (the one that ran ``bunko db migrate``).
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import click
from rich.markup import escape

from ..stores.quotas import MAX_LIMIT, MAX_LIMITS, QUOTA_NAMES
from .common import (
    EXIT_ERROR,
    confirm,
    emit_json,
    fail,
    json_command,
    open_records,
    resolve_settings,
    stderr,
    stdout,
    yes_option,
)


@click.group()
def admin() -> None:
    """Operator commands: tenants and their quotas, API keys and operator keys of the HTTP API, store checks."""


@admin.group("tenants")
def admin_tenants() -> None:
    """Create, list and delete tenants, and set their quotas."""


@admin.group("keys")
def admin_keys() -> None:
    """Create, list and revoke API keys (stored hashed; a new key is shown once)."""


@admin.group("operator-keys")
def admin_operator_keys() -> None:
    """Create, list and revoke operator keys: the HTTP admin API's (tenants and their quotas), no tenant's."""


@admin_operator_keys.command("create")
@click.option("--label", default=None, help="A note to tell keys apart (who or what uses it).")
@json_command()
def operator_keys_create(ctx: click.Context, label: str | None, as_json: bool) -> None:
    """Create an operator key; it is printed once and only its hash is stored.

    It may list tenants and read and set their quotas over HTTP (/api/v1/admin/...), nothing else."""
    key, record = open_records(ctx).create_operator_key(label)
    if as_json:
        emit_json({"operator_key": key, **record.to_dict()})
    else:
        click.echo(key)
        stderr.print(f"operator key {record.id}" + (f" ({escape(label)})" if label else "")
                     + ": store it now, it is not shown again")


@admin_operator_keys.command("list")
@json_command()
def operator_keys_list(ctx: click.Context, as_json: bool) -> None:
    """List the operator keys (id, prefix, label, revoked), never the keys themselves."""
    keys = open_records(ctx).list_operator_keys()
    if as_json:
        emit_json({"operator_keys": [k.to_dict() for k in keys]})
        return
    if not keys:
        stderr.print("no operator keys yet")
    for k in keys:
        stdout.print(f"{k.id:>5}  {k.prefix}…  {escape(k.label or '-')}  {'revoked' if k.revoked else 'active'}  "
                     f"{k.created_at}")


@admin_operator_keys.command("revoke")
@click.argument("key_id", type=int)
@json_command()
def operator_keys_revoke(ctx: click.Context, key_id: int, as_json: bool) -> None:
    """Revoke operator key KEY_ID; requests with it are refused from then on."""
    if not open_records(ctx).revoke_operator_key(key_id):
        fail("NotFound", f"no active operator key with id {key_id}", as_json)
    if as_json:
        emit_json({"id": key_id, "revoked": True})
    else:
        stderr.print(f"operator key {key_id} revoked")


@admin_tenants.command("create")
@click.argument("name")
@json_command()
def admin_tenants_create(ctx: click.Context, name: str, as_json: bool) -> None:
    """Register tenant NAME (nothing happens if it exists)."""
    created = open_records(ctx).create_tenant(name)
    if as_json:
        emit_json({"tenant": name, "created": created})
    else:
        stderr.print(f"tenant '{escape(name)}' {'created' if created else 'already exists'}")


@admin_keys.command("create")
@click.option("--tenant", "-t", required=True, help="The tenant the key works in.")
@click.option("--user", "user_id", default=None,
              help="The user the key acts for (uploads made with it belong to this user).")
@click.option("--admin", "is_admin", is_flag=True, help="A tenant admin key: may erase any user's or all data.")
@json_command()
def admin_keys_create(ctx: click.Context, tenant: str, user_id: str | None, is_admin: bool, as_json: bool) -> None:
    """Create an API key; it is printed once and only its hash is stored."""
    key, record = open_records(ctx).create_api_key(tenant, user_id, admin=is_admin)
    if as_json:
        emit_json({"api_key": key, "tenant": tenant, "user": user_id, "admin": is_admin, "id": record.id})
    else:
        click.echo(key)
        stderr.print(f"key {record.id} for tenant '{escape(tenant)}'"
                     + (f", user '{escape(user_id)}'" if user_id else "") + (" (admin)" if is_admin else "")
                     + ": store it now, it is not shown again")


@admin_keys.command("list")
@click.option("--tenant", "-t", required=True, help="The tenant whose keys to list.")
@json_command()
def admin_keys_list(ctx: click.Context, tenant: str, as_json: bool) -> None:
    """List a tenant's keys (id, prefix, user, admin, revoked), never the keys themselves."""
    keys = open_records(ctx).list_api_keys(tenant)
    if as_json:
        emit_json({"keys": [k.to_dict() for k in keys]})
        return
    for k in keys:
        stdout.print(f"{k.id:>5}  {k.prefix}…  user={k.user_id or '-'}  admin={'yes' if k.admin else 'no'}  "
                     f"{'revoked' if k.revoked else 'active'}  {k.created_at}")


@admin_keys.command("revoke")
@click.argument("key_id", type=int)
@json_command()
def admin_keys_revoke(ctx: click.Context, key_id: int, as_json: bool) -> None:
    """Revoke key KEY_ID; requests with it are refused from then on."""
    if not open_records(ctx).revoke_api_key(key_id):
        fail("NotFound", f"no active key with id {key_id}", as_json)
    if as_json:
        emit_json({"id": key_id, "revoked": True})
    else:
        stderr.print(f"key {key_id} revoked")


@admin_tenants.command("list")
@json_command()
def tenants_list(ctx: click.Context, as_json: bool) -> None:
    """List every tenant with its collections, documents and active API keys (on PostgreSQL: the owner login)."""
    tenants = open_records(ctx).list_tenants()
    if as_json:
        emit_json({"tenants": [t.to_dict() for t in tenants]})
        return
    if not tenants:
        stderr.print("no tenants yet")
    for t in tenants:
        stdout.print(f"{escape(t.name)}  {t.collections} collections, {t.documents} documents, "
                     f"{t.api_keys} active keys  [dim]created {t.created_at}[/]")


def _limit(name: str) -> Any:
    return click.option(f"--{name.replace('_', '-')}", name, type=click.IntRange(0, MAX_LIMITS[name]), default=None,
                        metavar="N", help=QUOTA_HELP[name])


QUOTA_HELP = {
    "documents": "Documents the tenant may hold.",
    "chunks": "Chunks (records) the tenant may hold, uploads and upserts together.",
    "bytes": "Bytes of chunk text (UTF-8) the tenant may hold.",
    "upload_bytes_per_day": "Bytes of files the tenant may upload over HTTP in 24 hours.",
    "requests_per_minute": "HTTP requests per minute over all of the tenant's keys.",
}


QUOTA_CLI_NAMES = ("documents", "chunks", "bytes", "uploads-per-day", "requests-per-minute")


@admin_tenants.command("set-quota")
@click.argument("name")
@_limit("documents")
@_limit("chunks")
@_limit("bytes")
@click.option("--uploads-per-day", "upload_bytes_per_day", type=click.IntRange(0, MAX_LIMIT), default=None,
              metavar="N", help=QUOTA_HELP["upload_bytes_per_day"])
@_limit("requests_per_minute")
@click.option("--clear", "clear", multiple=True, type=click.Choice(QUOTA_CLI_NAMES),
              help="Remove this quota (no limit); may be given more than once.")
@json_command()
def tenants_set_quota(ctx: click.Context, name: str, clear: tuple[str, ...], as_json: bool,
                      **limits: int | None) -> None:
    """Set the quotas of tenant NAME (unset ones stay as they are; --clear removes one) and show them.

    Work that would pass a quota is refused before it starts with QUOTA_EXCEEDED (HTTP 413 for documents,
    chunks and bytes, 429 for uploads per day and requests per minute)."""
    records = open_records(ctx)
    cleared = {QUOTA_NAMES[QUOTA_CLI_NAMES.index(c)] for c in clear}
    both = cleared & {k for k, v in limits.items() if v is not None}
    if both:
        fail("ConfigError", f"quota {sorted(both)[0]} is both set and cleared", as_json)
    quota = records.set_quota(name, limits, cleared)
    if as_json:
        emit_json({"tenant": name, "quota": quota.to_dict()})
        return
    stderr.print(f"quotas of tenant '{escape(name)}':")
    for key, value in quota.to_dict().items():
        stdout.print(f"  {key.replace('_', ' ')}: {'no limit' if value is None else value}")


@admin_tenants.command("quota")
@click.argument("name")
@json_command()
def tenants_quota(ctx: click.Context, name: str, as_json: bool) -> None:
    """Show tenant NAME's quotas beside its usage (what GET /api/v1/admin/tenants/NAME/quota answers)."""
    from ..errors import TenantNotFoundError

    records = open_records(ctx)
    if not records.tenant_exists(name):
        raise TenantNotFoundError(f"tenant {name!r} does not exist")
    status = records.quota_status(records.backend.for_tenant(name))
    if as_json:
        emit_json({"tenant": name, "quotas": status.to_dict()})
        return
    stderr.print(f"quotas of tenant '{escape(name)}':")
    for key, figures in status.to_dict().items():
        limit = figures["limit"]
        stdout.print(f"  {key.replace('_', ' ')}: {figures['usage']} of {'no limit' if limit is None else limit}")


@admin.command("check")
@json_command()
def admin_check(ctx: click.Context, as_json: bool) -> None:
    """Check the store's consistency across every tenant (after a crash, an outage or a full disk): SQLite's
    integrity, collection counters, whole documents, orphan chunks, the keyword index.

    Exits 0 when every check passes, 1 when one finds a problem (each named); on PostgreSQL it needs the owner
    login."""
    from ..stores.sql.check import check_store

    report = check_store(open_records(ctx).backend)
    if as_json:
        emit_json(report.to_dict())
    else:
        for check in report.checks:
            mark = "[green]ok[/]" if check.ok else f"[red]{check.found} problem(s)[/]"
            stdout.print(f"{check.name:<18} {mark}  [dim]{escape(check.what)}[/]")
            for problem in check.problems:
                stdout.print(f"    {escape(problem)}")
        stderr.print(f"{report.store} store: " + ("consistent" if report.ok else "problems found"))
    if not report.ok:
        ctx.exit(EXIT_ERROR)


@admin_tenants.command("delete")
@click.argument("name")
@yes_option()
@json_command()
def tenants_delete(ctx: click.Context, name: str, yes: bool, as_json: bool) -> None:
    """Delete tenant NAME: every collection, document, job, log, usage record, conversation, memory and
    API key it has, and the tenant itself (asks first; --yes to skip). Spooled uploads go too."""
    records = open_records(ctx)
    if not records.tenant_exists(name):
        fail("NotFoundError", f"tenant {name!r} does not exist", as_json)
    confirm(f"Delete tenant '{name}' and all of its data and API keys?", yes, as_json)
    erasure = records.delete_tenant(name)
    _remove_spooled(ctx, name)
    counts: dict[str, Any] = {f.name: getattr(erasure, f.name) for f in fields(erasure) if f.name != "job_ids"}
    if as_json:
        emit_json({"deleted": True, "tenant": name, "removed": counts})
    else:
        stderr.print(f"deleted tenant '{escape(name)}': "
                     + ", ".join(f"{v} {k.replace('_', ' ')}" for k, v in counts.items()))


def _remove_spooled(ctx: click.Context, tenant: str) -> None:
    """The tenant's uploads waiting in the spool folder (files only: their jobs went with the data)."""
    from ..spool import remove_tenant_files, spool_root

    remove_tenant_files(spool_root(resolve_settings(ctx)), tenant)
