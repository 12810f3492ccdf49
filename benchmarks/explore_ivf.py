"""Exploration, not used by bunko: IVF lists over an in-memory matrix, scored exactly inside the probed lists.

On the ``.npz`` that ``bench_ann.py --dump`` writes (bench_search.py's vectors and questions): a k-means
of the vectors into ``--lists`` lists (from a sample of 50 rows per list, 8 rounds, then every row
assigned), the matrix sorted by list, and for each question the ``--probe`` lists whose centres are
nearest scored exactly by ``matrix[a:b] @ q`` slices. Prints the build time, then p50 and recall@10
against the exact top 10 for each number of lists probed (docs/ARCHITECTURE.md, *Approximate vector
search on SQLite*, a million chunks)::

    python benchmarks/explore_ivf.py /tmp/v1m.npz --lists 1000 --probe 40 20 10 40 80
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

TOP_K = 10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("vectors", help=".npz from bench_ann.py --dump")
    parser.add_argument("--lists", type=int, default=1000)
    parser.add_argument("--probe", type=int, nargs="+", default=[10, 20, 40, 80])
    args = parser.parse_args(argv)
    data = np.load(args.vectors)
    matrix, queries = data["matrix"], data["queries"]
    n = len(matrix)
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    sample = matrix[rng.choice(n, min(n, 50 * args.lists), replace=False)]
    centres = sample[rng.choice(len(sample), args.lists, replace=False)].copy()
    for _ in range(8):
        nearest = np.argmax(sample @ centres.T, axis=1)
        for j in range(args.lists):
            members = sample[nearest == j]
            if len(members):
                total = members.sum(0)
                centres[j] = total / np.linalg.norm(total)
    assign = np.empty(n, dtype=np.int64)
    for i in range(0, n, 50_000):
        assign[i:i + 50_000] = np.argmax(matrix[i:i + 50_000] @ centres.T, axis=1)
    order = np.argsort(assign, kind="stable")
    by_list = matrix[order]
    starts = np.searchsorted(assign[order], np.arange(args.lists + 1))
    print(json.dumps({"lists": args.lists, "build_s": round(time.perf_counter() - started, 1),
                      "largest_list": int(np.diff(starts).max())}), flush=True)
    truths = [set(np.argpartition(-(matrix @ q), TOP_K)[:TOP_K].tolist()) for q in queries]
    for probe in args.probe:
        times, recalls = [], []
        for i, q in enumerate(queries):
            t = time.perf_counter()
            picked = np.sort(np.argpartition(-(centres @ q), probe)[:probe])
            scores = np.concatenate([by_list[starts[j]:starts[j + 1]] @ q for j in picked])
            rows = np.concatenate([np.arange(starts[j], starts[j + 1]) for j in picked])
            top = rows[np.argpartition(-scores, TOP_K)[:TOP_K]]
            elapsed = time.perf_counter() - t
            if i >= 5:
                times.append(elapsed)
                recalls.append(len(truths[i] & set(order[top].tolist())) / TOP_K)
        print(json.dumps({"probe": probe, "p50_ms": round(float(np.median(times)) * 1000, 2),
                          "recall_at_10": round(float(np.mean(recalls)), 4),
                          "load_average": round(os.getloadavg()[0], 2)}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
