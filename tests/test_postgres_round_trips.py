"""PostgreSQL searches with fewer waits for the server: a transaction's BEGIN and tenant settings in one
message that also checks the pooled connection, the collection row read in one message with its settings
(no transaction of its own), and an unfiltered HNSW search that reads its hits in the same statement.
Tenants stay apart, settings never outlive their transaction, and a dropped connection is replaced."""

from __future__ import annotations

import numpy as np
import pytest

from bunko.errors import CollectionNotFoundError, VectorStoreError
from bunko.search import vector_query
from bunko.stores.postgres import PostgresBackend, PostgresSettings
from bunko.testing.store_data import make_document

from .ann_data import INFO, clustered
from .pg import psycopg

pytestmark = pytest.mark.skipif(psycopg is None, reason="the postgres extra is not installed")

ROWS, PER_DOCUMENT = 2_000, 100


def _fill(store, vectors: np.ndarray, prefix: str) -> None:
    store.ensure_collection("c", INFO)
    store.write_documents("c", [
        make_document(f"{prefix}{i}", [f"{prefix} {i * PER_DOCUMENT + j}" for j in range(PER_DOCUMENT)],
                      vectors[i * PER_DOCUMENT:(i + 1) * PER_DOCUMENT],
                      metadata={"source": f"{prefix}{i}", "part": i % 3})
        for i in range(len(vectors) // PER_DOCUMENT)])


def _terminate_pool(pg_url: str) -> int:
    """Drop every connection of the database but this one, as a server restart or an idle timeout would."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        return int(conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE usename = current_user AND pid <> pg_backend_pid() AND datname = current_database()"
        ).fetchone()[0])


@pytest.fixture
def two_tenants(pg_url: str):
    backend = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=1_000))
    a, b = backend.for_tenant("acme"), backend.for_tenant("bravo")
    _fill(a, clustered(ROWS, 1), "a")
    _fill(b, clustered(ROWS, 2), "b")
    try:
        yield backend, a, b
    finally:
        backend.close()


def test_hits_read_with_the_search_match_the_hits_read_after(two_tenants) -> None:
    backend, a, b = two_tenants
    for q in clustered(12, 3):
        explain: dict[str, str] = {}
        hits = vector_query(a, "c", q, 10, explain=explain)
        assert explain["plan"] == "hnsw" and len(hits) == 10
        row = a.read_collection("c")
        once = a.nearest_hits(row, q, 10)  # the settings and the search with its hits in one message
        assert once is not None and [h.chunk_id for h in once] == [h.chunk_id for h in hits]
        with a.reader(row) as reader:
            ranked = reader.nearest(q, 10)
            kept = dict(reader.rows_read())
            assert set(kept) == set(ranked.keys.tolist())  # read whole by the search statement itself
        with a.reader(row) as reader:  # read apart, by chunk id, as before
            apart = reader.hits(ranked)
        assert [(h.chunk_id, h.document_id, h.source, h.content, h.metadata, h.score) for h in hits] == [
            (h.chunk_id, h.document_id, h.source, h.content, h.metadata, h.score) for h in apart]
        assert all(h.content.startswith("a ") and h.source.startswith("a") for h in hits)
        # The other tenant's collection of the same name answers with its own chunks only.
        theirs = vector_query(b, "c", q, 10)
        assert theirs and all(h.content.startswith("b ") and h.source.startswith("b") for h in theirs)
    # A threshold leaves out the hits below it, as the reader's way does.
    q = clustered(1, 6)[0]
    best = vector_query(a, "c", q, 10)
    assert [h.chunk_id for h in vector_query(a, "c", q, 10, threshold=best[4].score)] == [
        h.chunk_id for h in best[:5]]
    # Not that way: a filter, a k beyond the re-ranked candidates, a tenant whose row id is not known yet.
    row = a.read_collection("c")
    assert a.nearest_hits(row, q, 21) is None
    assert backend.for_tenant("acme").nearest_hits(row, q, 10) is None
    explain: dict[str, str] = {}
    assert all(h.metadata["part"] == 1 for h in vector_query(a, "c", q, 10, filter={"part": 1}, explain=explain))
    assert explain["plan"] != "hnsw"
    # The one-message search's settings end with its implicit transaction: the pooled connections hold none.
    for _ in range(3):
        with backend.connection() as conn:
            assert conn.execute("SELECT coalesce(current_setting('bunko.tenant_id', true), ''), "
                                "current_setting('hnsw.ef_search'), (SELECT count(*) FROM bunko.chunks)"
                                ).fetchone() == ("", str(backend.settings.ef_search), 0)
    # A search deeper than the re-ranked candidates (a hybrid leg) leaves its hits to be read after fusion.
    with a.reader(a.read_collection("c")) as reader:
        reader.nearest(clustered(1, 4)[0], 30)
        assert not reader.rows_read()


def test_the_collection_row_read_in_one_message_keeps_tenants_apart(two_tenants) -> None:
    backend, a, b = two_tenants
    mine, theirs = a.read_collection("c"), b.read_collection("c")
    assert mine.key != theirs.key and mine.chunk_count == theirs.chunk_count == ROWS
    with pytest.raises(CollectionNotFoundError):
        a.read_collection("nope")
    c = backend.for_tenant("charlie")
    c.ensure_collection("mine", INFO)
    c.read_collection("mine")  # the tenant's row id is known from here on: one message
    with pytest.raises(CollectionNotFoundError):
        c.read_collection("c")  # another tenant's name is not found
    # The settings made with the statement are local to its implicit transaction: a pooled connection
    # shows none of them afterwards, and row-level security then shows no tenant's rows at all.
    for _ in range(3):
        with backend.connection() as conn:
            assert conn.execute("SELECT coalesce(current_setting('bunko.tenant_id', true), ''), "
                                "(SELECT count(*) FROM bunko.collections)").fetchone() == ("", 0)
            assert conn.autocommit is False


def test_a_failed_statement_rolls_back_and_the_connection_serves_again(two_tenants) -> None:
    backend, a, _ = two_tenants
    with pytest.raises(VectorStoreError):
        with a.session(write=True) as (conn, tenant_pk):
            conn.execute("UPDATE bunko.collections SET description = 'changed' WHERE tenant_id = %s",
                         (tenant_pk,))
            conn.execute("SELECT 1 / 0")
    assert a.get_collection("c").description != "changed"  # rolled back
    with pytest.raises(VectorStoreError):
        with a.session(write=True) as (conn, tenant_pk):
            conn.execute("UPDATE bunko.collections SET description = 'changed' WHERE tenant_id = %s",
                         (tenant_pk,))
            raise VectorStoreError("the caller gives up")
    assert a.get_collection("c").description != "changed"
    with a.session(write=True) as (conn, tenant_pk):
        conn.execute("UPDATE bunko.collections SET description = 'kept' WHERE tenant_id = %s", (tenant_pk,))
    assert a.get_collection("c").description == "kept"  # committed
    with backend.connection() as conn:
        assert conn.autocommit is False and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


def test_searches_after_the_server_dropped_every_connection(two_tenants, pg_url: str) -> None:
    _, a, _ = two_tenants
    q = clustered(1, 5)[0]
    before = [h.chunk_id for h in vector_query(a, "c", q, 10)]
    for _ in range(3):
        assert _terminate_pool(pg_url) >= 1
        # Each first statement finds its connection dropped before anything ran, and takes another.
        assert a.read_collection("c").chunk_count == ROWS
        assert [h.chunk_id for h in vector_query(a, "c", q, 10)] == before
