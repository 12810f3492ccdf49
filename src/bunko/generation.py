"""``Generator``: turn retrieved chunks into an answer with ``[N]`` citations (R23, R25).

Two strategies behind one class:

* With an ``LLMProvider`` (the seam later providers implement), the chunks go to
  the model as a numbered context ``[1] …`` under a system prompt that demands
  ``[N]`` citations and an explicit "the context does not say" when it does not;
  citations are parsed back out of the answer into ``sources``.
* With no LLM configured, the answer is *extractive*: the sentences of the
  retrieved chunks most similar to the question (embedding cosine plus term
  overlap), each quoted verbatim and followed by its ``[N]``, under a line that
  says plainly that the answer is extractive.

Either way ``sources`` lists only the chunks the answer cites, in order of first
citation, and each source's ``index`` is the ``N`` used in the answer.
"""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .analysis import DEFAULT_ANALYZER, detect_language
from .embedders import BaseEmbedder
from .errors import BunkoError, GenerationError
from .llm import LLMDelta, LLMMessage, LLMProvider, LLMResponse  # noqa: F401 - re-exported
from .types import GenerationResult, SearchHit, Source

DEFAULT_SYSTEM_PROMPT = (
    "You are an assistant that answers questions using only the provided context.\n"
    "Rules:\n"
    "1. Answer only from the numbered context below; do not add outside knowledge or guesses.\n"
    "2. Cite every statement with the number of the context passage it comes from, as [1] or [2][3].\n"
    "3. If the context does not contain the answer, say clearly that the documents do not say.\n"
    "4. Answer in the language of the question."
)

EXCERPT_CHARS = 200


def format_context(hits: Sequence[SearchHit]) -> str:
    """The numbered context ``[1] (source) content`` the model sees."""
    blocks = []
    for number, hit in enumerate(hits, start=1):
        name = hit.metadata.get("filename") or hit.source or hit.document_id
        blocks.append(f"[{number}] ({name})\n{hit.content}")
    return "\n\n".join(blocks)


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


# Sentence ends: Japanese 。！？ (plus closing brackets), Western .!? before whitespace.
_SENTENCE_RE = re.compile(r"[^。！？!?]*(?:[。！？!?][」』）)\]]*|$)")
_EN_SPLIT_RE = re.compile(r"(?<=[a-z0-9)][.])\s+(?=[A-Z\"'(])")
_HEADING_RE = re.compile(r"^\s*#{1,6}\s")
_LIST_RE = re.compile(r"^\s*(?:[-*+・]|\d{1,3}[.)])\s+")
_FINAL_PUNCT = ("。", "！", "？", ".", "!", "?", "」", "』", "）", ")", ":", "：")
MAX_LIST_ITEMS = 5


@dataclass(slots=True)
class Passage:
    """A quotable unit of a chunk: a sentence, or a sentence that introduces a list plus its items."""

    text: str  # what is scored against the question
    items: list[str] = field(default_factory=list)  # list items shown under an introducing sentence

    def render(self) -> str:
        """The passage as quoted in an answer."""
        if not self.items:
            return self.text
        return self.text + "".join(f"\n    - {item}" for item in self.items)


def _sentences(line: str) -> list[str]:
    out = []
    for piece in _SENTENCE_RE.findall(line):
        out.extend(p.strip() for p in _EN_SPLIT_RE.split(piece) if p.strip())
    return out


def split_passages(text: str) -> list[Passage]:
    """Sentences and list items of a chunk; headings and bare labels are left out.

    A sentence followed by a list (blank lines between allowed) also carries the
    first items of that list, so "you should pack the following:" quotes what follows.
    """
    passages: list[Passage] = []
    lead: Passage | None = None  # the last sentence before a list, if the list follows directly
    for line in text.split("\n"):
        if not line.strip():
            continue
        if _HEADING_RE.match(line):
            lead = None
            continue
        if _LIST_RE.match(line):
            item = _LIST_RE.sub("", line).strip()
            if lead is not None and len(lead.items) < MAX_LIST_ITEMS:
                lead.items.append(item)
            passages.extend(Passage(s) for s in _sentences(item))
            continue
        sentences = [Passage(s) for s in _sentences(line)]
        passages.extend(sentences)
        lead = sentences[-1] if sentences else None
    return [
        p for p in passages
        if len(p.text) >= 6 and (p.items or p.text.endswith(_FINAL_PUNCT) or len(p.text) >= 25)
    ]


def split_sentences(text: str) -> list[str]:
    """The quotable sentences of a chunk (headings and bare labels left out)."""
    return [p.text for p in split_passages(text)]


