"""The embedded store's IVF lists for its largest collections (bunko.stores.sqlite.ann.Lists): k-means lists
of chunk row ids over the in-memory matrix, the nearest share of them scored exactly."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from bunko.config import Settings, SQLiteSettings
from bunko.filters import as_filter
from bunko.stores import open_backend
from bunko.stores.base import Restriction
from bunko.stores.sqlite import SQLiteBackend, SQLiteVectorStore
from bunko.stores.sqlite.ann import HAVE_CODES, AnnConfig, Identity, Lists, quantise, save
from bunko.stores.sqlite.matrix import Snapshot, score_rows, top_indices

from .ann_data import DIM, clustered, fill, nearest
from .ann_data import lists_in_step as in_step

# Low thresholds so a small collection gets lists (and one a little smaller a graph, with usearch).
LISTS = SQLiteSettings(ann_min_rows=500, ann_lists_min_rows=1000, ann_probe_share=0.2, ann_candidates=50)


def built(backend: SQLiteBackend, store: SQLiteVectorStore) -> Lists:
    """Search once (which schedules the lists) and wait until they have caught up; the collection's lists."""
    nearest(store, np.ones(DIM, dtype=np.float32))
    assert backend.ann is not None and backend.ann.idle(120)
    index = backend.matrices.graphs[store.read_collection("c").key]
    assert isinstance(index, Lists)
    return index


def test_a_large_collection_is_searched_through_its_lists_with_the_exact_scores(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "s.db", settings=LISTS)
    store = backend.for_tenant("acme")
    vectors = clustered(3000, 1)
    fill(store, vectors)
    lists = built(backend, store)
    assert len(lists.centres) == 55 and lists.trained_on == 3000  # about sqrt(3,000) lists
    in_step(backend, store, lists)
    recall = []
    for q in clustered(100, 2):
        found = nearest(store, q)
        assert found.plan == "ivf"
        exact = set((np.argsort(-(vectors @ q))[:10] + 1).tolist())  # chunk keys are 1.. in write order
        recall.append(len(exact & set(found.keys.tolist())) / 10)
        assert np.allclose(found.scores, vectors[found.keys - 1] @ q, atol=1e-5)
        assert list(found.scores) == sorted(found.scores, reverse=True)
    assert np.mean(recall) >= 0.95
    # Every vector finds itself, and a filtered search keeps the exact path.
    for i in range(0, 3000, 97):
        assert int(nearest(store, vectors[i], 1).keys[0]) == i + 1
    row = store.read_collection("c")
    with store.reader(row) as reader:
        assert reader.nearest(vectors[0], 10, Restriction(filter=as_filter({"chunk_index": {"$lt": 5}}))).plan \
            == "exact"
    backend.close()


def test_the_maintainer_catches_the_lists_up_and_builds_them_again_when_worn(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "s.db", settings=LISTS)
    store = backend.for_tenant("acme")
    fill(store, clustered(1500, 6))
    lists = built(backend, store)
    fill(store, clustered(500, 7), prefix="e")
    store.delete_documents([store.list_documents("c")[0].id], "c")
    assert built(backend, store) is lists
    in_step(backend, store, lists)  # the deleted rows left, the new ones came in
    assert len(lists) == 1900 and lists.removed == 100 and lists.trained_on == 1500

    # Past twice the rows the centres were trained on, the lists are built again (the old ones answer
    # meanwhile); so too past a quarter of the live rows removed.
    fill(store, clustered(1200, 8), prefix="f")
    grown = built(backend, store)
    assert grown is not lists and grown.trained_on == 3100 and grown.removed == 0
    in_step(backend, store, grown)
    store.delete_documents([d.id for d in store.list_documents("c")[:8]], "c")
    fresh = built(backend, store)
    assert fresh is not grown and fresh.removed == 0 and len(fresh) == 2300
    in_step(backend, store, fresh)
    found = nearest(store, clustered(1, 14)[0])
    assert found.plan == "ivf" and int(found.keys.min()) > 800
    backend.close()


@pytest.mark.skipif(importlib.util.find_spec("usearch") is None, reason="needs the ann extra (usearch)")
def test_a_collection_that_grows_past_the_threshold_moves_from_its_graph_to_lists(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "s.db", settings=LISTS)
    store = backend.for_tenant("acme")
    vectors = clustered(800, 20)
    fill(store, vectors)
    nearest(store, vectors[0])
    assert backend.ann is not None and backend.ann.idle(120)
    assert nearest(store, vectors[0]).plan == "hnsw"
    folder = backend.ann_folder
    assert folder is not None
    save(backend.matrices.graphs[store.read_collection("c").key], folder)
    assert list(folder.glob("*.usearch"))
    fill(store, clustered(400, 21), prefix="e")
    lists = built(backend, store)  # one index per collection: the lists took the graph's place
    assert len(backend.matrices.graphs) == 1 and len(lists) == 1200
    # The lists are saved at once and the graph's files go: nothing on disk that no search reads.
    assert list(folder.glob("*.ivf")) and not list(folder.glob("*.usearch")) and len(list(folder.glob("*.json"))) == 1
    assert nearest(store, vectors[0]).plan == "ivf" and int(nearest(store, vectors[0], 1).keys[0]) == 1
    backend.close()


def test_the_settings_come_from_the_one_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BUNKO_SQLITE_ANN_LISTS_MIN_ROWS", "4321")
    settings = Settings.resolve(f"sqlite:///{tmp_path / 'a.db'}", sqlite_ann_probe_share=0.1)
    assert (settings.sqlite.ann_lists_min_rows, settings.sqlite.ann_probe_share) == (4321, 0.1)
    backend = open_backend(settings.database_url, settings)
    assert isinstance(backend, SQLiteBackend) and backend.ann is not None
    assert (backend.ann.config.lists_min_rows, backend.ann.config.probe_share) == (4321, 0.1)
    backend.close()


