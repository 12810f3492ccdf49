"""Chroma's HNSW on the vectors of bench_search.py / bench_ann.py: p50 and recall@10 of a top-10 query.

Chroma is not a dependency of bunko: run this with a separate environment that has ``chromadb`` and
numpy (``python -m venv /tmp/chroma && /tmp/chroma/bin/pip install chromadb``), on the ``.npz`` that
``bench_ann.py --dump`` wrote (the same N x 512 chunk vectors and embedded questions, same seed)::

    python benchmarks/bench_ann.py --chunks 100000 --libraries --dump /tmp/v100k.npz
    /tmp/chroma/bin/python benchmarks/peer_chroma.py /tmp/v100k.npz [--ef 100 400] [--keep DIR] [--json]

The collection uses inner product (the vectors are unit length), M = 16 and ef_construction = 100
(Chroma's defaults; ef_search defaults to 100). One graph is built (or found in ``--keep DIR``), then
for each ``--ef`` (search breadth) its ef_search is set with ``collection.modify(configuration=...)``
and the questions are timed one at a time after 5 warm-up ones, as bench_search.py times bunko: wall
time (``p50_ms``) and the CPU time of the process (``cpu_p50_ms``, every thread; on a shared machine
it does not count the time the process waited for a core). Chroma 1.5 keeps a loaded graph in the
process with the ef_search it was loaded with, so the client's cache is cleared after each breadth
and the graph is read again from disk (during the warm-up questions).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

TOP_K = 10


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("vectors", help=".npz from bench_ann.py --dump")
    parser.add_argument("--ef", type=int, nargs="+", default=[100])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--keep", metavar="DIR",
                        help="keep the collection in DIR and reuse it on the next run (build once, e.g. on a "
                             "busy machine, then time the questions alone on a quiet one)")
    args = parser.parse_args(argv)
    import chromadb
    from chromadb.api.client import SharedSystemClient

    data = np.load(args.vectors)
    matrix, queries = data["matrix"], data["queries"]
    truths = []
    for q in queries:
        scores = matrix @ q
        part = np.argpartition(-scores, TOP_K)[:TOP_K]
        truths.append(set(part.tolist()))
    out: dict[str, object] = {"peer": "chroma", "version": chromadb.__version__, "chunks": len(matrix), "by_ef": {}}
    with tempfile.TemporaryDirectory() as temporary:
        path = args.keep or temporary
        client = chromadb.PersistentClient(path=path)
        collection = client.get_or_create_collection(
            "bench", configuration={"hnsw": {"space": "ip", "max_neighbors": 16, "ef_construction": 100,
                                             "ef_search": args.ef[0]}})
        started = time.perf_counter()
        step = 5000
        kept = collection.count()
        if kept not in (0, len(matrix)):
            raise SystemExit(f"{path} holds {kept:,} of {len(matrix):,} vectors in bench: delete it")
        for i in range(0, len(matrix) if not kept else 0, step):
            collection.add(ids=[str(j) for j in range(i, min(i + step, len(matrix)))],
                           embeddings=matrix[i:i + step])
        out["build_s"] = round(time.perf_counter() - started, 1) if not kept else None
        for ef in args.ef:
            SharedSystemClient.clear_system_cache()  # drop the loaded graph: it keeps its old ef_search
            collection = chromadb.PersistentClient(path=path).get_collection("bench")
            collection.modify(configuration={"hnsw": {"ef_search": ef}})
            times, cpu, recalls = [], [], []
            for i, q in enumerate(queries):
                t, c = time.perf_counter(), time.process_time()
                found = collection.query(query_embeddings=[q], n_results=TOP_K, include=[])
                elapsed, used = time.perf_counter() - t, time.process_time() - c
                if i >= 5:
                    times.append(elapsed)
                    cpu.append(used)
                    recalls.append(len(truths[i] & {int(x) for x in found["ids"][0]}) / TOP_K)
            p50 = float(np.percentile(np.asarray(times) * 1000, 50))
            result = {"p50_ms": round(p50, 2),
                      "cpu_p50_ms": round(float(np.percentile(np.asarray(cpu) * 1000, 50)), 2),
                      "recall_at_10": round(float(np.mean(recalls)), 4),
                      "load_average": [round(x, 2) for x in os.getloadavg()]}
            out["by_ef"][ef] = result  # type: ignore[index]
            print(json.dumps({ef: result}), file=sys.stderr, flush=True)
        SharedSystemClient.clear_system_cache()
    print(json.dumps(out) if args.json else json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
