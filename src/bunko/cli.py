"""The ``bunko`` command line (R32): ingest, search, ask, usage, collections, documents.

Data goes to stdout (plain text, or JSON with ``--json``); progress and messages
go to stderr. Errors print one line (``--json``: ``{"error": {"type", "message"}}``
on stdout; ``ask --stream --json``: ``{"type": "error", "error": {...}}`` as the last
event line) and exit non-zero; a stack trace is shown only with ``BUNKO_DEBUG=1``.

Settings come from flags, then environment variables, then ``bunko.toml`` (in the
working directory, or ``--config PATH``), then defaults; see :mod:`bunko.config`.
API keys are read only from the environment or the config file.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.markup import escape

from . import __version__
from .config import DEFAULT_COLLECTION, DEFAULT_TENANT
from .engine import Bunko
from .errors import BunkoError, FilterError
from .evaluation import MODES as EVAL_MODES
from .filters import Filter, build_filter
from .ingest import IngestError
from .progress import Reporter
from .requests import AskRequest, SearchRequest
from .types import IngestResult

F = TypeVar("F", bound=Callable[..., Any])
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")
EXIT_ERROR = 1
EXIT_INTERNAL = 70
EXIT_INTERRUPTED = 130

stderr = Console(stderr=True, highlight=False, soft_wrap=True)
stdout = Console(highlight=False, soft_wrap=True)


def _emit_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, indent=2))


def _fail(error_type: str, message: str, as_json: bool, code: int = EXIT_ERROR,
          extra: dict[str, Any] | None = None, *, event: bool = False) -> NoReturn:
    error = {"type": error_type, "message": message, **(extra or {})}
    if as_json and event:  # a stream of JSON lines ends with an error event
        click.echo(json.dumps({"type": "error", "error": error}, ensure_ascii=False))
    elif as_json:
        _emit_json({"error": error})
    else:
        stderr.print(f"[bold red]error:[/] {escape(message)}")
    sys.exit(code)


def handle_errors(func: F) -> F:
    """Turn bunko errors into one clear line and a non-zero exit; never a stack trace."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        as_json = bool(kwargs.get("as_json"))
        event = bool(kwargs.get("stream"))
        try:
            return func(*args, **kwargs)
        except BunkoError as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, BunkoError) else exc
            extra: dict[str, Any] = {"code": cause.code}
            if isinstance(cause, FilterError):
                extra["problems"] = [p.to_dict() for p in cause.problems]
            _fail(type(cause).__name__, exc.message, as_json, extra=extra, event=event)
        except KeyboardInterrupt:
            _fail("Interrupted", "interrupted", as_json, EXIT_INTERRUPTED, event=event)
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
                event=event,
            )

    return wrapper  # type: ignore[return-value]


def _engine(ctx: click.Context, **settings: Any) -> Bunko:
    """The engine of this invocation; ``settings`` are the command's flags (None = not given)."""
    obj = ctx.find_root().obj
    if obj.get("engine") is None:
        obj["engine"] = Bunko(obj.get("db"), home=obj.get("home"), config=obj.get("config"),
                              **{k: v for k, v in settings.items() if v is not None})
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
embedder_option = click.option(
    "--embedder", metavar="PROVIDER[:MODEL]", default=None,
    help="Embedder, e.g. use (bundled, default) or openai-compatible:MODEL (env BUNKO_EMBEDDER; config "
         "[embedder] model; URL and key from BUNKO_EMBEDDER_BASE_URL / BUNKO_EMBEDDER_API_KEY). A collection "
         "keeps the embedder it was built with.",
)


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.option("--db", metavar="URL", default=None,
              help="Store URL, e.g. sqlite:///path/bunko.db (env BUNKO_DATABASE_URL; default: a SQLite file "
                   "under BUNKO_HOME).")
@click.option("--home", metavar="DIR", default=None, type=click.Path(file_okay=False),
              help="Data folder (env BUNKO_HOME; default ~/.local/share/bunko).")
@click.option("--config", metavar="FILE", default=None, type=click.Path(dir_okay=False),
              help="Config file (env BUNKO_CONFIG; default: ./bunko.toml if it exists).")
