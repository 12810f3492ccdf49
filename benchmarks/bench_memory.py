"""Agent memory search (``tenant.memory.search_memory``) against a document search of the same size.

One tenant holds ``--memories`` memories (default 100,000) of ``--users`` users (default 1,000, so
100 each) in its memory store, and as many chunks in one document collection. Both are written with
the same synthetic data (untimed): short Japanese sentences drawn from a word list, and 512-d
clustered unit vectors from a seeded hash embedder (provider ``bench``), so that the timings measure
bunko's stores and ranking, not a model. The query embedding costs the same few microseconds on
both sides; with a real embedder add its latency to both.

Timed (``--queries`` each, default 200, after 10 warm-up searches):

* ``memory``: ``search_memory(query, user_id=random user, top_k=5)`` -- hybrid, the default: one
  indexed read of that user's memories, cosine over their vectors and BM25 over their tokens;
* ``memory-keyword``: the same in keyword mode (what a fallback costs);
* ``documents``: ``tenant.search(query, collection, mode="hybrid", top_k=5)`` over the whole
  collection (vector top-k over all chunks plus BM25).

    python benchmarks/bench_memory.py [--memories 100000] [--users 1000] [--db URL | --postgres] [--json]

``--postgres`` starts a temporary PostgreSQL (bunko.testing.postgres) as ``bench_postgres.py`` does. The machine the
figures in benchmarks/README.md come from was shared and loaded; treat them as upper bounds.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bunko import Bunko

WORDS = ("繰り上がり", "足し算", "引き算", "掛け算", "九九", "漢字", "書き取り", "音読", "作文", "時計", "図形",
         "分数", "小数", "宿題", "テスト", "先生", "友だち", "給食", "遠足", "理科", "社会", "地図", "天気",
         "植物", "動物", "昆虫", "星座", "水", "電気", "磁石", "体育", "鉄棒", "水泳", "音楽", "リコーダー",
         "図工", "絵", "粘土", "読書", "物語", "詩", "ことわざ", "敬語", "ローマ字", "英語", "単語", "発音")
ENDINGS = ("でつまずいた", "がよくできた", "を練習した", "が得意になった", "を先生に説明できた", "で3回間違えた")
DIM = 512


class HashEmbedder:
    """Deterministic 512-d unit vectors, clustered by the text's first word (a stand-in for a model)."""

    provider = "bench"
    model = "hash-512"
    dimension = DIM

    def __init__(self) -> None:
        rng = np.random.default_rng(7)
        self.centroids = rng.standard_normal((len(WORDS), DIM)).astype(np.float32)
        self.usage_sink: Any = None

    def _vector(self, text: str) -> list[float]:
        seed = int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "little")
        noise = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
        first = next((i for i, w in enumerate(WORDS) if w in text), 0)
        v = self.centroids[first] + noise
        return (v / np.linalg.norm(v)).tolist()

    async def embed(self, text: str) -> list[float]:
        return self._vector(text)

    async def embed_query(self, text: str) -> list[float]:
        return self._vector(text)

    async def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self._vector(t) for t in texts]

    async def close(self) -> None:
        return None


def _sentence(rng: random.Random) -> str:
    return f"{rng.choice(WORDS)}と{rng.choice(WORDS)}の{rng.choice(WORDS)}{rng.choice(ENDINGS)}"


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"p50_ms": round(statistics.median(ordered), 2),
            "p95_ms": round(ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))], 2),
            "mean_ms": round(statistics.fmean(ordered), 2)}


def run(url: str, memories: int, users: int, queries: int) -> dict[str, Any]:
    rng = random.Random(11)
    embedder = HashEmbedder()
    engine = Bunko(url, embedder=embedder, analyzer="bigram")
    tenant = engine.tenant("bench")
    per_user = memories // users
    texts = [_sentence(rng) for _ in range(per_user * users)]
    vectors = np.asarray([embedder._vector(t) for t in texts], dtype=np.float32)
    started = time.perf_counter()
    records = tenant.memory._records
    from bunko.memory import MemoryRecord
    from bunko.types import EmbedderInfo

    records.ensure_store("memories", EmbedderInfo(embedder.provider, embedder.model, DIM), "bigram")
    for u in range(users):
        rows = slice(u * per_user, (u + 1) * per_user)
        writes = [MemoryRecord(t, "dialogue", "math").write(f"user-{u}", f"s-{u % 7}") for t in texts[rows]]
        records.add("memories", writes, vectors[rows])
    memory_load_s = time.perf_counter() - started
    started = time.perf_counter()
    batch = 5000
    for lo in range(0, len(texts), batch):
        tenant.upsert("docs", [{"content": t, "vector": vectors[lo + i].tolist()}
                               for i, t in enumerate(texts[lo:lo + batch])])
    document_load_s = time.perf_counter() - started

    queries_text = [f"{rng.choice(WORDS)}の{rng.choice(WORDS)}" for _ in range(queries + 10)]
    timings: dict[str, list[float]] = {"memory": [], "memory-keyword": [], "documents": []}
    fallbacks = 0
    for i, query in enumerate(queries_text):
        user = f"user-{rng.randrange(users)}"
        t0 = time.perf_counter()
        result = tenant.memory.search_memory(query, user, 5, timeout=60)
        t1 = time.perf_counter()
        tenant.memory.search_memory(query, user, 5, mode="keyword", timeout=60)
        t2 = time.perf_counter()
        tenant.search(query, "docs", top_k=5, mode="hybrid")
        t3 = time.perf_counter()
        fallbacks += bool(result["fallback"])
        if i >= 10:
            timings["memory"].append((t1 - t0) * 1000)
            timings["memory-keyword"].append((t2 - t1) * 1000)
            timings["documents"].append((t3 - t2) * 1000)
    engine.close()
    report = {"store": url.split(":", 1)[0], "memories": len(texts), "users": users, "chunks": len(texts),
              "queries": queries, "memory_load_s": round(memory_load_s, 1),
              "document_load_s": round(document_load_s, 1), "fallbacks": fallbacks,
              "results": {name: _percentiles(samples) for name, samples in timings.items()}}
    report["memory_vs_documents_p50"] = round(report["results"]["memory"]["p50_ms"]
                                              / report["results"]["documents"]["p50_ms"], 3)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--users", type=int, default=1_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--db", default=None, help="store URL (default: a SQLite file in a temporary folder)")
    parser.add_argument("--postgres", action="store_true", help="start a temporary PostgreSQL (bunko.testing.postgres)")
    parser.add_argument("--json", action="store_true", help="JSON on stdout")
    args = parser.parse_args(argv)
    folder = Path(tempfile.mkdtemp(prefix="bunko-bench-memory-"))
    server = None
    url = args.db or f"sqlite:///{folder / 'memory.db'}"
    if args.postgres:
        from bunko.testing.postgres import TemporaryPostgres

        server = TemporaryPostgres(folder / "pg")
        url = server.create_database("bunko_bench_memory")
    try:
        report = run(url, args.memories, args.users, args.queries)
    finally:
        if server is not None:
            server.close()
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(f"{report['store']}: {report['memories']:,} memories of {report['users']:,} users; "
              f"{report['chunks']:,} chunks in one collection; {report['queries']} queries", file=sys.stderr)
        for name, figures in report["results"].items():
            print(f"  {name:15s} p50 {figures['p50_ms']:8.2f} ms   p95 {figures['p95_ms']:8.2f} ms", file=sys.stderr)
        print(f"  memory p50 / document p50 = {report['memory_vs_documents_p50']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
