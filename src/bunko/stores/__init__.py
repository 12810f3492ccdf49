"""Store backends, chosen by the scheme of the database URL.

``open_backend(None)`` gives the embedded SQLite default; ``sqlite:///path`` an
explicit file. Other backends register an opener for their URL scheme with
``register_backend`` (or as a ``bunko.backends`` entry point); every backend serves
the whole store contract, the HTTP server's records included.
"""

from __future__ import annotations

from collections.abc import Callable

from ..registry import Registry
from .base import ChunkWrite, DocumentWrite, RecordStore, StoreBackend, VectorStore
from .sqlite import SQLiteBackend, SQLiteVectorStore, open_sqlite

BackendOpener = Callable[[str], StoreBackend]
# Openers by URL scheme; an opener takes the whole URL.
BACKENDS: Registry[StoreBackend] = Registry("store backend", "bunko.backends")


def register_backend(scheme: str, opener: BackendOpener) -> None:
    """Register ``opener`` for URLs that start with ``scheme:``."""
    BACKENDS.register(scheme, opener)


def available_backends() -> list[str]:
    """The URL schemes that have a backend."""
    return BACKENDS.names()


def open_backend(url: str) -> StoreBackend:
    """Open the backend for a database URL (``sqlite:///path``; a bare path means SQLite)."""
    scheme, sep, _ = url.partition("://")
    if not sep:
        return open_sqlite(url)
    return BACKENDS.get(scheme.split("+", 1)[0].lower())(url)


def _open_postgres(url: str) -> StoreBackend:
    # Imported on use: psycopg and pgvector are the optional "postgres" extra.
    from .postgres import open_postgres

    return open_postgres(url)


register_backend("sqlite", open_sqlite)
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
    "VectorStore",
    "available_backends",
    "open_backend",
    "register_backend",
]
