"""The embedded SQLite store: the shared conformance suite plus SQLite-only behaviour."""

from __future__ import annotations

import multiprocessing
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from bunko.errors import ConfigError, UnknownProviderError, VectorStoreError
from bunko.search import keyword_query, vector_query
from bunko.stores import SQLiteBackend, open_backend
from bunko.stores.sqlite import SCHEMA_VERSION
from bunko.testing.oracles import keyword_oracle
from bunko.testing.store_suite import INFO, StoreConformance, make_document, unit_vectors


class TestSQLiteConformance(StoreConformance):
    """Runs the whole conformance suite on the embedded store."""


def _writer(path: str, worker: int, n_docs: int) -> None:
    backend = SQLiteBackend(path)
    store = backend.for_tenant("acme")
    store.ensure_collection("c", INFO)
    for d in range(n_docs):
        vectors = unit_vectors(20, worker * 1000 + d)
        store.write_document("c", make_document(f"w{worker}-d{d}", [f"w{worker} d{d} c{i}" for i in range(20)],
                                                vectors))
        vector_query(store, "c", vectors[0], 3)
    backend.close()


@pytest.mark.slow
def test_two_processes_write_and_read_one_file(db_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_writer, args=(str(db_path), w, 15)) for w in range(2)]
    for p in workers:
        p.start()
    for p in workers:
        p.join(120)
        assert p.exitcode == 0
    backend = SQLiteBackend(db_path)
    store = backend.for_tenant("acme")
    assert len(store.list_documents("c")) == 30
    assert store.count("c") == 600
    assert len(vector_query(store, "c", unit_vectors(1, 5)[0], 100)) == 100
    backend.close()


class _LockedAtFirst:
    """A connection whose first ``journal_mode`` switches fail as a racing process makes them fail."""

    def __init__(self, conn: sqlite3.Connection, failures: int, message: str = "database is locked") -> None:
        self.conn, self.failures, self.message = conn, failures, message

    def execute(self, sql: str) -> sqlite3.Cursor:
        if sql == "PRAGMA journal_mode = WAL" and self.failures:
            self.failures -= 1
            raise sqlite3.OperationalError(self.message)
        return self.conn.execute(sql)


def test_switching_a_new_file_to_wal_waits_out_a_racing_process(tmp_path: Path) -> None:
    # Two processes opening a new file at once: SQLite refuses one switch to WAL without waiting
    # (seen as a failed worker in CI, about 1 open in 300); the loser tries again.
    from bunko.stores.sqlite import use_wal

    conn = sqlite3.connect(tmp_path / "new.db", isolation_level=None)
    racing = _LockedAtFirst(conn, failures=3)
    use_wal(racing)  # type: ignore[arg-type]
    assert racing.failures == 0
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()

    other = sqlite3.connect(tmp_path / "other.db", isolation_level=None)
    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):
        use_wal(_LockedAtFirst(other, failures=1, message="disk I/O error"))  # type: ignore[arg-type]
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        use_wal(_LockedAtFirst(other, failures=10**6), wait=0.05)  # type: ignore[arg-type]
    other.close()


def test_file_uses_wal_and_schema_version(db_path: Path, backend: SQLiteBackend) -> None:
    backend.for_tenant("t").ensure_collection("c", INFO)
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    conn.close()


def test_newer_schema_is_refused(db_path: Path) -> None:
    SQLiteBackend(db_path).close()
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(VectorStoreError, match="newer bunko"):
        SQLiteBackend(db_path)


def test_non_finite_vectors_are_refused(backend: SQLiteBackend) -> None:
    store = backend.for_tenant("t")
    store.ensure_collection("c", INFO)
    bad = unit_vectors(1, 1)
    bad[0, 0] = np.nan
    with pytest.raises(VectorStoreError):
        store.write_document("c", make_document("a", ["x"], bad))
    with pytest.raises(VectorStoreError):
        vector_query(store, "c", bad[0], 1)
    assert store.count("c") == 0


def test_open_backend_by_url(tmp_path: Path) -> None:
    backend = open_backend(f"sqlite:///{tmp_path / 'x.db'}")
    assert isinstance(backend, SQLiteBackend) and backend.path == str(tmp_path / "x.db")
    backend.close()
    bare = open_backend(str(tmp_path / "y.db"))
    assert isinstance(bare, SQLiteBackend)
    bare.close()
    with pytest.raises(UnknownProviderError, match=r"available: .*sqlite"):
        open_backend("mongodb://localhost/x")
    with pytest.raises(ConfigError):
        open_backend("sqlite://")


