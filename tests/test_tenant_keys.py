"""The schema against the design for more than one PostgreSQL (docs/ARCHITECTURE.md, "Beyond one PostgreSQL").

Distributed by tenant, as Citus does it, every key and unique constraint of a tenant table must lead
with ``tenant_id``, so each one is checked on the node that holds the tenant. This test reads the
real migrated schema: every tenant table has ``tenant_id``; global tables are the documented few; and
the constraints that do not yet lead with the tenant are exactly the documented list below -- a new
one fails here until it leads with the tenant or is added to the list, with its reason, on purpose.
"""

from __future__ import annotations

import pytest

# Tables with no tenant: looked up before a tenant is known, or about the schema itself.
GLOBAL_TABLES = {"api_keys", "operator_keys", "rate_windows", "schema_migrations"}
# tenants is the distribution table itself: its id *is* the tenant key.
TENANT_TABLES = {"collections", "documents", "document_versions", "chunks", "usage_records", "search_logs",
                 "conversation_turns", "jobs", "memory_stores", "memories", "keyword_df", "ingest_failures",
                 "keyword_postings", "tenant_quotas", "tenant_rate_windows"}
# Keys of tenant tables that do not yet lead with tenant_id: the serial primary keys (globally unique
# already; they become (tenant_id, id) when the tables are distributed) and one version key.
NOT_YET_LEADING = {
    ("chunks", "PRIMARY KEY", ("id",)),
    ("collections", "PRIMARY KEY", ("id",)),
    ("conversation_turns", "PRIMARY KEY", ("id",)),
    ("document_versions", "PRIMARY KEY", ("id",)),
    ("document_versions", "UNIQUE", ("document_id", "version")),
    ("documents", "PRIMARY KEY", ("id",)),
    ("jobs", "PRIMARY KEY", ("id",)),
    ("memories", "PRIMARY KEY", ("id",)),
    ("memory_stores", "PRIMARY KEY", ("id",)),
    ("search_logs", "PRIMARY KEY", ("id",)),
    ("usage_records", "PRIMARY KEY", ("id",)),
}
_KINDS = {"p": "PRIMARY KEY", "u": "UNIQUE", "f": "FOREIGN KEY"}


def _constraints(url: str) -> list[tuple[str, str, tuple[str, ...]]]:
    import psycopg

    with psycopg.connect(url) as conn:
        rows = conn.execute(
            """SELECT cl.relname, c.contype, array_agg(a.attname::text ORDER BY k.ord)
                 FROM pg_constraint c
                 JOIN pg_class cl ON cl.oid = c.conrelid
                 CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, ord)
                 JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
                WHERE c.connamespace = 'bunko'::regnamespace AND c.contype IN ('p', 'u', 'f')
                GROUP BY c.oid, cl.relname, c.contype""").fetchall()
        # Unique indexes that are not constraints count as unique keys too.
        rows += conn.execute(
            """SELECT cl.relname, 'u', array_agg(a.attname::text ORDER BY k.ord)
                 FROM pg_index i
                 JOIN pg_class cl ON cl.oid = i.indrelid
                 CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
                 JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
                WHERE cl.relnamespace = 'bunko'::regnamespace AND i.indisunique
                  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
                GROUP BY i.indexrelid, cl.relname""").fetchall()
        tables = {r[0]: set(r[1]) for r in conn.execute(
            """SELECT c.relname, array_agg(a.attname::text) FROM pg_class c
                 JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                WHERE c.relnamespace = 'bunko'::regnamespace AND c.relkind = 'r' GROUP BY c.relname""")}
    assert set(tables) == GLOBAL_TABLES | TENANT_TABLES | {"tenants"}, sorted(tables)
    assert all("tenant_id" in tables[t] for t in TENANT_TABLES)
    return [(table, _KINDS[kind], tuple(columns)) for table, kind, columns in rows]


def test_every_tenant_key_leads_with_the_tenant_but_the_documented_ones(pg_url: str) -> None:
    constraints = [c for c in _constraints(pg_url) if c[0] in TENANT_TABLES]
    leading = [c for c in constraints if c[2][0] == "tenant_id"]
    not_leading = {c for c in constraints if c[2][0] != "tenant_id"}
    assert len(leading) >= 10, leading  # the check looks at real keys, not an empty list
    # Foreign keys between tenant tables all carry the tenant (a shard never points to another).
    assert all(c[2][0] == "tenant_id" for c in constraints if c[1] == "FOREIGN KEY"), constraints
    assert not_leading == NOT_YET_LEADING, sorted(not_leading ^ NOT_YET_LEADING)


@pytest.mark.parametrize("table", sorted(TENANT_TABLES))
def test_tenant_tables_have_row_level_security(pg_url: str, table: str) -> None:
    import psycopg

    with psycopg.connect(pg_url) as conn:
        enabled, forced = conn.execute("SELECT relrowsecurity, relforcerowsecurity FROM pg_class "
                                       "WHERE oid = %s::regclass", (f"bunko.{table}",)).fetchone()  # type: ignore[misc]
    assert enabled and forced
