"""Benchmark of the embedded SQLite store (``bunko.stores.sqlite``): ingest and search.

For every size N (default 10,000 and 100,000 chunks, 512 dimensions) the benchmark:

1. Builds N synthetic chunks, *untimed*: random float32 vectors from a seeded numpy
   RNG (rows L2-normalised) and 200-300 characters of synthetic text per chunk that
   mixes Japanese and English words (Zipf-distributed vocabulary, so keyword search
   sees both very common and rare terms). Chunks are grouped into documents of 50.
   The store lives in a fresh temporary SQLite file.
2. **Ingest** (timed): documents go through ``store.write_documents`` in the batches
   ``bunko ingest`` uses (``bunko.engine.INGEST_BATCH_CHUNKS`` chunks or
   ``INGEST_BATCH_DOCUMENTS`` documents per transaction) -- the real ingest path: each
   transaction inserts the document rows, their chunks with the vector blobs, and the
   FTS5 rows (the analyzer runs inside this call too). Reported as chunks/s, and the
   latency per batch. ``--per-document`` writes one document per transaction instead.
3. **Search** (timed), on a freshly opened backend so the per-process vector cache
   is empty:

   * ``cold load``: the first ``store.query``; it reads every vector blob from the
     file and builds the normalised matrix the process keeps in memory.
   * ``query``: ``--queries`` random query vectors, ``top_k=10``, p50/p95/mean ms.
   * ``query restricted``: the same with ``document_ids`` = 5 random documents.
   * ``keyword``: ``store.keyword_search`` with short (1-3 word) mixed queries.
   * informational: ``get_collection`` (retrieval calls it before every search, so
     it is on the request path too), and the first ``query`` right after writing a
     new document (the cached matrix is extended) or replacing one (the cache is
     reloaded), 5 rounds each, measured last because they change the store.
4. **Baseline**: a bare numpy scan of the same (N, dim) normalised matrix
   (``matrix @ q`` + ``argpartition`` top 10), so the store's own overhead
   (SQL round trips, hit fetching, JSON metadata decoding) is visible. Store query
   and numpy scan alternate query by query, so both see the same machine load.
5. Peak RSS of the process (``resource.getrusage``; it includes the synthetic data
   the benchmark itself holds) and the size of the SQLite file (+ its WAL).

Each size runs in its own child process (unless ``--in-process``), so peak RSS and
the cold load are per size. All timings use ``time.perf_counter``.

Targets, at N = 100,000 and 512 dimensions:

* ingest   >= 20,000 chunks/s
* search   p50 <= 15 ms  (``store.query``, top_k = 10, unrestricted)

Usage::

    python benchmarks/bench_store.py [--sizes 10000 100000] [--dim 512] [--queries 200] [--json]

The table goes to stdout; with ``--json`` the JSON object goes to stdout and the
table to stderr (so ``--json > result.json`` works). ``--check`` exits 1 when a
target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bunko.engine import INGEST_BATCH_CHUNKS, INGEST_BATCH_DOCUMENTS
from bunko.search import keyword_query, vector_query
from bunko.stores.base import ChunkWrite, DocumentWrite
from bunko.stores.sqlite import SQLiteBackend
from bunko.types import EmbedderInfo, new_id

TARGET_INGEST_CHUNKS_PER_S = 20_000.0
TARGET_SEARCH_P50_MS = 15.0
TARGET_N = 100_000
TARGET_DIM = 512

CHUNKS_PER_DOC = 50
TOP_K = 10
RESTRICT_DOCS = 5
WRITE_PROBES = 5  # write-then-query rounds for the informational "query after a write" rows
COLLECTION = "bench"

# --------------------------------------------------------------------------------------
# Synthetic data (never timed)
# --------------------------------------------------------------------------------------

_JA_WORDS = (
    "検索 文書 情報 日本語 東京 会社 技術 開発 管理 設定 機能 利用 方法 問題 結果 資料 契約 "
    "会議 報告 予算 製品 顧客 品質 安全 規則 手続き 申請 承認 期限 担当 部署 社員 研修 評価 "
    "データ 分析 システム サーバー ネットワーク セキュリティ クラウド アプリ ユーザー 画面 "
    "ファイル 更新 削除 登録 確認 変更 対応 導入 運用 保守 障害 復旧 監視 性能 速度 容量 "
    "学習 モデル 質問 回答 要約 翻訳 意味 言語 文章 段落 見出し 表 図 注意 重要 必要 可能"
).split()
_JA_PARTICLES = ["は", "が", "を", "に", "の", "で", "と", "も", "から", "まで", "、", "。"]
_EN_WORDS = (
    "the of and to in is for on with that this from by as are be at or an it search index "
    "document query vector embedding tenant collection chunk store retrieval answer source "
    "model language policy contract meeting report budget product customer quality security "
    "server network cloud user screen file update delete register confirm change deploy "
    "monitor performance latency throughput storage learning question summary translation "
    "meaning sentence paragraph heading table figure important required possible review"
).split()
_KANJI = (
    "日本語情報検索文書会社技術開発管理設定機能利用方法問題結果資料契約議報告予算製品顧客品質安全"
    "規則手続申請承認期限担当部署員研修評価分析学習質問回答要約翻訳意味言文章段落見出表図注重必可能"
    "東京大阪市場価格"
)
_SYLLABLES = "ka ri to ne mo sa ven lor tis pra gen dal mar qui ste rol bex nor fin tal com sur".split()


def _vocabulary(rng: np.random.Generator, extra: int = 3000) -> list[tuple[str, str]]:
    """(word, word with its separator): real words first (the common ones), then synthetic ones.

    The separated form is what goes into the text: Japanese words end with a particle
    (no space, as in running Japanese text), English words with a space.
    """
    ja = [(w, w + _JA_PARTICLES[i % len(_JA_PARTICLES)]) for i, w in enumerate(_JA_WORDS)]
    en = [(w, w + " ") for w in _EN_WORDS]
    kanji = np.array(list(_KANJI))
    syll = np.array(_SYLLABLES)
    synthetic: list[tuple[str, str]] = []
    for i in range(extra):
        if i % 2 == 0:
            word = "".join(rng.choice(kanji, size=int(rng.integers(2, 4))))
            synthetic.append((word, word + _JA_PARTICLES[int(rng.integers(len(_JA_PARTICLES)))]))
        else:
            word = "".join(rng.choice(syll, size=int(rng.integers(2, 4))))
            synthetic.append((word, word + " "))
    # Interleave so real Japanese and English words share the top ranks of the Zipf law.
    head = [w for pair in zip(ja, en, strict=False) for w in pair]
    head += ja[len(en):] + en[len(ja):]
    return head + synthetic


def _zipf_p(n: int, s: float = 1.0, q: float = 2.7) -> np.ndarray:
    p = 1.0 / (np.arange(n) + 1.0 + q) ** s
    return p / p.sum()


def make_data(n: int, dim: int, seed: int) -> dict[str, Any]:
    """N chunks (contents + normalised vectors) grouped into documents of ~50 chunks."""
    rng = np.random.default_rng(seed)
    words = _vocabulary(rng)
    vocab = [sep for _, sep in words]
    vocab_arr = np.array(vocab, dtype=object)
    lens = np.array([len(w) for w in vocab], dtype=np.int64)
    p = _zipf_p(len(vocab))

    targets = rng.integers(200, 301, size=n)
    ends = np.cumsum(targets)
    mean_len = float((lens * p).sum())
    stream = rng.choice(len(vocab), size=int(ends[-1] / mean_len * 1.15) + 64, p=p)
    cum = np.cumsum(lens[stream])
    while cum[-1] < ends[-1]:
        more = rng.choice(len(vocab), size=max(1024, stream.size // 10), p=p)
        stream = np.concatenate([stream, more])
        cum = np.cumsum(lens[stream])
    cuts = np.searchsorted(cum, ends) + 1  # chunk i = stream[cuts[i-1]:cuts[i]]
    starts = np.concatenate([[0], cuts[:-1]])
    contents = ["".join(vocab_arr[stream[a:b]]).rstrip() for a, b in zip(starts, cuts, strict=True)]

    vectors = rng.standard_normal((n, dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)

    uid = new_id  # the ids bunko ingest generates (time-ordered UUIDv7)

    documents: list[DocumentWrite] = []
    for d, first in enumerate(range(0, n, CHUNKS_PER_DOC)):
        last = min(first + CHUNKS_PER_DOC, n)
        chunks = []
        offset = 0
        for i in range(first, last):
            text = contents[i]
            chunks.append(ChunkWrite(
                id=uid(), content=text, index=i - first, start=offset, end=offset + len(text),
                token_count=len(text) // 2, metadata={"page_number": (i - first) // 10 + 1},
            ))
            offset += len(text)
        documents.append(DocumentWrite(
            id=uid(), source=f"bench://docs/{d:06d}.txt", content_hash=f"{seed:x}-{d:08x}",
            metadata={"source_type": "text", "filename": f"{d:06d}.txt", "language": "ja"},
            chunks=chunks, vectors=vectors[first:last],
        ))

    # Short keyword queries: 1-3 words drawn from the same vocabulary, separators stripped.
    keyword_queries = []
    for _ in range(256):
        k = int(rng.integers(1, 4))
        keyword_queries.append(" ".join(words[j][0] for j in rng.choice(len(words), size=k, p=p)))

    return {
        "vectors": vectors,
        "documents": documents,
        "keyword_queries": keyword_queries,
        "mean_chars": float(np.mean([len(c) for c in contents])),
        "rng": rng,
    }


# --------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------


def _peak_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024  # bytes on macOS, KiB on Linux


def _stats(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1000.0
    return {
        "p50_ms": float(np.percentile(ms, 50)),
        "p95_ms": float(np.percentile(ms, 95)),
        "mean_ms": float(ms.mean()),
        "max_ms": float(ms.max()),
        "n": int(ms.size),
    }


def _file_size(path: Path) -> int:
    return path.stat().st_size if path.exists() else 0


PER_DOCUMENT = False
ANALYZER = "bigram"  # the keyword analyzer of the benchmark collection (--analyzer)


def run_size(n: int, dim: int, queries: int, seed: int) -> dict[str, Any]:
    """Generate, ingest and search one size; returns a JSON-ready dict."""
    perf = time.perf_counter
    log = lambda msg: print(f"[N={n:,}] {msg}", file=sys.stderr, flush=True)  # noqa: E731

    t = perf()
    data = make_data(n, dim, seed)
    log(f"synthetic data generated in {perf() - t:.1f}s (untimed), mean content {data['mean_chars']:.0f} chars")
    rss_after_data = _peak_rss_mb()
    documents: list[DocumentWrite] = data["documents"]
    rng: np.random.Generator = data["rng"]
    vectors: np.ndarray = data["vectors"]

    with tempfile.TemporaryDirectory(prefix="bunko-bench-") as tmp:
        db = Path(tmp) / "bench.db"
        info = EmbedderInfo("bench", "random", dim)

        # ---- ingest -------------------------------------------------------------
        backend = SQLiteBackend(db)
        store = backend.for_tenant("bench")
        store.ensure_collection(COLLECTION, info, analyzer=ANALYZER)
        batches: list[list[DocumentWrite]] = [[]]
        for doc in documents:
            current = batches[-1]
            if current and (PER_DOCUMENT or len(current) >= INGEST_BATCH_DOCUMENTS
                            or sum(len(d.chunks) for d in current) + len(doc.chunks) > INGEST_BATCH_CHUNKS):
                batches.append(current := [])
            current.append(doc)
        doc_times = []
        t0 = perf()
        for batch in batches:
            t = perf()
            store.write_documents(COLLECTION, batch)
            doc_times.append(perf() - t)
        ingest_s = perf() - t0
        assert store.count(COLLECTION) == n, "not every chunk was stored"
        wal_bytes = _file_size(Path(str(db) + "-wal"))  # closing checkpoints and removes the WAL
        backend.close()
        log(f"ingest {n / ingest_s:,.0f} chunks/s")
        rss_after_ingest = _peak_rss_mb()

        # ---- search (fresh backend: empty per-process vector cache) ---------------
        backend = SQLiteBackend(db)
        store = backend.for_tenant("bench")
        qvecs = rng.standard_normal((queries + 1, dim), dtype=np.float32)
        qvecs /= np.linalg.norm(qvecs, axis=1, keepdims=True)

        t = perf()
        warm = vector_query(store, COLLECTION, qvecs[0], TOP_K)
        cold_load_s = perf() - t
        assert len(warm) == TOP_K

        # Sanity: the store's exact search agrees with the numpy scan.
        expected = np.argsort(-(vectors @ qvecs[0]))[:TOP_K]
        position = {c.id: i for i, c in enumerate(c for d in documents for c in d.chunks)}
        assert [position[h.chunk_id] for h in warm] == expected.tolist(), "store and numpy disagree"

        # Store query and the bare numpy scan alternate, so both see the same machine load.
        matrix = np.ascontiguousarray(vectors)
        query_times, numpy_times = [], []
        for q in qvecs[1:]:
            t = perf()
            vector_query(store, COLLECTION, q, TOP_K)
            query_times.append(perf() - t)
            t = perf()
            scores = matrix @ q
            top = np.argpartition(scores, -TOP_K)[-TOP_K:]
            top = top[np.argsort(-scores[top])]
            numpy_times.append(perf() - t)

        doc_ids = [d.id for d in documents]
        restricted_times = []
        for q in qvecs[1:]:
            picked = [doc_ids[j] for j in rng.choice(len(doc_ids), size=min(RESTRICT_DOCS, len(doc_ids)),
                                                     replace=False)]
            t = perf()
            hits = vector_query(store, COLLECTION, q, TOP_K, document_ids=picked)
            restricted_times.append(perf() - t)
        assert hits and {h.document_id for h in hits} <= set(picked)

        kw_queries = data["keyword_queries"]
        keyword_times = []
        kw_hits = 0
        for i in range(queries):
            text = kw_queries[i % len(kw_queries)]
            t = perf()
            kw_hits += len(keyword_query(store, COLLECTION, text, TOP_K))
            keyword_times.append(perf() - t)

        coll_times = []
        for _ in range(min(queries, 50)):
            t = perf()
            store.get_collection(COLLECTION)
            coll_times.append(perf() - t)

        # ---- informational: the first query after a write (last: it changes the store) ----
        # An insert appends to the cached matrix; a replace (same source, new content)
        # bumps mutation_seq, which makes the next query reload the matrix.
        extra = make_data(WRITE_PROBES * CHUNKS_PER_DOC, dim, seed + 1)["documents"]
        for i, doc in enumerate(extra):
            doc.source = f"bench://extra/{i:06d}.txt"
        after_insert, after_replace = [], []
        for doc in extra:
            store.write_document(COLLECTION, doc)
            t = perf()
            vector_query(store, COLLECTION, qvecs[1], TOP_K)
            after_insert.append(perf() - t)
        for doc in documents[:WRITE_PROBES]:
            doc.content_hash += "-v2"
            store.write_document(COLLECTION, doc)
            t = perf()
            vector_query(store, COLLECTION, qvecs[1], TOP_K)
            after_replace.append(perf() - t)
        backend.close()

        db_bytes = _file_size(db)  # after the write probes: N + 250 chunks

    result = {
        "n": n,
        "dim": dim,
        "documents": len(documents),
        "mean_content_chars": round(data["mean_chars"], 1),
        "ingest": {
            "seconds": ingest_s,
            "chunks_per_s": n / ingest_s,
            "documents_per_s": len(documents) / ingest_s,
            "per_document": _stats(doc_times),
        },
        "cold_load_ms": cold_load_s * 1000.0,
        "query": _stats(query_times),
        "query_restricted": _stats(restricted_times),
        "keyword": {**_stats(keyword_times), "mean_hits": kw_hits / max(queries, 1)},
        "get_collection": _stats(coll_times),
        "query_after_insert": _stats(after_insert),
        "query_after_replace": _stats(after_replace),
        "numpy_baseline": _stats(numpy_times),
        "peak_rss_mb": _peak_rss_mb(),
        "peak_rss_after_data_mb": rss_after_data,
        "peak_rss_after_ingest_mb": rss_after_ingest,
        "db_bytes": db_bytes,
        "wal_bytes": wal_bytes,
    }
    result["targets"] = _targets(result)
    return result


def _targets(r: dict[str, Any]) -> dict[str, Any]:
    applies = r["n"] == TARGET_N and r["dim"] == TARGET_DIM
    return {
        "applies": applies,
        "ingest_ok": r["ingest"]["chunks_per_s"] >= TARGET_INGEST_CHUNKS_PER_S,
        "search_p50_ok": r["query"]["p50_ms"] <= TARGET_SEARCH_P50_MS,
    }


# --------------------------------------------------------------------------------------
# Reporting
# --------------------------------------------------------------------------------------


def _mark(ok: bool, applies: bool) -> str:
    if not applies:
        return ""
    return "  PASS" if ok else "  MISS"


def render_table(results: list[dict[str, Any]], env: dict[str, Any]) -> str:
    cols = [f"N={r['n']:,}" for r in results]
    width = max(24, *(len(c) + 2 for c in cols))
    lines: list[str] = []

    def row(label: str, values: list[str]) -> None:
        lines.append(f"{label:<34}" + "".join(f"{v:>{width}}" for v in values))

    lines.append(f"bunko SQLite store benchmark  (dim={results[0]['dim']}, top_k={TOP_K}, "
                 f"{results[0]['query']['n']} queries, {CHUNKS_PER_DOC} chunks/doc)")
    lines.append(f"python {env['python']}  numpy {env['numpy']}  sqlite {env['sqlite']}  "
                 f"{env['machine']}  cpus={env['cpus']}  blas threads={env['blas_threads']}  "
                 f"load(1m) before/after={env.get('loadavg_before', '?')}/{env['loadavg_1m']}")
    lines.append("")
    row("", cols)
    row("documents", [f"{r['documents']:,}" for r in results])
    row("mean chunk length (chars)", [f"{r['mean_content_chars']:.0f}" for r in results])
    lines.append("-- ingest (write_documents, batched as bunko ingest does) --")
    row("total time (s)", [f"{r['ingest']['seconds']:.2f}" for r in results])
    row(f"chunks/s  [target >= {TARGET_INGEST_CHUNKS_PER_S:,.0f}]",
        [f"{r['ingest']['chunks_per_s']:,.0f}" + _mark(r["targets"]["ingest_ok"], r["targets"]["applies"])
         for r in results])
    row("per transaction p50 / p95 (ms)",
        [f"{r['ingest']['per_document']['p50_ms']:.2f} / {r['ingest']['per_document']['p95_ms']:.2f}"
         for r in results])
    lines.append("-- vector search (query, top_k=10) --")
    row("cold load, first query (ms)", [f"{r['cold_load_ms']:.1f}" for r in results])
    row(f"p50 (ms)  [target <= {TARGET_SEARCH_P50_MS:g}]",
        [f"{r['query']['p50_ms']:.2f}" + _mark(r["targets"]["search_p50_ok"], r["targets"]["applies"])
         for r in results])
    row("p95 (ms)", [f"{r['query']['p95_ms']:.2f}" for r in results])
    row("mean (ms)", [f"{r['query']['mean_ms']:.2f}" for r in results])
    row(f"restricted to {RESTRICT_DOCS} docs p50 / p95 (ms)",
        [f"{r['query_restricted']['p50_ms']:.2f} / {r['query_restricted']['p95_ms']:.2f}" for r in results])
    lines.append("-- keyword search (FTS5 BM25) --")
    row("p50 / p95 (ms)", [f"{r['keyword']['p50_ms']:.2f} / {r['keyword']['p95_ms']:.2f}" for r in results])
    row("mean hits returned", [f"{r['keyword']['mean_hits']:.1f}" for r in results])
    lines.append("-- baseline and overhead --")
    row("numpy scan p50 / p95 (ms)",
        [f"{r['numpy_baseline']['p50_ms']:.2f} / {r['numpy_baseline']['p95_ms']:.2f}" for r in results])
    row("store overhead p50 (ms)",
        [f"{r['query']['p50_ms'] - r['numpy_baseline']['p50_ms']:+.2f}" for r in results])
    lines.append("-- informational --")
    row("get_collection p50 (ms)", [f"{r['get_collection']['p50_ms']:.2f}" for r in results])
    row("query after an insert p50 (ms)", [f"{r['query_after_insert']['p50_ms']:.1f}" for r in results])
    row("query after a replace p50 (ms)", [f"{r['query_after_replace']['p50_ms']:.1f}" for r in results])
    lines.append("-- resources --")
    row("peak RSS (MiB)", [f"{r['peak_rss_mb']:,.0f}" for r in results])
    row("  of which before the store (MiB)", [f"{r['peak_rss_after_data_mb']:,.0f}" for r in results])
    row("SQLite file, closed (MiB)", [f"{r['db_bytes'] / 2**20:,.1f}" for r in results])
    row("WAL at end of ingest (MiB)", [f"{r['wal_bytes'] / 2**20:,.1f}" for r in results])
    applicable = [r for r in results if r["targets"]["applies"]]
    lines.append("")
    if applicable:
        r = applicable[0]
        ok = r["targets"]["ingest_ok"] and r["targets"]["search_p50_ok"]
        lines.append(f"targets at N={TARGET_N:,}, {TARGET_DIM}-d: " + ("all met" if ok else "MISSED: " + ", ".join(
            name for name, good in (("ingest", r["targets"]["ingest_ok"]),
                                    ("search p50", r["targets"]["search_p50_ok"])) if not good)))
    else:
        lines.append(f"(targets apply at N={TARGET_N:,}, {TARGET_DIM}-d; not part of this run)")
    return "\n".join(lines)


def _env() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "numpy": np.__version__,
        "sqlite": sqlite3.sqlite_version,
        "machine": f"{platform.system()}-{platform.machine()}",
        "cpus": os.cpu_count(),
        "loadavg_1m": round(os.getloadavg()[0], 2),
        "blas_threads": os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS") or "default",
    }


def _run_child(n: int, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", str(n), "--dim", str(args.dim),
           "--queries", str(args.queries), "--seed", str(args.seed), "--analyzer", args.analyzer]
    cmd += ["--per-document"] if args.per_document else []
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark for N={n} failed (exit {proc.returncode})")
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000], help="chunk counts")
    parser.add_argument("--dim", type=int, default=512, help="vector dimension")
    parser.add_argument("--queries", type=int, default=200, help="timed queries per kind")
    parser.add_argument("--seed", type=int, default=20240601, help="numpy RNG seed")
    parser.add_argument("--json", action="store_true", help="JSON to stdout (the table goes to stderr)")
    parser.add_argument("--in-process", action="store_true", help="run every size in this process")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--analyzer", default="bigram",
                        help="keyword analyzer of the collection (the figures in README were taken with bigram)")
    parser.add_argument("--per-document", action="store_true",
                        help="one transaction per document instead of bunko ingest's batches")
    parser.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    global PER_DOCUMENT, ANALYZER
    PER_DOCUMENT = args.per_document
    ANALYZER = args.analyzer

    if args.worker is not None:
        print(json.dumps(run_size(args.worker, args.dim, args.queries, args.seed)))
        return 0

    load_before = round(os.getloadavg()[0], 2)
    results = []
    for n in args.sizes:
        if args.in_process:
            results.append(run_size(n, args.dim, args.queries, args.seed))
        else:
            results.append(_run_child(n, args))
    env = {**_env(), "loadavg_before": load_before}
    table = render_table(results, env)
    if args.json:
        print(table, file=sys.stderr)
        print(json.dumps({
            "env": env,
            "config": {"sizes": args.sizes, "dim": args.dim, "queries": args.queries, "top_k": TOP_K,
                       "chunks_per_document": CHUNKS_PER_DOC, "seed": args.seed},
            "targets": {"n": TARGET_N, "dim": TARGET_DIM, "ingest_chunks_per_s": TARGET_INGEST_CHUNKS_PER_S,
                        "search_p50_ms": TARGET_SEARCH_P50_MS},
            "results": results,
        }, indent=2))
    else:
        print(table)
    if args.check:
        missed = [r for r in results if r["targets"]["applies"]
                  and not (r["targets"]["ingest_ok"] and r["targets"]["search_p50_ok"])]
        return 1 if missed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