@click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), default="warning",
              show_default=True, envvar="BUNKO_LOG_LEVEL",
              help="Which log messages to print on stderr (env BUNKO_LOG_LEVEL). `serve` and `worker` take "
                   "their own --log-level.")
@click.option("--quiet", "-q", is_flag=True, help="No progress output on stderr (results and errors still print).")
@click.version_option(__version__, prog_name="bunko")
@click.pass_context
def cli(ctx: click.Context, db: str | None, home: str | None, config: str | None, log_level: str,
        quiet: bool) -> None:
    """bunko (文庫): ingest documents, search them, and get answers with citations.

    Settings: flags > environment variables > bunko.toml > defaults.
    """
    ctx.obj = {"db": db, "home": home, "config": config, "engine": None, "quiet": quiet}
    _configure_logging(log_level)


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to the ``sys.stderr`` of the moment (a test runner may swap it between commands)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _configure_logging(level: str) -> None:
    """Log records of bunko and the libraries it uses go to stderr from ``level`` up."""
    root = logging.getLogger()
    if not any(isinstance(h, _StderrHandler) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    root.setLevel(level.upper())


def _reporter(ctx: click.Context, quiet: bool = False) -> Reporter:
    """The progress of a long command: a bar on a terminal, a line every few seconds otherwise."""
    return Reporter(stderr, quiet=quiet or bool(ctx.find_root().obj.get("quiet")))


quiet_option = click.option("--quiet", "-q", is_flag=True, help="No progress output on stderr.")


# -- ingest ---------------------------------------------------------------------------------
@cli.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@collection_option
@tenant_option
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
@embedder_option
@quiet_option
@json_option
@click.pass_context
@handle_errors
def ingest(ctx: click.Context, paths: tuple[str, ...], collection: str, tenant: str, splitter: str | None,
           analyzer: str | None, password: str | None, content_path: str | None, embedder: str | None,
           quiet: bool, as_json: bool) -> None:
    """Ingest files, folders and http(s) URLs into a collection.

    Reads PDF, Word, PowerPoint, HTML, Markdown, text (any Japanese encoding) and JSON.
    Re-ingesting an unchanged file embeds nothing; a changed file becomes a new version of
    the same document. One bad file never stops the rest; the exit status is 1 if any failed,
    and `bunko documents list --failed` lists them (with why) until they go in.

    Progress goes to stderr: a bar on a terminal, a line every 10 seconds otherwise (--quiet: none).
    """
    from .loaders import LoadOptions

    load_options = LoadOptions(password=password, content_path=content_path)
    scope = _engine(ctx, embedder=embedder).tenant(tenant)
    with _reporter(ctx, quiet) as bar:
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
        f"in {elapsed_ms / 1000:.1f} s" + ("; see them again with: bunko documents list --failed" if errors else "")
    )


# -- search and ask -------------------------------------------------------------------------
top_k_option = click.option("--top-k", "-k", default=5, show_default=True, type=click.IntRange(1, 100),
                            help="How many chunks to return.")
document_id_option = click.option("--document-id", "document_ids", multiple=True, metavar="ID",
                                  help="Search only inside this document (repeatable).")


