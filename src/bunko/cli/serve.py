"""``bunko serve``: the HTTP API (REST under /api/v1) with uvicorn, in one or more worker processes."""

from __future__ import annotations

from typing import Any

import click
from rich.markup import escape

from .common import LOG_LEVELS, handle_errors, resolve_settings, stderr


def _setting(flag: str, metavar: str, help: str) -> Any:
    """A whole-number server setting handed on as an override; left out, the environment, the config file or
    the default decides."""
    return click.option(flag, type=int, default=None, metavar=metavar, help=help)


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0 for all).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535), help="TCP port.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Worker processes; all state is in the store, so any number is safe.")
@click.option("--log-level", default="info", show_default=True, type=click.Choice(LOG_LEVELS))
@click.option("--log-format", default="json", show_default=True, type=click.Choice(["json", "text"]),
              help="Log lines as JSON objects (with the request id) or plain text.")
@_setting("--max-upload-mb", "MIB",
          "Largest upload (env BUNKO_MAX_UPLOAD_MB; config [server] max_upload_mb; default 50).")
@_setting("--max-json-mb", "MIB", "Largest JSON request body (env BUNKO_MAX_JSON_MB; default 4).")
@_setting("--rate-limit", "N", "Requests per minute per API key, 0 = off (env BUNKO_RATE_LIMIT; default 600).")
@_setting("--job-concurrency", "N", "Uploads processed at once per worker (env BUNKO_JOB_CONCURRENCY; default 2).")
@_setting("--blas-threads", "N", "BLAS threads per worker process (env BUNKO_BLAS_THREADS; default 1).")
@_setting("--job-workers", "N", "Upload workers each API process starts; 0 when separate `bunko worker` "
          "processes run (env BUNKO_JOB_WORKERS; default 1).")
@click.option("--spool-dir", default=None, metavar="DIR",
              help="Folder uploads wait in, shared with the workers (env BUNKO_SPOOL_DIR; default BUNKO_HOME/spool).")
@click.pass_context
@handle_errors
def serve(ctx: click.Context, host: str, port: int, workers: int, log_level: str, log_format: str,
          **limits: int | None) -> None:
    """Serve the HTTP API (REST under /api/v1; its reference at /docs and /openapi.json).

    Uses the same store, embedder and LLM settings as the other commands; every worker gets the
    settings resolved here.
    """
    try:
        import uvicorn  # noqa: F401

        from ..server.app import serve as run_server
    except ImportError as exc:
        raise click.ClickException(
            f'the HTTP server needs extra packages ({exc.name}): pip install "bunko[server]"') from None
    from ..config import redact_url

    overrides: dict[str, Any] = {k: v for k, v in limits.items() if v is not None}
    settings = resolve_settings(ctx, **overrides)
    shown = redact_url(settings.database_url)
    display_host = f"[{host}]" if ":" in host else host
    stderr.print(f"bunko API listening on http://{display_host}:{port} ({workers} worker{'s' * (workers > 1)}, "
                 f"store {escape(shown)}); OpenAPI at http://{display_host}:{port}/docs")
    run_server(settings, host=host, port=port, workers=workers, log_level=log_level, log_format=log_format)
