"""``bunko admin check``: a store's consistency, read with plain SQL across every tenant (the operator's view).

The checks the fault tests run after a crash, an outage or a full disk, as a command an operator can run after
one of those in production:

- ``integrity`` (SQLite): ``PRAGMA integrity_check`` and ``PRAGMA foreign_key_check``;
- ``collection_counts``: each collection's document and chunk counters equal its rows;
- ``documents_whole``: each document's chunk count is its current version's chunks;
- ``orphan_chunks``: no chunk names a document that does not exist;
- ``keyword_rows``: each collection's keyword token total equals its chunks' lengths (what BM25 divides by);
  SQLite: and its postings list each of its chunks once (the segments' lists of their chunks, less the deleted).

Each check answers its problems (at most :data:`MAX_PROBLEMS` named, with the count of all), never raises for one.
On PostgreSQL the checks read as the owner login (row-level security shows the application role one tenant).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from ...errors import VectorStoreError
from .store import SQLBackend

MAX_PROBLEMS = 20


@dataclass(slots=True)
class Check:
    """One check: its name, what it verifies, and the problems found (none: it passed)."""

    name: str
    what: str
    problems: list[str] = field(default_factory=list)
    found: int = 0  # problems found in all (``problems`` names at most MAX_PROBLEMS)

    @property
    def ok(self) -> bool:
        """Whether the check found nothing wrong."""
        return self.found == 0

    def add(self, problem: str) -> None:
        """Record one problem."""
        self.found += 1
        if len(self.problems) < MAX_PROBLEMS:
            self.problems.append(problem)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"name": self.name, "what": self.what, "ok": self.ok, "found": self.found, "problems": self.problems}


@dataclass(slots=True)
class CheckReport:
    """Every check of one store."""

    store: str
    checks: list[Check]

    @property
    def ok(self) -> bool:
        """Whether every check passed."""
        return all(c.ok for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"ok": self.ok, "store": self.store, "checks": [c.to_dict() for c in self.checks]}


def _reader(backend: SQLBackend) -> AbstractContextManager[Any]:
    """A read transaction that sees every tenant: the owner login's on PostgreSQL, any on SQLite."""
    owner = getattr(backend, "owner_transaction", None)
    if owner is not None:
        return owner("check the store")
    return backend.transaction(None, None, write=False)


