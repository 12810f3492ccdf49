"""The HTTP API (R29, seed 002): ``bunko serve``, or ``create_app()`` for any ASGI server.

Needs the ``server`` extra (FastAPI, uvicorn, python-multipart)::

    pip install "bunko[server]"
"""

from __future__ import annotations

from typing import Any


def create_app(*args: Any, **kwargs: Any) -> Any:
    """Build the ASGI app (see :func:`bunko.server.app.create_app`)."""
    try:
        from .app import create_app as build
    except ImportError as exc:  # the optional "server" extra is missing
        raise ImportError(f'the HTTP server needs extra packages ({exc.name}): pip install "bunko[server]"') from exc
    return build(*args, **kwargs)


__all__ = ["create_app"]
