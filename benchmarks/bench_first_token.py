"""Time to the first streamed token of an answer (R36), with a local OpenAI-compatible LLM.

The LLM is the test suite's fake OpenAI server (``tests/provider_fakes.py``: the real wire format,
SSE frames flushed one by one, on a local socket), so the figure is bunko's own share: the search,
building the context and the prompt, the HTTP request and the first SSE frame. The engine runs on
a temporary SQLite file holding ``examples/docs``, with the bundled embedder.

Reported (milliseconds, p50 and p95 over ``--questions`` asks, each question asked once so no
result comes from the search cache):

* ``search_ms``: from the call to the ``search_results`` event;
* ``first_token_after_retrieval_ms``: from ``search_results`` to the first ``token`` event;
* ``first_token_ms``: from the call to the first ``token`` event.

Usage::

    python benchmarks/bench_first_token.py [--questions 40] [--mode hybrid] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.provider_fakes import OpenAIFake  # noqa: E402

from bunko import Bunko  # noqa: E402

QUESTIONS = ["水は何日分？", "避難場所はどこ？", "家具の固定方法は？", "非常持ち出し袋に入れるものは？",
             "地震のときはどうする？", "連絡方法を決めておくには？", "What should I pack in a go-bag?",
             "What to do during an earthquake?"]


def percentiles(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    pick = lambda q: round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2)  # noqa: E731
    return {"p50": pick(0.5), "p95": pick(0.95)}


async def run(engine: Bunko, questions: list[str], mode: str) -> dict[str, list[float]]:
    scope = engine.tenant("bench")
    times: dict[str, list[float]] = {"search_ms": [], "first_token_after_retrieval_ms": [], "first_token_ms": []}
    for question in questions:
        started = time.perf_counter()
        retrieved = first = None
        async for event in scope.astream_ask(question, "docs", mode=mode):
            now = time.perf_counter()
            if event.type == "search_results" and retrieved is None:
                retrieved = now
            elif event.type == "token" and first is None:
                first = now
        assert retrieved is not None and first is not None, "the stream had no search results or no token"
        times["search_ms"].append((retrieved - started) * 1000)
        times["first_token_after_retrieval_ms"].append((first - retrieved) * 1000)
        times["first_token_ms"].append((first - started) * 1000)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", type=int, default=40)
    parser.add_argument("--mode", default="hybrid", choices=["hybrid", "vector", "keyword"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    # Each question once (a numbered variant after the first round), so no answer comes from the cache.
    questions = [q if i < len(QUESTIONS) else f"{q} ({i // len(QUESTIONS)})"
                 for i, q in ((i, QUESTIONS[i % len(QUESTIONS)]) for i in range(args.questions))]
    fake = OpenAIFake(reply_text="水は一人一日三リットル、最低三日分を備えます[1]。").start()
    try:
        with tempfile.TemporaryDirectory() as folder:
            engine = Bunko(f"sqlite:///{folder}/bench.db", llm="openai-compatible:bench-llm",
                           llm_base_url=fake.url + "/v1", llm_api_key="bench")
            try:
                engine.tenant("bench").ingest([ROOT / "examples" / "docs"], "docs")
                asyncio.run(run(engine, ["準備", "warm-up"], args.mode))  # the model loaded, the client open
                times = asyncio.run(run(engine, questions, args.mode))
            finally:
                engine.close()
    finally:
        fake.stop()
    report: dict[str, Any] = {"mode": args.mode, "questions": len(questions),
                              **{name: percentiles(values) for name, values in times.items()}}
    print(json.dumps(report, ensure_ascii=False, indent=None if args.json else 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
