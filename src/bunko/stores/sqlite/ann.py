"""Approximate nearest neighbours for the embedded store: one HNSW graph per collection (usearch).

Above ``ann_min_rows`` chunks an unfiltered vector search asks a collection's graph for candidates
and re-ranks them, together with the rows the graph does not hold yet, by the exact vectors of the
in-memory matrix (:mod:`bunko.stores.sqlite.matrix`); below it, and for every filtered search, the
exact scan stays. The graph is a second index over the matrix's rows, keyed by chunk row id, and a
background thread (:class:`Maintainer`, one per backend) keeps it in step:

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
Without the ``ann`` extra (usearch) nothing here runs and searches stay exact.
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

HAVE_ANN = _usearch is not None
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


class Graph:
    """One collection's HNSW graph over its chunk row ids."""

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

    def __len__(self) -> int:
        return len(self.index)


def _files(folder: Path, identity: Identity) -> tuple[Path, Path]:
    stem = folder / f"t{identity.tenant_pk}-c{identity.collection_pk}"
    return stem.with_suffix(".usearch"), stem.with_suffix(".json")


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


def save(graph: Graph, folder: Path, still_wanted: Callable[[], bool] = lambda: True) -> None:
    """Write the graph and its identity beside the database (atomically: a reader sees the old or the new),
    if ``still_wanted()`` (its collection was not dropped meanwhile)."""
    with _FILES:
        if not still_wanted():
            return
        folder.mkdir(parents=True, exist_ok=True)
        index_path, meta_path = _files(folder, graph.identity)
        tmp = index_path.with_suffix(f".tmp{os.getpid()}")
        graph.index.save(str(tmp))
        os.replace(tmp, index_path)
        meta = {**graph.identity.as_dict(), "high_water": graph.high_water, "size": len(graph.index),
                "removed": graph.removed, "dtype": DTYPE, "connectivity": CONNECTIVITY}
        tmp_meta = meta_path.with_suffix(f".tmp{os.getpid()}")
        tmp_meta.write_text(json.dumps(meta), encoding="utf-8")
        os.replace(tmp_meta, meta_path)
        graph.unsaved = 0


def load(folder: Path, identity: Identity, ef_search: int) -> Graph | None:
    """The saved graph of this collection, or None (none saved, another collection's, or unreadable)."""
    index_path, meta_path = _files(folder, identity)
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or any(meta.get(k) != v for k, v in identity.as_dict().items()) or (
            meta.get("dtype"), meta.get("connectivity")) != (DTYPE, CONNECTIVITY):
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

    def __init__(self, folder: Path | None, config: AnnConfig, graphs: dict[int, Graph], lock: threading.Lock,
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
        with self._lock:
            graph = self._graphs.get(pk)
        if graph is not None and graph.identity != identity:
            graph = None  # the row id now names another collection
        if graph is None:
            graph = (load(self.folder, identity, self.config.ef_search) if self.folder is not None else None) \
                or Graph(identity, self.config.ef_search)
            with self._lock:
                self._graphs[pk] = graph
        if not self._catch_up(graph, pk):
            return
        if graph.removed * 4 > len(graph) > 0:
            # Removed nodes stay in the graph as tombstones that searches walk through: past a quarter of
            # the live rows, a new graph is built (the old one answers meanwhile) and takes its place.
            fresh = Graph(identity, self.config.ef_search)
            if not self._catch_up(fresh, pk):
                return
            with self._lock:
                if self._graphs.get(pk) is not graph:
                    return
                self._graphs[pk] = graph = fresh
        if self.folder is not None and graph.unsaved >= max(1000, len(graph) // 10):
            with graph.lock:
                save(graph, self.folder, self._still_registered(graph))

    def _catch_up(self, graph: Graph, pk: int) -> bool:
        """Add the matrix's new rows to ``graph`` and remove the ones gone, until it is in step (True) or the
        maintainer stops (True); False when the process no longer holds the collection."""
        while not self._stopped:
            snap = self._snapshot(pk)
            if snap is None:
                with self._lock:
                    if self._graphs.get(pk) is graph:
                        del self._graphs[pk]
                return False
            if snap.state[0] != graph.mutation_seq:  # rows went away: remove them from the graph
                with graph.lock:
                    keys = np.asarray(graph.index.keys, dtype=np.int64)
                    gone = keys[~np.isin(keys, snap.rowids)]
                    if len(gone):
                        graph.index.remove(gone.astype(np.uint64))
                        graph.unsaved += len(gone)
                        graph.removed += len(gone)
                    graph.mutation_seq = snap.state[0]
            start = int(np.searchsorted(snap.rowids, graph.high_water, side="right"))
            if start >= len(snap.rowids):
                return True
            stop = min(start + _STEP, len(snap.rowids))
            with graph.lock:
                graph.index.add(snap.rowids[start:stop].astype(np.uint64), snap.vectors[start:stop],
                                threads=os.cpu_count() or 1)
                graph.high_water = int(snap.rowids[stop - 1])
                graph.unsaved += stop - start
        return True

    def _still_registered(self, graph: Graph) -> Callable[[], bool]:
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
