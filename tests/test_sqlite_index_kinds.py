"""What every approximate index of the embedded store must keep, for each kind: the HNSW graph
(bunko.stores.sqlite.ann, usearch) and the IVF lists of the largest collections. Writes and deletes are
seen by the next search, an index is saved beside the file and brought up to date when loaded, and each
tenant's collection has its own index, erased with it. What only one kind does is in test_sqlite_ann.py
and test_sqlite_ivf.py."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bunko.config import SQLiteSettings
from bunko.search import vector_query
from bunko.stores.sqlite import SQLiteBackend, SQLiteVectorStore
from bunko.stores.sqlite.ann import Lists
from bunko.testing.store_data import make_document

from .ann_data import DIM, clustered, fill, lists_in_step, nearest


def _graph_keys(index: Any) -> np.ndarray:
    return np.asarray(index.index.keys, dtype=np.int64)


def _lists_keys(index: Any) -> np.ndarray:
    assert isinstance(index, Lists)
    return index.keys


def _graph_in_step(backend: SQLiteBackend, store: SQLiteVectorStore, graph: Any) -> None:
    """The graph holds exactly the live rows."""
    snap = backend.matrices.snapshot(store.read_collection("c").key)
    assert snap is not None
    assert sorted(_graph_keys(graph).tolist()) == snap.rowids.tolist()


@dataclass(frozen=True)
class Kind:
    plan: str  # the plan name a search through this index reports
    settings: SQLiteSettings  # low thresholds, so a collection of 1,200 chunks gets this kind
    extensions: tuple[str, str]  # its two files beside the database, sorted
    keys: Callable[[Any], np.ndarray]  # the chunk keys an index holds
    in_step: Callable[[SQLiteBackend, SQLiteVectorStore, Any], None]


GRAPH = Kind("hnsw", SQLiteSettings(ann_min_rows=500, ann_candidates=50), ("json", "usearch"), _graph_keys,
             _graph_in_step)
LISTS = Kind("ivf", SQLiteSettings(ann_min_rows=500, ann_lists_min_rows=1000, ann_probe_share=0.2, ann_candidates=50),
             ("ivf", "ivf.json"), _lists_keys, lists_in_step)

KINDS = [pytest.param(GRAPH, id="graph", marks=pytest.mark.skipif(importlib.util.find_spec("usearch") is None,
                                                                  reason="needs the ann extra (usearch)")),
         pytest.param(LISTS, id="lists")]


def built(backend: SQLiteBackend, store: SQLiteVectorStore, kind: Kind) -> Any:
    """Search once (which schedules the index), wait until it has caught up; the collection's index."""
    nearest(store, np.ones(DIM, dtype=np.float32))
    assert backend.ann is not None and backend.ann.idle(120)
    index = backend.matrices.graphs[store.read_collection("c").key]
    assert isinstance(index, Lists) == (kind is LISTS)
    return index


def files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("kind", KINDS)
def test_writes_and_deletes_are_seen_by_the_next_search(tmp_path: Path, kind: Kind) -> None:
    backend = SQLiteBackend(tmp_path / "s.db", settings=kind.settings)
    store = backend.for_tenant("acme")
    old = clustered(2000, 4)
    fill(store, old)
    index = built(backend, store, kind)
    kind.in_step(backend, store, index)
    assert backend.ann is not None
    backend.ann.close()  # the index stays as it is now: new rows reach searches only as the unindexed tail
    high_water = index.high_water

    new = clustered(30, 5)
    store.write_document("c", make_document("new", [f"new {j}" for j in range(30)], new))
    found = vector_query(store, "c", new[7], 1)
    assert found[0].content == "new 7" and found[0].score == pytest.approx(1.0, abs=1e-5)
    assert nearest(store, new[7]).plan == kind.plan
    assert index.high_water == high_water  # found through the tail, not the index

    # A document the index holds is gone from the very next search (the lists' positions are of the matrix
    # before the delete: the search maps their row ids instead).
    victim = store.list_documents("c")[3]
    assert vector_query(store, "c", old[300], 1)[0].document_id == victim.id
    store.delete_documents([victim.id], "c")
    for q in old[300:400]:
        assert all(h.document_id != victim.id for h in vector_query(store, "c", q, 10))
        assert nearest(store, q).plan == kind.plan
    assert vector_query(store, "c", old[1000], 1)[0].content == "d 1000"  # rows after the victim's moved
    for q in old[395:405]:  # each live row once, whatever the index still holds of the deleted ones
        keys = nearest(store, q).keys.tolist()
        assert len(keys) == len(set(keys)) == 10 and not set(keys) & set(range(301, 401))
    backend.close()


