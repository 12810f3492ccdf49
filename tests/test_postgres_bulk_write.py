"""PostgreSQL bulk writes without the indexes no query reads (migration m024: the GIN indexes over the chunks'
tsvectors and metadata): keyword search reads the postings, so an upgraded database keeps its rankings, its
deletes and its test oracle, and writes keep up no text-search or metadata index."""

from __future__ import annotations

from typing import Any

import numpy as np

from bunko.search import keyword_query
from bunko.testing.store_suite import INFO, make_document, unit_vectors

from .pg import psycopg

QUERIES = ["東京の備蓄はですか", "災害のときは避難所に行きます", "津波が来たら高い山に逃げます water",
           "emergency storage 地震"]


def results(backend: Any, tenants: tuple[str, ...] = ("acme", "globex")) -> dict[str, list]:
    """Each tenant's keyword results for QUERIES in collection "c", checked equal to the SQL oracle's."""
    from bunko.testing.oracles import keyword_oracle

    out: dict[str, list] = {}
    for tenant in tenants:
        store = backend.for_tenant(tenant)
        for q in QUERIES:
            got = [(h.chunk_id, h.score) for h in keyword_query(store, "c", q, 10, budget=40, proximity=None)]
            assert got == keyword_oracle(store, "c", q, 10), (tenant, q)
            out[f"{tenant}/{q}"] = got
    return out


def _gin_indexes(conn) -> list[str]:
    """The GIN indexes on bunko.chunks, and keyword_df's storage options."""
    return sorted(r[0] for r in conn.execute(
        "SELECT i.indexrelid::regclass::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "JOIN pg_am am ON am.oid = c.relam WHERE i.indrelid = 'bunko.chunks'::regclass AND am.amname = 'gin' "
        "UNION ALL SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'bunko.keyword_df'::regclass "
        "AND reloptions IS NOT NULL").fetchall())


def test_upgrading_drops_the_unread_indexes_and_keeps_keyword_search(pg_url: str) -> None:
    """A database at m023 with chunks in two tenants (its GIN indexes on ``fts``, ``fts_pairs`` and
    ``metadata``): m024 drops the indexes and leaves room on keyword_df's pages; each tenant's keyword results
    are the same before and after, and equal the SQL oracle's; a delete after the upgrade still takes its
    chunks' terms off the statistics, and neither tenant's search sees the other's chunks."""
    from bunko.stores.postgres import PostgresBackend, migrate_database

    from .test_store_sqlite import _keyword_corpus

    texts = _keyword_corpus(np.random.default_rng(3), 400)

    backend = PostgresBackend(pg_url)
    docs = {}
    try:
        for i, tenant in enumerate(("acme", "globex")):
            store = backend.for_tenant(tenant)
            store.ensure_collection("c", INFO, analyzer="bigram")
            docs[tenant] = [make_document(f"d{j}.txt", texts[i * 200 + j * 20:i * 200 + (j + 1) * 20],
                                          unit_vectors(20, i * 10 + j)) for j in range(10)]
            store.write_documents("c", docs[tenant])
    finally:
        backend.close()
    # The database as m023 left it: the three GIN indexes, keyword_df packed, and m024 not applied.
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert _gin_indexes(conn) == ["fillfactor=50"]
        conn.execute("CREATE INDEX chunks_fts ON bunko.chunks USING gin (fts)")
        conn.execute("CREATE INDEX chunks_fts_pairs ON bunko.chunks USING gin (fts_pairs)")
        conn.execute("CREATE INDEX chunks_metadata ON bunko.chunks USING gin (metadata jsonb_path_ops)")
        conn.execute("ALTER TABLE bunko.keyword_df RESET (fillfactor)")
        conn.execute("DELETE FROM bunko.schema_migrations WHERE name = 'm024_no_unread_chunk_indexes'")
        assert _gin_indexes(conn) == ["bunko.chunks_fts", "bunko.chunks_fts_pairs", "bunko.chunks_metadata"]
    assert migrate_database(pg_url) == ["m024_no_unread_chunk_indexes"]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert _gin_indexes(conn) == ["fillfactor=50"]
    backend = PostgresBackend(pg_url)
    try:
        before = results(backend)
        assert all(before.values())
        # The tenants' collections hold different texts: their results differ, each from its own chunks.
        for tenant in ("acme", "globex"):
            store = backend.for_tenant(tenant)
            own = {c.id for d in docs[tenant] for c in d.chunks}
            for q in QUERIES:
                assert {h.chunk_id for h in keyword_query(store, "c", q, 50)} <= own
        acme = backend.for_tenant("acme")
        acme.delete_documents([docs["acme"][0].id, docs["acme"][3].id], "c")
        acme.write_documents("c", [make_document("d9.txt", texts[:7], unit_vectors(7, 99))])  # a new version
        after = results(backend)  # the oracle counts from the chunks left: the statistics followed the delete
        assert {k: v for k, v in after.items() if k.startswith("globex/")} == {
            k: v for k, v in before.items() if k.startswith("globex/")}
        assert after != before
        with acme.session() as (conn, tenant_pk):
            df = dict(conn.execute("SELECT term, df FROM bunko.keyword_df WHERE tenant_id = %s AND df > 0",
                                   (tenant_pk,)).fetchall())
            counted = dict(conn.execute(
                "SELECT u.lexeme, count(*) FROM bunko.chunks c, unnest(c.fts) u WHERE c.tenant_id = %s "
                "GROUP BY u.lexeme", (tenant_pk,)).fetchall())
        assert {t: n for t, n in df.items() if " " not in t} == counted
    finally:
        backend.close()


