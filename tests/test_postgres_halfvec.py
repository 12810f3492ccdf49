"""PostgreSQL HNSW over halfvec (``chunks_hnswh_<pk>``): candidates re-ranked by the full vectors, filtered
searches kept exact or complete, a former index over vector replaced on the next write, tenants apart."""

from __future__ import annotations

import numpy as np
import pytest

from bunko.filters import parse_filter
from bunko.search import vector_query
from bunko.stores.base import Restriction
from bunko.stores.postgres import PostgresBackend, PostgresSettings
from bunko.testing.store_data import make_document

from .ann_data import DIM, INFO, clustered
from .pg import psycopg
from .test_harden_pg_roles import Logins, logins  # noqa: F401 (the fixture)

pytestmark = pytest.mark.skipif(psycopg is None, reason="the postgres extra is not installed")

ROWS, PER_DOCUMENT = 3_000, 100


def _fill(store, vectors: np.ndarray, prefix: str) -> None:
    store.ensure_collection("c", INFO)
    store.write_documents("c", [
        make_document(f"{prefix}{i}", [f"{prefix} {i * PER_DOCUMENT + j}" for j in range(PER_DOCUMENT)],
                      vectors[i * PER_DOCUMENT:(i + 1) * PER_DOCUMENT],
                      metadata={"source": f"{prefix}{i}", "part": i % 3})
        for i in range(len(vectors) // PER_DOCUMENT)])


def _search(store, q: np.ndarray, k: int = 10, **kwargs) -> tuple[list[int], list[float], str]:
    """(rows, scores, plan) of a vector search; a chunk's row is the number in its text."""
    explain: dict[str, str] = {}
    hits = vector_query(store, "c", q, k, explain=explain, **kwargs)
    return [int(h.content.split()[1]) for h in hits], [h.score for h in hits], explain["plan"]


def _indexes(backend: PostgresBackend) -> dict[str, str]:
    with backend.connection() as conn:
        return {name: definition for name, definition in conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes "
            "WHERE indexname LIKE 'chunks_hnsw%' OR indexname LIKE 'chunks_ivf%'")}


def test_hnsw_over_halfvec_finds_the_nearest_with_exact_scores_and_keeps_tenants_apart(pg_url: str) -> None:
    backend = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=1_000))
    try:
        ours, theirs = clustered(ROWS, 1), clustered(ROWS, 2)
        a, b = backend.for_tenant("acme"), backend.for_tenant("bravo")
        _fill(a, ours, "a")
        _fill(b, theirs, "b")
        found = _indexes(backend)
        assert set(found) == {"chunks_hnswh_1", "chunks_hnswh_2"}
        assert f"halfvec({DIM})" in found["chunks_hnswh_1"] and "halfvec_cosine_ops" in found["chunks_hnswh_1"]
        queries = clustered(40, 3)
        recall = []
        for q in queries:
            rows, scores, plan = _search(a, q)
            assert plan == "hnsw"
            exact = ours.astype(np.float64) @ q.astype(np.float64)
            # Re-ranked by the full vectors: the scores are the float32 vectors' own (halfvec's would be
            # about 1e-3 off) and in order.
            assert np.allclose(scores, exact[rows], atol=2e-6)
            assert scores == sorted(scores, reverse=True)
            recall.append(len(set(rows) & set(np.argsort(-exact)[:10].tolist())) / 10)
            # The other tenant's collection has its own index and never answers for this one.
            hits = vector_query(b, "c", q, 10)
            assert all(h.content.startswith("b ") for h in hits)
        assert np.mean(recall) >= 0.95, np.mean(recall)
    finally:
        backend.close()


