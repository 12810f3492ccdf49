"""Store internals of search at scale, on both stores: per-tenant keyword statistics, analyzers,
fast filtered vector search."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bunko.engine import Bunko
from bunko.search import keyword_query, vector_query
from bunko.stores import open_backend
from bunko.stores.base import StoreBackend
from bunko.testing.store_suite import INFO, make_document, unit_vectors
from bunko.types import Document

QUERY = "水の備蓄 emergency water storage"
B_TEXTS = [
    "災害に備えて水の備蓄を進めましょう。Emergency water storage needs three litres a day.",
    "非常食と飲料水を家族の人数分用意します。",
    "Store water in clean containers and rotate the storage every six months.",
    "地震のときは家具の転倒に注意してください。",
]


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'stores.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture()
def store_backend(db_url: str) -> Iterator[StoreBackend]:
    backend = open_backend(db_url)
    yield backend
    backend.close()


def _results(engine: Bunko, tenant: str) -> dict[str, list[tuple[str, float]]]:
    scope = engine.tenant(tenant)
    return {mode: [(h.chunk_id, h.score) for h in scope.search(QUERY, "docs", mode=mode, top_k=4).results]
            for mode in ("keyword", "hybrid")}


def test_a_tenants_results_do_not_move_when_another_tenant_ingests(db_url: str, embedder) -> None:
    """Tenant B's keyword and hybrid ids and scores are identical before and after tenant A loads
    thousands of chunks full of the query's terms (keyword statistics are per collection)."""
    with Bunko(db_url, embedder=embedder) as engine:
        b = engine.tenant("tenant-b")
        for i, text in enumerate(B_TEXTS):
            b.add_document(Document(text, {"source": f"b{i}.txt"}), "docs")
        before = _results(engine, "tenant-b")
        assert before["keyword"] and before["hybrid"]

        a = engine.backend.for_tenant("tenant-a")
        a.ensure_collection("docs", INFO)
        flood = "水の備蓄 水の備蓄 emergency water water storage 備蓄 水"
        for batch in range(6):
            a.write_documents("docs", [
                make_document(f"a{batch}-{d}.txt", [f"{flood} {batch} {d} {i}" for i in range(50)],
                              unit_vectors(50, seed=batch * 100 + d))
                for d in range(10)])
        assert a.count("docs") == 3000
        assert keyword_query(engine.tenant("tenant-a").store, "docs", QUERY, 3)  # A's flood is searchable

        after = _results(engine, "tenant-b")
    assert after == before


def test_postgres_searches_during_a_concurrent_hnsw_build_are_exact(pg_url: str) -> None:
    """While CREATE INDEX CONCURRENTLY runs, searches and writes go on, the searches exact; the
    planner uses the index once it is valid.

    An open reader transaction holds the build in its last phase (it waits for older snapshots),
    with the index in the catalog but not valid: the test searches and writes then, and lets go.
    """
    import threading
    import time

    from bunko.stores.postgres import PostgresBackend, PostgresSettings

    from .pg import psycopg

    loader = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=10**9))  # never builds by itself
    backend = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=1000))
    try:
        writer = loader.for_tenant("t")
        writer.ensure_collection("c", INFO)
        writer.ensure_collection("other", INFO)
        vectors = unit_vectors(3000, seed=5)
        docs = [make_document(f"d{i}.txt", [f"text {i} {j}" for j in range(100)], vectors[i * 100:(i + 1) * 100])
                for i in range(30)]
        writer.write_documents("c", docs)
        row_of = {d.id: i * 100 for i, d in enumerate(docs)}
        queries = unit_vectors(10, seed=6)
        truth = [set(np.argsort(-(vectors @ q))[:10].tolist()) for q in queries]
        store = backend.for_tenant("t")
        with psycopg.connect(pg_url) as reader:
            reader.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            reader.execute("SELECT count(*) FROM bunko.tenants").fetchone()  # takes the old snapshot
            building = threading.Thread(target=store.build_index, args=("c",))
            building.start()
            with psycopg.connect(pg_url, autocommit=True) as watch:
                deadline = time.monotonic() + 300  # only catches a hang
                while not watch.execute("SELECT count(*) FROM pg_index WHERE indexrelid = "
                                        "to_regclass('bunko.chunks_hnswh_' || %s) AND NOT indisvalid",
                                        (_collection_pk(watch),)
                                        ).fetchone()[0]:
                    assert building.is_alive() and time.monotonic() < deadline
                    time.sleep(0.05)
            for q, expected in zip(queries, truth, strict=True):  # the index exists but is not valid
                explain: dict[str, str] = {}
                hits = vector_query(store, "c", q, 10, include_content=False, explain=explain)
                assert explain["plan"] == "exact"
                assert {row_of[h.document_id] + h.chunk_index for h in hits} == expected
            writer.write_document("other", make_document("late.txt", ["late"], unit_vectors(1, 7)))  # not blocked
            assert building.is_alive()
            reader.rollback()
        building.join(timeout=300)
        assert not building.is_alive()
        explain = {}
        vector_query(store, "c", queries[0], 10, explain=explain)
        assert explain["plan"] == "hnsw"  # valid now: the planner uses it
    finally:
        backend.close()
        loader.close()


