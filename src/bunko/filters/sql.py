"""Metadata filters compiled to SQL for both stores: a WHERE fragment over a chunk ``c`` and its document ``d``.

Both compilers read the chunk row as ``c`` and its document row as ``d`` (a LEFT JOIN, so a chunk
without a document has d.metadata NULL). Field paths, operands and patterns are bound parameters;
the SQL text only ever contains fixed operator and type names. Every leaf is wrapped in
coalesce(..., false), so NOT and OR see true or false, never NULL.
"""

from __future__ import annotations

from typing import Any

from .language import DATE_PATTERN, DATE_RE, And, Contains, Exists, Filter, In, Node, Not, Operand, Or

_SQL_OPS = {"eq": "=", "gt": ">", "gte": ">=", "lt": "<", "lte": "<="}


class _Sql:
    def __init__(self) -> None:
        self.params: list[Any] = []

    def p(self, value: Any) -> str:
        self.params.append(value)
        return "?"


class _Field:
    """What one dialect writes for a condition on one field; :func:`_compile` writes the rest.

    Each method returns SQL whose placeholders it appends to ``out`` in the order they appear in the text.
    """

    true = "1"
    false = "0"

    def __init__(self, out: _Sql, field: tuple[str, ...]) -> None:
        self.out = out
        self.field = field

    def exists(self) -> str:
        raise NotImplementedError

    def equal_any(self, kind: str, operands: list[Operand]) -> str:
        """The value is of ``kind`` and equals one of ``operands`` (all of that kind)."""
        raise NotImplementedError

    def contains(self, operand: Operand) -> str:
        raise NotImplementedError

    def compare(self, op: str, operand: Operand) -> str:
        """``value <op> operand`` for an order operator (``<``, ``<=``, ``>``, ``>=``)."""
        raise NotImplementedError


def _compile(node: Node, out: _Sql, dialect: type[_Field]) -> str:
    """``node`` as SQL: AND, OR, NOT and the choice of leaf here, each leaf in ``dialect``."""
    if isinstance(node, And):
        return "(" + " AND ".join(_compile(i, out, dialect) for i in node.items) + ")" if node.items else dialect.true
    if isinstance(node, Or):
        return "(" + " OR ".join(_compile(i, out, dialect) for i in node.items) + ")" if node.items else dialect.false
    if isinstance(node, Not):
        return f"(NOT {_compile(node.item, out, dialect)})"
    field = dialect(out, node.field)
    if isinstance(node, Exists):
        sql = field.exists()
    elif isinstance(node, In):
        groups: dict[str, list[Operand]] = {}
        for o in node.operands:
            groups.setdefault(o.kind, []).append(o)
        sql = " OR ".join(field.equal_any(kind, operands) for kind, operands in groups.items()) or dialect.false
    elif isinstance(node, Contains):
        sql = field.contains(node.operand)
    elif node.op == "eq":
        sql = field.equal_any(node.operand.kind, [node.operand])
    else:
        sql = field.compare(_SQL_OPS[node.op], node.operand)
    return f"coalesce({sql}, {dialect.false})"


def _sqlite_path(field: tuple[str, ...]) -> str:
    return "$" + "".join(f'."{segment}"' for segment in field)


def compile_sqlite(flt: Filter) -> tuple[str, list[Any]]:
    """A WHERE fragment for the embedded store (aliases ``c`` and ``d``) and its ``?`` parameters.

    Dates go through the SQL function ``bunko_date`` (register :func:`parse_date` on the connection).
    """
    out = _Sql()
    return _compile(flt.root, out, _SqliteField), out.params