def test_scattered_rows_are_scored_block_by_block_as_one_product() -> None:
    rng = np.random.default_rng(30)
    vectors = clustered(5000, 31)
    for count in (10, 1024, 1025, 3000):
        positions = np.sort(rng.choice(5000, count, replace=False))
        q = clustered(1, 32)[0].astype(np.float64)
        assert np.allclose(score_rows(vectors, positions, q), vectors[positions] @ q, atol=1e-6)


def test_int8_codes_keep_each_row_to_half_a_step() -> None:
    rows = np.vstack([clustered(300, 40), np.zeros((1, DIM), dtype=np.float32)])
    codes, scales = quantise(rows)
    assert codes.dtype == np.int8 and np.abs(codes).max() == 127
    assert np.all(np.abs(codes * scales[:, None] - rows) <= scales[:, None] / 2 + 1e-7)
    assert not codes[-1].any()  # a zero row stays zero


@pytest.mark.skipif(not HAVE_CODES, reason="needs numkong (the ann extra)")
def test_the_probed_lists_are_scored_by_their_codes_and_only_the_best_rows_handed_on() -> None:
    vectors = clustered(20_000, 41)
    n = len(vectors)
    snap = Snapshot(np.arange(1, n + 1, dtype=np.int64), np.zeros(n, dtype=np.int64), vectors, (0, n))
    identity = Identity(1, 1, "c", "now", DIM)
    compact, plain = Lists(identity), Lists(identity, compact=False)
    for lists in (compact, plain):
        for start in range(0, n, 7000):
            lists.add(snap, start, min(n, start + 7000))
    assert compact.compact and not plain.compact and not len(plain.codes)
    assert np.array_equal(compact.keys, plain.keys)  # the same lists, with and without codes
    config = AnnConfig(probe_share=0.1)
    same = 0
    for q in clustered(100, 42):
        mine, _ = compact.candidates(snap, q, 50, 1.0, config)
        every, _ = plain.candidates(snap, q, 50, 1.0, config)
        # The codes pick the best 50 distinct rows of the probed lists (a row in two probed lists is handed
        # on once); ranked by the exact vectors they give the exact top 10.
        assert len(mine) == len(set(mine.tolist())) == 50 < len(every)
        assert set(mine.tolist()) <= set(every.tolist())
        best_mine = set(mine[top_indices(vectors[mine] @ q, 10)].tolist())
        best_every = set(every[top_indices(vectors[every] @ q, 10)].tolist())
        same += best_mine == best_every
    assert same >= 98


def test_rows_far_from_every_centre_are_in_their_three_nearest_lists_and_handed_on_once(tmp_path: Path) -> None:
    vectors = clustered(6000, 43)
    n = len(vectors)
    snap = Snapshot(np.arange(1, n + 1, dtype=np.int64), np.zeros(n, dtype=np.int64), vectors, (0, n))
    for compact in (False, True) if HAVE_CODES else (False,):
        lists = Lists(Identity(1, 1, "c", "now", DIM), compact=compact)
        for start in range(0, n, 2500):  # in steps, as the maintainer adds rows
            lists.add(snap, start, min(n, start + 2500))
        scores = vectors @ lists.centres.T
        order = np.argsort(-scores, axis=1)
        far = scores[np.arange(n), order[:, 0]] < lists.far_below
        assert 0.005 * n < far.sum() < 0.05 * n
        listed = {j: set(lists.keys[lists.starts[j]:lists.starts[j + 1]].tolist()) for j in range(len(lists.centres))}
        for row in range(n):  # every row in its nearest list; a far one in its three nearest, and no other
            homes = [j for j, keys in listed.items() if row + 1 in keys]
            assert sorted(homes) == sorted(order[row, :3].tolist() if far[row] else order[row, :1].tolist())
        assert len(lists.keys) == n + 2 * far.sum() == len(lists) + lists.extra
        assert len(lists.starts) == len(lists.centres) + 1
        if compact:  # a row's codes are the same in each of its lists
            assert np.array_equal(lists.codes, quantise(vectors[lists.keys - 1])[0])
        for q in clustered(20, 44):  # every probed list's rows handed on, each row once
            found, _ = lists.candidates(snap, q, 6000, 1.0, AnnConfig(probe_share=0.3))
            picked = np.argsort(-(lists.centres @ q))[:math.ceil(0.3 * len(lists.centres))]
            assert sorted(found.tolist()) == sorted({k - 1 for j in picked for k in listed[int(j)]})
            found, _ = lists.candidates(snap, q, 50, 1.0, AnnConfig(probe_share=0.3))
            assert len(set(found.tolist())) == len(found)
    # Saved and read back; lists saved with a spill list (or before it) are built again.
    lists.write(tmp_path / "l.ivf")
    again = Lists(lists.identity, compact=False)
    assert again.read(tmp_path / "l.ivf", {}) and again.far_below == lists.far_below and len(again) == n
    assert np.array_equal(again.starts, lists.starts) and np.array_equal(again.keys, lists.keys)
    with (tmp_path / "spill.ivf").open("wb") as f:
        np.savez(f, centres=lists.centres, keys=lists.keys, starts=np.append(lists.starts, lists.starts[-1]),
                 spill_below=np.array([lists.far_below]))
    assert not Lists(lists.identity).read(tmp_path / "spill.ivf", {})
