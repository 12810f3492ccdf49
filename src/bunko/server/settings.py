"""Settings of the HTTP server, from the environment (``bunko serve`` flags set the same variables).

| setting | environment | default |
|---|---|---|
| largest upload | ``BUNKO_MAX_UPLOAD_MB`` | 50 (MiB) |
| requests per minute per API key | ``BUNKO_RATE_LIMIT`` | 600 (0 turns the limit off) |
| uploads processed at once per worker | ``BUNKO_JOB_CONCURRENCY`` | 2 |
| BLAS threads per worker process | ``BUNKO_BLAS_THREADS`` | 1 |

One BLAS thread per worker: requests run side by side in threads, and OpenBLAS's own thread
pool on top of them oversubscribes the cores (measured: hybrid search at 32 concurrent clients
went from 7 to 138 requests/s on a 2-core machine; see benchmarks/bench_server.py).

The store, embedder and LLM come from the same settings as the CLI (``bunko.config``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..errors import ConfigError


def _int(name: str, default: int, minimum: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a whole number") from None
    if value < minimum:
        raise ConfigError(f"{name} must be at least {minimum}; got {value}")
    return value


@dataclass(slots=True, frozen=True)
class ServerSettings:
    """Limits of the HTTP API."""

    max_upload_bytes: int = 50 * 1024 * 1024
    rate_limit_per_minute: int = 600
    job_concurrency: int = 2
    blas_threads: int = 1

    @classmethod
    def from_env(cls) -> ServerSettings:
        """The settings from ``BUNKO_MAX_UPLOAD_MB``, ``BUNKO_RATE_LIMIT`` and ``BUNKO_JOB_CONCURRENCY``."""
        return cls(
            max_upload_bytes=_int("BUNKO_MAX_UPLOAD_MB", 50, 1) * 1024 * 1024,
            rate_limit_per_minute=_int("BUNKO_RATE_LIMIT", 600, 0),
            job_concurrency=_int("BUNKO_JOB_CONCURRENCY", 2, 1),
            blas_threads=_int("BUNKO_BLAS_THREADS", 1, 1),
        )
