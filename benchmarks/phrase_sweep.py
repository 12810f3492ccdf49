"""Measure phrase and proximity settings of the keyword leg on BEIR datasets: the evidence behind
``bunko.search.keyword.PROXIMITY``.

For each dataset the corpus is ingested once as ``bunko eval`` ingests it (bundled embedder, SQLite,
default analyzer, each entry's title in its metadata), then every judged query runs once per leg at
the depth ``bunko eval`` asks for: the vector leg, and the keyword leg by BM25 alone over its best 100
chunks, recording for each its in-order share, its near share at windows 4, 8 and 16, its document's
title share and its document (``proximity_shares``, ``title_share``). Each setting is then scored
offline with ``rescore``'s arithmetic and the title leg as ``keyword_legs`` builds it, fused by the
same ``fuse_keys`` the search calls: nDCG@10 and recall@10 per setting, keyword and hybrid, the first
row being BM25 alone (the ranking before).

Usage::

    python benchmarks/phrase_sweep.py ../shared/data/cranfield ../shared/data/jsquad-dev --save legs.pkl
    python benchmarks/phrase_sweep.py ../shared/data/cranfield ../shared/data/jsquad-dev --load legs.pkl \
        --grid 0.2,0,8      # the title weights over phrase 0.2, near 0, window 8
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
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
from bunko.search import DEFAULT_FUSION, HYBRID_DEPTH, keyword
from bunko.search.fusion import fuse_keys
from bunko.search.keyword import Candidates, Proximity, Query, proximity_shares

TOP_K = 10
FETCH = min(MAX_CHUNKS, CHUNKS_PER_DOCUMENT * TOP_K)  # what `bunko eval` asks a search for
DEPTH = min(MAX_CHUNKS, FETCH * HYBRID_DEPTH)  # what each hybrid leg fetches for it
CAPTURE = 100


WINDOWS = (4, 8, 16)


async def capture(path: str) -> dict[str, Any]:
    dataset = load_beir(path)
    recorded: list[Any] = []
    original = keyword.rescore

    def record(candidates: Candidates, query: Query, how: Proximity) -> np.ndarray:
        # Per candidate: BM25, its in-order share, its near share at each window, its title share, its document.
        table = np.zeros((len(candidates.scores), 4 + len(WINDOWS)))
        table[:, 0] = candidates.scores
        for i, sequence in enumerate(candidates.tokens):
            for w, window in enumerate(WINDOWS):
                ordered, near = proximity_shares(sequence, query.pairs, window) if query.pairs else (0.0, 0.0)
                table[i, 1] = ordered
                table[i, 2 + w] = near
        table[:, 2 + len(WINDOWS)] = candidates.titles
        table[:, 3 + len(WINDOWS)] = candidates.documents
        recorded.append(table)
        return np.asarray(candidates.scores, dtype=np.float64)

    keyword.rescore = record  # type: ignore[assignment]
    keyword.PROXIMITY = Proximity(1.0, 0.0, 8, CAPTURE, title=1.0)  # every query re-scored (by the recorder)
    try:
        with tempfile.TemporaryDirectory() as folder, Bunko(f"sqlite:///{folder}/sweep.db") as engine:
            tenant = engine.tenant("sweep")
            corpus_ids, _ = await ingest_corpus(tenant, "sweep", dataset)
            runs = []
            for qid, text in judged_queries(dataset):
                judged = dataset.qrels[qid]
                vector = (await tenant.asearch(text, "sweep", top_k=DEPTH, mode="vector")).results
                recorded.clear()
                hits = (await tenant.asearch(text, "sweep", top_k=CAPTURE, mode="keyword")).results
                runs.append((judged, [(h.chunk_id, h.source) for h in vector], [(h.chunk_id, h.source) for h in hits],
                             recorded[0] if recorded else None))
    finally:
        keyword.rescore = original  # type: ignore[assignment]
    return {"name": dataset.name, "corpus_ids": corpus_ids, "runs": runs}


class _Hit:
    __slots__ = ("chunk_id", "source")

    def __init__(self, chunk_id: str, source: str) -> None:
        self.chunk_id, self.source = chunk_id, source


def legs(keys: list[tuple[str, str]], table: Any, how: Proximity | None,
         top_k: int) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """The keyword leg's ``top_k`` under ``how`` and its title leg, as ``keyword_legs`` computes them from
    BM25's candidates (``rescore``'s arithmetic on the shares recorded once)."""
    if how is None or table is None:
        return keys[:top_k], []
    n = min(len(keys), max(top_k, how.candidates))
    near = table[:n, 2 + WINDOWS.index(how.window)]
    titles = table[:n, 2 + len(WINDOWS)]
    boost = 1.0 + (how.phrase * table[:n, 1] + how.near * near)
    new = table[:n, 0] * (boost + how.title * titles)
    best = np.lexsort((np.arange(n), -new))
    seen: set[float] = set()
    found = []
    for i in best.tolist():
        document = table[i, 3 + len(WINDOWS)]
        if titles[i] > 0 and document not in seen:
            seen.add(document)
            found.append((i, titles[i]))
    found.sort(key=lambda item: -item[1])
    return [keys[i] for i in best[:top_k]], [keys[i] for i, _ in found[:top_k]]


def score(captured: dict[str, Any], how: Proximity | None) -> tuple[float, float, float, float]:
    out: dict[str, list[list[float]]] = {"keyword": [[], []], "hybrid": [[], []]}
    for judged, vector, keys, table in captured["runs"]:
        kw, _ = legs(keys, table, how, FETCH)
        deep, titled = legs(keys, table, how, DEPTH)
        ranked_legs = [("vector", DEFAULT_FUSION.vector_weight, [k for k, _ in vector], [0.0] * len(vector)),
                       ("keyword", DEFAULT_FUSION.keyword_weight, [k for k, _ in deep], [0.0] * len(deep))]
        if how is not None and how.title_leg and titled:
            ranked_legs.append(("title", DEFAULT_FUSION.keyword_weight * how.title_leg, [k for k, _ in titled],
                                [0.0] * len(titled)))
        fused = fuse_keys(ranked_legs, FETCH, DEFAULT_FUSION)
        source = dict(vector) | dict(keys)
        for mode, ranked_keys in (("keyword", [k for k, _ in kw]), ("hybrid", [k for k, _, _ in fused])):
            hits = [_Hit(k, source[k]) for k in ranked_keys]
            ranked = rank_documents(hits, captured["corpus_ids"], TOP_K)  # type: ignore[arg-type]
            out[mode][0].append(ndcg_at_k(ranked, judged, 10))
            out[mode][1].append(recall_at_k(ranked, judged, 10))
    return tuple(round(float(np.mean(v)), 4) for m in ("keyword", "hybrid") for v in out[m])  # type: ignore[return-value]


def settings(grid: str) -> list[Proximity | None]:
    out: list[Proximity | None] = [None]
    if grid == "phrase":
        for phrase, near, window in itertools.product((0.0, 0.1, 0.2, 0.3, 0.5, 1.0), (0.0, 0.05, 0.1, 0.2),
                                                      (4, 8, 16)):
            if phrase == near == 0.0 or (near == 0.0 and window != 8):
                continue
            out.append(Proximity(phrase, near, window, 30))
    else:
        phrase, near, window = (float(x) for x in grid.split(","))
        for title, title_leg in itertools.product((0.0, 0.3, 0.5, 0.75, 1.0, 1.5), (0.0, 0.05, 0.075, 0.1, 0.2)):
            out.append(Proximity(phrase, near, int(window), 30, title, title_leg))
    return out


def label(how: Proximity | None) -> str:
    """A setting's row name."""
    if how is None:
        return "BM25 alone"
    return (f"phrase={how.phrase} near={how.near} window={how.window} title={how.title} "
            f"title_leg={how.title_leg}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("datasets", nargs="+")
    parser.add_argument("--save", metavar="FILE", help="keep the captured legs in FILE (pickle)")
    parser.add_argument("--load", metavar="FILE", help="score legs captured earlier with --save")
    parser.add_argument("--grid", default="phrase",
                        help='"phrase" (phrase, near, window), or "PHRASE,NEAR,WINDOW" to sweep the title weights')
    args = parser.parse_args(argv)
    saved: dict[str, Any] = {}
    if args.load:
        with open(args.load, "rb") as handle:
            saved = pickle.load(handle)  # a file this script wrote
    for path in args.datasets:
        if path not in saved:
            if not Path(path).is_dir():
                parser.error(f"{path}: no such dataset folder (the evaluation sets live in ../shared/data)")
            print(f"capturing {path} ...", file=sys.stderr, flush=True)
            saved[path] = asyncio.run(capture(path))
            if args.save:
                with open(args.save, "wb") as handle:
                    pickle.dump(saved, handle)
    names = [saved[p]["name"] for p in args.datasets]
    print(f"{'setting':<64}" + "".join(f"{n + ' kw / hy nDCG (R@10)':>44}" for n in names))
    for how in settings(args.grid):
        cells = ""
        for path in args.datasets:
            kn, kr, hn, hr = score(saved[path], how)
            cells += f"{f'{kn:.4f} ({kr:.4f}) / {hn:.4f} ({hr:.4f})':>44}"
        print(f"{label(how):<64}{cells}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
