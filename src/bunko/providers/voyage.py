"""Voyage AI embeddings: ``POST {base_url}/v1/embeddings`` with ``Authorization: Bearer``.

``input_type`` is ``document`` for documents and ``query`` for queries (Voyage prepends
its own retrieval prompt for each); ``output_dimension`` is sent when ``dimensions`` is
given (voyage-3.5, voyage-3-large and voyage-code-3 accept 256, 512, 1024 or 2048).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ._base import HostedClient, HostedEmbedder

VOYAGE_BASE_URL = "https://api.voyageai.com"


class VoyageAPI(HostedClient):
    """Voyage AI's API (embeddings and rerank), with ``VOYAGE_API_KEY``."""

    provider = "voyage"
    default_base_url = VOYAGE_BASE_URL
    env_vars: tuple[str, ...] = ("VOYAGE_API_KEY",)


class VoyageEmbedder(VoyageAPI, HostedEmbedder):
    """Voyage embeddings (``voyage-3.5``, ``voyage-3-large``, ``voyage-multilingual-2``: 1024-d)."""

    default_model = "voyage-3.5"
    known_dimensions: ClassVar[Mapping[str, int]] = {
        "voyage-3.5": 1024,
        "voyage-3.5-lite": 1024,
        "voyage-3-large": 1024,
        "voyage-3": 1024,
        "voyage-3-lite": 512,
        "voyage-multilingual-2": 1024,
        "voyage-code-3": 1024,
    }

    def _request(self, texts: list[str], query: bool) -> tuple[str, dict[str, Any]]:
        body: dict[str, Any] = {"model": self.model, "input": texts, "input_type": "query" if query else "document"}
        if self.requested_dimensions:
            body["output_dimension"] = self.requested_dimensions
        return "v1/embeddings", body

    def _parse(self, data: Any) -> tuple[list[Any], int]:
        items = sorted(data["data"], key=lambda item: item.get("index", 0))
        return [item["embedding"] for item in items], int((data.get("usage") or {}).get("total_tokens") or 0)
