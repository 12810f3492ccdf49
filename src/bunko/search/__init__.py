"""Search as stages over candidates: legs, fusion, trimming stages, one fetch of the result, a cache.

* :mod:`bunko.search.retriever` -- ``Retriever``, the search of one collection: the collection row read
  once, the question embedded once, then one read transaction (:mod:`bunko.search.session`) in which
  the legs (vector, keyword) rank chunk keys, fusion merges them and content and metadata are read
  once, for what is returned; near-duplicate removal, a reranker and MMR trim the candidates.
* :mod:`bunko.search.keyword` -- BM25 over a collection's postings: the one keyword ranker.
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
from .keyword import bm25_top, keyword_leg
from .retriever import Retriever, SearchResult
from .session import keyword_query, vector_query
from .stages import CANDIDATE_FACTOR, NEAR_DUPLICATE_JACCARD, mmr, remove_near_duplicates

__all__ = ["CANDIDATE_FACTOR", "DEFAULT_FUSION", "FUSION_METHODS", "HYBRID_DEPTH", "NEAR_DUPLICATE_JACCARD", "RRF_K",
           "SEED_FUSION", "SEED_WEIGHTS", "Fusion", "Retriever", "SearchCache", "SearchResult", "bm25_top", "fuse",
           "fuse_rrf", "keyword_leg", "keyword_query", "mmr", "remove_near_duplicates", "vector_query"]