def test_a_bulk_write_stores_postings_uncompressed_and_keeps_its_rankings(pg_url: str) -> None:
    """The staging tables keep a write's rows as they come (no pglz on the way in, none to undo on the way
    out): the postings of a write of 600 chunks, whose common terms' rows pass 2 kB, are stored uncompressed
    as m014 declares (before, the staging table compressed them and the compressed values went into
    ``keyword_postings`` as they were); chunks and keyword results are the same as the SQL oracle's, in each
    tenant, and a delete and a new version after it still go through."""
    from bunko.stores.postgres import PostgresBackend
    from bunko.testing.oracles import keyword_oracle

    from .test_store_sqlite import _keyword_corpus

    texts = _keyword_corpus(np.random.default_rng(5), 1200)
    backend = PostgresBackend(pg_url)
    try:
        stores = {}
        for i, tenant in enumerate(("acme", "globex")):
            store = stores[tenant] = backend.for_tenant(tenant)
            store.ensure_collection("c", INFO, analyzer="bigram")
            store.write_documents("c", [make_document(f"d{j}.txt", texts[i * 600 + j * 60:i * 600 + (j + 1) * 60],
                                                      unit_vectors(60, i * 10 + j)) for j in range(10)])
        with psycopg.connect(pg_url, autocommit=True) as conn:
            large, compressed = conn.execute(
                "SELECT count(*) FILTER (WHERE length(entries) > 2100), "
                "count(*) FILTER (WHERE pg_column_compression(entries) IS NOT NULL) FROM bunko.keyword_postings"
            ).fetchone()
            stored = conn.execute("SELECT count(*), count(DISTINCT tenant_id) FROM bunko.chunks").fetchone()
        assert large > 0  # rows PostgreSQL would compress
        assert compressed == 0
        assert stored == (1200, 2)
        acme = stores["acme"]
        first = acme.list_documents("c")[0]
        acme.delete_documents([first.id], "c")
        acme.write_documents("c", [make_document("d1.txt", texts[:30], unit_vectors(30, 77))])  # a new version
        for tenant, store in stores.items():
            for q in QUERIES:
                got = [(h.chunk_id, h.score) for h in keyword_query(store, "c", q, 10, budget=40, proximity=None)]
                assert got == keyword_oracle(store, "c", q, 10), (tenant, q)
                assert got
        assert (acme.count("c"), stores["globex"].count("c")) == (600 - 60 - 60 + 30, 600)
    finally:
        backend.close()


def _postings_by_tenant(conn) -> dict[str, int]:
    """Postings rows per tenant name (as the superuser, past row-level security); rows of no tenant under
    the name ``None``."""
    return {name: int(n) for name, n in conn.execute(
        "SELECT t.name, count(*) FROM bunko.keyword_postings p LEFT JOIN bunko.tenants t ON t.id = p.tenant_id "
        "GROUP BY t.name").fetchall()}


