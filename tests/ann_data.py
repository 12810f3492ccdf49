"""Small clustered collections for the SQLite approximate-search tests (graph and lists)."""

from __future__ import annotations

import numpy as np

from bunko.stores.base import Ranked
from bunko.stores.sqlite import SQLiteBackend, SQLiteVectorStore
from bunko.stores.sqlite.ann import HAVE_CODES, Lists, quantise
from bunko.testing.store_data import make_document
from bunko.types import EmbedderInfo

DIM = 32
INFO = EmbedderInfo("test", "random-32", DIM)


def clustered(n: int, seed: int) -> np.ndarray:
    """Unit vectors around 60 centres: near neighbours crowd together, as real embeddings do."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(60, DIM))
    v = centres[rng.integers(0, 60, size=n)] + rng.normal(scale=0.35, size=(n, DIM))
    v = v.astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def fill(store: SQLiteVectorStore, vectors: np.ndarray, prefix: str = "d", per_document: int = 100) -> None:
    """Write ``vectors`` into collection ``c``, ``per_document`` chunks to a document."""
    store.ensure_collection("c", INFO)
    for i in range(0, len(vectors), per_document):
        block = vectors[i:i + per_document]
        store.write_document("c", make_document(f"{prefix}{i}", [f"{prefix} {i + j}" for j in range(len(block))],
                                                block))


def nearest(store: SQLiteVectorStore, q: np.ndarray, k: int = 10) -> Ranked:
    """The store's own nearest-chunk search of collection ``c``."""
    row = store.read_collection("c")
    with store.reader(row) as reader:
        return reader.nearest(q, k)


def lists_in_step(backend: SQLiteBackend, store: SQLiteVectorStore, lists: Lists) -> None:
    """The lists hold exactly the live rows, each at its position in the matrix (and its int8 codes)."""
    snap = backend.matrices.snapshot(store.read_collection("c").key)
    assert snap is not None
    assert np.unique(lists.keys).tolist() == snap.rowids.tolist()  # every live row (far ones in three lists)
    assert len(lists) == len(snap.rowids) and len(lists.keys) == len(lists) + lists.extra
    assert np.array_equal(snap.rowids[lists.positions], lists.keys)
    assert lists.starts[0] == 0 and lists.starts[-1] == len(lists.keys) and np.all(np.diff(lists.starts) >= 0)
    if HAVE_CODES:
        assert lists.compact and len(lists.codes) == len(lists.keys)
        codes, scales = quantise(snap.vectors[lists.positions])
        assert np.array_equal(lists.codes, codes) and np.array_equal(lists.scales, scales)
