"""Generation with an LLM (R23–R25, R27): the real OpenAI-compatible client against a local fake server.

The store and the bundled embedder are real; only the network boundary is faked.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from bunko import Bunko, Generator, RAGPipelineError
from bunko.embedders import UniversalSentenceEncoderEmbedder
from bunko.errors import LLMRateLimitError, LLMTimeoutError
from bunko.generation import DEFAULT_SYSTEM_PROMPT, build_context, merge_duplicates
from bunko.llm import get_llm
from bunko.splitters import estimate_tokens
from bunko.types import SearchHit

from .conftest import EXAMPLES
from .provider_fakes import OpenAIFake, Reply


def hit(cid: str, content: str, score: float, doc: str = "d1", start: int | None = None,
        filename: str = "a.txt", **meta: object) -> SearchHit:
    metadata: dict[str, object] = {"filename": filename, **meta}
    if start is not None:
        metadata.update(start=start, end=start + len(content))
    return SearchHit(cid, doc, f"/docs/{filename}", content, score, metadata=metadata)


@pytest.fixture()
def fake() -> Iterator[OpenAIFake]:
    with OpenAIFake(reply_text="水は1人1日3リットルです[2]。最低3日分を備えます[1][2]。[7]") as server:
        yield server


def llm_for(server: OpenAIFake, **options: object):
    return get_llm("openai-compatible:test-model", base_url=server.url + "/v1", **options)


# -- context building (R24) ---------------------------------------------------------------------
def test_overlapping_chunks_of_one_document_are_stitched() -> None:
    text = "第一段落です。避難場所は小学校です。第二段落です。水は3日分備えます。"
    a = hit("c1", text[0:25], 0.9, start=0)
    b = hit("c2", text[18:], 0.8, start=18)  # overlaps a by 7 characters
    other_doc = hit("c3", text[18:], 0.7, doc="d2", start=18)  # same text, other document: near-identical
    merged, count = merge_duplicates([a, b, other_doc])
    assert count == 2 and len(merged) == 1
    assert merged[0].content == text and merged[0].chunk_id == "c1" and merged[0].score == 0.9
    assert merged[0].metadata["merged_chunk_ids"] == ["c2", "c3"]
    assert (merged[0].metadata["start"], merged[0].metadata["end"]) == (0, len(text))


def test_chunks_that_only_look_alike_stay_apart() -> None:
    a = hit("c1", "非常用持ち出し袋には水と食料を入れます。", 0.9, start=0)
    b = hit("c2", "非常用持ち出し袋には懐中電灯とラジオを入れます。", 0.8, start=100)
    merged, count = merge_duplicates([a, b])
    assert count == 0 and [h.chunk_id for h in merged] == ["c1", "c2"]


def test_context_is_filled_by_relevance_within_the_budget() -> None:
    long = hit("big", "長い段落。" * 200, 0.95, doc="d1")  # about 1000 tokens
    small = [hit(f"s{i}", f"短い文{i}。避難所{i}番に集まります。", 0.9 - i / 100, doc=f"d{i + 2}") for i in range(5)]
    plan = build_context([long, *small], max_tokens=200, count_tokens=estimate_tokens)
    assert [h.chunk_id for h in plan.hits] == [f"s{i}" for i in range(5)]  # the long one is skipped
    assert plan.dropped == 1 and plan.tokens <= 200
    tight = build_context([long, *small], max_tokens=60, count_tokens=estimate_tokens)
    assert tight.tokens <= 60 and tight.hits and tight.hits[0].chunk_id == "s0"
    alone = build_context([long], max_tokens=100, count_tokens=estimate_tokens)
    assert alone.truncated and alone.hits[0].content.startswith("長い段落。") and alone.tokens <= 100


def test_the_budget_counts_with_the_embedders_tokenizer(embedder: UniversalSentenceEncoderEmbedder) -> None:
    generator = Generator(embedder=embedder)
    assert generator.count_tokens == embedder.count_tokens
    text = "避難場所は小学校の体育館です。"
    assert generator.count_tokens(text) == embedder.count_tokens(text) != estimate_tokens(text)


# -- the LLM path ---------------------------------------------------------------------------------
def test_answer_sources_and_usage_from_the_model(fake: OpenAIFake) -> None:
    hits = [hit("c1", "最低3日分、できれば1週間分を備えます。", 0.8, doc="d1", filename="bichiku.txt", page_number=2),
            hit("c2", "飲料水は1人1日3リットルが目安です。", 0.7, doc="d2", filename="mizu.md", section="水")]
    generator = Generator(llm_for(fake), temperature=0.3, max_tokens=321)
    result = asyncio.run(generator.generate("水は何日分？", hits))
    assert result.answer == fake.reply_text and result.model == "test-model"
    assert [s.index for s in result.sources] == [2, 1]  # order of first citation; [7] is not invented
    assert [s.chunk_id for s in result.sources] == ["c2", "c1"]
    assert result.usage["invalid_citations"] == 1 and result.usage["context_chunks"] == 2
    assert result.usage["input_tokens"] > 0 and result.usage["output_tokens"] > 0
    assert result.processing_time_ms > 0
    body = fake.requests_to("/chat/completions")[-1].json
    assert (body["temperature"], body["max_tokens"]) == (0.3, 321)
    system, user = body["messages"]
    assert system == {"role": "system", "content": DEFAULT_SYSTEM_PROMPT}
    assert "[N]" not in system["content"] and "[1]" in system["content"] and "コンテキストのみ" in system["content"]
    assert "[1] (bichiku.txt, p. 2)\n最低3日分" in user["content"]
    assert "[2] (mizu.md, 水)\n飲料水" in user["content"] and user["content"].endswith("水は何日分？\n\n## Answer")


def test_a_custom_system_prompt_replaces_the_default(fake: OpenAIFake) -> None:
    generator = Generator(llm_for(fake), system_prompt="Answer like a pirate, citing [N].")
    asyncio.run(generator.generate("q?", [hit("c1", "text", 0.5)]))
    assert fake.requests_to("/chat/completions")[-1].json["messages"][0]["content"] == \
        "Answer like a pirate, citing [N]."


def test_streamed_answer_yields_tokens_then_citations_as_they_complete() -> None:
    pieces = ["水は", "1日3リットル", "です[", "2]。最低", "3日分[1", "]。"]
    with OpenAIFake(stream_pieces=pieces) as server:
        hits = [hit("c1", "最低3日分を備えます。", 0.8, doc="d1"), hit("c2", "1日3リットル。", 0.7, doc="d2")]

        async def collect():
            return [e async for e in Generator(llm_for(server)).stream("水は？", hits)]

        events = asyncio.run(collect())
    kinds = [e.type for e in events]
    assert kinds == ["token", "token", "token", "token", "citation", "token", "token", "citation", "result"]
    assert "".join(e.content for e in events if e.type == "token") == "".join(pieces)
    assert [e.source.index for e in events if e.type == "citation"] == [2, 1]
    result = events[-1].result
    assert result.answer == "".join(pieces) and [s.index for s in result.sources] == [2, 1]


# -- through the engine: store, retrieval, conversations, usage ------------------------------------
@pytest.fixture()
def llm_engine(tmp_path, embedder, fake: OpenAIFake) -> Iterator[Bunko]:
    engine = Bunko(f"sqlite:///{tmp_path / 'llm.db'}", embedder=embedder, llm="openai-compatible:test-model",
                   llm_base_url=fake.url + "/v1", llm_max_retries=0, llm_timeout=2)
    engine.tenant("acme").ingest([EXAMPLES], "bousai")
    yield engine
    engine.close()


def test_engine_streams_the_r27_events(llm_engine: Bunko, fake: OpenAIFake) -> None:
    async def collect():
        return [e.to_dict() async for e in llm_engine.tenant("acme").astream_ask("水は何日分？", "bousai")]

    events = asyncio.run(collect())
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["search_start", "search_results", "generation_start"] and kinds[-1] == "done"
    assert events[1]["count"] == 5 and "token" in kinds
    assert kinds.index("citation") > kinds.index("token")
    done = events[-1]["response"]
    assert done["answer"] == "".join(e["content"] for e in events if e["type"] == "token") == fake.reply_text
    assert [e["source"] for e in events if e["type"] == "citation"] == done["sources"]
    assert done["usage"]["invalid_citations"] == 1 and done["model"] == "test-model"


def test_conversation_history_goes_to_the_llm_and_stays_in_its_tenant(llm_engine: Bunko, fake: OpenAIFake) -> None:
    acme, other = llm_engine.tenant("acme"), llm_engine.tenant("other")
    acme.ask("水は何日分備蓄すればいいですか？", "bousai", conversation_id="chat-1")
    second = acme.ask("一人あたりは？", "bousai", conversation_id="chat-1")
    messages = fake.requests_to("/chat/completions")[-1].json["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[1]["content"] == "水は何日分備蓄すればいいですか？" and messages[2]["content"] == fake.reply_text
    assert second.usage["history_turns"] == 2
    assert [t.role for t in acme.conversation("chat-1")] == ["user", "assistant"] * 2
    # Tenant "other" uses the same conversation id: it sees nothing of acme's, and its LLM call has no history.
    assert other.conversation("chat-1") == []
    other.ingest([EXAMPLES / "bichiku.txt"], "bousai")
    other.ask("一人あたりは？", "bousai", conversation_id="chat-1")
    messages = fake.requests_to("/chat/completions")[-1].json["messages"]
    assert [m["role"] for m in messages] == ["system", "user"]
    assert len(acme.conversation("chat-1")) == 4 and len(other.conversation("chat-1")) == 2


def test_history_is_bounded(tmp_path, embedder, fake: OpenAIFake) -> None:
    with Bunko(f"sqlite:///{tmp_path / 'h.db'}", embedder=embedder, llm="openai-compatible:m",
               llm_base_url=fake.url + "/v1", history_turns=2) as engine:
        scope = engine.tenant("acme")
        scope.ingest([EXAMPLES / "bichiku.txt"], "c")
        for question in ("一つ目？", "二つ目？", "三つ目？"):
            scope.ask(question, "c", conversation_id="chat")
        messages = fake.requests_to("/chat/completions")[-1].json["messages"]
        assert [m["content"] for m in messages[1:-1]] == ["二つ目？", fake.reply_text]


def test_provider_errors_surface_as_typed_pipeline_errors(llm_engine: Bunko, fake: OpenAIFake) -> None:
    scope = llm_engine.tenant("acme")
    fake.fail(Reply(429, json={"error": {"message": "Rate limit reached"}}, headers={"Retry-After": "0"}))
    with pytest.raises(RAGPipelineError) as caught:
        scope.ask("水は？", "bousai")
    assert isinstance(caught.value.__cause__, LLMRateLimitError)
    assert "429" in caught.value.message and "Rate limit reached" in caught.value.message
    fake.fail(Reply(delay=3.0, json={}))
    with pytest.raises(RAGPipelineError) as caught:
        scope.ask("水は？", "bousai")
    assert isinstance(caught.value.__cause__, LLMTimeoutError)


def test_the_extractive_answer_streams_too(engine: Bunko) -> None:
    scope = engine.tenant("demo")
    scope.ingest([EXAMPLES], "bousai")

    async def collect():
        return [e.to_dict() async for e in scope.astream_ask("水は何日分備蓄すればいいですか？", "bousai")]

    events = asyncio.run(collect())
    done = events[-1]["response"]
    assert done["extractive"] and done["model"] == "extractive"
    assert "".join(e["content"] for e in events if e["type"] == "token") == done["answer"]
    assert [e["source"] for e in events if e["type"] == "citation"] == done["sources"] != []
