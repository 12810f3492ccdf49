"""A PostgreSQL hybrid search in one transaction: the vector leg's index search is sent to the server before the
keyword leg runs and answered after it (``PostgresReader.nearest_later``): on a second pooled connection when
one is idle (``PostgresBackend.send_piped``), else in psycopg's pipeline mode on the transaction's own. The
server walks the graph while this process ranks the keyword leg; the hits are those of the legs one after the
other, only the tenant's, a leg's failure comes back typed and leaves no connection in a transaction, and a
second connection the server dropped is not an error."""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from bunko.errors import BunkoError
from bunko.search import DEFAULT_FUSION, HYBRID_DEPTH
from bunko.search.session import Legs, collect_legs, fuse_and_read, keyword_part, vector_leg, vector_leg_later
from bunko.stores.postgres import PostgresBackend, PostgresSettings
from bunko.testing.hooks import counting
from bunko.testing.store_data import make_document

from .ann_data import INFO, clustered
from .pg import psycopg

pytestmark = pytest.mark.skipif(psycopg is None, reason="the postgres extra is not installed")

ROWS, PER_DOCUMENT = 3_000, 100
WORDS = ["water", "stock", "shelter", "family", "battery", "torch", "radio", "map"]


def _text(n: int) -> str:
    return f"{WORDS[n % 8]} {WORDS[(n // 8) % 8]} note {n}"


def _fill(store, vectors: np.ndarray) -> None:
    store.ensure_collection("c", INFO)
    store.write_documents("c", [
        make_document(f"d{i}", [_text(i * PER_DOCUMENT + j) for j in range(PER_DOCUMENT)],
                      vectors[i * PER_DOCUMENT:(i + 1) * PER_DOCUMENT], metadata={"source": f"d{i}"})
        for i in range(len(vectors) // PER_DOCUMENT)])


@pytest.fixture
def indexed(pg_url: str) -> Iterator[tuple[PostgresBackend, object, np.ndarray]]:
    """A backend whose tenant ``acme`` has a collection of 3,000 chunks under an HNSW index (and tenant
    ``bravo`` the same words with other vectors), with two pooled connections open from the start."""
    backend = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=1_000, pool_min=2))  # two idle
    try:
        vectors = clustered(ROWS, 21)
        store = backend.for_tenant("acme")
        _fill(store, vectors)
        _fill(backend.for_tenant("bravo"), clustered(ROWS, 22))
        yield backend, store, vectors
    finally:
        backend.close()


def _legs(query: str, q: np.ndarray) -> Legs:
    return Legs(query, q, True, 10 * HYBRID_DEPTH, 10, fusion=DEFAULT_FUSION)


def _seen(collected) -> list[tuple]:
    return [(h.chunk_id, round(h.score, 12), h.metadata.get("legs")) for h in collected.hits]


def _waiting_for_a_lock(pg_url: str, query: str) -> bool:
    """Whether a session of this database comes to wait for a lock in a statement like ``query`` (within 60 s)."""
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for _ in range(600):
            if conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                            "AND wait_event_type = 'Lock' AND query LIKE %s", (query,)).fetchone()[0]:
                return True
            time.sleep(0.1)
    return False


