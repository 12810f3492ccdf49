"""Store backends, chosen by the scheme of the database URL.

``open_backend(None)`` gives the embedded SQLite default; ``sqlite:///path`` an
explicit file. Other backends register an opener for their URL scheme with
``register_backend``.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import UnknownProviderError
from .base import ChunkWrite, DocumentWrite, StoreBackend, VectorStore
from .sqlite import SQLiteBackend, SQLiteVectorStore, open_sqlite

BackendOpener = Callable[[str], StoreBackend]
_BACKENDS: dict[str, BackendOpener] = {}


def register_backend(scheme: str, opener: BackendOpener) -> None:
    """Register ``opener`` for URLs that start with ``scheme:``."""
    _BACKENDS[scheme] = opener


def available_backends() -> list[str]:
    """The URL schemes that have a backend."""
    return sorted(_BACKENDS)


def open_backend(url: str) -> StoreBackend:
    """Open the backend for a database URL (``sqlite:///path``; a bare path means SQLite)."""
    scheme, sep, _ = url.partition("://")
    if not sep:
        return open_sqlite(url)
    base = scheme.split("+", 1)[0].lower()
    opener = _BACKENDS.get(base)
    if opener is None:
        raise UnknownProviderError(
            f"no store backend for {base!r} URLs; available: {', '.join(available_backends())}"
        )
    return opener(url)


def _open_postgres(url: str) -> StoreBackend:
    # Imported on use: psycopg and pgvector are the optional "postgres" extra.
    from .postgres import open_postgres

    return open_postgres(url)


register_backend("sqlite", open_sqlite)
register_backend("postgresql", _open_postgres)
register_backend("postgres", _open_postgres)

__all__ = [
    "ChunkWrite",
    "DocumentWrite",
    "SQLiteBackend",
    "SQLiteVectorStore",
    "StoreBackend",
    "VectorStore",
    "available_backends",
    "open_backend",
    "register_backend",
]
