"""The PostgreSQL backend: the shared conformance suite, RLS, migrations and the search planner."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from itertools import pairwise

import numpy as np
import pytest

from bunko.errors import ConfigError
from bunko.search import keyword_query, vector_query
from bunko.stores.postgres import PostgresBackend, PostgresSettings, schema_status
from bunko.stores.postgres import migrations as pg_migrations
from bunko.testing.postgres import with_dbname
from bunko.testing.store_suite import INFO, StoreConformance, make_document, unit_vectors

from .pg import psycopg

_LAST: dict[str, str] = {"plan": ""}


def _vq(store, *args, **kwargs):
    """``vector_query``, remembering how the store searched (``_LAST["plan"]``)."""
    explain: dict[str, str] = {}
    hits = vector_query(store, *args, explain=explain, **kwargs)
    _LAST["plan"] = explain["plan"]
    return hits


def _plan(store, collection: str, top_k: int, spec: dict | None = None, document_ids=None):
    """The plan the store's reader makes for a vector search of ``collection``."""
    from bunko.filters import parse_filter
    from bunko.stores.base import Restriction

    restriction = Restriction(document_ids, parse_filter(spec) if spec is not None else None)
    with store.reader(store.read_collection(collection)) as reader:
        return reader.plan(top_k, restriction)


@pytest.fixture()
def backend(pg_url: str) -> Iterator[PostgresBackend]:
    b = PostgresBackend(pg_url)
    yield b
    b.close()


@pytest.fixture()
def second_backend(pg_url: str) -> Iterator[PostgresBackend]:
    b = PostgresBackend(pg_url)
    yield b
    b.close()


class TestPostgresConformance(StoreConformance):
    """Runs the whole conformance suite on PostgreSQL."""


def _admin(url: str):
    return psycopg.connect(url, autocommit=True)