# A vocabulary with a Zipf-like spread: a few characters in almost every chunk ("の", "す"),
# a long tail of rare ones, and English words.
_COMMON = list("のはですまたしにをがる")
_RARE = [*"備蓄地震津波避難所災害飲料非常食家具転倒注意東京大阪川山森海空雨雪風",
         *(chr(0x4E00 + 37 * i) for i in range(400))]
_WORDS = ["water", "storage", "emergency", "the", "river", "quake"]


def _keyword_corpus(rng: np.random.Generator, n: int) -> list[str]:
    texts = []
    for _ in range(n):
        pieces = []
        for _ in range(int(rng.integers(4, 60))):
            r = rng.random()
            if r < 0.6:
                pieces.append(str(rng.choice(_COMMON)))
            elif r < 0.93:
                pieces.append(str(rng.choice(_RARE[: int(rng.integers(1, len(_RARE) + 1))])))
            else:
                pieces.append(" " + str(rng.choice(_WORDS)) + " ")
        texts.append("".join(pieces))
    return texts


@pytest.mark.parametrize(("budget", "segment"), [(1, 32_768), (40, 32_768), (300, 3), (40, 1)])
def test_keyword_search_from_the_postings_equals_fts5_bm25_ranking(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   budget: int, segment: int) -> None:
    """Keyword search ranks from the postings (MaxScore in numpy) exactly as FTS5's bm25() ranks the
    collection's FTS5 table: the same chunks, bit-identical scores, the same order of ties; with
    filters and document restrictions (their chunks from SQL, or from the metadata columns once the
    process holds the collection's vectors), after deletes and inserts, from one essential phrase at
    first to many, and with postings in segments of 1 chunk to all."""
    from bunko.stores.sql import postings

    monkeypatch.setattr(postings, "SEGMENT_ROWS", segment)
    rng = np.random.default_rng(11)
    backend = SQLiteBackend(tmp_path / "kw.db")
    try:
        store = backend.for_tenant("t")
        store.ensure_collection("c", INFO, analyzer="bigram")
        texts = _keyword_corpus(rng, 1200)
        docs = [make_document(f"d{i}.txt", texts[i * 30:(i + 1) * 30], unit_vectors(30, i),
                              metadata={"source": f"d{i}.txt", "kind": "odd" if i % 2 else "even"})
                for i in range(40)]
        for doc in docs:  # a segment each, merged as they come (unless a segment may hold only a few chunks)
            store.write_documents("c", [doc])
        # Queries of many bigram phrases: common ones (です, ます) and rare ones, plus English words.
        queries = ["東京の備蓄はですか", "災害のときは避難所に行きます", "非常食と飲料水を家具の転倒に注意します",
                   "津波が来たら高い山に逃げます water", "emergency storage 地震", "ですます", "川の森と海の空",
                   "雨と雪と風のときはですます東京大阪", "の"]
        # ... and pieces of stored chunks (rare bigrams that do occur), with common endings.
        queries += [texts[int(i)][5:17].replace(" ", "") + "ですか" for i in rng.choice(len(texts), 8, replace=False)]
        plans: set[str] = set()
        found: list[int] = []

        def check(**restriction) -> None:
            for q in queries:
                for k in (1, 3, 10, 50):
                    explain: dict[str, str] = {}
                    got = [(h.chunk_id, h.score) for h in keyword_query(
                        store, "c", q, k, document_ids=restriction.get("document_ids"), filter=restriction.get("flt"),
                        budget=budget, explain=explain, proximity=None)]
                    plans.add(explain["plan"])
                    want = keyword_oracle(store, "c", q, k, document_ids=restriction.get("document_ids"),
                                          filter=restriction.get("flt"))
                    assert got == want, (q, k, restriction)
                    found.append(len(got))

        def every_restriction() -> None:
            check()
            check(flt={"kind": "odd"})
            check(document_ids=[docs[3].id, docs[17].id])
            check(document_ids=[docs[5].id], flt={"chunk_index": {"$lt": 10}})

        every_restriction()
        # Deletes and new writes change the statistics: the counts must follow.
        store.delete_documents([docs[0].id], "c")
        store.write_documents("c", [make_document("late.txt", _keyword_corpus(rng, 30), unit_vectors(30, 99))])
        every_restriction()
        # Once the process holds the collection's vectors (a vector search), a restriction's chunks come
        # from the metadata columns: still exactly FTS5's ranking.
        vector_query(store, "c", unit_vectors(1, 0)[0], 1)
        assert backend.matrices.holds(store.read_collection("c").key)
        every_restriction()
        assert plans == {"postings"}
        assert sum(1 for n in found if n) > len(found) * 0.8, found  # most searches find something
    finally:
        backend.close()


