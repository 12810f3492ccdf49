"""Approximate nearest neighbours for the embedded store: one index per large collection, an HNSW graph
(usearch) or, for the largest, IVF lists (numpy).

Above ``ann_min_rows`` chunks an unfiltered vector search asks a collection's graph for candidates
and re-ranks them, together with the rows the graph does not hold yet, by the exact vectors of the
in-memory matrix (:mod:`bunko.stores.sqlite.matrix`); below it, and for every filtered search, the
exact scan stays. From ``lists_min_rows`` chunks the collection has :class:`Lists` instead (a graph
walk loses the near-duplicates of a large collection): k-means lists of row ids, the nearest
``probe_share`` of which a search scores exactly from the same matrix. Either index is kept over the
matrix's rows, keyed by chunk row id, and a background thread (:class:`Maintainer`, one per backend)
keeps it in step (the steps below are the graph's; the lists' are the same):

* rows the matrix holds above the graph's ``high_water`` are added in small steps (a search ranks
  them exactly until then, so a write is found by the next search);
* after a removal (the matrix's ``mutation_seq`` moved) the graph's keys that are no longer live
  are removed (until then a search drops them, as they are not in its snapshot);
* the graph is saved beside the SQLite file (``<file>-ann/t<tenant>-c<collection>.usearch`` and a
  ``.json`` naming the collection it belongs to) once it has caught up with a large change and when
  the backend closes, and loaded again instead of being rebuilt: loading is much faster than
  building (docs/ARCHITECTURE.md, "Approximate vector search").

A graph belongs to one collection of one tenant and is never shared; a saved one is used only for
the collection (tenant row id, collection row id, name, creation time, dimension) it was built for.
Without the ``ann`` extra (usearch) no graph is built: collections below ``lists_min_rows`` scan.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

try:  # the optional "ann" extra
    import usearch.index as _usearch
except ImportError:  # pragma: no cover - exercised where the extra is absent
    _usearch = None  # type: ignore[assignment]
try:  # comes with usearch: int8 dot products on the CPU's widest kernels, chosen at run time
    import numkong as _numkong
except ImportError:  # pragma: no cover - exercised where the extra is absent
    _numkong = None  # type: ignore[assignment]

HAVE_ANN = _usearch is not None
HAVE_CODES = _numkong is not None
_MAX_BREADTH = 8192
log = logging.getLogger(__name__)

# Rows added to a graph per step: the graph's lock is let go between steps so searches go on.
_STEP = 512
# HNSW graph shape: M (connectivity) and ef_construction; bf16 vectors in the graph (candidates are
# re-ranked by the exact float32 vectors), measured in benchmarks/bench_ann.py: bf16 keeps the noise that
# tells near-duplicates apart as f16 does, and its distance kernel (AVX-512 BF16 where the CPU has it,
# chosen at run time) makes a search at the same breadth about 1.4x faster than f16's.
CONNECTIVITY = 16
EXPANSION_ADD = 128
DTYPE = "bf16"


@dataclass(frozen=True, slots=True)
class AnnConfig:
    """The knobs of approximate search (``[sqlite]`` settings)."""

    min_rows: int = 20_000  # a collection this large gets a graph; below it searches scan
    ef_search: int = 640  # graph search breadth up to ``ef_search_rows`` chunks
    ef_search_rows: int = 100_000  # past this many chunks the breadth grows with the square root of the size
    candidates: int = 100  # candidates re-ranked by the exact vectors (at least top_k)
    lists_min_rows: int = 250_000  # a collection this large gets IVF lists instead of a graph
    probe_share: float = 0.04  # the share of the lists a search scores (by their codes, with numkong)

    def kind(self, rows: int) -> str | None:
        """Which index a collection of ``rows`` chunks gets: ``"lists"``, ``"graph"`` (with usearch) or None."""
        if rows >= self.lists_min_rows:
            return "lists"
        if HAVE_ANN and rows >= self.min_rows:
            return "graph"
        return None

    def smallest(self) -> int:
        """The fewest chunks a collection needs for an index of either kind."""
        return min(self.min_rows, self.lists_min_rows) if HAVE_ANN else self.lists_min_rows

    def breadth(self, rows: int, count: int) -> int:
        """The graph's search breadth for a collection of ``rows`` chunks asked for ``count`` candidates.

        A graph of more vectors needs a wider search for the same recall: ``ef_search`` up to
        ``ef_search_rows`` chunks, then ``ef_search * sqrt(rows / ef_search_rows)`` (``ef_search_rows`` 0: never
        wider), at most 8,192; never below ``count``.
        """
        breadth = self.ef_search
        if self.ef_search_rows and rows > self.ef_search_rows:
            breadth = round(self.ef_search * math.sqrt(rows / self.ef_search_rows))
        return max(min(breadth, _MAX_BREADTH), count)


@dataclass(frozen=True, slots=True)
class Identity:
    """Which collection a graph is of."""

    tenant_pk: int
    collection_pk: int
    name: str
    created_at: str
    dimension: int

    def as_dict(self) -> dict[str, Any]:
        """The identity as the saved graph's ``.json`` holds it."""
        return {"tenant_pk": self.tenant_pk, "collection_pk": self.collection_pk, "name": self.name,
                "created_at": self.created_at, "dimension": self.dimension}


