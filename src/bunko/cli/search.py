"""``bunko search`` and ``bunko ask``: the best chunks of a collection, or an answer with [N] citations.

Both take the same restrictions (--document-id, --filter, --file-type, --since/--until) and the same
ranking options (fusion, MMR, near-duplicate removal, reranking).
"""

from __future__ import annotations

import asyncio
import functools
import json
import sys
from typing import Any

import click
from rich.markup import escape

from ..filters import Filter, build_filter
from ..requests import AskRequest, SearchRequest
from .common import (
    F,
    collection_option,
    embedder_option,
    emit_json,
    get_engine,
    json_command,
    options,
    stderr,
    stdout,
    tenant_option,
)

top_k_option = click.option("--top-k", "-k", default=5, show_default=True, type=click.IntRange(1, 100),
                            help="How many chunks to return.")
document_id_option = click.option("--document-id", "document_ids", multiple=True, metavar="ID",
                                  help="Search only inside this document (repeatable).")


# The restriction options of search and ask (R18, R21).
filter_options = options(
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
)


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

    return options(
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
    )(wrapper)  # type: ignore[return-value]


mode_option = click.option("--mode", type=click.Choice(["hybrid", "vector", "keyword"]), default="hybrid",
                           show_default=True,
                           help="hybrid: meaning and exact words, fused (see --fusion); vector: meaning only; "
                                "keyword: exact words only (BM25).")

# What search and ask both take, after their argument: where to search, how many, the restrictions, the mode.
retrieval_options = options(collection_option(), tenant_option(), top_k_option, document_id_option, filter_options,
                            mode_option)


@click.command()
@click.argument("query")
@retrieval_options
@click.option("--threshold", type=click.FloatRange(-1.0, 1.0), default=None,
              help="Drop vector hits with cosine similarity below this.")
@embedder_option()
@json_command()
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
    scope = get_engine(ctx, embedder=embedder).tenant(tenant)
    response = scope.search(SearchRequest(query=query, collection=collection, top_k=top_k,
                                          document_ids=list(document_ids) or None, threshold=threshold,
                                          mode=mode, filter=restriction, **ranking))  # type: ignore[arg-type]
    if as_json:
        emit_json(response.to_dict())
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


@click.command()
@click.argument("question")
@retrieval_options
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
@embedder_option()
@json_command()
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
    engine = get_engine(ctx, embedder=embedder, llm=llm, llm_base_url=base_url, temperature=temperature,
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
        emit_json(result)
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