def test_pool_works_as_the_application_role(backend: PostgresBackend) -> None:
    with backend.connection() as conn:
        user, bypass = conn.execute(
            "SELECT current_user, rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
    assert (user, bypass) == ("bunko_app", False)


def test_rls_hides_rows_from_a_query_without_the_tenant_setting(backend: PostgresBackend, pg_url: str) -> None:
    a, b = backend.for_tenant("tenant-a"), backend.for_tenant("tenant-b")
    for store, seed in ((a, 1), (b, 2)):
        store.ensure_collection("shared", INFO)
        store.write_document("shared", make_document(f"{store.tenant}.txt", ["x", "y"], unit_vectors(2, seed)))
    with _admin(pg_url) as conn:
        assert conn.execute("SELECT count(*) FROM bunko.chunks").fetchone()[0] == 4  # the owner-superuser sees all
        conn.execute("SET ROLE bunko_app")
        for table in ("tenants", "collections", "documents", "document_versions", "chunks"):
            assert conn.execute(f"SELECT count(*) FROM bunko.{table}").fetchone()[0] == 0, table
        # A query that forgets its tenant predicate still sees only the tenant of the transaction.
        conn.execute("SELECT set_config('bunko.tenant', 'tenant-a', false)")
        a_pk = conn.execute("SELECT id FROM bunko.tenants").fetchone()[0]
        conn.execute("SELECT set_config('bunko.tenant_id', %s, false)", (str(a_pk),))
        sources = {r[0] for r in conn.execute("SELECT source FROM bunko.documents")}
        assert sources == {"tenant-a.txt"}
        assert conn.execute("SELECT count(*) FROM bunko.chunks").fetchone()[0] == 2
        # Writing a row for another tenant is refused by the policy's WITH CHECK.
        other = a_pk + 1
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("UPDATE bunko.collections SET tenant_id = %s", (other,))
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO bunko.collections (tenant_id, name, embedding_provider, embedding_model, "
                         "dimension) VALUES (%s, 'x', 'p', 'm', 4)", (other,))


def test_migrations_are_recorded_and_idempotent(pg_url: str) -> None:
    from bunko.stores.postgres import migrate_database

    assert migrate_database(pg_url) == []  # the template was migrated already
    status = schema_status(pg_url)
    assert status["pending"] == []
    assert [m["version"] for m in status["applied"]] == list(range(1, len(pg_migrations.MIGRATIONS) + 1))
    assert status["pgvector_version"]


def test_upgrading_keeps_the_keyword_index_of_existing_rows(pg_server) -> None:
    """Chunks written under m001 (SQL-generated keyword column) stay findable after m002."""
    from bunko.stores.postgres import migrate_database

    url = with_dbname(pg_server.admin_url, "bunko_upgrade")
    with _admin(pg_server.admin_url) as conn:
        conn.execute("DROP DATABASE IF EXISTS bunko_upgrade WITH (FORCE)")
        conn.execute("CREATE DATABASE bunko_upgrade")
    try:
        migrate_database(url, target=1)
        with _admin(url) as conn:
            conn.execute("INSERT INTO bunko.tenants (name) VALUES ('acme')")
            tenant = conn.execute("SELECT id FROM bunko.tenants").fetchone()[0]
            conn.execute("INSERT INTO bunko.collections (tenant_id, name, embedding_provider, embedding_model, "
                         "dimension) VALUES (%s, 'docs', 'p', 'm', 3)", (tenant,))
            collection = conn.execute("SELECT id FROM bunko.collections").fetchone()[0]
            conn.execute("INSERT INTO bunko.chunks (uid, tenant_id, collection_id, content, embedding) "
                         "VALUES ('c1', %s, %s, '非常用の飲料水を備蓄する', '[1,0,0]')", (tenant, collection))
        assert migrate_database(url) == [name for name, _ in pg_migrations.MIGRATIONS[1:]]
        backend = PostgresBackend(url)
        try:
            hits = keyword_query(backend.for_tenant("acme"), "docs", "飲料水")
            assert [h.chunk_id for h in hits] == ["c1"]
            with _admin(url) as conn:  # m003 counted the old rows' tokens for BM25
                assert conn.execute("SELECT fts_length FROM bunko.chunks").fetchone()[0] == 12
                assert conn.execute("SELECT keyword_tokens FROM bunko.collections").fetchone()[0] == 12
        finally:
            backend.close()
    finally:
        pg_server.drop_database(url)


def test_unmigrated_database_gives_a_clear_error(pg_server) -> None:
    from bunko.errors import VectorStoreError

    with _admin(pg_server.admin_url) as conn:
        conn.execute("DROP DATABASE IF EXISTS bunko_empty")
        conn.execute("CREATE DATABASE bunko_empty")

    url = with_dbname(pg_server.admin_url, "bunko_empty")
    with pytest.raises(VectorStoreError, match="bunko db migrate"):
        PostgresBackend(url, migrate=False)
    assert schema_status(url)["pending"]
    with pytest.raises(VectorStoreError, match="cannot connect"):
        PostgresBackend("postgresql://nobody@127.0.0.1:1/none?connect_timeout=2", migrate=False)


def _planner_backend(url: str, **overrides) -> PostgresBackend:
    return PostgresBackend(url, settings=PostgresSettings(hnsw_min_rows=2_000, exact_max_rows=300, **overrides))


@pytest.mark.parametrize("iterative", [None, False])
def test_restricted_search_strategies_return_k_in_order(pg_url: str, iterative: bool | None) -> None:
    backend = _planner_backend(pg_url, iterative_scan=iterative)
    store = backend.for_tenant("acme")
    store.ensure_collection("c", INFO)
    vectors = unit_vectors(3_000, 70)
    docs = [make_document(f"d{i}", [f"t{i}-{j}" for j in range(50)], vectors[i * 50 : (i + 1) * 50])
            for i in range(60)]
    store.write_documents("c", docs)  # crosses hnsw_min_rows: the HNSW index is built after the load
    with backend.connection() as conn:
        assert conn.execute("SELECT to_regclass('bunko.chunks_hnswh_1') IS NOT NULL").fetchone()[0]
    q = unit_vectors(1, 71)[0]

    def exact(ids: list[str] | None) -> list[float]:
        rows = range(3_000) if ids is None else [i * 50 + j for i in range(60) if docs[i].id in ids for j in range(50)]
        return sorted((float(vectors[r] @ q) for r in rows), reverse=True)[:10]

    hits = _vq(store, "c", q, 10)
    assert _LAST["plan"] == "hnsw" and len(hits) == 10
    assert np.allclose([h.score for h in hits][:5], exact(None)[:5], atol=1e-4)

    few = [docs[0].id, docs[1].id]  # 100 chunks: exact scan
    hits = _vq(store, "c", q, 10, document_ids=few)
    assert _LAST["plan"] == "exact"
    assert [round(h.score, 4) for h in hits] == [round(s, 4) for s in exact(few)]

    many = [d.id for d in docs[:20]]  # 1,000 chunks, a third of the collection: index with a restriction
    hits = _vq(store, "c", q, 10, document_ids=many)
    assert _LAST["plan"].startswith("hnsw-iterative" if iterative is None else "hnsw-overfetch")
    assert len(hits) == 10 and {h.document_id for h in hits} <= set(many)
    assert all(a.score >= b.score for a, b in pairwise(hits))
    recall = len({round(h.score, 4) for h in hits} & {round(s, 4) for s in exact(many)}) / 10
    assert recall >= 0.9
    backend.close()


def test_halfvec_index_above_2000_dimensions(pg_url: str) -> None:
    from bunko.types import EmbedderInfo

    backend = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=50))
    store = backend.for_tenant("acme")
    store.ensure_collection("large", EmbedderInfo("openai", "text-embedding-3-large", 3072))
    vectors = unit_vectors(60, 80, dim=3072)
    store.write_document("large", make_document("big", [f"t{i}" for i in range(60)], vectors))
    with backend.connection() as conn:
        definition = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'chunks_hnswh_1'").fetchone()[0]
    assert "halfvec(3072)" in definition
    hits = _vq(store, "large", vectors[7], 3)
    assert _LAST["plan"] == "hnsw" and hits[0].content == "t7"
    backend.close()


def test_engine_and_cli_end_to_end_on_postgres(pg_url: str, embedder) -> None:
    """The same CLI and pipeline over PostgreSQL: ingest the samples, ask, isolation by tenant."""
    import json
    import re

    from click.testing import CliRunner

    from bunko.cli import cli

    from .conftest import EXAMPLES

    def run(*args: str) -> tuple[int, dict]:
        result = CliRunner().invoke(cli, ["--db", pg_url, *args, "--json"], catch_exceptions=False)
        return result.exit_code, json.loads(result.stdout)

    code, status = run("db", "status")
    assert code == 0 and status["backend"] == "postgresql" and status["pending"] == []
    assert run("db", "migrate") == (0, {"applied": []})
    code, data = run("ingest", str(EXAMPLES), "-c", "bousai", "--tenant", "alpha")
    assert code == 0 and data["documents"] == 6 and data["errors"] == []
    code, again = run("ingest", str(EXAMPLES), "-c", "bousai", "--tenant", "alpha")
    assert again["unchanged"] == 6
    code, answer = run("ask", "水は何日分備蓄すればいいですか？", "-c", "bousai", "--tenant", "alpha")
    assert code == 0 and "3日分" in answer["answer"]
    cited = [int(n) for n in dict.fromkeys(re.findall(r"\[(\d+)\]", answer["answer"]))]
    assert [s["index"] for s in answer["sources"]] == cited
    code, hits = run("search", "警戒レベル", "-c", "bousai", "--tenant", "alpha", "--mode", "keyword")
    assert code == 0 and hits["results"][0]["source"].endswith("hinan.md")
    code, other = run("search", "水", "-c", "bousai", "--tenant", "beta")
    assert code == 1 and other["error"]["type"] == "CollectionNotFoundError"
    _, docs = run("documents", "list", "-c", "bousai", "--tenant", "alpha")
    code, deleted = run("documents", "delete", docs["documents"][0]["id"], "--tenant", "beta")
    assert code == 1 and deleted["deleted"] == 0