def _positions(snap: Any, keys: np.ndarray) -> np.ndarray:
    """The positions in ``snap`` of those of ``keys`` it holds (rows removed since are not in it)."""
    n = len(snap.rowids)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    positions = np.minimum(np.searchsorted(snap.rowids, keys), n - 1)
    return positions[snap.rowids[positions] == keys]


class Graph:
    """One collection's HNSW graph over its chunk row ids."""

    kind = "graph"
    plan = "hnsw"
    step = _STEP  # rows added per step (the lock is let go between steps)

    def __init__(self, identity: Identity, ef_search: int) -> None:
        assert _usearch is not None
        self.identity = identity
        self.lock = threading.Lock()
        self.index = _usearch.Index(ndim=identity.dimension, metric="ip", dtype=DTYPE, connectivity=CONNECTIVITY,
                           expansion_add=EXPANSION_ADD, expansion_search=ef_search)
        self.high_water = 0  # every live matrix row up to this key is in the graph
        self.mutation_seq = -2  # the matrix removals the graph has caught up with (-2: not checked yet)
        self.unsaved = 0  # rows added or removed since the graph was last saved or loaded
        self.removed = 0  # rows removed since the graph was built (tombstones in it)

    def search(self, q: np.ndarray, count: int, wait: float, breadth: int | None = None) -> tuple[np.ndarray,
                                                                                                 int] | None:
        """Up to ``count`` candidate keys for ``q`` (searching ``breadth`` wide, if given) and the graph's
        ``high_water``; None if the graph is busy longer than ``wait`` seconds or empty (the caller scans)."""
        if not self.lock.acquire(timeout=wait):
            return None
        try:
            if self.high_water == 0 or len(self.index) == 0:
                return None
            if breadth is not None and breadth != self.index.expansion_search:
                self.index.expansion_search = breadth  # type: ignore[misc]  # a property with a setter
            found = self.index.search(q, count, threads=1)
            return np.asarray(found.keys, dtype=np.int64), self.high_water
        finally:
            self.lock.release()

    def candidates(self, snap: Any, q: np.ndarray, count: int, wait: float,
                   config: AnnConfig) -> tuple[np.ndarray, int] | None:
        """Positions in ``snap`` of the graph's candidates for ``q`` and the graph's ``high_water``; None when
        the graph is busy or empty (the caller scans)."""
        found = self.search(q, count, wait, config.breadth(len(snap.rowids), count))
        if found is None:
            return None
        return _positions(snap, found[0]), found[1]

    def forget(self, snap: Any) -> None:
        """Remove the keys ``snap`` no longer holds (rows were deleted)."""
        with self.lock:
            keys = np.asarray(self.index.keys, dtype=np.int64)
            gone = keys[~np.isin(keys, snap.rowids)]
            if len(gone):
                self.index.remove(gone.astype(np.uint64))
                self.unsaved += len(gone)
                self.removed += len(gone)
            self.mutation_seq = snap.state[0]

    def add(self, snap: Any, start: int, stop: int) -> None:
        """Add the snapshot's rows ``start:stop`` (all above ``high_water``)."""
        with self.lock:
            self.index.add(snap.rowids[start:stop].astype(np.uint64), snap.vectors[start:stop],
                           threads=os.cpu_count() or 1)
            self.high_water = int(snap.rowids[stop - 1])
            self.unsaved += stop - start

    def stale(self, rows: int) -> bool:
        """Whether a new graph should be built: removed nodes stay as tombstones that searches walk
        through, so past a quarter of the live rows one is built (the old one answers meanwhile)."""
        return self.removed * 4 > len(self) > 0

    def write(self, path: Path) -> dict[str, Any]:
        """Save the graph to ``path``; what the ``.json`` records of its shape."""
        self.index.save(str(path))
        return {"dtype": DTYPE, "connectivity": CONNECTIVITY}

    @property
    def memory_bytes(self) -> int:
        """The graph's memory (vectors and links)."""
        return int(self.index.memory_usage)

    def __len__(self) -> int:
        return len(self.index)


