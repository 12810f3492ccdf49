"""Loader speed and text fidelity over a folder of documents (by default the shared corpus).

Loads every file of the folder's manifest (``documents.jsonl``; every file in the folder
without one) with ``bunko.loaders.load_path``, normalises and splits each document as
ingest does (the default splitter), and reports per file and in total:

* the load time, wall clock and CPU time of the process (best of ``--repeat`` runs each: on a
  busy machine the CPU time is the steadier figure);
* U+FFFE and U+00AD (soft hyphen) characters left in the chunks: hyphenation markers
  that should have joined a word back;
* spaces between two CJK characters (Han, kana, CJK punctuation, full-width forms) in
  the chunks: a space a PDF reader inserted inside a Japanese sentence.

    BUNKO_SHARED_DATA=/path/to/data python benchmarks/bench_loaders.py [--kind pdf] [--repeat 1] [--json]
    python benchmarks/bench_loaders.py --folder tests/data
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from pathlib import Path
from typing import Any

from bunko.errors import BunkoError
from bunko.indexing import IndexManager
from bunko.loaders import LoadOptions, load_path
from bunko.preprocess import Preprocessor
from bunko.splitters import DEFAULT_SPLITTER, build_splitter

_CJK = r"[\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff01-\uff60\uff62-\uff9f]"
CJK_SPACE = re.compile(f"(?<={_CJK})[^\\S\\n]+(?={_CJK})")
HYPHEN_MARKS = re.compile("[\ufffe\u00ad]")


def manifest(folder: Path) -> list[dict[str, Any]]:
    path = folder / "documents.jsonl"
    if not path.exists():
        return [{"file": p.name, "kind": p.suffix.lstrip(".")} for p in sorted(folder.iterdir())
                if p.is_file() and p.suffix not in (".py", ".jsonl") and p.name != "README.md"]
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def chunks_of(documents: list[Any]) -> list[str]:
    """The chunks ingest makes of the documents: normalised part by part, split by the default splitter."""
    chunker = build_splitter(dict(DEFAULT_SPLITTER))
    manager = IndexManager(Preprocessor(), chunker, embedder=None, vector_store=None)  # type: ignore[arg-type]
    out: list[str] = []
    for document in documents:
        try:
            normalized, _ = manager.normalize(document)
        except BunkoError:
            continue
        out.extend(chunk.content for chunk in chunker.split(normalized))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default = Path(os.environ.get("BUNKO_SHARED_DATA") or "../shared/data") / "documents"
    parser.add_argument("--folder", type=Path, default=default)
    parser.add_argument("--kind", action="append", help="only files of this kind (repeatable)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = []
    for record in manifest(args.folder):
        if args.kind and record.get("kind") not in args.kind:
            continue
        path = args.folder / record["file"]
        best = best_cpu = float("inf")
        documents: list[Any] = []
        error = None
        for _ in range(max(1, args.repeat)):
            started, started_cpu = time.perf_counter(), time.process_time()
            try:
                documents = load_path(path, LoadOptions(password=record.get("password")))
            except BunkoError as exc:
                error = type(exc).__name__
            best = min(best, time.perf_counter() - started)
            best_cpu = min(best_cpu, time.process_time() - started_cpu)
        chunks = chunks_of(documents)
        rows.append({
            "file": record["file"], "kind": record.get("kind"), "error": error,
            "seconds": round(best, 3), "cpu_seconds": round(best_cpu, 3),
            "chunks": len(chunks),
            "hyphen_marks": sum(len(HYPHEN_MARKS.findall(c)) for c in chunks),
            "chunks_with_hyphen_marks": sum(1 for c in chunks if HYPHEN_MARKS.search(c)),
            "cjk_spaces": sum(len(CJK_SPACE.findall(c)) for c in chunks),
        })
    total = {key: round(sum(r[key] for r in rows), 3)
             for key in ("seconds", "cpu_seconds", "chunks", "hyphen_marks", "chunks_with_hyphen_marks", "cjk_spaces")}
    total["files"] = len(rows)
    if args.json:
        json.dump({"files": rows, "total": total}, sys.stdout, ensure_ascii=False, indent=1)
        print()
        return
    head = ("file", "seconds", "cpu s", "chunks", "U+FFFE/AD", "in chunks", "CJK sp")
    print(f"{head[0]:34} " + " ".join(f"{h:>9}" for h in head[1:]) + "  error")
    keys = ("seconds", "cpu_seconds", "chunks", "hyphen_marks", "chunks_with_hyphen_marks", "cjk_spaces")
    for r in [*rows, {**total, "file": f"total ({total['files']} files)", "error": None}]:
        cells = " ".join(f"{r[k]:9.3f}" if isinstance(r[k], float) else f"{r[k]:9d}" for k in keys)
        print(f"{r['file'][:34]:34} {cells}  {r['error'] or ''}")

if __name__ == "__main__":
    main()
