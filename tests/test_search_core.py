"""Search as stages over candidates (bunko.search): the store side (hits by id, ids-only legs, the
write counter), the cache (R37), accounting off the hot path, hybrid as the default, and the
question embedded once per request. Isolation checks run on both stores."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from bunko import Bunko, Document
from bunko.requests import DEFAULT_MODE, AskRequest, SearchRequest
from bunko.search import Retriever, keyword_query, vector_query
from bunko.server.schemas import ChatRequest
from bunko.stores import StoreBackend
from bunko.stores.base import Ranked
from bunko.testing.store_suite import INFO, make_document, unit_vectors
from bunko.types import VectorRecord

TEXTS = {
    "water": "家庭での水の備蓄は一人一日三リットルを目安に、最低三日分を用意しましょう。",
    "food": "非常食は缶詰やレトルト食品をローリングストックで備えます。",
    "radio": "停電に備えて、手回し充電式のラジオと懐中電灯、予備の乾電池を用意します。",
}


@pytest.fixture()
def backend(store_backend: StoreBackend) -> StoreBackend:
    return store_backend  # both stores (the conftest's plain ``backend`` is SQLite only)


# -- the store side ----------------------------------------------------------------------------------
def test_hits_by_id_are_read_in_order_inside_the_tenant_and_collection(backend: StoreBackend) -> None:
    a, b = backend.for_tenant("acme"), backend.for_tenant("globex")
    for store in (a, b):
        store.ensure_collection("c", INFO)
        store.ensure_collection("other", INFO)
    mine = a.write_document("c", make_document("a.txt", ["alpha one", "alpha two"], unit_vectors(2, 1)))
    elsewhere = a.write_document("other", make_document("o.txt", ["other"], unit_vectors(1, 2)))
    theirs = b.write_document("c", make_document("b.txt", ["beta"], unit_vectors(1, 3)))
    ids = [h.chunk_id for h in vector_query(a, "c", unit_vectors(1, 1)[0], 2)]
    other_id = vector_query(a, "other", unit_vectors(1, 2)[0], 1)[0].chunk_id
    their_id = vector_query(b, "c", unit_vectors(1, 3)[0], 1)[0].chunk_id
    assert mine.chunks == 2 and elsewhere.chunks == theirs.chunks == 1

    def hits(store, ranked, vectors=None):
        """Hits for ranked (chunk id, score) pairs through the store's search port, in one transaction."""
        with store.reader(store.read_collection("c")) as reader:
            keys = reader.keys_of([cid for cid, _ in ranked])
            order = [(keys[cid], score) for cid, score in ranked if cid in keys]
            return reader.hits(Ranked(np.asarray([k for k, _ in order], dtype=np.int64),
                                      np.asarray([s for _, s in order])), vectors=vectors)

    vectors: dict[str, np.ndarray] = {}
    ranked = [(ids[1], 0.5), (their_id, 0.9), (other_id, 0.8), (ids[0], 0.25), ("no-such-id", 1.0)]
    found = hits(a, ranked, vectors)
    # Only this tenant's chunks of this collection come back, in the given order with the given scores.
    assert [(h.chunk_id, h.score) for h in found] == [(ids[1], 0.5), (ids[0], 0.25)]
    assert {h.content for h in found} == {"alpha one", "alpha two"} and all(h.source == "a.txt" for h in found)
    assert set(vectors) == set(ids) and all(v.shape == (16,) for v in vectors.values())
    assert hits(b, [(i, 1.0) for i in ids]) == []  # the other tenant sees none of them
    assert [h.content for h in hits(b, [(their_id, 1.0)])] == ["beta"]
    assert [h.content for h in a.get_chunks("c", [ids[1], their_id, ids[0]])] == ["alpha two", "alpha one"]


def test_legs_can_rank_without_the_text(backend: StoreBackend) -> None:
    store = backend.for_tenant("acme")
    store.ensure_collection("c", INFO)
    store.write_document("c", make_document("k.txt", ["水の備蓄", "家具の固定"], unit_vectors(2, 5)))
    full = keyword_query(store, "c", "水の備蓄", 5)
    bare = keyword_query(store, "c", "水の備蓄", 5, include_content=False)
    assert full and full[0].content == "水の備蓄"
    assert [(h.chunk_id, h.score) for h in bare] == [(h.chunk_id, h.score) for h in full]
    assert all(h.content == "" for h in bare)


