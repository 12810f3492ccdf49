"""Request ids, structured JSON logs, HTTP metrics and ``GET /metrics`` (R35).

- Every request gets an id: the client's ``X-Request-ID`` when it is a short token, else a new one.
  It is answered in ``X-Request-ID`` and carried by every log line written while the request runs.
- ``JSONFormatter`` writes one JSON object per log line (``time``, ``level``, ``logger``, ``message``,
  ``request_id`` and the line's extra fields); ``bunko serve --log-format json`` (the default) uses it.
- ``RequestObserver`` times each request into ``bunko_http_request_duration_seconds`` by route
  template and status, and logs one ``bunko.access`` line for it.
- ``GET /metrics`` answers the Prometheus text format, summed over every worker process.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import time
import uuid
from typing import Any

from fastapi import APIRouter
from fastapi.responses import Response
from starlette.routing import Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import metrics

REQUEST_ID_HEADER = "x-request-id"
request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("bunko_request_id", default=None)
access_log = logging.getLogger("bunko.access")
_CLIENT_ID = re.compile(r"[\w.:\-]{1,64}")
_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "taskName"}

router = APIRouter()


@router.get("/metrics", include_in_schema=False)
async def prometheus_metrics() -> Response:
    """Prometheus metrics of every worker process (text exposition format)."""
    body, content_type = metrics.exposition()
    return Response(body, media_type=content_type)


class JSONFormatter(logging.Formatter):
    """One JSON object per line, with the request id of the request being served (if any)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        current = request_id.get()
        if current is not None:
            line["request_id"] = current
        for key, value in record.__dict__.items():
            if key not in _STANDARD and not key.startswith("_") and key not in line:
                line[key] = value if isinstance(value, str | int | float | bool | type(None)) else str(value)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False)


def log_config(level: str, *, json_lines: bool) -> dict[str, Any]:
    """A ``logging.config`` dict for uvicorn and bunko: JSON lines, or uvicorn's plain text."""
    formatter = ({"()": f"{__name__}.JSONFormatter"} if json_lines
                 else {"format": "%(levelname)s %(name)s: %(message)s"})
    handler = {"class": "logging.StreamHandler", "formatter": "main", "stream": "ext://sys.stderr"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"main": formatter},
        "handlers": {"main": handler},
        "loggers": {
            "uvicorn": {"handlers": ["main"], "level": level.upper(), "propagate": False},
            # bunko.access replaces uvicorn's access line (it has the route, duration and request id).
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            "bunko": {"handlers": ["main"], "level": level.upper(), "propagate": False},
        },
    }


def _route_of(scope: Scope) -> str:
    """The route template that served (or would serve) the request; ``(unmatched)`` for none."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    app = scope.get("app")
    for candidate in getattr(app, "routes", ()):
        try:
            match, _ = candidate.matches(scope)
        except Exception:  # pragma: no cover - a route that cannot judge this scope
            continue
        if match != Match.NONE and isinstance(getattr(candidate, "path", None), str):
            return str(candidate.path)
    return "(unmatched)"


class RequestObserver:
    """Give each HTTP request an id, time it into the metrics and log one access line."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v.decode("latin-1") for k, v in scope["headers"] if k == REQUEST_ID_HEADER), "")
        rid = given if _CLIENT_ID.fullmatch(given) else uuid.uuid4().hex
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (b"x-request-id", rid.encode("latin-1"))]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            seconds = time.perf_counter() - started
            route = _route_of(scope)
            if route != "/metrics":
                metrics.observe_http(route, status, seconds)
            access_log.info("%s %s %d", scope["method"], scope["path"], status,
                            extra={"method": scope["method"], "path": scope["path"], "route": route, "status": status,
                                   "duration_ms": round(seconds * 1000, 2)})
            request_id.reset(token)
