"""The server's first line: the API key is checked, and the body's size limited, before a body is read.

``RequestGuard`` wraps the whole app (pure ASGI, so nothing has read the request yet):

1. A request to ``/api/...`` (outside ``PUBLIC_PATHS``) must carry a valid API key (under
   ``/api/v1/admin/``: an operator key, see :mod:`bunko.server.auth`); the key is
   looked up and counted against its rate limit from the headers alone. Without one the answer is
   401 (or 429) at once, whatever body the client announces or sends: an anonymous client cannot
   make a worker buffer anything.
2. A body longer than its endpoint's limit is refused with 413: at once when ``Content-Length``
   says so, otherwise as soon as the bytes read pass the limit. The upload endpoint has the upload
   limit (``[server] max_upload_mb``); every other endpoint the JSON limit (``[server] max_json_mb``).

The authenticated key travels to the routes in the ASGI scope's ``state`` (see
:func:`bunko.server.auth.caller`), so a request is authenticated and counted exactly once.
"""

from __future__ import annotations

from fastapi import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import BunkoError
from .auth import ADMIN_PREFIX, KEY_STATE, OPERATOR_STATE, authenticate_headers, authenticate_operator_headers
from .problems import Problem, from_bunko

UPLOAD_PATH = "/api/v1/documents/upload"
# Paths under /api/ that answer without a key (none today; other modules may add theirs).
PUBLIC_PATHS: set[str] = set()
# Multipart framing and the small form fields around an uploaded file.
FORM_OVERHEAD = 1024 * 1024


def needs_key(path: str) -> bool:
    """Whether a request to ``path`` must carry an API key (everything under ``/api/`` but ``PUBLIC_PATHS``)."""
    return path.startswith("/api/") and path not in PUBLIC_PATHS


class BodyTooLarge(HTTPException):
    """A body that passed its limit while being read (an HTTPException: FastAPI answers it as it is)."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, _too_large(limit))


def _too_large(limit: int) -> str:
    if limit >= 1024 * 1024:
        return f"the request body is larger than {limit // (1024 * 1024)} MiB"
    return f"the request body is larger than {limit} bytes"


class RequestGuard:
    """Authenticate ``/api/`` requests and limit body sizes before any body is read (see the module doc)."""

    def __init__(self, app: ASGIApp, max_upload_bytes: int, max_json_bytes: int) -> None:
        self.app = app
        self.max_upload_bytes = max_upload_bytes
        self.max_json_bytes = max_json_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Check the key and the body's size of an HTTP request before its body is read."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if needs_key(path):
            admin = path.startswith(ADMIN_PREFIX)
            try:
                if admin:
                    found: object = await authenticate_operator_headers(scope["app"].state.bunko, scope["headers"])
                else:
                    found = await authenticate_headers(scope["app"].state.bunko, scope["headers"])
            except Problem as problem:
                await problem.response()(scope, receive, send)
                return
            except BunkoError as exc:  # the store did not answer
                await from_bunko(exc).response()(scope, receive, send)
                return
            scope.setdefault("state", {})[OPERATOR_STATE if admin else KEY_STATE] = found
        upload = path == UPLOAD_PATH
        limit = self.max_upload_bytes + FORM_OVERHEAD if upload else self.max_json_bytes
        shown = self.max_upload_bytes if upload else self.max_json_bytes
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await Problem(413, "PAYLOAD_TOO_LARGE", _too_large(shown)).response()(scope, receive, send)
                return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                raise BodyTooLarge(shown)
            return message

        await self.app(scope, counted, send)
