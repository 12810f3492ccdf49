"""Typed metadata filters (R18): parse a Mongo-style filter into a small AST, evaluate it, compile it to SQL.

A filter is a JSON object::

    {"year": {"$gte": 2020}, "kind": {"$in": ["pdf", "docx"]},
     "$or": [{"tags": {"$contains": "防災"}}, {"published_at": {"$gte": "2024-01-01"}}]}

* Keys are field names (dotted paths reach into nested objects: ``author.name``) or the
  logical operators ``$and``, ``$or`` (lists of filters) and ``$not`` (one filter). Several
  keys in one object are ANDed. A bare value is ``$eq``: ``{"kind": "pdf"}``.
* Field operators: ``$eq $ne $gt $gte $lt $lte $in $nin $exists $contains``, and ``$not``
  around an operator object (``{"year": {"$not": {"$gt": 2020}}}``).
* A field is looked up in the chunk's metadata first (page_number, section, ...), then in its
  document's metadata (loader and user metadata: filename, kind, created_at, tags, ...), the
  same precedence a search hit's ``metadata`` shows.

Typing: the operand decides the comparison. A number compares with JSON numbers only; an
ISO-8601 date or datetime string (``2024-01-01``, ``2024-01-01T09:30:00+09:00``) compares as
an instant with stored strings that are such dates (a date alone is midnight UTC, a datetime
without an offset is UTC); any other string compares with JSON strings by code point; a
boolean equals JSON booleans only; ``null`` equals JSON null. A value of another type simply
does not match (it never breaks the query). ``$ne``, ``$nin`` and ``$not`` are the exact
negations of ``$eq``, ``$in`` and their operand, so they also match rows where the field is
missing or of another type. ``$contains`` is element membership on arrays (typed equality, not
date-aware) and literal, case-sensitive substring on strings.

Both backends compile the same AST: keys and values only ever travel as bound parameters,
and every predicate is two-valued (never SQL NULL), so negation is exact. :func:`matches`
evaluates a filter in Python with the same rules; the tests check SQL against it.
"""

from . import language, sql
from .language import *  # noqa: F403 - the package's names are its modules' public names
from .sql import *  # noqa: F403

__all__ = [*language.__all__, *sql.__all__]
