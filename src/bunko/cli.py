"""The ``bunko`` command line (R32): ingest, search, ask, collections, documents.

Data goes to stdout (plain text, or JSON with ``--json``); progress and messages
go to stderr. Errors print one line (``--json``: ``{"error": {"type", "message"}}``
on stdout) and exit non-zero; a stack trace is shown only with ``BUNKO_DEBUG=1``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
)

from . import __version__
from .config import DEFAULT_COLLECTION, DEFAULT_TENANT
from .engine import Bunko, IngestError
from .errors import BunkoError
from .evaluation import MODES as EVAL_MODES
from .types import IngestResult

F = TypeVar("F", bound=Callable[..., Any])
EXIT_ERROR = 1
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

stderr = Console(stderr=True, highlight=False, soft_wrap=True)
stdout = Console(highlight=False, soft_wrap=True)


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


def _fail(error_type: str, message: str, as_json: bool, code: int = EXIT_ERROR) -> NoReturn:
    if as_json:
        _emit_json({"error": {"type": error_type, "message": message}})
    else:
        stderr.print(f"[bold red]error:[/] {escape(message)}")
    sys.exit(code)


def handle_errors(func: F) -> F:
    """Turn bunko errors into one clear line and a non-zero exit; never a stack trace."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json"))
        try:
            return func(*args, **kwargs)
        except BunkoError as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, BunkoError) else exc
            _fail(type(cause).__name__, exc.message, as_json)
        except KeyboardInterrupt:
            _fail("Interrupted", "interrupted", as_json, EXIT_INTERRUPTED)
        except (click.exceptions.Exit, click.ClickException, SystemExit):
            raise
        except Exception as exc:
            if os.environ.get("BUNKO_DEBUG"):
                raise
            _fail(
                "InternalError",
                f"unexpected {type(exc).__name__}: {exc} (this is a bug in bunko; rerun with BUNKO_DEBUG=1 "
                "for the traceback and report it)",
                as_json,
                EXIT_INTERNAL,
            )

    return wrapper  # type: ignore[return-value]


def _engine(ctx: click.Context) -> Bunko:
    obj = ctx.find_root().obj
    if obj.get("engine") is None:
        obj["engine"] = Bunko(obj.get("db"), home=obj.get("home"))
        ctx.find_root().call_on_close(obj["engine"].close)
    return obj["engine"]


tenant_option = click.option(
    "--tenant", "-t", default=DEFAULT_TENANT, show_default=True, envvar="BUNKO_TENANT",
    help="Tenant whose data to use (env BUNKO_TENANT).",
)
collection_option = click.option(
    "--collection", "-c", default=DEFAULT_COLLECTION, show_default=True, envvar="BUNKO_COLLECTION",
    help="Collection inside the tenant (env BUNKO_COLLECTION).",
)
json_option = click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON on stdout.")


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--db", metavar="URL", default=None,
              help="Store URL, e.g. sqlite:///path/bunko.db (env BUNKO_DATABASE_URL; default: a SQLite file "
                   "under BUNKO_HOME).")
@click.option("--home", metavar="DIR", default=None, type=click.Path(file_okay=False),
              help="Data folder (env BUNKO_HOME; default ~/.local/share/bunko).")
@click.version_option(__version__, prog_name="bunko")
@click.pass_context
def cli(ctx: click.Context, db: str | None, home: str | None) -> None:
    """bunko (文庫): ingest documents, search them, and get answers with citations."""
    ctx.obj = {"db": db, "home": home, "engine": None}


# -- ingest ---------------------------------------------------------------------------------
@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@collection_option
@tenant_option
@click.option("--splitter", type=click.Choice(["recursive", "token"]), default=None,
              help="Chunking for a new collection: recursive (512 characters, R7) or token (1000 tokens, R8). "
                   "An existing collection keeps its own.")
@click.option("--analyzer", default=None, metavar="NAME",
              help="Keyword analyzer for a new collection: combined (default with the ja extra), bigram, "
                   "sudachi or whitespace. An existing collection keeps its own.")
