"""The store conformance suite: one set of tests every backend must pass unchanged.

A backend's test module subclasses :class:`StoreConformance` and provides a
``backend`` fixture that yields a fresh, empty backend (and a ``second_backend``
fixture that opens the same database as another process would). Vectors here are
precomputed (seeded random), so the suite tests storage, not an embedder.
"""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np
import pytest

from ..analysis import DEFAULT_ANALYZER_NAME
from ..errors import (
    AnalyzerMismatchError,
    CollectionNotFoundError,
    ConfigError,
    DimensionMismatchError,
    DocumentNotFoundError,
    EmbedderMismatchError,
    VectorStoreError,
)
from ..stores.base import ChunkWrite, DocumentWrite, StoreBackend
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


class StoreConformance:
    """Behaviour every ``StoreBackend`` must show. Subclass and provide a ``backend`` fixture."""

    # -- collections -------------------------------------------------------------------
    def test_collections_are_created_listed_and_fixed_to_one_embedder(self, backend: StoreBackend) -> None:
        store = backend.for_tenant("acme")
        assert store.list_collections() == []
        created = store.ensure_collection("docs", INFO, description="handbook")
        assert (created.name, created.dimension, created.document_count) == ("docs", DIM, 0)
        assert store.ensure_collection("docs", INFO).name == "docs"  # idempotent
        assert [c.name for c in store.list_collections()] == ["docs"]
        with pytest.raises(EmbedderMismatchError):
            store.ensure_collection("docs", EmbedderInfo("test", "other", DIM))
        with pytest.raises(CollectionNotFoundError):
            store.get_collection("missing")

    def test_invalid_names_are_refused(self, backend: StoreBackend) -> None:
        with pytest.raises(VectorStoreError):
            backend.for_tenant("")
        with pytest.raises(VectorStoreError):
            backend.for_tenant("a b; DROP TABLE chunks")
        with pytest.raises(VectorStoreError):
            backend.for_tenant("acme").ensure_collection("../x", INFO)

    def test_delete_collection_removes_everything(self, backend: StoreBackend) -> None:
        store = backend.for_tenant("acme")
        store.ensure_collection("docs", INFO)
        store.write_document("docs", make_document("a.txt", ["one", "two"], unit_vectors(2, 1)))
        store.delete_collection("docs")
        with pytest.raises(CollectionNotFoundError):
            store.count("docs")
        store.ensure_collection("docs", INFO)
        assert store.count("docs") == 0
        assert store.query("docs", unit_vectors(1, 2)[0], 5) == []

    # -- upsert / query / delete (R14) ---------------------------------------------------
    def test_upsert_generates_ids_and_updates_on_conflict(self, backend: StoreBackend) -> None:
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO)
        vectors = unit_vectors(3, 3)
        ids = store.upsert("c", [VectorRecord("alpha", {"k": 1}, vector=vectors[0].tolist()),
                                 VectorRecord("beta", {"k": 2}, id="fixed-id", vector=vectors[1].tolist())])
        assert len(ids) == 2 and ids[1] == "fixed-id" and ids[0]
        assert store.count("c") == 2
        store.upsert("c", [VectorRecord("beta v2", {"k": 3}, id="fixed-id", vector=vectors[2].tolist())])
        assert store.count("c") == 2
        hit = store.query("c", vectors[2], 1)[0]
        assert (hit.chunk_id, hit.content, hit.metadata["k"]) == ("fixed-id", "beta v2", 3)
        assert hit.score == pytest.approx(1.0, abs=1e-5)
        with pytest.raises(VectorStoreError):
            store.upsert("c", [VectorRecord("no vector")])

    def test_dimensions_are_validated_on_write_and_query(self, backend: StoreBackend) -> None:
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO)
        with pytest.raises(DimensionMismatchError):
            store.upsert("c", [VectorRecord("x", vector=[0.1] * (DIM + 1))])
        with pytest.raises(DimensionMismatchError):
            store.write_document("c", make_document("a", ["x"], unit_vectors(1, 1, dim=DIM - 1)))
        with pytest.raises(DimensionMismatchError):
            store.query("c", [0.1] * 3, 1)
        assert store.count("c") == 0  # nothing half-written

    def test_query_is_exact_and_ordered(self, backend: StoreBackend) -> None:
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO)
        vectors = unit_vectors(300, 4)
        for d in range(6):
            part = vectors[d * 50 : (d + 1) * 50]
            store.write_document("c", make_document(f"doc{d}", [f"text {d}-{i}" for i in range(50)], part))
        q = unit_vectors(1, 99)[0]
        expected = np.sort(vectors @ q)[::-1][:10]
        hits = store.query("c", q, 10)
        assert [round(h.score, 5) for h in hits] == [round(float(s), 5) for s in expected]
        assert all(a.score >= b.score for a, b in pairwise(hits))
        assert store.query("c", q, 10, threshold=float(expected[3]) - 1e-6)[-1].score >= expected[3] - 1e-5
        assert len(store.query("c", q, 10, threshold=float(expected[3]) - 1e-6)) == 4
        assert store.query("c", q, 3, include_content=False)[0].content == ""
        with pytest.raises(VectorStoreError):
            store.query("c", q, 0)

    def test_restricted_search_never_comes_back_short(self, backend: StoreBackend) -> None:
        """Seed 003: a restriction to a few documents must return k hits when k exist there."""
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO)
        q = unit_vectors(1, 7)[0]
        near = np.tile(q, (400, 1)) + 0.01 * unit_vectors(400, 8)
        store.write_document("c", make_document("popular", [f"p{i}" for i in range(400)], near))
        far = -np.tile(q, (5, 1)) + 0.3 * unit_vectors(5, 9)  # the worst matches in the whole collection
        target = make_document("recent", [f"r{i}" for i in range(5)], far)
        store.write_document("c", target)
        hits = store.query("c", q, 5, document_ids=[target.id])
        assert len(hits) == 5
        assert {h.document_id for h in hits} == {target.id}
        assert all(a.score >= b.score for a, b in pairwise(hits))
        assert len(store.query("c", q, 10, document_ids=[target.id])) == 5  # all there are
        assert store.query("c", q, 5, document_ids=["no-such-document"]) == []

    def test_delete_chunks_by_id(self, backend: StoreBackend) -> None:
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO)
        vectors = unit_vectors(3, 5)
        ids = store.upsert("c", [VectorRecord(f"t{i}", vector=vectors[i].tolist()) for i in range(3)])
        assert store.delete("c", [ids[0], "unknown"]) == 1
        assert store.count("c") == 2
        assert ids[0] not in {h.chunk_id for h in store.query("c", vectors[0], 3)}

    # -- documents ------------------------------------------------------------------------
    def test_documents_replace_atomically_and_skip_unchanged(self, backend: StoreBackend) -> None:
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO)
        first = make_document("a.txt", ["old one", "old two"], unit_vectors(2, 10), content_hash="h1")
        assert store.write_document("c", first).status == "created"
        same = make_document("a.txt", ["ignored"], unit_vectors(1, 11), content_hash="h1")
        result = store.write_document("c", same)
        assert (result.status, result.document_id, result.chunks) == ("unchanged", first.id, 2)
        new = make_document("a.txt", ["new one", "new two", "new three"], unit_vectors(3, 12), content_hash="h2")
        replaced = store.write_document("c", new)
        assert (replaced.status, replaced.document_id, replaced.version) == ("replaced", first.id, 2)
        docs = store.list_documents("c")
        assert [(d.id, d.chunks, d.version) for d in docs] == [(first.id, 3, 2)]  # same document, new version
        contents = {h.content for h in store.query("c", unit_vectors(1, 13)[0], 10)}
        assert contents == {"new one", "new two", "new three"}
        assert store.find_by_source("c", "a.txt").content_hash == "h2"
        assert store.find_by_source("c", "b.txt") is None

    def test_batch_write_is_all_or_nothing(self, backend: StoreBackend) -> None:
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO)
        good = make_document("good.txt", ["g1", "g2"], unit_vectors(2, 50))
        bad = make_document("bad.txt", ["b1"], unit_vectors(1, 51, dim=DIM + 2))
        with pytest.raises(DimensionMismatchError):
            store.write_documents("c", [good, bad])
        assert store.list_documents("c") == [] and store.count("c") == 0
        results = store.write_documents("c", [good, make_document("ok.txt", ["o1"], unit_vectors(1, 52))])
        assert [r.status for r in results] == ["created", "created"]
        assert store.count("c") == 3

    def test_counters_follow_every_change(self, backend: StoreBackend) -> None:
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO)

        def counts() -> tuple[int, int]:
            c = store.get_collection("c")
            assert c.chunk_count == store.count("c")
            return c.document_count, c.chunk_count

        a = make_document("a.txt", ["a1", "a2", "a3"], unit_vectors(3, 60), content_hash="1")
        store.write_document("c", a)
        assert counts() == (1, 3)
        store.write_document("c", make_document("a.txt", ["a1"], unit_vectors(1, 61), content_hash="2"))
        assert counts() == (1, 1)
        ids = store.upsert("c", [VectorRecord(f"r{i}", vector=v.tolist()) for i, v in enumerate(unit_vectors(4, 62))])
        assert counts() == (1, 5)
        store.upsert("c", [VectorRecord("r0 again", id=ids[0], vector=unit_vectors(1, 63)[0].tolist())])
        assert counts() == (1, 5)
        store.delete("c", ids[:2])
        assert counts() == (1, 3)
        store.delete_documents([store.list_documents("c")[0].id])
        assert counts() == (0, 2)
        assert len(store.query("c", unit_vectors(1, 64)[0], 10)) == 2

    def test_get_list_and_delete_documents(self, backend: StoreBackend) -> None:
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO)
        a = make_document("a.txt", ["a1", "a2"], unit_vectors(2, 14))
        b = make_document("b.txt", ["b1"], unit_vectors(1, 15))
        store.write_document("c", a)
        store.write_document("c", b)
        assert store.get_document(a.id).source == "a.txt"
        assert [d.source for d in store.list_documents("c", limit=1, offset=1)] == ["b.txt"]
        assert store.delete_documents([a.id, "missing"]) == 1
        with pytest.raises(DocumentNotFoundError):
            store.get_document(a.id)
        assert store.count("c") == 1
        assert store.get_collection("c").document_count == 1

    def test_keyword_search_matches_japanese_and_english(self, backend: StoreBackend) -> None:
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO)
        doc = make_document("k.txt", ["水の備蓄は1人1日3リットルが目安です。", "家具の固定は地震対策の基本です。",
                                      "Drop, cover and hold on during an earthquake."], unit_vectors(3, 16))
        store.write_document("c", doc)
        assert store.keyword_search("c", "水の備蓄", 3)[0].content.startswith("水の備蓄")
        assert store.keyword_search("c", "家具", 3)[0].content.startswith("家具")
        assert store.keyword_search("c", "EARTHQUAKE", 3)[0].content.startswith("Drop")
        assert store.keyword_search("c", "存在しない語彙", 3) == []
        assert store.keyword_search("c", '" OR * NEAR(', 3) == []  # FTS syntax in user input is inert
        assert store.keyword_search("c", "家具", 3, document_ids=["other"]) == []

    @pytest.mark.parametrize(("analyzer", "query", "first"), [
        ("bigram", "備蓄", "水の備蓄"),
        ("combined", "備蓄の目安", "水の備蓄"),
        ("sudachi", "地震の対策", "家具"),
        ("sudachi", "附属", "付属"),  # dictionary normal forms: 附属 finds 付属
        ("whitespace", "家具の固定は地震対策の基本です", "家具"),  # whole runs only
    ])
    def test_keyword_search_uses_the_collection_analyzer(self, backend: StoreBackend, analyzer: str, query: str,
                                                         first: str) -> None:
        store = backend.for_tenant("acme")
        created = store.ensure_collection("c", INFO, analyzer=analyzer)
        assert created.analyzer == analyzer == store.get_collection("c").analyzer
        assert [c.analyzer for c in store.list_collections()] == [analyzer]
        texts = ["水の備蓄は1人1日3リットルが目安です。", "家具の固定は地震対策の基本です。",
                 "付属の説明書を読んでください。", "Drop, cover and hold on during an earthquake."]
        store.write_document("c", make_document("k.txt", texts, unit_vectors(4, 16)))
        hits = store.keyword_search("c", query, 4)
        assert hits and hits[0].content.startswith(first)
        assert store.keyword_search("c", "EARTHQUAKE", 4)[0].content.startswith("Drop")
        assert store.keyword_search("c", "存在しない語彙", 4) == []
        if analyzer == "whitespace":  # no segmentation: a word inside a run is not found
            assert store.keyword_search("c", "家具", 4) == []

    def test_the_analyzer_is_fixed_when_the_collection_is_created(self, backend: StoreBackend) -> None:
        store = backend.for_tenant("acme")
        assert store.ensure_collection("default", INFO).analyzer == DEFAULT_ANALYZER_NAME
        store.ensure_collection("c", INFO, analyzer="bigram")
        assert store.ensure_collection("c", INFO).analyzer == "bigram"  # not named: the recorded one
        assert store.ensure_collection("c", INFO, analyzer="bigram").analyzer == "bigram"
        with pytest.raises(AnalyzerMismatchError, match=r"'bigram' analyzer.*'sudachi'"):
            store.ensure_collection("c", INFO, analyzer="sudachi")
        with pytest.raises(ConfigError, match="unknown analyzer"):
            store.ensure_collection("new", INFO, analyzer="no-such-analyzer")
        assert [c.name for c in store.list_collections()] == ["c", "default"]  # nothing created

    @pytest.mark.parametrize("analyzer", ["bigram", "combined"])
    def test_query_syntax_in_user_text_is_inert(self, backend: StoreBackend, analyzer: str) -> None:
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO, analyzer=analyzer)
        texts = ["水の備蓄 \"quoted\" it's a & b | c ! d : e * (f) NEAR g \\ h", "家具の固定"]
        store.write_document("c", make_document("s.txt", texts, unit_vectors(2, 17)))
        for query in ['"', "'", "&", "|", "!", ":", "*", "(", ")", "\\", "-", '" * (', "'':*", "!(&|)"]:
            assert store.keyword_search("c", query, 3) == [], query
            hits = store.keyword_search("c", f"備蓄{query}", 3)  # next to a real word: still found
            assert hits and hits[0].content.startswith("水の備蓄"), query
        for query in ["it's", "NEAR(", '"quoted"', "a & b", "(f)", "NEAR g", "d:*", "!h"]:  # operators are words
            assert store.keyword_search("c", query, 3)[0].content.startswith("水の備蓄"), query

    def test_keyword_ranking_is_bm25(self, backend: StoreBackend) -> None:
        """Rarer terms weigh more, repeated terms count, and shorter chunks win ties (both stores)."""
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO, analyzer="bigram")
        texts = ["common words here", "common words there", "common rare", "common rare rare",
                 "common rare plus many more words that make this chunk much longer than the others",
                 *(f"filler text number {i}" for i in range(7))]
        store.write_document("c", make_document("r.txt", texts, unit_vectors(len(texts), 18)))
        ranked = [h.content for h in store.keyword_search("c", "common rare", 10)]
        assert len(ranked) == 5
        assert ranked[0] == "common rare rare"
        assert ranked[1] == "common rare"
        assert ranked[2].startswith("common rare plus")
        assert set(ranked[3:]) == {"common words here", "common words there"}
        scores = [h.score for h in store.keyword_search("c", "common rare", 10)]
        assert scores == sorted(scores, reverse=True) and scores[0] > scores[-1] > 0

    # -- tenant isolation (R15) -----------------------------------------------------------
    def test_tenants_never_see_each_others_data(self, backend: StoreBackend) -> None:
        a, b = backend.for_tenant("tenant-a"), backend.for_tenant("tenant-b")
        for store in (a, b):
            store.ensure_collection("shared", INFO)
        vectors = unit_vectors(4, 20)
        doc_a = make_document("secret.txt", ["A の機密情報", "A secret"], vectors[:2])
        doc_b = make_document("public.txt", ["B の情報", "B info"], vectors[2:])
        a.write_document("shared", doc_a)
        b.write_document("shared", doc_b)
        chunk_ids_a = [h.chunk_id for h in a.query("shared", vectors[0], 10)]
        assert len(chunk_ids_a) == 2

        # read
        assert {h.document_id for h in b.query("shared", vectors[0], 10)} == {doc_b.id}
        assert b.query("shared", vectors[0], 10, document_ids=[doc_a.id]) == []
        assert all("A" not in h.content for h in b.keyword_search("shared", "A の機密情報 secret", 10))
        # list
        assert [d.id for d in b.list_documents("shared")] == [doc_b.id]
        assert b.find_by_source("shared", "secret.txt") is None
        with pytest.raises(DocumentNotFoundError):
            b.get_document(doc_a.id)
        assert b.get_collection("shared").document_count == 1
        # change: an upsert with A's chunk id lands in B only
        b.upsert("shared", [VectorRecord("B overwrites?", id=chunk_ids_a[0], vector=vectors[3].tolist())])
        assert {h.content for h in a.query("shared", vectors[0], 10)} == {"A の機密情報", "A secret"}
        with pytest.raises(DocumentNotFoundError):
            b.upsert("shared", [VectorRecord("attach", document_id=doc_a.id, vector=vectors[3].tolist())])
        # delete
        assert b.delete_documents([doc_a.id]) == 0
        assert b.delete("shared", chunk_ids_a) == 1  # only B's own record that reused the id
        assert a.get_document(doc_a.id).chunks == 2
        assert len(a.query("shared", vectors[0], 10)) == 2
        b.delete_collection("shared")
        assert a.get_collection("shared").document_count == 1

    def test_unknown_tenant_sees_nothing(self, backend: StoreBackend) -> None:
        a = backend.for_tenant("tenant-a")
        a.ensure_collection("docs", INFO)
        a.write_document("docs", make_document("x.txt", ["x"], unit_vectors(1, 30)))
        stranger = backend.for_tenant("stranger")
        assert stranger.list_collections() == []
        with pytest.raises(CollectionNotFoundError):
            stranger.query("docs", unit_vectors(1, 31)[0], 5)
        with pytest.raises(CollectionNotFoundError):
            stranger.list_documents("docs")
        assert stranger.delete_documents(["anything"]) == 0

    def test_store_scope_cannot_be_changed(self, backend: StoreBackend) -> None:
        store = backend.for_tenant("tenant-a")
        assert store.tenant == "tenant-a"
        with pytest.raises(AttributeError):
            store.tenant = "tenant-b"  # type: ignore[misc]

    # -- several processes on one database ----------------------------------------------
    def test_a_second_connection_sees_writes_and_deletes(self, backend: StoreBackend,
                                                         second_backend: StoreBackend) -> None:
        one, two = backend.for_tenant("acme"), second_backend.for_tenant("acme")
        one.ensure_collection("c", INFO)
        vectors = unit_vectors(3, 40)
        doc = make_document("a", ["x", "y"], vectors[:2])
        one.write_document("c", doc)
        assert len(two.query("c", vectors[0], 5)) == 2  # loads the matrix into two's cache
        extra = make_document("b", ["z"], vectors[2:])
        one.write_document("c", extra)
        assert len(two.query("c", vectors[0], 5)) == 3  # appended rows are picked up
        one.delete_documents([doc.id])
        hits = two.query("c", vectors[0], 5)
        assert [h.content for h in hits] == ["z"]  # deletes invalidate the cache
