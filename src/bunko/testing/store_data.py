"""What the store conformance suite writes: seeded unit vectors, documents, and the metadata-filter
fixture with the filters every backend must answer alike (:mod:`bunko.testing.store_suite` runs them).

Backends' own tests use these too, to write data the same way the suite does.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..stores.base import ChunkWrite, DocumentWrite
from ..types import EmbedderInfo, VectorRecord, new_id

DIM = 16
INFO = EmbedderInfo("test", "random-16", DIM)


def unit_vectors(n: int, seed: int, dim: int = DIM) -> np.ndarray:
    """``n`` random unit vectors (seeded, so tests are repeatable)."""
    rng = np.random.default_rng(seed)
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def make_document(source: str, texts: list[str], vectors: np.ndarray, *, content_hash: str | None = None,
                  metadata: dict[str, Any] | None = None) -> DocumentWrite:
    """A ``DocumentWrite`` with one chunk per text."""
    chunks, offset = [], 0
    for i, text in enumerate(texts):
        chunks.append(ChunkWrite(new_id(), text, i, offset, offset + len(text), len(text.split()),
                                 {"chunk_index": i, "chunk_total": len(texts)}))
        offset += len(text) + 1
    return DocumentWrite(new_id(), source, content_hash or f"hash-{source}-{len(texts)}",
                         metadata or {"source": source, "filename": source.rsplit("/", 1)[-1]}, chunks, vectors)


# Metadata filters (R18): documents whose fields hold mixed types on purpose, and chunks that carry
# their own metadata (a chunk's value wins over its document's, as in a hit's metadata).
FILTER_DOCUMENTS: list[tuple[str, dict[str, Any], list[tuple[str, dict[str, Any]]]]] = [
    ("a.pdf", {"kind": "pdf", "year": 2019, "published_at": "2019-06-01", "tags": ["防災", "water"],
               "title": "Water storage", "rating": 4.5, "draft": False, "author": {"name": "Sato"}},
     [("a1", {"page_number": 1, "section": "備蓄"}), ("a2", {"page_number": 2, "section": "備蓄"}),
      ("a3", {"page_number": 3, "section": "連絡"})]),
    ("b.md", {"kind": "markdown", "year": 2021, "published_at": "2021-03-15T09:00:00+09:00", "tags": ["earthquake"],
              "title": "Earthquake guide", "rating": 3, "draft": True, "author": {"name": "Suzuki"}},
     [("b1", {"section": "家具"}), ("b2", {"section": "避難", "year": 2030})]),
    ("c.txt", {"kind": "text", "year": "2020", "published_at": "not a date", "tags": "防災 tips", "rating": None,
               "author": "Tanaka"},
     [("c1", {}), ("c2", {"page_number": "2"})]),
    ("d.html", {"kind": "html", "year": 2024.0, "published_at": "2024-02-29", "tags": [], "draft": False},
     [("d1", {"page_number": 1})]),
    ("e.pdf", {"kind": "pdf", "year": True, "published_at": "2023-02-29", "tags": [2024, True]},
     [("e1", {})]),
]
# A record upserted without a document: only its own metadata can match.
FILTER_RECORD = ("r1", {"year": 2022, "kind": "pdf"})
ALL_FILTER_CHUNKS = {"a1", "a2", "a3", "b1", "b2", "c1", "c2", "d1", "e1", "r1"}

# (filter, the chunks it must return); worked out by hand from the data above.
FILTER_CASES: list[tuple[dict[str, Any], set[str]]] = [
    ({}, ALL_FILTER_CHUNKS),
    ({"year": 2019}, {"a1", "a2", "a3"}),
    ({"year": {"$eq": "2020"}}, {"c1", "c2"}),  # a string equals strings only
    ({"year": True}, {"e1"}),  # a boolean is not the number 1
    ({"year": {"$gte": 2020}}, {"b1", "b2", "d1", "r1"}),  # numbers only: not "2020", not true
    ({"year": {"$lt": 2021}}, {"a1", "a2", "a3"}),
    ({"year": {"$gte": 2020, "$lt": 2025}}, {"b1", "d1", "r1"}),
    ({"year": {"$gt": "2000"}}, {"c1", "c2"}),  # a string operand compares strings
    ({"year": {"$ne": 2019}}, ALL_FILTER_CHUNKS - {"a1", "a2", "a3"}),
    ({"year": {"$not": {"$gte": 2020}}}, {"a1", "a2", "a3", "c1", "c2", "e1"}),
    ({"year": 2030}, {"b2"}),  # the chunk's own value wins over its document's
    ({"year": 2021}, {"b1"}),
    ({"year": {"$in": [2019, "2020", True]}}, {"a1", "a2", "a3", "c1", "c2", "e1"}),
    ({"year": {"$in": []}}, set()),
    ({"year": {"$nin": []}}, ALL_FILTER_CHUNKS),
    ({"published_at": {"$gte": "2021-01-01"}}, {"b1", "b2", "d1"}),  # 2023-02-29 is no date
    ({"published_at": {"$lt": "2021-03-15T00:00:01Z"}}, {"a1", "a2", "a3", "b1", "b2"}),  # +09:00 is 00:00 UTC
    ({"published_at": "2021-03-15T00:00:00Z"}, {"b1", "b2"}),  # the same instant
    ({"published_at": {"$gt": "2021-03-15T00:00:00Z"}}, {"d1"}),
    ({"kind": {"$in": ["pdf", "html"]}}, {"a1", "a2", "a3", "d1", "e1", "r1"}),
    ({"kind": {"$nin": ["pdf", "html"]}}, {"b1", "b2", "c1", "c2"}),
    ({"rating": {"$exists": True}}, {"a1", "a2", "a3", "b1", "b2", "c1", "c2"}),  # null exists
    ({"rating": {"$exists": False}}, {"d1", "e1", "r1"}),
    ({"rating": None}, {"c1", "c2"}),
    ({"rating": {"$ne": None}}, ALL_FILTER_CHUNKS - {"c1", "c2"}),
    ({"rating": {"$gt": 4}}, {"a1", "a2", "a3"}),
    ({"tags": {"$contains": "防災"}}, {"a1", "a2", "a3", "c1", "c2"}),  # array element, or substring
    ({"tags": {"$contains": "wat"}}, set()),  # array elements match whole
    ({"tags": {"$contains": 2024}}, {"e1"}),
    ({"tags": {"$contains": True}}, {"e1"}),
    ({"title": {"$contains": "guide"}}, {"b1", "b2"}),
    ({"title": {"$contains": "Guide"}}, set()),  # case-sensitive
    ({"author.name": "Sato"}, {"a1", "a2", "a3"}),
    ({"author.name": {"$exists": True}}, {"a1", "a2", "a3", "b1", "b2"}),  # "Tanaka" has no .name
    ({"page_number": {"$lte": 2}}, {"a1", "a2", "d1"}),  # "2" is a string
    ({"section": "備蓄", "page_number": 2}, {"a2"}),
    ({"$or": [{"section": "家具"}, {"page_number": 3}]}, {"a3", "b1"}),
    ({"$and": [{"kind": "pdf"}, {"$not": {"year": 2019}}]}, {"e1", "r1"}),
    ({"draft": False}, {"a1", "a2", "a3", "d1"}),
    ({"$not": {"draft": {"$exists": True}}}, {"c1", "c2", "e1", "r1"}),
    ({"$or": [{"$and": [{"kind": "pdf"}, {"rating": {"$gte": 4}}]}, {"$not": {"$or": [{"kind": "pdf"},
                                                                                     {"kind": "text"}]}}]},
     {"a1", "a2", "a3", "b1", "b2", "d1"}),
]

# (filter, the error message) for filters every backend must refuse before touching the store.
BAD_FILTERS: list[tuple[Any, str]] = [
    ({"$and": [{"year": 1}, {"year": {"$gt": [1]}}]},
     "invalid filter: $and[1].year: $gt needs a number, a date or a string, got a list"),
    ({"year": {"$regex": "^2"}}, "invalid filter: year: unknown operator $regex; use one of $eq, $ne, $gt, $gte, "
                                 "$lt, $lte, $in, $nin, $exists, $contains, $not"),
    ('{"year": ', "invalid filter: (filter): not valid JSON: Expecting value at line 1 column 10"),
    ({"a'; DROP TABLE chunks; --": 1}, "invalid filter: (filter): invalid field name \"a'; DROP TABLE chunks; --\": "
                                      "use letters, digits, '_' or '-' (up to 64 per part, not only digits), parts "
                                      "joined by '.' (at most 8)"),
]


def write_filter_fixture(store: Any, collection: str, seed: int = 500) -> dict[str, np.ndarray]:
    """Write ``FILTER_DOCUMENTS`` and ``FILTER_RECORD`` into ``collection``; returns each chunk's vector."""
    store.ensure_collection(collection, INFO)
    vectors: dict[str, np.ndarray] = {}
    all_vectors = unit_vectors(len(ALL_FILTER_CHUNKS), seed)
    for source, metadata, chunk_specs in FILTER_DOCUMENTS:
        chunks = []
        for i, (label, chunk_metadata) in enumerate(chunk_specs):
            # Every chunk holds the word 共通 so that a keyword search can reach all of them.
            text = f"共通 {label} common"
            chunks.append(ChunkWrite(new_id(), text, i, 0, len(text), 3, chunk_metadata))
            vectors[label] = all_vectors[len(vectors)]
        store.write_document(collection, DocumentWrite(new_id(), source, f"h-{source}", metadata, chunks,
                                                       np.stack([vectors[label] for label, _ in chunk_specs])))
    label, metadata = FILTER_RECORD
    vectors[label] = all_vectors[len(vectors)]
    store.upsert(collection, [VectorRecord(f"共通 {label} common", metadata, vector=vectors[label].tolist())])
    return vectors


def write_crowd(store: Any, collection: str, query: np.ndarray, popular: int, rare: int, *,
                rare_source: str = "recent", rare_metadata: dict[str, Any] | None = None) -> DocumentWrite:
    """A collection where a document of ``popular`` chunks lies next to ``query`` and one of ``rare`` chunks
    (texts ``r0``, ``r1``, ...) opposite it: the worst matches of the whole collection. Returns the rare one."""
    store.ensure_collection(collection, INFO)
    near = np.tile(query, (popular, 1)) + 0.01 * unit_vectors(popular, 8)
    store.write_document(collection, make_document("popular", [f"p{i}" for i in range(popular)], near))
    far = -np.tile(query, (rare, 1)) + 0.3 * unit_vectors(rare, 9)
    document = make_document(rare_source, [f"r{i}" for i in range(rare)], far, metadata=rare_metadata)
    store.write_document(collection, document)
    return document


__all__ = [
    "ALL_FILTER_CHUNKS",
    "BAD_FILTERS",
    "DIM",
    "FILTER_CASES",
    "FILTER_DOCUMENTS",
    "FILTER_RECORD",
    "INFO",
    "make_document",
    "unit_vectors",
    "write_crowd",
    "write_filter_fixture",
]
