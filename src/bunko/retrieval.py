"""The search of one collection; moved to :mod:`bunko.search`, re-exported here for existing imports."""

from .requests import MODES, SearchMode
from .search import (
    CANDIDATE_FACTOR,
    DEFAULT_FUSION,
    FUSION_METHODS,
    HYBRID_DEPTH,
    NEAR_DUPLICATE_JACCARD,
    RRF_K,
    SEED_FUSION,
    SEED_WEIGHTS,
    Fusion,
    Retriever,
    fuse,
    fuse_rrf,
    mmr,
    remove_near_duplicates,
)

__all__ = ["CANDIDATE_FACTOR", "DEFAULT_FUSION", "FUSION_METHODS", "HYBRID_DEPTH", "MODES", "NEAR_DUPLICATE_JACCARD",
           "RRF_K", "SEED_FUSION", "SEED_WEIGHTS", "Fusion", "Retriever", "SearchMode", "fuse", "fuse_rrf", "mmr",
           "remove_near_duplicates"]
