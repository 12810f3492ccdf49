"""Hybrid fusion (R19): how the ranked lists of the vector and keyword legs become one.

Methods:

* ``rrf`` (the default): weighted reciprocal rank fusion, score = sum over legs of
  weight / (k + rank); the default is k = 15, vector 0.1 / keyword 0.9. A chunk both legs found
  gains from both, so the chunk that holds a rare name and also means what was asked is not
  buried under a short keyword-only match.
* ``score``: each leg's scores min-max normalised over its candidates onto
  ``[floor, 1]``, then the weighted sum; a hit a leg did not return gets 0 from that leg. The floor
  gives the weakest hit a leg *did* return part of the leg's credit: with a floor of 0 (plain
  min-max) the only chunk that contains a rare query term could get no keyword credit at all when
  the keyword leg also found chunks that score higher on a shorter, more common term, and be
  buried under chunks that do not contain the term.

The default weights and floor are chosen by measurement with the bundled embedder on
jsquad-dev and cranfield (``benchmarks/fusion_sweep.py``; docs/ARCHITECTURE.md "Hybrid defaults").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from ..errors import RetrievalError
from ..types import SearchHit

FUSION_METHODS: tuple[str, ...] = ("rrf", "score")
# The seed's weights: semantic 0.7 / keyword 0.3 by reciprocal rank fusion; they assume a strong
# hosted embedder.
SEED_WEIGHTS = (0.7, 0.3)
RRF_K = 60  # the RRF constant of the literature (and of the seed)
DEFAULT_RRF_K = 15  # bunko's default, measured (docs/ARCHITECTURE.md "Hybrid defaults")
# Each leg of a hybrid search fetches this many times top_k candidates before fusing.
HYBRID_DEPTH = 3


class Ranked(Protocol):
    """What fusion needs of a leg's hit: its chunk id and score."""

    chunk_id: str
    score: float


@dataclass(frozen=True, slots=True)
class Fusion:
    """How a hybrid search fuses its legs: method, per-leg weights (0 allowed), the RRF constant, and
    the floor of ``score`` normalisation (the credit share the weakest returned hit keeps, 0–1)."""

    method: str = "rrf"
    vector_weight: float = 0.1
    keyword_weight: float = 0.9
    k: int = DEFAULT_RRF_K
    floor: float = 0.3

    def __post_init__(self) -> None:
        if self.method not in FUSION_METHODS:
            raise RetrievalError(f"unknown fusion method {self.method!r}; use one of: {', '.join(FUSION_METHODS)}")
        for name in ("vector_weight", "keyword_weight", "floor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
                raise RetrievalError(f"{name} must be a number from 0 to 1; got {value!r}")
        if self.vector_weight + self.keyword_weight <= 0:
            raise RetrievalError("at least one hybrid weight must be above 0")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or not 1 <= self.k <= 1000:
            raise RetrievalError(f"the RRF constant k must be an integer from 1 to 1000; got {self.k!r}")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None, base: Fusion | None = None) -> Fusion:
        """A fusion from ``{"method", "vector_weight", "keyword_weight", "k", "floor"}``; missing keys from
        ``base``."""
        base = base or DEFAULT_FUSION
        if not data:
            return base
        unknown = sorted(set(data) - {"method", "vector_weight", "keyword_weight", "k", "floor"})
        if unknown:
            raise RetrievalError(f"unknown fusion option(s): {', '.join(unknown)}")
        return replace(base, **dict(data))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"method": self.method, "vector_weight": self.vector_weight, "keyword_weight": self.keyword_weight,
                "k": self.k, "floor": self.floor}


DEFAULT_FUSION = Fusion()
SEED_FUSION = Fusion("rrf", *SEED_WEIGHTS, RRF_K)


def normalised(scores: Sequence[float], floor: float = 0.0) -> list[float]:
    """``scores`` min-max normalised onto ``[floor, 1]`` (all 1 when they are equal)."""
    if not scores:
        return []
    values = [float(s) for s in scores]
    low, high = min(values), max(values)
    if high - low <= 1e-12:
        return [1.0] * len(values)
    return [floor + (1 - floor) * (v - low) / (high - low) for v in values]


# A leg's ranking for fusion: (leg name, weight, keys best first, their scores).
Leg = tuple[str, float, Sequence[Any], Sequence[float]]


def fuse_keys(legs: Sequence[Leg], top_k: int, fusion: Fusion = DEFAULT_FUSION
              ) -> list[tuple[Any, float, dict[str, dict[str, Any]]]]:
    """Fuse ranked lists of keys into the ``top_k`` best, by ``fusion.method``: (key, fused score, each
    leg's rank and raw score of it), best first, ties by key. Any hashable, comparable key will do
    (chunk keys in a store, positions in a list)."""
    scores: dict[Any, float] = {}
    found: dict[Any, dict[str, dict[str, Any]]] = {}
    for name, weight, keys, raw in legs:
        parts = (normalised(list(raw), fusion.floor) if fusion.method == "score"
                 else [1 / (fusion.k + rank) for rank in range(1, len(keys) + 1)])
        for rank, (key, score, part) in enumerate(zip(keys, raw, parts, strict=True), start=1):
            found.setdefault(key, {})[name] = {"rank": rank, "score": round(float(score), 6)}
            scores[key] = scores.get(key, 0.0) + weight * part
    order = sorted(scores, key=lambda key: (-scores[key], key))[:top_k]
    return [(key, scores[key], found[key]) for key in order]


def fuse(legs: Sequence[tuple[str, float, Sequence[Ranked]]], top_k: int,
         fusion: Fusion = DEFAULT_FUSION) -> list[SearchHit]:
    """Fuse ranked lists of hits ``(leg name, weight, hits)`` into the ``top_k`` best, by ``fusion.method``.

    Each fused hit records its per-leg rank and raw score in ``metadata["legs"]``; the other fields
    come from the first leg that returned it (so hits without content fuse into hits without content).
    """
    first: dict[str, Any] = {}
    for _, _, hits in legs:
        for hit in hits:
            first.setdefault(hit.chunk_id, hit)
    fused = fuse_keys([(name, weight, [h.chunk_id for h in hits], [h.score for h in hits])
                       for name, weight, hits in legs], top_k, fusion)
    out = []
    for chunk_id, score, per_leg in fused:
        hit = _fresh(first[chunk_id])
        hit.metadata["legs"] = per_leg
        hit.score = score
        out.append(hit)
    return out


def _fresh(hit: Any) -> SearchHit:
    if isinstance(hit, SearchHit):
        return SearchHit(hit.chunk_id, hit.document_id, hit.source, hit.content, 0.0, hit.chunk_index,
                         {**hit.metadata, "legs": {}})
    return SearchHit(hit.chunk_id, "", "", "", 0.0, 0, {"legs": {}})


def fuse_rrf(legs: Sequence[tuple[str, float, Sequence[Ranked]]], top_k: int, k: int = RRF_K) -> list[SearchHit]:
    """Weighted reciprocal rank fusion: score = sum(weight / (k + rank))."""
    return fuse(legs, top_k, Fusion("rrf", 0.5, 0.5, k))


__all__ = ["DEFAULT_FUSION", "DEFAULT_RRF_K", "FUSION_METHODS", "HYBRID_DEPTH", "RRF_K", "SEED_FUSION",
           "SEED_WEIGHTS", "Fusion", "Leg", "fuse", "fuse_keys", "fuse_rrf", "normalised"]