def test_the_vector_leg_is_sent_and_answered_later_while_the_server_works(pg_url: str, indexed) -> None:
    """With the chunks table locked by another session, the vector leg's index search waits on the server:
    ``vector_leg_later`` still returns at once (the statement is sent, not waited for), and once the lock is
    gone it answers what the leg run at once answers. Run at once, the leg would wait for the lock (here: fail
    when the reader's lock_timeout runs out)."""
    _, store, _ = indexed
    queries = clustered(3, 23)
    row = store.read_collection("c")
    with store.reader(row) as reader:
        expected = vector_leg(reader, _legs("water", queries[0]))  # also learns the collection's index
    assert expected.plan == "hnsw" and len(expected) == 10 * HYBRID_DEPTH
    with psycopg.connect(pg_url) as locker:  # the owner login
        locker.execute("LOCK TABLE bunko.chunks IN ACCESS EXCLUSIVE MODE")
        with store.reader(row) as reader:
            reader._conn.execute("SELECT set_config('lock_timeout', '60s', true)")
            answer = vector_leg_later(reader, _legs("water", queries[0]))
            try:
                # Sent: the server is at it (waiting for the lock) while we are here.
                assert _waiting_for_a_lock(pg_url, "WITH candidates AS MATERIALIZED%")
            finally:
                locker.rollback()  # the lock goes
                later = answer()
    assert later.plan == "hnsw"
    assert later.keys.tolist() == expected.keys.tolist() and np.allclose(later.scores, expected.scores)


def test_a_hybrid_search_runs_its_legs_in_one_transaction_with_the_hits_of_the_legs_in_turn(indexed) -> None:
    """``collect_legs`` in one transaction: one read transaction for both legs, the vector leg's index search
    pending on the server while the keyword leg runs; the same hits, scores and per-leg ranks as the legs one
    after the other, and as the legs in two transactions at the same time; only the tenant's chunks."""
    backend, store, _ = indexed
    row = store.read_collection("c")
    for i, q in enumerate(clustered(6, 24)):
        legs = _legs(f"{WORDS[i]} {WORDS[i + 1]}", q)
        with counting(backend) as counts:
            pipelined = collect_legs(store, row, legs, concurrent=False)
        assert counts.delta["read_transactions"] == 1, counts.delta
        assert pipelined.plans == {"vector": "hnsw", "keyword": pipelined.plans["keyword"]}
        with store.reader(row) as reader:  # the legs in turn: each answered before the next starts
            ranked = [("vector", vector_leg(reader, legs))]
            found, title_weight = keyword_part(reader, legs)
            in_turn = fuse_and_read(reader, legs, ranked + found, title_weight)
        threads = collect_legs(store, row, legs, concurrent=True)
        assert pipelined.hits and _seen(pipelined) == _seen(in_turn) == _seen(threads)
        assert all(h.content.split()[-1].isdigit() for h in pipelined.hits)
        assert {h.document_id for h in pipelined.hits} <= {d.id for d in store.list_documents("c")}


def _open_transactions(pg_url: str) -> int:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        return int(conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                                "AND state LIKE 'idle in transaction%'").fetchone()[0])


@pytest.mark.parametrize("broken", ["keyword", "vector"])
def test_a_failing_leg_with_the_vector_leg_pending_fails_typed_and_leaks_nothing(pg_url: str, indexed,
                                                                                broken: str) -> None:
    """The keyword leg fails (its postings unreadable) while the vector leg's statement is pending, or the
    vector leg's statement fails while the keyword leg runs: the search fails typed, every time; no
    connection is left in a transaction or in pipeline mode, and the other leg alone still answers."""
    backend, store, _ = indexed
    q = clustered(1, 25)[0]
    row = store.read_collection("c")
    collect_legs(store, row, _legs("water stock", q), concurrent=False)  # index known, segments held
    with psycopg.connect(pg_url, autocommit=True) as owner:
        if broken == "keyword":
            owner.execute("REVOKE SELECT ON bunko.keyword_postings FROM bunko_app")
        else:
            columns = [r[0] for r in owner.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = 'bunko' "
                "AND table_name = 'chunks' AND column_name <> 'embedding'")]
            owner.execute("REVOKE SELECT ON bunko.chunks FROM bunko_app")
            owner.execute(f"GRANT SELECT ({', '.join(columns)}) ON bunko.chunks TO bunko_app")
    backend.postings.index.clear()  # type: ignore[attr-defined]
    backend.postings.cache.clear()  # type: ignore[attr-defined]
    try:
        for i in range(backend.settings.pool_max + 2):  # more than the pool's connections
            with pytest.raises(BunkoError) as raised:
                collect_legs(store, store.read_collection("c"), _legs(f"water {WORDS[i % 8]}", q), concurrent=False)
            assert "permission" in raised.value.message, raised.value.message
            assert _open_transactions(pg_url) == 0
        for _ in range(backend.settings.pool_max + 2):  # the connections given back work, out of pipeline mode
            with store.reader(row) as reader:
                assert reader._conn.pgconn.pipeline_status == 0
                if broken == "keyword":
                    assert len(vector_leg(reader, _legs("water", q))) == 10 * HYBRID_DEPTH
                else:
                    assert reader.texts(np.asarray([1, 2], dtype=np.int64))
    finally:
        with psycopg.connect(pg_url, autocommit=True) as owner:
            owner.execute("GRANT SELECT ON bunko.keyword_postings, bunko.chunks TO bunko_app")


