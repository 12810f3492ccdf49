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
from .generation import Generator
from .indexing import IndexManager
from .llm import LLMDelta, LLMMessage, LLMProvider, LLMResponse, get_llm, register_llm
from .pipeline import RAGPipeline
from .preprocess import Preprocessor
from .retrieval import Retriever
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
    VectorRecord,
)

__version__ = "0.1.0"

__all__ = [
    "AnalyzerMismatchError",
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
    "RAGPipeline",
    "RAGPipelineError",
    "RecursiveCharacterSplitter",
    "RetrievalError",
    "Retriever",
    "SQLiteBackend",
    "SearchHit",
    "SearchResponse",
    "Source",
    "SplitterError",
    "Tenant",
    "TextChunk",
    "UniversalSentenceEncoderEmbedder",
    "UnknownProviderError",
    "UnsupportedFormatError",
    "VectorRecord",
    "VectorStore",
    "VectorStoreError",
    "__version__",
    "get_embedder",
    "get_llm",
    "get_splitter",
    "open_backend",
    "register_embedder",
    "register_llm",
    "register_splitter",
]
