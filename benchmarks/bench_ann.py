"""HNSW libraries side by side on bench_search.py's vectors: build time, memory, recall@10 and latency.

The same N x 512 chunk vectors and the same embedded questions as ``bench_search.py`` (same seed), so
the figures line up with the store's. For each library that is installed (``usearch``, ``faiss``,
``hnswlib``) an index is built over all N vectors (M = 16, ef_construction = 128, every core), then
each question is searched one at a time for the largest of ``--candidates`` neighbours, which are re-ranked by the
exact vectors (as the store does) before the top 10 are compared with the exact answer.

* ``build_s``: wall time of adding every vector;
* ``memory_mb``: the growth of the process's resident set over the build (the index, its vectors);
* ``p50_ms``: one search for the largest number of candidates plus their re-rank, after 5 warm-up
  questions; ``recall_at_10_by_candidates``: against the exact top 10 of the full-precision matrix,
  when the first c candidates are re-ranked;
* ``exact_scan_p50_ms``: ``matrix @ q`` + top-10 selection, the floor of an exact search.

Usage::

    python benchmarks/bench_ann.py --chunks 100000 [--libraries usearch-f32 usearch-i8-m32 faiss hnswlib]
        [--ef 64 128 256] [--candidates 10 50 100] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search import DATA, build_chunks, exact_ids, load_base

from bunko.embedders import UniversalSentenceEncoderEmbedder

TOP_K = 10


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _vectors(chunks: int, queries: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    paragraphs, questions = load_base(Path(DATA))
    sentences = sorted({s for p in paragraphs for s in p})
    cache = Path(tempfile.gettempdir()) / f"bunko-bench-search-{len(sentences)}.npy"
    embedder = UniversalSentenceEncoderEmbedder()
    loop = asyncio.new_event_loop()
    base = np.load(cache) if cache.exists() else np.asarray(
        loop.run_until_complete(embedder.embed_array(sentences)), dtype=np.float32)
    vectors = dict(zip(sentences, np.asarray(base, dtype=np.float32), strict=True))
    _texts, matrix = build_chunks(paragraphs, vectors, chunks, rng)
    rng.integers(0, 1000, size=chunks)  # bench_search.py's buckets: keep the generator in step
    picked = [questions[int(i)] for i in rng.choice(len(questions), size=queries + 5, replace=False)]
    qs = np.stack([np.asarray(loop.run_until_complete(embedder.embed_query(q)), dtype=np.float32) for q in picked])
    loop.close()
    return matrix, qs / np.linalg.norm(qs, axis=1, keepdims=True)


def _builder(name: str, dim: int, ef: int) -> tuple[Any, Any, Any]:
    """(add(matrix), search(q, k) -> row ids, set_ef(ef)) for one library."""
    if name.startswith("usearch"):
        from usearch.index import Index

        parts = name.split("-")  # usearch-<dtype>[-m<connectivity>][-e<expansion_add>]
        shape = {p[0]: int(p[1:]) for p in parts[2:]}
        index = Index(ndim=dim, metric="ip", dtype=parts[1], connectivity=shape.get("m", 16),
                      expansion_add=shape.get("e", 128), expansion_search=ef)

        def add(m: np.ndarray) -> None:
            index.add(np.arange(len(m), dtype=np.uint64), m, threads=os.cpu_count() or 1)

        def search(q: np.ndarray, k: int) -> np.ndarray:
            return np.asarray(index.search(q, k, threads=1).keys, dtype=np.int64)

        def set_ef(value: int) -> None:
            index.expansion_search = value

        return add, search, set_ef
    if name == "faiss":
        import faiss

        findex = faiss.IndexHNSWFlat(dim, 16, faiss.METRIC_INNER_PRODUCT)
        findex.hnsw.efConstruction = 128
        findex.hnsw.efSearch = ef

        def fadd(m: np.ndarray) -> None:
            findex.add(m)

        def fsearch(q: np.ndarray, k: int) -> np.ndarray:
            faiss.omp_set_num_threads(1)
            return np.asarray(findex.search(q[None, :], k)[1][0], dtype=np.int64)

        def fset(value: int) -> None:
            findex.hnsw.efSearch = value

        return fadd, fsearch, fset
    if name == "hnswlib":
        import hnswlib

        hindex = hnswlib.Index(space="ip", dim=dim)

        def hadd(m: np.ndarray) -> None:
            hindex.init_index(max_elements=len(m), M=16, ef_construction=128)
            hindex.set_ef(ef)
            hindex.add_items(m, np.arange(len(m)), num_threads=os.cpu_count() or 1)

        def hsearch(q: np.ndarray, k: int) -> np.ndarray:
            return np.asarray(hindex.knn_query(q, k, num_threads=1)[0][0], dtype=np.int64)

        return hadd, hsearch, hindex.set_ef
    raise SystemExit(f"unknown library {name}")


def measure(name: str, matrix: np.ndarray, qs: np.ndarray, candidates: list[int], efs: list[int]) -> dict[str, Any]:
    try:
        add, search, set_ef = _builder(name, matrix.shape[1], efs[0])
    except ImportError as exc:
        return {"library": name, "skipped": str(exc)}
    before = _rss_mb()
    started = time.perf_counter()
    add(matrix)
    build_s = time.perf_counter() - started
    out: dict[str, Any] = {"library": name, "build_s": round(build_s, 2),
                           "memory_mb": round(_rss_mb() - before, 1), "by_ef": {}}
    truths = [set(exact_ids(matrix, q).tolist()) for q in qs]
    for ef in efs:
        set_ef(ef)
        times = []
        recalls: dict[int, list[float]] = {c: [] for c in candidates}
        for i, q in enumerate(qs):
            t = time.perf_counter()
            keys = search(q, max(*candidates, TOP_K))
            keys = keys[keys >= 0]
            scores = matrix[keys] @ q
            top = keys[np.argsort(-scores)[:TOP_K]]
            elapsed = time.perf_counter() - t
            if i < 5:
                continue
            times.append(elapsed)
            for c in candidates:  # the first c candidates re-ranked
                head = keys[:c]
                best = head[np.argsort(-(matrix[head] @ q))[:TOP_K]]
                recalls[c].append(len(truths[i] & set(best.tolist())) / TOP_K)
        out["by_ef"][ef] = {"p50_ms": round(float(np.percentile(np.asarray(times) * 1000, 50)), 3),
                            "recall_at_10_by_candidates": {c: round(float(np.mean(r)), 4)
                                                           for c, r in recalls.items()}}
        del top
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--candidates", type=int, nargs="+", default=[10, 20, 50, 100, 200],
                        help="neighbours asked for, then re-ranked (p50 is for the largest)")
    parser.add_argument("--ef", type=int, nargs="+", default=[64, 128, 256])
    parser.add_argument("--libraries", nargs="*", default=["usearch-f32", "usearch-f16", "usearch-i8", "faiss",
                                                           "hnswlib"])
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--dump", default=None, help="also save the vectors and questions here (.npz) for peers")
    args = parser.parse_args(argv)
    matrix, qs = _vectors(args.chunks, args.queries, args.seed)
    if args.dump:
        np.savez(args.dump, matrix=matrix, queries=qs)
        if not args.libraries:
            return 0
    scan = []
    for q in qs:
        t = time.perf_counter()
        exact_ids(matrix, q)
        scan.append(time.perf_counter() - t)
    results = {"chunks": args.chunks, "candidates": args.candidates,
               "exact_scan_p50_ms": round(float(np.percentile(np.asarray(scan[5:]) * 1000, 50)), 2),
               "libraries": []}
    for name in args.libraries:
        result = measure(name, matrix, qs, args.candidates, args.ef)
        result["load_average"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(result), file=sys.stderr, flush=True)
        results["libraries"].append(result)
    print(json.dumps(results) if args.json else json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
