"""The embedded store's approximate vector search: an HNSW graph per large collection (bunko.stores.sqlite.ann)."""

from __future__ import annotations

import importlib.util
import json
import platform
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from bunko.config import Settings, SQLiteSettings
from bunko.filters import as_filter
from bunko.stores import open_backend
from bunko.stores.base import Restriction
from bunko.stores.sqlite import SQLiteBackend, SQLiteVectorStore
from bunko.stores.sqlite.ann import AnnConfig
from bunko.testing.postgres import avx512_outside_dispatch

from .ann_data import DIM, clustered, fill, nearest

pytestmark = pytest.mark.skipif(importlib.util.find_spec("usearch") is None, reason="needs the ann extra (usearch)")
ScalarKind = pytest.importorskip("usearch.index").ScalarKind

# A low threshold so a small collection gets its graph.
SMALL = SQLiteSettings(ann_min_rows=500, ann_candidates=50)


def built(backend: SQLiteBackend, store: SQLiteVectorStore) -> None:
    """Search once (which schedules the graph) and wait until the graph has caught up."""
    nearest(store, np.ones(DIM, dtype=np.float32))
    assert backend.ann is not None and backend.ann.idle(120)


def test_a_large_collection_is_searched_through_its_graph_with_the_exact_answer(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "s.db", settings=SMALL)
    store = backend.for_tenant("acme")
    vectors = clustered(3000, 1)
    fill(store, vectors)
    built(backend, store)
    queries = clustered(100, 2)
    recall = []
    for q in queries:
        found = nearest(store, q)
        assert found.plan == "hnsw"
        exact = set((np.argsort(-(vectors @ q))[:10] + 1).tolist())  # chunk keys are 1.. in write order
        recall.append(len(exact & set(found.keys.tolist())) / 10)
        # The scores are the exact cosines of the chunks returned, best first.
        assert np.allclose(found.scores, vectors[found.keys - 1] @ q, atol=1e-5)
        assert list(found.scores) == sorted(found.scores, reverse=True)
    assert np.mean(recall) >= 0.98  # graph builds use threads: recall varies a little (0.988-1.0 seen)
    # A filtered search keeps the exact path.
    row = store.read_collection("c")
    restriction = Restriction(filter=as_filter({"chunk_index": {"$lt": 5}}))
    with store.reader(row) as reader:
        assert reader.nearest(queries[0], 10, restriction).plan == "exact"
    backend.close()


def test_below_the_threshold_or_switched_off_the_search_stays_exact(tmp_path: Path) -> None:
    vectors = clustered(1000, 3)
    for settings in (SQLiteSettings(ann_min_rows=5000), SQLiteSettings(ann=False, ann_min_rows=500)):
        backend = SQLiteBackend(tmp_path / f"{settings.ann}.db", settings=settings)
        store = backend.for_tenant("acme")
        fill(store, vectors)
        nearest(store, vectors[0])
        if backend.ann is not None:
            assert backend.ann.idle(60)
        assert nearest(store, vectors[0]).plan == "exact"
        assert not backend.matrices.graphs
        backend.close()


def test_the_maintainer_catches_the_graph_up_with_writes_and_deletes(tmp_path: Path) -> None:
    backend = SQLiteBackend(tmp_path / "s.db", settings=SMALL)
    store = backend.for_tenant("acme")
    fill(store, clustered(1500, 6))
    built(backend, store)
    fill(store, clustered(500, 7), prefix="e")
    gone = store.list_documents("c")[0]
    store.delete_documents([gone.id], "c")
    built(backend, store)
    row = store.read_collection("c")
    keys = np.asarray(backend.matrices.graphs[row.key].index.keys, dtype=np.int64)
    with store.reader(row) as reader:
        live = reader.allowed_in_sql(Restriction())
    assert len(live) == 1900
    assert sorted(keys.tolist()) == sorted(live.tolist())  # the deleted rows left, the new ones came in
    graph = backend.matrices.graphs[row.key]
    assert graph.removed == 100

    # Past a quarter of the live rows removed, a new graph without the tombstones takes the old one's place.
    store.delete_documents([d.id for d in store.list_documents("c")[:5]], "c")
    built(backend, store)
    fresh = backend.matrices.graphs[row.key]
    assert fresh is not graph and fresh.removed == 0 and len(fresh) == 1400
    q = clustered(1, 14)[0]
    found = nearest(store, q)
    assert found.plan == "hnsw" and int(found.keys.min()) > 600
    backend.close()


def test_a_saved_graph_of_another_shape_is_built_again(tmp_path: Path) -> None:
    # A graph saved by an earlier version (f16 vectors) is not loaded into a bf16 graph: it is built again.
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path, settings=SMALL)
    store = backend.for_tenant("acme")
    vectors = clustered(1000, 15)
    fill(store, vectors)
    built(backend, store)
    graph = backend.matrices.graphs[store.read_collection("c").key]
    assert graph.index.dtype == ScalarKind.BF16
    backend.close()
    meta_path = tmp_path / "s.db-ann" / "t1-c1.json"
    meta = json.loads(meta_path.read_text())
    assert meta["dtype"] == "bf16"
    meta_path.write_text(json.dumps({**meta, "dtype": "f16"}))

    backend = SQLiteBackend(path, settings=SMALL)
    store = backend.for_tenant("acme")
    built(backend, store)
    graph = backend.matrices.graphs[store.read_collection("c").key]
    assert graph.unsaved == 0 and graph.index.dtype == ScalarKind.BF16  # built from scratch, then saved
    assert json.loads(meta_path.read_text())["dtype"] == "bf16"
    assert nearest(store, vectors[3]).plan == "hnsw"
    assert int(nearest(store, vectors[3]).keys[0]) == 4
    backend.close()


