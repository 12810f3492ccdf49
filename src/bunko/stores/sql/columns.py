"""Metadata fields held in memory as factorised columns, and filters evaluated over them.

A filter over a large collection costs, in SQL, a JSON path extraction per row and per leaf:
hundreds of milliseconds at 100,000 chunks. Held as a column, a field is one small integer
code per chunk and a list of its distinct values: each leaf of the filter is evaluated once
per distinct value, with the Python evaluator (so the semantics are the filter language's
own, which the store conformance tests hold the SQL of both backends to), and mapped to the
rows through their codes; ``$and``, ``$or`` and ``$not`` combine the masks.

A column's value for a chunk is the chunk's own, else its document's (the precedence filters
use); code 0 stands for a missing field. The stores keep the columns fresh: SQLite's line up
with its in-memory matrix, PostgreSQL's carry their chunk ids (see
``_MetadataColumns`` in :mod:`bunko.stores.postgres`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from ...filters import And, Compare, Filter, In, Node, Not, Operand, Or, parse_date

MISSING = object()


class Misaligned(Exception):
    """A column does not line up with the rows it should describe (a concurrent write)."""


class Column:
    """One metadata field of a collection's chunks, factorised: ``codes[i]`` indexes ``values``."""

    __slots__ = ("_equal", "_index", "codes", "high_water", "mutation_seq", "size", "values")

    def __init__(self) -> None:
        self.values: list[Any] = [MISSING]
        self._index: dict[str | None, int] = {None: 0}
        # The codes of the values each typed operand equals (see _equality_keys): $eq and $in by lookup.
        self._equal: dict[tuple[str, Any], list[int]] = {}
        self.codes = np.empty(0, dtype=np.int32)
        self.size = 0
        # The collection state the column was read at (the store decides what these mean).
        self.mutation_seq = -1
        self.high_water = 0

    def append(self, texts: list[str | None]) -> None:
        """Append the JSON texts of new rows (None: missing)."""
        index, values = self._index, self.values
        new = np.empty(len(texts), dtype=np.int32)
        for i, text in enumerate(texts):
            code = index.get(text)
            if code is None:
                code = index[text] = len(values)
                value = json.loads(text)  # type: ignore[arg-type]
                values.append(value)
                for key in _equality_keys(value):
                    self._equal.setdefault(key, []).append(code)
            new[i] = code
        self.codes = np.concatenate([self.codes[: self.size], new]) if self.size else new
        self.size = len(self.codes)

    def equal_any(self, operands: tuple[Operand, ...]) -> np.ndarray:
        """For each value, whether it equals one of ``operands`` (as ``$eq`` / ``$in`` compare)."""
        truth = np.zeros(len(self.values), dtype=bool)
        for operand in operands:
            truth[self._equal.get((operand.kind, operand.value), [])] = True
        return truth


def _equality_keys(value: Any) -> list[tuple[str, Any]]:
    """The (operand kind, operand value) pairs that ``filters._equal`` finds equal to ``value``.

    A number equals numbers (7 and 7.0 are one dict key, as they are equal), a string equals
    strings and, when it is an ISO-8601 date, the same instant; booleans and null only themselves.
    """
    if isinstance(value, bool):
        return [("bool", value)]
    if isinstance(value, int | float):
        return [("number", value)]
    if value is None:
        return [("null", None)]
    if isinstance(value, str):
        micros = parse_date(value)
        return [("string", value)] if micros is None else [("string", value), ("date", micros)]
    return []  # arrays and objects equal no operand


def nested(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """A metadata object holding ``value`` at ``path`` (empty for a missing value)."""
    if value is MISSING:
        return {}
    for key in reversed(path):
        value = {key: value}
    return value


def filter_mask(flt: Filter, rows: int, column: Callable[[tuple[str, ...]], Column]) -> np.ndarray:
    """Which of ``rows`` rows pass ``flt``, given each field's column.

    Raises ``Misaligned`` when a column is not ``rows`` long.
    """

    def mask(node: Node) -> np.ndarray:
        if isinstance(node, And):
            out = np.ones(rows, dtype=bool)
            for item in node.items:
                out &= mask(item)
            return out
        if isinstance(node, Or):
            out = np.zeros(rows, dtype=bool)
            for item in node.items:
                out |= mask(item)
            return out
        if isinstance(node, Not):
            return ~mask(node.item)
        col = column(node.field)
        if col.size != rows:
            raise Misaligned
        if isinstance(node, In):
            truth = col.equal_any(node.operands)
        elif isinstance(node, Compare) and node.op == "eq":
            truth = col.equal_any((node.operand,))
        else:
            leaf = Filter(node)
            truth = np.fromiter((leaf.matches(nested(node.field, v)) for v in col.values), dtype=bool,
                                count=len(col.values))
        return truth[col.codes]

    return mask(flt.root)
