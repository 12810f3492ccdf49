"""Built-in providers: hosted embedding and chat APIs on one client base, and local models.

Every hosted client builds on ``HostedClient`` (model, base URL, API key, timeout,
retries and the HTTP core, resolved once); a provider's identity (name, address, key
variables) is one small class, shared by its embedder, chat model and reranker. The
seams' registries (``bunko.embedders``, ``bunko.llm``, ``bunko.rerankers``) name these
classes and import them on first use. Optional libraries (sentence-transformers) are
imported only when a local model is built, so this import never fails for want of an extra.

| name | embeddings | chat | rerank (``bunko.rerankers``) |
|---|---|---|---|
| ``openai`` | ``OpenAIEmbedder`` | ``OpenAIChat`` | — |
| ``openai-compatible`` | ``OpenAICompatibleEmbedder`` | ``OpenAICompatibleChat`` | — |
| ``gemini`` | ``GeminiEmbedder`` | ``GeminiChat`` | — |
| ``anthropic`` | — | ``AnthropicChat`` | — |
| ``cohere`` | ``CohereEmbedder`` | — | ``CohereReranker`` |
| ``voyage`` | ``VoyageEmbedder`` | — | ``VoyageReranker`` |
| ``jina`` | — | — | ``JinaReranker`` |
| ``sentence-transformers`` | ``SentenceTransformerEmbedder`` (extra ``local``) | — | — |
| ``cross-encoder`` | — | — | ``CrossEncoderReranker`` (extra ``local``) |
"""

from __future__ import annotations

from ._base import ClientOptions, HostedClient, HostedEmbedder, HostedLLM
from ._http import HTTPCore, RetryPolicy, parse_retry_after, resolve_api_key
from .anthropic import AnthropicChat
from .cohere import CohereAPI, CohereEmbedder
from .gemini import GeminiAPI, GeminiChat, GeminiEmbedder
from .local import SentenceTransformerEmbedder
from .openai import (
    OpenAIAPI,
    OpenAIChat,
    OpenAICompatibleAPI,
    OpenAICompatibleChat,
    OpenAICompatibleEmbedder,
    OpenAIEmbedder,
)
from .voyage import VoyageAPI, VoyageEmbedder

__all__ = [
    "AnthropicChat",
    "ClientOptions",
    "CohereAPI",
    "CohereEmbedder",
    "GeminiAPI",
    "GeminiChat",
    "GeminiEmbedder",
    "HTTPCore",
    "HostedClient",
    "HostedEmbedder",
    "HostedLLM",
    "OpenAIAPI",
    "OpenAIChat",
    "OpenAICompatibleAPI",
    "OpenAICompatibleChat",
    "OpenAICompatibleEmbedder",
    "OpenAIEmbedder",
    "RetryPolicy",
    "SentenceTransformerEmbedder",
    "VoyageAPI",
    "VoyageEmbedder",
    "parse_retry_after",
    "resolve_api_key",
]