# IVF lists: how many rows train the centres per list, and the k-means rounds.
_TRAIN_PER_LIST = 50
_ROUNDS = 8
# Rows assigned to their lists per step (the lists are swapped in whole, so searches never wait long).
_LIST_STEP = 100_000
# The share of the training sample farthest from its nearest centre: rows at least this far are put in their
# ``_FAR_LISTS`` nearest lists (they sit between lists, and a search probing a share of the lists missed them:
# at 300,000 chunks 9 of the 13 neighbours missed at 8% were among the 2% of rows farthest from their
# centre). Before, they went to a spill list that every search scored: at a million it held a third of the
# rows a search at 4% scored (66,000). In their three nearest lists they add 2,000-5,000 rows a search at
# 4%: recall@10 0.992 at a million as with the spill list, 0.994 at 300,000 (0.995 with it; in two lists
# 0.986). docs/ARCHITECTURE.md, "Far rows in three lists".
_FAR_SHARE = 0.02
_FAR_LISTS = 3
# Rows quantised at a time (bounds the float32 temporary: 16,384 x 512 x 4 bytes = 32 MB).
_CODE_BLOCK = 16_384


def list_count(rows: int) -> int:
    """How many lists a collection of ``rows`` chunks is cut into: about sqrt(rows), 16 to 4,096."""
    return max(16, min(4096, round(math.sqrt(rows))))