@click.option("--password", default=None, envvar="BUNKO_PDF_PASSWORD", help="Password for encrypted PDFs.")
@click.option("--content-path", default=None, metavar="PATH",
              help="JSON files: dotted path of the text field (e.g. data.body).")
@json_option
@click.pass_context
@handle_errors
def ingest(ctx: click.Context, paths: tuple[str, ...], collection: str, tenant: str, splitter: str | None,
           analyzer: str | None, password: str | None, content_path: str | None, as_json: bool) -> None:
    """Ingest files, folders and http(s) URLs into a collection.

    Reads PDF, Word, PowerPoint, HTML, Markdown, text (any Japanese encoding) and JSON.
    Re-ingesting an unchanged file embeds nothing; a changed file becomes a new version of
    the same document. One bad file never stops the rest; the exit status is 1 if any failed.
    """
    from .loaders import LoadOptions

    load_options = LoadOptions(password=password, content_path=content_path)
    scope = _engine(ctx).tenant(tenant)
    show_bar = not as_json and stderr.is_terminal
    with Progress(
        SpinnerColumn(), TextColumn("[progress.description]{task.description}"), BarColumn(),
        MofNCompleteColumn(), TimeElapsedColumn(), console=stderr, transient=True, disable=not show_bar,
    ) as bar:
        task = bar.add_task("Loading the embedder", total=None)
        warm_up = getattr(scope.engine.embedder, "warm_up", None)
        if warm_up is not None:  # load the model before the bar starts counting files
            warm_up()
        bar.update(task, description="Ingesting")

        def progress(event: str, path: str, result: Any) -> None:
            name = os.path.basename(path)
            if event == "total":
                bar.update(task, total=result)
            elif event == "start":
                bar.update(task, description=f"Ingesting {escape(name)}")
            else:
                bar.advance(task)

        report = asyncio.run(scope.aingest(paths, collection, progress=progress, splitter=splitter,
                                           analyzer=analyzer, options=load_options))

    ok = report.documents
    statuses = {s: sum(1 for d in ok if d.status == s) for s in ("created", "replaced", "unchanged")}
    data = {
        "documents": len(ok),
        "chunks": sum(d.chunks for d in ok),
        "errors": [e.to_dict() for e in report.errors],
        **statuses,
        "skipped": [{"path": s.path, "reason": s.reason} for s in report.skipped],
        "results": [d.to_dict() for d in ok],
        "tenant": tenant,
        "collection": collection,
        "elapsed_ms": round(report.elapsed_ms, 1),
    }
    if as_json:
        _emit_json(data)
    else:
        _print_ingest(ok, report.errors, report.skipped, tenant, collection, report.elapsed_ms, statuses)
    if report.errors:
        sys.exit(EXIT_ERROR)


def _print_ingest(ok: list[IngestResult], errors: list[IngestError], skipped: list[Any], tenant: str,
                  collection: str, elapsed_ms: float, statuses: dict[str, int]) -> None:
    words = {"created": "completed", "replaced": "completed", "unchanged": "skipped"}
    for result in ok:
        note = {"replaced": f", new version {result.version}", "unchanged": ", unchanged"}.get(result.status, "")
        name = result.source if "://" in result.source else os.path.basename(result.source)
        stdout.print(f"{words.get(result.status, result.status):<9} {escape(name)}  "
                     f"({result.chunks} chunks{note})  id={result.document_id}")
    for s in skipped:
        stderr.print(f"[yellow]skipped[/] {escape(s.path)}: {escape(s.reason)}")
    for e in errors:
        message = e.message if e.path in e.message else f"{e.path}: {e.message}"
        stderr.print(f"[red]failed[/]    {e.type}: {escape(message)}")
    stderr.print(
        f"{len(ok)} documents ({sum(d.chunks for d in ok)} chunks) in tenant '{escape(tenant)}', "
        f"collection '{escape(collection)}': {statuses['created']} new, {statuses['replaced']} updated, "
        f"{statuses['unchanged']} unchanged, {len(errors)} failed, {len(skipped)} skipped "
        f"in {elapsed_ms / 1000:.1f} s"
    )


# -- search and ask -------------------------------------------------------------------------
top_k_option = click.option("--top-k", "-k", default=5, show_default=True, type=click.IntRange(1, 100),
                            help="How many chunks to return.")
