"""Fill a ``bench_search.py --sqlite-file`` database quickly, for the vector figures at a million chunks.

``bench_search.py`` ingests through the store's full write path, keyword index included; at a million
chunks on a loaded shared machine that takes hours. This loader writes the same chunks (same N, seed,
texts, vectors, documents and ``bucket`` metadata, by ``bench_search.py``'s own generator) through the
same write path with the keyword analysis left out: each chunk is stored with its text and vector but
no keyword terms. Documents the file already holds (an interrupted ingest) are kept as they are.
A file filled this way serves the ``vector`` and ``filtered_*`` figures of ``bench_search.py``; its
``keyword`` and ``hybrid`` figures are meaningless (most chunks have no terms). Benchmark-only: it
replaces a method of the store in this process.

Usage::

    python benchmarks/load_sqlite_bench.py --chunks 1000000 --sqlite-file PATH
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search import BUCKETS, DATA, batches, build_chunks, load_base, make_documents

from bunko.embedders import UniversalSentenceEncoderEmbedder, embedder_info
from bunko.stores import open_backend
from bunko.stores.sql.keywords import KeywordBatch
from bunko.stores.sqlite import SQLiteVectorStore


def _no_keywords(self: Any, analyzer: Any, texts: list[str]) -> Future[KeywordBatch]:
    done: Future[KeywordBatch] = Future()
    empty = np.zeros(0, dtype=np.int64)
    done.set_result(KeywordBatch([""] * len(texts), np.zeros(len(texts), dtype=np.int64), [], empty, empty, empty))
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chunks", type=int, default=1_000_000)
    parser.add_argument("--sqlite-file", required=True)
    parser.add_argument("--seed", type=int, default=20240601)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    paragraphs, _questions = load_base(Path(DATA))
    sentences = sorted({s for p in paragraphs for s in p})
    cache = Path(tempfile.gettempdir()) / f"bunko-bench-search-{len(sentences)}.npy"
    embedder = UniversalSentenceEncoderEmbedder()
    base = np.load(cache) if cache.exists() else np.asarray(
        asyncio.run(embedder.embed_array(sentences)), dtype=np.float32)
    vectors = dict(zip(sentences, np.asarray(base, dtype=np.float32), strict=True))
    texts, matrix = build_chunks(paragraphs, vectors, args.chunks, rng)
    buckets = rng.integers(0, BUCKETS, size=args.chunks)
    documents, _ids = make_documents(texts, matrix, buckets)
    SQLiteVectorStore._analyze = _no_keywords  # type: ignore[assignment,method-assign]
    backend = open_backend(f"sqlite:///{args.sqlite_file}")
    try:
        store = backend.for_tenant("bench")
        store.ensure_collection("bench", embedder_info(embedder))
        with store.session() as (conn, _tenant):
            held = {r[0] for r in conn.execute("SELECT source FROM documents")}
        todo = [d for d in documents if d.source not in held]
        print(f"{len(held)} documents held, writing {len(todo)} ({sum(len(d.chunks) for d in todo):,} chunks)",
              file=sys.stderr, flush=True)
        started = time.perf_counter()
        with store.bulk_load("bench"):
            for i, _ in enumerate(store.write_batches("bench", batches(todo))):
                if i % 50 == 0:
                    print(f"  batch {i}, {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
        print(f"written in {time.perf_counter() - started:.0f} s", file=sys.stderr, flush=True)
    finally:
        backend.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
