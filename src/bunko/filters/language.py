"""The metadata filter language (R18): a Mongo-style filter parsed into a small AST and evaluated in Python
with the same rules as the stores' SQL (see :mod:`bunko.filters`)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Union

from ..errors import FilterError, FilterProblem
from ..types import UNSTORABLE, unstorable

FIELD_OPERATORS = ("$eq", "$ne", "$gt", "$gte", "$lt", "$lte", "$in", "$nin", "$exists", "$contains", "$not")
LOGICAL_OPERATORS = ("$and", "$or", "$not")
DEFAULT_DATE_FIELD = "created_at"

MAX_DEPTH = 16
MAX_NODES = 500
MAX_IN_ITEMS = 1000
MAX_STRING = 1000
MAX_PATH_SEGMENTS = 8

_SEGMENT_RE = re.compile(r"^[\w][\w\-]{0,63}$")
# The ISO-8601 forms bunko reads as dates; anything else is a plain string. Hours stop at 23,
# seconds at 59 and offsets at ±14:59, so every string that passes is a real instant in Python,
# SQLite and PostgreSQL alike (day-of-month validity is checked separately).
DATE_PATTERN = (
    r"^([0-9]{4})-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])"
    r"([T ]([01][0-9]|2[0-3]):([0-5][0-9])(:([0-5][0-9])(\.[0-9]{1,6})?)?(Z|[+-](0[0-9]|1[0-4]):[0-5][0-9])?)?$"
)
DATE_RE = re.compile(DATE_PATTERN)
_EPOCH = datetime(1970, 1, 1)
_US = timedelta(microseconds=1)


def parse_date(value: Any) -> int | None:
    """Microseconds since 1970-01-01 UTC for an ISO-8601 date or datetime string, else None."""
    if not isinstance(value, str):
        return None
    m = DATE_RE.fullmatch(value)
    if m is None:
        return None
    try:
        year, month, day = int(m.group(1)), int(m.group(2)), int(m.group(3))
        hour = int(m.group(5) or 0)
        minute = int(m.group(6) or 0)
        second = int(m.group(8) or 0)
        fraction = int((m.group(9) or ".0")[1:].ljust(6, "0"))
        naive = datetime(year, month, day, hour, minute, second, fraction)
    except ValueError:  # 2023-02-29, year 0000, ...
        return None
    offset = 0
    zone = m.group(10)
    if zone and zone != "Z":
        sign = 1 if zone[0] == "+" else -1
        offset = sign * (int(zone[1:3]) * 60 + int(zone[4:6])) * 60_000_000
    return (naive - _EPOCH) // _US - offset


# -- the AST ---------------------------------------------------------------------------------------


@dataclass(slots=True, frozen=True)
class Operand:
    """A typed comparison value: kind is number, date, string, bool or null."""

    kind: str
    value: Any  # int | float for numbers, microseconds for dates, str, bool or None
    text: Any = None  # the value as written (for dates: the original string)


@dataclass(slots=True, frozen=True)
class Compare:
    """``field <op> operand``; op is eq, gt, gte, lt or lte."""

    field: tuple[str, ...]
    op: str
    operand: Operand


@dataclass(slots=True, frozen=True)
class In:
    """``field`` equals one of ``operands`` (``$in``; ``$nin`` is ``Not(In)``)."""

    field: tuple[str, ...]
    operands: tuple[Operand, ...]


@dataclass(slots=True, frozen=True)
class Exists:
    """The field is present (with any value, null included)."""

    field: tuple[str, ...]


@dataclass(slots=True, frozen=True)
class Contains:
    """An array field has an element equal to ``operand``, or a string field contains it as a substring."""

    field: tuple[str, ...]
    operand: Operand


@dataclass(slots=True, frozen=True)
class And:
    """All of ``items`` (an empty And matches everything)."""

    items: tuple[Node, ...]


@dataclass(slots=True, frozen=True)
class Or:
    """Any of ``items`` (an empty Or matches nothing)."""

    items: tuple[Node, ...]


@dataclass(slots=True, frozen=True)
class Not:
    """The negation of ``item``."""

    item: Node


Node = Union[Compare, In, Exists, Contains, And, Or, Not]  # noqa: UP007 - a runtime alias


@dataclass(slots=True, frozen=True)
class Filter:
    """A parsed, validated filter. Build it with :func:`parse_filter` or :func:`build_filter`."""

    root: Node
    spec: Any = None  # the JSON-ready form it was parsed from

    @property
    def is_empty(self) -> bool:
        """True when the filter matches everything (``{}``)."""
        return isinstance(self.root, And) and not self.root.items

    def fields(self) -> list[str]:
        """The dotted field names the filter reads."""
        found: dict[str, None] = {}

        def walk(node: Node) -> None:
            if isinstance(node, And | Or):
                for item in node.items:
                    walk(item)
            elif isinstance(node, Not):
                walk(node.item)
            else:
                found[".".join(node.field)] = None

        walk(self.root)
        return list(found)

    def matches(self, chunk_metadata: Mapping[str, Any] | None, document_metadata: Mapping[str, Any] | None = None
                ) -> bool:
        """Evaluate in Python: does a chunk with these metadata pass the filter?"""
        return _evaluate(self.root, chunk_metadata or {}, document_metadata or {})

    def __and__(self, other: Filter) -> Filter:
        parts = [f for f in (self, other) if not f.is_empty]
        if not parts:
            return self
        if len(parts) == 1:
            return parts[0]
        return Filter(And((parts[0].root, parts[1].root)), {"$and": [parts[0].spec, parts[1].spec]})

    def __str__(self) -> str:
        return json.dumps(self.spec, ensure_ascii=False, sort_keys=True)


# -- parsing ----------------------------------------------------------------------------------------


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


class _Parser:
    def __init__(self) -> None:
        self.problems: list[FilterProblem] = []
        self.nodes = 0

    def fail(self, path: str, message: str) -> None:
        self.problems.append(FilterProblem(path, message))

    @staticmethod
    def join(path: str, key: str) -> str:
        return f"{path}.{key}" if path else key

    def filter(self, spec: Any, path: str, depth: int) -> Node | None:
        self.nodes += 1
        if depth > MAX_DEPTH:
            self.fail(path, f"nested deeper than {MAX_DEPTH} levels")
            return None
        if self.nodes > MAX_NODES:
            if self.nodes == MAX_NODES + 1:
                self.fail(path, f"more than {MAX_NODES} conditions")
            return None
        if not isinstance(spec, Mapping):
            self.fail(path, f"a filter must be an object, got {_type_name(spec)}")
            return None
        items: list[Node] = []
        for key, value in spec.items():
            if not isinstance(key, str):
                self.fail(path, f"keys must be strings, got {_type_name(key)}")
                continue
            here = self.join(path, key)
            if key in ("$and", "$or"):
                node = self.logical(key, value, here, depth)
            elif key == "$not":
                inner = self.filter(value, here, depth + 1)
                node = None if inner is None else Not(inner)
            elif key.startswith("$"):
                self.fail(here, f"unknown operator {key}; at this level use a field name, $and, $or or $not")
                continue
            else:
                field = self.field(key, path)
                if field is None:
                    continue
                node = self.condition(field, value, here, depth)
            if node is not None:
                items.append(node)
        return items[0] if len(items) == 1 else And(tuple(items))

    def logical(self, key: str, value: Any, path: str, depth: int) -> Node | None:
        if not isinstance(value, list | tuple):
            self.fail(path, f"{key} needs a list of filters, got {_type_name(value)}")
            return None
        if not value:
            self.fail(path, f"{key} needs at least one filter")
            return None
        items = [self.filter(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
        if any(i is None for i in items):
            return None
        return And(tuple(items)) if key == "$and" else Or(tuple(items))  # type: ignore[arg-type]

    def field(self, key: str, path: str) -> tuple[str, ...] | None:
        segments = key.split(".")
        bad = (
            len(segments) > MAX_PATH_SEGMENTS
            or any(not _SEGMENT_RE.fullmatch(s) or s.isdigit() for s in segments)
        )
        if bad:
            self.fail(path or "(filter)",
                      f"invalid field name {key!r}: use letters, digits, '_' or '-' (up to 64 per part, not only "
                      f"digits), parts joined by '.' (at most {MAX_PATH_SEGMENTS})")
            return None
        return tuple(segments)

    def condition(self, field: tuple[str, ...], value: Any, path: str, depth: int) -> Node | None:
        if isinstance(value, Mapping):
            keys = list(value)
            if not keys:
                self.fail(path, "an empty operator object; write a value or an operator such as {\"$eq\": ...}")
                return None
            if not all(isinstance(k, str) and k.startswith("$") for k in keys):
                self.fail(path, "a field's value must be a value or an object of operators ($eq, $gt, ...); "
                                "to reach a nested field use a dotted name such as 'author.name'")
                return None
            items = []
            for op in keys:
                node = self.operator(field, op, value[op], path, depth)
                if node is not None:
                    items.append(node)
            if len(items) != len(keys):
                return None
            return items[0] if len(items) == 1 else And(tuple(items))
        return self.operator(field, "$eq", value, path, depth)

    def operand(self, op: str, value: Any, path: str, *, allow: tuple[str, ...], dates: bool = True) -> Operand | None:
        kind: str
        typed: Any
        if isinstance(value, bool):
            kind, typed = "bool", value
        elif isinstance(value, int | float):
            if isinstance(value, float) and not math.isfinite(value):
                self.fail(path, f"{op} needs a finite number, got {value}")
                return None
            kind, typed = "number", value
        elif isinstance(value, str):
            if len(value) > MAX_STRING:
                self.fail(path, f"{op}: the string is longer than {MAX_STRING} characters")
                return None
            if unstorable(value):
                self.fail(path, f"{op}: {UNSTORABLE}")
                return None
            micros = parse_date(value) if dates else None
            kind, typed = ("date", micros) if micros is not None else ("string", value)
        elif value is None:
            kind, typed = "null", None
        else:
            kind, typed = "other", None
        if kind not in allow:
            self.fail(path, f"{op} needs {_ALLOWED_TEXT[allow]}, got {_type_name(value)}")
            return None
        return Operand(kind, typed, value)

    def operator(self, field: tuple[str, ...], op: str, value: Any, path: str, depth: int) -> Node | None:
        scalar = ("number", "date", "string", "bool", "null")
        if op in ("$eq", "$ne"):
            operand = self.operand(op, value, path, allow=scalar)
            if operand is None:
                return None
            node: Node = Compare(field, "eq", operand)
            return Not(node) if op == "$ne" else node
        if op in ("$gt", "$gte", "$lt", "$lte"):
            operand = self.operand(op, value, path, allow=("number", "date", "string"))
            return None if operand is None else Compare(field, op[1:], operand)
        if op in ("$in", "$nin"):
            if not isinstance(value, list | tuple):
                self.fail(path, f"{op} needs a list of values, got {_type_name(value)}")
                return None
            if len(value) > MAX_IN_ITEMS:
                self.fail(path, f"{op} takes at most {MAX_IN_ITEMS} values, got {len(value)}")
                return None
            operands = [self.operand(f"{op}[{i}]", v, path, allow=scalar) for i, v in enumerate(value)]
            if any(o is None for o in operands):
                return None
            node = In(field, tuple(operands))  # type: ignore[arg-type]
            return Not(node) if op == "$nin" else node
        if op == "$exists":
            if not isinstance(value, bool):
                self.fail(path, f"$exists needs true or false, got {_type_name(value)}")
                return None
            return Exists(field) if value else Not(Exists(field))
        if op == "$contains":
            operand = self.operand(op, value, path, allow=("number", "string", "bool"), dates=False)
            return None if operand is None else Contains(field, operand)
        if op == "$not":
            if not isinstance(value, Mapping) or not value or not all(
                    isinstance(k, str) and k.startswith("$") for k in value):
                self.fail(path, f"$not needs an object of operators such as {{\"$gt\": 5}}, got {_type_name(value)}")
                return None
            inner = self.condition(field, value, path, depth + 1)
            return None if inner is None else Not(inner)
        if op in ("$and", "$or"):
            self.fail(path, f"{op} belongs at the filter level, not inside a field")
            return None
        self.fail(path, f"unknown operator {op}; use one of {', '.join(FIELD_OPERATORS)}")
        return None


_ALLOWED_TEXT = {
    ("number", "date", "string", "bool", "null"): "a string, number, boolean, date or null",
    ("number", "date", "string"): "a number, a date or a string",
    ("number", "string", "bool"): "a string, number or boolean",
}


FilterLike = Union["Filter", Mapping[str, Any], str, None]


def parse_filter(spec: FilterLike) -> Filter | None:
    """Validate a filter (an object, or its JSON text); None or ``{}`` stay as given.

    Raises :class:`FilterError` listing every bad part with its path.
    """
    if spec is None or isinstance(spec, Filter):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        if not text:
            return None
        try:
            spec = json.loads(spec)  # unstripped, so the column numbers point into what was typed
        except json.JSONDecodeError as exc:
            raise FilterError([FilterProblem("", f"not valid JSON: {exc.msg} at line {exc.lineno} column "
                                                 f"{exc.colno}")]) from None
        except RecursionError:  # JSON nested far deeper than any filter may be
            raise FilterError([FilterProblem("", f"nested deeper than {MAX_DEPTH} levels")]) from None
    parser = _Parser()
    root = parser.filter(spec, "", 0)
    if parser.problems:
        raise FilterError(parser.problems)
    assert root is not None
    return Filter(root, _json_ready(spec))


def _json_ready(spec: Any) -> Any:
    if isinstance(spec, Mapping):
        return {str(k): _json_ready(v) for k, v in spec.items()}
    if isinstance(spec, list | tuple):
        return [_json_ready(v) for v in spec]
    return spec


def as_filter(spec: FilterLike) -> Filter | None:
    """The parsed filter, or None when there is nothing to filter on (None or ``{}``)."""
    parsed = parse_filter(spec)
    return None if parsed is None or parsed.is_empty else parsed


# -- shortcuts (R21) --------------------------------------------------------------------------------


def file_type_filter(file_types: Iterable[str]) -> dict[str, Any]:
    """A filter on file types: kinds (``pdf``, ``markdown``), suffixes (``.md``, ``htm``) or MIME types.

    Loaders record the kind as ``kind`` and the MIME type as ``mime_type`` in document metadata.
    """
    from ..loaders import file_kinds, suffix_kinds

    known_kinds, by_suffix = file_kinds(), suffix_kinds()
    kinds: list[str] = []
    mimes: list[str] = []
    unknown: list[str] = []
    for raw in file_types:
        item = str(raw).strip().lower()
        if "/" in item:
            mimes.append(item)
            continue
        name = item.lstrip(".")
        kind = name if name in known_kinds else by_suffix.get("." + name)
        if kind is None:
            unknown.append(str(raw))
        elif kind not in kinds:
            kinds.append(kind)
    if unknown or not (kinds or mimes):
        known = sorted(set(known_kinds) | {s.lstrip(".") for s in by_suffix})
        raise FilterError([FilterProblem("file_types", f"unknown file type {u!r}; use one of {', '.join(known)} "
                                                       "or a MIME type such as application/pdf") for u in unknown]
                          or [FilterProblem("file_types", "no file type given")])
    parts: list[dict[str, Any]] = []
    if kinds:
        parts.append({"kind": {"$in": kinds}})
    if mimes:
        parts.append({"mime_type": {"$in": mimes}})
    return parts[0] if len(parts) == 1 else {"$or": parts}


def date_window_filter(since: str | None = None, until: str | None = None,
                       date_field: str = DEFAULT_DATE_FIELD) -> dict[str, Any]:
    """``since <= date_field`` and ``date_field <= until``; a date-only ``until`` includes that whole day."""
    problems = []
    clause: dict[str, Any] = {}
    for name, value in (("since", since), ("until", until)):
        if value is None:
            continue
        if parse_date(value) is None:
            problems.append(FilterProblem(name, f"needs an ISO-8601 date or datetime such as 2024-01-01 or "
                                                f"2024-01-01T09:00:00+09:00, got {value!r}"))
    if problems:
        raise FilterError(problems)
    if since is not None:
        clause["$gte"] = since
    if until is not None:
        if len(until) == 10:  # a day: everything before the next midnight
            day = datetime.strptime(until, "%Y-%m-%d")
            if day.year == 9999 and day.month == 12 and day.day == 31:
                clause["$lte"] = "9999-12-31T23:59:59.999999Z"
            else:
                clause["$lt"] = (day + timedelta(days=1)).strftime("%Y-%m-%d")
        else:
            clause["$lte"] = until
    return {date_field: clause} if clause else {}


def build_filter(filter: FilterLike = None, *, file_types: Sequence[str] | None = None, since: str | None = None,
                 until: str | None = None, date_field: str | None = None) -> Filter | None:
    """One filter from a user filter and the shortcuts (file types, a time window), ANDed together.

    Returns None when nothing restricts the search.
    """
    parts: list[Any] = []
    problems: list[FilterProblem] = []
    for make in (lambda: parse_filter(filter),
                 lambda: parse_filter(file_type_filter(file_types)) if file_types else None,
                 lambda: parse_filter(date_window_filter(since, until, date_field or DEFAULT_DATE_FIELD))
                 if since is not None or until is not None else None):
        try:
            parsed = make()
        except FilterError as exc:
            problems.extend(exc.problems)
            continue
        if parsed is not None and not parsed.is_empty:
            parts.append(parsed)
    if date_field is not None and since is None and until is None:
        problems.append(FilterProblem("date_field", "given without since or until"))
    if problems:
        raise FilterError(problems)
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    return Filter(And(tuple(p.root for p in parts)), {"$and": [p.spec for p in parts]})


# -- evaluation in Python ---------------------------------------------------------------------------


_MISSING = object()


def _walk(meta: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        if not isinstance(meta, Mapping) or key not in meta:
            return _MISSING
        meta = meta[key]
    return meta


def _lookup(path: tuple[str, ...], chunk: Mapping[str, Any], document: Mapping[str, Any]) -> Any:
    value = _walk(chunk, path)
    return _walk(document, path) if value is _MISSING else value


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _equal(value: Any, operand: Operand) -> bool:
    kind = operand.kind
    if kind == "number":
        return _is_number(value) and value == operand.value
    if kind == "date":
        return parse_date(value) == operand.value
    if kind == "string":
        return isinstance(value, str) and value == operand.value
    if kind == "bool":
        return isinstance(value, bool) and value == operand.value
    return value is None  # null


_ORDER = {"gt": lambda a, b: a > b, "gte": lambda a, b: a >= b, "lt": lambda a, b: a < b, "lte": lambda a, b: a <= b}


def _evaluate(node: Node, chunk: Mapping[str, Any], document: Mapping[str, Any]) -> bool:
    if isinstance(node, And):
        return all(_evaluate(i, chunk, document) for i in node.items)
    if isinstance(node, Or):
        return any(_evaluate(i, chunk, document) for i in node.items)
    if isinstance(node, Not):
        return not _evaluate(node.item, chunk, document)
    value = _lookup(node.field, chunk, document)
    if isinstance(node, Exists):
        return value is not _MISSING
    if value is _MISSING:
        return False
    if isinstance(node, In):
        return any(_equal(value, o) for o in node.operands)
    if isinstance(node, Contains):
        operand = node.operand
        if isinstance(value, list):
            return any(_equal(v, operand) for v in value)
        return operand.kind == "string" and isinstance(value, str) and operand.value in value
    operand = node.operand
    if node.op == "eq":
        return _equal(value, operand)
    if operand.kind == "number":
        return _is_number(value) and _ORDER[node.op](value, operand.value)
    if operand.kind == "date":
        micros = parse_date(value)
        return micros is not None and _ORDER[node.op](micros, operand.value)
    return isinstance(value, str) and _ORDER[node.op](value, operand.value)


__all__ = [
    "DATE_PATTERN",
    "DATE_RE",
    "DEFAULT_DATE_FIELD",
    "FIELD_OPERATORS",
    "LOGICAL_OPERATORS",
    "MAX_DEPTH",
    "MAX_IN_ITEMS",
    "MAX_NODES",
    "MAX_PATH_SEGMENTS",
    "MAX_STRING",
    "And",
    "Compare",
    "Contains",
    "Exists",
    "Filter",
    "FilterError",
    "FilterLike",
    "In",
    "Node",
    "Not",
    "Operand",
    "Or",
    "as_filter",
    "build_filter",
    "date_window_filter",
    "file_type_filter",
    "parse_date",
    "parse_filter",
]