def test_pool_recovers_after_the_server_drops_connections(backend: PostgresBackend, pg_url: str) -> None:
    store = backend.for_tenant("acme")
    store.ensure_collection("c", INFO)
    with _admin(pg_url) as conn:
        killed = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE usename = current_user AND pid <> pg_backend_pid() AND datname = current_database()"
        ).fetchone()[0]
    assert killed >= 1
    assert store.get_collection("c").name == "c"  # a fresh connection, no error


def test_settings_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from bunko.errors import ConfigError

    monkeypatch.setenv("BUNKO_PG_EF_SEARCH", "250")
    monkeypatch.setenv("BUNKO_PG_ITERATIVE_SCAN", "false")
    monkeypatch.setenv("BUNKO_PG_MAINTENANCE_WORK_MEM", "256MB")
    settings = PostgresSettings.from_env()
    assert (settings.ef_search, settings.iterative_scan, settings.maintenance_work_mem) == (250, False, "256MB")
    monkeypatch.setenv("BUNKO_PG_HNSW_M", "many")
    with pytest.raises(ConfigError, match="BUNKO_PG_HNSW_M"):
        PostgresSettings.from_env()


def test_bulk_load_defers_the_index_and_analyzes(pg_url: str) -> None:
    from bunko.errors import ConfigError

    backend = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=100))
    store = backend.for_tenant("acme")
    store.ensure_collection("c", INFO)
    vectors = unit_vectors(300, 90)
    docs = [make_document(f"d{i}", [f"t{i}-{j}" for j in range(50)], vectors[i * 50 : (i + 1) * 50]) for i in range(6)]

    def has_index() -> bool:
        with backend.connection() as conn:
            return conn.execute("SELECT to_regclass('bunko.chunks_hnswh_1') IS NOT NULL").fetchone()[0]

    with store.bulk_load("c"):
        for doc in docs:
            store.write_documents("c", [doc])  # crosses hnsw_min_rows, but the build waits
        assert not has_index()
    assert has_index()
    with backend.connection() as conn:
        analyzed = conn.execute("SELECT reltuples FROM pg_class WHERE oid = 'bunko.chunks'::regclass").fetchone()[0]
    assert analyzed >= 300  # statistics are fresh, so the planner can pick the index
    assert _vq(store, "c", vectors[3], 1)[0].content == "t0-3"
    backend.close()
    with pytest.raises(ConfigError, match="ef_construction"):
        PostgresSettings(hnsw_m=24, hnsw_ef_construction=40)


