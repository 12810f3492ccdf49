"""The OpenAPI page at ``/docs``: Swagger UI served from files inside the package, never from a CDN.

FastAPI's own ``/docs`` and ``/redoc`` pages load their scripts and styles from a CDN and stay blank
without internet access; both are switched off (``create_app``) and this page takes ``/docs``.
Swagger UI's files are vendored under ``static/swagger-ui/`` (Apache-2.0; see the README there),
stored gzip-compressed and sent as they are to clients that accept gzip. The page links them with
relative URLs, so it also works behind a proxy that serves the API under a path prefix.
"""

from __future__ import annotations

import gzip
from html import escape
from importlib import resources

from fastapi import APIRouter, Request
from fastapi.responses import Response

from ..version import __version__
from .problems import Problem

router = APIRouter(include_in_schema=False)
SWAGGER = resources.files(__package__) / "static" / "swagger-ui"
# The files the page is made of: (file in the package, media type, stored gzip-compressed).
ASSETS = {
    "swagger-ui-bundle.js": ("swagger-ui-bundle.js.gz", "text/javascript; charset=utf-8", True),
    "swagger-ui.css": ("swagger-ui.css.gz", "text/css; charset=utf-8", True),
    "docs.js": ("docs.js", "text/javascript; charset=utf-8", False),
}
# Scripts and the document from this origin only. Swagger UI sets inline styles and draws its icons
# from data: URLs; no inline script runs.
SECURITY_HEADERS = {
    "Content-Security-Policy": ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                                "img-src 'self' data:; connect-src 'self'; form-action 'none'; base-uri 'none'; "
                                "frame-ancestors 'none'"),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<link rel="icon" href="favicon.ico">
<link rel="stylesheet" href="docs/swagger-ui.css">
</head>
<body>
<div id="swagger-ui"></div>
<script src="docs/swagger-ui-bundle.js"></script>
<script src="docs/docs.js"></script>
</body>
</html>
"""
_cache: dict[tuple[str, bool], bytes] = {}


def _read(name: str, *, compressed: bool) -> bytes:
    """A file of the page, gzip-compressed or not."""
    key = (name, compressed)
    data = _cache.get(key)
    if data is None:
        stored, _, packed = ASSETS[name]
        raw = (SWAGGER / stored).read_bytes()
        data = _cache[key] = gzip.decompress(raw) if packed and not compressed else raw
    return data


@router.get("/docs")
async def docs_page() -> Response:
    """The interactive OpenAPI page."""
    page = PAGE.format(title=escape(f"bunko {__version__} — API"))
    return Response(page, media_type="text/html; charset=utf-8",
                    headers={**SECURITY_HEADERS, "Cache-Control": "no-cache"})


@router.get("/docs/{name}")
async def docs_asset(name: str, request: Request) -> Response:
    """One of the page's files (compressed for clients that accept gzip)."""
    entry = ASSETS.get(name)
    if entry is None:
        raise Problem(404, "NOT_FOUND", f"no such file: {name}")
    _, media_type, packed = entry
    headers = {**SECURITY_HEADERS, "Cache-Control": "public, max-age=86400"}
    gzipped = packed and "gzip" in request.headers.get("accept-encoding", "").lower()
    if packed:
        headers["Vary"] = "Accept-Encoding"
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    return Response(_read(name, compressed=gzipped), media_type=media_type, headers=headers)


__all__ = ["router"]
