"""Keyword and hybrid search latency over 100k chunks on each backend (issue 5).

Builds the same synthetic collection as ``bench_postgres.py`` (N chunks of 200-300
characters of mixed Japanese/English text, clustered 512-d vectors) in the embedded
store and in PostgreSQL (a throwaway server, or ``--url``), then times
per backend:

* ``keyword``: ``store.keyword_search`` (BM25 / full-text rank over the analyzed text);
* ``vector``: ``store.query`` (for reference);
* ``hybrid``: both legs at the depth a hybrid search uses (3 x top_k) and the fusion the
  Retriever applies (``bunko.retrieval.fuse`` with the default fusion) -- the query vector is
  precomputed, so the figure is the store's share, not the embedding of the question.

Queries are 1-3 words drawn from the corpus vocabulary (Japanese and English), top_k = 10.

Usage::

    python benchmarks/bench_search_modes.py [--n 100000] [--queries 200] [--backends sqlite postgres] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_postgres import (
    _WORDS,
    _normalise,
    _Server,
    clustered_vectors,
    ingest_batches,
    make_documents,
)

from bunko.search import DEFAULT_FUSION, HYBRID_DEPTH, fuse, keyword_query, vector_query
from bunko.stores import open_backend
from bunko.types import EmbedderInfo

TOP_K = 10
INFO = EmbedderInfo("bench", "synthetic", 512)


def _stats(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2)}


def run_backend(url: str, documents: list, queries: list[str], vectors: np.ndarray) -> dict[str, Any]:
    backend = open_backend(url)
    try:
        store = backend.for_tenant("bench")
        store.ensure_collection("bench", INFO)
        started = time.perf_counter()
        with store.bulk_load("bench"):
            for batch in ingest_batches(documents):
                store.write_documents("bench", batch)
        load_s = time.perf_counter() - started
        for q, v in zip(queries[:5], vectors[:5], strict=True):  # warm caches
            keyword_query(store, "bench", q, TOP_K)
            vector_query(store, "bench", v, TOP_K)
        timings: dict[str, list[float]] = {"keyword": [], "vector": [], "hybrid": []}
        found = 0
        for q, v in zip(queries, vectors, strict=True):
            t = time.perf_counter()
            hits = keyword_query(store, "bench", q, TOP_K)
            timings["keyword"].append(time.perf_counter() - t)
            found += bool(hits)
            t = time.perf_counter()
            vector_query(store, "bench", v, TOP_K)
            timings["vector"].append(time.perf_counter() - t)
            t = time.perf_counter()
            depth = TOP_K * HYBRID_DEPTH
            semantic = vector_query(store, "bench", v, depth)
            keyword = keyword_query(store, "bench", q, depth)
            fuse([("vector", DEFAULT_FUSION.vector_weight, semantic),
                  ("keyword", DEFAULT_FUSION.keyword_weight, keyword)], TOP_K, DEFAULT_FUSION)
            timings["hybrid"].append(time.perf_counter() - t)
        return {"load_s": round(load_s, 1), "queries_with_keyword_hits": found,
                **{mode: _stats(samples) for mode, samples in timings.items()}}
    finally:
        backend.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--backends", nargs="+", default=["sqlite", "postgres"], choices=["sqlite", "postgres"])
    parser.add_argument("--url", default=None, help="PostgreSQL URL (default: a throwaway server)")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    centroids = _normalise(rng.standard_normal((1000, 512)).astype(np.float32))
    documents = make_documents(clustered_vectors(args.n, centroids, 1.0, rng), rng, "modes")
    words = [w for w in _WORDS if len(w) > 1]
    queries = [" ".join(rng.choice(words, size=int(rng.integers(1, 4)), replace=False)) for _ in range(args.queries)]
    query_vectors = clustered_vectors(args.queries, centroids, 1.0, rng)
    report: dict[str, Any] = {"n": args.n, "queries": args.queries, "top_k": TOP_K, "fusion": DEFAULT_FUSION.to_dict()}
    for name in args.backends:
        print(f"{name}: loading {args.n:,} chunks ...", file=sys.stderr, flush=True)
        if name == "sqlite":
            with tempfile.TemporaryDirectory() as folder:
                report[name] = run_backend(f"sqlite:///{folder}/modes.db", documents, queries, query_vectors)
        else:
            server = _Server(args.url)
            try:
                report[name] = run_backend(server.url, documents, queries, query_vectors)
            finally:
                server.close()
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
        return 0
    print(f"N = {args.n:,} chunks, {args.queries} queries, top_k = {TOP_K}, fusion {DEFAULT_FUSION.to_dict()}")
    print(f"{'backend':<10}{'mode':<10}{'p50 ms':>10}{'p95 ms':>10}")
    for name in args.backends:
        for mode in ("keyword", "vector", "hybrid"):
            r = report[name][mode]
            print(f"{name:<10}{mode:<10}{r['p50_ms']:>10}{r['p95_ms']:>10}")
        print(f"{name:<10}(load {report[name]['load_s']} s, {report[name]['queries_with_keyword_hits']} queries "
              "with keyword hits)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
