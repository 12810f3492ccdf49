"""``Generator``: turn retrieved chunks into an answer with ``[N]`` citations (R23–R25, R27).

Two strategies behind one class:

* With an ``LLMProvider`` (``bunko.llm``), the chunks go to the model as a numbered
  context ``[1] (source) …`` under the seed's system prompt (answer only from the
  context, cite ``[N]``, say so when the context lacks the answer). The context is
  built by relevance within a token budget (R24, default 4000), after merging
  overlapping chunks of one document and near-identical chunks. Citations are
  parsed back out of the answer into ``sources``; numbers outside the context are
  counted in ``usage["invalid_citations"]``, never turned into sources.
* With no LLM configured, the answer is *extractive* (``bunko.extractive``): the
  sentences or short spans of the retrieved chunks that answer the question, each
  quoted as written and followed by its ``[N]``, under a line that says plainly that
  the answer is extractive; or one sentence saying the documents do not contain it.

Either way ``sources`` lists only the chunks the answer cites, in order of first
citation, and each source's ``index`` is the ``N`` used in the answer. Both
strategies stream (:meth:`Generator.stream`): text pieces as they arrive, a
citation event the moment a new ``[N]`` is complete, then the whole result.
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .embedders import BaseEmbedder
from .errors import BunkoError, GenerationError
from .extractive import (  # noqa: F401 - split_passages and the rest re-exported
    MESSAGES,
    ExtractiveAnswerer,
    Passage,
    answer_body,
    answer_language,
    is_not_found,
    split_passages,
    split_sentences,
)
from .llm import LLMDelta, LLMMessage, LLMProvider, LLMResponse  # noqa: F401 - re-exported
from .splitters import estimate_tokens
from .types import GenerationResult, SearchHit, Source

# The seed's RAG prompt ([002] RAG_SYSTEM_PROMPT) with the [N] citation rule of [000]/[001]; the
# context and the question travel in the user message.
DEFAULT_SYSTEM_PROMPT = (
    "あなたは提供されたドキュメントに基づいて質問に回答するAIアシスタントです。\n"
    "\n"
    "回答時の指示：\n"
    "1. 提供されたコンテキストのみを基に回答してください\n"
    "2. 情報が不足している場合は、不明である旨を明記してください\n"
    "3. 回答の根拠となるコンテキストの番号を [1] や [2][3] の形で、その情報を使った文の末尾に必ず示してください"
    "（文書名やページ番号は各コンテキストの見出しにあります）\n"
    "4. 推測や一般的な知識での補完は避けてください\n"
    "5. 質問と同じ言語で回答してください"
)
DEFAULT_CONTEXT_TOKENS = 4000
# A chunk whose character trigrams are this much inside a passage already kept (near-identical text,
# or text the passage contains) adds nothing to the context.
NEAR_DUPLICATE_SHARE = 0.9

TokenCounter = Callable[[str], int]
# Reads the text that follows a chunk in its document (None when nothing does).
FollowingText = Callable[[SearchHit], Awaitable["str | None"]]

EXCERPT_CHARS = 200


def source_label(hit: SearchHit) -> str:
    """How a chunk's origin is shown to the model: file name, page and section when known."""
    meta = hit.metadata
    label = str(meta.get("filename") or meta.get("title") or hit.source or hit.document_id)
    page, page_end = meta.get("page_number"), meta.get("page_end")
    if page is not None:
        label += f", p. {page}" + (f"–{page_end}" if page_end not in (None, page) else "")
    if meta.get("section"):
        label += f", {meta['section']}"
    return label


def format_context(hits: Sequence[SearchHit]) -> str:
    """The numbered context ``[1] (source) content`` the model sees."""
    return "\n\n".join(_context_block(number, hit) for number, hit in enumerate(hits, start=1))


def _context_block(number: int, hit: SearchHit) -> str:
    return f"[{number}] ({source_label(hit)})\n{hit.content}"


@dataclass(slots=True)
class ContextPlan:
    """The chunks that go to the model, numbered 1.. in this order, and what was left out."""

    hits: list[SearchHit]
    tokens: int = 0
    merged: int = 0  # chunks folded into another (overlapping or near-identical)
    dropped: int = 0  # chunks left out for the budget
    truncated: bool = False


def _shingles(text: str) -> set[str]:
    flat = "".join(unicodedata.normalize("NFKC", text).lower().split())
    return {flat[i:i + 3] for i in range(max(1, len(flat) - 2))}


def _span(hit: SearchHit) -> tuple[int, int] | None:
    start, end = hit.metadata.get("start"), hit.metadata.get("end")
    if isinstance(start, int) and isinstance(end, int) and end - start == len(hit.content):
        return start, end
    return None