@pytest.mark.parametrize("iterative", [None, False])
def test_planner_sizes_filters_and_never_comes_back_short(pg_url: str, iterative: bool | None) -> None:
    """R21 with metadata filters: a selective filter takes the exact path; a broad one the index, still k hits."""
    from bunko.testing.store_suite import ChunkWrite, DocumentWrite
    from bunko.types import new_id

    backend = _planner_backend(pg_url, iterative_scan=iterative)
    store = backend.for_tenant("acme")
    store.ensure_collection("c", INFO)
    q = unit_vectors(1, 91)[0]
    vectors = unit_vectors(3_000, 90)
    # The 7 "recent" chunks are the worst matches of the whole collection: an index scan that
    # filtered afterwards would never reach them.
    vectors[:7] = -q + 0.2 * unit_vectors(7, 92)
    vectors[:7] /= np.linalg.norm(vectors[:7], axis=1, keepdims=True)
    docs = []
    for i in range(60):
        chunks = [ChunkWrite(new_id(), f"t{i}-{j}", j, 0, 5, 1, {"recent": True} if i * 50 + j < 7 else {})
                  for j in range(50)]
        docs.append(DocumentWrite(new_id(), f"d{i}", f"h{i}", {"half": i % 2, "year": 2000 + i}, chunks,
                                  vectors[i * 50 : (i + 1) * 50]))
    store.write_documents("c", docs)

    def exact(passes) -> list[float]:
        rows = [r for r in range(3_000) if passes(r)]
        return sorted((float(vectors[r] @ q) for r in rows), reverse=True)

    hits = _vq(store, "c", q, 5, filter={"recent": True})
    assert _LAST["plan"] == "exact"
    assert len(hits) == 5 and all(h.content.startswith("t0-") for h in hits)
    assert [round(h.score, 4) for h in hits] == [round(s, 4) for s in exact(lambda r: r < 7)[:5]]
    assert len(_vq(store, "c", q, 10, filter={"recent": True})) == 7  # all there are

    hits = _vq(store, "c", q, 10, filter={"half": 1})  # 1,500 chunks, over exact_max_rows: the index
    assert _LAST["plan"].startswith("hnsw-iterative" if iterative is None else "hnsw-overfetch")
    assert len(hits) == 10 and all(int(h.content[1:].split("-")[0]) % 2 == 1 for h in hits)
    assert all(a.score >= b.score for a, b in pairwise(hits))
    best = exact(lambda r: (r // 50) % 2 == 1)[:10]
    assert len({round(h.score, 4) for h in hits} & {round(s, 4) for s in best}) / 10 >= 0.9

    # A filter and document_ids together are sized together: 20 documents (1,000 chunks) but only
    # 4 of them (200 chunks) pass the filter, so the scan is exact.
    hits = _vq(store, "c", q, 10, document_ids=[d.id for d in docs[:20]], filter={"year": {"$gte": 2016}})
    assert _LAST["plan"] == "exact" and {h.document_id for h in hits} <= {d.id for d in docs[16:20]}
    assert len(hits) == 10
    assert _vq(store, "c", q, 10, filter={"year": 1999}) == [] and _LAST["plan"] == "empty"
    backend.close()


def test_filtered_index_scan_uses_the_hnsw_index(pg_url: str) -> None:
    """The iterative scan with a filter (and its document join) is still an HNSW index scan."""
    from bunko.filters import compile_postgres, parse_filter

    # At 2,500 rows and the default ef_search (400) pgvector's cost model prefers the (exact) scan of the
    # table; with a narrower breadth the planner shows whether the statement can use the index at all.
    backend = _planner_backend(pg_url, ef_search=100)
    store = backend.for_tenant("acme")
    store.ensure_collection("c", INFO)
    vectors = unit_vectors(2_500, 95)
    store.write_documents("c", [make_document(f"d{i}", [f"t{i}-{j}" for j in range(50)], vectors[i * 50 : (i + 1) * 50],
                                              metadata={"source": f"d{i}", "half": i % 2}) for i in range(50)])
    _vq(store, "c", vectors[0], 5, filter={"half": 1})
    assert _LAST["plan"] == "hnsw-iterative"
    plan = _plan(store, "c", 5, {"half": 1})
    with store.session() as (conn, tenant_pk):
        where, params = compile_postgres(parse_filter({"half": 1}))
        assert plan.where == (where, params)
        conn.execute("SELECT set_config('hnsw.iterative_scan', 'strict_order', true)")
        assert plan.index_params(vectors[0], 5)[0] == tenant_pk
        explained = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN " + plan.index_sql(), plan.index_params(vectors[0], 5)).fetchall())
    assert "chunks_hnswh_1" in explained, explained
    backend.close()


def test_rls_confines_usage_search_logs_and_conversations(backend: PostgresBackend, pg_url: str) -> None:
    from bunko.types import ConversationTurn, UsageEvent

    a, b = backend.for_tenant("tenant-a"), backend.for_tenant("tenant-b")
    for store in (a, b):
        store.usage.record([UsageEvent("llm", "p", "m", input_tokens=1)])
        store.usage.record((), [(f"{store.tenant} query", 1, 1.0, "vector")])
        store.conversations.append("chat", [ConversationTurn("user", f"{store.tenant} question")])
    tables = ("usage_records", "search_logs", "conversation_turns")
    with _admin(pg_url) as conn:
        conn.execute("SET ROLE bunko_app")
        for table in tables:  # no tenant in the transaction: nothing at all
            assert conn.execute(f"SELECT count(*) FROM bunko.{table}").fetchone()[0] == 0, table
        conn.execute("SELECT set_config('bunko.tenant', 'tenant-a', false)")
        a_pk = conn.execute("SELECT id FROM bunko.tenants").fetchone()[0]
        conn.execute("SELECT set_config('bunko.tenant_id', %s, false)", (str(a_pk),))
        for table in tables:  # a query without a tenant predicate sees only tenant A's row
            assert conn.execute(f"SELECT count(*) FROM bunko.{table}").fetchone()[0] == 1, table
        assert conn.execute("SELECT content FROM bunko.conversation_turns").fetchone()[0] == "tenant-a question"
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            conn.execute("INSERT INTO bunko.conversation_turns (tenant_id, conversation_id, role, content) "
                         "VALUES (%s, 'chat', 'user', 'planted')", (a_pk + 1,))


def _keyword_totals(url: str) -> tuple[int, int]:
    with _admin(url) as conn:
        stored = conn.execute("SELECT keyword_tokens FROM bunko.collections").fetchone()[0]
        actual = conn.execute("SELECT coalesce(sum(fts_length), 0) FROM bunko.chunks").fetchone()[0]
    return stored, actual


def test_keyword_token_counter_follows_every_write(backend: PostgresBackend, pg_url: str) -> None:
    from bunko.types import VectorRecord

    store = backend.for_tenant("acme")
    store.ensure_collection("c", INFO, analyzer="bigram")
    doc = make_document("a.txt", ["水の備蓄", "three words here"], unit_vectors(2, 1))
    store.write_document("c", doc)
    assert _keyword_totals(pg_url) == (7, 7)
    store.write_document("c", make_document("a.txt", ["家具"], unit_vectors(1, 2), content_hash="v2"))  # replaced
    assert _keyword_totals(pg_url) == (2, 2)
    ids = store.upsert("c", [VectorRecord("one two", vector=unit_vectors(1, 3)[0].tolist())])
    store.upsert("c", [VectorRecord("one two three", id=ids[0], vector=unit_vectors(1, 3)[0].tolist())])
    assert _keyword_totals(pg_url) == (5, 5)
    store.delete("c", ids)
    assert _keyword_totals(pg_url) == (2, 2)
    store.delete_documents([doc.id])
    assert _keyword_totals(pg_url) == (0, 0)


def test_bm25_scores_match_the_formula(backend: PostgresBackend) -> None:
    """The SQL scores equal BM25 computed here from the analyzer's tokens (phrases included)."""
    import math

    from bunko.analysis import get_analyzer

    store = backend.for_tenant("acme")
    store.ensure_collection("c", INFO, analyzer="bigram")
    texts = ["水の備蓄は水の量が大切", "備蓄する水", "水道の点検", "water storage", "storage of water and water",
             "地震の備え"]
    store.write_document("c", make_document("f.txt", texts, unit_vectors(len(texts), 4)))
    analyzer, k1, b = get_analyzer("bigram"), 1.2, 0.75
    docs = [analyzer.index_tokens(t) for t in texts]
    avgdl = sum(map(len, docs)) / len(docs)

    def tf(tokens: list[str], phrase: tuple[str, ...]) -> int:
        n = len(phrase)
        return sum(1 for i in range(len(tokens) - n + 1) if tuple(tokens[i : i + n]) == phrase)

    for query in ["水の備蓄", "water storage", "水 water"]:
        phrases = analyzer.query_phrases(query)
        expected = {}
        for text, tokens in zip(texts, docs, strict=True):
            score = 0.0
            for phrase in phrases:
                df = sum(1 for d in docs if tf(d, phrase))
                f = tf(tokens, phrase)
                if f:
                    idf = max(math.log((len(docs) - df + 0.5) / (df + 0.5)), 1e-6)
                    score += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * len(tokens) / avgdl))
            if score:
                expected[text] = score
        got = {h.content: h.score for h in keyword_query(store, "c", query, 10, proximity=None)}
        assert got == pytest.approx(expected, rel=1e-6), query


