"""``bunko ingest``: files, folders and URLs into a collection, with progress on stderr."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import click
from rich.markup import escape

from ..ingest import IngestReport
from .common import (
    EXIT_ERROR,
    collection_option,
    embedder_option,
    emit_json,
    get_engine,
    json_command,
    quiet_option,
    reporter,
    stderr,
    stdout,
    tenant_option,
)


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@collection_option()
@tenant_option()
@click.option("--splitter", type=click.Choice(["recursive", "token"]), default=None,
              help="Chunking for a new collection: recursive (chunks of up to 512 characters, split at paragraphs "
                   "and sentences) or token (up to 1000 tokens). "
                   "An existing collection keeps its own.")
@click.option("--analyzer", default=None, metavar="NAME",
              help="Keyword analyzer for a new collection: combined_en (the default with the ja extra), "
                   "bigram_en (the default without it), combined, bigram, sudachi or whitespace; the _en "
                   "ones also stem English words. An existing collection keeps its own.")
@click.option("--password", default=None, envvar="BUNKO_PDF_PASSWORD", help="Password for encrypted PDFs.")
@click.option("--content-path", default=None, metavar="PATH",
              help="JSON files: dotted path of the text field (e.g. data.body).")
@click.option("--ocr/--no-ocr", "use_ocr", default=None,
              help="Read scanned PDF pages and images with Tesseract OCR (when it is installed). "
                   "Default: [ocr] enabled (BUNKO_OCR), on.")
@click.option("--ocr-lang", default=None, metavar="LANGS",
              help="Tesseract models for OCR, e.g. jpn+eng or jpn_vert. Default: [ocr] lang (BUNKO_OCR_LANG), "
                   "else chosen per page.")
@click.option("--ocr-page-seconds", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="The longest OCR of one page; a file with a slower page fails (OCR_TIMEOUT). "
                   "Default: [ocr] page_seconds (BUNKO_OCR_PAGE_SECONDS), 120.")
@click.option("--ocr-max-pages", type=click.IntRange(min=1), default=None, metavar="N",
              help="The most pages of one file to OCR; a file with more fails (OCR_PAGE_LIMIT). "
                   "Default: [ocr] max_pages (BUNKO_OCR_MAX_PAGES), 100.")
@click.option("--workers", "ingest_workers", default=None, type=click.IntRange(0, 256), metavar="N",
              help="Worker processes that analyze the chunks' keywords (env BUNKO_INGEST_WORKERS; default: one per "
                   "core; 0: none, all in this process).")
@embedder_option()
@quiet_option()
@json_command()
def ingest(ctx: click.Context, paths: tuple[str, ...], collection: str, tenant: str, splitter: str | None,
           analyzer: str | None, password: str | None, content_path: str | None, use_ocr: bool | None,
           ocr_lang: str | None, ocr_page_seconds: float | None, ocr_max_pages: int | None,
           ingest_workers: int | None, embedder: str | None, quiet: bool, as_json: bool) -> None:
    """Ingest files, folders and http(s) URLs into a collection.

    Reads PDF, Word, PowerPoint, Excel (.xlsx), CSV/TSV, HTML, Markdown, text (any Japanese encoding) and JSON;
    scanned pages and images (PNG, JPEG, TIFF) by OCR when Tesseract is installed.
    Re-ingesting an unchanged file embeds nothing; a changed file becomes a new version of
    the same document. One bad file never stops the rest; the exit status is 1 if any failed,
    and `bunko documents list --failed` lists them (with why) until they go in.

    Progress goes to stderr: a bar on a terminal, a line every 10 seconds otherwise (--quiet: none).
    """
    from ..loaders import LoadOptions

    engine = get_engine(ctx, embedder=embedder, ingest_workers=ingest_workers)
    given = {"ocr": use_ocr, "ocr_lang": ocr_lang, "ocr_page_seconds": ocr_page_seconds, "ocr_max_pages": ocr_max_pages}
    ocr = {**engine.settings.ocr.load_options(), **{k: v for k, v in given.items() if v is not None}}
    load_options = LoadOptions(password=password, content_path=content_path, **ocr)
    scope = engine.tenant(tenant)
    with reporter(ctx, quiet) as bar:
        bar.note("Loading the embedder")
        warm_up = getattr(scope.engine.embedder, "warm_up", None)
        if warm_up is not None:  # load the model before the bar starts counting files
            warm_up()
        bar.start("ingest", unit="files")

        counted: set[str] = set()

        def progress(event: str, path: str, result: Any) -> None:
            if event == "total":
                bar.set_total(result)
            elif event == "start":
                bar.describe(os.path.basename(path))
            elif path not in counted:  # a file can fail after it was loaded (embedding, writing)
                counted.add(path)
                bar.advance(failed=event == "error")
            else:
                bar.update(bar.done, failed=bar.failed + 1)

        report = asyncio.run(scope.aingest(paths, collection, progress=progress, splitter=splitter,
                                           analyzer=analyzer, options=load_options))

    ok = report.documents
    statuses = {s: sum(1 for d in ok if d.status == s) for s in ("created", "replaced", "unchanged")}
    data = {
        "documents": len(ok),
        "chunks": sum(d.chunks for d in ok),
        "embedded": report.embedded,
        "reused": report.reused,
        "errors": [e.to_dict() for e in report.errors],
        **statuses,
        "skipped": [{"path": s.path, "reason": s.reason} for s in report.skipped],
        "results": [d.to_dict() for d in ok],
        "tenant": tenant,
        "collection": collection,
        "elapsed_ms": round(report.elapsed_ms, 1),
    }
    if as_json:
        emit_json(data)
    else:
        _print_ingest(report, tenant, collection, statuses)
    if report.errors:
        sys.exit(EXIT_ERROR)


def _print_ingest(report: IngestReport, tenant: str, collection: str, statuses: dict[str, int]) -> None:
    ok, errors, skipped, elapsed_ms = report.documents, report.errors, report.skipped, report.elapsed_ms
    # The per-document word is the summary's word for it, so the lines and the counts agree.
    words = {"created": "new", "replaced": "updated", "unchanged": "unchanged"}
    for result in ok:
        note = f", version {result.version}" if result.status == "replaced" else ""
        name = result.source if "://" in result.source else os.path.basename(result.source)
        stdout.print(f"{words.get(result.status, result.status):<9} {escape(name)}  "
                     f"({result.chunks} chunks{note})  id={result.document_id}")
    for s in skipped:
        stderr.print(f"[yellow]skipped[/]   {escape(s.path)}: {escape(s.reason)}")
    for e in errors:
        message = e.message if e.path in e.message else f"{e.path}: {e.message}"
        stderr.print(f"[red]failed[/]    {e.type}: {escape(message)}")
    stderr.print(
        f"{len(ok)} documents ({sum(d.chunks for d in ok)} chunks) in tenant '{escape(tenant)}', "
        f"collection '{escape(collection)}': {statuses['created']} new, {statuses['replaced']} updated, "
        f"{statuses['unchanged']} unchanged, {len(errors)} failed, {len(skipped)} skipped (not supported) "
        f"in {elapsed_ms / 1000:.1f} s"
        + (f"; {report.embedded} chunks embedded, {report.reused} reused from stored chunks"
           if report.reused else "") + ("; see them again with: bunko documents list --failed" if errors else "")
    )
