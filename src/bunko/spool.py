"""The spool: the folder where an upload waits for the worker that processes it.

The HTTP API writes an upload to ``SPOOL/<tenant>/<job id>/<file name>`` and records its job; a worker
(:mod:`bunko.server.worker`) reads it from there and removes it when the job has ended. The API and
every worker must see the same folder (``[server] spool_dir``, default ``BUNKO_HOME/spool``).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from .config import Settings


def spool_root(settings: Settings) -> Path:
    """The spool folder shared by the API and the workers (``[server] spool_dir``, default ``HOME/spool``)."""
    configured = settings.server.spool_dir
    return Path(configured).expanduser() if configured else Path(settings.home) / "spool"


def job_folder(root: Path, tenant: str, job_id: str) -> Path:
    """Where an upload waits for its worker."""
    return root / tenant / job_id


def remove_job_files(root: Path, tenant: str, job_ids: Iterable[str]) -> None:
    """Remove the spooled files of these jobs (gone already is fine)."""
    for job_id in job_ids:
        shutil.rmtree(job_folder(root, tenant, job_id), ignore_errors=True)


def remove_tenant_files(root: Path, tenant: str) -> None:
    """Remove every spooled file of a tenant."""
    shutil.rmtree(root / tenant, ignore_errors=True)


__all__ = ["job_folder", "remove_job_files", "remove_tenant_files", "spool_root"]