@pytest.mark.parametrize("iterative", [None, False])
def test_filtered_searches_over_halfvec_stay_exact_or_complete(pg_url: str, iterative: bool | None) -> None:
    backend = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=1_000, exact_max_rows=300,
                                                                iterative_scan=iterative))
    try:
        store = backend.for_tenant("acme")
        vectors = clustered(ROWS, 4)
        _fill(store, vectors, "a")
        part = np.repeat(np.arange(ROWS // PER_DOCUMENT) % 3, PER_DOCUMENT)
        recall = []
        for q in clustered(10, 5):
            exact = vectors.astype(np.float64) @ q.astype(np.float64)
            # Selective (two documents, 200 chunks): the exact scan, the exact answer.
            few = [f"a{i}" for i in (4, 7)]
            rows, scores, plan = _search(store, q, document_ids=[_doc_id(store, d) for d in few])
            passing = np.flatnonzero(np.isin(np.arange(ROWS) // PER_DOCUMENT, (4, 7)))
            assert plan == "exact"
            assert rows == passing[np.argsort(-exact[passing], kind="stable")][:10].tolist()
            # Broad (a third of the collection): an index scan, k passing hits with their exact scores.
            rows, scores, plan = _search(store, q, filter={"part": 1})
            assert plan == ("hnsw-iterative" if iterative is None else "hnsw-overfetch")
            assert len(rows) == 10 and all(part[r] == 1 for r in rows)
            assert np.allclose(scores, exact[rows], atol=2e-6) and scores == sorted(scores, reverse=True)
            best = np.flatnonzero(part == 1)
            best = set(best[np.argsort(-exact[best])][:10].tolist())
            recall.append(len(best & set(rows)) / 10)
        # Approximate, as the index always is (the over-fetch asks it for only 60 candidates here).
        assert np.mean(recall) >= 0.8, recall
    finally:
        backend.close()


def _doc_id(store, source: str) -> str:
    return next(d.id for d in store.list_documents("c") if d.source == source)


def test_a_former_hnsw_index_over_vector_is_searched_then_replaced_on_the_next_write(pg_url: str) -> None:
    """A collection indexed before HNSW over halfvec (``chunks_hnsw_<pk>`` over vector) is searched with it;
    the next write builds the index over halfvec and drops the former one, and a process that had cached the
    former index finds the new one."""
    loader = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=10**9))  # never builds by itself
    writer = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=1_000))
    reader_process = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=1_000))
    try:
        vectors = clustered(ROWS + PER_DOCUMENT, 6)
        _fill(loader.for_tenant("acme"), vectors[:ROWS], "a")
        with psycopg.connect(pg_url, autocommit=True) as admin:
            admin.execute(f"CREATE INDEX chunks_hnsw_1 ON bunko.chunks USING hnsw ((embedding::vector({DIM})) "
                          "vector_cosine_ops) WITH (m = 16, ef_construction = 200) WHERE collection_id = 1")
        q = clustered(1, 7)[0]
        store = reader_process.for_tenant("acme")
        rows, scores, plan = _search(store, q)
        assert plan == "hnsw" and reader_process.index_kinds[1] == ("hnsw", 0)
        assert np.allclose(scores, (vectors[:ROWS].astype(np.float64) @ q)[rows], atol=2e-6)
        writer.for_tenant("acme").write_document("c", make_document(
            "late", [f"a {ROWS + j}" for j in range(PER_DOCUMENT)], vectors[ROWS:], metadata={"source": "late"}))
        assert set(_indexes(writer)) == {"chunks_hnswh_1"}
        rows, scores, plan = _search(store, q)  # the same process, its cache of the former index outdated
        assert plan == "hnsw" and reader_process.index_kinds[1] == ("halfvec", 0)
        exact = vectors.astype(np.float64) @ q
        assert np.allclose(scores, exact[rows], atol=2e-6)
        assert len(set(rows) & set(np.argsort(-exact)[:10].tolist())) >= 9
    finally:
        for b in (loader, writer, reader_process):
            b.close()


def test_a_filtered_plan_over_halfvec_reads_its_restriction_in_the_index_scan(pg_url: str) -> None:
    backend = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=1_000, exact_max_rows=300,
                                                                ef_search=100))
    try:
        store = backend.for_tenant("acme")
        vectors = clustered(ROWS, 8)
        _fill(store, vectors, "a")
        with store.reader(store.read_collection("c")) as reader:
            plan = reader.plan(5, Restriction(None, parse_filter({"part": 2})))
        assert plan.strategy == "hnsw-iterative" and plan.rerank and plan.cast == f"halfvec({DIM})"
        with store.session() as (conn, _):
            conn.execute("SELECT set_config('hnsw.iterative_scan', 'strict_order', true)")
            explained = "\n".join(r[0] for r in conn.execute(
                "EXPLAIN " + plan.index_sql(), plan.index_params(vectors[0], 5)).fetchall())
        assert "chunks_hnswh_1" in explained, explained
    finally:
        backend.close()


def test_a_login_that_does_not_own_the_schema_builds_and_drops_the_halfvec_index(logins: Logins) -> None:  # noqa: F811
    """Through the definer functions (m023): the application login's collection gets ``chunks_hnswh_<pk>``
    over halfvec (a former index over vector goes), searched with exact scores; dropping the collection
    drops its vector index."""
    app = PostgresBackend(logins.app, settings=PostgresSettings(hnsw_min_rows=1_000))
    try:
        store = app.for_tenant("acme")
        assert app.build_index_concurrently(1, DIM, 16, 200) is None  # not the owner: the definer path
        vectors = clustered(ROWS, 9)
        _fill(store, vectors, "a")
        with psycopg.connect(logins.superuser) as admin:
            found = dict(admin.execute(
                "SELECT indexname, indexdef FROM pg_indexes WHERE indexname LIKE 'chunks_hnsw%'").fetchall())
        assert set(found) == {"chunks_hnswh_1"} and f"halfvec({DIM})" in found["chunks_hnswh_1"]
        q = clustered(1, 10)[0]
        rows, scores, plan = _search(store, q)
        assert plan == "hnsw" and np.allclose(scores, (vectors.astype(np.float64) @ q)[rows], atol=2e-6)
        store.delete_collection("c")
        with psycopg.connect(logins.superuser) as admin:
            left = admin.execute("SELECT count(*) FROM pg_indexes WHERE indexname LIKE 'chunks_hnsw%'").fetchone()[0]
        assert left == 0
    finally:
        app.close()