_MESSAGES = {
    "ja": {
        "header": (
            "抽出型の回答です（LLM が設定されていないため、文書から質問に最も関連する文をそのまま引用しています）。"
        ),
        "none": "提供された文書には、この質問への答えが見つかりませんでした。",
    },
    "en": {
        "header": (
            "Extractive answer (no LLM is configured, so these are the sentences from your documents "
            "most relevant to the question, quoted as written):"
        ),
        "none": "The documents do not contain an answer to this question.",
    },
}


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
        max_sentences: int = 3,
        min_similarity: float = 0.35,
    ) -> None:
        if llm_provider is None and embedder is None:
            raise GenerationError("an extractive Generator needs an embedder to rank sentences")
        self.llm_provider = llm_provider
        self.model = model or (llm_provider.model if llm_provider is not None else "extractive")
        self.system_prompt = system_prompt or DEFAULT_SYSTEM_PROMPT
        self.embedder = embedder
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.max_sentences = max_sentences
        self.min_similarity = min_similarity

    async def generate(self, query: str, chunks: Sequence[SearchHit]) -> GenerationResult:
        """An answer to ``query`` citing ``chunks`` as ``[1]``, ``[2]``, … in the order given."""
        started = time.perf_counter()
        try:
            if self.llm_provider is not None:
                result = await self._generate_llm(query, list(chunks))
            else:
                result = await self._generate_extractive(query, list(chunks))
        except GenerationError:
            raise
        except BunkoError as exc:
            raise GenerationError(f"answer generation failed: {exc.message}") from exc
        result.processing_time_ms = (time.perf_counter() - started) * 1000
        return result

    # -- with an LLM -------------------------------------------------------------------
    async def _generate_llm(self, query: str, hits: list[SearchHit]) -> GenerationResult:
        assert self.llm_provider is not None
        user = f"## Context\n\n{format_context(hits) or '(no passages found)'}\n\n## Question\n\n{query}\n\n## Answer"
        response = await self.llm_provider.complete(
            [LLMMessage("system", self.system_prompt), LLMMessage("user", user)],
            temperature=self.temperature,
            max_tokens=self.max_tokens,
        )
        cited, invalid = parse_citations(response.text, len(hits))
        usage = {"input_tokens": response.input_tokens, "output_tokens": response.output_tokens}
        if invalid:
            usage["invalid_citations"] = len(invalid)
        sources = build_sources(hits, cited)
        confidence = float(np.mean([s.score for s in sources])) if sources else 0.0
        return GenerationResult(response.text, sources, response.model or self.model, usage,
                                confidence=max(0.0, min(1.0, confidence)))

    # -- extractive --------------------------------------------------------------------
    async def _embed(self, texts: list[str]) -> np.ndarray:
        if isinstance(self.embedder, BaseEmbedder):
            return await self.embedder.embed_array(texts)
        return np.asarray(await self.embedder.embed_batch(texts), dtype=np.float32)

    async def _generate_extractive(self, query: str, hits: list[SearchHit]) -> GenerationResult:
        language = "ja" if detect_language(query) in ("ja", "zh") else "en"
        messages = _MESSAGES[language]
        candidates: list[tuple[int, Passage]] = []  # (context number, passage)
        seen: set[str] = set()
        for number, hit in enumerate(hits, start=1):
            for passage in split_passages(hit.content):
                key = " ".join(passage.text.split())
                if key in seen:  # overlap between chunks repeats sentences
                    continue
                seen.add(key)
                candidates.append((number, passage))
        usage = {"input_tokens": 0, "output_tokens": 0, "embedded_texts": 0}
        if not candidates:
            return GenerationResult(messages["none"], [], "extractive", usage, extractive=True)
        vectors = await self._embed([query] + [p.text for _, p in candidates])
        usage["embedded_texts"] = len(candidates) + 1
        q, sentence_vectors = vectors[0], vectors[1:]
        norms = np.linalg.norm(sentence_vectors, axis=1) * (np.linalg.norm(q) or 1.0)
        cosine = (sentence_vectors @ q) / np.where(norms == 0, 1.0, norms)
        query_terms = set(DEFAULT_ANALYZER.terms(query))
        overlap = np.array([
            len(query_terms & set(DEFAULT_ANALYZER.terms(p.text))) / len(query_terms) if query_terms else 0.0
            for _, p in candidates
        ])
        # Cosine carries meaning across languages; term overlap sharpens same-language matches.
        scores = 0.75 * cosine + 0.25 * overlap
        order = np.argsort(-scores, kind="stable")
        best = float(scores[order[0]])
        if float(cosine[order[0]]) < self.min_similarity and best < self.min_similarity:
            return GenerationResult(messages["none"], [], "extractive", usage,
                                    confidence=max(0.0, best), extractive=True)
        floor = max(self.min_similarity, best - 0.2)
        picked: list[int] = []
        shown: set[str] = set()
        for i in order:
            if len(picked) == self.max_sentences or scores[i] < floor:
                break
            passage = candidates[int(i)][1]
            if passage.text in shown:  # already quoted as an item under a picked lead-in sentence
                continue
            picked.append(int(i))
            shown.add(passage.text)
            shown.update(passage.items)
        # Number the cited chunks 1, 2, 3 in the order the answer first cites them.
        renumber: dict[int, int] = {}
        lines = []
        excerpts: dict[int, str] = {}
        for i in picked:
            context_number, passage = candidates[i]
            number = renumber.setdefault(context_number, len(renumber) + 1)
            # A quoted reference marker like "[2]" would read as one of our citations.
            text = _CITATION_RE.sub("", passage.render()).strip()
            lines.append(f"- {text} [{number}]")
            excerpts.setdefault(context_number, passage.text)
        answer = messages["header"] + "\n" + "\n".join(lines)
        ordered_hits = [hits[c - 1] for c in renumber]
        sources = build_sources(ordered_hits, list(range(1, len(ordered_hits) + 1)),
                                {renumber[c]: text for c, text in excerpts.items()})
        return GenerationResult(answer, sources, "extractive", usage,
                                confidence=max(0.0, min(1.0, best)), extractive=True)

