"""What embedding a question (and an ingest batch) costs with the bundled model, by BLAS threads.

Times, in one process:

* ``query_embed_ms``: one short question embedded through ``UniversalSentenceEncoderEmbedder``
  (the engine's path: the threads ``blas_threads(1)`` picks), p50 and p95 over ``--repeat`` calls;
* ``by_threads``: for 1, 2 and 4 BLAS threads (the package's own default is 4), one question's p50
  and the throughput of batches of 8, 64 and 256 JSQuAD paragraphs (texts per second).

Usage::

    python benchmarks/bench_embed.py [--data ../shared/data/jsquad-dev] [--repeat 50] [--json]

On a loaded machine the 4-thread rows suffer most (threads wait for busy cores); run it idle
for the figures in docs/ARCHITECTURE.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from bunko.embedders import UniversalSentenceEncoderEmbedder, _use_model, available_cores, blas_threads

QUESTION = "宮澤賢治の代表作は何ですか？"
FALLBACK = ["家庭での水の備蓄は一人一日三リットルを目安に、最低三日分を用意しましょう。"] * 256


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)


def paragraphs(folder: str) -> list[str]:
    path = Path(folder) / "corpus.jsonl"
    if not path.is_file():
        return FALLBACK
    with path.open(encoding="utf-8") as handle:
        texts = [json.loads(line)["text"] for line in handle if line.strip()]
    return (texts * (256 // max(1, len(texts)) + 1))[:256]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=str(Path(__file__).resolve().parents[2] / "shared/data/jsquad-dev"))
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    embedder = UniversalSentenceEncoderEmbedder()
    embedder.warm_up()

    async def engine_path() -> list[float]:
        times = []
        await embedder.embed_array([QUESTION], query=True)
        for _ in range(args.repeat):
            started = time.perf_counter()
            await embedder.embed_array([QUESTION], query=True)
            times.append((time.perf_counter() - started) * 1000)
        return times

    times = asyncio.run(engine_path())
    report: dict[str, Any] = {
        "cores": available_cores(),
        "threads_for_one_question": blas_threads(1),
        "threads_for_a_batch_of_256": blas_threads(256),
        "query_embed_ms": {"p50": percentile(times, 0.5), "p95": percentile(times, 0.95)},
        "by_threads": {},
    }
    model = _use_model()
    texts = paragraphs(args.data)
    for threads in (1, 2, 4):
        model.threads = model._model.threads = threads
        model.encode([QUESTION])
        one = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            model.encode([QUESTION])
            one.append((time.perf_counter() - started) * 1000)
        row: dict[str, Any] = {"one_question_p50_ms": round(statistics.median(one), 2)}
        for size in (8, 64, 256):
            started = time.perf_counter()
            model.encode(texts[:size])
            row[f"batch_{size}_texts_per_s"] = round(size / (time.perf_counter() - started), 1)
        report["by_threads"][str(threads)] = row
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
