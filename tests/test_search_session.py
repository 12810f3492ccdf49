"""One search, one read of its collection: a hybrid search with a filter over HTTP costs its tenant's store
at most three transactions (the collection row, then on PostgreSQL one per leg, run at the same time, the leg
that finishes second reading the hits; on SQLite one for both legs and the hits) and one read of the collection
row, on both stores; the legs rank chunk keys and only the returned hits are read whole."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from bunko import Bunko, ratelimit
from bunko.search import Retriever
from bunko.testing.hooks import counting
from bunko.types import Document

from .served import serve

uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("fastapi")


@pytest.fixture(params=["sqlite", "postgresql"])
def served(request: pytest.FixtureRequest, tmp_path: Path, embedder: object) -> Iterator[tuple[str, Bunko]]:
    """``create_app`` served by uvicorn in a thread over a real socket, on each store."""
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else f"sqlite:///{tmp_path / 's.db'}"
    with serve(url, embedder, rate_limit=0) as app:
        yield app.url, app.engine


def test_a_hybrid_search_with_a_filter_over_http_reads_its_collection_once(
        served: tuple[str, Bunko], monkeypatch: pytest.MonkeyPatch) -> None:
    url, engine = served
    records = engine.backend.service_records()
    records.create_tenant("acme")
    key, _ = records.create_api_key("acme")
    acme = engine.tenant("acme")
    texts = ["非常用の水は一人一日3リットルを目安に備蓄します。", "家具の転倒を防ぐために固定します。",
             "避難所の場所を家族で確認しておきます。", "Keep three days of water for each person."]
    for i, text in enumerate(texts):
        acme.add_document(_document(f"d{i}.txt", text, i % 2))
    body = {"query": "水の備蓄", "collection": "default", "limit": 3, "filter": {"kind": 0}}
    # The first request of a tenant in a process also reads its requests-per-minute quota, which the process
    # then trusts for QUOTA_SECONDS (made long here, so a slow machine cannot let it lapse): that read is once
    # per tenant and interval, not once per search, so it happens before the count.
    monkeypatch.setattr(ratelimit, "QUOTA_SECONDS", 3600.0)
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {key}"}, timeout=120) as client:
        assert client.get("/api/v1/collections").status_code == 200
        with counting(engine.backend) as counts:
            response = client.post("/api/v1/search/hybrid", json=body)
        assert response.status_code == 200, response.text
        hits = response.json()["results"]
    assert hits and {h["metadata"]["kind"] for h in hits} == {0}
    assert hits[0]["content"].startswith("非常用の水")
    assert counts["read_transactions"] <= 3, counts.delta
    assert counts["collection_reads"] <= 1, counts.delta


def test_the_legs_and_the_hits_share_one_transaction_and_explain_their_plans(tmp_path: Path, embedder: object) -> None:
    """In Python too, on SQLite: the row read, then one transaction for both legs and the hydration; ``explain``
    says how each leg searched, and nothing about the last search stays on the retriever."""
    with Bunko(f"sqlite:///{tmp_path / 'r.db'}", embedder=embedder) as engine:
        acme = engine.tenant("acme")
        for i, text in enumerate(["水の備蓄", "家具の固定", "water storage"]):
            acme.add_document(_document(f"d{i}.txt", text, 0))
        retriever = Retriever(engine.embedder, acme.store, "default")
        with counting(engine.backend) as counts:
            result = asyncio.run(retriever.run("水の備蓄", top_k=2, mode="hybrid", filter={"kind": 0}, explain=True))
        assert [h.content for h in result.hits][:1] == ["水の備蓄"]
        # The keyword leg re-ranks BM25's candidates; the title "水の備蓄" (its first line) brings the title leg.
        assert result.explain == {"vector": "exact", "keyword": "postings+proximity", "title": "titles"}
        assert result.query_vector is not None and result.search_ms > 0
        # SQLite runs the legs in turn, in one transaction with the hits (its concurrent_legs is False).
        assert (counts["read_transactions"], counts["collection_reads"]) == (2, 1)
        assert not hasattr(retriever, "last_query_vector") and not hasattr(retriever, "last_search_ms")


def _document(source: str, text: str, kind: int) -> Document:
    return Document(content=text, metadata={"source": source, "kind": kind})
