"""The embedded store's SQL dialect and the names of its per-collection tables."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from typing import Any

import numpy as np

from ...filters import compile_sqlite
from ..sql import Dialect

# Lists longer than this travel as one JSON parameter (SQLite allows 32,766 parameters); shorter ones
# as literal marks, which let the planner look rows up by their keys.
_MAX_MARKS = 10_000


def _any(column: str, values: list[Any]) -> tuple[str, list[Any]]:
    if len(values) <= _MAX_MARKS:
        return f"{column} IN ({', '.join('?' * len(values))})", values
    return f"{column} IN (SELECT value FROM json_each(?))", [json.dumps(values)]


def text_key(text: str) -> int:
    """A chunk text's key: the first 8 bytes of the MD5 of its UTF-8, as a signed 64-bit integer.

    ``chunks.text_key`` holds it for every document chunk, indexed per collection (migration 18), so ingest
    finds a stored chunk of the same text without reading the collection (chunk reuse). Stored keys depend
    on it: it never changes. A key only narrows the search; the texts are compared after."""
    digest = hashlib.md5(text.encode("utf-8", "surrogatepass"), usedforsecurity=False).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _chunk_texts(texts: list[str]) -> tuple[str, list[Any]]:
    return _any("c.text_key", sorted({text_key(t) for t in texts}))


SQLITE = Dialect(
    name="sqlite",
    mark="?",
    now="strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
    any_list=_any,
    time_in=lambda moment: moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
    vector_out=lambda blob: np.frombuffer(blob, dtype=np.float32),
    compile_filter=compile_sqlite,
    no_limit=-1,
    chunk_texts=_chunk_texts,
)


def fts_table(collection_pk: int) -> str:
    """The name of a collection's FTS5 table (the collection's rowid is an integer: safe in SQL text).

    Databases up to schema 16 kept each chunk's analyzed text (the analyzer's tokens joined by spaces) in
    one per collection; migration 17 moved it into ``chunks.terms`` and dropped them. Only the migrations
    that made and read them use these names."""
    return f"chunks_fts_{int(collection_pk)}"


def create_fts(conn: sqlite3.Connection, collection_pk: int) -> None:
    """Create a collection's FTS5 table if it does not exist yet (migration 7)."""
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts_table(collection_pk)} USING fts5 "
                 "(terms, tokenize = 'unicode61 remove_diacritics 0')")


def has_fts(conn: sqlite3.Connection, collection_pk: int) -> bool:
    """Whether a collection's FTS5 table exists (before migration 17, made by the collection's first write)."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (fts_table(collection_pk),)).fetchone() is not None
