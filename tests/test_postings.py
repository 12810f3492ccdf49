"""The keyword postings table (stores/sql/postings.py) against a plain model: segments written in any
order of rowids (PostgreSQL's concurrent writers make segments overlap), merged in tiers, chunks
deleted across them; and BM25 top-k over postings (search/keyword.py) against a brute-force score."""

from __future__ import annotations

import sqlite3
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from bunko.errors import VectorStoreError
from bunko.search import keyword
from bunko.stores.sql import postings
from bunko.stores.sqlite import MIGRATIONS, SQLITE, apply_migrations

POSTINGS = postings.PostingsTable(SQLITE)


def _database(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    apply_migrations(conn, MIGRATIONS)
    conn.execute("INSERT INTO tenants (id, name) VALUES (1, 'a'), (2, 'b')")
    conn.execute("INSERT INTO collections (id, tenant_id, name, embedding_provider, embedding_model, dimension) "
                 "VALUES (1, 1, 'c', 'p', 'm', 4), (2, 2, 'c', 'p', 'm', 4)")
    return conn


@pytest.mark.parametrize(("seed", "segment_rows", "fanout"), [(1, 32_768, 8), (2, 6, 2), (3, 20, 3), (4, 1, 2)])
def test_segments_in_any_rowid_order_read_back_as_the_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                            seed: int, segment_rows: int, fanout: int) -> None:
    """Batches of chunks whose rowids interleave with earlier batches' (as two PostgreSQL transactions
    draw ids from one sequence in turns) and deletes of chunks anywhere read back exactly as a model
    of the live chunks says, after every step; the other tenant's collection never changes."""
    monkeypatch.setattr(postings, "SEGMENT_ROWS", segment_rows)
    monkeypatch.setattr(postings, "FANOUT", fanout)
    rng = np.random.default_rng(seed)
    conn = _database(tmp_path / "p.db")
    vocabulary = ["水", "の", "水 の", "備蓄", "地震", "津 波", "water", "run"]
    model: dict[int, tuple[Counter[str], int]] = {}
    other = (2, 2)
    POSTINGS.add(conn, other, [(10_000, Counter({"水": 2}), 5)])
    free = list(range(1, 4000))
    overlapped = False
    for step in range(60):
        if model and rng.random() < 0.3:  # delete some live chunks, anywhere
            gone = rng.choice(sorted(model), size=min(len(model), int(rng.integers(1, 6))), replace=False)
            POSTINGS.remove(conn, (1, 1), (int(g) for g in gone))
            for g in gone:
                del model[int(g)]
        else:  # a batch of ids that skips some, which a later batch takes (interleaved, overlapping)
            take = sorted(int(i) for i in rng.choice(free[:40], size=int(rng.integers(1, 8)), replace=False))
            free = [i for i in free if i not in take]
            overlapped = overlapped or any(i > min(take) for i in model)
            rows = []
            for rowid in take:
                counts = Counter({t: int(rng.integers(1, 4)) for t in rng.choice(vocabulary, 3, replace=False)})
                size = int(rng.integers(3, 40))
                rows.append((rowid, counts, size))
                model[rowid] = counts, size
            POSTINGS.add(conn, (1, 1), rows)
        found = POSTINGS.read(conn, (1, 1), vocabulary)
        for term in vocabulary:
            want = sorted((r, c[term], s) for r, (c, s) in model.items() if term in c)
            ids, tf, sizes = found.get(term, (np.zeros(0),) * 3)
            assert list(zip(ids.tolist(), tf.tolist(), sizes.tolist(), strict=True)) == want, (step, term)
        assert {t: c[0].tolist() for t, c in POSTINGS.read(conn, other, vocabulary).items()} == {"水": [10_000]}
        for key, blob in conn.execute("SELECT segment, entries FROM keyword_postings WHERE collection_id = 1"):
            offsets = postings.unpack(key, blob)[0]  # every row in rowid order, merged ones too
            assert (offsets >= key).all() and (np.diff(offsets) > 0).all(), step
    assert overlapped
    if segment_rows < 32_768:
        assert len(POSTINGS.segments(conn, (1, 1))) > 1


