"""Search latency at production size on one store, against the physical reference of a bare numpy scan.

Builds N chunks of realistic Japanese text from the JSQuAD dev paragraphs
(``../shared/data/jsquad-dev``): the paragraphs are cut into sentences, every distinct
sentence is embedded once with the bundled embedder, and each chunk is a mix of 2-4
sentences (consecutive ones of one paragraph, sometimes with one from another) whose vector
is the normalised mean of its sentences' vectors, moved by a little noise (norm 0.1) so that
repeated mixes do not tie. Embedding N texts would take hours here; the
mixes keep the text, the vocabulary and the geometry of the real data. Chunks belong to 1,000
documents; each carries ``bucket`` (0-999, random) in its metadata for the filtered searches.

Timed, one search at a time after a warm-up, with questions from the same set (their vectors
embedded beforehand, so the mode times exclude the embedding, reported apart as
``query_embed_p50_ms``):

* ``vector``: ``vector_query`` top 10;
* ``keyword``: ``keyword_query`` top 10 (BM25 from the postings);
* ``hybrid``: as a hybrid search runs: the collection row read, then both legs at the hybrid depth (at
  the same time or in turn, as the store prefers), the default fusion and the hits read once
  (``bunko.search.session.collect_legs``); ``hybrid_sequential`` / ``hybrid_concurrent`` the same with
  the legs in one transaction / at the same time, each in its own (in one transaction PostgreSQL sends
  the vector leg's index search first and reads it after the keyword leg);
* ``filtered_1pct`` / ``filtered_0.1pct``: ``vector_query`` with ``{"bucket": {"$in": [10 values]}}`` /
  ``{"bucket": v}``; recall against the exact answer over the passing rows is reported too;
* ``exact_scan_p50_ms``: ``matrix @ q`` + top-10 selection over the same N x 512 float32 matrix.

With ``--store postgres``, ``postgres_server`` gives the server's ``shared_buffers`` and the sizes of the
vector indexes on ``bunko.chunks``: the throwaway server runs with PostgreSQL's default (128 MB), less than
a 100k collection's HNSW index over halfvec (130 MB), so its searches read pages from the OS cache; a
server of your own should hold its indexes in ``shared_buffers`` (README).

``cpu_p50_ms`` gives the CPU time of the benchmark process (every thread) for the scan and each mode: on
a busy machine it leaves out the waits for a core (SQLite's searches run in the process; PostgreSQL's
server time is not in it).

The keyword postings a search reads are kept in the backend's cache (``PostingsCache``) until the
collection is written again; ``keyword`` and each hybrid mode have a cache of their own here, so each
meets a question's terms for the first time in its own run. The segments the backend holds whole in
memory (``SegmentIndex``, loaded by the first searches, as the vector matrix is) are shared by every mode
(``postings_held_mb``). ``--no-postings-cache`` turns both off (every keyword search reads its postings
from the database, as before the cache). The exact answers for
recall are computed before the timing: numpy's product leaves BLAS threads spinning that would take the
cores from the search timed next.

Ingest: ``ingest_chunks_per_s`` is N over the time to commit every batch; ``searchable_after_s``
the time from the start until a search finds a chunk of the last batch; ``index_build_s`` the
time of the index build that follows the bulk load (PostgreSQL's HNSW; SQLite's in-memory matrix).

Usage::

    python benchmarks/bench_search.py --store sqlite|postgres --chunks 100000 [--database-url URL] [--json]
        [--sqlite-file PATH]

With ``--sqlite-file`` the SQLite database is kept at PATH; a later run with the same path, N and
seed reuses it instead of ingesting again (the ingest figures are then ``null``), so two versions
of the code can be timed back to back on the same data.

With ``--store postgres`` and no ``--database-url`` it starts a throwaway server (``bunko.testing.postgres``), as
``bench_postgres.py`` does. With ``--database-url URL --reuse`` a database that already holds the
N chunks of an earlier run (same N and seed) is searched again without ingesting (the ingest
figures are then ``null``); migrations the code brings are applied when the backend opens it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_postgres import _Server

from bunko.config import redact_url
from bunko.embedders import UniversalSentenceEncoderEmbedder, embedder_info
from bunko.portability.writer import WRITE_CHUNKS
from bunko.search import DEFAULT_FUSION, HYBRID_DEPTH, keyword_query, vector_query
from bunko.search.session import Legs, collect_legs
from bunko.stores import open_backend
from bunko.stores.base import ChunkWrite, DocumentWrite
from bunko.stores.sql.postings import CACHE_BYTES, PostingsCache
from bunko.types import new_id

# ../shared/data/jsquad-dev next to the checkout (or next to its parent folder, for a worktree).
DATA = next((p / "shared" / "data" / "jsquad-dev" for p in Path(__file__).resolve().parents[1:4]
             if (p / "shared" / "data" / "jsquad-dev").is_dir()), Path("../shared/data/jsquad-dev"))
TOP_K = 10
DOCUMENTS = 1000
BUCKETS = 1000
BATCH_CHUNKS = WRITE_CHUNKS  # as imports and store-to-store copies write
_SENTENCE_RE = re.compile(r"[^。！？]+[。！？]?")


def _stats(samples_s: list[float]) -> dict[str, float]:
    ms = np.asarray(samples_s) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2)}


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_base(data: Path) -> tuple[list[list[str]], list[str]]:
    """The paragraphs cut into sentences, and the questions."""
    paragraphs = []
    for line in (data / "corpus.jsonl").read_text(encoding="utf-8").splitlines():
        text = json.loads(line)["text"]
        sentences = [s.strip() for s in _SENTENCE_RE.findall(text) if len(s.strip()) > 5]
        if sentences:
            paragraphs.append(sentences)
    questions = [json.loads(line)["text"] for line in (data / "queries.jsonl").read_text(encoding="utf-8").splitlines()]
    return paragraphs, questions


def build_chunks(paragraphs: list[list[str]], vectors: dict[str, np.ndarray], n: int,
                 rng: np.random.Generator) -> tuple[list[str], np.ndarray]:
    """N chunk texts (2-4 sentences each) and their vectors (normalised means)."""
    texts: list[str] = []
    out = np.empty((n, 512), dtype=np.float32)
    for i in range(n):
        para = paragraphs[int(rng.integers(len(paragraphs)))]
        take = int(rng.integers(2, 5))
        start = int(rng.integers(max(1, len(para) - take + 1)))
        picked = para[start:start + take]
        if len(picked) < 2 or rng.random() < 0.3:  # sometimes a sentence from elsewhere
            other = paragraphs[int(rng.integers(len(paragraphs)))]
            picked = [*picked, other[int(rng.integers(len(other)))]]
        texts.append("".join(picked))
        v = np.mean([vectors[s] for s in picked], axis=0)
        v = v / np.linalg.norm(v) + rng.normal(scale=0.1 / np.sqrt(512), size=512)  # no two chunks tie
        out[i] = v / np.linalg.norm(v)
    return texts, out


def make_documents(texts: list[str], vectors: np.ndarray, buckets: np.ndarray) -> tuple[list[DocumentWrite],
                                                                                         list[str]]:
    """1,000 documents over the chunks (contiguous runs), and every chunk's id in row order."""
    n = len(texts)
    bounds = np.linspace(0, n, DOCUMENTS + 1).astype(int)
    documents, ids = [], []
    for d in range(DOCUMENTS):
        lo, hi = int(bounds[d]), int(bounds[d + 1])
        if lo == hi:
            continue
        chunks = []
        for j in range(lo, hi):
            uid = new_id()
            ids.append(uid)
            chunks.append(ChunkWrite(uid, texts[j], j - lo, 0, len(texts[j]), len(texts[j]),
                                     {"chunk_index": j - lo, "bucket": int(buckets[j])}))
        documents.append(DocumentWrite(new_id(), f"jsquad/{d}.txt", f"hash-{d}", {"source": f"jsquad/{d}.txt"},
                                       chunks, vectors[lo:hi]))
    return documents, ids


