"""Built-in providers: hosted embedding and chat APIs on one HTTP core, and local models.

Importing this package registers every provider with ``bunko.embedders`` and
``bunko.llm`` (``bunko.rerankers`` registers its own). Optional libraries
(sentence-transformers) are imported only when a local model is built, so this
import never fails for want of an extra.

| name | embeddings | chat |
|---|---|---|
| ``openai`` | ``OpenAIEmbedder`` | ``OpenAIChat`` |
| ``openai-compatible`` | ``OpenAICompatibleEmbedder`` | ``OpenAICompatibleChat`` |
"""

from __future__ import annotations

from ..embedders import register_embedder
from ..llm import register_llm
from ._http import HTTPCore, RetryPolicy, parse_retry_after, resolve_api_key
from .openai import OpenAIChat, OpenAICompatibleChat, OpenAICompatibleEmbedder, OpenAIEmbedder

register_embedder("openai", OpenAIEmbedder)
register_embedder("openai-compatible", OpenAICompatibleEmbedder)
register_llm("openai", OpenAIChat)
register_llm("openai-compatible", OpenAICompatibleChat)

__all__ = [
    "HTTPCore",
    "OpenAIChat",
    "OpenAICompatibleChat",
    "OpenAICompatibleEmbedder",
    "OpenAIEmbedder",
    "RetryPolicy",
    "parse_retry_after",
    "resolve_api_key",
]