def filter_options(func: F) -> F:
    """The restriction options of search and ask (R18, R21)."""
    options = [
        click.option("--filter", "filter_json", metavar="JSON", default=None,
                     help='Metadata filter, e.g. \'{"year": {"$gte": 2020}}\' (operators: $eq $ne $gt $gte $lt $lte '
                          '$in $nin $and $or $not $exists $contains).'),
        click.option("--file-type", "file_types", multiple=True, metavar="TYPE",
                     help="Only these file types: pdf, docx, pptx, html, markdown/md, text/txt, json, or a MIME "
                          "type (repeatable)."),
        click.option("--since", default=None, metavar="DATE",
                     help="Only documents whose date field is on or after this ISO-8601 date or datetime."),
        click.option("--until", default=None, metavar="DATE",
                     help="Only documents whose date field is on or before this date (a day counts whole)."),
        click.option("--date-field", default=None, metavar="FIELD",
                     help="The metadata field --since/--until read (default: created_at)."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


_RANKING_KEYS = ("fusion_method", "vector_weight", "keyword_weight", "rrf_k", "mmr_lambda", "dedupe", "rerank")


def ranking_options(func: F) -> F:
    """Hybrid fusion, MMR, near-duplicate removal and reranking (R19, R20, R22), passed on as ``ranking``."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = {key: kwargs.pop(key) for key in _RANKING_KEYS}
        fusion = {name: given[key] for key, name in (("fusion_method", "method"), ("vector_weight", "vector_weight"),
                                                      ("keyword_weight", "keyword_weight"), ("rrf_k", "k"))
                  if given[key] is not None}
        kwargs["ranking"] = {"fusion": fusion or None, "mmr_lambda": given["mmr_lambda"],
                             "dedupe": given["dedupe"], "rerank": given["rerank"]}
        return func(*args, **kwargs)

    options = [
        click.option("--fusion", "fusion_method", type=click.Choice(["rrf", "score"]), default=None,
                     help="Hybrid fusion: weighted reciprocal ranks (rrf, the default) or normalised scores "
                          "(score)."),
        click.option("--vector-weight", type=click.FloatRange(0, 1), default=None,
                     help="Weight of the vector leg in hybrid search (0 turns it off)."),
        click.option("--keyword-weight", type=click.FloatRange(0, 1), default=None,
                     help="Weight of the keyword leg in hybrid search (0 turns it off)."),
        click.option("--rrf-k", type=click.IntRange(1, 1000), default=None, help="The RRF constant (default 15)."),
        click.option("--mmr", "mmr_lambda", type=click.FloatRange(0, 1), default=None, metavar="LAMBDA",
                     help="Diversify by maximal marginal relevance (1 = relevance only, 0 = diversity only)."),
        click.option("--dedupe", is_flag=True, help="Drop chunks whose text nearly repeats a better one."),
        click.option("--rerank", default=None, metavar="PROVIDER:MODEL",
                     help="Rerank the candidates, e.g. cohere:rerank-v3.5, voyage:rerank-2, jina:jina-reranker-v2-"
                          "base-multilingual, cross-encoder:/path/to/model (API keys from the environment)."),
    ]
    for option in reversed(options):
        wrapper = option(wrapper)
    return wrapper  # type: ignore[return-value]


mode_option = click.option("--mode", type=click.Choice(["hybrid", "vector", "keyword"]), default="hybrid",
                           show_default=True,
                           help="hybrid: meaning and exact words, fused (see --fusion); vector: meaning only; "
                                "keyword: exact words only (BM25).")


@cli.command()
@click.argument("query")
@collection_option
@tenant_option
@top_k_option
@document_id_option
@filter_options
@mode_option
@click.option("--threshold", type=click.FloatRange(-1.0, 1.0), default=None,
              help="Drop vector hits with cosine similarity below this.")
@embedder_option
@json_option
@click.pass_context
@handle_errors
@ranking_options
def search(ctx: click.Context, query: str, collection: str, tenant: str, top_k: int,
           document_ids: tuple[str, ...], filter_json: str | None, file_types: tuple[str, ...], since: str | None,
           until: str | None, date_field: str | None, mode: str, threshold: float | None, embedder: str | None,
           ranking: dict[str, Any], as_json: bool) -> None:
    """Search a collection and print the best chunks.

    Restrict the search with --document-id, --filter (a JSON metadata filter), --file-type and
    --since/--until; they combine with AND.
    """
    restriction = _restriction(filter_json, file_types, since, until, date_field)
    scope = _engine(ctx, embedder=embedder).tenant(tenant)
    response = scope.search(SearchRequest(query=query, collection=collection, top_k=top_k,
                                          document_ids=list(document_ids) or None, threshold=threshold,
                                          mode=mode, filter=restriction, **ranking))  # type: ignore[arg-type]
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


def _restriction(filter_json: str | None, file_types: tuple[str, ...], since: str | None, until: str | None,
                 date_field: str | None) -> Filter | None:
    """The options' filter, validated before the engine (and its embedder) is loaded."""
    return build_filter(filter_json, file_types=list(file_types) or None, since=since, until=until,
                        date_field=date_field)


@cli.command()
@click.argument("question")
@collection_option
@tenant_option
@top_k_option
@document_id_option
@filter_options
@mode_option
@click.option("--llm", metavar="PROVIDER:MODEL", default=None,
              help="LLM that writes the answer, e.g. openai-compatible:qwen2.5-7b (env BUNKO_LLM; config [llm] "
                   "model). Without one the answer is extractive. Keys: BUNKO_LLM_API_KEY or the provider's "
                   "variable.")
@click.option("--base-url", metavar="URL", default=None,
              help="The LLM server, e.g. http://127.0.0.1:8000/v1 (env BUNKO_LLM_BASE_URL).")
@click.option("--temperature", type=click.FloatRange(0.0, 2.0), default=None,
              help="Sampling temperature (env BUNKO_TEMPERATURE; default 0.1).")
@click.option("--max-tokens", type=click.IntRange(1), default=None,
              help="Longest answer in tokens (env BUNKO_MAX_TOKENS; default 1000).")
@click.option("--system-prompt", default=None, metavar="TEXT",
              help="Replace the system prompt (env BUNKO_SYSTEM_PROMPT; default: answer only from the "
                   "numbered context, cite [N], say when the context lacks the answer).")
@click.option("--conversation", "conversation_id", default=None, metavar="ID",
              help="Conversation to continue: earlier turns go to the LLM, and this turn is stored (per tenant).")
@click.option("--stream", is_flag=True,
              help="Print the answer as it is written (with --json: one JSON event per line).")
@embedder_option
@json_option
@click.pass_context
@handle_errors
@ranking_options
def ask(ctx: click.Context, question: str, collection: str, tenant: str, top_k: int, document_ids: tuple[str, ...],
        filter_json: str | None, file_types: tuple[str, ...], since: str | None, until: str | None,
        date_field: str | None, mode: str, llm: str | None, base_url: str | None, temperature: float | None,
        max_tokens: int | None, system_prompt: str | None, conversation_id: str | None, stream: bool,
        embedder: str | None, ranking: dict[str, Any], as_json: bool) -> None:
    """Answer a question from a collection, with [N] citations.

    With --llm (or BUNKO_LLM, or [llm] model in bunko.toml) an LLM writes the answer from
    the best chunks; without one the answer quotes the most relevant sentences. Takes the same
    restrictions as search (--document-id, --filter, --file-type, --since/--until).
    """
    restriction = _restriction(filter_json, file_types, since, until, date_field)
    engine = _engine(ctx, embedder=embedder, llm=llm, llm_base_url=base_url, temperature=temperature,
                     max_tokens=max_tokens, system_prompt=system_prompt)
    scope = engine.tenant(tenant)
    request = AskRequest(query=question, collection=collection, top_k=top_k, document_ids=list(document_ids) or None,
                         mode=mode, filter=restriction, conversation_id=conversation_id,  # type: ignore[arg-type]
                         **ranking)

    async def answer() -> dict[str, Any] | None:
        try:
            if not stream:
                return (await scope.aask(request)).to_dict()
            response = None
            async for event in scope.astream_ask(request):
                if as_json:
                    click.echo(json.dumps(event.to_dict(), ensure_ascii=False))
                    sys.stdout.flush()
                elif event.type == "token":
                    click.echo(event.data["content"], nl=False)
                    sys.stdout.flush()
                elif event.type == "done":
                    response = event.data["response"]
            return response
        finally:
            await engine.aclose_clients()

    result = asyncio.run(answer())
    if stream and as_json:
        return
    assert result is not None
    if as_json:
        _emit_json(result)
        return
    if stream:
        click.echo()
    else:
        stdout.print(escape(result["answer"]))
    _print_sources(result["sources"])


def _print_sources(sources: list[dict[str, Any]]) -> None:
    if not sources:
        return
    stdout.print()
    stdout.print("[bold]Sources[/]")
    for source in sources:
        meta = source["metadata"]
        where = str(meta.get("filename") or source["source"])
        if meta.get("page_number") is not None:
            where += f", p. {meta['page_number']}"
        stdout.print(f"  [{source['index']}] {escape(where)}  [dim](chunk "
                     f"{meta.get('chunk_index', '?')}, score {source['score']:.3f})[/]")


# -- usage ----------------------------------------------------------------------------------
def parse_since(value: str | None) -> datetime | None:
    """``7d``, ``24h``, ``30m`` (ago) or an ISO date/time (UTC unless it says otherwise)."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*([dhm])\s*", value)
    if match:
        amount, unit = int(match.group(1)), match.group(2)
        delta = {"d": timedelta(days=amount), "h": timedelta(hours=amount), "m": timedelta(minutes=amount)}[unit]
        return datetime.now(UTC) - delta
    try:
        moment = datetime.fromisoformat(value.strip())
    except ValueError:
        raise click.BadParameter(f"{value!r}: use 7d, 24h, 30m or a date like 2026-11-01") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


@cli.command()
@tenant_option
@click.option("--since", default=None, metavar="WHEN",
              help="Only usage since then: 7d, 24h, 30m, or an ISO date/time like 2026-11-01.")
@json_option
@click.pass_context
@handle_errors
def usage(ctx: click.Context, tenant: str, since: str | None, as_json: bool) -> None:
    """Summarise a tenant's usage: embedding and LLM tokens, searches and upserts."""
    start = parse_since(since)
    totals = _engine(ctx).tenant(tenant).usage(start)
    if as_json:
        _emit_json({"tenant": tenant, "since": start.isoformat() if start else None,
                    "usage": [t.to_dict() for t in totals]})
        return
    if not totals:
        stderr.print(f"no usage recorded for tenant '{escape(tenant)}'" + (f" since {start:%Y-%m-%d %H:%M} UTC"
                                                                          if start else ""))
        return
    from rich.table import Table

    table = Table(title=f"usage of tenant '{escape(tenant)}'" + (f" since {start:%Y-%m-%d %H:%M} UTC" if start else ""),
                  title_justify="left")
    for name in ("operation", "provider", "model"):
        table.add_column(name, overflow="fold")
    for name in ("calls", "input tokens", "output tokens", "items", "avg ms"):
        table.add_column(name, justify="right")
    for t in totals:
        row = t.to_dict()
        table.add_row(escape(t.operation), escape(t.provider), escape(t.model), str(t.calls), str(t.input_tokens),
                      str(t.output_tokens), str(t.items), f"{row['latency_ms_avg']:.1f}")
    stdout.print(table)


# -- documents (collections, `documents show` and `admin tenants list|delete` are in manage_cli.py) --
@cli.group()
def documents() -> None:
    """List, show or delete documents, and see which files failed to ingest."""


@documents.command("list")
@collection_option
@tenant_option
@click.option("--limit", type=click.IntRange(1), default=None, help="At most this many documents.")
@click.option("--offset", type=click.IntRange(0), default=0, help="Skip this many documents.")
@click.option("--failed", is_flag=True,
              help="List the files and URLs whose last ingest failed, with the reason, instead (kept until "
                   "one is ingested; with --collection given, only that collection's).")
@json_option
@click.pass_context
@handle_errors
def documents_list(ctx: click.Context, collection: str, tenant: str, limit: int | None, offset: int, failed: bool,
                   as_json: bool) -> None:
    """List the documents of a collection (or, with --failed, what failed to go in).

    A JSON Lines file (or JSON array) gives one document per record; each is shown as
    FILE#INDEX with its title, name or id field when it has one.
    """
    scope = _engine(ctx).tenant(tenant)
    if failed:
        given = ctx.get_parameter_source("collection") != click.core.ParameterSource.DEFAULT
        failures = scope.ingest_failures(collection if given else None)[offset:None if limit is None
                                                                        else offset + limit]
        if as_json:
            _emit_json({"failed": [f.to_dict() for f in failures]})
            return
        for f in failures:
            again = f" ({f.attempts} attempts)" if f.attempts > 1 else ""
            stdout.print(f"{escape(f.collection)}  {escape(f.source)}  {f.failed_at}{again}\n"
                         f"    {escape(f.error_type)}: {escape(f.message)}")
        if not failures:
            stderr.print("no failed ingests recorded")
        return
    items = scope.documents(collection, limit=limit, offset=offset)
    if as_json:
        _emit_json({"documents": [{**d.to_dict(), "name": d.name, "version": d.version} for d in items]})
        return
    for d in items:
        version = f", version {d.version}" if d.version > 1 else ""
        stdout.print(f"{d.id}  {escape(d.name)}  ({d.chunks} chunks{version})")
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
    return Settings.resolve(obj.get("db"), home=obj.get("home"), config=obj.get("config")).database_url


def _postgres_url(ctx: click.Context) -> str | None:
    from .stores import url_scheme

    url = _database_url(ctx)
    return url if url_scheme(url) in ("postgresql", "postgres") else None


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


# -- serve and admin ---------------------------------------------------------------------------
@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (0.0.0.0 for all).")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535), help="TCP port.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, 64),
              help="Worker processes; all state is in the store, so any number is safe.")