def test_keyword_ranking_has_one_way_on_every_store() -> None:
    """BM25 from the postings is the one keyword ranking: the settings that chose another are gone."""
    for removed in ("keyword_ranking", "bm25_k1", "bm25_b", "keyword_candidates"):
        with pytest.raises(ConfigError, match="not permitted"):
            PostgresSettings(**{removed: 1})


def test_tsvector_literals_keep_any_token_exactly(pg_url: str) -> None:
    from bunko.analysis import tsquery_literal, tsvector_literal

    tokens = ["it's", "a:b", "c d", "x\\y", "水", "x\\y", "&|!"]
    with _admin(pg_url) as conn:
        vector = conn.execute("SELECT %s::tsvector", (tsvector_literal(tokens),)).fetchone()[0]
        lexemes = conn.execute("SELECT lexeme, positions FROM unnest(%s::tsvector) ORDER BY lexeme",
                               (tsvector_literal(tokens),)).fetchall()
        assert sorted(lexemes) == sorted([("it's", [1]), ("a:b", [2]), ("c d", [3]), ("x\\y", [4, 6]), ("水", [5]),
                                          ("&|!", [7])])
        for phrase in [("it's",), ("c d",), ("x\\y", "水"), ("&|!",)]:
            assert conn.execute("SELECT %s::tsvector @@ %s::tsquery", (vector, tsquery_literal([phrase]))).fetchone()[0]
        assert not conn.execute("SELECT %s::tsvector @@ %s::tsquery", (vector, tsquery_literal([("水", "x\\y", "a:b")]))
                                ).fetchone()[0]


def test_the_engine_hands_its_postgres_settings_to_the_backend(pg_url: str, embedder, tmp_path) -> None:
    # A [postgres] section in a file given with config= (not ./bunko.toml, not the environment)
    # reaches the backend the engine opens.
    from bunko import Bunko

    config = tmp_path / "elsewhere.toml"
    config.write_text("[postgres]\nef_search = 77\nhnsw_min_rows = 123\n", encoding="utf-8")
    with Bunko(pg_url, embedder=embedder, config=config) as engine:
        settings = engine.backend.settings  # type: ignore[attr-defined]
        assert (settings.ef_search, settings.hnsw_min_rows) == (77, 123)
    with Bunko(pg_url, embedder=embedder) as engine:
        assert engine.backend.settings.ef_search == PostgresSettings().ef_search  # type: ignore[attr-defined]


class TestFiltersThroughTheColumnPlanner:
    """The store suite's filter cases with an HNSW index on every collection (``hnsw_min_rows = 0``):
    every filtered vector search then sizes its filter from the in-memory metadata columns and
    reads the passing rows by id, so these check that path against the hand-worked answers and
    against ``Filter.matches`` (the property), operator by operator."""

    @pytest.fixture()
    def backend(self, pg_url: str) -> Iterator[PostgresBackend]:
        b = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=0))
        yield b
        b.close()

    test_filters_select_the_same_chunks_in_every_search = (
        StoreConformance.test_filters_select_the_same_chunks_in_every_search)
    test_filters_combine_with_document_ids_and_threshold = (
        StoreConformance.test_filters_combine_with_document_ids_and_threshold)
    test_restricted_search_with_a_filter_returns_k = StoreConformance.test_restricted_search_with_a_filter_returns_k
    test_filters_never_reach_another_tenant = StoreConformance.test_filters_never_reach_another_tenant
    if hasattr(StoreConformance, "test_filters_agree_with_python_evaluation"):
        test_filters_agree_with_python_evaluation = StoreConformance.test_filters_agree_with_python_evaluation

    def test_the_planner_took_the_column_path(self, backend: PostgresBackend) -> None:
        from bunko.filters import parse_filter
        from bunko.testing.store_suite import write_filter_fixture

        store = backend.for_tenant("acme")
        write_filter_fixture(store, "f")
        flt = parse_filter({"kind": {"$in": ["pdf", "html"]}})
        plan = _plan(store, "f", 5, flt.spec)
        assert plan.strategy == "exact" and plan.ids is not None and len(plan.ids) == 6


    def test_passing_ids_stay_inside_the_tenant(self, backend: PostgresBackend) -> None:
        """The id list is never the only guard: tenant B's exact scan over tenant A's passing ids finds nothing."""
        from bunko.filters import parse_filter
        from bunko.testing.store_suite import write_filter_fixture

        a, b = backend.for_tenant("tenant-a"), backend.for_tenant("tenant-b")
        vectors = write_filter_fixture(a, "f")
        b.ensure_collection("f", INFO)
        b.write_document("f", make_document("b.txt", ["b"], unit_vectors(1, 140), metadata={"kind": "pdf"}))
        flt = parse_filter({"kind": "pdf"})
        stolen = _plan(a, "f", 10, flt.spec)
        tenant_a = stolen.tenant_pk
        assert stolen.ids is not None and len(stolen.ids) == 5
        own = _plan(b, "f", 10, flt.spec)
        with b.session() as (conn, tenant_b):
            for plan in (own, dataclasses.replace(own, collection_pk=stolen.collection_pk)):
                plan.ids, plan.strategy = stolen.ids, "exact"
                assert plan.run(conn, vectors["a1"]) == []
            # Even with tenant A's pk in the statement, RLS (bound to B here) admits none of A's rows.
            assert stolen.tenant_pk == tenant_a != tenant_b
            assert stolen.run(conn, vectors["a1"]) == []