def _merge_overlap(kept: SearchHit, hit: SearchHit) -> bool:
    """Fold ``hit`` into ``kept`` when both are overlapping slices of one document's text."""
    if not kept.document_id or kept.document_id != hit.document_id:
        return False
    a, b = _span(kept), _span(hit)
    if a is None or b is None or not (b[0] < a[1] and a[0] < b[1]):
        return False
    lo, hi = max(a[0], b[0]), min(a[1], b[1])
    if kept.content[lo - a[0]:hi - a[0]] != hit.content[lo - b[0]:hi - b[0]]:
        return False  # offsets from another version of the text: do not stitch
    content = kept.content
    if b[0] < a[0]:
        content = hit.content[: a[0] - b[0]] + content
    if b[1] > a[1]:
        content = content + hit.content[a[1] - b[0]:]
    kept.content = content
    kept.metadata["start"], kept.metadata["end"] = min(a[0], b[0]), max(a[1], b[1])
    return True


def merge_duplicates(hits: Sequence[SearchHit]) -> tuple[list[SearchHit], int]:
    """Hits with overlapping chunks of one document stitched together and near-duplicates dropped.

    A near-duplicate is a chunk at least 90% of whose character trigrams are in a passage
    already kept (the same text in two documents, or text a stitched passage already holds).

    Order (relevance) is kept: a merged passage sits where its best chunk was, with that
    chunk's id and score; the ids folded into it are listed in ``metadata["merged_chunk_ids"]``.
    """
    kept: list[SearchHit] = []
    shingles: list[set[str]] = []
    merged = 0
    for hit in hits:
        own = _shingles(hit.content)
        for i, other in enumerate(kept):
            if _merge_overlap(other, hit):
                shingles[i] = _shingles(other.content)
            elif not (own and len(own & shingles[i]) / len(own) >= NEAR_DUPLICATE_SHARE):
                continue
            other.metadata.setdefault("merged_chunk_ids", []).append(hit.chunk_id)
            merged += 1
            break
        else:
            kept.append(SearchHit(hit.chunk_id, hit.document_id, hit.source, hit.content, hit.score,
                                  hit.chunk_index, dict(hit.metadata)))
            shingles.append(own)
    return kept, merged


def build_context(hits: Sequence[SearchHit], max_tokens: int = DEFAULT_CONTEXT_TOKENS,
                  count_tokens: TokenCounter = estimate_tokens) -> ContextPlan:
    """The best chunks (relevance order) that fit in ``max_tokens``, duplicates merged first (R24).

    A chunk that does not fit is skipped and smaller, less relevant ones may still fill the
    budget; if no chunk fits whole, the best one goes in cut to the budget.
    """
    merged_hits, merged = merge_duplicates(hits)
    plan = ContextPlan([], merged=merged)
    for hit in merged_hits:
        cost = count_tokens(_context_block(len(plan.hits) + 1, hit)) + 2  # + the blank line between blocks
        if plan.tokens + cost <= max_tokens:
            plan.hits.append(hit)
            plan.tokens += cost
        else:
            plan.dropped += 1
    if not plan.hits and merged_hits:  # nothing fits whole: the best chunk goes in, cut to the budget
        best = merged_hits[0]
        keep = len(best.content)
        while keep > 1 and not plan.hits:
            keep = int(keep * 0.8)
            cut = SearchHit(best.chunk_id, best.document_id, best.source, best.content[:keep], best.score,
                            best.chunk_index, dict(best.metadata))
            cost = count_tokens(_context_block(1, cut)) + 2
            if cost <= max_tokens:
                plan.hits.append(cut)
                plan.tokens, plan.truncated, plan.dropped = cost, True, plan.dropped - 1
    return plan


_CITATION_RE = re.compile(r"\[(\d{1,3})\]")


def parse_citations(answer: str, n_context: int) -> tuple[list[int], list[int]]:
    """The cited context numbers in order of first use, and the out-of-range ones."""
    valid: list[int] = []
    invalid: list[int] = []
    for match in _CITATION_RE.finditer(answer):
        number = int(match.group(1))
        bucket = valid if 1 <= number <= n_context else invalid
        if number not in bucket:
            bucket.append(number)
    return valid, invalid


def _excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def build_sources(hits: Sequence[SearchHit], cited: Sequence[int],
                  excerpts: dict[int, str] | None = None) -> list[Source]:
    """Sources for the cited context numbers (1-based), in citation order."""
    sources = []
    for number in cited:
        hit = hits[number - 1]
        sources.append(Source(
            index=number,
            document_id=hit.document_id,
            source=hit.source,
            chunk_id=hit.chunk_id,
            score=hit.score,
            excerpt=_excerpt((excerpts or {}).get(number) or hit.content),
            metadata=dict(hit.metadata),
        ))
    return sources