def _collection_pk(conn) -> int:
    return int(conn.execute("SELECT id FROM bunko.collections WHERE name = 'c'").fetchone()[0])


def test_postgres_keyword_statistics_stay_exact_through_writes_replacements_and_deletes(pg_url: str) -> None:
    """keyword_df, kept by every write and delete, equals a recount from the stored tsvectors
    (the statement migration m006 fills it with), and BM25 reads it."""
    from bunko.stores.postgres import PostgresBackend
    from bunko.stores.postgres import migrations as pg_migrations

    from .pg import psycopg

    backend = PostgresBackend(pg_url)
    try:
        store = backend.for_tenant("t")
        store.ensure_collection("c", INFO, analyzer="combined_en")
        texts = ["水の備蓄は三日分。Running water supplies", "備蓄品の点検を行う。water", "地震と津波に備える"]
        docs = [make_document(f"d{i}.txt", texts[i:] + texts[:i], unit_vectors(3, i)) for i in range(3)]
        store.write_documents("c", docs)
        store.write_document("c", make_document("d0.txt", ["水の入れ替え 水 水"], unit_vectors(1, 9)))  # a new version
        store.delete_documents([docs[1].id])
        store.upsert("c", [])
        hits = keyword_query(store, "c", "水の備蓄 running", 5)
        assert hits and all(h.score > 0 for h in hits)
        with psycopg.connect(pg_url) as conn:
            kept = dict(conn.execute("SELECT term, df FROM bunko.keyword_df WHERE df > 0").fetchall())
            recount = dict(conn.execute(
                "SELECT term, count(*) FROM (SELECT DISTINCT c.id, t.term FROM bunko.chunks c, LATERAL ("
                + pg_migrations.KEYWORD_TERMS.format(fts="c.fts") + ") t) x GROUP BY term").fetchall())
        assert kept == recount and "水 の" in kept and "run" in kept
    finally:
        backend.close()


def test_sqlite_upgrade_moves_the_shared_fts_table_into_per_collection_tables(tmp_path: Path) -> None:
    import sqlite3

    from bunko.stores.sqlite import MIGRATIONS, SQLiteBackend, apply_migrations

    path = tmp_path / "old.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN")
    apply_migrations(conn, MIGRATIONS[:3])
    conn.execute("INSERT INTO tenants (id, name) VALUES (1, 'acme')")
    for pk in (1, 2):
        conn.execute("INSERT INTO collections (id, tenant_id, name, embedding_provider, embedding_model, dimension, "
                     "analyzer, chunk_count) VALUES (?, 1, ?, 'test', 'random-16', 16, 'bigram', 1)", (pk, f"c{pk}"))
        conn.execute("INSERT INTO chunks (id, uid, tenant_id, collection_id, content, embedding) "
                     "VALUES (?, ?, 1, ?, ?, ?)", (pk, f"u{pk}", pk, f"水 {pk}", unit_vectors(1, pk)[0].tobytes()))
        conn.execute("INSERT INTO chunks_fts (rowid, terms) VALUES (?, ?)", (pk, f"水 {pk}"))
    conn.execute("COMMIT")
    conn.close()
    backend = SQLiteBackend(path)
    try:
        store = backend.for_tenant("acme")
        assert [h.chunk_id for h in keyword_query(store, "c1", "水", 5)] == ["u1"]
        assert [h.chunk_id for h in keyword_query(store, "c2", "2", 5)] == ["u2"]
    finally:
        backend.close()


@pytest.mark.parametrize("budget", [1, 20_000])
def test_postgres_keyword_search_ranks_and_scores_as_sqlite(pg_url: str, tmp_path: Path, budget: int) -> None:
    """The same documents in either store give the same top-k (from one candidate per MaxScore round up to
    the default budget): the same chunks, the same scores."""
    from bunko.stores.postgres import PostgresBackend
    from bunko.stores.sqlite import SQLiteBackend

    rng = np.random.default_rng(3)
    words = ["水", "の", "備蓄", "地震", "津波", "避難", "所", "water", "storage", "running", "emergency", "は", "を"]
    texts = ["".join(rng.choice(words, size=int(rng.integers(3, 12)))) for _ in range(300)]
    queries = ["水の備蓄", "避難所の地震", "emergency water running", "津波は", "の", "storage 水"]
    results = []
    for backend in (SQLiteBackend(tmp_path / "s.db"), PostgresBackend(pg_url)):
        try:
            store = backend.for_tenant("t")
            store.ensure_collection("c", INFO, analyzer="combined_en")
            store.write_documents("c", [make_document(f"d{i}.txt", texts[i * 30:(i + 1) * 30],
                                                      unit_vectors(30, i)) for i in range(10)])
            results.append([[(h.content, round(h.score, 9)) for h in keyword_query(store, "c", q, 7, budget=budget)]
                            for q in queries])
        finally:
            backend.close()
    sqlite, postgres = results
    for q, a, b in zip(queries, sqlite, postgres, strict=True):
        assert a, q
        assert [s for _, s in a] == pytest.approx([s for _, s in b], abs=1e-6), q
        # Chunks with equal scores may come in either order: compare the chunks whose score is unique.
        scores = [round(s, 6) for _, s in a]
        unique = [i for i, s in enumerate(scores) if scores.count(s) == 1]
        assert [a[i][0] for i in unique] == [b[i][0] for i in unique], q


