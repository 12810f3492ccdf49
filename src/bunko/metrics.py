"""Prometheus metrics (R35): one place that defines them, small functions the rest of bunko calls.

- ``bunko_http_request_duration_seconds`` (histogram; ``route``, ``status``): :func:`observe_http`,
  called by the server's middleware for every request (the route is its template).
- ``bunko_search_duration_seconds`` (histogram; ``mode``, ``store``): :func:`observe_search`, called by
  ``Tenant.asearch``.
- ``bunko_provider_requests_total`` (counter; ``provider``, ``status``): :func:`count_provider`, one per
  answer of a hosted provider's HTTP API (429s included), ``timeout`` or ``error`` when none came.
- ``bunko_jobs_total`` (counter; ``outcome``): :func:`count_job` with ``completed``, ``failed``,
  ``abandoned`` or ``retried``.
- ``bunko_cache_requests_total`` (counter; ``cache``, ``result``): :func:`count_cache` with the cache
  (``query_vectors`` or ``search_results``) and ``hit`` or ``miss``.

``prometheus-client`` is part of the ``server`` extra; without it every function here does nothing.
It is imported on first use, never at import time: ``bunko serve`` first points
``PROMETHEUS_MULTIPROC_DIR`` at a fresh folder (:func:`prepare_multiprocess`), so every worker
process writes its figures there and ``/metrics`` (:func:`exposition`) sums them across workers.
``bunko stats`` reads the same folder without a server (:func:`snapshot`).
"""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path
from typing import Any

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Seconds: from a cached lookup to a slow upload or answer.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

_lock = threading.Lock()
_metrics: dict[str, Any] | None = None
_missing = False


def _get() -> dict[str, Any] | None:
    """The metric objects, created on first use; None when prometheus-client is not installed."""
    global _metrics, _missing
    if _metrics is not None or _missing:
        return _metrics
    with _lock:
        if _metrics is not None or _missing:
            return _metrics
        try:
            from prometheus_client import Counter, Histogram
        except ImportError:
            _missing = True
            return None
        _metrics = {
            "http": Histogram("bunko_http_request_duration_seconds", "HTTP request duration by route and status",
                              ["route", "status"], buckets=_BUCKETS),
            "search": Histogram("bunko_search_duration_seconds", "Search duration by mode and store",
                                ["mode", "store"], buckets=_BUCKETS),
            "provider": Counter("bunko_provider_requests_total",
                                "Requests to hosted providers by provider and answer status (429 included)",
                                ["provider", "status"]),
            "jobs": Counter("bunko_jobs_total", "Upload jobs by outcome", ["outcome"]),
            "cache": Counter("bunko_cache_requests_total", "Cache lookups by cache and result", ["cache", "result"]),
        }
        return _metrics


def observe_http(route: str, status: int | str, seconds: float) -> None:
    """Record one HTTP request: its route template (``/api/v1/documents/{document_id}``), status and duration."""
    m = _get()
    if m is not None:
        m["http"].labels(route=route, status=str(status)).observe(seconds)


def observe_search(mode: str, store: str, seconds: float) -> None:
    """Record one search: its mode (``semantic``, ``keyword``, ``hybrid``), store scheme and duration."""
    m = _get()
    if m is not None:
        m["search"].labels(mode=mode, store=store).observe(seconds)


def count_provider(provider: str, status: int | str) -> None:
    """Count one answer (or failure: ``timeout``, ``error``) of a hosted provider's HTTP API."""
    m = _get()
    if m is not None:
        m["provider"].labels(provider=provider, status=str(status)).inc()


def count_job(outcome: str) -> None:
    """Count one upload job that ended: ``completed``, ``failed``, ``abandoned`` or ``retried``."""
    m = _get()
    if m is not None:
        m["jobs"].labels(outcome=outcome).inc()


def count_cache(result: str, cache: str = "search_results") -> None:
    """Count one cache lookup: ``hit`` or ``miss``, in ``cache`` (``query_vectors`` or ``search_results``)."""
    m = _get()
    if m is not None:
        m["cache"].labels(cache=cache, result=result).inc()


# -- several processes -------------------------------------------------------------------------------
def metrics_dir(home: str | os.PathLike[str]) -> Path:
    """Where ``bunko serve`` under this ``BUNKO_HOME`` keeps its workers' figures (``PROMETHEUS_MULTIPROC_DIR``)."""
    given = os.environ.get(MULTIPROC_ENV)
    return Path(given) if given else Path(home) / "metrics"


def prepare_multiprocess(home: str | os.PathLike[str]) -> Path:
    """Point ``PROMETHEUS_MULTIPROC_DIR`` at an empty folder before any worker starts; returns it.

    Called by ``bunko serve`` before prometheus-client is imported: the figures of a previous run
    are removed (prometheus-client's rule for multiprocess mode), and the variable is inherited by
    every worker process.
    """
    folder = metrics_dir(home)
    if _metrics is not None:  # pragma: no cover - a programming error, not an operator's
        raise RuntimeError("metrics were recorded before the multiprocess folder was set up")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[MULTIPROC_ENV] = str(folder)
    return folder


def _registry(folder: Path | None) -> Any:
    from prometheus_client import REGISTRY, CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    if folder is None:
        return REGISTRY
    registry = CollectorRegistry()
    MultiProcessCollector(registry, path=str(folder))
    return registry


def exposition() -> tuple[bytes, str]:
    """The text format for ``/metrics`` and its content type: all workers' figures in multiprocess mode."""
    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    _get()
    folder = os.environ.get(MULTIPROC_ENV)
    return generate_latest(_registry(Path(folder) if folder else None)), CONTENT_TYPE_LATEST


def snapshot(folder: str | os.PathLike[str]) -> dict[str, list[dict[str, Any]]]:
    """The figures kept in a multiprocess folder, summed over processes, as JSON-ready data.

    ``{"bunko_search_duration_seconds": [{"labels": {...}, "count": 3, "sum": 0.12}, ...],
    "bunko_jobs_total": [{"labels": {"outcome": "completed"}, "value": 5.0}], ...}``; histograms give
    their count and sum (and buckets), counters their value.
    """
    path = Path(folder)
    if not path.is_dir():
        return {}
    out: dict[str, list[dict[str, Any]]] = {}
    for family in _registry(path).collect():
        if not family.name.startswith("bunko_"):
            continue
        rows: dict[tuple[tuple[str, str], ...], dict[str, Any]] = {}
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k != "le"}
            key = tuple(sorted(labels.items()))
            row = rows.setdefault(key, {"labels": labels})
            if sample.name.endswith("_count"):
                row["count"] = int(sample.value)
            elif sample.name.endswith("_sum"):
                row["sum"] = sample.value
            elif sample.name.endswith("_bucket"):
                row.setdefault("buckets", {})[sample.labels["le"]] = int(sample.value)
            elif sample.name.endswith("_total") or sample.name == family.name:
                row["value"] = sample.value
        name = family.name + ("_total" if family.type == "counter" else "")
        out[name] = sorted(rows.values(), key=lambda r: sorted(r["labels"].items()))
    return out


__all__ = ["count_cache", "count_job", "count_provider", "exposition", "metrics_dir", "observe_http",
           "observe_search", "prepare_multiprocess", "snapshot"]