document_id_option = click.option("--document-id", "document_ids", multiple=True, metavar="ID",
                                  help="Search only inside this document (repeatable).")
mode_option = click.option("--mode", type=click.Choice(["vector", "keyword", "hybrid"]), default="vector",
                           show_default=True,
                           help="Vector (semantic), keyword (BM25) or hybrid (weighted reciprocal rank fusion).")


@cli.command()
@click.argument("query")
@collection_option
@tenant_option
@top_k_option
@document_id_option
@mode_option
@click.option("--threshold", type=click.FloatRange(-1.0, 1.0), default=None,
              help="Drop vector hits with cosine similarity below this.")
@json_option
@click.pass_context
@handle_errors
def search(ctx: click.Context, query: str, collection: str, tenant: str, top_k: int,
           document_ids: tuple[str, ...], mode: str, threshold: float | None, as_json: bool) -> None:
    """Search a collection and print the best chunks."""
    scope = _engine(ctx).tenant(tenant)
    response = scope.search(query, collection, top_k=top_k, document_ids=list(document_ids) or None,
                            threshold=threshold, mode=mode)  # type: ignore[arg-type]
    if as_json:
        _emit_json(response.to_dict())
        return
    if not response.results:
        stderr.print("no results")
    for rank, hit in enumerate(response.results, start=1):
        name = hit.metadata.get("filename") or hit.source
        stdout.print(f"[bold]{rank}.[/] {hit.score:.3f}  {escape(str(name))}  "
                     f"[dim]chunk {hit.chunk_index} · {hit.chunk_id}[/]")
        text = " ".join(hit.content.split())
        stdout.print("   " + escape(text[:300] + ("…" if len(text) > 300 else "")))
    stderr.print(f"[dim]{len(response.results)} results in {response.search_time_ms:.1f} ms[/]")


@cli.command()
@click.argument("question")
@collection_option
@tenant_option
@top_k_option
@document_id_option
@json_option
@click.pass_context
@handle_errors
def ask(ctx: click.Context, question: str, collection: str, tenant: str, top_k: int,
        document_ids: tuple[str, ...], as_json: bool) -> None:
    """Answer a question from a collection, with [N] citations."""
    scope = _engine(ctx).tenant(tenant)
    result = scope.ask(question, collection, top_k=top_k, document_ids=list(document_ids) or None)
    if as_json:
        _emit_json(result.to_dict())
        return
    stdout.print(escape(result.answer))
    if result.sources:
        stdout.print()
        stdout.print("[bold]Sources[/]")
        for source in result.sources:
            where = source.metadata.get("filename") or source.source
            stdout.print(f"  [{source.index}] {escape(str(where))}  [dim](chunk "
                         f"{source.metadata.get('chunk_index', '?')}, score {source.score:.3f})[/]")


# -- collections and documents ---------------------------------------------------------------
@cli.command()
@tenant_option
@json_option
@click.pass_context
@handle_errors
def collections(ctx: click.Context, tenant: str, as_json: bool) -> None:
    """List the tenant's collections."""
    items = _engine(ctx).tenant(tenant).collections()
    if as_json:
        _emit_json({"collections": [c.to_dict() for c in items]})
        return
    if not items:
        stderr.print(f"tenant '{escape(tenant)}' has no collections yet; run: bunko ingest PATH")
    for c in items:
        stdout.print(f"{escape(c.name)}  {c.document_count} documents, {c.chunk_count} chunks  "
                     f"[dim]{c.embedding_provider}:{c.embedding_model} ({c.dimension}-d), analyzer {c.analyzer}[/]")


@cli.group()
def documents() -> None:
    """List or delete documents."""


