"""The stages after the legs of a search: near-duplicate removal and maximal marginal relevance.

Both work on a ranked candidate pool; near-duplicate removal needs the candidates' text, MMR
their vectors (read with the text, in the one fetch of the pool).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..types import SearchHit
from .fusion import normalised

CANDIDATE_FACTOR = 3  # candidates per wanted hit when dedupe, a reranker or MMR trims the list
NEAR_DUPLICATE_JACCARD = 0.85  # shingle overlap above which two chunks count as the same text
_SHINGLE = 5


def _shingles(text: str) -> set[str]:
    flat = " ".join(unicodedata.normalize("NFKC", text).lower().split())
    if len(flat) <= _SHINGLE:
        return {flat}
    return {flat[i : i + _SHINGLE] for i in range(len(flat) - _SHINGLE + 1)}


def remove_near_duplicates(hits: Sequence[SearchHit], threshold: float = NEAR_DUPLICATE_JACCARD) -> list[SearchHit]:
    """Hits in order, without those whose text nearly repeats a better-ranked one (character 5-gram Jaccard)."""
    kept: list[SearchHit] = []
    seen: list[set[str]] = []
    for hit in hits:
        shingles = _shingles(hit.content)
        if any(len(shingles & other) / max(1, len(shingles | other)) >= threshold for other in seen):
            continue
        kept.append(hit)
        seen.append(shingles)
    return kept


def mmr(hits: Sequence[SearchHit], vectors: Mapping[str, Any], lam: float, top_k: int) -> list[SearchHit]:
    """Maximal marginal relevance over ``hits`` (best first): relevance is the min-max normalised score,
    redundancy the highest cosine similarity to a hit already chosen. Hits without a stored vector
    keep their relevance and count as unlike every other.
    """
    if not hits:
        return []
    relevance = normalised([h.score for h in hits])
    dim = next((len(v) for v in vectors.values()), 0)
    matrix = np.zeros((len(hits), dim), dtype=np.float32)
    for i, hit in enumerate(hits):
        vector = vectors.get(hit.chunk_id)
        if vector is not None and dim:
            norm = float(np.linalg.norm(vector))
            matrix[i] = np.asarray(vector, dtype=np.float32) / (norm or 1.0)
    similarity = matrix @ matrix.T if dim else np.zeros((len(hits), len(hits)), dtype=np.float32)
    chosen: list[int] = []
    left = list(range(len(hits)))
    while left and len(chosen) < top_k:
        def value(i: int) -> float:
            redundancy = max((float(similarity[i, j]) for j in chosen), default=0.0)
            return lam * relevance[i] - (1 - lam) * redundancy

        best = max(left, key=lambda i: (value(i), -i))
        chosen.append(best)
        left.remove(best)
    return [hits[i] for i in chosen]


__all__ = ["CANDIDATE_FACTOR", "NEAR_DUPLICATE_JACCARD", "mmr", "remove_near_duplicates"]
