"""Built-in providers: hosted embedding and chat APIs on one HTTP core, and local models.

Importing this package registers every provider with ``bunko.embedders`` and
``bunko.llm`` (rerankers live in ``bunko.rerankers``). Optional libraries
(sentence-transformers) are imported only when a local model is built, so this
import never fails for want of an extra.

| name | embeddings | chat |
|---|---|---|
| ``openai`` | ``OpenAIEmbedder`` | ``OpenAIChat`` |
| ``openai-compatible`` | ``OpenAICompatibleEmbedder`` | ``OpenAICompatibleChat`` |
| ``gemini`` | ``GeminiEmbedder`` | ``GeminiChat`` |
| ``anthropic`` | — | ``AnthropicChat`` |
| ``cohere`` | ``CohereEmbedder`` | — |
| ``voyage`` | ``VoyageEmbedder`` | — |
| ``sentence-transformers`` | ``SentenceTransformerEmbedder`` (extra ``local``) | — |
"""

from __future__ import annotations

from ..embedders import register_embedder
from ..llm import register_llm
from ._http import HTTPCore, RetryPolicy, parse_retry_after, resolve_api_key
from .anthropic import AnthropicChat
from .cohere import CohereEmbedder
from .gemini import GeminiChat, GeminiEmbedder
from .local import SentenceTransformerEmbedder
from .openai import OpenAIChat, OpenAICompatibleChat, OpenAICompatibleEmbedder, OpenAIEmbedder
from .voyage import VoyageEmbedder

register_embedder("openai", OpenAIEmbedder)
register_embedder("openai-compatible", OpenAICompatibleEmbedder)
register_embedder("gemini", GeminiEmbedder)
register_embedder("cohere", CohereEmbedder)
register_embedder("voyage", VoyageEmbedder)
register_embedder("sentence-transformers", SentenceTransformerEmbedder)
register_llm("openai", OpenAIChat)
register_llm("openai-compatible", OpenAICompatibleChat)
register_llm("anthropic", AnthropicChat)
register_llm("gemini", GeminiChat)

__all__ = [
    "AnthropicChat",
    "CohereEmbedder",
    "GeminiChat",
    "GeminiEmbedder",
    "HTTPCore",
    "OpenAIChat",
    "OpenAICompatibleChat",
    "OpenAICompatibleEmbedder",
    "OpenAIEmbedder",
    "RetryPolicy",
    "SentenceTransformerEmbedder",
    "VoyageEmbedder",
    "parse_retry_after",
    "resolve_api_key",
]
