"""The embedded store's SQL dialect and the names of its per-collection tables."""

from __future__ import annotations

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


SQLITE = Dialect(
    name="sqlite",
    mark="?",
    now="strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
    any_list=_any,
    time_in=lambda moment: moment.strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z",
    vector_out=lambda blob: np.frombuffer(blob, dtype=np.float32),
    compile_filter=compile_sqlite,
    no_limit=-1,
)


def fts_table(collection_pk: int) -> str:
    """The name of a collection's FTS5 table (the collection's rowid is an integer: safe in SQL text).

    It keeps each chunk's analyzed text (the analyzer's tokens joined by spaces), from which a delete
    learns which statistics terms to take off; keyword search ranks from the postings."""
    return f"chunks_fts_{int(collection_pk)}"


def create_fts(conn: sqlite3.Connection, collection_pk: int) -> None:
    """Create a collection's FTS5 table if it does not exist yet."""
    conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts_table(collection_pk)} USING fts5 "
                 "(terms, tokenize = 'unicode61 remove_diacritics 0')")


def has_fts(conn: sqlite3.Connection, collection_pk: int) -> bool:
    """Whether a collection's FTS5 table exists (it is made by the collection's first write)."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (fts_table(collection_pk),)).fetchone() is not None


def varint(blob: bytes, at: int = 0) -> tuple[int, int]:
    """The SQLite varint at ``blob[at:]`` (FTS5's records are made of them): (value, offset after it)."""
    value = 0
    for i in range(8):
        byte = blob[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return (value << 8) | blob[at + 8], at + 9


def fts5_totals(conn: sqlite3.Connection, collection_pk: int) -> tuple[int, int]:
    """A collection's rows and tokens as FTS5 counts them (``bm25()``'s N and total length); (0, 0)
    before its first write."""
    if not has_fts(conn, collection_pk):
        return 0, 0
    found = conn.execute(f"SELECT block FROM {fts_table(collection_pk)}_data WHERE id = 1").fetchone()
    if found is None:
        return 0, 0
    averages = bytes(found[0])
    total_rows, at = varint(averages)
    total_tokens, _ = varint(averages, at)
    return total_rows, total_tokens
