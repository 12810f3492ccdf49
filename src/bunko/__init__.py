"""bunko (文庫): a self-hosted, multi-tenant RAG engine, Japanese-first.

Start with :class:`bunko.Bunko`; see docs/ARCHITECTURE.md for the seams.
"""

from __future__ import annotations

from .embedders import (
    BaseEmbedder,
    EmbedderProtocol,
    UniversalSentenceEncoderEmbedder,
    get_embedder,
    register_embedder,
)
from .engine import Bunko, IngestReport, SearchResponse, Tenant
from .errors import (
    AnalyzerMismatchError,
    BunkoError,
    CollectionNotFoundError,
    ConfigError,
    DimensionMismatchError,
    DocumentNotFoundError,
    EmbedderMismatchError,
    EmbeddingError,
    FilterError,
    GenerationError,
    LoaderError,
    NotFoundError,
    PreprocessingError,
    RAGPipelineError,
    RetrievalError,
    SplitterError,
    UnknownProviderError,
    UnsupportedFormatError,
    VectorStoreError,
)
from .filters import Filter, build_filter, parse_filter
from .generation import Generator
from .indexing import IndexManager
from .llm import LLMDelta, LLMMessage, LLMProvider, LLMResponse, get_llm, register_llm
from .pipeline import RAGPipeline, StreamEvent
from .preprocess import Preprocessor
from .requests import AskRequest, QueryRequest, SearchRequest
from .search import Retriever
from .splitters import RecursiveCharacterSplitter, get_splitter, register_splitter
from .stores import SQLiteBackend, VectorStore, open_backend
from .types import (
    Chunk,
    Collection,
    Document,
    DocumentInfo,
    GenerationResult,
    IngestResult,
    SearchHit,
    Source,
    TextChunk,
    UsageEvent,
    UsageTotal,
    VectorRecord,
)
from .version import __version__

__all__ = [
    "AnalyzerMismatchError",
    "AskRequest",
    "BaseEmbedder",
    "Bunko",
    "BunkoError",
    "Chunk",
    "Collection",
    "CollectionNotFoundError",
    "ConfigError",
    "DimensionMismatchError",
    "Document",
    "DocumentInfo",
    "DocumentNotFoundError",
    "EmbedderMismatchError",
    "EmbedderProtocol",
    "EmbeddingError",
    "Filter",
    "FilterError",
    "GenerationError",
    "GenerationResult",
    "Generator",
    "IndexManager",
    "IngestReport",
    "IngestResult",
    "LLMDelta",
    "LLMMessage",
    "LLMProvider",
    "LLMResponse",
    "LoaderError",
    "NotFoundError",
    "PreprocessingError",
    "Preprocessor",
    "QueryRequest",
    "RAGPipeline",
    "RAGPipelineError",
    "RecursiveCharacterSplitter",
    "RetrievalError",
    "Retriever",
    "SQLiteBackend",
    "SearchHit",
    "SearchRequest",
    "SearchResponse",
    "Source",
    "SplitterError",
    "StreamEvent",
    "Tenant",
    "TextChunk",
    "UniversalSentenceEncoderEmbedder",
    "UnknownProviderError",
    "UnsupportedFormatError",
    "UsageEvent",
    "UsageTotal",
    "VectorRecord",
    "VectorStore",
    "VectorStoreError",
    "__version__",
    "build_filter",
    "get_embedder",
    "get_llm",
    "get_splitter",
    "open_backend",
    "parse_filter",
    "register_embedder",
    "register_llm",
    "register_splitter",
]
