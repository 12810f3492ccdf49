"""Store backends, chosen by the scheme of the database URL.

``open_backend(None)`` gives the embedded SQLite default; ``sqlite:///path`` an
explicit file. Other backends register an opener for their URL scheme with
``register_backend`` (or as a ``bunko.backends`` entry point); every backend serves
the whole store contract, the HTTP server's records included.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..registry import Registry
from .base import ChunkWrite, DocumentWrite, RecordStore, StoreBackend, StoredChunk, VectorStore
from .sqlite import SQLiteBackend, SQLiteVectorStore, open_sqlite

if TYPE_CHECKING:
    from ..config import Settings

# An opener takes the whole URL and the engine's settings (None: resolve them itself).
BackendOpener = Callable[[str, "Settings | None"], StoreBackend]
# Openers by URL scheme.
BACKENDS: Registry[StoreBackend] = Registry("store backend", "bunko.backends")


def register_backend(scheme: str, opener: BackendOpener) -> None:
    """Register ``opener`` for URLs that start with ``scheme:``."""
    BACKENDS.register(scheme, opener)


def available_backends() -> list[str]:
    """The URL schemes that have a backend."""
    return BACKENDS.names()


# A libpq connection string ("host=db dbname=bunko user=app"): key=value pairs, values optionally quoted.
_CONNINFO = re.compile(r"\s*(?:\w+\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s']*)\s*)+")
_CONNINFO_KEYS = {"host", "hostaddr", "port", "dbname", "user", "password", "passfile", "service", "sslmode"}


def url_scheme(url: str) -> str:
    """The backend a database URL names: its scheme without a driver (``postgresql+psycopg://`` is
    ``postgresql``); ``postgresql`` for a libpq connection string (``host=db dbname=bunko``); else
    ``sqlite`` (a bare path)."""
    scheme, sep, _ = url.partition("://")
    if sep:
        return scheme.split("+", 1)[0].lower()
    if _CONNINFO.fullmatch(url) and {k.lower() for k in re.findall(r"(\w+)\s*=", url)} & _CONNINFO_KEYS:
        return "postgresql"
    return "sqlite"


def open_backend(url: str, settings: Settings | None = None) -> StoreBackend:
    """Open the backend for a database URL (``sqlite:///path``; a bare path means SQLite; a libpq
    connection string, ``host=... dbname=...``, PostgreSQL).

    ``settings`` is the engine's settings tree; a backend takes its own section from it
    (``settings.postgres``, ``settings.sqlite``). Without it the backend resolves the settings itself.
    """
    scheme = url_scheme(url)
    if scheme == "sqlite" and "://" not in url:
        return open_sqlite(url, None if settings is None else settings.sqlite)
    return BACKENDS.get(scheme)(url, settings)


def _open_sqlite(url: str, settings: Settings | None = None) -> StoreBackend:
    return open_sqlite(url, None if settings is None else settings.sqlite)


def _open_postgres(url: str, settings: Settings | None = None) -> StoreBackend:
    # Imported on use: psycopg and pgvector are the optional "postgres" extra.
    from .postgres import open_postgres

    return open_postgres(url, None if settings is None else settings.postgres)


register_backend("sqlite", _open_sqlite)
register_backend("postgresql", _open_postgres)
register_backend("postgres", _open_postgres)

__all__ = [
    "BACKENDS",
    "ChunkWrite",
    "DocumentWrite",
    "RecordStore",
    "SQLiteBackend",
    "SQLiteVectorStore",
    "StoreBackend",
    "StoredChunk",
    "VectorStore",
    "available_backends",
    "open_backend",
    "register_backend",
    "url_scheme",
]
