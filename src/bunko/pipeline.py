"""``RAGPipeline``: the orchestrator of indexing, retrieval and generation (R28).

Errors from any step surface as ``RAGPipelineError`` with the step's own error as
``__cause__``; "not found" and malformed-filter errors pass through so callers can
answer 404- or 400-style.
"""

from __future__ import annotations

from collections.abc import Sequence

from .errors import BunkoError, EmbedderMismatchError, FilterError, NotFoundError, RAGPipelineError
from .filters import FilterLike
from .generation import Generator
from .indexing import IndexManager, ProgressCallback
from .retrieval import Retriever, SearchMode
from .types import Document, GenerationResult, IngestResult


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

    async def query(
        self,
        query: str,
        top_k: int = 5,
        document_ids: Sequence[str] | None = None,
        *,
        threshold: float | None = None,
        mode: SearchMode = "vector",
        filter: FilterLike = None,
    ) -> GenerationResult:
        """Retrieve the ``top_k`` best chunks (inside ``document_ids`` and ``filter``) and answer from them."""
        try:
            hits = await self.retriever.search(
                query, top_k, document_ids=document_ids, threshold=threshold, mode=mode, filter=filter
            )
            result = await self.generator.generate(query, hits)
        except (NotFoundError, EmbedderMismatchError, FilterError):
            raise
        except BunkoError as exc:
            raise RAGPipelineError(exc.message) from exc
        result.usage.setdefault("retrieved_chunks", len(hits))
        result.processing_time_ms += self.retriever.last_search_ms
        return result