def _uids_passing(store, collection: str, spec: dict) -> set[str]:
    """The chunks that pass a filter, by the compiled SQL alone (the reference for the column path)."""
    from bunko.filters import compile_postgres, parse_filter

    where, params = compile_postgres(parse_filter(spec))
    collection_pk = store.read_collection(collection).key
    with store.session() as (conn, tenant_pk):
        return {r[0] for r in conn.execute(
            "SELECT c.uid FROM bunko.chunks c LEFT JOIN bunko.documents d ON d.tenant_id = c.tenant_id "
            f"AND d.id = c.document_id WHERE c.tenant_id = %s AND c.collection_id = %s AND {where}",
            [tenant_pk, collection_pk, *params])}


def test_selective_filters_read_only_the_passing_rows_and_rank_them_exactly(pg_url: str) -> None:
    """With an index, a selective filter is sized from the metadata columns (no scan of the
    collection) and ranked exactly over the rows that pass: the exact answer, by id."""
    from bunko.stores.base import ChunkWrite, DocumentWrite
    from bunko.types import new_id

    backend = _planner_backend(pg_url)
    store = backend.for_tenant("acme")
    store.ensure_collection("c", INFO)
    vectors = unit_vectors(3_000, 110)
    docs = []
    for i in range(60):
        chunks = [ChunkWrite(new_id(), f"t{i}-{j}", j, 0, 5, 1,
                             {"bucket": (i * 50 + j) % 100, "info": {"shelf": "a" if j % 7 == 0 else "b"}})
                  for j in range(50)]
        docs.append(DocumentWrite(new_id(), f"d{i}", f"h{i}", {"year": 2000 + i % 5}, chunks,
                                  vectors[i * 50 : (i + 1) * 50]))
    store.write_documents("c", docs)
    q = unit_vectors(1, 111)[0]
    meta = [((r % 100), "a" if (r % 50) % 7 == 0 else "b", 2000 + (r // 50) % 5) for r in range(3_000)]
    cases = [
        ({"bucket": 7}, lambda b, s, y: b == 7),
        ({"bucket": {"$in": [3, 4, 5.0]}}, lambda b, s, y: b in (3, 4, 5)),
        ({"bucket": {"$in": [3, "4"]}}, lambda b, s, y: b == 3),  # "4" is a string: no number equals it
        ({"info.shelf": "a", "year": 2003}, lambda b, s, y: s == "a" and y == 2003),
        ({"$or": [{"bucket": 1}, {"bucket": {"$gte": 98}}]}, lambda b, s, y: b in (1, 98, 99)),
    ]
    for spec, passes in cases:
        rows = [r for r in range(3_000) if passes(*meta[r])]
        assert 0 < len(rows) <= 300, spec
        hits = _vq(store, "c", q, 10, filter=spec)
        assert _LAST["plan"] == "exact", spec
        best = sorted(rows, key=lambda r: -float(vectors[r] @ q))[:10]
        assert [h.content for h in hits] == [f"t{r // 50}-{r % 50}" for r in best], spec
        plan = _plan(store, "c", 10, spec)
        assert plan.ids is not None and len(plan.ids) == len(rows), spec
    backend.close()


def test_metadata_columns_follow_inserts_deletes_versions_and_late_commits(pg_url: str) -> None:
    """The in-memory columns never drift from the table: new rows are appended, removals (a delete,
    a new version) make them read again, and so does a writer whose lower ids commit after a higher one's."""
    from psycopg.types.json import Jsonb

    from bunko.stores.base import ChunkWrite, DocumentWrite
    from bunko.types import new_id

    backend = _planner_backend(pg_url)
    store = backend.for_tenant("acme")
    store.ensure_collection("c", INFO)
    vectors = unit_vectors(3_200, 120)
    q = unit_vectors(1, 121)[0]

    def document(i: int, colour: str, k: int = 50) -> DocumentWrite:
        chunks = [ChunkWrite(new_id(), f"t{i}-{j}", j, 0, 5, 1, {"n": j}) for j in range(k)]
        return DocumentWrite(new_id(), f"d{i}", f"h{i}-{colour}", {"colour": colour}, chunks,
                             vectors[i * 50 : i * 50 + k])

    store.write_documents("c", [document(i, "red" if i < 4 else "blue") for i in range(60)])
    spec = {"colour": "red", "n": {"$in": [1, 2, 3]}}

    def check(expected: int) -> None:
        found = {h.chunk_id for h in _vq(store, "c", q, 100, filter=spec)}
        assert _LAST["plan"] == "exact"
        assert found == _uids_passing(store, "c", spec) and len(found) == expected

    check(12)
    store.write_documents("c", [document(60, "red")])  # appended
    check(15)
    gone = [h.chunk_id for h in _vq(store, "c", q, 100, filter=spec) if h.content.startswith("t60-")][:2]
    assert store.delete("c", gone) == 2  # removed: read again
    check(13)
    store.write_documents("c", [document(0, "blue")])  # a new version: its old chunks go, the new ones fail
    check(10)

    # A writer takes ids first and commits last: a search in between must not hide its rows afterwards.
    late_uid = new_id()
    collection_pk = store.read_collection("c").key
    with store.session() as (conn, tenant_pk):
        doc_pk = conn.execute("SELECT id FROM bunko.documents WHERE tenant_id = %s AND source = 'd1'",
                              (tenant_pk,)).fetchone()[0]
    with backend.connection() as late:
        late.execute("SELECT set_config('bunko.tenant_id', %s, true)", (str(tenant_pk),))
        late.execute("INSERT INTO bunko.chunks (uid, tenant_id, collection_id, document_id, chunk_index, "
                     "start_offset, end_offset, token_count, content, metadata, embedding) "
                     "VALUES (%s, %s, %s, %s, 99, 0, 5, 1, 'late', %s, %s)",
                     (late_uid, tenant_pk, collection_pk, doc_pk, Jsonb({"n": 2}), vectors[3_100]))
        store.write_documents("c", [document(61, "red")])  # higher ids, committed first
        check(13)
        # One removal and the late row before the next search: the chunk count comes out where it was,
        # so only mutation_seq tells the columns to read again.
        gone = [h.chunk_id for h in _vq(store, "c", q, 100, filter=spec) if h.content.startswith("t61-")][:1]
        assert store.delete("c", gone) == 1
        late.execute("UPDATE bunko.collections SET chunk_count = chunk_count + 1 WHERE tenant_id = %s AND id = %s",
                     (tenant_pk, collection_pk))
        late.commit()
    check(13)
    assert late_uid in {h.chunk_id for h in _vq(store, "c", q, 100, filter=spec)}
    store.write_documents("c", [document(62, "red")])
    check(16)
    backend.close()


def test_default_search_breadth_and_graph_quality_reach_the_server(pg_url: str) -> None:
    """ef_search 400 on every pooled connection and HNSW graphs built with ef_construction 200: the
    defaults measured to reach recall@10 >= 0.95 at 100,000 chunks (docs/ARCHITECTURE.md)."""
    defaults = PostgresSettings()
    assert (defaults.ef_search, defaults.hnsw_ef_construction, defaults.hnsw_m) == (400, 200, 16)
    backend = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=50))
    store = backend.for_tenant("acme")
    store.ensure_collection("c", INFO)
    store.write_document("c", make_document("d", [f"t{i}" for i in range(60)], unit_vectors(60, 130)))
    with backend.connection() as conn:
        assert conn.execute("SHOW hnsw.ef_search").fetchone()[0] == "400"
        definition = conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'chunks_hnswh_1'").fetchone()[0]
    assert "ef_construction='200'" in definition and "m='16'" in definition
    _vq(store, "c", unit_vectors(1, 131)[0], 5)
    assert _LAST["plan"] == "hnsw"
    backend.close()


def test_a_larger_collection_is_searched_wider(pg_url: str) -> None:
    """An unfiltered search's ``hnsw.ef_search`` grows with the square root of the collection's size past
    ``ef_search_rows``, and at least in proportion to it past ``ef_search_linear_rows`` (to pgvector's
    1,000), and the breadth reaches the server in the search's transaction; filtered and small searches
    keep ``ef_search``."""
    from bunko.stores.postgres.search import search_breadth

    defaults = PostgresSettings()
    assert [search_breadth(defaults, n, 10) for n in (10_000, 38_000, 60_000, 100_000, 150_000, 1_000_000)] == [
        400, 400, 503, 649, 909, 1000]
    assert search_breadth(PostgresSettings(ef_search_linear_rows=0), 150_000, 10) == 795  # the square root alone
    assert search_breadth(PostgresSettings(ef_search_rows=0), 100_000, 10) == 606  # in proportion alone
    assert search_breadth(PostgresSettings(ef_search_rows=0, ef_search_linear_rows=0), 1_000_000, 10) == 400
    assert search_breadth(PostgresSettings(ef_search=40), 100, 200) == 200
    assert search_breadth(PostgresSettings(ef_search=40), 100, 5000) == 1000
    backend = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=50, ef_search=40, ef_search_rows=100,
                                                                exact_max_rows=10))
    store = backend.for_tenant("acme")
    store.ensure_collection("c", INFO)
    vectors = unit_vectors(400, 140)
    store.write_documents("c", [make_document(f"d{i}", [f"t{i}-{j}" for j in range(40)], vectors[i * 40:(i + 1) * 40],
                                              metadata={"source": f"d{i}", "half": i % 2}) for i in range(10)])
    with store.reader(store.read_collection("c")) as reader:
        ranked = reader.nearest(vectors[3], 5)
        assert ranked.plan == "hnsw" and int(reader.run("SHOW hnsw.ef_search").fetchone()[0]) == 80  # 40 * 2
    with store.reader(store.read_collection("c")) as reader:
        from bunko.filters import parse_filter
        from bunko.stores.base import Restriction

        ranked = reader.nearest(vectors[3], 5, Restriction(None, parse_filter({"half": 1})))
        assert ranked.plan.startswith("hnsw-") and reader.run("SHOW hnsw.ef_search").fetchone()[0] == "40"
    backend.close()