def batches(documents: list[DocumentWrite], chunks: int = BATCH_CHUNKS) -> list[list[DocumentWrite]]:
    out: list[list[DocumentWrite]] = []
    pending: list[DocumentWrite] = []
    size = 0
    for doc in documents:
        pending.append(doc)
        size += len(doc.chunks)
        if size >= chunks:
            out.append(pending)
            pending, size = [], 0
    if pending:
        out.append(pending)
    return out


def exact_ids(matrix: np.ndarray, q: np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """Row indices of the exact top k (over ``rows`` if given)."""
    m = matrix if rows is None else matrix[rows]
    scores = m @ q
    k = min(TOP_K, len(scores))
    part = np.argpartition(-scores, k - 1)[:k]
    best = part[np.argsort(-scores[part])]
    return best if rows is None else rows[best]


def _wait_for_graph(backend: Any) -> dict[str, Any] | None:
    """SQLite: wait until the collection's HNSW graph has caught up (built, or loaded from beside the file);
    its figures, or None without one (PostgreSQL, the ``ann`` extra absent or switched off)."""
    ann = getattr(backend, "ann", None)
    if ann is None:
        return None
    folder = backend.ann_folder
    saved_files = set() if folder is None else {p.suffix for p in folder.glob("*.*")}
    started = time.perf_counter()
    if not ann.idle(timeout=4 * 3600):
        raise SystemExit("the HNSW graph did not catch up within 4 hours")
    ready_s = time.perf_counter() - started
    graphs = list(backend.matrices.graphs.values())
    if not graphs:  # below the threshold: searches scan
        return {"graph": False, "min_rows": ann.config.min_rows}
    graph = graphs[0]
    kind = getattr(graph, "kind", "graph")
    saved = (".ivf" if kind == "lists" else ".usearch") in saved_files  # the index was there before the run
    _log(f"  {kind} {'loaded' if saved else 'built'}: waited {ready_s:.1f} s after the first searches")
    snapshot = backend.matrices.snapshot(graph.identity.collection_pk)
    return {"graph": True, "loaded_from_file": saved, "waited_for_graph_s": round(ready_s, 2),
            "kind": kind, "memory_mb": round(getattr(graph, "memory_bytes", 0) / 2**20, 1),
            "vectors": len(graph), "probe_share": getattr(ann.config, "probe_share", None),
            "matrix_mb": None if snapshot is None else round(snapshot.vectors.nbytes / 2**20, 1),
            "process_rss_mb": _rss_mb(), "ef_search": ann.config.ef_search,
            "breadth": ann.config.breadth(len(graph), max(TOP_K, ann.config.candidates))
            if hasattr(ann.config, "breadth") else ann.config.ef_search,  # (the code before it came)
            "candidates": ann.config.candidates, "min_rows": ann.config.min_rows}


def _server_memory(backend: Any) -> dict[str, Any]:
    """The PostgreSQL server's ``shared_buffers`` and the size of the benchmark collection's vector indexes:
    a search whose index does not fit the server's buffers reads pages from the OS cache (slower; the
    README advises sizing ``shared_buffers`` above the indexes). The throwaway server runs with
    PostgreSQL's default, 128 MB."""
    with backend.connection() as conn:
        buffers = conn.execute("SHOW shared_buffers").fetchone()[0]
        indexes = {str(name): round(int(size) / 2**20, 1) for name, size in conn.execute(
            "SELECT c.relname, pg_relation_size(c.oid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
            "JOIN pg_am a ON a.oid = c.relam WHERE i.indrelid = 'bunko.chunks'::regclass "
            "AND a.amname IN ('hnsw', 'ivfflat') ORDER BY c.relname")}
    return {"shared_buffers": buffers, "vector_indexes_mb": indexes}


def _rss_mb() -> dict[str, float]:
    """The process's resident set now and at its peak (MB): the benchmark's own copy of the vectors included."""
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines() if ":" in line)
    return {key: round(int(fields[name].split()[0]) / 1024, 1) for key, name in (("now", "VmRSS"), ("peak", "VmHWM"))}