def test_chunks_without_terms_are_listed_and_deleted(tmp_path: Path) -> None:
    """A write whose chunks have no terms at all (an empty chunk, a chunk of stop words) still makes a
    segment that lists them, and they can be deleted."""
    conn = _database(tmp_path / "e.db")
    assert POSTINGS.add(conn, (1, 1), [(5, Counter(), 0), (6, Counter(), 0)]) == {}
    assert POSTINGS.segments(conn, (1, 1)) == [(5, 2)]
    POSTINGS.add(conn, (1, 1), [(7, Counter({"水": 1}), 1)])
    POSTINGS.remove(conn, (1, 1), [5, 6])
    assert POSTINGS.segments(conn, (1, 1)) == [(7, 1)]  # the emptied segment was rewritten away
    assert POSTINGS.read(conn, (1, 1), ["水"])["水"][0].tolist() == [7]


@pytest.mark.parametrize(("rows", "densities", "most_tf", "seed"), [
    (500, (0.005, 0.02, 0.1, 0.4, 0.8, 0.02), 5, 7),
    # Many phrases, most chunks holding several (the pruning of candidates phrase by phrase), and counts of
    # 1 with few distinct sizes: many chunks tie.
    (3000, (0.001, 0.003, 0.01, 0.01, 0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 0.05, 0.003), 2, 11),
])
def test_bm25_top_is_the_brute_force_ranking(rows: int, densities: tuple[float, ...], most_tf: int,
                                             seed: int) -> None:
    """The MaxScore top-k over postings (from one essential phrase to all) equals scoring every row on
    every phrase in query order, ties by rowid, whatever the keys' range."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(5, 60, size=rows) if most_tf > 2 else rng.choice([10, 20], size=rows)
    columns, counts = [], []
    for density in densities:
        ids = np.flatnonzero(rng.random(rows) < density).astype(np.int64)
        tf = rng.integers(1, most_tf, size=len(ids)).astype(np.uint16)
        columns.append((ids, tf, sizes[ids].astype(np.uint16)))
        counts.append(len(ids))
    idf = [keyword.bm25_idf(rows, n) for n in counts]
    average = float(sizes.mean())
    norm = keyword.K1 * (1 - keyword.B + keyword.B * sizes / average)
    brute = np.zeros(rows)
    for j, (ids, tf, _) in enumerate(columns):
        f = tf.astype(np.float64)
        brute[ids] += idf[j] * ((f * (keyword.K1 + 1.0)) / (f + norm[ids]))
    held = np.flatnonzero(brute > 0)
    # Keys from 0, keys far from 0, keys spread thinly (numbered by rank inside the ranker), and both above
    # 2**40 (where the ranker's exact pass does not key a phrase's postings by its rank).
    for key_of in (lambda i: i, lambda i: i + 1_000_000, lambda i: i * 100_000 + 3, lambda i: i + 2**41,
                   lambda i: i * 2**33 + 3):
        keyed = [(key_of(ids), tf, size) for ids, tf, size in columns]
        for top_k in (1, 5, 40, 1000):
            want = held[np.lexsort((held, -brute[held]))][:top_k]
            for budget in (1, 10, 100, 10_000):
                got = keyword.bm25_top(keyed, idf, average, top_k, budget)
                assert got[0].tolist() == key_of(want).tolist(), (top_k, budget)
                assert got[1].tolist() == brute[want].tolist()


def test_counts_past_a_byte_are_kept_whole_and_too_many_tokens_are_refused(tmp_path: Path) -> None:
    """Format 2 holds a term count and a token count up to 65,535 each; a chunk with more tokens is refused."""
    conn = _database(tmp_path / "w.db")
    POSTINGS.add(conn, (1, 1), [(3, Counter({"水": 300, "の": 65_535}), 65_535)])
    ids, tf, sizes = POSTINGS.read(conn, (1, 1), ["水", "の"])["の"]
    assert (ids.tolist(), tf.tolist(), sizes.tolist()) == ([3], [65_535], [65_535])
    assert POSTINGS.read(conn, (1, 1), ["水"])["水"][1].tolist() == [300]
    with pytest.raises(VectorStoreError, match="65,535"):
        POSTINGS.add(conn, (1, 1), [(4, Counter({"水": 1}), 65_536)])


def test_deleted_chunks_leave_the_postings_as_a_set_difference_would() -> None:
    """A read leaves out the deleted chunks (``_live``, by binary search) exactly as a set difference does:
    none deleted, some, all, repeated keys, deleted keys beyond either end."""
    rng = np.random.default_rng(24)
    for _ in range(3000):
        ids = np.sort(rng.choice(200, int(rng.integers(0, 60)), replace=bool(rng.integers(2)))).astype(np.int64)
        dead = np.unique(rng.choice(220, int(rng.integers(1, 30)))).astype(np.int64)
        live = postings._live(ids, dead)
        assert np.array_equal(np.ones(len(ids), dtype=bool) if live is None else live, ~np.isin(ids, dead))
