"""Exact titles as queries: for every PDF and HTML file of a folder, search its title and see whether
its title chunk comes first.

The files are ingested once into a throw-away SQLite store (the bundled embedder, the default
analyzer). A document's title is found as ``bunko.indexing.document_title`` finds it (copied here, so
that a checkout without it searches the same titles): its ``title`` metadata (PDF metadata, HTML
``<title>``) unless it only names a file, else its first line of text. The title chunk is the
document's first chunk that holds the title (spaces and case aside), else its first chunk. Each title
is searched in keyword and hybrid mode; the table shows the rank of the title chunk (``-`` when not in
the top 10) and the share that came first.
Run it with ``PYTHONPATH`` at two checkouts to compare them::

    PYTHONPATH=src python benchmarks/eval_titles.py ../shared/data/documents
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
import unicodedata
from pathlib import Path

from bunko import Bunko

SUFFIXES = (".pdf", ".html", ".htm")


_FILE_TITLE = re.compile(
    r"^(microsoft \w+ - .*|[^\s/\\]+\.(txt|pdf|docx?|rtf|odt|md|html?|tex|dvi|e?ps|ai|indd|qxd|pages|key|graffle"
    r"|pptx?|xlsx?|csv|png|jpe?g|tiff?|gif|svg|cdr|pub|sxw|wpd))$", re.IGNORECASE)


def _title(given: object, text: str) -> str:
    if isinstance(given, str) and given.strip() and not _FILE_TITLE.match(given.strip()):
        return " ".join(given.split())[:200]
    for line in text.splitlines():
        line = " ".join(line.lstrip("#").split())
        if any(c.isalnum() for c in line):
            return line[:200]
    return ""


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", unicodedata.normalize("NFKC", text)).strip().lower()


async def run(args: argparse.Namespace) -> None:
    files = sorted(p for p in Path(args.folder).iterdir() if p.suffix.lower() in SUFFIXES)
    with tempfile.TemporaryDirectory() as folder, Bunko(f"sqlite:///{folder}/titles.db") as engine:
        tenant = engine.tenant("titles")
        report = await tenant.aingest([str(p) for p in files], "titles")
        print(f"{len(report.documents)} of {len(files)} files ingested", file=sys.stderr)
        firsts = {"keyword": 0, "hybrid": 0}
        rows = 0
        print(f"{'file':<34}{'keyword':>8}{'hybrid':>8}  title")
        for doc in tenant.store.list_documents("titles"):
            chunks = tenant.store.document_chunks("titles", [doc.id]).get(doc.id, [])
            if not chunks:
                continue
            chunks.sort(key=lambda c: c.chunk.index)
            title = _title(doc.metadata.get("title"), "\n".join(c.chunk.content for c in chunks))
            if not title:
                continue
            flat = _flat(title)
            holder = next((c for c in chunks if flat in _flat(c.chunk.content)), chunks[0]).chunk
            ranks = {}
            for mode in ("keyword", "hybrid"):
                hits = (await tenant.asearch(title, "titles", top_k=args.k, mode=mode)).results
                ranks[mode] = next((i for i, h in enumerate(hits, 1) if h.chunk_id == holder.id), None)
                firsts[mode] += ranks[mode] == 1
            rows += 1
            cells = "".join(f"{'-' if ranks[m] is None else ranks[m]:>8}" for m in ("keyword", "hybrid"))
            print(f"{Path(doc.source).name[:33]:<34}{cells}  {title[:70]}")
        print(f"{'first':<34}" + "".join(f"{f'{firsts[m]}/{rows}':>8}" for m in ("keyword", "hybrid")))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder")
    parser.add_argument("-k", type=int, default=10)
    asyncio.run(run(parser.parse_args(argv)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
