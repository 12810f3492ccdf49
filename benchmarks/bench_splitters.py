"""Splitter speed on large and pathological inputs (the figures the splitter tests used to time).

Splits 1 MB of mixed Japanese/English text and five 300,000-character runs of one separator or
punctuation mark with the default ``recursive`` splitter (512 characters, 64 overlap), and prints
the best of ``--repeat`` runs per input, with its size ratio to the 1 MB case: a quadratic scan shows
as a time far out of proportion to the input.

    python benchmarks/bench_splitters.py [--repeat 3] [--json]
"""

from __future__ import annotations

import argparse
import json
import time

from bunko.splitters import RecursiveCharacterSplitter

BLOCK = "今日は晴れです。明日は雨でしょう。The quick brown fox jumps over the lazy dog. " * 12 + "\n\n"
INPUTS = {
    "mixed-1MB": BLOCK * (1_000_000 // len(BLOCK) + 1),
    "spaces": "a" + " " * 300_000 + "b",
    "dots": "." * 300_000,
    "maru": "。" * 300_000,
    "newline-maru": "\n。" * 150_000,
    "mixed-space": " \t" * 150_000 + "x",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    splitter = RecursiveCharacterSplitter()
    rows = []
    for name, text in INPUTS.items():
        best = float("inf")
        for _ in range(max(1, args.repeat)):
            started = time.perf_counter()
            chunks = splitter.split(text)
            best = min(best, time.perf_counter() - started)
        rows.append({"input": name, "characters": len(text), "chunks": len(chunks), "seconds": round(best, 4),
                     "us_per_kchar": round(best / len(text) * 1e9, 1)})
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'input':14s} {'characters':>10s} {'chunks':>7s} {'best s':>8s} {'µs/1k chars':>12s}")
    for r in rows:
        print(f"{r['input']:14s} {r['characters']:>10,} {r['chunks']:>7,} {r['seconds']:>8.4f} "
              f"{r['us_per_kchar']:>12.1f}")


if __name__ == "__main__":
    main()
