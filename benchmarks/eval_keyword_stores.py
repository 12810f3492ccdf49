"""Keyword quality of the stores themselves, without the embedder: nDCG@10 and recall@10 of
``store.keyword_search`` on a BEIR-style dataset, per store and analyzer.

Each corpus document (title + text, one chunk, no splitting) is written to a fresh collection
with a placeholder vector, and every judged query runs through the store's BM25, exactly as a
keyword search does. ``bunko eval --mode keyword`` is the end-to-end figure (with chunking); this
one compares stores and analyzers in seconds and shows that PostgreSQL's pruned BM25 ranks as
SQLite's FTS5. With ``--store postgres`` and no ``--database-url`` a throwaway server is used.

Usage::

    python benchmarks/eval_keyword_stores.py ../shared/data/cranfield --store sqlite postgres \
        --analyzers combined combined_en
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
from bench_postgres import _Server

from bunko.evaluation import load_beir, ndcg_at_k, recall_at_k
from bunko.search import keyword_query
from bunko.stores import open_backend
from bunko.stores.base import ChunkWrite, DocumentWrite
from bunko.types import EmbedderInfo, new_id

INFO = EmbedderInfo("eval", "placeholder", 4)


def measure(url: str, dataset: Any, analyzer: str) -> dict[str, float]:
    backend = open_backend(url)
    try:
        store = backend.for_tenant("eval")
        collection = f"eval_{analyzer}"
        store.ensure_collection(collection, INFO, analyzer=analyzer)
        ids = list(dataset.corpus)
        vector = np.ones((1, 4), dtype=np.float32)
        batch = []
        for doc_id in ids:
            title, text = dataset.corpus[doc_id]
            content = f"{title}\n{text}" if title else text
            batch.append(DocumentWrite(new_id(), doc_id, doc_id, {"corpus_id": doc_id},
                                       [ChunkWrite(new_id(), content, 0, 0, len(content), 0, {})], vector))
            if len(batch) == 500:
                store.write_documents(collection, batch)
                batch = []
        if batch:
            store.write_documents(collection, batch)
        ndcg, recall, times = [], [], []
        for qid, judged in dataset.qrels.items():
            started = time.perf_counter()
            hits = keyword_query(store, collection, dataset.queries[qid], 10)
            times.append(time.perf_counter() - started)
            ranked = [h.source for h in hits]
            ndcg.append(ndcg_at_k(ranked, judged, 10))
            recall.append(recall_at_k(ranked, judged, 10))
        return {"ndcg@10": round(float(np.mean(ndcg)), 4), "recall@10": round(float(np.mean(recall)), 4),
                "p50_ms": round(float(np.percentile(np.asarray(times) * 1000, 50)), 1), "queries": len(ndcg)}
    finally:
        backend.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dataset")
    parser.add_argument("--store", nargs="+", default=["sqlite"], choices=["sqlite", "postgres"])
    parser.add_argument("--analyzers", nargs="+", default=["combined_en"])
    parser.add_argument("--database-url", default=None)
    args = parser.parse_args()
    dataset = load_beir(args.dataset)
    report: dict[str, Any] = {"dataset": dataset.name}
    for name in args.store:
        server = None
        with tempfile.TemporaryDirectory() as folder:
            if name == "sqlite":
                url = f"sqlite:///{folder}/eval.db"
            elif args.database_url:
                url = args.database_url
            else:
                server = _Server(None)
                url = server.url
            try:
                for analyzer in args.analyzers:
                    report[f"{name}/{analyzer}"] = measure(url, dataset, analyzer)
                    print(f"{name}/{analyzer}: {report[f'{name}/{analyzer}']}", file=sys.stderr, flush=True)
            finally:
                if server is not None:
                    server.close()
    print(json.dumps(report, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