@dataclass(slots=True)
class GenerationEvent:
    """One item of :meth:`Generator.stream`: a piece of text, a new citation, or the final result."""

    type: str  # "token", "citation" or "result"
    content: str = ""
    source: Source | None = None
    result: GenerationResult | None = None


class _CitationWatcher:
    """Finds citations in a growing answer and reports each valid one once, as soon as it is complete."""

    def __init__(self, hits: Sequence[SearchHit]) -> None:
        self.hits = hits
        self.seen: set[int] = set()
        self.scanned = 0

    def feed(self, text: str) -> list[Source]:
        # Re-scan from just before the last position: a citation may straddle two pieces.
        begin = max(0, self.scanned - 5)
        new = []
        for match in _CITATION_RE.finditer(text, begin):
            number = int(match.group(1))
            if 1 <= number <= len(self.hits) and number not in self.seen:
                self.seen.add(number)
                new.extend(build_sources(self.hits, [number]))
        self.scanned = len(text)
        return new


class Generator:
    """Answers a question from retrieved chunks: with an LLM if one is given, else extractively."""

    def __init__(
        self,
        llm_provider: LLMProvider | None = None,
        model: str | None = None,
        system_prompt: str | None = None,
        *,
        embedder: Any = None,
        temperature: float = 0.1,
        max_tokens: int = 1000,
        context_tokens: int = DEFAULT_CONTEXT_TOKENS,
        extractive: ExtractiveAnswerer | None = None,
    ) -> None:
        if llm_provider is None and embedder is None:
            raise GenerationError("an extractive Generator needs an embedder to rank sentences")
        if not 0 <= temperature <= 2:
            raise GenerationError(f"temperature must be from 0 to 2; got {temperature}")
        if max_tokens < 1 or context_tokens < 1:
            raise GenerationError("max_tokens and context_tokens must be positive")
        self.llm_provider = llm_provider
        self.model = model or (llm_provider.model if llm_provider is not None else "extractive")
        self.system_prompt = system_prompt or DEFAULT_SYSTEM_PROMPT
        self.embedder = embedder
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.context_tokens = context_tokens
        self.extractive = extractive or ExtractiveAnswerer()

    @property
    def count_tokens(self) -> TokenCounter:
        """The embedder's tokenizer when it has one, else the offline estimate."""
        counter = getattr(self.embedder, "count_tokens", None)
        return counter if callable(counter) else estimate_tokens

    async def generate(self, query: str, chunks: Sequence[SearchHit], history: Sequence[LLMMessage] = (), *,
                       query_vector: Any = None, following: FollowingText | None = None) -> GenerationResult:
        """An answer to ``query`` from ``chunks`` (best first), after the ``history`` of a conversation.

        ``query_vector`` is the question's embedding when the search already made it (by this
        generator's embedder); the extractive answer then does not embed the question again.
        ``following`` reads the text after a chunk in its document: the extractive answer uses it
        when a quoted sentence introduces a list that starts in the next chunk.
        """
        started = time.perf_counter()
        try:
            if self.llm_provider is not None:
                plan = self.plan(chunks)
                response = await self.llm_provider.complete(
                    self.messages(query, plan, history), temperature=self.temperature, max_tokens=self.max_tokens
                )
                result = self._finish(response, plan)
            else:
                result = await self._generate_extractive(query, list(chunks), query_vector, following)
        except GenerationError:
            raise
        except BunkoError as exc:
            raise GenerationError(f"answer generation failed: {exc.message}") from exc
        result.processing_time_ms = (time.perf_counter() - started) * 1000
        return result

    async def stream(self, query: str, chunks: Sequence[SearchHit], history: Sequence[LLMMessage] = (), *,
                     query_vector: Any = None, following: FollowingText | None = None
                     ) -> AsyncIterator[GenerationEvent]:
        """The answer as it is written: ``token`` pieces, a ``citation`` per new valid ``[N]``, then ``result``
        (``query_vector`` and ``following`` as in :meth:`generate`)."""
        started = time.perf_counter()
        try:
            if self.llm_provider is not None:
                plan = self.plan(chunks)
                watcher = _CitationWatcher(plan.hits)
                text, response = "", None
                async for delta in self.llm_provider.stream(
                    self.messages(query, plan, history), temperature=self.temperature, max_tokens=self.max_tokens
                ):
                    if delta.response is not None:
                        response = delta.response
                        continue
                    if not delta.text:
                        continue
                    text += delta.text
                    yield GenerationEvent("token", delta.text)
                    for source in watcher.feed(text):
                        yield GenerationEvent("citation", source=source)
                if response is None:  # a provider that ended without its final item: keep what arrived
                    response = LLMResponse(text, self.model)
                elif response.text != text and response.text.startswith(text):
                    rest = response.text[len(text):]  # text only the final item carried
                    yield GenerationEvent("token", rest)
                    for source in watcher.feed(response.text):
                        yield GenerationEvent("citation", source=source)
                result = self._finish(response, plan)
            else:
                result = await self._generate_extractive(query, list(chunks), query_vector, following)
                cited = {s.index: s for s in result.sources}
                shown: set[int] = set()
                for line in result.answer.splitlines(keepends=True):
                    yield GenerationEvent("token", line)
                    for number in dict.fromkeys(int(n) for n in _CITATION_RE.findall(line)):
                        if number in cited and number not in shown:
                            shown.add(number)
                            yield GenerationEvent("citation", source=cited[number])
        except GenerationError:
            raise
        except BunkoError as exc:
            raise GenerationError(f"answer generation failed: {exc.message}") from exc
        result.processing_time_ms = (time.perf_counter() - started) * 1000
        yield GenerationEvent("result", result=result)

    # -- with an LLM -------------------------------------------------------------------
    def plan(self, chunks: Sequence[SearchHit]) -> ContextPlan:
        """The context the model will see: merged, by relevance, within the token budget."""
        return build_context(chunks, self.context_tokens, self.count_tokens)

    def messages(self, query: str, plan: ContextPlan, history: Sequence[LLMMessage] = ()) -> list[LLMMessage]:
        """System prompt, earlier turns, then the numbered context and the question (the seed's layout)."""
        context = format_context(plan.hits) or "(no passages found)"
        user = f"## Context\n\n{context}\n\n## Question\n\n{query}\n\n## Answer"
        return [LLMMessage("system", self.system_prompt), *history, LLMMessage("user", user)]

    def _finish(self, response: LLMResponse, plan: ContextPlan) -> GenerationResult:
        hits = plan.hits
        cited, invalid = parse_citations(response.text, len(hits))
        usage = {
            "input_tokens": int(response.input_tokens),
            "output_tokens": int(response.output_tokens),
            "context_chunks": len(hits),
            "context_tokens": plan.tokens,
            "merged_chunks": plan.merged,
            "dropped_chunks": plan.dropped,
            "invalid_citations": len(invalid),
        }
        sources = build_sources(hits, cited)
        confidence = float(np.mean([s.score for s in sources])) if sources else 0.0
        return GenerationResult(response.text, sources, response.model or self.model, usage,
                                confidence=max(0.0, min(1.0, confidence)))

    # -- extractive --------------------------------------------------------------------
    async def _embed(self, texts: list[str]) -> np.ndarray:
        if isinstance(self.embedder, BaseEmbedder):
            return await self.embedder.embed_array(texts)
        return np.asarray(await self.embedder.embed_batch(texts), dtype=np.float32)

    async def _generate_extractive(self, query: str, hits: list[SearchHit], query_vector: Any = None,
                                   following: FollowingText | None = None) -> GenerationResult:
        """Quotes from the chunks (overlapping ones stitched, near-duplicates dropped), or "not found"."""
        messages = MESSAGES[answer_language(query)]
        passages, _ = merge_duplicates(hits)

        async def after(number: int) -> str | None:
            return None if following is None else await following(passages[number])

        selection = await self.extractive.select(query, [h.content for h in passages], self._embed, query_vector,
                                                 after if following is not None else None)
        usage = {"input_tokens": 0, "output_tokens": 0, "embedded_texts": selection.embedded_texts}
        if not selection.quotes:
            return GenerationResult(messages["none"], [], "extractive", usage, extractive=True)
        # Number the cited passages 1, 2, 3 in the order the answer first cites them.
        renumber: dict[int, int] = {}
        excerpts: dict[int, str] = {}
        lines = []
        for quote in selection.quotes:
            number = renumber.setdefault(quote.hit, len(renumber) + 1)
            # A quoted reference marker like "[2]" would read as one of our citations.
            first, *rest = _CITATION_RE.sub("", quote.text).strip().split("\n")
            lines.append("\n".join([f"- {first.strip()} [{number}]", *rest]))
            excerpts.setdefault(number, quote.passage)
        cited = [passages[hit] for hit in renumber]
        sources = build_sources(cited, list(range(1, len(cited) + 1)), excerpts)
        return GenerationResult(messages["header"] + "\n" + "\n".join(lines), sources, "extractive", usage,
                                confidence=selection.confidence, extractive=True)
