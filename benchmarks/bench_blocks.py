"""Step overhead of workflow blocks: the ``rag-query`` block against ``Tenant.ask`` on the same question (issue 15).

Ingests ``examples/docs`` into a fresh store (a temporary SQLite file, or ``--url``), then asks the same
questions both ways, alternating question by question so both paths see the same machine load:

* ``ask``: ``await tenant.aask(question, collection=...)`` (search, extractive answer unless an LLM is
  configured, usage recorded);
* ``block``: ``await tenant.arun_workflow(spec, {"query": question})`` with a one-step ``rag-query``
  workflow given as a dict (the spec is parsed and every config validated on each run, as over HTTP);
* ``block (parsed)``: the same with a ``Workflow`` parsed once (what a caller that reuses a workflow pays).

Reported: p50 / p95 / mean per path, the per-question difference block - ask (p50 and mean), the time
to parse and validate the one-step spec alone, and the runner's own cost per step: a one-step workflow
of a block that does nothing (parse, config check, ctx and usage recorder, step record). Both paths
return the same answer (checked). On a loaded machine the ask/block figures are dominated by the
extractive answer's embedding calls and their noise; the last two figures are what the block path adds.

Usage::

    python benchmarks/bench_blocks.py [--rounds 30] [--url sqlite:///... | postgresql://...] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bunko import Bunko
from bunko.blocks import register_block, unregister_block
from bunko.blocks.base import Block
from bunko.blocks.workflow import Workflow

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = [
    "水は何日分備蓄すればいいですか？",
    "非常用持ち出し袋には何を入れるべきですか？",
    "What should I pack in a go-bag?",
    "地震が起きたらまず何をしますか？",
    "How much water per person per day?",
]
SPEC = {"name": "ask", "steps": [{"id": "answer", "block": "rag-query", "config": {"collection": "bench"}}]}


class Noop(Block):
    """A block that does nothing: what remains is the runner's own cost."""

    name = "bench-noop"
    category = "data"
    description = "does nothing"

    async def run(self, ctx: Any, input: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        return input


def _stats(samples: list[float]) -> dict[str, float]:
    ms = np.asarray(samples) * 1000
    return {"p50_ms": round(float(np.percentile(ms, 50)), 2), "p95_ms": round(float(np.percentile(ms, 95)), 2),
            "mean_ms": round(float(ms.mean()), 2)}


async def measure(engine: Bunko, rounds: int) -> dict[str, Any]:
    tenant = engine.tenant("bench")
    await tenant.aingest([ROOT / "examples" / "docs"], collection="bench")
    parsed = Workflow.parse(SPEC)
    for question in QUESTIONS:  # warm up both paths (model, caches)
        asked = await tenant.aask(question, collection="bench")
        block = (await tenant.arun_workflow(SPEC, {"query": question})).output
        assert block["answer"] == asked.answer, "the block and ask must answer alike"
    times: dict[str, list[float]] = {"ask": [], "block": [], "block (parsed)": []}
    diffs: list[float] = []
    for round_ in range(rounds):
        for index, question in enumerate(QUESTIONS):
            order = ["ask", "block", "block (parsed)"]
            if (round_ + index) % 2:
                order.reverse()
            took: dict[str, float] = {}
            for path in order:
                started = time.perf_counter()
                if path == "ask":
                    await tenant.aask(question, collection="bench")
                elif path == "block":
                    await tenant.arun_workflow(SPEC, {"query": question})
                else:
                    await tenant.arun_workflow(parsed, {"query": question})
                took[path] = time.perf_counter() - started
                times[path].append(took[path])
            diffs.append(took["block"] - took["ask"])
    parse, noop = [], []
    for _ in range(200):
        started = time.perf_counter()
        Workflow.parse(SPEC)
        parse.append(time.perf_counter() - started)
    register_block("bench-noop", Noop)
    try:
        spec = {"name": "noop", "steps": [{"block": "bench-noop"}]}
        for _ in range(200):
            started = time.perf_counter()
            await tenant.arun_workflow(spec, {"query": "x"})
            noop.append(time.perf_counter() - started)
    finally:
        unregister_block("bench-noop")
    return {
        "store": engine.backend.scheme,
        "questions": len(QUESTIONS),
        "runs_per_path": rounds * len(QUESTIONS),
        "results": {path: _stats(samples) for path, samples in times.items()},
        "block_minus_ask_ms": {"p50": round(statistics.median(diffs) * 1000, 2),
                               "mean": round(statistics.fmean(diffs) * 1000, 2)},
        "parse_and_validate_ms": _stats(parse),
        "noop_step_ms": _stats(noop),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30, help="rounds over the questions (default 30)")
    parser.add_argument("--url", default=None, help="store URL (default: a temporary SQLite file)")
    parser.add_argument("--json", action="store_true", help="print JSON on stdout")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bunko-bench-blocks-") as folder:
        url = args.url or f"sqlite:///{Path(folder) / 'bench.db'}"
        load = os.getloadavg()
        with Bunko(url, home=folder) as engine:
            report = asyncio.run(measure(engine, args.rounds))
        report["load_average"] = [round(load[0], 2), round(os.getloadavg()[0], 2)]
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"store {report['store']}, {report['runs_per_path']} runs per path, load {report['load_average']}",
          file=sys.stderr)
    for path, figures in report["results"].items():
        print(f"{path:<15} p50 {figures['p50_ms']:8.2f} ms  p95 {figures['p95_ms']:8.2f} ms  "
              f"mean {figures['mean_ms']:8.2f} ms")
    diff = report["block_minus_ask_ms"]
    print(f"block - ask     p50 {diff['p50']:8.2f} ms  mean {diff['mean']:8.2f} ms")
    print(f"parse+validate  p50 {report['parse_and_validate_ms']['p50_ms']:8.2f} ms")
    noop = report["noop_step_ms"]
    print(f"no-op step      p50 {noop['p50_ms']:8.2f} ms  p95 {noop['p95_ms']:8.2f} ms")


if __name__ == "__main__":
    main()