@documents.command("list")
@collection_option
@tenant_option
@click.option("--limit", type=click.IntRange(1), default=None, help="At most this many documents.")
@click.option("--offset", type=click.IntRange(0), default=0, help="Skip this many documents.")
@json_option
@click.pass_context
@handle_errors
def documents_list(ctx: click.Context, collection: str, tenant: str, limit: int | None, offset: int,
                   as_json: bool) -> None:
    """List the documents of a collection."""
    items = _engine(ctx).tenant(tenant).documents(collection, limit=limit, offset=offset)
    if as_json:
        _emit_json({"documents": [d.to_dict() for d in items]})
        return
    for d in items:
        stdout.print(f"{d.id}  {escape(str(d.metadata.get('filename') or d.source))}  ({d.chunks} chunks)")
    if not items:
        stderr.print("no documents")


@documents.command("delete")
@click.argument("document_ids", nargs=-1, required=True, metavar="ID...")
@click.option("--collection", "-c", default=None, help="Only delete from this collection (default: any).")
@tenant_option
@json_option
@click.pass_context
@handle_errors
def documents_delete(ctx: click.Context, document_ids: tuple[str, ...], collection: str | None, tenant: str,
                     as_json: bool) -> None:
    """Delete documents (and their chunks and vectors) by id."""
    scope = _engine(ctx).tenant(tenant)
    deleted = scope.delete_documents(list(document_ids), collection)
    missing = len(set(document_ids)) - deleted
    if as_json:
        _emit_json({"deleted": deleted, "missing": missing})
    else:
        stderr.print(f"deleted {deleted} document(s)")
    if missing:
        if not as_json:
            stderr.print(f"[red]error:[/] {missing} id(s) not found in tenant '{escape(tenant)}'")
        sys.exit(EXIT_ERROR)


@cli.group()
def db() -> None:
    """Database schema: migrate and status (PostgreSQL; the embedded store migrates itself)."""


def _database_url(ctx: click.Context) -> str:
    from .config import Settings

    obj = ctx.find_root().obj
    return Settings.resolve(obj.get("db"), home=obj.get("home")).database_url


def _postgres_url(ctx: click.Context) -> str | None:
    url = _database_url(ctx)
    return url if url.split("://", 1)[0].split("+", 1)[0] in ("postgresql", "postgres") else None


@db.command("migrate")
@json_option
@click.pass_context
@handle_errors
def db_migrate(ctx: click.Context, as_json: bool) -> None:
    """Create or upgrade the schema (run as the schema owner)."""
    url = _postgres_url(ctx)
    if url is None:
        from .stores import open_backend

        open_backend(_database_url(ctx)).close()  # the embedded store migrates when opened
        applied: list[str] = []
    else:
        from .stores.postgres import migrate_database

        applied = migrate_database(url)
    if as_json:
        _emit_json({"applied": applied})
    else:
        stderr.print(f"applied {len(applied)} migration(s)" + (": " + ", ".join(applied) if applied else
                                                                 "; the schema is up to date"))


@db.command("status")
@json_option
@click.pass_context
@handle_errors
def db_status(ctx: click.Context, as_json: bool) -> None:
    """Show the schema version, pending migrations and server versions."""
    url = _postgres_url(ctx)
    if url is None:
        from .stores import open_backend
        from .stores.sqlite import SCHEMA_VERSION, SQLiteBackend

        backend = open_backend(_database_url(ctx))
        assert isinstance(backend, SQLiteBackend)
        import sqlite3

        data: dict[str, Any] = {"backend": "sqlite", "path": backend.path, "schema_version": SCHEMA_VERSION,
                                "sqlite_version": sqlite3.sqlite_version, "pending": []}
        backend.close()
    else:
        from .stores.postgres import schema_status

        data = {"backend": "postgresql", **schema_status(url)}
    if as_json:
        _emit_json(data)
        return
    for key, value in data.items():
        if key == "applied":
            for m in value:
                stdout.print(f"applied  {m['version']:>3}  {m['name']}  ({m['applied_at']})")
        elif key == "pending":
            for m in value:
                stdout.print(f"pending  {m['version']:>3}  {m['name']}")
            if not value:
                stdout.print("pending  none")
        else:
            stdout.print(f"{key}: {value}")


# -- eval -----------------------------------------------------------------------------------


@cli.command("eval")
@click.argument("dataset_dir", type=click.Path())
@click.option("--mode", type=click.Choice([*EVAL_MODES, "all"]), default="all", show_default=True,
              help="Search mode to evaluate, or all of them.")
