"""The store conformance suite: one set of tests every backend must pass unchanged.

A backend's test module subclasses :class:`StoreConformance` and provides a
``backend`` fixture that yields a fresh, empty backend (and a ``second_backend``
fixture that opens the same database as another process would). Vectors here are
precomputed (seeded random), so the suite tests storage, not an embedder.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
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
    FilterError,
    VectorStoreError,
)
from ..filters import parse_filter

try:  # the property test needs hypothesis (a dev dependency); without it that one test skips
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    HAVE_HYPOTHESIS = True
except ImportError:  # pragma: no cover
    HAVE_HYPOTHESIS = False
from ..search.session import keyword_query, vector_query
from ..stores.base import ChunkWrite, DocumentWrite, StoreBackend
from ..types import ConversationTurn, EmbedderInfo, UsageEvent, VectorRecord, new_id
from . import store_data
from .store_data import *  # noqa: F403 - all of the suite's data stays importable from here
from .store_data import (
    ALL_FILTER_CHUNKS,
    BAD_FILTERS,
    DIM,
    FILTER_CASES,
    INFO,
    make_document,
    unit_vectors,
    write_crowd,
    write_filter_fixture,
)

if HAVE_HYPOTHESIS:
    # Values chosen to collide across types: numbers and numeric strings, dates in several zones
    # (and strings that only look like dates), booleans next to 0 and 1, null, arrays, objects.
    _DATES = ["2024-01-01", "2024-01-01T00:00:00Z", "2023-12-31T22:00:00-02:00", "2024-01-01T09:00:00+09:00",
              "2024-03-01 12:30", "2024-02-29T23:59:59.5Z", "2024-02-30", "2023-02-29", "2024-1-1"]
    _STRINGS = st.sampled_from([*_DATES, "abc", "ab", "b", "", "防災", "防", "1", "2"])
    _NUMBERS = st.one_of(st.integers(-2, 3), st.sampled_from([0.5, -1.5, 2.0, 1000.0]))
    _SCALARS = st.one_of(_NUMBERS, _STRINGS, st.booleans(), st.none())
    _VALUES = st.one_of(_SCALARS, st.lists(_SCALARS, max_size=3),
                        st.fixed_dictionaries({}, optional={"x": _SCALARS}))
    _METADATA = st.dictionaries(st.sampled_from(["a", "b", "n"]), _VALUES, max_size=3)
    _FIELDS = st.sampled_from(["a", "b", "n", "n.x", "missing"])

    def _op(ops: list[str], operand: Any) -> Any:
        return st.builds(lambda f, op, v: {f: {op: v}}, _FIELDS, st.sampled_from(ops), operand)

    _LEAVES = st.one_of(
        st.builds(lambda f, v: {f: v}, _FIELDS, _SCALARS),
        _op(["$eq", "$ne"], _SCALARS),
        _op(["$gt", "$gte", "$lt", "$lte"], st.one_of(_NUMBERS, _STRINGS)),
        _op(["$in", "$nin"], st.lists(_SCALARS, max_size=3)),
        _op(["$exists"], st.booleans()),
        _op(["$contains"], st.one_of(_NUMBERS, _STRINGS, st.booleans())),
        st.builds(lambda f, op, v: {f: {"$not": {op: v}}}, _FIELDS, st.sampled_from(["$gte", "$lt"]), _NUMBERS),
    )
    _FILTER_SPECS = st.recursive(_LEAVES, lambda inner: st.one_of(
        st.builds(lambda xs: {"$and": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda xs: {"$or": xs}, st.lists(inner, min_size=1, max_size=3)),
        st.builds(lambda x: {"$not": x}, inner),
    ), max_leaves=6)
    _DOCUMENTS = st.lists(st.tuples(_METADATA, st.lists(_METADATA, min_size=1, max_size=3)), min_size=1, max_size=4)
    _COLLECTIONS = itertools.count()


def _label(hit: Any) -> str:
    return hit.content.split()[1]


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
        assert vector_query(store, "docs", unit_vectors(1, 2)[0], 5) == []

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
        hit = vector_query(store, "c", vectors[2], 1)[0]
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
            vector_query(store, "c", [0.1] * 3, 1)
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
        hits = vector_query(store, "c", q, 10)
        assert [round(h.score, 5) for h in hits] == [round(float(s), 5) for s in expected]
        assert all(a.score >= b.score for a, b in pairwise(hits))
        assert vector_query(store, "c", q, 10, threshold=float(expected[3]) - 1e-6)[-1].score >= expected[3] - 1e-5
        assert len(vector_query(store, "c", q, 10, threshold=float(expected[3]) - 1e-6)) == 4
        assert vector_query(store, "c", q, 3, include_content=False)[0].content == ""
        with pytest.raises(VectorStoreError):
            vector_query(store, "c", q, 0)

    def test_restricted_search_never_comes_back_short(self, backend: StoreBackend) -> None:
        """Seed 003: a restriction to a few documents must return k hits when k exist there."""
        store = backend.for_tenant("acme")
        q = unit_vectors(1, 7)[0]
        target = write_crowd(store, "c", q, 400, 5)  # the target's chunks: the worst matches of the collection
        hits = vector_query(store, "c", q, 5, document_ids=[target.id])
        assert len(hits) == 5
        assert {h.document_id for h in hits} == {target.id}
        assert all(a.score >= b.score for a, b in pairwise(hits))
        assert len(vector_query(store, "c", q, 10, document_ids=[target.id])) == 5  # all there are
        assert vector_query(store, "c", q, 5, document_ids=["no-such-document"]) == []

    def test_delete_chunks_by_id(self, backend: StoreBackend) -> None:
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO)
        vectors = unit_vectors(3, 5)
        ids = store.upsert("c", [VectorRecord(f"t{i}", vector=vectors[i].tolist()) for i in range(3)])
        assert store.delete("c", [ids[0], "unknown"]) == 1
        assert store.count("c") == 2
        assert ids[0] not in {h.chunk_id for h in vector_query(store, "c", vectors[0], 3)}

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
        contents = {h.content for h in vector_query(store, "c", unit_vectors(1, 13)[0], 10)}
        assert contents == {"new one", "new two", "new three"}
        stored = store.find_by_source("c", "a.txt")
        assert stored is not None and stored.content_hash == "h2"
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
        assert len(vector_query(store, "c", unit_vectors(1, 64)[0], 10)) == 2

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
        assert keyword_query(store, "c", "水の備蓄", 3)[0].content.startswith("水の備蓄")
        assert keyword_query(store, "c", "家具", 3)[0].content.startswith("家具")
        assert keyword_query(store, "c", "EARTHQUAKE", 3)[0].content.startswith("Drop")
        assert keyword_query(store, "c", "存在しない語彙", 3) == []
        assert keyword_query(store, "c", '" OR * NEAR(', 3) == []  # FTS syntax in user input is inert
        assert keyword_query(store, "c", "家具", 3, document_ids=["other"]) == []

    # -- metadata filters (R18) -------------------------------------------------------------
    @pytest.mark.parametrize("spec,expected", FILTER_CASES, ids=[json.dumps(c[0], ensure_ascii=False)
                                                                 for c in FILTER_CASES])
    def test_filters_select_the_same_chunks_in_every_search(self, backend: StoreBackend, spec: dict[str, Any],
                                                            expected: set[str]) -> None:
        store = backend.for_tenant("acme")
        write_filter_fixture(store, "f")
        q = unit_vectors(1, 501)[0]
        vector_hits = vector_query(store, "f", q, 100, filter=spec)
        assert {_label(h) for h in vector_hits} == expected
        assert all(a.score >= b.score for a, b in pairwise(vector_hits))
        assert {_label(h) for h in keyword_query(store, "f", "共通", 100, filter=spec)} == expected
        assert store.count("f", filter=spec) == len(expected)
        # The filter also parses to the same answer in Python, over the metadata the hits show.
        flt = parse_filter(spec)
        assert flt is not None
        assert {_label(h) for h in vector_query(store, "f", q, 100) if flt.matches(h.metadata)} == expected

    if HAVE_HYPOTHESIS:
        @settings(max_examples=50, deadline=None,
                  suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                         HealthCheck.differing_executors])
        @given(documents=_DOCUMENTS, records=st.lists(_METADATA, max_size=2),
               specs=st.lists(_FILTER_SPECS, min_size=1, max_size=4))
        def test_filters_agree_with_python_evaluation(self, backend: StoreBackend, documents: list[Any],
                                                      records: list[dict[str, Any]], specs: list[Any]) -> None:
            """Property: every backend's SQL selects exactly the chunks ``Filter.matches`` selects."""
            store = backend.for_tenant("property")
            collection = f"p{next(_COLLECTIONS)}"
            store.ensure_collection(collection, INFO)
            rows: list[tuple[str, dict[str, Any], dict[str, Any]]] = []  # (label, chunk metadata, document metadata)
            vectors = unit_vectors(sum(len(c) for _, c in documents) + len(records), 600)
            for d, (doc_meta, chunk_metas) in enumerate(documents):
                chunks = []
                for i, chunk_meta in enumerate(chunk_metas):
                    label = f"d{d}c{i}"
                    chunks.append(ChunkWrite(new_id(), f"共通 {label}", i, 0, 5, 2, chunk_meta))
                    rows.append((label, chunk_meta, doc_meta))
                store.write_document(collection, DocumentWrite(new_id(), f"s{d}", f"h{d}", doc_meta, chunks,
                                                               vectors[len(rows) - len(chunks) : len(rows)]))
            for r, meta in enumerate(records):
                store.upsert(collection, [VectorRecord(f"共通 r{r}", meta, vector=vectors[len(rows)].tolist())])
                rows.append((f"r{r}", meta, {}))
            q = unit_vectors(1, 601)[0]
            for spec in specs:
                flt = parse_filter(spec)
                assert flt is not None
                expected = {label for label, chunk_meta, doc_meta in rows if flt.matches(chunk_meta, doc_meta)}
                assert {_label(h) for h in vector_query(store, collection, q, 100, filter=flt)} == expected, spec
                assert {_label(h) for h in keyword_query(store, collection, "共通", 100, filter=flt)} == expected, spec
                assert store.count(collection, filter=flt) == len(expected), spec
            store.delete_collection(collection)

    def test_filters_combine_with_document_ids_and_threshold(self, backend: StoreBackend) -> None:
        store = backend.for_tenant("acme")
        vectors = write_filter_fixture(store, "f")
        a = store.find_by_source("f", "a.pdf")
        assert a is not None
        hits = vector_query(store, "f", vectors["a2"], 10, document_ids=[a.id], filter={"page_number": {"$gte": 2}})
        assert [_label(h) for h in hits] == ["a2", "a3"]
        assert vector_query(store, "f", vectors["a2"], 10, document_ids=[a.id], filter={"kind": "text"}) == []
        assert [_label(h) for h in vector_query(store, "f", vectors["d1"], 10, threshold=0.99,
                                                filter={"kind": "html"})] == ["d1"]
        assert {_label(h) for h in keyword_query(store, "f", "共通", 10, document_ids=[a.id],
                                                        filter={"section": "備蓄"})} == {"a1", "a2"}
        assert store.count("f", filter={}) == store.count("f") == len(ALL_FILTER_CHUNKS)

    def test_restricted_search_with_a_filter_returns_k(self, backend: StoreBackend) -> None:
        """A filter matching only the worst chunks of the collection still yields k of them, best first."""
        store = backend.for_tenant("acme")
        q = unit_vectors(1, 7)[0]
        write_crowd(store, "c", q, 300, 6, rare_source="rare", rare_metadata={"source": "rare", "year": 2024})
        hits = vector_query(store, "c", q, 5, filter={"year": {"$gte": 2024}})
        assert len(hits) == 5 and all(h.content.startswith("r") for h in hits)
        assert all(a.score >= b.score for a, b in pairwise(hits))
        assert len(vector_query(store, "c", q, 10, filter={"year": 2024})) == 6

    @pytest.mark.parametrize("spec,message", BAD_FILTERS, ids=[str(i) for i in range(len(BAD_FILTERS))])
    def test_malformed_filters_are_refused_with_every_problem(self, backend: StoreBackend, spec: Any,
                                                              message: str) -> None:
        store = backend.for_tenant("acme")
        write_filter_fixture(store, "f")
        for call in (lambda: vector_query(store, "f", unit_vectors(1, 1)[0], 5, filter=spec),
                     lambda: keyword_query(store, "f", "共通", 5, filter=spec),
                     lambda: store.count("f", filter=spec)):
            with pytest.raises(FilterError) as caught:
                call()
            assert caught.value.message == message
            assert caught.value.code == "INVALID_FILTER"
        assert store.count("f") == len(ALL_FILTER_CHUNKS)  # nothing was harmed

    def test_filters_never_reach_another_tenant(self, backend: StoreBackend) -> None:
        """Tenant B filtering for tenant A's metadata, in a same-named collection, gets nothing of A's."""
        a, b = backend.for_tenant("tenant-a"), backend.for_tenant("tenant-b")
        vectors = write_filter_fixture(a, "shared")
        b.ensure_collection("shared", INFO)
        b.write_document("shared", make_document("b-own.txt", ["B の文書 共通"], unit_vectors(1, 77),
                                                 metadata={"source": "b-own.txt", "kind": "text", "year": 1999}))
        for spec, _ in FILTER_CASES:
            for hit in vector_query(b, "shared", vectors["a1"], 100, filter=spec) + keyword_query(b,
                    "shared", "共通 a1 common", 100, filter=spec):
                assert hit.content == "B の文書 共通", spec
        assert vector_query(b, "shared", vectors["a1"], 10, filter={"kind": "pdf"}) == []
        assert keyword_query(b, "shared", "共通", 10, filter={"author.name": "Sato"}) == []
        assert b.count("shared", filter={"kind": {"$in": ["pdf", "markdown", "html"]}}) == 0
        assert b.count("shared", filter={"year": 1999}) == 1
        assert {_label(h) for h in vector_query(a, "shared", vectors["a1"], 100, filter={"kind": "pdf"})} == {
            "a1", "a2", "a3", "e1", "r1"}

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
        hits = keyword_query(store, "c", query, 4)
        assert hits and hits[0].content.startswith(first)
        assert keyword_query(store, "c", "EARTHQUAKE", 4)[0].content.startswith("Drop")
        assert keyword_query(store, "c", "存在しない語彙", 4) == []
        if analyzer == "whitespace":  # no segmentation: a word inside a run is not found
            assert keyword_query(store, "c", "家具", 4) == []

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
            assert keyword_query(store, "c", query, 3) == [], query
            hits = keyword_query(store, "c", f"備蓄{query}", 3)  # next to a real word: still found
            assert hits and hits[0].content.startswith("水の備蓄"), query
        for query in ["it's", "NEAR(", '"quoted"', "a & b", "(f)", "NEAR g", "d:*", "!h"]:  # operators are words
            assert keyword_query(store, "c", query, 3)[0].content.startswith("水の備蓄"), query

    def test_keyword_ranking_is_bm25(self, backend: StoreBackend) -> None:
        """Rarer terms weigh more, repeated terms count, and shorter chunks win ties (both stores)."""
        store = backend.for_tenant("acme")
        store.ensure_collection("c", INFO, analyzer="bigram")
        texts = ["common words here", "common words there", "common rare", "common rare rare",
                 "common rare plus many more words that make this chunk much longer than the others",
                 *(f"filler text number {i}" for i in range(7))]
        store.write_document("c", make_document("r.txt", texts, unit_vectors(len(texts), 18)))
        ranked = [h.content for h in keyword_query(store, "c", "common rare", 10)]
        assert len(ranked) == 5
        assert ranked[0] == "common rare rare"
        assert ranked[1] == "common rare"
        assert ranked[2].startswith("common rare plus")
        assert set(ranked[3:]) == {"common words here", "common words there"}
        scores = [h.score for h in keyword_query(store, "c", "common rare", 10)]
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
        chunk_ids_a = [h.chunk_id for h in vector_query(a, "shared", vectors[0], 10)]
        assert len(chunk_ids_a) == 2

        # read
        assert {h.document_id for h in vector_query(b, "shared", vectors[0], 10)} == {doc_b.id}
        assert vector_query(b, "shared", vectors[0], 10, document_ids=[doc_a.id]) == []
        assert all("A" not in h.content for h in keyword_query(b, "shared", "A の機密情報 secret", 10))
        # list
        assert [d.id for d in b.list_documents("shared")] == [doc_b.id]
        assert b.find_by_source("shared", "secret.txt") is None
        with pytest.raises(DocumentNotFoundError):
            b.get_document(doc_a.id)
        assert b.get_collection("shared").document_count == 1
        # change: an upsert with A's chunk id lands in B only
        b.upsert("shared", [VectorRecord("B overwrites?", id=chunk_ids_a[0], vector=vectors[3].tolist())])
        assert {h.content for h in vector_query(a, "shared", vectors[0], 10)} == {"A の機密情報", "A secret"}
        with pytest.raises(DocumentNotFoundError):
            b.upsert("shared", [VectorRecord("attach", document_id=doc_a.id, vector=vectors[3].tolist())])
        # delete
        assert b.delete_documents([doc_a.id]) == 0
        assert b.delete("shared", chunk_ids_a) == 1  # only B's own record that reused the id
        assert a.get_document(doc_a.id).chunks == 2
        assert len(vector_query(a, "shared", vectors[0], 10)) == 2
        b.delete_collection("shared")
        assert a.get_collection("shared").document_count == 1

    def test_chunk_vectors_are_the_stored_ones_and_tenant_bound(self, backend: StoreBackend) -> None:
        a, b = backend.for_tenant("tenant-a"), backend.for_tenant("tenant-b")
        for store in (a, b):
            store.ensure_collection("shared", INFO)
        vectors = unit_vectors(3, 40)
        a.write_document("shared", make_document("a.txt", ["one", "two"], vectors[:2]))
        b.write_document("shared", make_document("b.txt", ["three"], vectors[2:]))
        ids_a = [h.chunk_id for h in vector_query(a, "shared", vectors[0], 10)]
        got = a.chunk_vectors("shared", [*ids_a, "no-such-chunk"])
        assert set(got) == set(ids_a)
        stored = {h.chunk_id: h.content for h in vector_query(a, "shared", vectors[0], 10)}
        for chunk_id, vector in got.items():
            expected = vectors[0] if stored[chunk_id] == "one" else vectors[1]
            assert np.allclose(vector, expected, atol=1e-6)
        assert b.chunk_vectors("shared", ids_a) == {}  # another tenant's ids: nothing
        assert a.chunk_vectors("shared", []) == {}

    def test_unknown_tenant_sees_nothing(self, backend: StoreBackend) -> None:
        a = backend.for_tenant("tenant-a")
        a.ensure_collection("docs", INFO)
        a.write_document("docs", make_document("x.txt", ["x"], unit_vectors(1, 30)))
        stranger = backend.for_tenant("stranger")
        assert stranger.list_collections() == []
        with pytest.raises(CollectionNotFoundError):
            vector_query(stranger, "docs", unit_vectors(1, 31)[0], 5)
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
        assert len(vector_query(two, "c", vectors[0], 5)) == 2  # loads the matrix into two's cache
        extra = make_document("b", ["z"], vectors[2:])
        one.write_document("c", extra)
        assert len(vector_query(two, "c", vectors[0], 5)) == 3  # appended rows are picked up
        one.delete_documents([doc.id])
        hits = vector_query(two, "c", vectors[0], 5)
        assert [h.content for h in hits] == ["z"]  # deletes invalidate the cache

    # -- usage records, search logs and conversations ------------------------------------
    def test_usage_is_recorded_and_summarised_per_tenant(self, backend: StoreBackend) -> None:
        a, b = backend.for_tenant("tenant-a"), backend.for_tenant("tenant-b")
        a.usage.record([
            UsageEvent("embedding", "use", "m", input_tokens=10, latency_ms=2.0, items=4),
            UsageEvent("embedding", "use", "m", input_tokens=5, latency_ms=4.0, items=1),
            UsageEvent("llm", "openai-compatible", "qwen", input_tokens=100, output_tokens=20, latency_ms=50.0),
        ])
        b.usage.record([UsageEvent("llm", "openai-compatible", "qwen", input_tokens=7, output_tokens=3)])
        totals = {(t.operation, t.provider, t.model): t for t in a.usage.summary()}
        assert set(totals) == {("embedding", "use", "m"), ("llm", "openai-compatible", "qwen")}
        embedding = totals[("embedding", "use", "m")]
        assert (embedding.calls, embedding.input_tokens, embedding.items) == (2, 15, 5)
        assert embedding.latency_ms == pytest.approx(6.0)
        llm = totals[("llm", "openai-compatible", "qwen")]
        assert (llm.calls, llm.input_tokens, llm.output_tokens) == (1, 100, 20)  # not b's 7 / 3
        [only_b] = b.usage.summary()
        assert (only_b.calls, only_b.input_tokens) == (1, 7)
        assert backend.for_tenant("stranger").usage.summary() == []
        future = datetime.now(UTC) + timedelta(hours=1)
        assert a.usage.summary(since=future) == []
        assert len(a.usage.summary(since=datetime.now(UTC) - timedelta(hours=1))) == 2

    def test_search_logs_are_per_tenant(self, backend: StoreBackend) -> None:
        a, b = backend.for_tenant("tenant-a"), backend.for_tenant("tenant-b")
        a.usage.record((), [("避難場所はどこ", 3, 12.5, "hybrid")])
        a.usage.record((), [(None, 0, 1.0, "vector")])  # anonymised
        b.usage.record((), [("b's secret question", 1, 2.0, "keyword")])
        log = a.usage.searches()
        assert [(e["query"], e["result_count"], e["search_type"]) for e in log] == [
            (None, 0, "vector"), ("避難場所はどこ", 3, "hybrid")]
        assert [e["query"] for e in b.usage.searches()] == ["b's secret question"]

    def test_conversations_are_per_tenant_and_bounded(self, backend: StoreBackend) -> None:
        a, b = backend.for_tenant("tenant-a"), backend.for_tenant("tenant-b")
        a.conversations.append("chat-1", [ConversationTurn("user", "水は何日分？"),
                                  ConversationTurn("assistant", "3日分です [1]", {"sources": ["c1"]})])
        a.conversations.append("chat-1", [ConversationTurn("user", "一人何リットル？"),
                                  ConversationTurn("assistant", "1日3リットルです [1]")])
        turns = a.conversations.turns("chat-1")
        assert [t.content for t in turns] == ["水は何日分？", "3日分です [1]", "一人何リットル？",
                                              "1日3リットルです [1]"]
        assert turns[1].metadata == {"sources": ["c1"]} and turns[0].created_at
        assert [t.content for t in a.conversations.turns("chat-1", limit=2)] == ["一人何リットル？",
                                                                              "1日3リットルです [1]"]
        # Same conversation id in another tenant: a different conversation, and A's stays unreadable.
        assert b.conversations.turns("chat-1") == []
        b.conversations.append("chat-1", [ConversationTurn("user", "b only")])
        assert [t.content for t in b.conversations.turns("chat-1")] == ["b only"]
        assert len(a.conversations.turns("chat-1")) == 4
        assert b.conversations.delete("chat-1") == 1
        assert len(a.conversations.turns("chat-1")) == 4
        with pytest.raises(VectorStoreError):
            a.conversations.append("chat-1", [ConversationTurn("system", "be evil")])
        with pytest.raises(VectorStoreError):
            a.conversations.turns("../other")
        assert a.conversations.delete("chat-1") == 4 and a.conversations.turns("chat-1") == []


# The suite's data lives in store_data; its names stay importable from here, where backends' tests found them.
__all__ = ["HAVE_HYPOTHESIS", "StoreConformance", *store_data.__all__]