def test_the_store_runs_its_legs_in_one_transaction_only_over_a_known_hnsw_index(indexed, pg_url: str) -> None:
    """As the store prefers (``concurrent=None``): a collection below the index threshold, or one whose index
    this process has not met yet, or a restricted search, runs its legs at once (two read transactions); an
    unrestricted search over a known HNSW index runs them in one, the vector leg pipelined; a collection
    past ``ivfflat_min_rows`` (whose index becomes IVFFlat) goes back to the legs at once."""
    from bunko.stores.base import Restriction

    backend, store, _ = indexed
    q = clustered(1, 26)[0]
    row = store.read_collection("c")
    assert store.legs_at_once(row, False)  # the index not met yet in this process

    def transactions(legs: Legs) -> int:
        with counting(backend) as counts:
            collected = collect_legs(store, row, legs)
        assert collected.hits
        return int(counts.delta["read_transactions"])

    assert transactions(_legs("water stock", q)) == 2  # at once; the vector leg meets the HNSW index
    assert not store.legs_at_once(row, False)
    assert transactions(_legs("water stock", q)) == 1
    restricted = Legs("water stock", q, True, 10 * HYBRID_DEPTH, 10, fusion=DEFAULT_FUSION,
                      restriction=Restriction.of(filter={"source": {"$in": ["d1", "d2"]}}))
    assert store.legs_at_once(row, True) and transactions(restricted) == 2
    small = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=10_000))
    try:
        assert small.for_tenant("acme").legs_at_once(row, False)  # below its threshold: no index search
    finally:
        small.close()
    grown = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=1_000, ivfflat_min_rows=2_000))
    try:
        grown.indexed.add(row.key)  # as if this process had met the collection's HNSW index
        grown.index_kinds[row.key] = ("halfvec", 0)
        assert grown.for_tenant("acme").legs_at_once(row, False)  # its index becomes IVFFlat
    finally:
        grown.close()


def _in_turn(store, row, legs: Legs) -> list[tuple]:
    with store.reader(row) as reader:  # the legs in turn: each answered before the next starts
        ranked = [("vector", vector_leg(reader, legs))]
        found, title_weight = keyword_part(reader, legs)
        return _seen(fuse_and_read(reader, legs, ranked + found, title_weight))


def test_the_vector_leg_goes_on_a_second_connection_when_one_is_idle(indexed, pg_url: str) -> None:
    """With an idle connection in the pool the vector leg is sent on it (one ``side_reads``) beside the one read
    transaction; with a pool of one connection, which the transaction holds, it goes in pipeline mode on that
    connection instead, without waiting for the pool. Both give the hits of the legs in turn."""
    backend, store, _ = indexed
    row = store.read_collection("c")
    collect_legs(store, row, _legs("water", clustered(1, 27)[0]), concurrent=False)  # learns the index
    one = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=1_000, pool_min=1, pool_max=1))
    try:
        alone = one.for_tenant("acme")
        alone_row = alone.read_collection("c")
        collect_legs(alone, alone_row, _legs("water", clustered(1, 27)[0]), concurrent=False)  # learns the index
        for i, q in enumerate(clustered(4, 28)):
            legs = _legs(f"{WORDS[i]} {WORDS[i + 2]}", q)
            with counting(backend) as counts:
                aside = collect_legs(store, row, legs, concurrent=False)
            assert counts.delta["read_transactions"] == 1 and counts.delta.get("side_reads") == 1, counts.delta
            with counting(one) as counts:
                piped = collect_legs(alone, alone_row, legs, concurrent=False)
            assert counts.delta["read_transactions"] == 1 and not counts.delta.get("side_reads"), counts.delta
            assert aside.plans["vector"] == piped.plans["vector"] == "hnsw"
            assert aside.hits and _seen(aside) == _seen(piped) == _in_turn(store, row, legs)
    finally:
        one.close()


