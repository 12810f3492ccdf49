"""Hybrid fusion settings, near-duplicate removal, MMR and reranking (R19, R20, R22), end to end."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from bunko import Bunko, Document
from bunko.errors import RetrievalError
from bunko.retrieval import Fusion, fuse, mmr, remove_near_duplicates
from bunko.types import SearchHit
from tests.provider_fakes import CohereFake

BASE = "家庭での水の備蓄は一人一日三リットルを目安に、最低三日分、できれば一週間分を用意しましょう。"
TEXTS = {
    "water-a": BASE,
    "water-b": BASE + "（再掲）",  # a near-copy, as happens with re-uploaded or versioned files
    "water-c": "飲料水のほかに、トイレを流す生活用水として風呂の残り湯をためておくと役立ちます。",
    "food": "非常食は缶詰やレトルト食品、栄養補助食品をローリングストックで備えます。",
    "radio": "停電に備えて、手回し充電式のラジオと懐中電灯、予備の乾電池を用意します。",
}


def hit(cid: str, score: float, content: str = "") -> SearchHit:
    return SearchHit(cid, "d", "s", content or cid, score)


@pytest.fixture()
def tenant(engine: Bunko):
    scope = engine.tenant("acme")
    for source, text in TEXTS.items():
        scope.add_document(Document(text, {"source": source}), collection="notes")
    return scope


def test_near_duplicates_are_dropped_but_distinct_texts_stay(tenant) -> None:
    plain = tenant.search("水の備蓄は何日分？", "notes", top_k=4).results
    assert {"water-a", "water-b"} <= {h.source for h in plain}
    deduped = tenant.search("水の備蓄は何日分？", "notes", top_k=4, dedupe=True).results
    sources = [h.source for h in deduped]
    assert len([s for s in sources if s in ("water-a", "water-b")]) == 1
    assert len(deduped) == 4 and "water-c" in sources  # the freed slot goes to the next distinct chunk


def test_mmr_trades_relevance_for_diversity(tenant) -> None:
    relevance_only = tenant.search("水の備蓄", "notes", top_k=2, mmr_lambda=1.0).results
    plain = tenant.search("水の備蓄", "notes", top_k=2).results
    assert [h.chunk_id for h in relevance_only] == [h.chunk_id for h in plain]
    assert {h.source for h in plain} == {"water-a", "water-b"}
    diverse = tenant.search("水の備蓄", "notes", top_k=2, mmr_lambda=0.3).results
    assert diverse[0].chunk_id == plain[0].chunk_id  # the best hit always comes first
    assert diverse[1].source not in ("water-a", "water-b")  # not the near-copy of the first
    with pytest.raises(RetrievalError, match="mmr_lambda"):
        tenant.search("水", "notes", mmr_lambda=1.5)


def test_mmr_function_uses_the_vectors() -> None:
    hits = [hit("a", 0.9), hit("b", 0.89), hit("c", 0.5)]
    vectors = {"a": np.array([1.0, 0.0]), "b": np.array([1.0, 0.01]), "c": np.array([0.0, 1.0])}
    assert [h.chunk_id for h in mmr(hits, vectors, 1.0, 3)] == ["a", "b", "c"]
    assert [h.chunk_id for h in mmr(hits, vectors, 0.5, 3)] == ["a", "c", "b"]
    assert [h.chunk_id for h in remove_near_duplicates([hit("x", 1, BASE), hit("y", 1, BASE + "。")])] == ["x"]


def test_fusion_methods_weights_and_validation(tenant) -> None:
    a = [hit("a", 0.9), hit("b", 0.5), hit("c", 0.1)]
    k = [hit("c", 12.0), hit("b", 11.0), hit("d", 2.0)]
    by_score = fuse([("vector", 0.5, a), ("keyword", 0.5, k)], 4, Fusion("score", 0.5, 0.5, floor=0.0))
    # min-max per leg: vector a 1, b 0.5, c 0; keyword c 1, b 0.9, d 0. Weighted: b 0.7, a 0.5, c 0.5
    # (a tie, broken by chunk id), d 0.
    assert [h.chunk_id for h in by_score] == ["b", "a", "c", "d"]
    assert by_score[0].score == pytest.approx(0.5 * 0.5 + 0.5 * 0.9)
    keyword_only = tenant.search("リットル", "notes", top_k=3, mode="hybrid",
                                 fusion={"vector_weight": 0, "keyword_weight": 1}).results
    # No vector leg: the keyword leg, and the title leg that comes with it for titles that match.
    assert keyword_only and all("keyword" in h.metadata["legs"] and set(h.metadata["legs"]) <= {"keyword", "title"}
                                for h in keyword_only)
    vector_only = tenant.search("リットル", "notes", top_k=3, mode="hybrid",
                                fusion={"method": "score", "vector_weight": 1, "keyword_weight": 0}).results
    assert all(set(h.metadata["legs"]) == {"vector"} for h in vector_only)
    assert all(x.score >= y.score for x, y in itertools.pairwise(vector_only))
    for bad, message in (({"method": "max"}, "unknown fusion method"), ({"vector_weight": 2}, "from 0 to 1"),
                         ({"vector_weight": 0, "keyword_weight": 0}, "at least one"), ({"alpha": 1}, "unknown")):
        with pytest.raises(RetrievalError, match=message):
            tenant.search("水", "notes", mode="hybrid", fusion=bad)


def test_a_hosted_reranker_reorders_the_candidates(tenant, engine: Bunko, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COHERE_API_KEY", "test-key")
    with CohereFake(api_key="test-key") as server:
        # The reranker's address is a setting of the engine (BUNKO_RERANK_BASE_URL, [rerank] base_url).
        monkeypatch.setenv("BUNKO_RERANK_BASE_URL", server.url)
        with Bunko(engine.settings.database_url, embedder=engine.embedder) as reranking:
            scope = reranking.tenant("acme")
            hits = scope.search("ラジオ 懐中電灯 乾電池", "notes", top_k=2, rerank="cohere:rerank-v3.5").results
        (request,) = [r for r in server.requests if r.path == "/v2/rerank"]
    assert request.json["query"] == "ラジオ 懐中電灯 乾電池"
    assert len(request.json["documents"]) == len(TEXTS)  # the whole candidate pool went to the reranker
    assert hits[0].source == "radio"
    assert "retrieval_score" in hits[0].metadata


def test_cli_takes_the_ranking_options(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from bunko.cli import cli

    folder = tmp_path / "docs"
    folder.mkdir()
    for source, text in TEXTS.items():
        (folder / f"{source}.txt").write_text(text, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    runner = CliRunner()
    assert runner.invoke(cli, ["--db", db, "ingest", str(folder), "--collection", "notes"]).exit_code == 0
    result = runner.invoke(cli, ["--db", db, "search", "水の備蓄", "--collection", "notes", "--mode", "hybrid",
                                 "--fusion", "score", "--keyword-weight", "0.6", "--vector-weight", "0.4",
                                 "--dedupe", "--mmr", "0.7", "--json"])
    assert result.exit_code == 0, result.output
    import json

    files = [r["metadata"]["filename"] for r in json.loads(result.output)["results"]]
    assert len([f for f in files if f in ("water-a.txt", "water-b.txt")]) == 1


@pytest.mark.shared_data
def test_hybrid_ranks_the_only_file_with_an_exact_name_first(engine: Bunko) -> None:
    """Over the shared documents, "宮澤賢治" is in jo.pdf (and in the manifest line about it): the default fusion
    puts jo.pdf first, above vector-only chunks that do not hold the name (min-max score fusion put it 5th)."""
    from .conftest import SHARED_DOCUMENTS

    scope = engine.tenant("acme")
    scope.ingest([SHARED_DOCUMENTS], "corpus")
    hits = scope.search("宮澤賢治", "corpus", mode="hybrid", top_k=5).results
    assert hits[0].source.endswith("jo.pdf") and "宮澤賢治" in hits[0].content
    assert all("宮澤賢治" in h.content for h in hits if "keyword" in h.metadata["legs"])
