"""What the SQL core needs to know about a database's dialect, and nothing more.

The shared statements (:mod:`bunko.stores.sql.store`) are written once, with ``?`` placeholders
and unqualified table names; a :class:`Dialect` turns them into the backend's form and converts
the few values whose wire types differ (JSON, timestamps, vectors, lists of ids).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import Any

import numpy as np

from ...filters import Filter


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


@dataclass(frozen=True, slots=True)
class Dialect:
    """Placeholders, clock, JSON, time and list parameters of one SQL database."""

    name: str
    # The placeholder the driver expects ("?" or "%s"); the core writes "?".
    mark: str
    # The SQL expression of the current time, as the timestamp columns store it.
    now: str
    # ``column`` is one of a list of values: (column, values) -> (SQL with "?" marks, its parameters).
    any_list: Callable[[str, list[Any]], tuple[str, list[Any]]]
    # A Python value into a JSON column, and a JSON column's value back into Python.
    json_in: Callable[[Any], Any] = _dumps
    json_out: Callable[[Any], Any] = json.loads
    # Appended to a JSON column a search reads with its chunks (``hit_columns``) so that the driver hands it
    # over as text, parsed by ``json_out`` only for the chunks that become hits.
    json_text: str = ""
    # How a read of chunks by key (a search's candidates and hits, ``hit_join``) joins their documents, as
    # ``d``; empty: the join metadata filters use (``reader.DOCUMENT_JOIN``).
    hit_join: str = ""
    # A timestamp column's value as ISO-8601 text, and an aware datetime as a comparable parameter.
    time_out: Callable[[Any], str] = str
    time_in: Callable[[datetime], Any] = field(default=lambda moment: moment)
    # A stored vector as a float32 array.
    vector_out: Callable[[Any], np.ndarray] = field(default=lambda value: np.asarray(value, dtype=np.float32))
    # A metadata filter compiled to (SQL over c = chunks and d = documents, parameters).
    compile_filter: Callable[[Filter], tuple[str, list[Any]]] = field(default=lambda flt: ("1 = 1", []))
    # Run one statement for many rows of parameters: (connection, SQL, rows).
    executemany: Callable[[Any, str, list[Sequence[Any]]], None] = field(
        default=lambda conn, statement, rows: conn.executemany(statement, rows))
    # The LIMIT parameter that means "no limit".
    no_limit: Any = None
    # Appended to a SELECT that reads rows the transaction will change.
    for_update: str = ""
    # A document chunk ``c`` holds one of these texts, through the store's index of chunk texts (chunk reuse):
    # texts -> (SQL with "?" marks, its parameters). The rows it selects are compared as text after.
    chunk_texts: Callable[[list[str]], tuple[str, list[Any]]] = field(
        default=lambda texts: (f"c.content IN ({', '.join('?' * len(texts))})", list(texts)))

    def sql(self, statement: str) -> str:
        """A core statement in this dialect (placeholders converted, ``{now}`` filled in)."""
        return _translate(statement, self.mark, self.now)

    def any(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column`` is one of ``values``: a condition and its parameters."""
        return self.any_list(column, list(values))

    def limit(self, limit: int | None) -> Any:
        """A LIMIT parameter; None means no limit."""
        return self.no_limit if limit is None else int(limit)


@lru_cache(maxsize=1024)
def _translate(statement: str, mark: str, now: str) -> str:
    if "{now}" in statement:
        statement = statement.replace("{now}", now)
    return statement if mark == "?" else statement.replace("?", mark)


def iso_text(value: Any) -> str:
    """A timestamp column's value as text: stored text as is, a datetime in ISO-8601."""
    return value if isinstance(value, str) else value.isoformat()


def json_value(value: Any) -> Any:
    """A JSON column's value as Python: text is parsed, an already decoded value is copied."""
    if isinstance(value, str):
        return json.loads(value)
    return dict(value) if isinstance(value, dict) else value
