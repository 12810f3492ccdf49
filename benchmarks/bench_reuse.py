"""Editing documents and ingesting again: what chunk-level reuse saves.

Builds (untimed) a folder of ``--documents`` Markdown documents (default 200) of ``--sections``
sections each (default 10, about 300 Japanese characters a section), ingests it with the real
``bunko ingest`` path (``Tenant.aingest``, the bundled embedder, warmed up first) into a fresh
store, then edits one paragraph in ``--edit`` of the documents (default 20) and ingests the
folder again. Prints both runs: wall time, chunks written, chunks embedded and reused, and the
second run's time as a share of the first.

With ``--shared N`` every document also ends with the same N sections of boilerplate: the first run
embeds them once and every other document takes their vectors (reuse across documents).

    python benchmarks/bench_reuse.py [--store sqlite|postgres] [--documents 200] [--edit 20] [--shared 0] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from bunko import Bunko
from bunko.embedders import UniversalSentenceEncoderEmbedder


def document(number: int, sections: int, edited: int | None = None, shared: int = 0) -> str:
    parts = []
    for s in range(sections):
        body = (f"第{number}章 第{s}節。社内規程{number}の{s}番目の項目では、申請の手順と承認の流れを定める。"
                f"申請者は所定の様式に必要事項を記入し、所属長の承認を得たうえで総務部に提出する。"
                f"経費の精算は月末締めとし、領収書の原本を添えて{number % 28 + 1}日までに提出すること。") * 2
        if s == edited:
            body += f"（改訂）この節は令和七年に改められ、提出期限は{number + 10}日以内となった。"
        parts.append(f"## 第{s}節\n\n{body}")
    for s in range(shared):  # the same boilerplate in every document (a standard clause, a notice)
        notice = (f"本規程の共通事項{s}。個人情報の取扱いは情報管理規程に従い、社外への持ち出しを禁ずる。"
                  "疑義が生じた場合は法務部に照会すること。")
        parts.append(f"## 共通事項{s}\n\n" + notice * 3)
    return f"# 規程 {number}\n\n" + "\n\n".join(parts) + "\n"


def run(tenant: Any, folder: Path) -> dict[str, Any]:
    started = time.perf_counter()
    report = tenant.ingest([folder])
    seconds = time.perf_counter() - started
    if report.errors:
        raise SystemExit(f"ingest failed: {report.errors[0].message}")
    return {"seconds": round(seconds, 2), "documents": len(report.documents), "chunks": report.chunks,
            # (code from before chunk reuse has no such counts: every chunk written was embedded)
            "embedded": getattr(report, "embedded", report.chunks), "reused": getattr(report, "reused", 0),
            "replaced": sum(d.status == "replaced" for d in report.documents)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--documents", type=int, default=200)
    parser.add_argument("--sections", type=int, default=10)
    parser.add_argument("--edit", type=int, default=20)
    parser.add_argument("--shared", type=int, default=0,
                        help="sections of boilerplate every document ends with (reused across documents)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    embedder = UniversalSentenceEncoderEmbedder()
    embedder.warm_up()
    with tempfile.TemporaryDirectory(prefix="bunko-bench-reuse-") as tmp:
        folder = Path(tmp) / "docs"
        folder.mkdir()
        for n in range(args.documents):
            (folder / f"rule{n:04d}.md").write_text(document(n, args.sections, shared=args.shared),
                                                    encoding="utf-8")
        server = None
        if args.store == "postgres":
            from bunko.testing.postgres import TemporaryPostgres

            server = TemporaryPostgres(Path(tmp) / "pg")
            url = server.create_database("bench")
        else:
            url = f"sqlite:///{Path(tmp) / 'bench.db'}"
        engine = Bunko(url, embedder=embedder, home=Path(tmp) / "home")
        try:
            tenant = engine.tenant("bench")
            first = run(tenant, folder)
            step = max(1, args.documents // max(1, args.edit))
            for n in range(0, args.documents, step)[: args.edit]:
                (folder / f"rule{n:04d}.md").write_text(
                    document(n, args.sections, edited=n % args.sections, shared=args.shared), encoding="utf-8")
            second = run(tenant, folder)
        finally:
            engine.close()
            if server is not None:
                server.close()
    figures = {"store": args.store, "documents": args.documents, "edited": args.edit, "shared": args.shared,
               "first": first,
               "second": second, "second_share_of_first": round(second["seconds"] / first["seconds"], 3),
               "cpus": os.cpu_count(), "load_average": [round(x, 2) for x in os.getloadavg()]}
    if args.json:
        print(json.dumps(figures))
        return
    for name in ("first", "second"):
        r = figures[name]
        print(f"{name:<7} {r['seconds']:>8.2f} s  {r['documents']} documents ({r['replaced']} replaced), "
              f"{r['chunks']} chunks written: {r['embedded']} embedded, {r['reused']} reused")
    print(f"second run: {figures['second_share_of_first']:.1%} of the first's time; load {figures['load_average']}")


if __name__ == "__main__":
    main()
