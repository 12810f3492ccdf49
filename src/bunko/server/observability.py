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

REQUEST_ID_HEADER = b"x-request-id"
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
        """The record as one line of JSON."""
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
    """The route template that served (or would serve) the request; ``(unmatched)`` for none.

    A request the guard answered (401, 413) never reached the router: its route is looked up
    here, so the label stays a template (``/api/v1/documents/{document_id}``), never a raw path.
    """
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    found = _match(getattr(scope.get("app"), "routes", ()), scope, 0)
    return found or "(unmatched)"


def _match(routes: Any, scope: Scope, depth: int) -> str | None:
    for candidate in routes:
        inner = getattr(getattr(candidate, "original_router", None), "routes", None)
        if inner is not None and depth < 4:  # an included router: look inside it
            found = _match(inner, scope, depth + 1)
            if found is not None:
                return found
            continue
        path = getattr(candidate, "path", None)
        if not isinstance(path, str):
            continue
        try:
            match, _ = candidate.matches(scope)
        except Exception:  # pragma: no cover - a route that cannot judge this scope
            continue
        if match != Match.NONE:
            return path
    return None


class RequestObserver:
    """Give each HTTP request an id, time it into the metrics and log one access line."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one request with its id, timing and access line."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v.decode("latin-1") for k, v in scope["headers"] if k == REQUEST_ID_HEADER), "")
        rid = given if _CLIENT_ID.fullmatch(given) else uuid.uuid4().hex
        token = request_id.set(rid)
        started = time.perf_counter()
        status = 500
        done = False

        def record() -> None:
            nonlocal done
            if done:
                return
            done = True
            seconds = time.perf_counter() - started
            route = _route_of(scope)
            if route != "/metrics":
                metrics.observe_http(route, status, seconds)
            access_log.info("%s %s %d", scope["method"], scope["path"], status,
                            extra={"method": scope["method"], "path": scope["path"], "route": route, "status": status,
                                   "duration_ms": round(seconds * 1000, 2)})

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                message["headers"] = [*message.get("headers", []), (REQUEST_ID_HEADER, rid.encode("latin-1"))]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                record()  # before the last bytes go out: a client that has its answer finds it counted
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            record()
            request_id.reset(token)