def test_a_large_collection_trades_its_hnsw_index_for_ivfflat(pg_url: str) -> None:
    """Past ``ivfflat_min_rows`` a collection's HNSW index gives way to IVFFlat over halfvec (its lists from
    the size), searched by probing lists and re-ranking by the full vectors, filtered too; a process that
    had cached the HNSW index finds the new one; another tenant's chunks never come back."""
    from bunko.filters import parse_filter
    from bunko.stores.base import Restriction
    from bunko.stores.postgres.backend import ivfflat_lists

    assert [ivfflat_lists(n) for n in (50, 400, 300_000, 1_000_000, 4_000_000)] == [10, 20, 547, 1000, 2000]
    settings = PostgresSettings(hnsw_min_rows=50, ivfflat_min_rows=300, exact_max_rows=10, ivfflat_probe_share=1.0)
    backend, other_process = PostgresBackend(pg_url, settings=settings), PostgresBackend(pg_url, settings=settings)
    a, b = backend.for_tenant("acme"), backend.for_tenant("bravo")
    vectors, theirs = unit_vectors(400, 150), unit_vectors(400, 151)

    def documents(prefix: str, rows: np.ndarray, first: int, last: int) -> list:
        return [make_document(f"{prefix}{i}", [f"{prefix}{i}-{j}" for j in range(40)], rows[i * 40:(i + 1) * 40],
                              metadata={"source": f"{prefix}{i}", "half": i % 2}) for i in range(first, last)]

    def indexes() -> set[str]:
        with backend.connection() as conn:
            return {r[0] for r in conn.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE 'chunks_%%_%%' "
                                               "AND indexname NOT LIKE 'chunks_%%_idx'")}

    for store, prefix, rows in ((a, "a", vectors), (b, "b", theirs)):
        store.ensure_collection("c", INFO)
        store.write_documents("c", documents(prefix, rows, 0, 4))  # 160 chunks: HNSW
    assert _vq(a, "c", vectors[3], 5)[0].content == "a0-3" and _LAST["plan"] == "hnsw"
    _vq(other_process.for_tenant("acme"), "c", vectors[3], 5)
    assert _LAST["plan"] == "hnsw"
    for store, prefix, rows in ((a, "a", vectors), (b, "b", theirs)):
        store.write_documents("c", documents(prefix, rows, 4, 10))  # 400 chunks: IVFFlat
    assert {i for i in indexes() if i.startswith(("chunks_hnsw", "chunks_ivf"))} == {"chunks_ivf_1", "chunks_ivf_2"}
    with backend.connection() as conn:
        assert "lists='20'" in conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname = 'chunks_ivf_1'"
                                            ).fetchone()[0]

    def exact(rows: np.ndarray, q: np.ndarray, passing=None) -> list[float]:
        scores = rows @ q if passing is None else (rows @ q)[passing]
        return sorted((round(float(x), 4) for x in scores), reverse=True)[:5]

    q = (vectors[3] + theirs[3]) / np.linalg.norm(vectors[3] + theirs[3])
    for store in (a, other_process.for_tenant("acme")):
        hits = _vq(store, "c", q, 5)
        assert _LAST["plan"] == "ivfflat" and all(h.content.startswith("a") for h in hits)
        assert [round(h.score, 4) for h in hits] == exact(vectors, q)
    hits = _vq(b, "c", q, 5)
    assert _LAST["plan"] == "ivfflat" and [round(h.score, 4) for h in hits] == exact(theirs, q)
    odd = np.repeat(np.arange(10) % 2 == 1, 40)
    hits = _vq(a, "c", q, 5, filter={"half": 1})
    assert _LAST["plan"] == "ivfflat-iterative" and all(int(h.content[1:].split("-")[0]) % 2 == 1 for h in hits)
    assert [round(h.score, 4) for h in hits] == exact(vectors, q, odd)
    with a.reader(a.read_collection("c")) as reader:
        assert reader.plan(5, Restriction(None, parse_filter({"half": 1}))).probes() == 20
    # A cap on the lists probed: the search probes that many (set in its transaction), still only its tenant's.
    capped = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=50, ivfflat_min_rows=300,
                                                               exact_max_rows=10, ivfflat_probe_share=1.0,
                                                               ivfflat_max_probes=3))
    for store, prefix in ((capped.for_tenant("acme"), "a"), (capped.for_tenant("bravo"), "b")):
        with store.reader(store.read_collection("c")) as reader:
            ranked = reader.nearest(q, 5)
            assert ranked.plan == "ivfflat" and reader.run("SHOW ivfflat.probes").fetchone()[0] == "3"
            assert len(ranked.keys) == 5
            hits = list(reader.hits(ranked))
        assert all(h.content.startswith(prefix) for h in hits)
    capped.close()
    backend.close()
    other_process.close()


