"""Errors as ``application/problem+json`` (RFC 9457) with a stable ``type``: ``urn:bunko:problem:<CODE>``.

``CODE`` is the engine's ``BunkoError.code`` (``DOCUMENT_NOT_FOUND``, ``INVALID_FILTER``, ...) or one
of the server's own (``UNAUTHENTICATED``, ``RATE_LIMITED``, ``PAYLOAD_TOO_LARGE``, ...). A response
never carries a stack trace; unexpected errors are logged and answered with ``INTERNAL_ERROR``.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from .. import errors
from ..errors import BunkoError, FilterError

logger = logging.getLogger(__name__)
PROBLEM_TYPE = "urn:bunko:problem:"
MEDIA_TYPE = "application/problem+json"

_TITLES = {
    400: "Bad request",
    401: "Unauthenticated",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    409: "Conflict",
    413: "Payload too large",
    415: "Unsupported media type",
    422: "Unprocessable content",
    429: "Too many requests",
    500: "Internal server error",
    502: "Bad gateway",
    503: "Service unavailable",
    504: "Gateway timeout",
    507: "Insufficient storage",
}
# Seconds a client is asked to wait (Retry-After) before sending a request the database could not take again.
STORE_RETRY_AFTER = 1


class Problem(Exception):
    """An HTTP error answered as problem+json."""

    def __init__(self, status: int, code: str, detail: str, *, headers: dict[str, str] | None = None,
                 extra: dict[str, Any] | None = None) -> None:
        super().__init__(detail)
        self.status = status
        self.code = code
        self.detail = detail
        self.headers = headers or {}
        self.extra = extra or {}

    def body(self) -> dict[str, Any]:
        """The problem document."""
        return {"type": PROBLEM_TYPE + self.code, "title": _TITLES.get(self.status, "Error"), "status": self.status,
                "detail": self.detail, "code": self.code, **self.extra}

    def response(self) -> JSONResponse:
        """The HTTP response."""
        return JSONResponse(self.body(), status_code=self.status, headers=self.headers, media_type=MEDIA_TYPE)


def status_of(exc: BunkoError) -> int:
    """The HTTP status for an engine error."""
    if isinstance(exc, errors.QuotaExceededError) and exc.rate_like:
        return 429  # uploads per day, requests per minute: the same request succeeds later
    return _status_of_type(type(exc))


# An engine error's HTTP status: the first row whose classes it is a subclass of (narrower rows first), else 400.
_STATUSES: tuple[tuple[tuple[type[BaseException], ...], int], ...] = (
    ((errors.InvalidFieldError,), 422),
    ((errors.ForbiddenError,), 403),
    ((errors.NotFoundError,), 404),
    ((errors.FilterError,), 422),
    ((errors.UnsupportedFormatError,), 415),
    ((errors.ArchiveTooLargeError,), 413),
    # What a tenant holds (documents, chunks, bytes): too large for its quota until data goes or the quota rises.
    ((errors.QuotaExceededError,), 413),
    ((errors.EmbedderMismatchError, errors.DimensionMismatchError, errors.AnalyzerMismatchError,
      errors.UploadInProgressError), 409),
    ((errors.RateLimited, errors.TransientStoreError), 503),
    ((errors.StorageFullError,), 507),
    ((errors.ProviderTimeout, errors.RagSearchTimeoutError), 504),
    ((errors.ProviderFailure,), 502),
    ((errors.LoaderError, errors.PreprocessingError, errors.EmbeddingError, errors.RetrievalError,
      errors.CorruptDocumentError), 422),
    ((errors.GenerationError,), 502),
    ((errors.ConfigError, errors.VectorStoreError), 500),
)


def _status_of_type(kind: type[BaseException]) -> int:
    return next((status for classes, status in _STATUSES if issubclass(kind, classes)), 400)


def _error_types() -> dict[str, type[BunkoError]]:
    """Every engine error class by its code (the class that declares the code, not subclasses inheriting it)."""
    found: dict[str, type[BunkoError]] = {}
    pending: list[type[BunkoError]] = [BunkoError]
    while pending:
        kind = pending.pop()
        if "code" in vars(kind):
            found.setdefault(kind.code, kind)
        pending.extend(kind.__subclasses__())
    return found


def status_of_code(code: str | None) -> int:
    """The HTTP status for an error recorded by its code only (a failed upload job); 500 for codes of no
    engine error (``INTERNAL_ERROR``, ``JOB_ABANDONED``, ``UPLOAD_MISSING``)."""
    kind = _error_types().get(code or "")
    return _status_of_type(kind) if kind is not None else 500


def from_bunko(exc: BunkoError) -> Problem:
    """A problem for an engine error; 5xx details stay in the log, not in the answer."""
    cause = exc.__cause__ if isinstance(exc.__cause__, BunkoError) else exc
    status = status_of(cause)
    extra: dict[str, Any] = {}
    if isinstance(cause, FilterError):
        extra["problems"] = [p.to_dict() for p in cause.problems]
    elif isinstance(cause, errors.InvalidFieldError):
        extra["field"] = cause.field
    elif isinstance(cause, errors.QuotaExceededError):
        extra.update(quota=cause.quota, limit=cause.limit, usage=cause.usage)
    headers = {"Retry-After": str(STORE_RETRY_AFTER)} if isinstance(cause, errors.TransientStoreError) else None
    detail = exc.message
    if status == 500:
        logger.error("server-side error: %s: %s", type(cause).__name__, exc.message)
        detail = "the server could not complete the request (its log has the details)"
    return Problem(status, cause.code, detail, extra=extra, headers=headers)


def problem_event(exc: BaseException) -> dict[str, Any]:
    """The ``error`` event that ends an SSE stream that failed midway."""
    if isinstance(exc, BunkoError):
        body = from_bunko(exc).body()
    else:
        logger.exception("unexpected error in a stream", exc_info=exc)
        body = Problem(500, "INTERNAL_ERROR", "unexpected error while answering (the server log has it)").body()
    return {"type": "error", "error": body}


def install(app: FastAPI) -> None:
    """Answer every error of ``app`` as problem+json."""

    async def on_problem(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, Problem)
        return exc.response()

    async def on_bunko(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, BunkoError)
        return from_bunko(exc).response()

    async def on_validation(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        errors = [{"loc": [str(p) for p in e.get("loc", ())], "message": str(e.get("msg", "")),
                   "kind": str(e.get("type", ""))} for e in exc.errors()]
        loc = errors[0]["loc"] if errors else []
        message = str(errors[0]["message"]) if errors else "invalid request"
        detail = f"{'.'.join(loc)}: {message}" if loc else message
        return Problem(422, "VALIDATION_ERROR", detail, extra={"errors": errors}).response()

    async def on_http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        code = {404: "NOT_FOUND", 405: "METHOD_NOT_ALLOWED", 401: "UNAUTHENTICATED",
                413: "PAYLOAD_TOO_LARGE"}.get(exc.status_code, "HTTP_ERROR")
        headers = dict(exc.headers or {})
        return Problem(exc.status_code, code, str(exc.detail), headers=headers).response()

    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        logger.exception("unexpected error on %s %s", request.method, request.url.path, exc_info=exc)
        return Problem(500, "INTERNAL_ERROR", "unexpected error (the server log has the details)").response()

    app.add_exception_handler(Problem, on_problem)
    app.add_exception_handler(BunkoError, on_bunko)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(Exception, on_unexpected)
