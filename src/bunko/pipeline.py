"""``RAGPipeline``: the orchestrator of indexing, retrieval and generation (R28).

Errors from any step surface as ``RAGPipelineError`` with the step's own error as
``__cause__``; "not found" and malformed-filter errors pass through so callers can
answer 404- or 400-style.

:meth:`RAGPipeline.stream` is the streaming form of :meth:`RAGPipeline.query` (R27): an
async iterator of :class:`StreamEvent` — ``search_start``, ``search_results {count}``,
``generation_start``, ``token {content}`` (many), ``citation {source}`` (one per cited
source, when its ``[N]`` first appears), ``done {response}`` (the whole ``GenerationResult``
as a dict). A server turns each event into one SSE ``data:`` line with ``event.to_dict()``.
:meth:`RAGPipeline.answer` gives either form as events (the unstreamed one as a single ``done``), so a
caller writes what happens around an answer once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import BunkoError, EmbedderMismatchError, FilterError, NotFoundError, RAGPipelineError
from .generation import Generator
from .indexing import IndexManager, ProgressCallback
from .llm import LLMMessage
from .requests import AskRequest
from .search import Retriever
from .types import Document, GenerationResult, IngestResult, SearchHit

EVENT_TYPES = ("search_start", "search_results", "generation_start", "token", "citation", "done")


@dataclass(slots=True)
class StreamEvent:
    """One event of a streamed answer (R27)."""

    type: str
    data: dict[str, Any] = field(default_factory=dict)
    result: GenerationResult | None = field(default=None, repr=False, compare=False)  # ``done``: the answer

    def to_dict(self) -> dict[str, Any]:
        """The wire shape: ``{"type": ..., **data}`` (e.g. ``{"type": "token", "content": "回答"}``)."""
        return {"type": self.type, **self.data}


class RAGPipeline:
    """Indexes documents and answers questions over one collection."""

    def __init__(self, index_manager: IndexManager, retriever: Retriever, generator: Generator) -> None:
        self.index_manager = index_manager
        self.retriever = retriever
        self.generator = generator

    async def index_document(
        self, document: Document, *, progress: ProgressCallback | None = None
    ) -> IngestResult:
        """Normalise, split, embed and store one document."""
        try:
            return await self.index_manager.index_document(document, progress=progress)
        except (NotFoundError, EmbedderMismatchError):
            raise
        except BunkoError as exc:
            raise RAGPipelineError(f"{document.source}: {exc.message}") from exc

    async def query(self, request: AskRequest | str, top_k: int | None = None, *, history: Sequence[LLMMessage] = (),
                    search_query: str | None = None, **options: Any) -> GenerationResult:
        """Retrieve the best chunks for an :class:`~bunko.requests.AskRequest` and answer from them.

        ``query("question", 5, mode="hybrid")`` builds the request from the question and its
        options. ``history`` holds earlier turns of a conversation for the LLM; ``search_query``
        (default: the question) is what is searched, so a follow-up can search with its context.
        """
        request = self._request(request, top_k, options)
        try:
            searched = await self.retriever.run(request.search_for(search_query or request.query))
            hits = searched.hits
            # The question's vector from the search, when it was the question that was searched.
            result = await self.generator.generate(request.query, hits, history, query_vector=self._query_vector(
                request, search_query, searched.query_vector), following=self.following)
        except (NotFoundError, EmbedderMismatchError, FilterError):
            raise
        except BunkoError as exc:
            raise RAGPipelineError(exc.message) from exc
        _annotate(result, len(hits), len(history))
        result.processing_time_ms += searched.search_ms
        return result

    async def stream(self, request: AskRequest | str, top_k: int | None = None, *, history: Sequence[LLMMessage] = (),
                     search_query: str | None = None, **options: Any) -> AsyncIterator[StreamEvent]:
        """:meth:`query` as a stream of events; errors are raised as :meth:`query` raises them."""
        request = self._request(request, top_k, options)
        try:
            yield StreamEvent("search_start")
            searched = await self.retriever.run(request.search_for(search_query or request.query))
            hits = searched.hits
            yield StreamEvent("search_results", {"count": len(hits)})
            yield StreamEvent("generation_start")
            async for event in self.generator.stream(request.query, hits, history, following=self.following,
                                                     query_vector=self._query_vector(request, search_query,
                                                                                     searched.query_vector)):
                if event.type == "token":
                    yield StreamEvent("token", {"content": event.content})
                elif event.type == "citation" and event.source is not None:
                    yield StreamEvent("citation", {"source": event.source.to_dict()})
                elif event.result is not None:
                    result = event.result
                    _annotate(result, len(hits), len(history))
                    result.processing_time_ms += searched.search_ms
                    yield StreamEvent("done", {"response": result.to_dict()}, result)
        except (NotFoundError, EmbedderMismatchError, FilterError):
            raise
        except BunkoError as exc:
            raise RAGPipelineError(exc.message) from exc

    def answer(self, request: AskRequest, *, history: Sequence[LLMMessage] = (), search_query: str | None = None,
               stream: bool = False) -> AsyncIterator[StreamEvent]:
        """The answer to ``request`` as events: those of :meth:`stream`, or (``stream=False``) one ``done`` event
        from :meth:`query` whose ``result`` is the ``GenerationResult`` (see :func:`final_result`)."""
        if stream:
            return self.stream(request, history=history, search_query=search_query)
        return self._answered(request, history, search_query)

    async def _answered(self, request: AskRequest, history: Sequence[LLMMessage],
                        search_query: str | None) -> AsyncIterator[StreamEvent]:
        result = await self.query(request, history=history, search_query=search_query)
        yield StreamEvent("done", {"response": result.to_dict()}, result)

    async def following(self, hit: SearchHit) -> str | None:
        """The text after ``hit`` in its document: the rest of the chunk that goes on past it (None at the end).

        Read only when an extractive answer quotes a sentence that ends its chunk, to find the list
        it introduces."""
        if not hit.document_id:
            return None
        store, collection = self.retriever.vector_store, self.retriever.collection
        found = await asyncio.to_thread(store.document_chunks, collection, [hit.document_id])
        end = hit.metadata.get("end")
        for stored in sorted(found.get(hit.document_id, []), key=lambda c: c.chunk.start):
            chunk = stored.chunk
            exact = len(chunk.content) == chunk.end - chunk.start  # offsets into this text
            if isinstance(end, int) and exact and chunk.start <= end < chunk.end:
                return chunk.content[end - chunk.start:]
            if not isinstance(end, int) and chunk.index == hit.chunk_index + 1:
                return chunk.content
        return None

    @staticmethod
    def _query_vector(request: AskRequest, search_query: str | None, vector: Any) -> Any:
        """The question's embedding from the search just run, if the question itself was searched."""
        if search_query and search_query != request.query:
            return None
        return vector

    def _request(self, request: AskRequest | str, top_k: int | None, options: dict[str, Any]) -> AskRequest:
        if top_k is not None:
            options["top_k"] = top_k
        return AskRequest.build(request, self.retriever.collection, **options)


def _annotate(result: GenerationResult, retrieved: int, history: int) -> None:
    """Note in an answer's usage how many chunks it read and how many earlier turns the LLM saw."""
    result.usage.setdefault("retrieved_chunks", retrieved)
    if history:
        result.usage["history_turns"] = history


async def final_result(events: AsyncIterator[StreamEvent]) -> GenerationResult:
    """The ``GenerationResult`` of the ``done`` event that ends ``events`` (read to their end)."""
    result: GenerationResult | None = None
    async for event in events:
        result = event.result or result
    if result is None:
        raise RAGPipelineError("the answer ended without a result")
    return result


__all__ = ["EVENT_TYPES", "RAGPipeline", "StreamEvent", "final_result"]