def check_store(backend: SQLBackend) -> CheckReport:
    """Run every check on ``backend`` (see the module doc)."""
    postgres = backend.dialect.name == "postgresql"
    report = CheckReport(backend.scheme, [])
    with _reader(backend) as conn:
        def rows(statement: str, params: tuple[Any, ...] = ()) -> list[Any]:
            return list(conn.execute(backend.dialect.sql(statement), params).fetchall())

        if postgres and not rows("SELECT 1 FROM pg_class WHERE oid = 'bunko.tenants'::regclass "
                                 "AND pg_has_role(current_user, relowner, 'USAGE')"):
            # Row-level security would show this login no tenant's rows: a check of nothing, not a pass.
            raise VectorStoreError("this PostgreSQL login may not check the store: use the owner login (the one "
                                   "that ran `bunko db migrate`); the application login sees one tenant at a time")

        if not postgres:
            integrity = Check("integrity", "SQLite's integrity_check and foreign_key_check")
            for (line,) in rows("PRAGMA integrity_check"):
                if line != "ok":
                    integrity.add(str(line))
            for row in rows("PRAGMA foreign_key_check"):
                integrity.add(f"table {row[0]} row {row[1]}: no {row[2]} row it refers to")
            report.checks.append(integrity)

        collections = rows("SELECT c.id, t.name, c.name, c.document_count, c.chunk_count, "
                           "(SELECT count(*) FROM documents d WHERE d.collection_id = c.id), "
                           "(SELECT count(*) FROM chunks k WHERE k.collection_id = c.id) "
                           "FROM collections c JOIN tenants t ON t.id = c.tenant_id ORDER BY t.name, c.name")
        counts = Check("collection_counts", "each collection's document and chunk counters equal its rows")
        for _, tenant, name, documents, chunks, document_rows, chunk_rows in collections:
            if (int(documents), int(chunks)) != (int(document_rows), int(chunk_rows)):
                counts.add(f"{tenant}/{name}: counters say {documents} documents and {chunks} chunks, the rows "
                           f"are {document_rows} and {chunk_rows}")
        report.checks.append(counts)

        current = " AND k.version_id = d.current_version_id" if postgres else ""
        whole = Check("documents_whole", "each document's chunk count is its current version's chunks")
        for tenant, collection, source, expected, actual in rows(
                "SELECT t.name, c.name, d.source, d.chunk_count, (SELECT count(*) FROM chunks k "
                f"WHERE k.document_id = d.id{current}) FROM documents d JOIN collections c ON c.id = d.collection_id "
                "JOIN tenants t ON t.id = d.tenant_id WHERE d.chunk_count <> (SELECT count(*) FROM chunks k "
                f"WHERE k.document_id = d.id{current}) ORDER BY t.name, c.name, d.source"):
            whole.add(f"{tenant}/{collection}/{source}: {expected} chunks recorded, {actual} stored")
        report.checks.append(whole)

        orphans = Check("orphan_chunks", "no chunk names a document that does not exist")
        for tenant, collection, count in rows(
                "SELECT t.name, c.name, count(*) FROM chunks k JOIN collections c ON c.id = k.collection_id "
                "JOIN tenants t ON t.id = k.tenant_id WHERE k.document_id IS NOT NULL AND NOT EXISTS "
                "(SELECT 1 FROM documents d WHERE d.tenant_id = k.tenant_id AND d.id = k.document_id) "
                "GROUP BY t.name, c.name ORDER BY t.name, c.name"):
            orphans.add(f"{tenant}/{collection}: {count} chunks without their document")
        report.checks.append(orphans)

        keywords = Check("keyword_rows", "the keyword index matches the chunks"
                         + (" (token totals)" if postgres else " (token totals, chunks in the postings)"))
        if postgres:
            for tenant, name, recorded, actual in rows(
                    "SELECT t.name, c.name, c.keyword_tokens, (SELECT coalesce(sum(k.fts_length), 0) FROM chunks k "
                    "WHERE k.collection_id = c.id) FROM collections c JOIN tenants t ON t.id = c.tenant_id "
                    "ORDER BY t.name, c.name"):
                if int(recorded) != int(actual):
                    keywords.add(f"{tenant}/{name}: {recorded} keyword tokens recorded, the chunks hold {actual}")
        else:
            # A chunk's tokens are joined by single spaces in chunks.terms; none holds a space.
            tokens = dict(rows("SELECT c.id, c.keyword_tokens - (SELECT coalesce(sum(CASE WHEN k.terms = '' THEN 0 "
                               "ELSE length(k.terms) - length(replace(k.terms, ' ', '')) + 1 END), 0) FROM chunks k "
                               "WHERE k.collection_id = c.id) FROM collections c"))
            # Each segment lists its chunks under the term '' and its deleted ones under ' ' (8 bytes each).
            posted = dict(rows("SELECT collection_id, sum(CASE term WHEN '' THEN length(entries) "
                               "ELSE -length(entries) END) / 8 FROM keyword_postings WHERE term IN ('', ' ') "
                               "GROUP BY collection_id"))
            for pk, tenant, name, _, _, _, chunk_rows in collections:
                if tokens.get(pk):
                    keywords.add(f"{tenant}/{name}: the keyword token total is off by {tokens[pk]}")
                listed = int(posted.get(pk) or 0)
                if listed != int(chunk_rows):
                    keywords.add(f"{tenant}/{name}: the postings list {listed} chunks; there are {chunk_rows}")
        report.checks.append(keywords)
    return report


__all__ = ["MAX_PROBLEMS", "Check", "CheckReport", "check_store"]