def test_postgres_pair_lexemes_written_and_migrated_alike(pg_url: str) -> None:
    """``fts_pairs`` holds each pair of adjacent one-character tokens with the positions of its first one,
    whether the write path made it (Python) or migration m012 filled it from ``fts`` (SQL); and a keyword
    search finds a pair through it."""
    from bunko.stores.postgres import PostgresBackend
    from bunko.stores.postgres import migrations as pg_migrations

    from .pg import psycopg

    backend = PostgresBackend(pg_url)
    try:
        store = backend.for_tenant("t")
        store.ensure_collection("c", INFO, analyzer="combined_en")
        texts = ["水の備蓄は水の量で決まる", "避難所の場所を確かめる water's \\edge", "地震の備え", "a b c 水"]
        store.write_documents("c", [make_document("d.txt", texts, unit_vectors(4, 1))])
        with psycopg.connect(pg_url, autocommit=True) as conn:
            written = dict(conn.execute("SELECT content, fts_pairs::text FROM bunko.chunks").fetchall())
            assert "'水 の':1,6" in written[texts[0]] and "'の 備':2" in written[texts[0]]
            assert "'c 水':2" in written[texts[3]]  # "a" is a stop word of combined_en
            conn.execute("UPDATE bunko.chunks SET fts_pairs = ''")
            conn.execute(pg_migrations._M012_FTS_PAIRS[1])
            migrated = dict(conn.execute("SELECT content, fts_pairs::text FROM bunko.chunks").fetchall())
        assert migrated == written
        assert [h.content for h in keyword_query(store, "c", "備蓄", 5)] == [texts[0]]
    finally:
        backend.close()


def test_postgres_concurrent_loads_and_deletes_in_one_collection_never_deadlock(pg_url: str) -> None:
    """Writers take the collection row before any keyword_df row, and those in term order: threads that
    load and delete texts sharing their terms in one collection all finish, and the statistics stay exact.
    (Deletes used to lock keyword_df rows before the collection row: a 32-client load met 85 deadlocks.)"""
    import threading

    from bunko.stores.postgres import PostgresBackend
    from bunko.stores.postgres import migrations as pg_migrations
    from bunko.types import VectorRecord

    from .pg import psycopg

    backend = PostgresBackend(pg_url)
    errors: list[BaseException] = []
    words = ["水の備蓄", "地震の備え", "避難所の場所", "家具の固定", "非常用の袋"]

    def work(worker: int) -> None:
        store = backend.for_tenant("t")
        try:
            for round_ in range(25):
                ids = [f"w{worker}-{round_}-{i}" for i in range(4)]
                texts = [" ".join(words[(worker + round_ + i + j) % len(words)] for j in range(3)) for i in range(4)]
                vectors = unit_vectors(4, worker * 100 + round_)
                records = [VectorRecord(t, {}, i, v.tolist()) for i, t, v in zip(ids, texts, vectors, strict=True)]
                store.upsert("c", records)
                if round_ % 2:
                    store.delete("c", ids[:3])
        except BaseException as exc:  # reported below, with the worker's failure
            errors.append(exc)

    try:
        backend.for_tenant("t").ensure_collection("c", INFO)
        threads = [threading.Thread(target=work, args=(w,)) for w in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=1800)
        assert not any(t.is_alive() for t in threads), "a writer hung"
        assert errors == []
        with psycopg.connect(pg_url) as conn:
            kept = dict(conn.execute("SELECT term, df FROM bunko.keyword_df WHERE df > 0").fetchall())
            recount = dict(conn.execute(
                "SELECT term, count(*) FROM (SELECT DISTINCT c.id, t.term FROM bunko.chunks c, LATERAL ("
                + pg_migrations.KEYWORD_TERMS.format(fts="c.fts") + ") t) x GROUP BY term").fetchall())
            chunks = conn.execute("SELECT chunk_count FROM bunko.collections WHERE name = 'c'").fetchone()[0]
        assert kept == recount
        assert chunks == 6 * (25 * 4 - 12 * 3)
    finally:
        backend.close()


