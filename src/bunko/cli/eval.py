"""``bunko eval``: retrieval (and answer) quality on a BEIR-style dataset, in a throw-away store."""

from __future__ import annotations

import asyncio
import os
from typing import Any

import click
from rich.markup import escape

from ..engine import Bunko
from ..evaluation import MODES as EVAL_MODES
from .common import emit_json, get_engine, json_command, reporter, stderr, stdout, tenant_option


@click.command("eval")
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
@tenant_option()
@json_command()
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

    from ..evaluation import evaluate, load_beir

    dataset = load_beir(dataset_dir)
    modes = list(EVAL_MODES) if mode == "all" else [mode]
    root = ctx.find_root()
    with contextlib.ExitStack() as stack:
        llm_settings = {k: v for k, v in (("llm", llm), ("llm_base_url", base_url)) if v is not None}
        if root.get_parameter_source("db") == click.core.ParameterSource.COMMANDLINE:
            engine = get_engine(ctx, **llm_settings)
        else:  # never touch the user's store: a temporary SQLite file, removed at the end
            folder = stack.enter_context(tempfile.TemporaryDirectory(prefix="bunko-eval-",
                                                                     ignore_cleanup_errors=True))
            engine = stack.enter_context(Bunko(f"sqlite:///{os.path.join(folder, 'eval.db')}",
                                               home=root.obj.get("home"), config=root.obj.get("config"),
                                               **llm_settings))
        scope = engine.tenant(tenant)
        with reporter(ctx) as bar:
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
        emit_json({key: report[key] for key in ("dataset", "analyzer", "queries", "results", "answers")
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
