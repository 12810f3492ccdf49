"""The SQLite store's IVF lists (``bunko.stores.sqlite.ann.Lists``) on their own, on a ``bench_ann.py --dump`` file.

Builds the store's own lists over the first ``--rows`` vectors of the ``.npz`` (``matrix``, ``queries``)
as its maintainer does (100,000 rows a step), then, for each ``share:count`` given, times each question
(after 5 warm-up ones) as the store searches: the lists' candidates (the probed lists' int8 codes scored,
the best ``count`` kept; with ``--exact`` also the same lists scored exactly, as without numkong), then
those ranked by the exact vectors. Prints JSON lines: the build, then per share and count the wall and
search-thread CPU p50 / p99 and recall@10 against the exact top 10 (the thread's CPU time does not count
the time a loaded machine kept it waiting)::

    python benchmarks/bench_lists.py /tmp/v1m.npz --rows 300000 0.04:100 0.08:100 0.08:200 --exact
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import time

import numpy as np

from bunko.stores.sqlite.ann import AnnConfig, Identity, Lists
from bunko.stores.sqlite.matrix import Snapshot, score_rows, top_indices

TOP_K = 10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("vectors", help=".npz from bench_ann.py --dump")
    parser.add_argument("runs", nargs="+", help="share:count, e.g. 0.08:100")
    parser.add_argument("--rows", type=int, default=0, help="the first N vectors (default: all)")
    parser.add_argument("--exact", action="store_true", help="also score the probed lists exactly")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    with np.load(args.vectors) as data:
        matrix, queries = data["matrix"], data["queries"]
    if args.rows:
        matrix = matrix[:args.rows].copy()
    matrix /= np.linalg.norm(matrix, axis=1, keepdims=True)
    n = len(matrix)
    snap = Snapshot(np.arange(1, n + 1, dtype=np.int64), np.zeros(n, dtype=np.int64), matrix, (0, n))
    identity = Identity(1, 1, "bench", "now", matrix.shape[1])
    lists = Lists(identity)
    started = time.perf_counter()
    for start in range(0, n, lists.step):
        lists.add(snap, start, min(n, start + lists.step))
    print(json.dumps({"rows": n, "lists": len(lists.centres), "build_s": round(time.perf_counter() - started, 1),
                      "far_rows_extra_entries": lists.extra,
                      "memory_mb": round(lists.memory_bytes / 2**20, 1), "load": os.getloadavg()[0]}), flush=True)
    exact = Lists(identity, compact=False)  # the same lists, scored exactly
    exact.centres, exact.keys, exact.starts, exact.positions = lists.centres, lists.keys, lists.starts, lists.positions
    exact.mutation_seq, exact.high_water = lists.mutation_seq, lists.high_water
    truths = [set(np.argpartition(-(matrix @ q), TOP_K)[:TOP_K].tolist()) for q in queries]
    runs = [(float(share), int(count)) for share, count in (run.split(":") for run in args.runs)]
    for round_ in range(args.rounds):
        for share, count in runs:
            for path, index in (("codes", lists), ("exact", exact)):
                if path == "exact" and (not args.exact or round_):
                    continue
                walls, cpus, recalls = [], [], []
                for i, q in enumerate(queries):
                    t, c = time.perf_counter(), time.thread_time()
                    found = index.candidates(snap, q, count, 1.0, AnnConfig(probe_share=share))
                    assert found is not None
                    positions = found[0]
                    best = positions[top_indices(score_rows(matrix, positions, q), TOP_K)]
                    wall, cpu = time.perf_counter() - t, time.thread_time() - c
                    if i >= 5:
                        walls.append(wall)
                        cpus.append(cpu)
                        recalls.append(len(truths[i] & set(best.tolist())) / TOP_K)
                print(json.dumps({"round": round_, "path": path, "share": share, "count": count,
                                  "p50_ms": round(float(np.median(walls)) * 1000, 2),
                                  "p99_ms": round(float(np.percentile(walls, 99)) * 1000, 2),
                                  "cpu_p50_ms": round(float(np.median(cpus)) * 1000, 2),
                                  "cpu_p99_ms": round(float(np.percentile(cpus, 99)) * 1000, 2),
                                  "recall_at_10": round(float(np.mean(recalls)), 4),
                                  "load": os.getloadavg()[0]}), flush=True)
    print(json.dumps({"peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
