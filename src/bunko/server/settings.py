"""Settings of the HTTP server: the ``[server]`` section of the settings tree (:mod:`bunko.config`).

| setting | ``bunko serve`` flag | environment | ``bunko.toml`` | default |
|---|---|---|---|---|
| largest upload (MiB) | ``--max-upload-mb`` | ``BUNKO_MAX_UPLOAD_MB`` | ``[server] max_upload_mb`` | 50 |
| largest JSON request body (MiB) | ``--max-json-mb`` | ``BUNKO_MAX_JSON_MB`` | ``[server] max_json_mb`` | 4 |
| requests per minute per key | ``--rate-limit`` | ``BUNKO_RATE_LIMIT`` | ``[server] rate_limit`` | 600 (0 = off) |
| uploads at once per worker | ``--job-concurrency`` | ``BUNKO_JOB_CONCURRENCY`` | ``[server] job_concurrency`` | 2 |
| BLAS threads per worker | ``--blas-threads`` | ``BUNKO_BLAS_THREADS`` | ``[server] blas_threads`` | 1 |
| upload workers per API process | ``--job-workers`` | ``BUNKO_JOB_WORKERS`` | ``[server] job_workers`` | 1 |
| spool folder (shared) | ``--spool-dir`` | ``BUNKO_SPOOL_DIR`` | ``[server] spool_dir`` | ``BUNKO_HOME/spool`` |
| job lease (s) | ``--job-lease-seconds`` | ``BUNKO_JOB_LEASE_SECONDS`` | ``[server] job_lease_seconds`` | 60 |
| claims of a job before it fails | | ``BUNKO_JOB_ATTEMPTS`` | ``[server] job_attempts`` | 3 |
| jobs of a tenant in flight | | ``BUNKO_TENANT_JOBS_IN_FLIGHT`` | ``[server] tenant_jobs_in_flight`` | 0 (off) |
| longest ``?wait=true`` of an upload (s) | | ``BUNKO_UPLOAD_WAIT_SECONDS`` | ``[server] upload_wait_seconds`` | 300 |

``job_workers = 0``: separate ``bunko worker`` processes take the jobs (``--job-lease-seconds`` is a flag
of ``bunko worker``). The store, embedder and LLM come from the same tree. ``bunko serve`` resolves it once and hands it
to every worker process as data (see ``bunko.server.app.serve``).
"""

from __future__ import annotations

from ..config import ServerSettings

__all__ = ["ServerSettings"]