def test_a_larger_collection_is_searched_wider() -> None:
    config = AnnConfig(min_rows=500, ef_search=640, ef_search_rows=100_000, candidates=100)
    assert config.breadth(20_000, 100) == config.breadth(100_000, 100) == 640
    assert config.breadth(400_000, 100) == 1280
    assert config.breadth(1_000_000, 100) == round(640 * 10 ** 0.5)
    assert config.breadth(10**9, 100) == 8192  # at most
    assert config.breadth(1_000_000, 5000) == 5000  # never fewer than the candidates asked for
    assert AnnConfig(ef_search=640, ef_search_rows=0).breadth(10**7, 100) == 640  # 0: never wider


def test_the_search_breadth_follows_the_collections_size(tmp_path: Path) -> None:
    settings = SQLiteSettings(ann_min_rows=500, ann_candidates=20, ann_ef_search=40, ann_ef_search_rows=1000)
    backend = SQLiteBackend(tmp_path / "s.db", settings=settings)
    store = backend.for_tenant("acme")
    vectors = clustered(1000, 16)
    fill(store, vectors)
    built(backend, store)
    graph = backend.matrices.graphs[store.read_collection("c").key]
    assert nearest(store, vectors[0]).plan == "hnsw" and graph.index.expansion_search == 40
    fill(store, clustered(3000, 17), prefix="e")
    built(backend, store)
    assert nearest(store, vectors[0]).plan == "hnsw" and graph.index.expansion_search == 80  # 40 * sqrt(4)
    backend.close()


def test_a_saved_graph_of_another_collection_is_not_used(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    backend = SQLiteBackend(path, settings=SMALL)
    store = backend.for_tenant("acme")
    fill(store, clustered(1000, 10))
    built(backend, store)
    backend.close()
    (tmp_path / "s.db-ann" / "keep.usearch").write_bytes((tmp_path / "s.db-ann" / "t1-c1.usearch").read_bytes())

    backend = SQLiteBackend(path, settings=SMALL)
    store = backend.for_tenant("acme")
    store.delete_collection("c")
    assert sorted(p.name for p in (tmp_path / "s.db-ann").iterdir()) == ["keep.usearch"]  # its files went with it
    (tmp_path / "s.db-ann" / "t1-c1.usearch").write_bytes((tmp_path / "s.db-ann" / "keep.usearch").read_bytes())
    # A new collection may get the same row id: the old graph's identity does not match, so a new one is built.
    vectors = clustered(1000, 11)
    fill(store, vectors)
    built(backend, store)
    q = vectors[17]
    found = nearest(store, q)
    assert found.plan == "hnsw"
    assert int(found.keys[0]) == int(store.read_collection("c").high_water) - 1000 + 18
    backend.close()


def test_the_settings_come_from_the_one_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BUNKO_SQLITE_ANN_MIN_ROWS", "1234")
    monkeypatch.setenv("BUNKO_SQLITE_ANN_EF_SEARCH", "77")
    monkeypatch.setenv("BUNKO_SQLITE_ANN_EF_SEARCH_ROWS", "5000")
    settings = Settings.resolve(f"sqlite:///{tmp_path / 'a.db'}", sqlite_ann_candidates=64)
    assert (settings.sqlite.ann_min_rows, settings.sqlite.ann_ef_search, settings.sqlite.ann_ef_search_rows,
            settings.sqlite.ann_candidates) == (1234, 77, 5000, 64)
    backend = open_backend(settings.database_url, settings)
    assert isinstance(backend, SQLiteBackend) and backend.ann is not None
    assert (backend.ann.config.min_rows, backend.ann.config.ef_search, backend.ann.config.ef_search_rows,
            backend.ann.config.candidates) == (1234, 77, 5000, 64)
    backend.close()


# -- portability: the library must run on any x86-64 CPU with AVX2 ----------------------------------------

# numkong (usearch's kernels) names each kernel after the CPU it needs and picks one at run time from what
# the CPU reports; these targets are the ones that need AVX-512.
_NUMKONG_AVX512_TARGETS = re.compile(r"avx512|_(skylake|icelake|genoa|turin|sapphire|sapphireamx|graniteamx|diamond)"
                                     r"(_|$)", re.IGNORECASE)


def _library(module: str) -> Path:
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None
    return Path(spec.origin)


@pytest.mark.slow
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="AVX-512 is an x86-64 matter")
@pytest.mark.skipif(shutil.which("objdump") is None, reason="needs binutils (objdump) to read machine code")
def test_usearch_and_its_kernels_hold_no_avx512_outside_run_time_dispatch() -> None:
    import usearch.compiled

    assert usearch.compiled.USES_NUMKONG_DYNAMIC_DISPATCH  # kernels are looked up by the CPU at run time
    index = _library("usearch.compiled")
    assert avx512_outside_dispatch(index) == {}, f"{index} holds AVX-512 instructions no CPU check guards"
    kernels = _library("numkong._numkong")
    assert avx512_outside_dispatch(kernels, allowed=_NUMKONG_AVX512_TARGETS) == {}, (
        f"{kernels} holds AVX-512 instructions outside the kernels it picks by CPU (built with -march=native?)")
