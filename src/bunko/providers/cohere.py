"""Cohere's v2 Embed API: ``POST {base_url}/v2/embed`` with ``Authorization: Bearer``.

Documents go out as ``input_type="search_document"``, queries as ``search_query``;
``embedding_types=["float"]`` asks for plain floats. At most 96 texts per call, the API's
limit. ``output_dimension`` is sent for ``embed-v4.0`` when ``dimensions`` is given.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ._base import HostedClient, HostedEmbedder

COHERE_BASE_URL = "https://api.cohere.com"
COHERE_ENV = ("COHERE_API_KEY", "CO_API_KEY")


class CohereAPI(HostedClient):
    """Cohere's API (embed and rerank), with ``COHERE_API_KEY`` or ``CO_API_KEY``."""

    provider = "cohere"
    default_base_url = COHERE_BASE_URL
    env_vars: tuple[str, ...] = COHERE_ENV


class CohereEmbedder(CohereAPI, HostedEmbedder):
    """Cohere embeddings (``embed-multilingual-v3.0`` 1024-d, ``embed-v4.0`` 1536-d by default)."""

    default_model = "embed-multilingual-v3.0"
    batch_size = 96
    max_batch_size = 96
    known_dimensions: ClassVar[Mapping[str, int]] = {
        "embed-v4.0": 1536,
        "embed-multilingual-v3.0": 1024,
        "embed-english-v3.0": 1024,
        "embed-multilingual-light-v3.0": 384,
        "embed-english-light-v3.0": 384,
    }

    def _request(self, texts: list[str], query: bool) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"model": self.model, "texts": texts,
                                "input_type": "search_query" if query else "search_document",
                                "embedding_types": ["float"], "truncate": "END"}
        if self.requested_dimensions:
            body["output_dimension"] = self.requested_dimensions
        return "v2/embed", body

    def _parse(self, data: Any) -> tuple[list[Any], int]:
        embeddings = data["embeddings"]
        vectors = embeddings["float"] if isinstance(embeddings, dict) else embeddings
        billed = ((data.get("meta") or {}).get("billed_units") or {})
        return vectors, int(billed.get("input_tokens") or 0)