def quantise(rows: np.ndarray, positions: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Each row (of ``rows``, or of ``rows[positions]``, gathered a block at a time) as int8 codes and its
    scale (``row ~ codes * scale``): the row's largest component maps to 127."""
    n = len(rows) if positions is None else len(positions)
    codes = np.empty((n, rows.shape[1]), dtype=np.int8)
    scales = np.empty(n, dtype=np.float32)
    for i in range(0, n, _CODE_BLOCK):
        block = rows[i:i + _CODE_BLOCK] if positions is None else rows[positions[i:i + _CODE_BLOCK]]
        peak = np.abs(block).max(axis=1) if block.shape[1] else np.zeros(len(block), dtype=np.float32)
        scale = np.where(peak > 0, peak / 127, 1.0).astype(np.float32)
        codes[i:i + len(block)] = np.rint(block / scale[:, None])
        scales[i:i + len(block)] = scale
    return codes, scales


class Lists:
    """One collection's IVF lists: k-means centres, and each chunk row id in the list of its nearest centre.

    A list holds row ids and, for the matrix state it was last brought in step with (``mutation_seq``),
    their positions in it. With numkong (the ``ann`` extra) the lists also hold their rows' vectors as int8
    codes, list by list (``codes``, a quarter of the matrix's memory): a search scores the centres, takes
    the best ``probe_share`` of the lists, scores their codes (contiguous slices, int8 dot products) and
    hands the best ``count`` rows to the caller, which ranks them by the exact vectors. Rows far from every
    centre (farther from their nearest than ``_FAR_SHARE`` of the training sample) are in their
    ``_FAR_LISTS`` nearest lists, so ``keys`` holds them more than once (a search hands each row on once).
    Without numkong the probed lists' rows are scored exactly from the matrix, where they lie scattered
    (about 10x slower at a million rows). The arrays are replaced, never changed in place, so a search
    reads them without holding the lock.
    """

    kind = "lists"
    plan = "ivf"
    step = _LIST_STEP

    def __init__(self, identity: Identity, compact: bool = HAVE_CODES) -> None:
        self.identity = identity
        self.lock = threading.Lock()
        self.compact = compact and HAVE_CODES  # keep int8 codes of the rows, list by list
        self.centres = np.zeros((0, identity.dimension), dtype=np.float32)
        self.keys = np.zeros(0, dtype=np.int64)  # row ids, list by list
        self.starts = np.zeros(1, dtype=np.int64)  # list j is keys[starts[j]:starts[j + 1]]
        self.far_below = -math.inf  # a row whose nearest centre scores below this is in its _FAR_LISTS nearest
        self.positions = np.zeros(0, dtype=np.int64)  # keys' positions in a matrix of ``mutation_seq``
        self.codes = np.zeros((0, identity.dimension), dtype=np.int8)  # keys' rows as int8, if ``compact``
        self.scales = np.zeros(0, dtype=np.float32)  # each code row's scale
        self.trained_on = 0  # how many rows the centres were trained on
        self.high_water = 0
        self.mutation_seq = -2
        self.unsaved = 0
        self.removed = 0
        self.extra = 0  # row ids in ``keys`` beyond one per row (far rows' second and third lists)

    def train(self, vectors: np.ndarray) -> None:
        """k-means centres from a sample of ``vectors`` (seeded by the collection, so builds repeat)."""
        n, lists = len(vectors), list_count(len(vectors))
        rng = np.random.default_rng(self.identity.collection_pk)
        sample = vectors[np.sort(rng.choice(n, min(n, _TRAIN_PER_LIST * lists), replace=False))]
        centres = sample[rng.choice(len(sample), min(lists, len(sample)), replace=False)].copy()
        for _ in range(_ROUNDS):
            nearest = np.argmax(sample @ centres.T, axis=1)
            sums = np.zeros_like(centres)
            np.add.at(sums, nearest, sample)
            norms = np.linalg.norm(sums, axis=1)
            filled = norms > 0
            centres[filled] = sums[filled] / norms[filled, None]  # an empty list keeps its centre
        nearest_score = (sample @ centres.T).max(axis=1)
        self.far_below = float(np.quantile(nearest_score, _FAR_SHARE)) if len(sample) >= 1000 else -math.inf
        self.centres, self.trained_on = centres, n
        self.starts = np.zeros(len(centres) + 1, dtype=np.int64)  # trained before any row is listed

    def add(self, snap: Any, start: int, stop: int) -> None:
        """Put the snapshot's rows ``start:stop`` (all above ``high_water``) in the lists of their nearest
        centres, and those far from it in their next nearest too (training the centres first, on every row
        the snapshot holds, if there are none)."""
        if not len(self.centres):
            self.train(snap.vectors)
        scores = snap.vectors[start:stop] @ self.centres.T
        rows = np.arange(len(scores))
        assign = np.argmax(scores, axis=1)
        far = np.flatnonzero(scores[rows, assign] < self.far_below)
        more = min(_FAR_LISTS, len(self.centres)) - 1  # the far rows' next nearest centres, beside the nearest
        scores[far, assign[far]] = -np.inf
        nexts = np.argpartition(-scores[far], more - 1, axis=1)[:, :more].T.ravel() if more > 0 and len(far) \
            else np.zeros(0, dtype=np.int64)
        far = np.tile(far, more) if more > 0 else far[:0]  # lined up with nexts
        lists = np.concatenate([np.repeat(np.arange(len(self.centres)), np.diff(self.starts)), assign, nexts])
        order = np.argsort(lists, kind="stable")
        keys = np.concatenate([self.keys, snap.rowids[start:stop], snap.rowids[start + far]])[order]
        if self.mutation_seq == snap.state[0]:
            positions = np.concatenate([self.positions, np.arange(start, stop, dtype=np.int64), start + far])[order]
        else:
            positions = np.searchsorted(snap.rowids, keys)
        starts = np.searchsorted(lists[order], np.arange(len(self.centres) + 1))
        codes, scales = self.codes, self.scales
        if self.compact:
            new_codes, new_scales = quantise(snap.vectors[start:stop])
            codes = np.concatenate([codes, new_codes, new_codes[far]])[order]
            scales = np.concatenate([scales, new_scales, new_scales[far]])[order]
        with self.lock:
            self.keys, self.positions, self.starts = keys, positions, starts
            self.codes, self.scales = codes, scales
            self.mutation_seq = snap.state[0]
            self.high_water = int(snap.rowids[stop - 1])
            self.unsaved += stop - start
            self.extra += len(far)

    def forget(self, snap: Any) -> None:
        """Drop the row ids ``snap`` no longer holds and renew the others' positions (rows were deleted); the
        codes of lists read from disk are made here, from the matrix."""
        n = len(snap.rowids)
        positions = np.minimum(np.searchsorted(snap.rowids, self.keys), max(n - 1, 0))
        live = snap.rowids[positions] == self.keys if n else np.zeros(len(self.keys), dtype=bool)
        lists = np.repeat(np.arange(len(self.centres)), np.diff(self.starts))
        starts = np.searchsorted(lists[live], np.arange(len(self.centres) + 1))
        kept = self.keys[live]
        extra = len(kept) - len(np.unique(kept))
        gone = len(self) - (len(kept) - extra)
        codes, scales = self.codes, self.scales
        if self.compact:
            if len(codes) == len(self.keys):
                codes, scales = codes[live], scales[live]
            else:
                codes, scales = quantise(snap.vectors, positions[live])
        with self.lock:
            self.keys, self.positions, self.starts = kept, positions[live], starts
            self.extra = extra
            self.codes, self.scales = codes, scales
            self.mutation_seq = snap.state[0]
            self.unsaved += gone
            self.removed += gone

    def candidates(self, snap: Any, q: np.ndarray, count: int, wait: float,
                   config: AnnConfig) -> tuple[np.ndarray, int] | None:
        """Positions in ``snap`` of the rows of the lists nearest ``q`` (with codes: the best ``count`` of
        them by their codes) and the lists' ``high_water``."""
        with self.lock:
            centres, keys, starts, positions = self.centres, self.keys, self.starts, self.positions
            codes, scales = self.codes, self.scales
            seq, high_water = self.mutation_seq, self.high_water
        if not len(keys):
            return None
        lists = len(centres)
        probe = max(1, min(lists, math.ceil(config.probe_share * lists)))
        picked = np.sort(np.argpartition(-np.einsum("ij,j->i", centres, q.astype(centres.dtype, copy=False)),
                                         probe - 1)[:probe])  # on this thread, as score_rows
        lo, hi = starts[picked], starts[picked + 1]
        wanted = count if seq == snap.state[0] else 2 * count
        if self.compact and len(codes) == len(keys) and int((hi - lo).sum()) > wanted:
            # A row far from every centre is in several lists, and they may all be probed: _FAR_LISTS times
            # the rows are taken, best first, and the first ``wanted`` distinct ones kept.
            rows = self._best(codes, scales, lo, hi, q, _FAR_LISTS * wanted)
            first = np.unique(keys[rows], return_index=True)[1]
            rows = rows[np.sort(first)[:wanted]]
        else:
            rows = np.concatenate([np.arange(a, b) for a, b in zip(lo.tolist(), hi.tolist(), strict=True)])
            rows = rows[np.unique(keys[rows], return_index=True)[1]]
        if seq == snap.state[0]:
            found = positions[rows]
            return found[found < len(snap.rowids)], high_water  # rows the snapshot does not hold yet
        return _positions(snap, keys[rows]), high_water

    @staticmethod
    def _best(codes: np.ndarray, scales: np.ndarray, lo: np.ndarray, hi: np.ndarray, q: np.ndarray,
              count: int) -> np.ndarray:
        """Indices into ``codes`` of the ``count`` best rows of the lists ``lo[i]:hi[i]`` by their codes, best
        first: one int8 dot product per row, on this thread, into one buffer (each list's scores times its
        rows' scales); only the best are mapped back to their lists."""
        assert _numkong is not None
        peak = float(np.abs(q).max())
        q8 = np.rint(q * (127 / peak) if peak > 0 else q).astype(np.int8)[None, :]
        sizes = hi - lo
        total = int(sizes.sum())
        scores = np.empty((total, 1), dtype=np.float32)
        weights = np.empty(total, dtype=np.float32)
        at = 0
        for a, b in zip(lo.tolist(), hi.tolist(), strict=True):
            if b > a:
                _numkong.cdist(codes[a:b], q8, metric="dot", out=scores[at:at + b - a])
                weights[at:at + b - a] = scales[a:b]
                at += b - a
        flat = scores[:, 0]
        flat *= weights
        best = np.argpartition(flat, total - count)[total - count:] if count < total else np.arange(total)
        best = best[np.argsort(-flat[best], kind="stable")]
        ends = np.cumsum(sizes)
        segment = np.searchsorted(ends, best, side="right")  # which picked list each of the best is in
        return lo[segment] + best - (ends[segment] - sizes[segment])

    def stale(self, rows: int) -> bool:
        """Whether the lists should be built again: the collection doubled since the centres were trained,
        or a quarter as many rows as are live were removed."""
        return rows > 2 * self.trained_on or self.removed * 4 > len(self) > 0

    def write(self, path: Path) -> dict[str, Any]:
        """Save the centres and the lists to ``path`` (not the codes: they are made again from the matrix
        when the lists are read); what the ``.json`` records of their shape."""
        with path.open("wb") as f:
            np.savez(f, centres=self.centres, keys=self.keys, starts=self.starts,
                     far_below=np.array([self.far_below]), far_lists=np.array([_FAR_LISTS]))
        return {"trained_on": self.trained_on}

    def read(self, path: Path, meta: dict[str, Any]) -> bool:
        """Load what ``write`` saved; False if it does not fit this collection."""
        with np.load(path) as data:
            centres, keys, starts = data["centres"], data["keys"], data["starts"]
            # Saved with a spill list (or before it): built again. (A process of the version before reads
            # these as saved without a spill list, and builds its own.)
            if "far_below" not in data.files or int(data["far_lists"][0]) != _FAR_LISTS:
                return False
            far_below = float(data["far_below"][0])
        if centres.ndim != 2 or centres.shape[1] != self.identity.dimension or len(starts) != len(centres) + 1 \
                or int(starts[-1]) != len(keys):
            return False
        self.centres, self.keys, self.starts = centres.astype(np.float32), keys.astype(np.int64), starts
        self.far_below = far_below
        self.extra = len(keys) - len(np.unique(keys))
        self.trained_on = int(meta.get("trained_on", len(keys)))
        return True

    @property
    def memory_bytes(self) -> int:
        """The lists' memory (centres, row ids, positions and codes; the exact vectors are the matrix's)."""
        return int(self.centres.nbytes + self.keys.nbytes + self.starts.nbytes + self.positions.nbytes
                   + self.codes.nbytes + self.scales.nbytes)

    def __len__(self) -> int:
        """How many rows the lists hold (each once)."""
        return len(self.keys) - self.extra


Index = Graph | Lists
_SUFFIX = {"graph": ".usearch", "lists": ".ivf"}


def _files(folder: Path, identity: Identity, kind: str = "graph") -> tuple[Path, Path]:
    """The index file and its ``.json`` (a graph: ``t1-c2.usearch``, ``t1-c2.json``; lists: ``t1-c2.ivf``,
    ``t1-c2.ivf.json``): each kind on its own, so a process of an earlier version never reads lists."""
    stem = folder / f"t{identity.tenant_pk}-c{identity.collection_pk}"
    return stem.with_suffix(_SUFFIX[kind]), stem.with_suffix(".json" if kind == "graph" else ".ivf.json")


# Saving a graph and removing a deleted collection's files take turns, so no graph is saved after its
# collection's files were removed (a deleted tenant's vectors would stay on disk).
_FILES = threading.Lock()


def remove_files(folder: Path | None, collection_pk: int) -> None:
    """Delete a collection's saved graph (the collection is gone)."""
    if folder is None:
        return
    with _FILES:
        for path in folder.glob(f"t*-c{collection_pk}.*"):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def remove_kind_files(folder: Path, identity: Identity, kind: str) -> None:
    """Delete a collection's saved index of ``kind`` (another kind took its place)."""
    with _FILES:
        for path in _files(folder, identity, kind):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def save(graph: Index, folder: Path, still_wanted: Callable[[], bool] = lambda: True) -> None:
    """Write the index (a graph or lists) and its identity beside the database (atomically: a reader sees
    the old or the new), if ``still_wanted()`` (its collection was not dropped meanwhile)."""
    with _FILES:
        if not still_wanted():
            return
        folder.mkdir(parents=True, exist_ok=True)
        index_path, meta_path = _files(folder, graph.identity, graph.kind)
        tmp = index_path.with_suffix(f".tmp{os.getpid()}")
        shape = graph.write(tmp)
        os.replace(tmp, index_path)
        meta = {**graph.identity.as_dict(), "kind": graph.kind, "high_water": graph.high_water,
                "size": len(graph), "removed": graph.removed, **shape}
        tmp_meta = meta_path.with_suffix(f".tmp{os.getpid()}")
        tmp_meta.write_text(json.dumps(meta), encoding="utf-8")
        os.replace(tmp_meta, meta_path)
        graph.unsaved = 0


def load(folder: Path, identity: Identity, ef_search: int, kind: str = "graph") -> Index | None:
    """The saved index (of ``kind``) of this collection, or None (none saved, another collection's, or
    unreadable)."""
    index_path, meta_path = _files(folder, identity, kind)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or any(meta.get(k) != v for k, v in identity.as_dict().items()) or \
            meta.get("kind", "graph") != kind:
        return None
    if kind == "lists":
        lists = Lists(identity)
        try:
            if not lists.read(index_path, meta):
                return None
        except (OSError, ValueError, KeyError) as exc:  # a torn or foreign file: build again
            log.warning("ignoring the saved vector lists %s: %s", index_path, exc)
            return None
        lists.high_water = int(meta.get("high_water", 0))
        lists.removed = int(meta.get("removed", 0))
        return lists if len(lists) == meta.get("size") else None
    if _usearch is None or (meta.get("dtype"), meta.get("connectivity")) != (DTYPE, CONNECTIVITY):
        return None
    graph = Graph(identity, ef_search)
    try:
        graph.index.load(str(index_path))
    except Exception as exc:  # a torn or foreign file: build again
        log.warning("ignoring the saved vector graph %s: %s", index_path, exc)
        return None
    if len(graph.index) != meta.get("size") or graph.index.ndim != identity.dimension:
        return None
    graph.index.expansion_search = ef_search  # type: ignore[misc]  # a property with a setter
    graph.high_water = int(meta.get("high_water", 0))
    graph.removed = int(meta.get("removed", 0))
    return graph


class Maintainer:
    """The backend's background thread that builds, updates and saves its collections' graphs.

    ``snapshot(collection_pk)`` gives the collection's current matrix snapshot (or None when the process
    no longer holds it); ``graphs`` is the cache's dict of graphs, guarded by ``lock``.
    """

    def __init__(self, folder: Path | None, config: AnnConfig, graphs: dict[int, Index], lock: threading.Lock,
                 snapshot: Callable[[int], Any]) -> None:
        self.folder = folder
        self.config = config
        self._graphs = graphs
        self._lock = lock
        self._snapshot = snapshot
        self._wake = threading.Condition()
        self._due: dict[int, Identity] = {}
        self._thread: threading.Thread | None = None
        self._stopped = False
        self._busy = False

    def schedule(self, identity: Identity) -> None:
        """Bring this collection's graph in step with its matrix soon (creating or loading it)."""
        with self._wake:
            if self._stopped:
                return
            self._due[identity.collection_pk] = identity
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="bunko-ann", daemon=True)
                self._thread.start()
            self._wake.notify()

    def idle(self, timeout: float = 60.0) -> bool:
        """Wait until nothing is due (tests, benchmarks); False on timeout."""
        with self._wake:
            return self._wake.wait_for(lambda: not self._due and not self._busy, timeout)

    def _run(self) -> None:
        while True:
            with self._wake:
                self._wake.wait_for(lambda: self._due or self._stopped)
                if self._stopped:
                    return
                pk = next(iter(self._due))
                identity = self._due.pop(pk)
                self._busy = True
            try:
                self._step(identity)
            except Exception:  # the graph is an accelerator: searches stay right (exact) without it
                log.exception("vector graph upkeep failed for collection %s", identity.collection_pk)
                with self._lock:
                    self._graphs.pop(identity.collection_pk, None)
            finally:
                with self._wake:
                    self._busy = False
                    self._wake.notify_all()

    def _step(self, identity: Identity) -> None:
        pk = identity.collection_pk
        snap = self._snapshot(pk)
        kind = None if snap is None else self.config.kind(len(snap.rowids))
        with self._lock:
            graph = self._graphs.get(pk)
        if graph is not None and graph.identity != identity:
            graph = None  # the row id now names another collection
        if graph is None:
            if kind is None:
                return
            graph = (load(self.folder, identity, self.config.ef_search, kind) if self.folder is not None
                     else None) or self._new(kind, identity)
            with self._lock:
                self._graphs[pk] = graph
        if not self._catch_up(graph, pk):
            return
        if (kind is not None and graph.kind != kind) or graph.stale(len(graph)):
            # A new index is built (the old one answers meanwhile) and takes its place: the collection
            # crossed ``lists_min_rows``, or the index is worn (see ``stale``).
            fresh = self._new(kind or graph.kind, identity)
            if not self._catch_up(fresh, pk):
                return
            with self._lock:
                if self._graphs.get(pk) is not graph:
                    return
                replaced, self._graphs[pk] = graph, fresh
                graph = fresh
            if self.folder is not None and replaced.kind != graph.kind:
                # The other kind's files go once the new index is saved: a collection that crossed
                # ``lists_min_rows`` keeps no 1 GB graph on disk that nothing reads.
                with graph.lock:
                    save(graph, self.folder, self._still_registered(graph))
                remove_kind_files(self.folder, identity, replaced.kind)
        if self.folder is not None and graph.unsaved >= max(1000, len(graph) // 10):
            with graph.lock:
                save(graph, self.folder, self._still_registered(graph))

    def _new(self, kind: str, identity: Identity) -> Index:
        return Lists(identity) if kind == "lists" else Graph(identity, self.config.ef_search)

    def _catch_up(self, graph: Index, pk: int) -> bool:
        """Add the matrix's new rows to ``graph`` and remove the ones gone, until it is in step (True) or the
        maintainer stops (True); False when the process no longer holds the collection."""
        while not self._stopped:
            snap = self._snapshot(pk)
            if snap is None:
                with self._lock:
                    if self._graphs.get(pk) is graph:
                        del self._graphs[pk]
                return False
            if snap.state[0] != graph.mutation_seq:  # rows went away: remove them from the index
                graph.forget(snap)
            start = int(np.searchsorted(snap.rowids, graph.high_water, side="right"))
            if start >= len(snap.rowids):
                return True
            graph.add(snap, start, min(start + graph.step, len(snap.rowids)))
        return True

    def _still_registered(self, graph: Index) -> Callable[[], bool]:
        """Whether ``graph`` is still its collection's (not dropped with it), asked when saving."""
        def check() -> bool:
            with self._lock:
                return self._graphs.get(graph.identity.collection_pk) is graph
        return check

    def close(self) -> None:
        """Stop the thread and save the graphs that changed since they were saved."""
        with self._wake:
            self._stopped = True
            self._wake.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()
        if self.folder is None:
            return
        with self._lock:
            graphs = list(self._graphs.values())
        for graph in graphs:
            if graph.unsaved:
                with graph.lock:
                    try:
                        save(graph, self.folder, self._still_registered(graph))
                    except OSError as exc:  # the next process builds it again
                        log.warning("could not save the vector graph of collection %s: %s",
                                    graph.identity.collection_pk, exc)