@click.option("--log-level", default="info", show_default=True,
              type=click.Choice(["critical", "error", "warning", "info", "debug"]))
@click.option("--log-format", default="json", show_default=True, type=click.Choice(["json", "text"]),
              help="Log lines as JSON objects (with the request id) or plain text.")
@click.option("--max-upload-mb", type=int, default=None, metavar="MIB",
              help="Largest upload (env BUNKO_MAX_UPLOAD_MB; config [server] max_upload_mb; default 50).")
@click.option("--max-json-mb", type=int, default=None, metavar="MIB",
              help="Largest JSON request body (env BUNKO_MAX_JSON_MB; default 4).")
@click.option("--rate-limit", type=int, default=None, metavar="N",
              help="Requests per minute per API key, 0 = off (env BUNKO_RATE_LIMIT; default 600).")
@click.option("--job-concurrency", type=int, default=None, metavar="N",
              help="Uploads processed at once per worker (env BUNKO_JOB_CONCURRENCY; default 2).")
@click.option("--blas-threads", type=int, default=None, metavar="N",
              help="BLAS threads per worker process (env BUNKO_BLAS_THREADS; default 1).")
@click.option("--job-workers", type=int, default=None, metavar="N",
              help="Upload workers each API process starts; 0 when separate `bunko worker` processes run "
                   "(env BUNKO_JOB_WORKERS; default 1).")
