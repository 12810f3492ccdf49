"""``bunko mcp``: an MCP server (stdio, or streamable HTTP) with the tools search, ask, search_memory and
add_memory (see :mod:`bunko.integrations.mcp_server`)."""

from __future__ import annotations

import click

from .common import MEMORY_EMBEDDER_HELP, embedder_option, get_engine, handle_errors


@click.command("mcp")
@click.option("--tenant", "-t", default=None, envvar="BUNKO_TENANT",
              help="Tenant the tools work in (stdio; default 'default'). Over --http the API key names it.")
@click.option("--user", "-u", "user_id", default=None, envvar="BUNKO_USER",
              help="The user whose memories the memory tools use (stdio). Over --http the API key names it.")
@click.option("--http", "http", default=None, metavar="HOST:PORT",
              help="Serve streamable HTTP at http://HOST:PORT/mcp instead of stdio; callers send an API key.")
@embedder_option(MEMORY_EMBEDDER_HELP)
@click.pass_context
@handle_errors
def mcp(ctx: click.Context, tenant: str | None, user_id: str | None, http: str | None, embedder: str | None) -> None:
    """Run an MCP server (stdio by default) with the tools search, ask, search_memory and add_memory."""
    from ..integrations.mcp_server import serve_http, serve_stdio

    engine = get_engine(ctx, embedder=embedder)
    if http is None:
        serve_stdio(engine, tenant=tenant, user_id=user_id)
        return
    if tenant or user_id:
        raise click.UsageError("over --http the tenant and user come from each caller's API key; "
                               "drop --tenant and --user")
    host, _, port = http.rpartition(":")
    if not host or not port.isdigit():
        raise click.BadParameter("use HOST:PORT, e.g. 127.0.0.1:8765", param_hint="--http")
    serve_http(engine, host=host, port=int(port))