def test_every_write_moves_the_collection_write_counter(backend: StoreBackend) -> None:
    store, other = backend.for_tenant("acme"), backend.for_tenant("globex")
    store.ensure_collection("c", INFO)
    other.ensure_collection("c", INFO)
    seen = [store.get_collection("c").write_seq]

    def moved() -> bool:
        seen.append(store.get_collection("c").write_seq)
        return seen[-1] != seen[-2]

    document = make_document("a.txt", ["one", "two"], unit_vectors(2, 1))
    store.write_document("c", document)
    assert moved()  # ingest
    store.write_document("c", document)
    assert not moved()  # unchanged: nothing written
    store.write_document("c", make_document("a.txt", ["one", "three"], unit_vectors(2, 2), content_hash="h2"))
    assert moved()  # a new version
    ids = store.upsert("c", [VectorRecord("rec", {}, None, unit_vectors(1, 3)[0].tolist())])
    assert moved()  # upsert
    assert store.delete("c", ids) == 1
    assert moved()  # chunk delete
    other.write_document("c", make_document("b.txt", ["x"], unit_vectors(1, 4)))
    assert not moved()  # another tenant's write
    store.delete_documents([store.list_documents("c")[0].id])
    assert moved()  # document delete
    before = store.get_collection("c").write_seq
    store.delete_collection("c")
    store.ensure_collection("c", INFO)
    assert store.get_collection("c").write_seq != before  # a new collection never repeats the old counter


# -- the engine: cache, accounting, defaults ---------------------------------------------------------
@pytest.fixture()
def engine_at(store_url: str, embedder: Any) -> Iterator[Bunko]:
    engine = Bunko(store_url, embedder=embedder)
    yield engine
    engine.close()


def _fill(scope: Any, collection: str = "notes") -> None:
    for source, text in TEXTS.items():
        scope.add_document(Document(text, {"source": source}), collection=collection)


def test_a_repeated_search_is_served_from_the_cache_until_the_collection_changes(engine_at: Bunko) -> None:
    acme = engine_at.tenant("acme")
    _fill(acme)
    first = acme.search("水は何日分？", "notes", top_k=2).results
    before = engine_at.cache.stats()["search_results"]
    again = acme.search("水は何日分？", "notes", top_k=2).results
    after = engine_at.cache.stats()["search_results"]
    assert (after["hits"], after["misses"]) == (before["hits"] + 1, before["misses"])
    assert [(h.chunk_id, h.score, h.content) for h in again] == [(h.chunk_id, h.score, h.content) for h in first]
    again[0].metadata["changed"] = True  # a caller's changes do not reach the cache
    assert "changed" not in acme.search("水は何日分？", "notes", top_k=2).results[0].metadata

    acme.add_document(Document("水は一人一日三リットル、七日分あると安心です。", {"source": "water-2"}), "notes")
    stats = engine_at.cache.stats()["search_results"]
    fresh = acme.search("水は何日分？", "notes", top_k=2).results
    assert engine_at.cache.stats()["search_results"]["misses"] == stats["misses"] + 1
    assert "water-2" in {h.source for h in acme.search("水は何日分？", "notes", top_k=5).results}
    assert fresh  # the changed collection was searched again
    # A different request (another top_k, mode or filter) is another entry.
    misses = engine_at.cache.stats()["search_results"]["misses"]
    acme.search("水は何日分？", "notes", top_k=2, mode="keyword")
    assert engine_at.cache.stats()["search_results"]["misses"] == misses + 1


def test_a_cached_result_is_never_served_to_another_tenant(engine_at: Bunko) -> None:
    acme, globex = engine_at.tenant("acme"), engine_at.tenant("globex")
    _fill(acme)
    globex.add_document(Document("グローベックスの備蓄倉庫は東棟にあります。", {"source": "globex"}), "notes")
    mine = acme.search("備蓄", "notes", top_k=3).results
    assert mine and all(h.source in TEXTS for h in mine)
    hits_before = engine_at.cache.stats()["search_results"]["hits"]
    theirs = globex.search("備蓄", "notes", top_k=3).results
    assert engine_at.cache.stats()["search_results"]["hits"] == hits_before  # a miss, not acme's entry
    assert [h.source for h in theirs] == ["globex"]
    assert not {h.chunk_id for h in theirs} & {h.chunk_id for h in mine}
    # The query embedding is cached per tenant too.
    vectors = engine_at.cache.stats()["query_vectors"]
    assert vectors["size"] >= 2


