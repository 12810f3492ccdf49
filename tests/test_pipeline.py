"""End to end through the library: ingest the sample documents, search, answer with citations."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from bunko import (
    Bunko,
    CollectionNotFoundError,
    Document,
    EmbedderMismatchError,
    EmbeddingError,
    RetrievalError,
)
from bunko.analysis import DEFAULT_ANALYZER_NAME
from bunko.embedders import BaseEmbedder, get_embedder, register_embedder, unregister_embedder
from bunko.errors import UnknownProviderError
from bunko.generation import parse_citations, split_passages

from .conftest import EXAMPLES


@pytest.fixture()
def demo(engine: Bunko):
    scope = engine.tenant("demo")
    report = scope.ingest([EXAMPLES], "bousai")
    assert report.errors == []
    return scope


def test_ingest_reports_every_sample_document(demo) -> None:
    docs = demo.documents("bousai")
    names = sorted(d.metadata["filename"] for d in docs)
    assert names == sorted(p.name for p in EXAMPLES.iterdir())
    assert all(d.chunks > 0 for d in docs)
    ja = next(d for d in docs if d.metadata["filename"] == "bichiku.txt")
    assert ja.metadata["language"] == "ja" and ja.metadata["mime_type"] == "text/plain"
    en = next(d for d in docs if d.metadata["filename"] == "emergency-kit.md")
    assert en.metadata["language"] == "en" and en.metadata["title"]


def test_reingest_is_a_no_op_and_changed_files_replace(demo, tmp_path: Path) -> None:
    again = demo.ingest([EXAMPLES], "bousai")
    assert {d.status for d in again.documents} == {"unchanged"}
    note = tmp_path / "note.md"
    note.write_text("# メモ\n\n古い内容です。", encoding="utf-8")
    first = demo.ingest([note], "bousai").documents[0]
    note.write_text("# メモ\n\n新しい内容です。避難場所は小学校です。", encoding="utf-8")
    second = demo.ingest([note], "bousai").documents[0]
    assert (first.status, second.status) == ("created", "replaced")
    hits = demo.search("避難場所", "bousai", top_k=3, document_ids=[second.document_id]).results
    assert hits and all("古い" not in h.content for h in hits)
    assert demo.documents("bousai")[-1].id == second.document_id


@pytest.mark.parametrize(
    ("question", "expected_file", "expected_phrase", "mode"),
    [
        ("水は何日分備蓄すればいいですか？", "bichiku.txt", "最低3日分", "hybrid"),
        ("How does the 171 disaster message dial work?", "communication-plan.txt", "171", "hybrid"),
        # Across languages only the meaning matches: the English words find English chunks about
        # other water, so this question is asked in vector mode.
        ("How much water should each person store per day?", "bichiku.txt", "3リットル", "vector"),
    ],
)
def test_answers_cite_the_right_document(demo, question: str, expected_file: str, expected_phrase: str,
                                         mode: str) -> None:
    result = demo.ask(question, "bousai", mode=mode)
    assert result.extractive and result.model == "extractive"
    cited, invalid = parse_citations(result.answer, 100)
    assert cited and not invalid
    assert [s.index for s in result.sources] == cited  # every citation has its source, in order
    assert expected_phrase in result.answer
    assert expected_file in {s.metadata["filename"] for s in result.sources}
    for source in result.sources:
        line = next(ln for ln in result.answer.splitlines() if ln.endswith(f"[{source.index}]"))
        assert source.excerpt.split("\n")[0][:20] in line  # the excerpt is what the answer quotes


def test_answer_says_plainly_when_documents_do_not_know(demo) -> None:
    result = demo.ask("What is the boiling point of liquid nitrogen in Kelvin?", "bousai")
    assert result.sources == []
    assert "not found in your documents" in result.answer
    ja = demo.ask("ペルーの首都はどこですか？", "bousai")
    assert ja.sources == [] and "見つかりませんでした" in ja.answer


def test_search_restricted_to_documents(demo) -> None:
    docs = {d.metadata["filename"]: d.id for d in demo.documents("bousai")}
    only = docs["hinan.md"]
    hits = demo.search("water storage", "bousai", top_k=5, document_ids=[only]).results
    assert len(hits) == 5 and {h.document_id for h in hits} == {only}
    assert all(0 < h.metadata["token_count"] < len(h.content) + 2 for h in hits)  # the model's own tokens
    assert all(h.metadata["chunk_total"] >= h.metadata["chunk_index"] + 1 for h in hits)
    keyword = demo.search("警戒レベル", "bousai", top_k=3, mode="keyword").results
    assert keyword and keyword[0].metadata["filename"] == "hinan.md"


def test_errors_are_typed(engine: Bunko, demo) -> None:
    with pytest.raises(CollectionNotFoundError):
        demo.search("x", "no-such-collection")
    with pytest.raises(RetrievalError):
        demo.search("   ", "bousai")
    with pytest.raises(RetrievalError):
        demo.search("x", "bousai", top_k=101)


class _TinyEmbedder(BaseEmbedder):
    provider, model, dimension = "tiny", "v1", 8

    async def _embed_many(self, texts):
        import numpy as np

        return np.ones((len(texts), self.dimension), dtype=np.float32)


def test_collection_refuses_another_embedder(tmp_path: Path, demo) -> None:
    other = Bunko(f"sqlite:///{tmp_path / 'engine.db'}", embedder=_TinyEmbedder())
    with pytest.raises(EmbedderMismatchError):
        other.tenant("demo").search("水", "bousai")
    report = other.tenant("demo").ingest([EXAMPLES / "bichiku.txt"], "bousai")
    assert [e.type for e in report.errors] == ["EmbedderMismatchError"]
    other.close()


def test_embedder_registry_and_validation(embedder) -> None:
    import asyncio

    with pytest.raises(UnknownProviderError, match="available"):
        get_embedder("nope")
    register_embedder("tiny", lambda model: _TinyEmbedder())
    try:
        assert get_embedder("tiny").dimension == 8
    finally:
        unregister_embedder("tiny")
    assert get_embedder("use").dimension == 512
    with pytest.raises(EmbeddingError):
        asyncio.run(embedder.embed(""))
    with pytest.raises(EmbeddingError):
        asyncio.run(embedder.embed_batch([]))
    with pytest.raises(EmbeddingError):
        asyncio.run(embedder.embed_batch(["ok", "  "]))
    vectors = asyncio.run(embedder.embed_batch(["東京は日本の首都です。", "日本の首都はどこですか", "猫が好きです"]))
    assert len(vectors) == 3 and len(vectors[0]) == 512
    import numpy as np

    v = np.asarray(vectors)
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-3)
    assert v[0] @ v[1] > v[0] @ v[2] + 0.2  # multilingual model actually encodes meaning


def test_add_document_without_a_file(engine: Bunko) -> None:
    scope = engine.tenant("t")
    result = scope.add_document(Document("ローリングストックとは、普段の食品を多めに買って使った分を買い足す方法です。",
                                         {"source": "api:faq-1"}), "faq")
    assert result.status == "created"
    answer = scope.ask("ローリングストックとは何ですか？", "faq")
    assert answer.sources and answer.sources[0].source == "api:faq-1"


def test_passages_skip_headings_and_keep_lists() -> None:
    text = (
        "# 見出し\n\n持ち出し袋には、次の物を入れます。\n\n- 水を3本入れます。\n- 懐中電灯を入れます。\n\n"
        "End. Next one."
    )
    passages = split_passages(text)
    assert passages[0].text == "持ち出し袋には、次の物を入れます。"
    assert passages[0].items == ["水を3本入れます。", "懐中電灯を入れます。"]
    assert all(not re.match("#", p.text) for p in passages)


def test_hybrid_search_fuses_both_legs_in_the_same_scope(demo, engine: Bunko) -> None:
    from bunko.retrieval import fuse_rrf
    from bunko.types import SearchHit

    hits = demo.search("警戒レベル4とは何ですか？", "bousai", top_k=5, mode="hybrid").results
    assert len(hits) == 5 and all(a.score >= b.score for a, b in itertools.pairwise(hits))
    assert hits[0].metadata["filename"] == "hinan.md"
    assert set(hits[0].metadata["legs"]) <= {"vector", "keyword", "title"} and hits[0].metadata["legs"]
    only = next(d.id for d in demo.documents("bousai") if d.metadata["filename"] == "bichiku.txt")
    restricted = demo.search("水", "bousai", top_k=5, mode="hybrid", document_ids=[only]).results
    assert restricted and {h.document_id for h in restricted} == {only}
    other = engine.tenant("other")  # another tenant sees nothing of "demo", whatever the leg
    with pytest.raises(CollectionNotFoundError):
        other.search("水", "bousai", mode="hybrid")

    def hit(cid: str) -> SearchHit:
        return SearchHit(cid, "d", "s", "c", 0.0)

    fused = fuse_rrf([("vector", 0.7, [hit("a"), hit("b")]), ("keyword", 0.3, [hit("b"), hit("c")])], 3)
    assert [h.chunk_id for h in fused] == ["b", "a", "c"]  # b is in both lists
    assert fused[0].metadata["legs"] == {"vector": {"rank": 2, "score": 0.0}, "keyword": {"rank": 1, "score": 0.0}}
    assert fused[0].score == pytest.approx(0.7 / 62 + 0.3 / 61)


def test_chunks_record_their_language_and_the_collection_its_analyzer(engine: Bunko) -> None:
    scope = engine.tenant("lang")
    scope.add_document(Document("付属の説明書を読んでください。非常用の水は3日分を備蓄します。", {"source": "ja.txt"}),
                       "mixed")
    scope.add_document(Document("Keep three days of drinking water for every person in the house.",
                                {"source": "en.txt"}), "mixed")
    assert scope.store.get_collection("mixed").analyzer == DEFAULT_ANALYZER_NAME == "combined_en"
    hits = scope.search("附属の説明書", "mixed", mode="keyword").results  # 附属 and 付属 share a normal form
    assert hits and hits[0].source == "ja.txt" and hits[0].metadata["language"] == "ja"
    hits = scope.search("drinking water", "mixed", mode="keyword").results
    assert [h.source for h in hits] == ["en.txt"] and hits[0].metadata["language"] == "en"
