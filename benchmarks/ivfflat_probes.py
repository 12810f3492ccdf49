"""PostgreSQL IVFFlat at N chunks: recall@10 and time by lists probed and candidates re-ranked.

The vectors of ``bench_search.py --chunks N`` (same generator and seed) go into a plain table ``v`` of a
database of their own, each beside a 600-byte text so that the vector is stored out of line as in
``bunko.chunks``, under bunko's index (IVFFlat over ``halfvec(512)``, cosine, the square root of N lists).
Each setting ``PROBES:CANDIDATES`` runs ``Plan.ivfflat_sql``'s statement (the nearest CANDIDATES by halfvec,
re-ranked by the full vectors) for ``bench_search.py``'s questions (the same draws), truth by numpy, and
prints recall@10, the wall p50, the server's execution p50 (``EXPLAIN ANALYZE`` of 15 of them) and the
buffers one search touches. Building takes a few minutes at a million (no keyword postings, no ingest);
later runs reuse the table and the questions (``--folder``).

Usage::

    python benchmarks/ivfflat_probes.py --database-url URL [--chunks 1000000] [--folder DIR] 40:50 30:20 ...
"""

from __future__ import annotations

import argparse
import asyncio
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_search import BUCKETS, TOP_K, build_chunks, exact_ids, load_base

from bunko.embedders import UniversalSentenceEncoderEmbedder

QUERIES = 60


def prepare(args: argparse.Namespace, conn: object) -> tuple[list[np.ndarray], list[set[int]]]:
    """The table (built if missing) and the questions' vectors with their exact top 10 (kept in --folder)."""
    folder = Path(args.folder)
    folder.mkdir(parents=True, exist_ok=True)
    saved = folder / f"ivfflat-probes-{args.chunks}.npz"
    built = conn.execute("SELECT to_regclass('v') IS NOT NULL").fetchone()[0]  # type: ignore[attr-defined]
    if saved.exists() and built:
        z = np.load(saved)
        return list(z["queries"]), [set(r.tolist()) for r in z["truth"]]
    rng = np.random.default_rng(args.seed)
    paragraphs, questions = load_base(Path(args.data))
    sentences = sorted({s for p in paragraphs for s in p})
    cache = Path(tempfile.gettempdir()) / f"bunko-bench-search-{len(sentences)}.npy"  # bench_search.py's
    embedder = UniversalSentenceEncoderEmbedder()
    loop = asyncio.new_event_loop()
    base = np.load(cache) if cache.exists() else np.asarray(
        loop.run_until_complete(embedder.embed_array(sentences)), dtype=np.float32)
    _, matrix = build_chunks(paragraphs, dict(zip(sentences, base, strict=True)), args.chunks, rng)
    rng.integers(0, BUCKETS, size=args.chunks)  # bench_search.py draws the buckets next, then the questions
    picked = [questions[int(i)] for i in rng.choice(len(questions), size=QUERIES + 5, replace=False)]
    vectors = [np.asarray(loop.run_until_complete(embedder.embed_query(q)), dtype=np.float32) for q in picked][5:]
    truth = [set(exact_ids(matrix, q).tolist()) for q in vectors]
    if not built:
        started = time.perf_counter()
        conn.execute("CREATE TABLE v (id int8 PRIMARY KEY, pad text, embedding vector(512) NOT NULL)")  # type: ignore[attr-defined]
        with conn.cursor() as cur, cur.copy(  # type: ignore[attr-defined]
                "COPY v (id, pad, embedding) FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int8", "text", "vector"])
            pad = "x" * 600
            for i in range(args.chunks):
                copy.write_row((i, pad, matrix[i]))
        lists = max(10, round(math.sqrt(args.chunks)))
        conn.execute("SET maintenance_work_mem = '2GB'")  # type: ignore[attr-defined]
        conn.execute(f"CREATE INDEX v_ivf ON v USING ivfflat ((embedding::halfvec(512)) halfvec_cosine_ops) "  # type: ignore[attr-defined]
                     f"WITH (lists = {lists})")
        conn.execute("ANALYZE v")  # type: ignore[attr-defined]
        print(f"built in {time.perf_counter() - started:.0f} s ({lists} lists)", file=sys.stderr)
    np.savez(saved, queries=np.asarray(vectors), truth=np.asarray([sorted(t) for t in truth]))
    return vectors, truth


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", required=True, help="postgresql:// URL of a database for the table")
    parser.add_argument("--chunks", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=20240601)
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared" / "data" / "jsquad-dev"))
    parser.add_argument("--folder", default=tempfile.gettempdir(), help="where the questions and their truth are kept")
    parser.add_argument("settings", nargs="+", help="PROBES:CANDIDATES, e.g. 40:50 30:20")
    args = parser.parse_args(argv)
    import psycopg
    from pgvector.psycopg import register_vector

    conn = psycopg.connect(args.database_url, autocommit=True)
    conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
    register_vector(conn)
    vectors, truth = prepare(args, conn)
    statement = ("WITH candidates AS MATERIALIZED (SELECT id, embedding FROM v ORDER BY (embedding::halfvec(512)) "
                 "<=> %s::halfvec(512) LIMIT %s) SELECT id, 1 - (embedding <=> %s::vector) AS score FROM candidates "
                 f"ORDER BY score DESC, id LIMIT {TOP_K}")
    print(f"shared_buffers {conn.execute('SHOW shared_buffers').fetchone()[0]}")
    for setting in args.settings:
        probes, candidates = (int(x) for x in setting.split(":"))
        conn.execute(f"SET ivfflat.probes = {probes}")
        for q in vectors[:3]:  # warm
            conn.execute(statement, (q, candidates, q)).fetchall()
        recall, walls, server = [], [], []
        buffers = ""
        for q, exact in zip(vectors, truth, strict=True):
            started = time.perf_counter()
            rows = conn.execute(statement, (q, candidates, q)).fetchall()
            walls.append(time.perf_counter() - started)
            recall.append(len(exact & {int(r[0]) for r in rows}) / TOP_K)
        for q in vectors[:15]:
            plan = [r[0] for r in conn.execute("EXPLAIN (ANALYZE, BUFFERS) " + statement, (q, candidates, q))]
            server.append(float(next(p for p in plan if "Execution Time" in p).split(":")[1].split()[0]))
            buffers = next((p.strip() for p in plan if "Buffers" in p), "")
        print(f"probes {probes} re-ranked {candidates}: recall@10 {np.mean(recall):.4f} (worst {min(recall):.1f}), "
              f"wall p50 {np.median(walls) * 1000:.1f} ms, server p50 {np.median(server):.1f} ms, {buffers}",
              flush=True)
    conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