@click.option("--top-k", "-k", default=10, show_default=True, type=click.IntRange(10, 100),
              help="Documents ranked per query (the metrics look at the top 5 and 10).")
@click.option("--limit-queries", type=click.IntRange(1), default=None, metavar="N",
              help="Only the first N queries that have relevance judgments.")
@click.option("--analyzer", default=None, metavar="NAME",
              help="Keyword analyzer of the temporary collection (combined, bigram, sudachi, whitespace).")
@tenant_option
@json_option
@click.pass_context
@handle_errors
def eval_command(ctx: click.Context, dataset_dir: str, mode: str, top_k: int, limit_queries: int | None,
                 analyzer: str | None, tenant: str, as_json: bool) -> None:
    """Measure retrieval quality on a BEIR-style dataset (corpus.jsonl, queries.jsonl, qrels.tsv).

    The corpus is ingested into a temporary collection, every judged query is run in each
    mode, and nDCG@10, recall@5, recall@10, MRR@10 and the median latency are reported.
    Runs in a throw-away SQLite file unless --db is given on the command line; the temporary
    collection is deleted afterwards either way.
    """
    import contextlib
    import tempfile

    from rich.table import Table

    from .evaluation import evaluate, load_beir

    dataset = load_beir(dataset_dir)
    modes = list(EVAL_MODES) if mode == "all" else [mode]
    root = ctx.find_root()
    with contextlib.ExitStack() as stack:
        if root.get_parameter_source("db") == click.core.ParameterSource.COMMANDLINE:
            engine = _engine(ctx)
        else:  # never touch the user's store: a temporary SQLite file, removed at the end
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="bunko-eval-",
                                                                     ignore_cleanup_errors=True))
            engine = stack.enter_context(Bunko(f"sqlite:///{os.path.join(folder, 'eval.db')}",
                                               home=root.obj.get("home")))
        scope = engine.tenant(tenant)
        show_bar = not as_json and stderr.is_terminal
        with Progress(
            SpinnerColumn(), TextColumn("[progress.description]{task.description}"), BarColumn(),
            MofNCompleteColumn(), TimeElapsedColumn(), console=stderr, transient=True, disable=not show_bar,
        ) as bar:
            loading = bar.add_task("Loading the embedder", total=None)
            warm_up = getattr(scope.engine.embedder, "warm_up", None)
            if warm_up is not None:
                warm_up()
            tasks: dict[str, Any] = {}

            def progress(phase: str, done: int, total: int) -> None:
                if phase not in tasks:
                    if loading in bar.task_ids:
                        bar.remove_task(loading)
                    label = "Ingesting documents" if phase == "ingest" else f"Querying ({phase})"
                    tasks[phase] = bar.add_task(escape(label), total=total)
                bar.update(tasks[phase], completed=done, total=total)

            report = asyncio.run(evaluate(scope, dataset, modes, top_k, progress, limit_queries=limit_queries,
                                          analyzer=analyzer))

    if as_json:
        _emit_json({key: report[key] for key in ("dataset", "analyzer", "queries", "results")})
        return
    table = Table(title=f"{escape(report['dataset'])}: {report['queries']} queries, top-k {top_k}, "
                        f"analyzer {escape(report['analyzer'])}",
                  title_justify="left")
    table.add_column("mode")
    columns = [key for key in next(iter(report["results"].values())) if key not in ("queries", "latency_ms_p95")]
    for key in columns:
        table.add_column(key.replace("latency_ms_", "ms ").replace("_", " "), justify="right")
    for name, values in report["results"].items():
        table.add_row(name, *(f"{values[key]:.1f}" if key.startswith("latency") else f"{values[key]:.4f}"
                              for key in columns))
    stdout.print(table)
    stderr.print(
        f"{report['documents']} documents ({report['chunks']} chunks, {report['skipped_documents']} empty left out) "
        f"ingested in {report['ingest_ms'] / 1000:.1f} s; {report['skipped_queries']} queries without relevance "
        f"judgments skipped; total {report['elapsed_ms'] / 1000:.1f} s"
    )


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="bunko")


if __name__ == "__main__":  # pragma: no cover
    main()
