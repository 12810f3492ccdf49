"""Search as stages over candidates: legs, fusion, trimming stages, one fetch of the result, a cache.

* :mod:`bunko.search.retriever` -- ``Retriever``, the search of one collection: the legs (vector,
  keyword) rank chunk ids concurrently, fusion merges them, near-duplicate removal, a reranker and
  MMR trim the candidates, and content and metadata are read once, for what is returned.
* :mod:`bunko.search.fusion` -- how hybrid search fuses its legs (``Fusion``, ``fuse``).
* :mod:`bunko.search.stages` -- near-duplicate removal and maximal marginal relevance.
* :mod:`bunko.search.cache` -- per-tenant query embeddings and search results (R37).
"""

from .cache import SearchCache
from .fusion import (
    DEFAULT_FUSION,
    FUSION_METHODS,
    HYBRID_DEPTH,
    RRF_K,
    SEED_FUSION,
    SEED_WEIGHTS,
    Fusion,
    fuse,
    fuse_rrf,
)
from .retriever import Retriever
from .stages import CANDIDATE_FACTOR, NEAR_DUPLICATE_JACCARD, mmr, remove_near_duplicates

__all__ = ["CANDIDATE_FACTOR", "DEFAULT_FUSION", "FUSION_METHODS", "HYBRID_DEPTH", "NEAR_DUPLICATE_JACCARD", "RRF_K",
           "SEED_FUSION", "SEED_WEIGHTS", "Fusion", "Retriever", "SearchCache", "fuse", "fuse_rrf", "mmr",
           "remove_near_duplicates"]