def _postings_keys(conn) -> int:
    return int(conn.execute("SELECT count(*) FROM pg_constraint WHERE conrelid = 'bunko.keyword_postings'::regclass "
                            "AND contype = 'f'").fetchone()[0])


def test_upgrading_drops_the_postings_key_and_deletes_still_remove_a_tenants_postings(pg_url: str) -> None:
    """m026 drops the postings' foreign key to collections (a check per postings row a write adds): from a
    database at m024 with chunks in two tenants, the upgrade keeps every keyword result; deleting one
    tenant's collection removes its postings and none of the other tenant's (which has a collection of the
    same name); a tenant's transaction can neither remove nor add postings of another tenant (row-level
    security); erasing a tenant leaves no postings of it behind."""
    from bunko.stores.postgres import PostgresBackend, migrate_database
    from bunko.stores.service import service_records

    from .test_store_sqlite import _keyword_corpus

    texts = _keyword_corpus(np.random.default_rng(11), 400)

    backend = PostgresBackend(pg_url)
    try:
        for i, tenant in enumerate(("acme", "globex")):
            store = backend.for_tenant(tenant)
            store.ensure_collection("c", INFO, analyzer="bigram")
            store.write_documents("c", [make_document(f"d{j}.txt", texts[i * 200 + j * 20:i * 200 + (j + 1) * 20],
                                                      unit_vectors(20, i * 10 + j)) for j in range(10)])
        before = results(backend, ("acme", "globex"))
    finally:
        backend.close()
    # The database as m024 left it: the postings' foreign key, m026 not applied.
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert _postings_keys(conn) == 0
        conn.execute("ALTER TABLE bunko.keyword_postings ADD FOREIGN KEY (tenant_id, collection_id) "
                     "REFERENCES bunko.collections (tenant_id, id) ON DELETE CASCADE")
        conn.execute("DELETE FROM bunko.schema_migrations WHERE name = 'm026_postings_without_collection_key'")
        assert _postings_keys(conn) == 1
    assert migrate_database(pg_url) == ["m026_postings_without_collection_key"]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert _postings_keys(conn) == 0
        held = _postings_by_tenant(conn)
    assert set(held) == {"acme", "globex"}
    backend = PostgresBackend(pg_url)
    try:
        assert results(backend, ("acme", "globex")) == before
        acme, globex = backend.for_tenant("acme"), backend.for_tenant("globex")
        globex_pk = globex.read_collection("c").key
        with acme.session(write=True) as (conn, _):
            # Another tenant's postings: out of reach for a delete, refused for an insert.
            assert conn.execute("DELETE FROM bunko.keyword_postings WHERE collection_id = %s",
                                (globex_pk,)).rowcount == 0
        with psycopg.connect(pg_url, autocommit=True) as conn:
            globex_tenant = conn.execute("SELECT id FROM bunko.tenants WHERE name = 'globex'").fetchone()[0]
        refused = False
        try:
            with acme.session(write=True) as (conn, _):
                conn.execute("INSERT INTO bunko.keyword_postings VALUES (%s, %s, 1, 'x', '\\x00'::bytea)",
                             (globex_tenant, globex_pk))
        except Exception as exc:  # row-level security refuses the row: nothing was written
            refused = "row-level security" in str(exc)
        assert refused
        acme.delete_collection("c")
        with psycopg.connect(pg_url, autocommit=True) as conn:
            assert _postings_by_tenant(conn) == {"globex": held["globex"]}
        assert results(backend, ("globex",)) == {k: v for k, v in before.items() if k.startswith("globex/")}
        acme.ensure_collection("c", INFO, analyzer="bigram")  # written again, then erased with its tenant
        acme.write_documents("c", [make_document("again.txt", texts[:20], unit_vectors(20, 5))])
        service_records(backend).erase_tenant(acme)
        with psycopg.connect(pg_url, autocommit=True) as conn:
            assert _postings_by_tenant(conn) == {"globex": held["globex"]}
    finally:
        backend.close()