class _SqliteField(_Field):
    def __init__(self, out: _Sql, field: tuple[str, ...]) -> None:
        super().__init__(out, field)
        self.path = _sqlite_path(field)

    def src(self) -> str:
        p = self.out.p(self.path)
        return f"(CASE WHEN json_type(c.metadata, {p}) IS NOT NULL THEN c.metadata ELSE d.metadata END)"

    def jtype(self) -> str:
        return f"json_type({self.src()}, {self.out.p(self.path)})"

    def jvalue(self) -> str:
        return f"json_extract({self.src()}, {self.out.p(self.path)})"

    def exists(self) -> str:
        return f"{self.jtype()} IS NOT NULL"

    def equal_any(self, kind: str, operands: list[Operand]) -> str:
        p = self.out.p
        values = [o.value for o in operands]
        if kind == "number":
            return f"({self.jtype()} IN ('integer', 'real') AND {self.jvalue()} IN ({', '.join(p(v) for v in values)}))"
        if kind == "string":
            return f"({self.jtype()} = 'text' AND {self.jvalue()} IN ({', '.join(p(v) for v in values)}))"
        if kind == "date":
            return (f"({self.jtype()} = 'text' AND bunko_date({self.jvalue()}) IN "
                    f"({', '.join(p(v) for v in values)}))")
        if kind == "bool":
            return f"({self.jtype()} IN ({', '.join(p('true' if v else 'false') for v in values)}))"
        return f"({self.jtype()} = 'null')"

    def contains(self, operand: Operand) -> str:
        o, p = operand, self.out.p
        element = {"string": "e.type = 'text'", "number": "e.type IN ('integer', 'real')",
                   "bool": "e.type = " + ("'true'" if o.value else "'false'")}[o.kind]
        sql = ""
        if o.kind == "string":
            sql = f"({self.jtype()} = 'text' AND instr({self.jvalue()}, {p(o.value)}) > 0) OR "
        sql += (f"({self.jtype()} = 'array' AND EXISTS (SELECT 1 FROM json_each({self.src()}, {p(self.path)}) e "
                f"WHERE {element}")
        if o.kind != "bool":
            sql += f" AND e.value = {p(o.value)}"
        return f"({sql})))"

    def compare(self, op: str, operand: Operand) -> str:
        o = operand
        if o.kind == "number":
            return f"({self.jtype()} IN ('integer', 'real') AND {self.jvalue()} {op} {self.out.p(o.value)})"
        if o.kind == "date":
            return f"({self.jtype()} = 'text' AND bunko_date({self.jvalue()}) {op} {self.out.p(o.value)})"
        return f"({self.jtype()} = 'text' AND {self.jvalue()} {op} {self.out.p(o.value)})"


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
    sql = _compile(flt.root, out, _PostgresField)
    return sql.replace("?", "%s"), out.params


class _PostgresField(_Field):
    true = "true"
    false = "false"

    def v(self) -> str:
        path = list(self.field)
        return f"coalesce(c.metadata #> {self.out.p(path)}::text[], d.metadata #> {self.out.p(path)}::text[])"

    def date_of_v(self) -> str:
        # A scalar subquery names the text once; it is NULL unless the value is a JSON string.
        return (f"(SELECT {_PG_DATE.format(pattern=self.out.p(DATE_PATTERN))} FROM (SELECT CASE WHEN "
                f"jsonb_typeof({self.v()}) = 'string' THEN {self.v()} #>> '{{}}' END AS t) AS s)")

    def exists(self) -> str:
        return f"({self.v()} IS NOT NULL)"

    def equal_any(self, kind: str, operands: list[Operand]) -> str:
        v, p = self.v, self.out.p
        if kind == "number":
            return (f"CASE WHEN jsonb_typeof({v()}) = 'number' THEN ({v()})::numeric = "
                    f"ANY({p([_pg_number(o.value) for o in operands])}::numeric[]) ELSE false END")
        if kind == "string":
            return (f"(jsonb_typeof({v()}) = 'string' AND ({v()} #>> '{{}}') = "
                    f"ANY({p([o.value for o in operands])}::text[]))")
        if kind == "date":
            return f"({self.date_of_v()} = ANY({p([_pg_date_text(o) for o in operands])}::text[]::timestamptz[]))"
        if kind == "bool":
            return (f"CASE WHEN jsonb_typeof({v()}) = 'boolean' THEN ({v()})::boolean = "
                    f"ANY({p([o.value for o in operands])}::boolean[]) ELSE false END")
        return f"(jsonb_typeof({v()}) = 'null')"

    def contains(self, operand: Operand) -> str:
        o, v, p = operand, self.v, self.out.p
        cast = {"string": "text", "number": "numeric", "bool": "boolean"}[o.kind]
        element = _pg_number(o.value) if o.kind == "number" else o.value
        sql = ""
        if o.kind == "string":
            sql = (f"CASE WHEN jsonb_typeof({v()}) = 'string' THEN strpos({v()} #>> '{{}}', {p(o.value)}) > 0 "
                   "ELSE false END OR ")
        sql += f"(jsonb_typeof({v()}) = 'array' AND {v()} @> jsonb_build_array({p(element)}::{cast}))"
        return f"({sql})"

    def compare(self, op: str, operand: Operand) -> str:
        o, v, p = operand, self.v, self.out.p
        if o.kind == "number":
            return (f"CASE WHEN jsonb_typeof({v()}) = 'number' THEN ({v()})::numeric {op} "
                    f"{p(_pg_number(o.value))}::numeric ELSE false END")
        if o.kind == "date":
            return f"({self.date_of_v()} {op} {p(_pg_date_text(o))}::timestamptz)"
        return (f"(jsonb_typeof({v()}) = 'string' AND ({v()} #>> '{{}}') COLLATE \"C\" {op} "
                f"{p(o.value)}::text COLLATE \"C\")")


__all__ = ["compile_postgres", "compile_sqlite"]
