"""The legs of a hybrid search run at the same time (``bunko.search.session.collect_legs``), on both stores:
the same hits as one after the other, one transaction per leg through the same tenant-bound store (no other
tenant's chunk reaches either leg), and a leg's failure comes back typed."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from bunko import Bunko
from bunko.errors import BunkoError, RetrievalError
from bunko.search import DEFAULT_FUSION, HYBRID_DEPTH, Retriever
from bunko.search.keyword import keyword_leg
from bunko.search.session import Legs, collect_legs
from bunko.stores.base import Restriction
from bunko.testing.hooks import counting
from bunko.types import Document

TEXTS = [
    "非常用の水は一人一日3リットルを目安に備蓄します。",
    "家具の転倒を防ぐために金具で固定します。",
    "避難所の場所を家族で確認しておきます。",
    "Keep three days of water for each person in clean containers.",
    "Rotate the stored water every six months.",
    "地震のときは火の始末をしてから避難します。",
    "懐中電灯と予備の電池を用意しておきます。",
    "A first aid kit belongs in every emergency bag.",
]
QUERIES = ["水の備蓄", "emergency water for each person", "避難所 家族", "電池"]


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path, embedder: object) -> Iterator[Bunko]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else f"sqlite:///{tmp_path / 'l.db'}"
    with Bunko(url, embedder=embedder) as engine:
        yield engine


def _fill(engine: Bunko, tenant: str, texts: list[str], tag: str) -> None:
    scope = engine.tenant(tenant)
    for i, text in enumerate(texts):
        scope.add_document(Document(content=text, metadata={"source": f"{tag}{i}.txt", "kind": i % 2, "tag": tag}))


def _legs(engine: Bunko, store: object, query: str, restriction: Restriction | None = None) -> Legs:
    vector = asyncio.run(Retriever(engine.embedder, store, "default").query_vector(query))
    return Legs(query, vector, True, 5 * HYBRID_DEPTH, 5, restriction, None, DEFAULT_FUSION)


def test_concurrent_legs_return_what_sequential_legs_return_one_transaction_per_leg(engine: Bunko) -> None:
    _fill(engine, "acme", TEXTS, "a")
    store = engine.tenant("acme").store
    row = store.read_collection("default")
    for query in QUERIES:
        for restriction in (None, Restriction.of(None, {"kind": 0})):
            legs = _legs(engine, store, query, restriction)
            sequential = collect_legs(store, row, legs, concurrent=False)
            with counting(engine.backend) as counts:
                concurrent = collect_legs(store, row, legs, concurrent=True)
            assert sequential.hits, query
            assert [(h.chunk_id, h.score, h.metadata.get("legs")) for h in concurrent.hits] == \
                [(h.chunk_id, h.score, h.metadata.get("legs")) for h in sequential.hits], query
            assert concurrent.plans == sequential.plans and concurrent.ranked == sequential.ranked
            # One read transaction per leg; the leg that finished second read the hits in its own.
            assert counts["read_transactions"] == 2, counts.delta


def test_sqlite_ranks_the_vector_leg_in_a_worker_thread_while_the_keyword_leg_runs(
        tmp_path: Path, embedder: object, monkeypatch: pytest.MonkeyPatch) -> None:
    """SQLite's hybrid search as the store prefers: both legs and the hits in one read transaction, the vector
    leg ranked from memory on a worker thread while this one runs the keyword leg (the matrix brought up to
    date first, on this thread, so the connection never changes thread): the same hits as in turn, with and
    without a restriction, and no other tenant's chunk."""
    from bunko.stores.sqlite.store import SQLiteReader

    ranked_on: list[str] = []
    unrestricted = SQLiteReader._unrestricted

    def watched(self: SQLiteReader, *args: object) -> object:
        ranked_on.append(threading.current_thread().name)
        return unrestricted(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(SQLiteReader, "_unrestricted", watched)
    with Bunko(f"sqlite:///{tmp_path / 'o.db'}", embedder=embedder) as engine:
        _fill(engine, "acme", TEXTS, "a")
        _fill(engine, "other", [t + " " + t for t in TEXTS], "o")
        store = engine.tenant("acme").store
        row = store.read_collection("default")
        for query in QUERIES:
            for restriction in (None, Restriction.of(None, {"kind": 0})):
                legs = _legs(engine, store, query, restriction)
                ranked_on.clear()
                in_turn = collect_legs(store, row, legs, concurrent=False)
                assert ranked_on == ([] if restriction else [threading.current_thread().name])
                ranked_on.clear()
                with counting(engine.backend) as counts:
                    overlapped = collect_legs(store, row, legs)
                assert in_turn.hits and {h.metadata["tag"] for h in overlapped.hits} == {"a"}, query
                assert [(h.chunk_id, h.score, h.metadata.get("legs")) for h in overlapped.hits] == \
                    [(h.chunk_id, h.score, h.metadata.get("legs")) for h in in_turn.hits], query
                assert overlapped.plans == in_turn.plans and overlapped.ranked == in_turn.ranked
                assert counts["read_transactions"] == 1, counts.delta
                # Unrestricted: ranked on a worker; restricted: the mask reads SQL, so all of it here.
                if restriction is None:
                    assert len(ranked_on) == 1 and ranked_on[0].startswith("bunko-leg"), ranked_on
                else:
                    assert ranked_on == [], ranked_on


def test_a_hybrid_search_with_concurrent_legs_sees_only_its_tenant(engine: Bunko) -> None:
    """Tenant B's collection of the same name holds the same words (more of them); tenant A's hybrid search,
    each leg in its own transaction, ranks and returns A's chunks only, and B's likewise."""
    _fill(engine, "tenant-a", TEXTS[:4], "a")
    _fill(engine, "tenant-b", [t + " " + t for t in TEXTS] * 2, "b")
    for tenant, tag, count in (("tenant-a", "a", 4), ("tenant-b", "b", 16)):
        store = engine.tenant(tenant).store
        row = store.read_collection("default")
        for query in QUERIES:
            legs = _legs(engine, store, query)
            legs.top_k = legs.depth = 20
            collected = collect_legs(store, row, legs, concurrent=True)
            assert collected.hits and {h.metadata["tag"] for h in collected.hits} == {tag}, (tenant, query)
            assert len(collected.hits) <= count and collected.ranked == len(collected.hits)
        hits = engine.tenant(tenant).search("水の備蓄", mode="hybrid", top_k=20).results
        assert {h.metadata["tag"] for h in hits} == {tag} and len(hits) == count


def _break_keyword_leg(url: str) -> None:
    """Take the keyword postings away from the application (a damaged or half-restored database)."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute("DROP TABLE keyword_postings")
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:  # the owner login, not the application role
            conn.execute("REVOKE SELECT ON bunko.keyword_postings FROM bunko_app")


def test_a_failing_leg_fails_the_hybrid_search_typed_and_keeps_the_store_usable(
        request: pytest.FixtureRequest, tmp_path: Path, embedder: object) -> None:
    for kind in ("sqlite", "postgresql"):
        url = request.getfixturevalue("pg_url") if kind == "postgresql" else f"sqlite:///{tmp_path / 'f.db'}"
        with Bunko(url, embedder=embedder) as engine:
            _fill(engine, "acme", TEXTS, "a")
            acme = engine.tenant("acme")
            assert acme.search("水の備蓄", mode="hybrid").results
            _break_keyword_leg(url)
            # As a process that has not searched yet: nothing of the postings in memory (the segments the
            # search above loaded would answer the keyword leg without the table).
            engine.backend.postings.index.clear()  # type: ignore[attr-defined]
            engine.backend.postings.cache.clear()  # type: ignore[attr-defined]
            retriever = Retriever(engine.embedder, acme.store, "default")
            for _ in range(12):  # more than the pool's connections: none is kept by a failed search
                with pytest.raises(RetrievalError) as caught:
                    asyncio.run(retriever.run("水の備蓄 water", top_k=3, mode="hybrid"))
                assert isinstance(caught.value.__cause__, BunkoError), kind
                assert "keyword_postings" in caught.value.message or "permission" in caught.value.message
            legs = _legs(engine, acme.store, "水の備蓄 water")
            for concurrent in (True, False):  # the leg's own error, whichever way the legs run
                with pytest.raises(BunkoError) as raised:
                    collect_legs(acme.store, acme.store.read_collection("default"), legs, concurrent=concurrent)
                assert not isinstance(raised.value, RetrievalError), kind
            # The vector leg alone still answers, on the connections the failed searches gave back.
            for _ in range(12):
                assert asyncio.run(retriever.run("水の備蓄", top_k=3, mode="vector")).hits


def _break_vector_leg(url: str) -> None:
    """Take the chunks' vectors away from the application and nothing else: the keyword leg and the
    hydration of hits still read every other column of the chunks."""
    if url.startswith("sqlite"):
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            conn.execute("ALTER TABLE chunks RENAME COLUMN embedding TO embedding_gone")
    else:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:  # the owner login, not the application role
            columns = [r[0] for r in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'bunko' "
                "AND table_name = 'chunks' AND column_name <> 'embedding'")]
            conn.execute("REVOKE SELECT ON bunko.chunks FROM bunko_app")
            conn.execute(f"GRANT SELECT ({', '.join(columns)}) ON bunko.chunks TO bunko_app")


def _open_transactions(url: str) -> int:
    """Sessions of the application role inside a transaction now (PostgreSQL; 0 for SQLite)."""
    if url.startswith("sqlite"):
        return 0
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return int(conn.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = 'bunko_app' "
                                "AND state LIKE 'idle in transaction%'").fetchone()[0])


def test_a_failing_vector_leg_fails_the_hybrid_search_typed_and_leaks_nothing(
        request: pytest.FixtureRequest, tmp_path: Path, embedder: object) -> None:
    """The vector leg fails (its vectors unreadable) while the keyword leg succeeds: the search fails typed,
    each time, whether the keyword leg finished first or second; every connection is back and none is left
    in a transaction, and the keyword leg alone still answers."""
    for kind in ("sqlite", "postgresql"):
        url = request.getfixturevalue("pg_url") if kind == "postgresql" else f"sqlite:///{tmp_path / 'v.db'}"
        with Bunko(url, embedder=embedder) as engine:
            _fill(engine, "acme", TEXTS, "a")
            assert engine.tenant("acme").search("水の備蓄", mode="hybrid").results
        _break_vector_leg(url)
        with Bunko(url, embedder=embedder) as engine:  # a new process: no vectors held in memory yet
            acme = engine.tenant("acme")
            retriever = Retriever(engine.embedder, acme.store, "default")
            for _ in range(12):  # more than the pool's connections: none is kept by a failed search
                with pytest.raises(RetrievalError) as caught:
                    asyncio.run(retriever.run("水の備蓄 water", top_k=3, mode="hybrid"))
                assert isinstance(caught.value.__cause__, BunkoError), kind
                assert "embedding" in caught.value.message or "permission" in caught.value.message, kind
            legs = _legs(engine, acme.store, "水の備蓄 water")
            for concurrent in (True, False):  # the leg's own error, whichever way the legs run
                with pytest.raises(BunkoError) as raised:
                    collect_legs(acme.store, acme.store.read_collection("default"), legs, concurrent=concurrent)
                assert not isinstance(raised.value, RetrievalError), kind
            assert _open_transactions(url) == 0, kind
            # The keyword leg alone still answers, on the connections the failed searches gave back.
            for _ in range(12):
                assert asyncio.run(retriever.run("水の備蓄", top_k=3, mode="keyword")).hits


def _fields(hits: list) -> list[tuple]:
    return [(h.chunk_id, h.document_id, h.source, h.content, h.score, h.chunk_index, h.metadata) for h in hits]


def test_the_keyword_candidates_are_read_once_and_hydrate_the_hits_as_a_read_would(engine: Bunko) -> None:
    """The chunks the keyword leg reads for its re-ranking are read whole and kept: the hits among them come
    from those rows, the same as read afresh, in the reader that read them and in another one (the other leg
    of a hybrid search, ``read``); on SQLite no statement reads them again."""
    _fill(engine, "acme", TEXTS, "a")
    _fill(engine, "other", TEXTS, "o")  # another tenant's copy of the same chunks: never among the rows
    store = engine.tenant("acme").store
    row = store.read_collection("default")
    for query in QUERIES:
        with store.reader(row) as plain:
            ranked = keyword_leg(plain, query, 5, proximity=None)  # BM25 alone: no text read
            assert not plain.rows_read()
            expected = _fields(plain.hits(ranked))
        assert expected and {h[6]["tag"] for h in expected} == {"a"}
        with store.reader(row) as reader:
            keyword_leg(reader, query, 5)  # re-ranked: reads its candidates whole
            rows = reader.rows_read()
            assert set(ranked.keys.tolist()) <= set(rows), query
            statements: list[str] = []
            if engine.backend.scheme == "sqlite":
                reader._conn.set_trace_callback(statements.append)
            assert _fields(reader.hits(ranked)) == expected, query
            assert not [s for s in statements if "FROM chunks" in s], statements
            with_vectors: dict = {}  # the rows hold no vectors: asked for, the hits are read
            assert _fields(reader.hits(ranked, vectors=with_vectors)) == expected
            assert set(with_vectors) == {h[0] for h in expected}
        with store.reader(row) as other:
            assert _fields(other.hits(ranked, read=rows)) == expected, query