@click.option("--spool-dir", default=None, metavar="DIR",
              help="Folder uploads wait in, shared with the workers (env BUNKO_SPOOL_DIR; default BUNKO_HOME/spool).")
@click.pass_context
@handle_errors
def serve(ctx: click.Context, host: str, port: int, workers: int, log_level: str, log_format: str,
          **limits: int | None) -> None:
    """Serve the HTTP API (REST under /api/v1; its reference at /docs and /openapi.json).

    Uses the same store, embedder and LLM settings as the other commands; every worker gets the
    settings resolved here.
    """
    try:
        import uvicorn  # noqa: F401

        from .server.app import serve as run_server
    except ImportError as exc:
        raise click.ClickException(
            f'the HTTP server needs extra packages ({exc.name}): pip install "bunko[server]"') from None
    from .config import Settings, redact_url

    obj = ctx.find_root().obj
    overrides: dict[str, Any] = {k: v for k, v in limits.items() if v is not None}
    settings = Settings.resolve(obj.get("db"), home=obj.get("home"), config=obj.get("config"), **overrides)
    shown = redact_url(settings.database_url)
    display_host = f"[{host}]" if ":" in host else host
    stderr.print(f"bunko API listening on http://{display_host}:{port} ({workers} worker{'s' * (workers > 1)}, "
                 f"store {escape(shown)}); OpenAPI at http://{display_host}:{port}/docs")
    run_server(settings, host=host, port=port, workers=workers, log_level=log_level, log_format=log_format)