def _round_trips(conn, tmp_path, name: str, call) -> tuple[object, int]:
    """``call()``'s result and how many times it waited for the server on ``conn`` (libpq's trace of the
    connection: one ReadyForQuery per sync)."""
    trace = tmp_path / f"{name}.trace"
    with open(trace, "w") as out:
        conn.pgconn.trace(out.fileno())
        try:
            result = call()
        finally:
            conn.pgconn.untrace()
    return result, sum("ReadyForQuery" in line for line in trace.read_text().splitlines())


def test_an_index_search_sets_its_breadth_and_searches_in_one_round_trip(pg_url: str, tmp_path) -> None:
    """The search's settings (``hnsw.ef_search``, iterative scans) go to the server with its statement in one
    round trip, and take effect; a filtered search over metadata columns already in step reads nothing more."""
    backend = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=1_000, exact_max_rows=300,
                                                                ef_search=100, ef_search_rows=1_000))
    try:
        store = backend.for_tenant("acme")
        vectors = clustered(ROWS, 11)
        _fill(store, vectors, "a")
        q = clustered(1, 12)[0]
        exact = vectors.astype(np.float64) @ q
        broad = Restriction(None, parse_filter({"part": 1}))
        vector_query(store, "c", q, 10, filter={"part": 1})  # the metadata columns read once
        row = store.read_collection("c")
        with store.reader(row) as reader:
            conn = reader._conn
            ranked, trips = _round_trips(conn, tmp_path, "plain", lambda: reader.nearest(q, 10))
            assert ranked.plan == "hnsw" and trips == 1
            # The breadth for 3,000 chunks (100 * sqrt(3)) was set for this transaction, with the statement.
            assert conn.execute("SHOW hnsw.ef_search").fetchone()[0] == "173"
            assert len(set(ranked.keys.tolist())) == 10
        with store.reader(row) as reader:
            conn = reader._conn
            ranked, trips = _round_trips(conn, tmp_path, "filtered", lambda: reader.nearest(q, 10, broad))
            assert ranked.plan == "hnsw-iterative" and trips == 1
            assert conn.execute("SHOW hnsw.iterative_scan").fetchone()[0] == "strict_order"
        # The hits are the chunks of part 1 with their exact scores, best first.
        part = np.repeat(np.arange(ROWS // PER_DOCUMENT) % 3, PER_DOCUMENT)
        keys = ranked.keys.tolist()
        assert len(keys) == 10
        rows, scores, _ = _search(store, q, filter={"part": 1})
        assert all(part[r] == 1 for r in rows) and np.allclose(scores, exact[rows], atol=2e-6)
    finally:
        backend.close()


def test_the_breadth_grows_in_proportion_past_the_linear_size_and_finds_the_nearest(pg_url: str) -> None:
    """The breadth rule scaled down to a small clustered collection (3,000 chunks; the defaults' thresholds
    over 100, ef_search 40): past ``ef_search_linear_rows`` the breadth grows in proportion to the size,
    wider than the square root alone would give; it reaches the server, and the search finds the exact
    top 10 at least 0.97 of the time with exact scores."""
    from bunko.stores.postgres.search import search_breadth

    settings = PostgresSettings(hnsw_min_rows=1_000, ef_search=40, ef_search_rows=380, ef_search_linear_rows=660)
    assert search_breadth(settings, ROWS, 10) == 182  # 40 * 3,000 / 660; the square root alone: 112
    assert search_breadth(settings.model_copy(update={"ef_search_linear_rows": 0}), ROWS, 10) == 112
    backend = PostgresBackend(pg_url, settings=settings)
    try:
        store = backend.for_tenant("acme")
        vectors = clustered(ROWS, 13)
        _fill(store, vectors, "a")
        recall = []
        for q in clustered(40, 14):
            exact = vectors.astype(np.float64) @ q.astype(np.float64)
            with store.reader(store.read_collection("c")) as reader:
                ranked = reader.nearest(q, 10)
                assert ranked.plan == "hnsw" and reader.run("SHOW hnsw.ef_search").fetchone()[0] == "182"
            rows = [int(k) for k in ranked.keys.tolist()]
            found, scores, _ = _search(store, q)
            assert np.allclose(scores, exact[found], atol=2e-6)
            recall.append(len(set(found) & set(np.argsort(-exact)[:10].tolist())) / 10)
            assert len(rows) == 10
        assert np.mean(recall) >= 0.97, np.mean(recall)
    finally:
        backend.close()