def test_search_records_are_written_off_the_request_and_none_is_lost_on_close(store_url: str, embedder: Any) -> None:
    with Bunko(store_url, embedder=embedder) as engine:
        acme = engine.tenant("acme")
        _fill(acme)
        for i in range(25):
            acme.search(f"水 {i}", "notes", top_k=1, mode="keyword")
        acme.ask("水は何日分？", "notes")
    # A new engine over the same store sees every search and its usage record.
    with Bunko(store_url, embedder=embedder) as reopened:
        scope = reopened.tenant("acme")
        log = scope.search_log(100)
        assert len(log) == 26
        assert {e["query"] for e in log} == {f"水 {i}" for i in range(25)} | {"水は何日分？"}
        searches = {(t.operation, t.model): t.calls for t in scope.usage()}
        assert searches[("search", "keyword")] == 25 and searches[("search", "hybrid")] == 1


def test_hybrid_is_the_default_mode_of_every_entry_point() -> None:
    assert DEFAULT_MODE == "hybrid"
    assert SearchRequest(query="q").mode == "hybrid" and AskRequest(query="q").mode == "hybrid"
    assert ChatRequest(message="q").to_request().mode == "hybrid"
    for command in ("search", "ask"):
        shown = subprocess.run([sys.executable, "-m", "bunko", command, "--help"], capture_output=True, text=True,
                               check=True).stdout
        assert "[default: hybrid]" in " ".join(shown.split()), command


def test_the_question_is_embedded_once_per_answer(engine: Bunko, monkeypatch: pytest.MonkeyPatch) -> None:
    acme = engine.tenant("acme")
    _fill(acme)
    question = "懐中電灯の電池は？"
    embedded: list[str] = []
    original = engine.embedder.embed_array

    async def spy(texts: Any, **options: Any) -> Any:
        embedded.extend(texts)
        return await original(texts, **options)

    monkeypatch.setattr(engine.embedder, "embed_array", spy)
    answer = acme.ask(question, "notes")
    assert answer.sources and embedded.count(question) == 1
    assert answer.usage["embedded_texts"] == len(embedded) - 1  # the passages only
    embedded.clear()
    acme.ask(question, "notes")  # the same question again: its embedding comes from the cache
    assert question not in embedded


def test_questions_known_at_once_are_embedded_in_batches(engine: Bunko, monkeypatch: pytest.MonkeyPatch) -> None:
    acme = engine.tenant("acme")
    _fill(acme)
    calls: list[int] = []
    original = engine.embedder.embed_array

    async def spy(texts: Any, **options: Any) -> Any:
        calls.append(len(texts))
        return await original(texts, **options)

    monkeypatch.setattr(engine.embedder, "embed_array", spy)
    questions = [f"質問 {i}" for i in range(10)]
    retriever: Retriever = acme.retriever("notes")
    assert asyncio.run(retriever.prime(questions)) == 10
    for q in questions:
        acme.search(q, "notes", top_k=1, mode="vector")
    assert calls == [10]


@pytest.mark.slow
@pytest.mark.shared_data
def test_an_exact_name_ranks_its_file_first_in_hybrid(tmp_path: Path) -> None:
    """The file whose text holds 宮澤賢治 (jo.pdf, a vertical poem) is the first hybrid hit, above the
    manifest line that names it (a keyword-only match) and vector-only chunks without the name."""
    from tests.conftest import SHARED_DOCUMENTS

    db = f"sqlite:///{tmp_path / 'corpus.db'}"
    run = [sys.executable, "-m", "bunko", "--db", db]
    # Some shared files are broken on purpose (exit status 1); jo.pdf must be among those read.
    ingested = subprocess.run([*run, "ingest", str(SHARED_DOCUMENTS), "-c", "corpus", "--json"],
                              capture_output=True, text=True)
    assert "jo.pdf" in ingested.stdout, ingested.stderr[-2000:]
    found = subprocess.run([*run, "search", "宮澤賢治", "-c", "corpus", "-k", "5", "--json"], check=True,
                           capture_output=True, text=True).stdout
    results = json.loads(found)["results"]
    assert Path(results[0]["source"]).name == "jo.pdf", [Path(r["source"]).name for r in results]