def _write_to_found(store: Any, matrix: np.ndarray, rng: np.random.Generator) -> float:
    """Seconds from writing one new document (10 chunks) until a vector search finds its chunks; the
    document is deleted again afterwards, so the file still holds the N chunks of the benchmark."""
    vectors = matrix[rng.choice(len(matrix), 10, replace=False)] + rng.normal(scale=0.05, size=(10, 512))
    vectors = (vectors / np.linalg.norm(vectors, axis=1, keepdims=True)).astype(np.float32)
    chunks = [ChunkWrite(new_id(), f"新しい段落 {j}", j, 0, 8, 8, {"chunk_index": j}) for j in range(10)]
    doc = DocumentWrite(new_id(), "jsquad/new.txt", "hash-new", {"source": "jsquad/new.txt"}, chunks, vectors)
    started = time.perf_counter()
    store.write_documents("bench", [doc])
    while {h.chunk_id for h in vector_query(store, "bench", vectors[3], 1)} != {chunks[3].id}:
        if time.perf_counter() - started > 600:
            raise SystemExit("a new chunk was not found within 10 minutes")
    found_s = time.perf_counter() - started
    store.delete_documents([doc.id], "bench")
    return round(found_s, 4)


def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = np.random.default_rng(args.seed)
    paragraphs, questions = load_base(Path(args.data))
    embedder = UniversalSentenceEncoderEmbedder()
    loop = asyncio.new_event_loop()
    sentences = sorted({s for p in paragraphs for s in p})
    cache = Path(tempfile.gettempdir()) / f"bunko-bench-search-{len(sentences)}.npy"
    if cache.exists():  # the sentence vectors of an earlier run (same data, same model)
        base = np.load(cache)
    else:
        _log(f"embedding {len(sentences):,} sentences ...")
        started = time.perf_counter()
        base = loop.run_until_complete(embedder.embed_array(sentences))
        _log(f"  {time.perf_counter() - started:.1f} s")
        np.save(cache, np.asarray(base, dtype=np.float32))
    vectors = dict(zip(sentences, np.asarray(base, dtype=np.float32), strict=True))
    texts, matrix = build_chunks(paragraphs, vectors, args.chunks, rng)
    buckets = rng.integers(0, BUCKETS, size=args.chunks)
    documents, ids = make_documents(texts, matrix, buckets)
    picked = [questions[int(i)] for i in rng.choice(len(questions), size=args.queries + 5, replace=False)]
    embed_times = []
    query_vectors = []
    for q in picked:
        t = time.perf_counter()
        query_vectors.append(np.asarray(loop.run_until_complete(embedder.embed_query(q)), dtype=np.float32))
        embed_times.append(time.perf_counter() - t)
    loop.close()

    scan_times, scan_cpu = [], []
    for q in query_vectors:
        t, c = time.perf_counter(), time.process_time()
        exact_ids(matrix, q)
        scan_times.append(time.perf_counter() - t)
        scan_cpu.append(time.process_time() - c)

    server = None
    folder = None
    reuse = False
    if args.store == "postgres":
        if args.database_url:
            url = args.database_url
            reuse = args.reuse
        else:
            server = _Server(None)
            url = server.url
    elif args.sqlite_file:
        reuse = Path(args.sqlite_file).exists()
        url = f"sqlite:///{args.sqlite_file}"
    else:
        folder = tempfile.TemporaryDirectory()
        url = f"sqlite:///{folder.name}/bench.db"
    backend = open_backend(url)
    try:
        store = backend.for_tenant("bench")
        store.ensure_collection("bench", embedder_info(embedder))
        if reuse:  # the chunks of an earlier run with the same N and seed, in row order
            where = args.sqlite_file or redact_url(url)
            # Each chunk's row from its document (jsquad/<d>.txt) and its index in it: ids need not follow
            # the order the rows were written in.
            bounds = np.linspace(0, args.chunks, DOCUMENTS + 1).astype(int)
            with store.session() as (conn, _tenant):
                stored = conn.execute("SELECT c.uid, d.source, c.chunk_index FROM chunks c JOIN documents d "
                                      "ON d.tenant_id = c.tenant_id AND d.id = c.document_id").fetchall()
            if not stored and args.store == "postgres":  # nothing there yet: this run ingests
                reuse = False
            elif len(stored) != args.chunks:
                raise SystemExit(f"{where} holds {len(stored)} chunks, not {args.chunks}")
            else:
                _log(f"reusing {where}")
                ids = [""] * args.chunks
                for uid, source, index in stored:
                    ids[int(bounds[int(source.split("/")[1].split(".")[0])]) + int(index)] = uid
        started = time.perf_counter()
        build_s = 0.0
        with contextlib.nullcontext() if reuse else store.bulk_load("bench"):
            if not reuse:
                _log(f"ingesting {args.chunks:,} chunks into {args.store} ...")
            # One transaction per batch; the next batch is analyzed while one is written.
            for _ in store.write_batches("bench", [] if reuse else batches(documents, args.batch_chunks)):
                pass
            written = time.perf_counter()
            last = ids[-1]
            hits = vector_query(store, "bench", matrix[-1], TOP_K)  # identical mixes may tie: look at the top 10
            searchable = time.perf_counter()
            assert last in {h.chunk_id for h in hits}, "the last chunk written is not found"
            build_started = time.perf_counter()
        build_s = time.perf_counter() - build_started
        vector_query(store, "bench", matrix[0], 1)  # the first search after the build (loads SQLite's matrix)
        build_s = time.perf_counter() - build_started
        _log(f"  written in {written - started:.1f} s, index {build_s:.1f} s")
        ann = _wait_for_graph(backend)
        position = {uid: i for i, uid in enumerate(ids)}

        filters = {
            "filtered_1pct": ({"bucket": {"$in": list(range(10, 20))}},
                              np.flatnonzero((buckets >= 10) & (buckets < 20))),
            "filtered_0.1pct": ({"bucket": 7}, np.flatnonzero(buckets == 7)),
        }
        timings: dict[str, list[float]] = {m: [] for m in ("vector", "keyword", "hybrid", "hybrid_sequential",
                                                            "hybrid_concurrent", *filters)}
        recall: dict[str, list[float]] = {m: [] for m in ("vector", *filters)}
        depth = TOP_K * HYBRID_DEPTH
        size = 0 if args.no_postings_cache else CACHE_BYTES
        caches = {mode: PostingsCache(size) for mode in ("keyword", "hybrid", "hybrid_sequential", "hybrid_concurrent")}
        index = getattr(backend.postings, "index", None)  # the segments held in memory, shared by every mode
        if index is not None and args.no_postings_cache:
            index.limit = 0
        # The exact answers, before the timing: numpy's product runs on BLAS threads that spin for a while
        # after it, taking the cores from whatever search comes next.
        truths = {"vector": [set(exact_ids(matrix, q).tolist()) for q in query_vectors]}
        for name, (_, rows) in filters.items():
            truths[name] = [set(exact_ids(matrix, q, rows).tolist()) for q in query_vectors]
        vector_cpu: list[float] = []
        cpu: dict[str, list[float]] = {m: [] for m in ("keyword", "hybrid", "hybrid_sequential", "hybrid_concurrent")}
        for i, (question, q) in enumerate(zip(picked, query_vectors, strict=True)):
            warm = i < 5
            t, c = time.perf_counter(), time.process_time()
            found = vector_query(store, "bench", q, TOP_K)
            elapsed = time.perf_counter() - t
            if not warm:
                timings["vector"].append(elapsed)
                vector_cpu.append(time.process_time() - c)
                truth = truths["vector"][i]
                recall["vector"].append(len(truth & {position[h.chunk_id] for h in found}) / len(truth))
            # Each keyword mode has a postings cache of its own, so that every mode meets each question's
            # terms first in its own run, as a server that answered the earlier questions would.
            backend.postings.cache = caches["keyword"]
            t, c = time.perf_counter(), time.process_time()
            keyword_query(store, "bench", question, TOP_K)
            elapsed = time.perf_counter() - t
            if not warm:
                timings["keyword"].append(elapsed)
                cpu["keyword"].append(time.process_time() - c)
            # As a hybrid search runs: the collection row, then both legs (at the same time or in turn, as the
            # store prefers), fusion and the hits read once (hybrid); and either way (hybrid_sequential /
            # hybrid_concurrent). The three take turns going first: the first after the keyword search is slower.
            ways: list[tuple[str, bool | None]] = [("hybrid", None), ("hybrid_sequential", False),
                                                   ("hybrid_concurrent", True)]
            for name, concurrent in ways[i % 3:] + ways[:i % 3]:
                backend.postings.cache = caches[name]
                t, c = time.perf_counter(), time.process_time()
                row = store.read_collection("bench")
                collect_legs(store, row, Legs(question, q, True, depth, TOP_K, fusion=DEFAULT_FUSION),
                             concurrent=concurrent)
                elapsed = time.perf_counter() - t
                if not warm:
                    timings[name].append(elapsed)
                    cpu[name].append(time.process_time() - c)
            for name, (flt, _rows) in filters.items():
                t = time.perf_counter()
                found = vector_query(store, "bench", q, TOP_K, filter=flt)
                elapsed = time.perf_counter() - t
                if not warm:
                    timings[name].append(elapsed)
                    truth = truths[name][i]
                    recall[name].append(len(truth & {position[h.chunk_id] for h in found}) / len(truth))
        if ann is not None:
            ann["write_to_found_s"] = _write_to_found(store, matrix, rng)
        report: dict[str, Any] = {
            "store": args.store,
            "chunks": args.chunks,
            "exact_scan_p50_ms": _stats(scan_times)["p50_ms"],
            # CPU time of the process (every thread): on a shared machine it leaves out waiting for a core.
            "cpu_p50_ms": {"exact_scan": _stats(scan_cpu)["p50_ms"], "vector": _stats(vector_cpu)["p50_ms"],
                           **{m: _stats(s)["p50_ms"] for m, s in cpu.items()}},
            "query_embed_p50_ms": _stats(embed_times)["p50_ms"],
            "modes": {m: _stats(s) for m, s in timings.items()},
            "recall_at_10": {m: round(float(np.mean(r)), 4) for m, r in recall.items()},
            "ingest_chunks_per_s": None if reuse else round(args.chunks / (written - started), 1),
            "searchable_after_s": None if reuse else round(searchable - started, 2),
            "index_build_s": None if reuse else round(build_s, 2),
            "ann": ann,
            "queries": args.queries,
            "batch_chunks": args.batch_chunks,
            "postings_cache": not args.no_postings_cache,
            "postings_held_mb": None if index is None else round(index.held_bytes / 2**20, 1),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "postgres_server": _server_memory(backend) if args.store == "postgres" else None,
        }
        exact = report["exact_scan_p50_ms"]
        report["ratios_to_exact_scan"] = {m: round(v["p50_ms"] / exact, 2) for m, v in report["modes"].items()}
        return report
    finally:
        backend.close()
        if server is not None:
            server.close()
        if folder is not None:
            folder.cleanup()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["sqlite", "postgres"], required=True)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100, help="timed questions (after 5 warm-up ones)")
    parser.add_argument("--database-url", default=None, help="postgresql:// URL (default: a throwaway server)")
    parser.add_argument("--data", default=str(DATA), help="the JSQuAD dev folder (corpus.jsonl, queries.jsonl)")
    parser.add_argument("--sqlite-file", default=None,
                        help="keep the SQLite database here and reuse it on the next run (same N and seed)")
    parser.add_argument("--batch-chunks", type=int, default=BATCH_CHUNKS,
                        help=f"chunks per write transaction (default {BATCH_CHUNKS:,}, as imports and copies write)")
    parser.add_argument("--reuse", action="store_true",
                        help="with --database-url: search the chunks an earlier run left there (same N and seed)")
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--no-postings-cache", action="store_true",
                        help="keyword searches read every posting from the database (as before the cache)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    report = run(args)
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        for key, value in report.items():
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