@pytest.mark.parametrize("kind", KINDS)
def test_the_index_is_saved_beside_the_file_and_loaded_not_rebuilt(tmp_path: Path, kind: Kind) -> None:
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path, settings=kind.settings)
    store = backend.for_tenant("acme")
    fill(store, clustered(2000, 8))
    saved = built(backend, store, kind)
    centres = saved.centres.copy() if kind is LISTS else None
    backend.close()
    assert files(tmp_path / "s.db-ann") == [f"t1-c1.{ext}" for ext in kind.extensions]

    # Another process changes the collection while no index is kept up to date.
    other = SQLiteBackend(path, settings=SQLiteSettings(ann=False))
    other_store = other.for_tenant("acme")
    other_store.delete_documents([other_store.list_documents("c")[0].id], "c")
    fill(other_store, clustered(100, 9), prefix="late")
    other.close()

    backend = SQLiteBackend(path, settings=kind.settings)
    store = backend.for_tenant("acme")
    index = built(backend, store, kind)
    # Loaded from the file: only the 100 new rows were added and the 100 removed ones taken out (a rebuild
    # would have added all 2,000 and saved them).
    assert index.unsaved == 200
    if centres is not None:
        assert np.array_equal(index.centres, centres)
    kind.in_step(backend, store, index)
    keys = set(kind.keys(index).tolist())
    assert len(keys) == 2000 and not keys & set(range(1, 101))
    late = clustered(100, 9)
    assert vector_query(store, "c", late[42], 1)[0].content == "late 42"
    assert nearest(store, late[42]).plan == kind.plan
    backend.close()


@pytest.mark.parametrize("kind", KINDS)
def test_each_tenants_collection_has_its_own_index(tmp_path: Path, kind: Kind) -> None:
    backend = SQLiteBackend(tmp_path / "s.db", settings=kind.settings)
    acme, other = backend.for_tenant("acme"), backend.for_tenant("other")
    mine, theirs = clustered(1200, 12), clustered(1200, 13)
    fill(acme, mine, prefix="acme")
    fill(other, theirs, prefix="other")
    acme_index, other_index = built(backend, acme, kind), built(backend, other, kind)
    assert acme_index is not other_index
    acme_keys, other_keys = set(kind.keys(acme_index).tolist()), set(kind.keys(other_index).tolist())
    assert len(acme_keys) == len(other_keys) == 1200 and not acme_keys & other_keys
    # The other tenant's nearest vectors are never an answer, even searched with their own vectors.
    for q in theirs[:50]:
        found = nearest(acme, q)
        assert found.plan == kind.plan and set(found.keys.tolist()) <= acme_keys
        assert all(h.content.startswith("acme") for h in vector_query(acme, "c", q, 10))
    acme_pk, other_pk = acme.read_collection("c").key, other.read_collection("c").key
    backend.close()
    assert files(tmp_path / "s.db-ann") == [f"t{t}-c{c}.{ext}" for t, c in sorted([(1, acme_pk), (2, other_pk)])
                                            for ext in kind.extensions]

    # Erasing one tenant's collection removes its index and leaves the other's.
    backend = SQLiteBackend(tmp_path / "s.db", settings=kind.settings)
    backend.for_tenant("other").delete_collection("c")
    assert files(tmp_path / "s.db-ann") == [f"t1-c{acme_pk}.{ext}" for ext in kind.extensions]
    acme = backend.for_tenant("acme")
    built(backend, acme, kind)
    assert nearest(acme, mine[5]).plan == kind.plan
    assert vector_query(acme, "c", mine[5], 1)[0].content == "acme 5"
    backend.close()
