"""The embedded store's vectors in memory: one normalised matrix per collection, and its metadata columns.

A process keeps, per collection it searched, the collection's vectors as one normalised float32
matrix and the metadata fields filters read as factorised columns lined up with it. Both are
checked against the collection row a search read (its ``mutation_seq`` and highest chunk key):
inserts only append rows with larger keys, so new rows are appended; a removal bumps
``mutation_seq``, and then the rows still live are kept and the new ones appended.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...errors import VectorStoreError
from ..sql.columns import Column


@dataclass(slots=True, frozen=True)
class Snapshot:
    """A consistent view of a collection's vectors for one search."""

    rowids: np.ndarray  # int64 (n,), ascending
    doc_rowids: np.ndarray  # int64 (n,), -1 for chunks without a document
    vectors: np.ndarray  # float32 (n, d), rows L2-normalised
    state: tuple[int, int] = (-1, 0)  # (mutation_seq, high_water) of the collection these rows are


class Matrix:
    """A collection's vectors held in memory as one normalised, growable matrix.

    Appends write past the end of the live rows (doubling the capacity when full),
    so a snapshot a search already holds never changes under it. Removing rows builds
    new arrays instead of compacting in place, for the same reason.
    """

    __slots__ = ("_docs", "_rowids", "_vectors", "dim", "high_water", "mutation_seq", "size")

    def __init__(self, dim: int, capacity: int = 0) -> None:
        self.dim = dim
        self.size = 0
        self.mutation_seq = -1
        self.high_water = 0
        self._rowids = np.empty(capacity, dtype=np.int64)
        self._docs = np.empty(capacity, dtype=np.int64)
        self._vectors = np.empty((capacity, dim), dtype=np.float32)

    def snapshot(self) -> Snapshot:
        """The live rows as they are now (later appends and removals leave it as it is)."""
        n = self.size
        return Snapshot(self._rowids[:n], self._docs[:n], self._vectors[:n], (self.mutation_seq, self.high_water))

    def _reserve(self, extra: int) -> None:
        need = self.size + extra
        if need <= len(self._rowids):
            return
        capacity = max(need, 2 * len(self._rowids), 1024)
        for name in ("_rowids", "_docs", "_vectors"):
            old = getattr(self, name)
            new = np.empty((capacity, *old.shape[1:]), dtype=old.dtype)
            new[: self.size] = old[: self.size]
            setattr(self, name, new)

    def append(self, rows: list[tuple[int, int, bytes]]) -> None:
        """Append ``(rowid, doc_rowid, float32 blob)`` rows (ascending rowids), normalising them."""
        n = len(rows)
        if not n:
            return
        self._reserve(n)
        lo, hi = self.size, self.size + n
        self._rowids[lo:hi] = np.fromiter((r[0] for r in rows), dtype=np.int64, count=n)
        self._docs[lo:hi] = np.fromiter((r[1] for r in rows), dtype=np.int64, count=n)
        flat = np.frombuffer(b"".join(r[2] for r in rows), dtype=np.float32)
        if flat.size != n * self.dim:
            raise VectorStoreError("stored vectors do not match the collection's dimension")
        block = self._vectors[lo:hi]
        block[:] = flat.reshape(n, self.dim)
        norms = np.sqrt(np.einsum("ij,ij->i", block, block))
        norms[norms == 0] = 1.0
        block /= norms[:, None]
        self.size = hi

    def keep_only(self, live_rowids: np.ndarray) -> None:
        """Drop rows whose rowid is not in ``live_rowids`` (into new arrays; snapshots stay valid)."""
        keep = np.isin(self._rowids[: self.size], live_rowids, assume_unique=True)
        self._rowids = self._rowids[: self.size][keep]
        self._docs = self._docs[: self.size][keep]
        self._vectors = self._vectors[: self.size][keep]
        self.size = len(self._rowids)


# Rows gathered per block by ``score_rows``: the block stays in cache and its buffer is reused, so a search
# scoring scattered rows does not fault in a fresh array as large as all of them.
_BLOCK = 1024
_buffers = threading.local()


def score_rows(vectors: np.ndarray, positions: np.ndarray, q: np.ndarray) -> np.ndarray:
    """``vectors[positions] @ q``, gathered a block at a time into this thread's reused buffer.

    Each block's products are einsum's, on this thread: a BLAS product of one block would hand it to
    BLAS's threads and wait for them, which on a busy machine costs more than the work (40,000 rows of
    a million in 1,024-row blocks: 517 ms with ``@``, 45 ms with einsum, at load 5.5).
    """
    if len(positions) <= _BLOCK:
        return vectors[positions] @ q
    q = q.astype(vectors.dtype, copy=False)
    buffer = getattr(_buffers, "block", None)
    if buffer is None or buffer.shape[1] != vectors.shape[1] or buffer.dtype != vectors.dtype:
        buffer = _buffers.block = np.empty((_BLOCK, vectors.shape[1]), dtype=vectors.dtype)
    scores = np.empty(len(positions), dtype=vectors.dtype)
    for i in range(0, len(positions), _BLOCK):
        block = positions[i:i + _BLOCK]
        rows = buffer[:len(block)]
        np.take(vectors, block, axis=0, out=rows)
        np.einsum("ij,j->i", rows, q, out=scores[i:i + len(block)])
    return scores


def top_indices(scores: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest scores, best first (ties by position, so results are stable)."""
    n = scores.shape[0]
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    if k < n:
        part = np.argpartition(scores, n - k)[n - k :]
    else:
        part = np.arange(n)
    return part[np.lexsort((part, -scores[part]))]


class CollectionCache:
    """The matrices, metadata columns and HNSW graphs this process holds, by collection row id (shared by
    its threads; graphs are :class:`bunko.stores.sqlite.ann.Graph`, kept by the backend's maintainer)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.matrices: dict[int, Matrix] = {}
        self.columns: dict[tuple[int, tuple[str, ...]], Column] = {}
        self.graphs: dict[int, Any] = {}

    def snapshot(self, collection_pk: int) -> Snapshot | None:
        """The collection's rows as this process holds them now, or None."""
        with self.lock:
            matrix = self.matrices.get(collection_pk)
            return None if matrix is None else matrix.snapshot()

    def holds(self, collection_pk: int) -> bool:
        """Whether this process holds the collection's vectors."""
        with self.lock:
            return collection_pk in self.matrices

    def drop(self, collection_pk: int) -> None:
        """Forget a collection's vectors and columns (it was deleted, or rows vanished under a search)."""
        with self.lock:
            self.matrices.pop(collection_pk, None)
            self.graphs.pop(collection_pk, None)
            for key in [k for k in self.columns if k[0] == collection_pk]:
                del self.columns[key]

    def clear(self) -> None:
        """Forget everything."""
        with self.lock:
            self.matrices.clear()
            self.columns.clear()
            self.graphs.clear()
