"""What embedding a question and a batch of paragraphs costs with the bundled model, by how it is threaded.

Times, in one process:

* ``query_embed_ms``: one short question embedded through ``UniversalSentenceEncoderEmbedder`` (the
  engine's path: one call, one BLAS thread), p50 and p95 over ``--repeat`` calls;
* ``batch_256``: the throughput (texts per second) of a batch of 256 JSQuAD paragraphs embedded
  (a) through the embedder as the engine does it (``embed_array``: calls of ``batch_size`` texts,
  ``concurrency`` of them side by side, one BLAS thread each) and (b) as one call of the package with
  1, 2 and 4 BLAS threads (its own default is 4) — the rows alternate for ``--rounds`` rounds, so a
  busy machine weighs on all of them alike; the median of the rounds is printed;
* ``by_threads``: one question's p50 with 1, 2 and 4 BLAS threads.

Usage::

    python benchmarks/bench_embed.py [--data ../shared/data/jsquad-dev] [--repeat 50] [--rounds 3] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from functools import partial
from pathlib import Path
from typing import Any

from bunko.embedders import UniversalSentenceEncoderEmbedder, _use_model, available_cores

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
    parser.add_argument("--rounds", type=int, default=3)
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
        "engine_calls_side_by_side": embedder.concurrency,
        "engine_texts_per_call": embedder.batch_size,
        "query_embed_ms": {"p50": percentile(times, 0.5), "p95": percentile(times, 0.95)},
        "batch_256": {},
        "by_threads": {},
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    model = _use_model()
    texts = paragraphs(args.data)

    def one_call(threads: int) -> None:
        model.threads = model._model.threads = threads
        try:
            model.encode(texts)
        finally:
            model.threads = model._model.threads = 1

    ways: dict[str, Any] = {"engine": lambda: asyncio.run(embedder.embed_array(texts)),
                            **{f"one_call_{t}_blas_threads": partial(one_call, t) for t in (1, 2, 4)}}
    rounds: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.rounds):
        for name, way in ways.items():
            started = time.perf_counter()
            way()
            rounds[name].append(len(texts) / (time.perf_counter() - started))
    report["batch_256"] = {name: round(statistics.median(r), 1) for name, r in rounds.items()}
    for threads in (1, 2, 4):
        model.threads = model._model.threads = threads
        model.encode([QUESTION])
        one = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            model.encode([QUESTION])
            one.append((time.perf_counter() - started) * 1000)
        report["by_threads"][str(threads)] = {"one_question_p50_ms": round(statistics.median(one), 2)}
    model.threads = model._model.threads = 1
    if args.json:
        print(json.dumps(report, ensure_ascii=False))
    else:
        print(json.dumps(report, ensure_ascii=False, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
