"""Measure hybrid fusion settings on BEIR datasets: the evidence behind bunko's hybrid defaults.

For each dataset the corpus is ingested once (bundled embedder, embedded store, default
analyzer), then every judged query runs once per leg (vector and keyword) at the depth a
hybrid search uses, and each fusion setting is scored offline with the same ``fuse``
function the Retriever calls: nDCG@10 and recall@10 per setting, next to the single legs.

Usage::

    python benchmarks/fusion_sweep.py ../shared/data/jsquad-dev ../shared/data/cranfield [--json]

Settings swept: RRF with k in {5, 10, 15, 20, 30, 40, 60}, and min-max score fusion with the weakest hit's
floor in {0, 0.1, 0.2, 0.3, 0.5}; vector weight from 0 to 1 in steps of 0.1 (keyword weight =
1 - vector weight). ``--save FILE`` keeps the captured legs (pickle) and ``--load FILE`` scores
them again without ingesting.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pickle
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from bunko import Bunko
from bunko.evaluation import (
    CHUNKS_PER_DOCUMENT,
    MAX_CHUNKS,
    ingest_corpus,
    judged_queries,
    load_beir,
    ndcg_at_k,
    rank_documents,
    recall_at_k,
)
from bunko.search import HYBRID_DEPTH, Fusion, fuse

TOP_K = 10
FETCH = min(MAX_CHUNKS, CHUNKS_PER_DOCUMENT * TOP_K)  # what `bunko eval` asks a search for
DEPTH = min(100, FETCH * HYBRID_DEPTH)  # what each hybrid leg fetches for it


async def capture(path: str) -> dict[str, Any]:
    dataset = load_beir(path)
    with tempfile.TemporaryDirectory() as folder, Bunko(f"sqlite:///{folder}/sweep.db") as engine:
        tenant = engine.tenant("sweep")
        corpus_ids, _ = await ingest_corpus(tenant, "sweep", dataset)
        runs = []
        for qid, text in judged_queries(dataset):
            judged = dataset.qrels[qid]
            vector = (await tenant.asearch(text, "sweep", top_k=DEPTH, mode="vector")).results
            keyword = (await tenant.asearch(text, "sweep", top_k=DEPTH, mode="keyword")).results
            runs.append((judged, vector, keyword))
    return {"name": dataset.name, "corpus_ids": corpus_ids, "runs": runs}


def score(captured: dict[str, Any], fusion: Fusion | None, leg: str | None = None) -> tuple[float, float]:
    ndcg, recall = [], []
    for judged, vector, keyword in captured["runs"]:
        if leg == "vector":
            hits = vector[:FETCH]
        elif leg == "keyword":
            hits = keyword[:FETCH]
        else:
            assert fusion is not None
            legs = [("vector", fusion.vector_weight, vector), ("keyword", fusion.keyword_weight, keyword)]
            hits = fuse(legs, FETCH, fusion)
        ranked = rank_documents(hits, captured["corpus_ids"], TOP_K)
        ndcg.append(ndcg_at_k(ranked, judged, 10))
        recall.append(recall_at_k(ranked, judged, 10))
    return round(float(np.mean(ndcg)), 4), round(float(np.mean(recall)), 4)


def settings() -> list[Fusion]:
    out = []
    for method, k, floor in (("rrf", 60, 0.0), ("rrf", 40, 0.0), ("rrf", 30, 0.0), ("rrf", 20, 0.0),
                             ("rrf", 15, 0.0), ("rrf", 10, 0.0), ("rrf", 5, 0.0),
                             ("score", 60, 0.0), ("score", 60, 0.1), ("score", 60, 0.2), ("score", 60, 0.3),
                             ("score", 60, 0.5)):
        for tenth in range(0, 11):
            w = tenth / 10
            out.append(Fusion(method, w, round(1 - w, 1), k, floor))
    return out


def label(fusion: Fusion) -> str:
    """A setting's row name."""
    how = f"rrf(k={fusion.k})" if fusion.method == "rrf" else f"score(floor={fusion.floor})"
    return f"{how} v={fusion.vector_weight} kw={fusion.keyword_weight}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--save", metavar="FILE", help="keep the captured legs in FILE (pickle)")
    parser.add_argument("--load", metavar="FILE", help="score legs captured earlier with --save")
    args = parser.parse_args(argv)
    for path in args.datasets:
        if not Path(path).is_dir():
            parser.error(f"{path}: no such dataset folder (the evaluation sets live in ../shared/data)")
    report: dict[str, Any] = {}
    saved: dict[str, Any] = {}
    if args.load:
        with open(args.load, "rb") as handle:
            saved = pickle.load(handle)  # a file this script wrote
    for path in args.datasets:
        if path in saved:
            captured = saved[path]
        else:
            print(f"capturing {path} ...", file=sys.stderr, flush=True)
            captured = saved[path] = asyncio.run(capture(path))
            if args.save:
                with open(args.save, "wb") as handle:
                    pickle.dump(saved, handle)
        rows = {"vector": score(captured, None, "vector"), "keyword": score(captured, None, "keyword")}
        for fusion in settings():
            rows[label(fusion)] = score(captured, fusion)
        report[captured["name"]] = {"queries": len(captured["runs"]), "ndcg@10/recall@10": rows}
    if args.json:
        print(json.dumps(report, ensure_ascii=False, indent=2))
        return 0
    names = list(report)
    print(f"{'setting':<40}" + "".join(f"{n:>26}" for n in names))
    for row in report[names[0]]["ndcg@10/recall@10"]:
        pairs = [report[n]["ndcg@10/recall@10"][row] for n in names]
        cells = "".join(f"{f'{ndcg:.4f} / {recall:.4f}':>26}" for ndcg, recall in pairs)
        print(f"{row:<40}{cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
