"""The web app: one page at ``/`` and its static files at ``/app/...``, shipped inside the package.

The page is plain HTML, CSS and JavaScript (no build step, no Node at install or run time). It talks
only to the public ``/api/v1`` endpoints with the user's API key, which it keeps in session storage
and sends in the ``Authorization`` header, never in a URL.
"""

from __future__ import annotations

from importlib import resources

from fastapi import APIRouter
from fastapi.responses import Response

from .problems import Problem

router = APIRouter(include_in_schema=False)
STATIC = resources.files(__package__) / "static"
# The files the app is made of, and their media types; nothing else under static/ is served.
ASSETS = {
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
# Same-origin scripts, styles and fetches only: no inline script can run, nothing leaves the origin.
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                                "connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
_cache: dict[str, bytes] = {}


def _read(name: str) -> bytes:
    data = _cache.get(name)
    if data is None:
        data = _cache[name] = (STATIC / name).read_bytes()
    return data


@router.get("/")
async def index() -> Response:
    """The single page (revalidated on each visit, so an upgrade shows at once)."""
    return Response(_read("index.html"), media_type="text/html; charset=utf-8",
                    headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"})


@router.get("/app/{name}")
async def asset(name: str) -> Response:
    """One of the app's files."""
    media_type = ASSETS.get(name)
    if media_type is None:
        raise Problem(404, "NOT_FOUND", f"no such file: {name}")
    return Response(_read(name), media_type=media_type, headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"})


@router.get("/favicon.ico")
async def favicon() -> Response:
    """Browsers ask for it on their own; the app's icon answers."""
    return Response(_read("icon.svg"), media_type=ASSETS["icon.svg"], headers={"Cache-Control": "max-age=86400"})


__all__ = ["router"]