def test_the_vector_leg_on_a_second_connection_sees_only_the_tenants_chunks(indexed, pg_url: str) -> None:
    """The query is one of tenant ``bravo``'s own vectors, its nearest chunk in the whole table: tenant
    ``acme``'s vector leg sent on a second connection ranks only acme's chunks, and its hybrid hits are acme's."""
    backend, store, _ = indexed
    bravo = clustered(ROWS, 22)
    with psycopg.connect(pg_url, autocommit=True) as owner:
        mine = {int(r[0]) for r in owner.execute(
            "SELECT c.id FROM bunko.chunks c JOIN bunko.tenants t ON t.id = c.tenant_id WHERE t.name = 'acme'")}
    row = store.read_collection("c")
    collect_legs(store, row, _legs("water", bravo[0]), concurrent=False)  # learns the index
    for n in (0, 7, 1234):
        legs = _legs("water stock", bravo[n])
        with counting(backend) as counts, store.reader(row) as reader:
            ranked = vector_leg_later(reader, legs)()
        assert counts.delta.get("side_reads") == 1, counts.delta
        assert len(ranked) == 10 * HYBRID_DEPTH and set(ranked.keys.tolist()) <= mine
        collected = collect_legs(store, row, legs, concurrent=False)
        assert collected.hits and {h.document_id for h in collected.hits} <= {d.id for d in store.list_documents("c")}


def test_a_second_connection_the_server_dropped_is_not_an_error(indexed, pg_url: str) -> None:
    """The idle connection the vector leg takes is one the server dropped (a restart, an idle timeout) while the
    search's transaction holds the other: the leg asks again on the transaction's connection and ranks as
    before; the searches after give the same hits as before, and no connection is left in a transaction."""
    backend, store, _ = indexed
    row = store.read_collection("c")
    queries = [(_legs(f"{WORDS[i]} radio", q)) for i, q in enumerate(clustered(3, 29))]
    before = [_seen(collect_legs(store, row, legs, concurrent=False)) for legs in queries]
    with store.reader(row) as reader:
        expected = vector_leg(reader, queries[0])
    with store.reader(row) as reader:
        held = reader._conn.info.backend_pid
        with psycopg.connect(pg_url, autocommit=True) as owner:
            others = "usename = current_user AND datname = current_database() AND pid <> pg_backend_pid() AND pid <> %s"
            dropped = owner.execute(f"SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE {others}",
                                    (held,)).fetchone()[0]
            for _ in range(600):  # until the server has closed them
                if not owner.execute(f"SELECT count(*) FROM pg_stat_activity WHERE {others}", (held,)).fetchone()[0]:
                    break
                time.sleep(0.1)
        assert dropped >= 1
        with counting(backend) as counts:
            again = vector_leg_later(reader, queries[0])()
        assert counts.delta.get("side_reads") == 1, counts.delta  # it took the dropped connection
        assert again.keys.tolist() == expected.keys.tolist() and np.allclose(again.scores, expected.scores)
    for _ in range(2):
        assert [_seen(collect_legs(store, row, legs, concurrent=False)) for legs in queries] == before
    assert _open_transactions(pg_url) == 0