@cli.group()
def admin() -> None:
    """Operator commands: tenants (create, list, delete) and API keys of the HTTP API."""


@admin.group("tenants")
def admin_tenants() -> None:
    """Create, list and delete tenants."""


@admin.group("keys")
def admin_keys() -> None:
    """Create, list and revoke API keys (stored hashed; a new key is shown once)."""


def _records(ctx: click.Context) -> Any:
    from .stores import open_backend
    from .stores.service import service_records

    backend = open_backend(_database_url(ctx))
    ctx.find_root().call_on_close(backend.close)
    return service_records(backend)


@admin_tenants.command("create")
@click.argument("name")
@json_option
@click.pass_context
@handle_errors
def admin_tenants_create(ctx: click.Context, name: str, as_json: bool) -> None:
    """Register tenant NAME (nothing happens if it exists)."""
    created = _records(ctx).create_tenant(name)
    if as_json:
        _emit_json({"tenant": name, "created": created})
    else:
        stderr.print(f"tenant '{escape(name)}' {'created' if created else 'already exists'}")


@admin_keys.command("create")
@click.option("--tenant", "-t", required=True, help="The tenant the key works in.")
@click.option("--user", "user_id", default=None,
              help="The user the key acts for (uploads made with it belong to this user).")
@click.option("--admin", "is_admin", is_flag=True, help="A tenant admin key: may erase any user's or all data.")
@json_option
@click.pass_context
@handle_errors
def admin_keys_create(ctx: click.Context, tenant: str, user_id: str | None, is_admin: bool, as_json: bool) -> None:
    """Create an API key; it is printed once and only its hash is stored."""
    key, record = _records(ctx).create_api_key(tenant, user_id, admin=is_admin)
    if as_json:
        _emit_json({"api_key": key, "tenant": tenant, "user": user_id, "admin": is_admin, "id": record.id})
    else:
        click.echo(key)
        stderr.print(f"key {record.id} for tenant '{escape(tenant)}'"
                     + (f", user '{escape(user_id)}'" if user_id else "") + (" (admin)" if is_admin else "")
                     + ": store it now, it is not shown again")


