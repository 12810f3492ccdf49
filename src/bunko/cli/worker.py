"""``bunko worker``: a process that claims upload jobs from the store and runs them (see :mod:`bunko.server.worker`)."""

from __future__ import annotations

import logging
from typing import Any

import click

from .common import handle_errors, resolve_settings, stderr


@click.command("worker")
@click.option("--job-concurrency", type=int, default=None, metavar="N",
              help="Uploads processed at once by this worker (env BUNKO_JOB_CONCURRENCY; default 2).")
@click.option("--spool-dir", default=None, metavar="DIR",
              help="The spool folder the API writes uploads to (env BUNKO_SPOOL_DIR; default BUNKO_HOME/spool).")
@click.option("--job-lease-seconds", type=float, default=None, metavar="S",
              help="Lease of a claimed job, renewed every quarter (env BUNKO_JOB_LEASE_SECONDS; default 60).")
@click.option("--blas-threads", type=int, default=None, metavar="N",
              help="BLAS threads of this process (env BUNKO_BLAS_THREADS; default 1).")
@click.option("--max-jobs", type=click.IntRange(1), default=None, metavar="N",
              help="Exit after processing N jobs (default: run until SIGTERM or Ctrl-C).")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@click.pass_context
@handle_errors
def worker(ctx: click.Context, max_jobs: int | None, log_level: str, **overrides: Any) -> None:
    """Process uploaded files: claim upload jobs from the store, with leases, and run them.

    Run any number of workers beside `bunko serve --job-workers 0` (and any number of API processes)
    on one PostgreSQL; they must see the API's spool folder. A job whose worker dies is claimed
    again, up to [server] job_attempts times, then failed with the reason.
    """
    from ..server.worker import run_worker

    logging.basicConfig(level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    given = {k: v for k, v in overrides.items() if v is not None}
    settings = resolve_settings(ctx, **given)
    processed = run_worker(settings, max_jobs=max_jobs)
    stderr.print(f"bunko worker stopped after {processed} job{'s' * (processed != 1)}")