def test_keyword_counts_past_a_byte_are_exact_and_a_chunk_past_the_token_limit_is_refused(tmp_path: Path) -> None:
    """A term 300 times in a chunk scores as FTS5 scores it (the postings hold the count whole); a chunk of
    more than 65,535 keyword tokens is refused with a typed error before anything is written."""
    backend = SQLiteBackend(tmp_path / "big.db")
    try:
        store = backend.for_tenant("t")
        store.ensure_collection("c", INFO, analyzer="bigram")
        texts = ["水" * 300 + "の森", "水の森と空", "森の空", "雨の森", "空"]
        store.write_documents("c", [make_document(f"d{i}.txt", [t], unit_vectors(1, i)) for i, t in enumerate(texts)])
        for query in ("水", "森の空", "水の森"):
            got = [(h.chunk_id, h.score) for h in keyword_query(store, "c", query, 3, proximity=None)]
            assert got == keyword_oracle(store, "c", query, 3) and got, query
        with pytest.raises(VectorStoreError, match="65,535"):
            store.write_documents("c", [make_document("huge.txt", ["火" * 66_000], unit_vectors(1, 9))])
        assert store.count("c") == len(texts)
    finally:
        backend.close()




def test_keyword_text_and_token_totals_stay_in_their_tenant(tmp_path: Path) -> None:
    """Each chunk's analyzed text (``chunks.terms``) and each collection's keyword token total
    (``collections.keyword_tokens``, what BM25 divides by) belong to one tenant: writes, replacements and
    deletes in one tenant's collection change its totals only, never the other tenant's same-named
    collection nor its rankings; each total stays the sum of its own chunks' tokens."""
    from bunko.stores.sql.check import check_store
    from bunko.types import VectorRecord

    path = tmp_path / "t.db"
    backend = SQLiteBackend(path)
    try:
        stores = {t: backend.for_tenant(t) for t in ("acme", "globex")}
        marks = {"acme": "甲", "globex": "乙"}
        for tenant, store in stores.items():
            store.ensure_collection("c", INFO, analyzer="combined_en")
            texts = [[f"水の備蓄 {marks[tenant]}社 第{i}節 water {j}" for j in range(5)] for i in range(3)]
            store.write_documents("c", [make_document(f"d{i}.txt", texts[i], unit_vectors(5, i)) for i in range(3)])
        b_before = [(h.chunk_id, h.score) for h in keyword_query(stores["globex"], "c", "水の備蓄 water", 10)]

        def totals() -> dict[str, tuple[int, int]]:
            with sqlite3.connect(path) as conn:
                return {t: (kept, summed) for t, kept, summed in conn.execute(
                    "SELECT t.name, c.keyword_tokens, (SELECT coalesce(sum(length(k.terms) - "
                    "length(replace(k.terms, ' ', '')) + 1), 0) FROM chunks k WHERE k.tenant_id = c.tenant_id "
                    "AND k.collection_id = c.id AND k.terms <> '') FROM collections c JOIN tenants t "
                    "ON t.id = c.tenant_id")}

        start = totals()
        assert all(kept == summed > 0 for kept, summed in start.values())
        a = stores["acme"]
        a.write_document("c", make_document("d0.txt", ["地震と津波に備える 水 水 水"], unit_vectors(1, 9)))  # replaces
        a.upsert("c", [VectorRecord("水 running waters", {}, "r1", unit_vectors(1, 4)[0].tolist())])
        a.delete_documents([a.list_documents("c")[1].id])
        after = totals()
        assert after["globex"] == start["globex"]
        assert after["acme"][0] == after["acme"][1] != start["acme"][0]
        assert [(h.chunk_id, h.score) for h in keyword_query(stores["globex"], "c", "水の備蓄 water", 10)] == b_before
        for tenant, store in stores.items():
            assert [(h.chunk_id, round(h.score, 9)) for h in keyword_query(store, "c", "水 water", 10)] == [
                (i, round(s, 9)) for i, s in keyword_oracle(store, "c", "水 water", 10)], tenant
        with sqlite3.connect(path) as conn:  # no chunk's text names another tenant
            held = dict(conn.execute("SELECT t.name, group_concat(k.terms, ' ') FROM chunks k JOIN tenants t "
                                     "ON t.id = k.tenant_id GROUP BY t.name").fetchall())
            assert "甲" in held["acme"].split() and "乙" not in held["acme"].split()
            assert "乙" in held["globex"].split() and "甲" not in held["globex"].split()
        assert check_store(backend).ok
    finally:
        backend.close()
