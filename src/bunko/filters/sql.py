"""Metadata filters compiled to SQL for both stores: a WHERE fragment over a chunk ``c`` and its document ``d``.

Both compilers read the chunk row as ``c`` and its document row as ``d`` (a LEFT JOIN, so a chunk
without a document has d.metadata NULL). Field paths, operands and patterns are bound parameters;
the SQL text only ever contains fixed operator and type names. Every leaf is wrapped in
coalesce(..., false), so NOT and OR see true or false, never NULL.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .language import DATE_PATTERN, DATE_RE, And, Contains, Exists, Filter, In, Node, Not, Operand, Or

_SQL_OPS = {"eq": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


class _Sql:
    def __init__(self) -> None:
        self.params: list[Any] = []

    def p(self, value: Any) -> str:
        self.params.append(value)
        return "?"


def _sqlite_path(field: tuple[str, ...]) -> str:
    return "$" + "".join(f'."{segment}"' for segment in field)


def compile_sqlite(flt: Filter) -> tuple[str, list[Any]]:
    """A WHERE fragment for the embedded store (aliases ``c`` and ``d``) and its ``?`` parameters.

    Dates go through the SQL function ``bunko_date`` (register :func:`parse_date` on the connection).
    """
    out = _Sql()
    return _sqlite(flt.root, out), out.params


def _sqlite(node: Node, out: _Sql) -> str:
    if isinstance(node, And):
        return "(" + " AND ".join(_sqlite(i, out) for i in node.items) + ")" if node.items else "1"
    if isinstance(node, Or):
        return "(" + " OR ".join(_sqlite(i, out) for i in node.items) + ")" if node.items else "0"
    if isinstance(node, Not):
        return f"(NOT {_sqlite(node.item, out)})"
    path = _sqlite_path(node.field)

    def src() -> str:
        return f"(CASE WHEN json_type(c.metadata, {out.p(path)}) IS NOT NULL THEN c.metadata ELSE d.metadata END)"

    def jtype() -> str:
        return f"json_type({src()}, {out.p(path)})"

    def jvalue() -> str:
        return f"json_extract({src()}, {out.p(path)})"

    def equal_any(kind: str, values: list[Any]) -> str:
        if kind == "number":
            return f"({jtype()} IN ('integer', 'real') AND {jvalue()} IN ({', '.join(out.p(v) for v in values)}))"
        if kind == "string":
            return f"({jtype()} = 'text' AND {jvalue()} IN ({', '.join(out.p(v) for v in values)}))"
        if kind == "date":
            return (f"({jtype()} = 'text' AND bunko_date({jvalue()}) IN "
                    f"({', '.join(out.p(v) for v in values)}))")
        if kind == "bool":
            return f"({jtype()} IN ({', '.join(out.p('true' if v else 'false') for v in values)}))"
        return f"({jtype()} = 'null')"

    if isinstance(node, Exists):
        sql = f"{jtype()} IS NOT NULL"
    elif isinstance(node, In):
        groups: dict[str, list[Any]] = {}
        for o in node.operands:
            groups.setdefault(o.kind, []).append(o.value)
        sql = " OR ".join(equal_any(kind, values) for kind, values in groups.items()) or "0"
    elif isinstance(node, Contains):
        # Parameters are appended in the order their placeholders appear in the text.
        o = node.operand
        element = {"string": "e.type = 'text'", "number": "e.type IN ('integer', 'real')",
                   "bool": "e.type = " + ("'true'" if o.value else "'false'")}[o.kind]
        sql = ""
        if o.kind == "string":
            sql = f"({jtype()} = 'text' AND instr({jvalue()}, {out.p(o.value)}) > 0) OR "
        sql += f"({jtype()} = 'array' AND EXISTS (SELECT 1 FROM json_each({src()}, {out.p(path)}) e WHERE {element}"
        if o.kind != "bool":
            sql += f" AND e.value = {out.p(o.value)}"
        sql = f"({sql})))"
    else:
        o = node.operand
        if node.op == "eq":
            sql = equal_any(o.kind, [o.value])
        else:
            op = _SQL_OPS[node.op]
            if o.kind == "number":
                sql = f"({jtype()} IN ('integer', 'real') AND {jvalue()} {op} {out.p(o.value)})"
            elif o.kind == "date":
                sql = f"({jtype()} = 'text' AND bunko_date({jvalue()}) {op} {out.p(o.value)})"
            else:
                sql = f"({jtype()} = 'text' AND {jvalue()} {op} {out.p(o.value)})"
    return f"coalesce({sql}, 0)"


def _pg_number(value: int | float) -> Any:
    # A float goes in as its shortest round-trip text, the same digits json.dumps stored.
    from decimal import Decimal

    return Decimal(value) if isinstance(value, int) else Decimal(repr(value))


def _pg_date_text(operand: Operand) -> str:
    text = str(operand.text)
    if DATE_RE.fullmatch(text).group(10):  # type: ignore[union-attr]
        return text
    return text + ("T00:00:00Z" if len(text) == 10 else "Z")


# The PostgreSQL twin of parse_date: the regex, then day-of-month validity, and only then the cast,
# nested in CASE so that no cast ever sees a string it would refuse.
_PG_DATE = (
    "CASE WHEN t ~ {pattern} THEN CASE WHEN substr(t, 1, 4)::int >= 1 AND substr(t, 9, 2)::int <= "
    "CASE substr(t, 6, 2)::int WHEN 2 THEN CASE WHEN (mod(substr(t, 1, 4)::int, 4) = 0 "
    "AND mod(substr(t, 1, 4)::int, 100) <> 0) OR mod(substr(t, 1, 4)::int, 400) = 0 THEN 29 ELSE 28 END "
    "WHEN 4 THEN 30 WHEN 6 THEN 30 WHEN 9 THEN 30 WHEN 11 THEN 30 ELSE 31 END "
    "THEN (CASE WHEN t ~ '(Z|[+-][0-9]{{2}}:[0-9]{{2}})$' THEN t "
    "ELSE t || CASE WHEN length(t) = 10 THEN 'T00:00:00Z' ELSE 'Z' END END)::timestamptz END END"
)


def compile_postgres(flt: Filter) -> tuple[str, list[Any]]:
    """A WHERE fragment for PostgreSQL (aliases ``c`` and ``d``) and its ``%s`` parameters."""
    out = _Sql()
    sql = _postgres(flt.root, out)
    return sql.replace("?", "%s"), out.params


def _postgres(node: Node, out: _Sql) -> str:
    if isinstance(node, And):
        return "(" + " AND ".join(_postgres(i, out) for i in node.items) + ")" if node.items else "true"
    if isinstance(node, Or):
        return "(" + " OR ".join(_postgres(i, out) for i in node.items) + ")" if node.items else "false"
    if isinstance(node, Not):
        return f"(NOT {_postgres(node.item, out)})"
    path = list(node.field)

    def v() -> str:
        return f"coalesce(c.metadata #> {out.p(path)}::text[], d.metadata #> {out.p(path)}::text[])"

    def date_of_v() -> str:
        # A scalar subquery names the text once; it is NULL unless the value is a JSON string.
        return (f"(SELECT {_PG_DATE.format(pattern=out.p(DATE_PATTERN))} FROM (SELECT CASE WHEN jsonb_typeof({v()}) "
                f"= 'string' THEN {v()} #>> '{{}}' END AS t) AS s)")

    def equal_any(kind: str, values: list[Any]) -> str:
        if kind == "number":
            return (f"CASE WHEN jsonb_typeof({v()}) = 'number' THEN ({v()})::numeric = ANY({out.p(values)}::numeric[]) "
                    "ELSE false END")
        if kind == "string":
            return f"(jsonb_typeof({v()}) = 'string' AND ({v()} #>> '{{}}') = ANY({out.p(values)}::text[]))"
        if kind == "date":
            return f"({date_of_v()} = ANY({out.p(values)}::text[]::timestamptz[]))"
        if kind == "bool":
            return (f"CASE WHEN jsonb_typeof({v()}) = 'boolean' THEN ({v()})::boolean = "
                    f"ANY({out.p(values)}::boolean[]) ELSE false END")
        return f"(jsonb_typeof({v()}) = 'null')"

    def values_of(kind: str, operands: Iterable[Operand]) -> list[Any]:
        if kind == "number":
            return [_pg_number(o.value) for o in operands]
        if kind == "date":
            return [_pg_date_text(o) for o in operands]
        return [o.value for o in operands]

    if isinstance(node, Exists):
        sql = f"({v()} IS NOT NULL)"
    elif isinstance(node, In):
        groups: dict[str, list[Operand]] = {}
        for o in node.operands:
            groups.setdefault(o.kind, []).append(o)
        sql = " OR ".join(equal_any(kind, values_of(kind, ops)) for kind, ops in groups.items()) or "false"
    elif isinstance(node, Contains):
        # Parameters are appended in the order their placeholders appear in the text.
        o = node.operand
        cast = {"string": "text", "number": "numeric", "bool": "boolean"}[o.kind]
        element = _pg_number(o.value) if o.kind == "number" else o.value
        sql = ""
        if o.kind == "string":
            sql = (f"CASE WHEN jsonb_typeof({v()}) = 'string' THEN strpos({v()} #>> '{{}}', {out.p(o.value)}) > 0 "
                   "ELSE false END OR ")
        sql += f"(jsonb_typeof({v()}) = 'array' AND {v()} @> jsonb_build_array({out.p(element)}::{cast}))"
        sql = f"({sql})"
    else:
        o = node.operand
        if node.op == "eq":
            sql = equal_any(o.kind, values_of(o.kind, [o]))
        else:
            op = _SQL_OPS[node.op]
            if o.kind == "number":
                sql = (f"CASE WHEN jsonb_typeof({v()}) = 'number' THEN ({v()})::numeric {op} "
                       f"{out.p(_pg_number(o.value))}::numeric ELSE false END")
            elif o.kind == "date":
                sql = f"({date_of_v()} {op} {out.p(_pg_date_text(o))}::timestamptz)"
            else:
                sql = (f"(jsonb_typeof({v()}) = 'string' AND ({v()} #>> '{{}}') COLLATE \"C\" {op} "
                       f"{out.p(o.value)}::text COLLATE \"C\")")
    return f"coalesce({sql}, false)"


__all__ = ["compile_postgres", "compile_sqlite"]
