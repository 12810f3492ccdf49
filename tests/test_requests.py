"""Request objects: built from keyword options, checked early, carried unchanged by every layer."""

from __future__ import annotations

from dataclasses import fields

import pytest

from bunko import AskRequest, Bunko, Document, QueryRequest, SearchRequest
from bunko.errors import FilterError, RetrievalError, VectorStoreError
from bunko.filters import Filter


def test_keyword_options_build_the_request_and_unknown_ones_are_refused() -> None:
    request = SearchRequest.build("水", "docs", top_k=3, mode="hybrid", mmr_lambda=0.5, file_types=["pdf"])
    assert (request.query, request.collection, request.top_k, request.mode, request.mmr_lambda) == (
        "水", "docs", 3, "hybrid", 0.5)
    assert SearchRequest.build(request) is request
    assert SearchRequest.build(request, "other", top_k=7).collection == "other"
    with pytest.raises(TypeError, match="no option"):
        SearchRequest.build("水", "docs", top_kk=3)
    with pytest.raises(TypeError, match="AskRequest"):
        AskRequest.build(request)


def test_requests_are_checked_and_resolved_before_any_work() -> None:
    for bad in ({"query": "  "}, {"query": "x", "mode": "fuzzy"}, {"query": "x", "top_k": 0},
                {"query": "x", "top_k": 101}, {"query": "x", "mmr_lambda": 1.5}, {"query": "x", "top_k": True}):
        with pytest.raises(RetrievalError):
            SearchRequest(**bad).resolved()  # type: ignore[arg-type]
    with pytest.raises(FilterError):
        SearchRequest(query="x", filter={"year": {"$gt": []}}).resolved()
    resolved = SearchRequest(query="x", filter={"year": 2024}, file_types=["pdf"]).resolved()
    assert isinstance(resolved.filter, Filter) and resolved.file_types is None
    assert resolved.restriction is resolved.filter and "$and" in resolved.filter.spec
    with pytest.raises(VectorStoreError):
        QueryRequest(collection="c").check()
    with pytest.raises(RetrievalError):
        QueryRequest(collection="c", vector=[1.0], top_k=0).check()


def test_an_ask_request_searches_with_every_search_option() -> None:
    ask = AskRequest(query="それは？", collection="c", top_k=4, mode="keyword", document_ids=["d1"], dedupe=True,
                     rerank="cohere:rerank-v3.5", conversation_id="chat", temperature=0.3)
    search = ask.search_for("前の質問\nそれは？")
    assert type(search) is SearchRequest and search.query == "前の質問\nそれは？"
    for f in fields(SearchRequest):
        if f.name != "query":
            assert getattr(search, f.name) == getattr(ask, f.name), f.name


def test_http_bodies_become_the_same_requests() -> None:
    pytest.importorskip("fastapi")
    from bunko.server import schemas

    body = schemas.SearchRequest(query="水", limit=3, threshold=0.2, documentIds=["d1"], fileTypes=["pdf"],
                                 dateRange=schemas.DateRange(start="2024-01-01"), diversityLambda=0.5)
    request = body.to_request("hybrid")
    assert request == SearchRequest(query="水", collection="default", top_k=3, mode="hybrid", threshold=0.2,
                                    document_ids=["d1"], file_types=["pdf"], since="2024-01-01", mmr_lambda=0.5)
    chat = schemas.ChatRequest(message="水は？", conversationId="c1", documentIds=["d2"],
                               searchParams=schemas.SearchParams(topK=2, mode="keyword", documentIds=["d1"]))
    assert chat.to_request() == AskRequest(query="水は？", top_k=2, mode="keyword", document_ids=["d2"],
                                           conversation_id="c1")


def test_the_keyword_api_and_a_request_give_the_same_answer(engine: Bunko) -> None:
    scope = engine.tenant("t")
    scope.add_document(Document("非常用の水は一人一日3リットルを目安に備蓄します。", {"source": "a.txt"}), "c")
    scope.add_document(Document("避難所は小学校の体育館です。", {"source": "b.txt"}), "c")
    by_keywords = scope.search("水の備蓄", "c", top_k=1, mode="hybrid")
    by_request = scope.search(SearchRequest(query="水の備蓄", collection="c", top_k=1, mode="hybrid"))
    assert [h.chunk_id for h in by_keywords.results] == [h.chunk_id for h in by_request.results]
    assert by_request.results[0].source == "a.txt"
    answer = scope.ask(AskRequest(query="水は一日何リットル？", collection="c", top_k=2))
    assert answer.sources and answer.sources[0].source == "a.txt"