def test_sqlite_keyword_statistics_stay_exact_and_per_tenant(tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's keyword_df, kept by every write and delete, equals FTS5's own count of each term and
    bigram phrase (what bm25() counts) over the chunks' analyzed text, and keyword_postings a recount of
    each chunk's terms, in each tenant's collection apart; a database from before them (schema 8 or 9)
    gets them filled on upgrade, and one from before migration 17 (FTS5 tables) its chunks' text and
    token totals; dropping a collection or erasing a tenant leaves none."""
    import sqlite3

    from bunko.analysis import fts5_query
    from bunko.stores.sql import postings
    from bunko.stores.sqlite import MIGRATIONS, SQLiteBackend, apply_migrations, fts_table
    from bunko.stores.sqlite.migrations import _m017_keyword_text_in_chunks
    from bunko.stores.sqlite.schema import create_fts

    m017 = MIGRATIONS.index(_m017_keyword_text_in_chunks)  # the migration that moved the text into the chunks

    monkeypatch.setattr(postings, "SEGMENT_ROWS", 4)  # many segments, some merged: deletes cross them

    path = tmp_path / "df.db"
    texts = {"a": ["水の備蓄は三日分。Running water supplies", "備蓄品の点検を行う。water", "地震と津波に備える"],
             "b": ["水水水の津波", "避難所の備蓄"]}
    backend = SQLiteBackend(path)
    try:
        for tenant, mine in texts.items():
            store = backend.for_tenant(tenant)
            store.ensure_collection("c", INFO, analyzer="combined_en")
            docs = [make_document(f"d{i}.txt", mine[i:] + mine[:i], unit_vectors(len(mine), i))
                    for i in range(len(mine))]
            store.write_documents("c", docs)
            store.write_document("c", make_document("d0.txt", ["水の入れ替え 水 水"], unit_vectors(1, 9)))
            store.delete_documents([docs[1].id])
            assert keyword_query(store, "c", "水の備蓄 running", 5)
    finally:
        backend.close()

    def restore_fts(conn: sqlite3.Connection) -> None:
        """Each collection's FTS5 table, filled from its chunks' text, as a database before migration 17 held it."""
        for (collection_pk,) in conn.execute("SELECT id FROM collections").fetchall():
            create_fts(conn, collection_pk)
            conn.execute(f"INSERT INTO {fts_table(collection_pk)} (rowid, terms) SELECT id, terms FROM chunks "
                         "WHERE collection_id = ?", (collection_pk,))

    def check(conn: sqlite3.Connection) -> int:
        assert not conn.execute("SELECT name FROM sqlite_master WHERE name GLOB 'chunks_fts*'").fetchall()
        for (collection_pk,) in conn.execute("SELECT id FROM collections").fetchall():  # FTS5 over the chunks' text
            conn.execute(f"DROP TABLE IF EXISTS temp.f{collection_pk}")
            conn.execute(f"CREATE VIRTUAL TABLE temp.f{collection_pk} USING fts5 "
                         "(terms, tokenize = 'unicode61 remove_diacritics 0')")
            conn.execute(f"INSERT INTO temp.f{collection_pk} (rowid, terms) SELECT id, terms FROM chunks "
                         "WHERE collection_id = ?", (collection_pk,))
            # The collection's token total is its chunks' tokens, as FTS5 counts them.
            conn.execute(f"DROP TABLE IF EXISTS temp.s{collection_pk}")
            conn.execute(f"CREATE VIRTUAL TABLE temp.s{collection_pk} USING fts5vocab(temp, f{collection_pk}, row)")
            assert conn.execute("SELECT keyword_tokens FROM collections WHERE id = ?", (collection_pk,)).fetchone() == \
                conn.execute(f"SELECT coalesce(sum(cnt), 0) FROM temp.s{collection_pk}").fetchone()
        rows = conn.execute("SELECT tenant_id, collection_id, term, df FROM keyword_df WHERE df <> 0").fetchall()
        for tenant_pk, collection_pk, term, df in rows:
            assert conn.execute("SELECT tenant_id FROM collections WHERE id = ?", (collection_pk,)).fetchone() == (
                tenant_pk,)
            fts = f"temp.f{collection_pk}"
            counted = conn.execute(f"SELECT count(*) FROM {fts} WHERE f{collection_pk} MATCH ?",
                                   (fts5_query([tuple(term.split(" "))]),)).fetchone()[0]
            assert df == counted, (term, df, counted)
        # And every token FTS5 holds is in the table (fts5vocab: one row per term with its row count).
        for (collection_pk,) in conn.execute("SELECT id FROM collections").fetchall():
            conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.v{collection_pk} "
                         f"USING fts5vocab(temp, f{collection_pk}, row)")
            vocab = dict(conn.execute(f"SELECT term, doc FROM temp.v{collection_pk}").fetchall())
            kept = dict(conn.execute("SELECT term, df FROM keyword_df WHERE collection_id = ? AND df <> 0 "
                                     "AND instr(term, ' ') = 0", (collection_pk,)).fetchall())
            assert kept == vocab and vocab
            # The postings: a recount of every chunk's terms, in rowid order, rows of the collection's tenant.
            tenant_pk = conn.execute("SELECT tenant_id FROM collections WHERE id = ?", (collection_pk,)).fetchone()[0]
            assert conn.execute("SELECT count(*) FROM keyword_postings WHERE collection_id = ? AND tenant_id <> ?",
                                (collection_pk, tenant_pk)).fetchone()[0] == 0
            stored: dict[str, list[tuple[int, int, int]]] = {}
            for term, key, blob in conn.execute("SELECT term, segment, entries FROM keyword_postings "
                                                "WHERE collection_id = ? ORDER BY term, segment", (collection_pk,)):
                stored.setdefault(term, []).extend(zip(*(a.tolist() for a in postings.unpack(key, blob)), strict=True))
            content = conn.execute("SELECT id, terms FROM chunks WHERE collection_id = ? ORDER BY id",
                                   (collection_pk,)).fetchall()
            # Deleted chunks stay in their segments, listed under " ", until the segment is rewritten.
            dead = {rowid for rowid, _, _ in stored.pop(" ", [])}
            stored = {t: kept for t, v in stored.items() if (kept := [e for e in v if e[0] not in dead])}
            every = stored.pop("")  # the segments' lists of their chunks, with their token counts
            assert every == [(rowid, 0, len(text.split(" "))) for rowid, text in content]
            counted: dict[str, list[list[int]]] = {}  # a recount, term by term, in rowid order
            for rowid, counts, size in postings.counted(content):
                for term, tf in counts.items():
                    for column, value in zip(counted.setdefault(term, [[], [], []]), (rowid, tf, size), strict=True):
                        column.append(value)
            assert stored == {t: list(zip(*p, strict=True)) for t, p in counted.items()} and stored
        return len(rows)

    def drop_fts(conn: sqlite3.Connection) -> None:
        for (collection_pk,) in conn.execute("SELECT id FROM collections").fetchall():
            conn.execute(f"DROP TABLE IF EXISTS {fts_table(collection_pk)}")

    with sqlite3.connect(path) as conn:
        kept = check(conn)
        assert kept > 20
        terms = conn.execute("SELECT id, terms FROM chunks ORDER BY id").fetchall()
        totals = conn.execute("SELECT id, keyword_tokens FROM collections ORDER BY id").fetchall()
        assert all(t for _, t in terms) and all(n for _, n in totals)
        # Back to schema 16 (FTS5 tables, no chunks.terms nor keyword_tokens): migration 17 moves the text
        # into the chunks, counts the totals and drops the tables.
        restore_fts(conn)
        conn.execute("ALTER TABLE chunks DROP COLUMN terms")
        conn.execute("ALTER TABLE collections DROP COLUMN keyword_tokens")
        conn.execute(f"PRAGMA user_version = {m017}")
        apply_migrations(conn, MIGRATIONS[:m017 + 1])
        assert conn.execute("SELECT id, terms FROM chunks ORDER BY id").fetchall() == terms
        assert conn.execute("SELECT id, keyword_tokens FROM collections ORDER BY id").fetchall() == totals
        assert check(conn) == kept
        # Back to schema 8 (no keyword_df): the upgrade fills it with the same counts. (Migrations 9 to 11 only,
        # from FTS5 tables as those databases had: the later ones, which these do not undo, stay as they are.)
        restore_fts(conn)
        conn.execute("DROP TABLE keyword_df")
        conn.execute("DROP TABLE keyword_postings")
        conn.execute("PRAGMA user_version = 8")
        apply_migrations(conn, MIGRATIONS[:11])
        drop_fts(conn)
        assert check(conn) == kept
        # Back to schema 9 (no keyword_postings): the upgrade fills it alone.
        conn.execute("DROP TABLE keyword_postings")
        restore_fts(conn)
        conn.execute("PRAGMA user_version = 9")
        apply_migrations(conn, MIGRATIONS[:11])
        drop_fts(conn)
        assert check(conn) == kept
        # Back to schema 10 (postings of format 1, here a stale row): migration 11 rebuilds them in format 2.
        conn.execute("INSERT INTO keyword_postings SELECT tenant_id, id, 999999, 'stale', x'00' "
                     "FROM collections LIMIT 1")
        restore_fts(conn)
        conn.execute("PRAGMA user_version = 10")
        apply_migrations(conn, MIGRATIONS[:11])
        drop_fts(conn)
        assert check(conn) == kept
        conn.execute(f"PRAGMA user_version = {len(MIGRATIONS)}")
    backend = SQLiteBackend(path)
    try:
        backend.for_tenant("a").delete_collection("c")
        with sqlite3.connect(path) as conn:
            left = {r[0] for r in conn.execute("SELECT DISTINCT t.name FROM keyword_df k JOIN tenants t "
                                               "ON t.id = k.tenant_id")}
            posted = {r[0] for r in conn.execute("SELECT DISTINCT t.name FROM keyword_postings k JOIN tenants t "
                                                 "ON t.id = k.tenant_id")}
        assert left == posted == {"b"}
    finally:
        backend.close()


@pytest.mark.parametrize("segment", [3, 32_768])
def test_postgres_postings_rank_exactly_as_bm25_in_sql(pg_url: str, monkeypatch: pytest.MonkeyPatch,
                                                       segment: int) -> None:
    """PostgreSQL's keyword search ranks from its postings (numpy) exactly as BM25 in SQL over the chunks'
    tsvectors does: the same chunks, the same scores, the same order of ties; with documents written by
    concurrent writers (their chunk ids interleave, so segments overlap), deleted and rewritten, with
    filters and document restrictions; and migration m015 fills the postings of stored chunks exactly as
    the writes made them."""
    import threading

    from bunko.stores.postgres import PostgresBackend
    from bunko.stores.postgres.migrations import fill_postings_format_2
    from bunko.stores.sql import postings
    from bunko.testing.oracles import keyword_oracle

    from .pg import psycopg
    from .test_store_sqlite import _keyword_corpus

    monkeypatch.setattr(postings, "SEGMENT_ROWS", segment)
    monkeypatch.setattr(postings, "FANOUT", 2)
    rng = np.random.default_rng(5)
    texts = _keyword_corpus(rng, 600)
    queries = ["東京の備蓄はですか", "災害のときは避難所に行きます", "津波が来たら高い山に逃げます water", "ですます",
               "の", "emergency storage 地震"]
    queries += [texts[int(i)][5:17].replace(" ", "") + "ですか" for i in rng.choice(len(texts), 6, replace=False)]
    backend = PostgresBackend(pg_url)
    try:
        store = backend.for_tenant("t")
        store.ensure_collection("c", INFO, analyzer="bigram")
        docs = [make_document(f"d{i}.txt", texts[i * 20:(i + 1) * 20], unit_vectors(20, i),
                              metadata={"source": f"d{i}.txt", "kind": "odd" if i % 2 else "even"})
                for i in range(30)]
        errors: list[BaseException] = []

        def write(mine: list[Document]) -> None:
            try:
                for doc in mine:
                    store.write_documents("c", [doc])
            except BaseException as exc:  # reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(docs[i::3],)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=600)
        assert not errors, errors

        restricted: list[int] = []

        def check() -> None:
            for q in queries:
                for k in (1, 5, 30):
                    got = [(h.chunk_id, h.score) for h in keyword_query(store, "c", q, k, budget=40, proximity=None)]
                    assert got == keyword_oracle(store, "c", q, k), (q, k)
                    assert got or q == "ですます"
                    # Restricted by a filter, documents or both: the chunks the metadata columns allow.
                    for flt, ids in (({"kind": "odd"}, None), (None, [docs[3].id, docs[8].id]),
                                     ({"chunk_index": {"$lt": 10}}, [docs[5].id, docs[6].id])):
                        got = [(h.chunk_id, h.score) for h in keyword_query(
                            store, "c", q, k, filter=flt, document_ids=ids, budget=40, proximity=None)]
                        assert got == keyword_oracle(store, "c", q, k, filter=flt, document_ids=ids), (q, k, flt)
                        restricted.append(len(got))

        check()
        store.delete_documents([docs[4].id, docs[11].id], "c")
        store.write_document("c", make_document("d7.txt", texts[:5], unit_vectors(5, 70)))  # a new version
        check()
        assert sum(n > 0 for n in restricted) > len(restricted) // 2, restricted
        collection_pk = store.read_collection("c").key
        with store.session() as (conn, tenant_pk):
            terms = [t for (t,) in conn.execute("SELECT term FROM bunko.keyword_df WHERE collection_id = %s "
                                                "AND df > 0", (collection_pk,)).fetchall()]
            written = backend.postings.read(conn, (tenant_pk, collection_pk), terms)
        assert len(written) == len(terms) > 100
    finally:
        backend.close()
    # The upgrade: the same postings from the stored tsvectors.
    with psycopg.connect(pg_url) as conn:
        fill_postings_format_2(conn)
        conn.execute("SELECT set_config('search_path', 'bunko, public', true)")
        filled = postings.PostingsTable(backend.dialect).read(conn, (tenant_pk, collection_pk), terms)
    assert {t: [a.tolist() for a in c] for t, c in filled.items()} == {
        t: [a.tolist() for a in c] for t, c in written.items()}


def test_cached_postings_follow_writes_deletes_and_tenants(store_backend: StoreBackend) -> None:
    """Keyword search reads postings through the backend's cache (by collection version): a chunk written
    after a search is found by the next one, a deleted chunk is gone from it, a collection deleted and made
    again under the same name does not see the old one's postings, and one tenant's cached postings never
    answer another tenant's search of a collection of the same name."""
    a, b = store_backend.for_tenant("tenant-a"), store_backend.for_tenant("tenant-b")
    for store in (a, b):
        store.ensure_collection("docs", INFO)
    a.write_documents("docs", [make_document("a1.txt", ["備蓄 water storage one"], unit_vectors(1, seed=1))])
    b.write_documents("docs", [make_document("b1.txt", ["備蓄 water storage bee"] * 3, unit_vectors(3, seed=2))])

    def found(store: object, query: str = "water storage") -> list[str]:
        return sorted(h.content for h in keyword_query(store, "docs", query, 10))

    assert found(a) == ["備蓄 water storage one"]
    assert store_backend.postings.cache.held_bytes > 0  # type: ignore[attr-defined]
    assert found(b) == ["備蓄 water storage bee"] * 3
    assert found(a) == ["備蓄 water storage one"]  # from the cache now: still tenant A's own
    a.write_documents("docs", [make_document("a2.txt", ["water storage two"], unit_vectors(1, seed=3))])
    assert found(a) == ["water storage two", "備蓄 water storage one"]
    a.delete_documents([a.find_by_source("docs", "a1.txt").id], "docs")
    assert found(a) == ["water storage two"]
    a.delete_collection("docs")
    a.ensure_collection("docs", INFO)
    a.write_documents("docs", [make_document("a3.txt", ["water storage three"], unit_vectors(1, seed=4))])
    assert found(a) == ["water storage three"]
    assert found(b) == ["備蓄 water storage bee"] * 3


def test_cached_document_frequencies_follow_writes_and_tenants(store_backend: StoreBackend) -> None:
    """The terms' document frequencies are cached with the postings (by tenant, collection and version): a
    search answered from the cache scores as one that reads them afresh, after every write and delete, and
    tenant B's counts of the same terms in a collection of the same name never score tenant A's chunks."""
    a, b = store_backend.for_tenant("tenant-a"), store_backend.for_tenant("tenant-b")
    for store in (a, b):
        store.ensure_collection("docs", INFO)
    a.write_documents("docs", [make_document("a1.txt", ["water storage one", "dry food"], unit_vectors(2, seed=1))])
    b.write_documents("docs", [make_document("b1.txt", ["water storage bee"] * 5 + ["dry"], unit_vectors(6, seed=2))])
    cache = store_backend.postings.cache  # type: ignore[attr-defined]

    def scored(store: object) -> list[tuple[str, float]]:
        return [(h.content, h.score) for h in keyword_query(store, "docs", "water storage food", 10, proximity=None)]

    def check() -> None:
        scored(a), scored(b)  # fill the cache
        from_cache = scored(a), scored(b)
        assert cache.held_frequencies > 0  # the second searches took their counts from here
        cache.clear()
        assert from_cache == (scored(a), scored(b))

    check()
    a.write_documents("docs", [make_document("a2.txt", ["water storage two"], unit_vectors(1, seed=3))])
    check()
    a.delete_documents([a.find_by_source("docs", "a1.txt").id], "docs")
    check()
    b.delete_documents([b.find_by_source("docs", "b1.txt").id], "docs")
    check()


def _postings_both_ways(backend: StoreBackend, store: object, terms: list[str]) -> tuple[dict, dict]:
    """A collection's postings of ``terms`` read from the table and through the held segments, in one reader."""
    table = backend.postings  # type: ignore[attr-defined]
    row = store.read_collection("docs")  # type: ignore[attr-defined]
    with store.reader(row) as reader:  # type: ignore[attr-defined]
        version = reader._version()[1]
        read = table.read(reader._conn, reader.scope, terms)
        held = table.read_held(reader._conn, reader.scope, version, terms)
    as_lists = lambda found: {t: [a.tolist() for a in c] for t, c in found.items()}  # noqa: E731
    return as_lists(read), as_lists(held)


def test_held_segments_follow_writes_merges_deletes_and_tenants(store_backend: StoreBackend) -> None:
    """Keyword postings held in memory segment by segment (``SegmentIndex``) give the table's postings after
    every write (segments merging in tiers), delete (listed dead, then a segment rewritten without them)
    and collection re-creation, and never another tenant's: each search's terms, read both ways, are the
    same, and so are the searches' results with and without the held segments."""
    table = store_backend.postings  # type: ignore[attr-defined]
    index = table.index
    a, b = store_backend.for_tenant("tenant-a"), store_backend.for_tenant("tenant-b")
    for store in (a, b):
        store.ensure_collection("docs", INFO)
    words = ["water", "storage", "food", "備蓄", "水", "地震", "家具", "rotate", "clean", "litres"]
    rng = np.random.default_rng(5)

    def text(i: int) -> str:
        return " ".join(rng.choice(words, size=int(rng.integers(3, 9))).tolist()) + f" w{i}"

    queries = ["water storage", "備蓄 水 food", "地震 家具 clean litres rotate"]
    terms = ["water", "storage", "food", "備蓄", "水", "地震", "家具", "rotate", "clean", "litres", "w3", "w40"]

    def check() -> None:
        for store in (a, b):
            read, held = _postings_both_ways(store_backend, store, terms)
            assert held == read
            with_index = [[(h.chunk_id, h.score) for h in keyword_query(store, "docs", q, 8)] for q in queries]
            limit, index.limit = index.limit, 0
            table.cache.clear()
            try:
                without = [[(h.chunk_id, h.score) for h in keyword_query(store, "docs", q, 8)] for q in queries]
            finally:
                index.limit = limit
                table.cache.clear()
            assert with_index == without
        for store in (a, b):
            row = store.read_collection("docs")
            with store.reader(row) as reader:
                layout = table.layout(reader._conn, reader.scope, reader._version()[1])
                held = index.held(reader.scope)
            assert held and set(held) <= set(layout.segments)  # segments merged away are no longer held
        assert index.held_bytes <= index.limit

    b.write_documents("docs", [make_document("b1.txt", [text(i) for i in range(30)], unit_vectors(30, seed=2))])
    n = 0
    for step in range(12):  # small writes: segments merge in tiers
        a.write_documents("docs", [make_document(f"a{step}.txt", [text(n + i) for i in range(7)],
                                                 unit_vectors(7, seed=10 + step))])
        n += 7
        if step % 4 == 3:
            check()
    assert index.held_bytes > 0
    a.delete_documents([a.find_by_source("docs", "a1.txt").id], "docs")  # listed dead
    check()
    for step in (0, 2, 3, 4, 5, 6, 7):  # most of the oldest segment's chunks: rewritten without them
        a.delete_documents([a.find_by_source("docs", f"a{step}.txt").id], "docs")
    check()
    with a.reader(a.read_collection("docs")) as reader:
        old = reader.scope
    assert index.held(old)
    a.delete_collection("docs")
    assert index.held(old) == []  # a deleted collection's segments are let go
    a.ensure_collection("docs", INFO)
    a.write_documents("docs", [make_document("a-new.txt", [text(i) for i in range(5)], unit_vectors(5, seed=99))])
    check()


def test_held_segments_within_a_small_budget_give_the_same_postings(store_backend: StoreBackend) -> None:
    """With room for some segments only, a search takes those from memory and reads the others from the
    table: the postings are the same as the table's, and the held bytes stay within the limit (none held
    with no room at all)."""
    table = store_backend.postings  # type: ignore[attr-defined]
    store = store_backend.for_tenant("tenant-a")
    store.ensure_collection("docs", INFO)
    for step in range(5):
        store.write_documents("docs", [make_document(f"a{step}.txt", [f"water storage {step} {i} 水の備蓄" for i in
                                                                      range(40 * (step + 1))],
                                                     unit_vectors(40 * (step + 1), seed=step))])
    terms = ["water", "storage", "2", "水", "備 蓄", "3"]
    table.index.limit = 0
    read, held = _postings_both_ways(store_backend, store, terms)
    assert held == read and table.index.held_bytes == 0
    with store.reader(store.read_collection("docs")) as reader:
        scope, version = reader.scope, reader._version()[1]
        segments = table.layout(reader._conn, scope, version).segments
        sizes = sorted(table._segment_size(reader._conn, scope, segment) for segment in segments)
    assert len(segments) > 1
    counts = []
    for limit in (sizes[0], sizes[0] + sizes[1], 10**9):
        table.index.clear()
        table.index.limit = limit
        read, held = _postings_both_ways(store_backend, store, terms)
        assert held == read
        assert 0 < table.index.held_bytes <= limit
        counts.append(len(table.index.held(scope)))
    assert counts[0] < len(segments) and counts[-1] == len(segments), (counts, segments)


def test_the_held_postings_budget_comes_from_the_settings(db_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``keyword_memory_mb`` of the store's section bounds the postings its backend holds (unset: a share of
    the process's memory); 0 holds none, and keyword search answers the same from the table."""
    from bunko.config import Settings, keyword_memory_bytes

    env = "BUNKO_PG_KEYWORD_MEMORY_MB" if db_url.startswith("postgresql") else "BUNKO_SQLITE_KEYWORD_MEMORY_MB"
    monkeypatch.delenv(env, raising=False)
    backend = open_backend(db_url, Settings.resolve(db_url))
    try:
        assert backend.postings.index.limit == keyword_memory_bytes(None) >= 256 * 2**20  # type: ignore[attr-defined]
    finally:
        backend.close()
    answers = []
    for megabytes in ("3", "0"):
        monkeypatch.setenv(env, megabytes)
        backend = open_backend(db_url, Settings.resolve(db_url))
        try:
            table = backend.postings  # type: ignore[attr-defined]
            assert table.index.limit == int(megabytes) * 2**20
            store = backend.for_tenant("tenant-a")
            store.ensure_collection("docs", INFO)
            if megabytes == "3":
                store.write_documents("docs", [make_document("a.txt", [f"water storage {i} 水の備蓄" for i in
                                                                       range(40)], unit_vectors(40, seed=1))])
            answers.append([(h.chunk_id, round(h.score, 6)) for h in keyword_query(store, "docs", "水の備蓄 water", 5)])
            assert (table.index.held_bytes > 0) == (megabytes == "3")
        finally:
            backend.close()
    assert answers[0] == answers[1] and len(answers[0]) == 5
