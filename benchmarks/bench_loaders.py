"""Loader speed and text fidelity over a folder of documents (by default the shared corpus).

Loads every file of the folder's manifest (``documents.jsonl``; every file in the folder
without one) with ``bunko.loaders.load_path``, normalises and splits each document as
ingest does (the default splitter), and reports per file and in total:

* the load time (best of ``--repeat`` runs);
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
from bunko.loaders import LoadOptions, load_path
from bunko.preprocess import normalize
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
    splitter = build_splitter(dict(DEFAULT_SPLITTER))
    out: list[str] = []
    for document in documents:
        texts = [part.text for part in document.parts or []] or [document.content]
        pieces = []
        for text in texts:
            try:
                pieces.append(normalize(text))
            except BunkoError:
                continue
        if pieces:
            out.extend(chunk.content for chunk in splitter.split("\n\n".join(pieces)))
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
        best = float("inf")
        documents: list[Any] = []
        error = None
        for _ in range(max(1, args.repeat)):
            started = time.perf_counter()
            try:
                documents = load_path(path, LoadOptions(password=record.get("password")))
            except BunkoError as exc:
                error = type(exc).__name__
            best = min(best, time.perf_counter() - started)
        chunks = chunks_of(documents)
        rows.append({
            "file": record["file"], "kind": record.get("kind"), "seconds": round(best, 3), "error": error,
            "chunks": len(chunks),
            "hyphen_marks": sum(len(HYPHEN_MARKS.findall(c)) for c in chunks),
            "chunks_with_hyphen_marks": sum(1 for c in chunks if HYPHEN_MARKS.search(c)),
            "cjk_spaces": sum(len(CJK_SPACE.findall(c)) for c in chunks),
        })
    total = {key: round(sum(r[key] for r in rows), 3)
             for key in ("seconds", "chunks", "hyphen_marks", "chunks_with_hyphen_marks", "cjk_spaces")}
    total["files"] = len(rows)
    if args.json:
        json.dump({"files": rows, "total": total}, sys.stdout, ensure_ascii=False, indent=1)
        print()
        return
    print(f"{'file':34} {'seconds':>8} {'chunks':>7} {'U+FFFE/AD':>9} {'in chunks':>9} {'CJK sp':>7}  error")
    for r in rows:
        print(f"{r['file'][:34]:34} {r['seconds']:8.3f} {r['chunks']:7d} {r['hyphen_marks']:9d} "
              f"{r['chunks_with_hyphen_marks']:9d} {r['cjk_spaces']:7d}  {r['error'] or ''}")
    print(f"{'total (' + str(total['files']) + ' files)':34} {total['seconds']:8.3f} {total['chunks']:7d} "
          f"{total['hyphen_marks']:9d} {total['chunks_with_hyphen_marks']:9d} {total['cjk_spaces']:7d}")


if __name__ == "__main__":
    main()