def test_ivfflat_probes_follow_the_share_and_the_cap() -> None:
    """The lists an IVFFlat search probes: ``ivfflat_probe_share`` of them (at least 1), at most
    ``ivfflat_max_probes`` (0: no cap): 30 of a million chunks' 1,000 lists by default."""
    from bunko.stores.postgres.search import Plan

    def probes(lists: int, **settings: float) -> int:
        return Plan("ivfflat", 1, 1, 8, 10, None, 1, 1, PostgresSettings(**settings), lists=lists).probes()

    assert [probes(n) for n in (10, 447, 548, 750, 1000, 2000)] == [1, 18, 22, 30, 30, 30]
    assert probes(1000, ivfflat_max_probes=0) == 40 and probes(2000, ivfflat_max_probes=0) == 80
    assert probes(20, ivfflat_probe_share=1.0) == 20 and probes(20, ivfflat_probe_share=1.0, ivfflat_max_probes=3) == 3


def test_a_libpq_connection_string_opens_postgres(pg_url: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--db "host=... dbname=..."`` (libpq's key=value form) names PostgreSQL, in the CLI and in
    ``open_backend``, instead of a SQLite file of that name; paths with ``=`` stay SQLite paths."""
    import json

    from click.testing import CliRunner

    from bunko.cli import cli
    from bunko.stores import open_backend, url_scheme

    parts = psycopg.conninfo.conninfo_to_dict(pg_url)
    conninfo = " ".join(f"{k}='{v}'" if " " in str(v) else f"{k}={v}" for k, v in parts.items() if v != "")
    assert url_scheme(conninfo) == "postgresql"
    assert url_scheme(str(tmp_path / "a=b.db")) == url_scheme("bunko.db") == "sqlite"
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, ["--db", conninfo, "db", "status", "--json"], catch_exceptions=False)
    assert result.exit_code == 0 and json.loads(result.stdout)["backend"] == "postgresql"
    backend = open_backend(conninfo)
    try:
        assert isinstance(backend, PostgresBackend)
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO)
        store.write_documents("c", [make_document("d.txt", ["水の備蓄"], unit_vectors(1, 0))])
        assert [h.content for h in keyword_query(store, "c", "備蓄", 3)] == ["水の備蓄"]
    finally:
        backend.close()
    assert list(tmp_path.iterdir()) == []  # no SQLite file named after the string