@admin_keys.command("list")
@click.option("--tenant", "-t", required=True, help="The tenant whose keys to list.")
@json_option
@click.pass_context
@handle_errors
def admin_keys_list(ctx: click.Context, tenant: str, as_json: bool) -> None:
    """List a tenant's keys (id, prefix, user, admin, revoked), never the keys themselves."""
    keys = _records(ctx).list_api_keys(tenant)
    if as_json:
        _emit_json({"keys": [k.to_dict() for k in keys]})
        return
    for k in keys:
        stdout.print(f"{k.id:>5}  {k.prefix}…  user={k.user_id or '-'}  admin={'yes' if k.admin else 'no'}  "
                     f"{'revoked' if k.revoked else 'active'}  {k.created_at}")


@admin_keys.command("revoke")
@click.argument("key_id", type=int)
@json_option
@click.pass_context
@handle_errors
def admin_keys_revoke(ctx: click.Context, key_id: int, as_json: bool) -> None:
    """Revoke key KEY_ID; requests with it are refused from then on."""
    if not _records(ctx).revoke_api_key(key_id):
        _fail("NotFound", f"no active key with id {key_id}", as_json)
    if as_json:
        _emit_json({"id": key_id, "revoked": True})
    else:
        stderr.print(f"key {key_id} revoked")


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
              help="Keyword analyzer of the temporary collection (combined_en, bigram_en, combined, bigram, "
                   "sudachi, whitespace; default as for ingest).")
@click.option("--answers", is_flag=True,
              help="Also ask each query that has gold answers (\"answers\" in queries.jsonl) as `ask` does, and "
                   "score the answers: extractive, and the configured LLM if any.")
@click.option("--llm", metavar="PROVIDER:MODEL", default=None,
              help="An LLM to score with --answers as well (env BUNKO_LLM; config [llm] model).")
