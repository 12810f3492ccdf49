"""Retrieval evaluation on BEIR-style datasets: load, ingest into a temporary collection, score.

A dataset folder holds ``corpus.jsonl`` (``{"id", "title", "text"}``), ``queries.jsonl``
(``{"id", "text", ...}``) and ``qrels.tsv`` (a header line ``query-id corpus-id score``,
then one judgment per line; a score of 1 or more means relevant). ``evaluate`` ingests the
corpus into a throw-away collection of a tenant, runs every judged query in each search
mode and reports nDCG@10, recall@5, recall@10, MRR@10 and the median latency per mode. The
questions are embedded in batches ahead of their searches (through the engine's query cache), so
the latencies are the searches' own.

    dataset = load_beir("../shared/data/cranfield")
    report = await evaluate(engine.tenant("default"), dataset, MODES, top_k=10)
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import time
import unicodedata
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .errors import ConfigError, NotFoundError, PreprocessingError
from .ingest import IngestItem, document_item
from .types import Document, GenerationResult, SearchHit

if TYPE_CHECKING:
    from .engine import Tenant
    from .generation import Generator

# The search modes ``evaluate`` (and ``bunko eval --mode all``) runs. Add a mode here.
MODES: tuple[str, ...] = ("vector", "keyword", "hybrid")

# Questions embedded together ahead of their searches (latencies then leave out embedding).
PRIME_BATCH = 256

NDCG_K = 10
RECALL_KS = (5, 10)
MRR_K = 10
# The smallest ranking depth that lets every metric above see all the ranks it needs.
MIN_TOP_K = max(NDCG_K, MRR_K, *RECALL_KS)
# Chunks retrieved per wanted document: several chunks of one document collapse into one
# ranked document, so asking for more chunks than k still leaves k distinct documents.
CHUNKS_PER_DOCUMENT = 3
MAX_CHUNKS = 100  # the retriever's own top_k limit

CORPUS_FILE = "corpus.jsonl"
QUERIES_FILE = "queries.jsonl"
QRELS_FILES = ("qrels.tsv", "qrels/test.tsv")  # ours, then the usual BEIR layout

# The answerer ``evaluate(answers=True)`` always runs; a configured LLM runs too, under its model name.
EXTRACTIVE = "extractive"

# Called with (phase, done, total): phase is "ingest" (documents), a search mode (queries) or
# "answers:NAME" (questions answered by the extractive answerer or an LLM).
EvalProgress = Callable[[str, int, int], None]


@dataclass(slots=True)
class Dataset:
    """A BEIR-style retrieval dataset: corpus, queries and relevance judgments."""

    name: str
    corpus: dict[str, tuple[str, str]]  # corpus id -> (title, text)
    queries: dict[str, str]  # query id -> text
    qrels: dict[str, dict[str, int]] = field(default_factory=dict)  # query id -> {corpus id: score}
    # query id -> gold answer strings (JSQuAD-style ``"answers"`` in queries.jsonl), for ``evaluate(answers=True)``
    answers: dict[str, list[str]] = field(default_factory=dict)


# -- loading ---------------------------------------------------------------------------------
def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """Non-blank lines of a UTF-8 file with their 1-based numbers."""
    try:
        with path.open(encoding="utf-8-sig") as handle:
            for number, line in enumerate(handle, start=1):
                if line.strip():
                    yield number, line.rstrip("\r\n")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc


def _jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for number, line in _lines(path):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{path}, line {number}: not valid JSON ({exc.msg})") from exc
        if not isinstance(record, dict):
            raise ConfigError(f"{path}, line {number}: expected a JSON object, got {type(record).__name__}")
        yield number, record


def _field(record: dict[str, Any], key: str, path: Path, number: int, *, required: bool = True) -> str:
    value = record.get(key)
    if value is None:
        if required:
            raise ConfigError(f"{path}, line {number}: missing {key!r}")
        return ""
    if key == "id" and isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str):
        raise ConfigError(f"{path}, line {number}: {key!r} must be a string, got {type(value).__name__}")
    if key == "id" and not value.strip():
        raise ConfigError(f"{path}, line {number}: empty 'id'")
    return value


def _require(folder: Path, names: Sequence[str]) -> Path:
    for name in names:
        if (folder / name).is_file():
            return folder / name
    raise ConfigError(f"{folder}: missing {names[0]} (a BEIR dataset folder holds {CORPUS_FILE}, "
                      f"{QUERIES_FILE} and {QRELS_FILES[0]})")


def load_beir(path: str | os.PathLike[str]) -> Dataset:
    """Read a BEIR-style dataset folder; any missing file or malformed line is a ``ConfigError``."""
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise ConfigError(f"{folder}: not a dataset folder (it does not exist or is not a directory)")
    corpus_path = _require(folder, [CORPUS_FILE])
    queries_path = _require(folder, [QUERIES_FILE])
    qrels_path = _require(folder, QRELS_FILES)

    corpus: dict[str, tuple[str, str]] = {}
    for number, record in _jsonl(corpus_path):
        doc_id = _field(record, "id", corpus_path, number)
        if doc_id in corpus:
            raise ConfigError(f"{corpus_path}, line {number}: duplicate id {doc_id!r}")
        title = _field(record, "title", corpus_path, number, required=False)
        corpus[doc_id] = (title, _field(record, "text", corpus_path, number))
    if not corpus:
        raise ConfigError(f"{corpus_path}: no documents")

    queries: dict[str, str] = {}
    answers: dict[str, list[str]] = {}
    for number, record in _jsonl(queries_path):
        query_id = _field(record, "id", queries_path, number)
        if query_id in queries:
            raise ConfigError(f"{queries_path}, line {number}: duplicate id {query_id!r}")
        queries[query_id] = _field(record, "text", queries_path, number)
        gold = record.get("answers")
        if gold is not None:
            if not isinstance(gold, list) or not all(isinstance(a, str) for a in gold):
                raise ConfigError(f"{queries_path}, line {number}: 'answers' must be a list of strings")
            if any(a.strip() for a in gold):
                answers[query_id] = [a for a in gold if a.strip()]
    if not queries:
        raise ConfigError(f"{queries_path}: no queries")

    qrels: dict[str, dict[str, int]] = {}
    for index, (number, line) in enumerate(_lines(qrels_path)):
        parts = line.split("\t") if "\t" in line else line.split()
        if len(parts) != 3:
            raise ConfigError(f"{qrels_path}, line {number}: expected 3 tab-separated fields "
                              f"(query-id, corpus-id, score), got {len(parts)}")
        query_id, doc_id, raw_score = (p.strip() for p in parts)
        try:
            score = int(raw_score)
        except ValueError:
            if index == 0:  # the header line: query-id corpus-id score
                continue
            raise ConfigError(f"{qrels_path}, line {number}: score {raw_score!r} is not an integer") from None
        if not query_id or not doc_id:
            raise ConfigError(f"{qrels_path}, line {number}: empty query-id or corpus-id")
        qrels.setdefault(query_id, {})[doc_id] = score
    return Dataset(folder.resolve().name, corpus, queries, qrels, answers)


# -- metrics -----------------------------------------------------------------------------------
def _distinct(ranked: Sequence[str], k: int) -> list[str]:
    """The first ``k`` distinct ids of a ranking (a repeated id keeps its best rank)."""
    return list(dict.fromkeys(ranked))[: max(k, 0)]


def ndcg_at_k(ranked: Sequence[str], qrels: Mapping[str, float], k: int) -> float:
    """nDCG@k with graded gains (the qrels score) and a log2 discount; the ideal comes from the qrels.

    0.0 when the query has no judgment with a positive score.
    """
    dcg = sum(max(qrels.get(doc, 0), 0) / math.log2(rank + 1) for rank, doc in enumerate(_distinct(ranked, k), 1))
    gains = sorted((g for g in qrels.values() if g > 0), reverse=True)[:k]
    ideal = sum(g / math.log2(rank + 1) for rank, g in enumerate(gains, start=1))
    return dcg / ideal if ideal > 0 else 0.0


def recall_at_k(ranked: Sequence[str], qrels: Mapping[str, float], k: int) -> float:
    """Relevant documents (score >= 1) in the top ``k``, over all relevant documents (0.0 if none)."""
    relevant = {doc for doc, score in qrels.items() if score >= 1}
    if not relevant:
        return 0.0
    return sum(1 for doc in _distinct(ranked, k) if doc in relevant) / len(relevant)


def mrr_at_k(ranked: Sequence[str], qrels: Mapping[str, float], k: int) -> float:
    """1 / rank of the first relevant document (score >= 1) in the top ``k``; 0.0 if there is none."""
    for rank, doc in enumerate(_distinct(ranked, k), start=1):
        if qrels.get(doc, 0) >= 1:
            return 1.0 / rank
    return 0.0


def rank_documents(hits: Sequence[SearchHit], corpus_ids: Mapping[str, str], k: int) -> list[str]:
    """Corpus ids of chunk hits, best first; a document's chunks count once, at its best chunk's rank."""
    ranked: dict[str, None] = {}
    for hit in hits:
        corpus_id = corpus_ids.get(hit.source) or hit.metadata.get("corpus_id")
        if corpus_id is not None:
            ranked.setdefault(str(corpus_id), None)
            if len(ranked) >= k:
                break
    return list(ranked)


def _normalised(text: str) -> str:
    """Text as gold answers are matched: NFKC, case-folded, without whitespace."""
    return "".join(unicodedata.normalize("NFKC", text).casefold().split())


def contains_gold(text: str, gold: Sequence[str]) -> bool:
    """Whether ``text`` contains one of the gold answer strings (NFKC, case and whitespace ignored)."""
    flat = _normalised(text)
    return any(g and g in flat for g in map(_normalised, gold))


# -- evaluation --------------------------------------------------------------------------------
def document_for(dataset_name: str, corpus_id: str, title: str, text: str) -> Document:
    """The ``Document`` a corpus entry is ingested as: title and text, where it came from, and its title
    (the ``title`` metadata a search weighs, as a loaded file's)."""
    content = "\n\n".join(part for part in (title, text) if part.strip())
    metadata = {"source": f"beir:{dataset_name}:{corpus_id}", "corpus_id": corpus_id}
    if title.strip():
        metadata["title"] = title.strip()
    return Document(content, metadata)


def _temporary_collection(dataset_name: str) -> str:
    slug = re.sub(r"[^\w.\-]+", "-", dataset_name).strip("-.")[:40] or "dataset"
    return f"eval-{slug}-{uuid.uuid4().hex[:12]}"


def judged_queries(dataset: Dataset) -> list[tuple[str, str]]:
    """The queries an evaluation scores, in file order: those with text and at least one relevant judgment."""
    return [(qid, text) for qid, text in dataset.queries.items()
            if text.strip() and any(score >= 1 for score in dataset.qrels.get(qid, {}).values())]


async def ingest_corpus(tenant: Tenant, collection: str, dataset: Dataset, progress: EvalProgress | None = None,
                        analyzer: str | None = None) -> tuple[dict[str, str], dict[str, Any]]:
    """Store the corpus in ``collection`` through the ingest runner; returns source -> corpus id and counts.

    Entries with no text (before or after normalisation) are left out and counted; any other
    failure ends the evaluation.
    """
    started = time.perf_counter()
    sources: dict[str, str] = {}
    skipped: list[str] = []
    items: list[IngestItem] = []
    for corpus_id, (title, text) in dataset.corpus.items():
        document = document_for(dataset.name, corpus_id, title, text)
        if not document.content.strip():
            skipped.append(corpus_id)
            continue
        sources[document.source] = corpus_id
        items.append(document_item(document))
    total, done = len(dataset.corpus), len(skipped)
    if progress:
        progress("ingest", done, total)

    def advanced(event: str, label: str, result: Any) -> None:
        nonlocal done
        if event in ("done", "error") and progress:
            done += 1
            progress("ingest", done, total)

    report = await tenant.aingest_items(items, collection, progress=advanced, analyzer=analyzer, bulk=True)
    for error in report.errors:
        if not isinstance(error.exception, PreprocessingError):  # no text left after normalisation: left out
            raise error.exception or ConfigError(error.message)
        skipped.append(sources.pop(error.path))
    corpus_ids = {r.source: sources[r.source] for r in report.documents}
    stats = {"documents": len(corpus_ids), "skipped_documents": len(skipped), "chunks": report.chunks,
             "ingest_ms": round((time.perf_counter() - started) * 1000, 1)}
    return corpus_ids, stats


async def _run_mode(tenant: Tenant, collection: str, mode: str, queries: list[tuple[str, str]],
                    qrels: Mapping[str, Mapping[str, int]], corpus_ids: Mapping[str, str], top_k: int,
                    progress: EvalProgress | None) -> dict[str, Any]:
    fetch = min(MAX_CHUNKS, CHUNKS_PER_DOCUMENT * top_k)
    ndcg: list[float] = []
    recall: dict[int, list[float]] = {k: [] for k in dict.fromkeys((*RECALL_KS, top_k))}
    mrr: list[float] = []
    latencies: list[float] = []
    if progress:
        progress(mode, 0, len(queries))
    retriever = tenant.retriever(collection)
    for done, (query_id, text) in enumerate(queries, start=1):
        if mode != "keyword" and (done - 1) % PRIME_BATCH == 0:
            # The questions are known: embed them in batches (the cache then serves each search).
            await retriever.prime([t for _, t in queries[done - 1 : done - 1 + PRIME_BATCH]])
        started = time.perf_counter()
        response = await tenant.asearch(text, collection, top_k=fetch, mode=mode)
        latencies.append((time.perf_counter() - started) * 1000)
        ranked = rank_documents(response.results, corpus_ids, top_k)
        judged = qrels[query_id]
        ndcg.append(ndcg_at_k(ranked, judged, NDCG_K))
        for k, values in recall.items():
            values.append(recall_at_k(ranked, judged, k))
        mrr.append(mrr_at_k(ranked, judged, MRR_K))
        if progress:
            progress(mode, done, len(queries))

    def mean(values: list[float]) -> float:
        return round(float(np.mean(values)), 4) if values else 0.0

    result: dict[str, Any] = {f"ndcg@{NDCG_K}": mean(ndcg)}
    result.update({f"recall@{k}": mean(values) for k, values in recall.items()})
    result[f"mrr@{MRR_K}"] = mean(mrr)
    result["latency_ms_p50"] = round(float(np.percentile(latencies, 50)), 2) if latencies else 0.0
    result["latency_ms_p95"] = round(float(np.percentile(latencies, 95)), 2) if latencies else 0.0
    result["queries"] = len(queries)
    return result


async def _cited_text(tenant: Tenant, collection: str, result: GenerationResult) -> str:
    """The whole text of the chunks an answer cites (a stitched passage: all of its chunks)."""
    ids: list[str] = []
    for source in result.sources:
        ids += [source.chunk_id, *source.metadata.get("merged_chunk_ids", [])]
    if not ids:
        return ""
    hits = await asyncio.to_thread(tenant.store.get_chunks, collection, list(dict.fromkeys(ids)))
    return "\n".join(hit.content for hit in hits)


async def _run_answers(tenant: Tenant, collection: str, name: str, generator: Generator,
                       questions: list[tuple[str, str]], gold: Mapping[str, Sequence[str]],
                       progress: EvalProgress | None) -> dict[str, Any]:
    """Ask every question as ``ask`` does (hybrid search, top 5) and score the answers against the gold strings."""
    from .extractive import answer_body, is_not_found
    from .requests import AskRequest

    pipeline = tenant.pipeline(collection, generator=generator)
    phase = f"answers:{name}"
    contained = cited = empty = not_found = 0
    chars: list[int] = []
    latencies: list[float] = []
    if progress:
        progress(phase, 0, len(questions))
    for done, (query_id, text) in enumerate(questions, start=1):
        if (done - 1) % PRIME_BATCH == 0:  # embed the questions in batches; the search reuses them
            await pipeline.retriever.prime([t for _, t in questions[done - 1 : done - 1 + PRIME_BATCH]])
        started = time.perf_counter()
        result = await pipeline.query(AskRequest(query=text, collection=collection))
        latencies.append((time.perf_counter() - started) * 1000)
        body = answer_body(result.answer)
        chars.append(len(result.answer))
        if not body:
            empty += 1
        elif is_not_found(body):
            not_found += 1
        contained += contains_gold(body, gold[query_id])
        cited += contains_gold(await _cited_text(tenant, collection, result), gold[query_id])
        if progress:
            progress(phase, done, len(questions))
    n = len(questions)
    return {
        "contains_gold": round(contained / n, 4) if n else 0.0,
        "cited_contains_gold": round(cited / n, 4) if n else 0.0,
        "empty": empty,
        "not_found": not_found,
        "mean_chars": round(float(np.mean(chars)), 1) if chars else 0.0,
        "latency_ms_p50": round(float(np.percentile(latencies, 50)), 2) if latencies else 0.0,
        "questions": n,
    }


def answerers(tenant: Tenant) -> dict[str, Generator]:
    """What ``evaluate(answers=True)`` scores: the extractive answer, and the configured LLM if there is one."""
    from .generation import Generator

    found = {EXTRACTIVE: Generator(None, embedder=tenant.engine.embedder)}
    if tenant.engine.llm is not None:
        found[tenant.engine.settings.llm.spec or tenant.engine.llm.model] = tenant.generator()
    return found


async def evaluate(
    tenant: Tenant,
    dataset: Dataset,
    modes: Sequence[str] = MODES,
    top_k: int = 10,
    progress: EvalProgress | None = None,
    *,
    limit_queries: int | None = None,
    analyzer: str | None = None,
    answers: bool = False,
) -> dict[str, Any]:
    """Ingest ``dataset`` into a temporary collection of ``tenant``, run its queries, score each mode.

    ``top_k`` documents are ranked per query (at least 10, so the @10 metrics see ten ranks).
    Queries without a relevant judgment (or with empty text) are skipped and counted;
    ``limit_queries`` keeps only the first N of the others; ``analyzer`` names the keyword
    analyzer of the temporary collection (default: the engine's). The temporary collection is
    deleted at the end, also when something fails. Returns ``{"dataset", "queries", "results":
    {mode: {"ndcg@10", "recall@5", "recall@10", "mrr@10", "latency_ms_p50", ...}}, ...}``.

    ``answers=True`` also asks each of those queries that has gold answers (``"answers"`` in
    queries.jsonl) the way ``ask`` does, once extractively and once with the configured LLM if any,
    and adds ``"answers": {name: {"contains_gold", "cited_contains_gold", "empty", "not_found",
    "mean_chars", "latency_ms_p50", "questions"}}``: the share of answers that contain a gold
    string, the share whose cited chunks do, the answers with no text besides a header, the "not
    found" answers, and the mean answer length in characters (header included).
    """
    modes = list(dict.fromkeys(modes))
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        raise ConfigError(f"unknown evaluation mode(s) {', '.join(map(repr, unknown)) or '(none)'}; "
                          f"use one of: {', '.join(MODES)}")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not MIN_TOP_K <= top_k <= MAX_CHUNKS:
        raise ConfigError(f"top_k must be an integer from {MIN_TOP_K} to {MAX_CHUNKS}; got {top_k!r}")
    if limit_queries is not None and limit_queries < 1:
        raise ConfigError(f"limit_queries must be at least 1; got {limit_queries!r}")

    queries = judged_queries(dataset)
    skipped_queries = len(dataset.queries) - len(queries)
    if limit_queries is not None:
        queries = queries[:limit_queries]
    questions = [(qid, text) for qid, text in queries if qid in dataset.answers]
    if answers and not questions:
        raise ConfigError(f"{dataset.name}: no gold answers to score (give queries an \"answers\" list of "
                          f"strings in {QUERIES_FILE})")

    collection = _temporary_collection(dataset.name)
    started = time.perf_counter()
    try:
        corpus_ids, stats = await ingest_corpus(tenant, collection, dataset, progress, analyzer)
        stats["analyzer"] = tenant.store.get_collection(collection).analyzer
        results = {}
        for mode in modes:
            results[mode] = await _run_mode(tenant, collection, mode, queries, dataset.qrels, corpus_ids, top_k,
                                            progress)
        answer_results = {}
        if answers:
            for name, generator in answerers(tenant).items():
                answer_results[name] = await _run_answers(tenant, collection, name, generator, questions,
                                                          dataset.answers, progress)
    except BaseException:
        try:
            tenant.store.delete_collection(collection)
        except Exception:  # the original failure matters more than a failed clean-up
            pass
        raise
    try:
        tenant.store.delete_collection(collection)
    except NotFoundError:
        pass
    return {
        "dataset": dataset.name,
        "queries": len(queries),
        "results": results,
        **({"answers": answer_results} if answers else {}),
        "skipped_queries": skipped_queries,
        **stats,
        "top_k": top_k,
        "elapsed_ms": round((time.perf_counter() - started) * 1000, 1),
    }


__all__ = [
    "EXTRACTIVE",
    "MODES",
    "Dataset",
    "EvalProgress",
    "answerers",
    "contains_gold",
    "document_for",
    "evaluate",
    "load_beir",
    "mrr_at_k",
    "ndcg_at_k",
    "rank_documents",
    "recall_at_k",
]