@click.option("--base-url", metavar="URL", default=None, help="The LLM server (env BUNKO_LLM_BASE_URL).")
@tenant_option
@json_option
@click.pass_context
@handle_errors
def eval_command(ctx: click.Context, dataset_dir: str, mode: str, top_k: int, limit_queries: int | None,
                 analyzer: str | None, answers: bool, llm: str | None, base_url: str | None, tenant: str,
                 as_json: bool) -> None:
    """Measure retrieval quality on a BEIR-style dataset (corpus.jsonl, queries.jsonl, qrels.tsv).

    The corpus is ingested into a temporary collection, every judged query is run in each
    mode, and nDCG@10, recall@5, recall@10, MRR@10 and the median latency are reported.
    With --answers, the answers too: the share that contain a gold answer string, the share
    whose cited chunks do, empty and "not found" answers, and the mean length in characters.
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
        llm_settings = {k: v for k, v in (("llm", llm), ("llm_base_url", base_url)) if v is not None}
        if root.get_parameter_source("db") == click.core.ParameterSource.COMMANDLINE:
            engine = _engine(ctx, **llm_settings)
        else:  # never touch the user's store: a temporary SQLite file, removed at the end
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="bunko-eval-",
                                                                     ignore_cleanup_errors=True))
            engine = stack.enter_context(Bunko(f"sqlite:///{os.path.join(folder, 'eval.db')}",
                                               home=root.obj.get("home"), config=root.obj.get("config"),
                                               **llm_settings))
        scope = engine.tenant(tenant)
        with _reporter(ctx) as bar:
            bar.note("Loading the embedder")
            warm_up = getattr(scope.engine.embedder, "warm_up", None)
            if warm_up is not None:
                warm_up()

            def progress(phase: str, done: int, total: int) -> None:
                name = ("eval ingest" if phase == "ingest" else
                        f"eval answers ({phase.removeprefix('answers:')})" if phase.startswith("answers:")
                        else f"eval query ({phase})")
                if bar.phase != name:
                    bar.start(name, total, unit="documents" if phase == "ingest" else "queries")
                bar.update(done, total)

            async def run() -> dict[str, Any]:
                try:
                    return await evaluate(scope, dataset, modes, top_k, progress, limit_queries=limit_queries,
                                          analyzer=analyzer, answers=answers)
                finally:
                    await engine.aclose_clients()

            report = asyncio.run(run())

    if as_json:
        _emit_json({key: report[key] for key in ("dataset", "analyzer", "queries", "results", "answers")
                    if key in report})
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
    if "answers" in report:
        scored = Table(title=f"Answer quality: {next(iter(report['answers'].values()))['questions']} questions "
                             "with gold answers (ask: hybrid, top 5)", title_justify="left")
        for name, justify in (("answerer", "left"), ("contains gold", "right"), ("cited contains gold", "right"),
                              ("empty", "right"), ("not found", "right"), ("mean chars", "right"),
                              ("ms p50", "right")):
            scored.add_column(name, justify=justify)  # type: ignore[arg-type]
        for name, values in report["answers"].items():
            scored.add_row(escape(name), f"{values['contains_gold']:.4f}", f"{values['cited_contains_gold']:.4f}",
                           str(values["empty"]), str(values["not_found"]), f"{values['mean_chars']:.1f}",
                           f"{values['latency_ms_p50']:.1f}")
        stdout.print(scored)
    stderr.print(
        f"{report['documents']} documents ({report['chunks']} chunks, {report['skipped_documents']} empty left out) "
        f"ingested in {report['ingest_ms'] / 1000:.1f} s; {report['skipped_queries']} queries without relevance "
        f"judgments skipped; total {report['elapsed_ms'] / 1000:.1f} s"
    )


# -- command groups kept in their own modules ---------------------------------------------------
from .blocks.cli import attach as _attach_blocks  # noqa: E402 - `bunko blocks`, `bunko workflow`
from .manage_cli import attach as _attach_manage  # noqa: E402  (collections, documents show, admin tenants)
from .memory_cli import attach as _attach_memory  # noqa: E402  (bunko memory, bunko mcp)
from .metrics_cli import stats as _stats  # noqa: E402  (a command of its own module)
from .portability.cli import COMMANDS as PORTABILITY_COMMANDS  # noqa: E402  (they import the helpers above)
from .worker_cli import worker as _worker_command  # noqa: E402

for _command in PORTABILITY_COMMANDS:
    cli.add_command(_command)
_attach_blocks(cli)
_attach_memory(cli)
_attach_manage(cli)
cli.add_command(_stats)
cli.add_command(_worker_command)


def main() -> None:
    """Console-script entry point."""
    cli(prog_name="bunko")


if __name__ == "__main__":  # pragma: no cover
    main()
