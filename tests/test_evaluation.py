"""Retrieval evaluation: metrics on hand-computed rankings, BEIR loading errors, end to end and the CLI."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
from click.testing import CliRunner

from bunko import Bunko
from bunko.analysis import DEFAULT_ANALYZER_NAME
from bunko.cli import cli
from bunko.errors import ConfigError
from bunko.evaluation import (
    MODES,
    Dataset,
    contains_gold,
    evaluate,
    load_beir,
    mrr_at_k,
    ndcg_at_k,
    rank_documents,
    recall_at_k,
)
from bunko.types import SearchHit

# -- metrics ---------------------------------------------------------------------------------


def test_ndcg_binary_by_hand() -> None:
    # relevant: a, b. Ranking x, a, y, b: DCG = 1/log2(3) + 1/log2(5); ideal = 1 + 1/log2(3).
    qrels = {"a": 1, "b": 1}
    expected = (1 / math.log2(3) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
    assert ndcg_at_k(["x", "a", "y", "b"], qrels, 10) == pytest.approx(expected)
    assert ndcg_at_k(["x", "a", "y", "b"], qrels, 10) == pytest.approx(0.6509209298)
    assert ndcg_at_k(["a", "b", "x"], qrels, 10) == pytest.approx(1.0)
    assert ndcg_at_k(["x", "y"], qrels, 10) == 0.0
    assert ndcg_at_k([], qrels, 10) == 0.0


def test_ndcg_graded_and_cut_off() -> None:
    # gains a=3, b=1 (c=0 is judged but not relevant). Ranking b, c, a:
    # DCG = 1/1 + 0 + 3/log2(4) = 2.5; ideal = 3/1 + 1/log2(3) = 3.6309297536; nDCG = 0.6885288
    qrels = {"a": 3, "b": 1, "c": 0}
    assert ndcg_at_k(["b", "c", "a"], qrels, 10) == pytest.approx(2.5 / (3 + 1 / math.log2(3)))
    assert ndcg_at_k(["b", "c", "a"], qrels, 10) == pytest.approx(0.6885288, abs=1e-6)
    # @2: a falls off; the ideal@2 still has both gains: 1 / 3.6309297536
    assert ndcg_at_k(["b", "c", "a"], qrels, 2) == pytest.approx(1 / (3 + 1 / math.log2(3)))
    # @1: the ideal only counts the best gain: 1/3
    assert ndcg_at_k(["b", "a"], qrels, 1) == pytest.approx(1 / 3)
    # the ideal comes from the qrels, even for relevant documents that were never retrieved
    assert ndcg_at_k(["a"], {"a": 1, "z": 1}, 10) == pytest.approx(1 / (1 + 1 / math.log2(3)))


def test_recall_by_hand() -> None:
    qrels = {"a": 1, "b": 2, "c": 1, "n": 0}
    ranking = ["x", "a", "n", "y", "z", "b", "q"]
    assert recall_at_k(ranking, qrels, 5) == pytest.approx(1 / 3)
    assert recall_at_k(ranking, qrels, 10) == pytest.approx(2 / 3)
    assert recall_at_k(["a", "b", "c"], qrels, 3) == 1.0
    assert recall_at_k(["a"], {"n": 0}, 10) == 0.0  # no relevant document at all


def test_mrr_by_hand() -> None:
    qrels = {"a": 1, "n": 0}
    assert mrr_at_k(["a", "x"], qrels, 10) == 1.0
    assert mrr_at_k(["x", "n", "a"], qrels, 10) == pytest.approx(1 / 3)  # score 0 is not relevant
    assert mrr_at_k(["x", "y", "a"], qrels, 2) == 0.0
    assert mrr_at_k([], qrels, 10) == 0.0


def test_repeated_ids_count_once() -> None:
    qrels = {"a": 1, "b": 1}
    assert recall_at_k(["a", "a", "a", "b"], qrels, 2) == 1.0
    assert mrr_at_k(["x", "x", "a"], qrels, 2) == 0.5
    assert ndcg_at_k(["a", "a", "b"], qrels, 2) == pytest.approx(1.0)


def test_rank_documents_collapses_chunks() -> None:
    def hit(source: str) -> SearchHit:
        return SearchHit(chunk_id=f"c-{source}", document_id="d", source=source, content="", score=1.0)

    corpus_ids = {"beir:t:1": "1", "beir:t:2": "2", "beir:t:3": "3"}
    hits = [hit("beir:t:2"), hit("beir:t:2"), hit("beir:t:1"), hit("elsewhere"), hit("beir:t:2"), hit("beir:t:3")]
    assert rank_documents(hits, corpus_ids, 10) == ["2", "1", "3"]
    assert rank_documents(hits, corpus_ids, 2) == ["2", "1"]


# -- loading -----------------------------------------------------------------------------------

CORPUS = [
    {"id": "fuji", "title": "富士山",
     "text": "富士山は静岡県と山梨県にまたがる活火山で、標高3776メートルの日本最高峰である。"},
    {"id": "sushi", "title": "寿司",
     "text": "寿司は酢飯に魚介類などの具を組み合わせた日本料理である。江戸時代に握り寿司が広まった。"},
    {"id": "shinkansen", "title": "新幹線",
     "text": "新幹線は日本の高速鉄道である。1964年に東海道新幹線が東京と新大阪の間で開業した。"},
    {"id": "photosynthesis", "title": "Photosynthesis",
     "text": "Photosynthesis is the process by which green plants use sunlight, water and carbon dioxide "
             "to produce glucose and oxygen in their chloroplasts."},
    {"id": "jupiter", "title": "Jupiter",
     "text": "Jupiter is the largest planet in the Solar System, a gas giant with a Great Red Spot storm "
             "and dozens of moons such as Ganymede and Europa."},
    {"id": "volcano", "title": "Volcano",
     "text": " ".join(["A volcano is a rupture in the crust of a planet through which lava, ash and gases "
                       "escape from a magma chamber below the surface."] * 8)},  # several chunks
    {"id": "empty", "title": "", "text": ""},  # left out of the index, as Cranfield's empty abstracts
]
QUERIES = [
    {"id": "q1", "text": "富士山の標高は何メートルですか？", "answers": ["3776メートル"]},
    {"id": "q2", "text": "Which process lets plants make glucose and oxygen from sunlight?",
     "answers": ["Photosynthesis"]},
    {"id": "q3", "text": "東海道新幹線はいつ開業しましたか？", "answers": ["1964年", "1964"]},
    {"id": "q4", "text": "largest planet gas giant Great Red Spot", "answers": ["Jupiter"]},
    {"id": "q5", "text": "a query nobody judged", "answers": ["nothing"]},
]
QRELS = [("q1", "fuji", 1), ("q2", "photosynthesis", 1), ("q3", "shinkansen", 2), ("q3", "sushi", 0),
         ("q4", "jupiter", 1), ("q4", "volcano", 1)]


def write_dataset(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "corpus.jsonl").write_text("".join(json.dumps(d, ensure_ascii=False) + "\n" for d in CORPUS),
                                         encoding="utf-8")
    (folder / "queries.jsonl").write_text("".join(json.dumps(q, ensure_ascii=False) + "\n" for q in QUERIES),
                                          encoding="utf-8")
    (folder / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{s}\n" for q, d, s in QRELS),
                                      encoding="utf-8")
    return folder


@pytest.fixture()
def tiny(tmp_path: Path) -> Path:
    return write_dataset(tmp_path / "tiny-beir")


def test_load_beir(tiny: Path) -> None:
    dataset = load_beir(tiny)
    assert dataset.name == "tiny-beir"
    assert dataset.corpus["fuji"][0] == "富士山" and len(dataset.corpus) == len(CORPUS)
    assert dataset.queries["q2"].startswith("Which process")
    assert dataset.qrels["q3"] == {"shinkansen": 2, "sushi": 0}
    assert "q5" not in dataset.qrels
    assert dataset.answers["q3"] == ["1964年", "1964"]


def test_gold_answers_are_optional_and_checked(tiny: Path) -> None:
    (tiny / "queries.jsonl").write_text('{"id": "q1", "text": "x"}\n{"id": "q2", "text": "y", "answers": [" "]}\n',
                                        encoding="utf-8")
    assert load_beir(tiny).answers == {}  # none, or only blank strings
    (tiny / "queries.jsonl").write_text('{"id": "q1", "text": "x", "answers": "3776"}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match=r"queries\.jsonl, line 1: 'answers' must be a list of strings"):
        load_beir(tiny)


def test_contains_gold_ignores_width_case_and_spaces() -> None:
    assert contains_gold("標高は３７７６ メートルである", ["3776メートル"])
    assert contains_gold("It is JUPITER.", ["jupiter"]) and not contains_gold("Saturn", ["Jupiter", ""])


@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        ("corpus.jsonl", '{"id": "a", "text": "x"}\n{"id": "b", "text": \n', "corpus.jsonl, line 2: not valid JSON"),
        ("corpus.jsonl", '{"id": "a", "text": "x"}\n\n{"text": "y"}\n', "corpus.jsonl, line 3: missing 'id'"),
        ("corpus.jsonl", '{"id": "a", "text": 5}\n', "corpus.jsonl, line 1: 'text' must be a string"),
        ("corpus.jsonl", '{"id": "a", "text": "x"}\n{"id": "a", "text": "y"}\n', "line 2: duplicate id 'a'"),
        ("queries.jsonl", '["q1", "text"]\n', "queries.jsonl, line 1: expected a JSON object"),
        ("qrels.tsv", "query-id\tcorpus-id\tscore\nq1\tfuji\n", "qrels.tsv, line 2: expected 3 tab-separated"),
        ("qrels.tsv", "query-id\tcorpus-id\tscore\nq1\tfuji\tyes\n", "qrels.tsv, line 2: score 'yes' is not"),
    ],
)
def test_load_beir_malformed_lines(tiny: Path, file: str, content: str, message: str) -> None:
    (tiny / file).write_text(content, encoding="utf-8")
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")) as info:
        load_beir(tiny)
    assert str(tiny / file) in info.value.message


def test_load_beir_missing_files(tiny: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a dataset folder"):
        load_beir(tmp_path / "nowhere")
    (tiny / "qrels.tsv").unlink()
    with pytest.raises(ConfigError, match=r"missing qrels\.tsv"):
        load_beir(tiny)
    (tiny / "corpus.jsonl").unlink()
    with pytest.raises(ConfigError, match=r"missing corpus\.jsonl"):
        load_beir(tiny)


def test_load_beir_not_utf8(tiny: Path) -> None:
    (tiny / "queries.jsonl").write_bytes('{"id": "q1", "text": "富士山"}\n'.encode("shift_jis"))
    with pytest.raises(ConfigError, match=r"queries\.jsonl: not UTF-8"):
        load_beir(tiny)


# -- end to end ------------------------------------------------------------------------------


def test_evaluate_end_to_end(engine: Bunko, tiny: Path) -> None:
    scope = engine.tenant("acme")
    dataset = load_beir(tiny)
    events: list[tuple[str, int, int]] = []
    report = asyncio.run(evaluate(scope, dataset, MODES, 10, lambda *e: events.append(e)))

    assert report["dataset"] == "tiny-beir" and report["queries"] == 4 and report["skipped_queries"] == 1
    assert report["documents"] == 6 and report["skipped_documents"] == 1 and report["chunks"] > 6
    assert set(report["results"]) == set(MODES)
    for values in report["results"].values():
        assert values["queries"] == 4
        for key in ("ndcg@10", "recall@5", "recall@10", "mrr@10"):
            assert 0.0 <= values[key] <= 1.0
        assert values["latency_ms_p50"] > 0
    assert ("ingest", 7, 7) in events and ("vector", 4, 4) in events and ("keyword", 4, 4) in events
    assert scope.collections() == []  # the temporary collection is gone


@pytest.mark.parametrize("mode", MODES)
def test_answerable_query_ranks_its_document_first(engine: Bunko, tiny: Path, mode: str) -> None:
    full = load_beir(tiny)
    for query_id in ("q1", "q2"):
        one = Dataset(full.name, full.corpus, {query_id: full.queries[query_id]}, full.qrels)
        report = asyncio.run(evaluate(engine.tenant("acme"), one, [mode], 10))
        assert report["results"][mode]["mrr@10"] == 1.0, (query_id, mode)
        assert report["results"][mode]["ndcg@10"] == 1.0


def test_evaluate_deletes_the_collection_on_error(engine: Bunko, tiny: Path) -> None:
    scope = engine.tenant("acme")

    def fail_on_query(phase: str, done: int, total: int) -> None:
        if phase != "ingest" and done == 2:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        asyncio.run(evaluate(scope, load_beir(tiny), ["vector"], 10, fail_on_query))
    assert scope.collections() == []


def test_evaluate_scores_the_extractive_answers(engine: Bunko, tiny: Path) -> None:
    scope = engine.tenant("acme")
    events: list[tuple[str, int, int]] = []
    report = asyncio.run(evaluate(scope, load_beir(tiny), ["hybrid"], 10, lambda *e: events.append(e), answers=True))
    scored = report["answers"]["extractive"]
    assert set(scored) == {"contains_gold", "cited_contains_gold", "empty", "not_found", "mean_chars",
                           "latency_ms_p50", "questions"}
    assert scored["questions"] == 4 and scored["empty"] == 0  # q5 has no judgment: not asked
    # Each question's document holds its answer and is found first: the cited chunks contain it.
    assert scored["cited_contains_gold"] == 1.0 and scored["contains_gold"] >= 0.75
    assert 0 < scored["mean_chars"] < 400
    assert ("answers:extractive", 4, 4) in events
    assert scope.collections() == []


def test_evaluate_answers_needs_gold_answers(engine: Bunko, tiny: Path) -> None:
    dataset = load_beir(tiny)
    dataset.answers = {}
    with pytest.raises(ConfigError, match="no gold answers"):
        asyncio.run(evaluate(engine.tenant("acme"), dataset, ["keyword"], 10, answers=True))


def test_evaluate_rejects_bad_arguments(engine: Bunko, tiny: Path) -> None:
    scope = engine.tenant("acme")
    with pytest.raises(ConfigError, match="unknown evaluation mode"):
        asyncio.run(evaluate(scope, load_beir(tiny), ["fuzzy"], 10))
    with pytest.raises(ConfigError, match="top_k"):
        asyncio.run(evaluate(scope, load_beir(tiny), ["vector"], 5))


# -- CLI ---------------------------------------------------------------------------------------


def test_cli_eval_json_shape(tiny: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["eval", str(tiny), "--mode", "all", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert set(data) == {"dataset", "analyzer", "queries", "results"}
    assert data["dataset"] == "tiny-beir" and data["queries"] == 4 and data["analyzer"] == DEFAULT_ANALYZER_NAME
    assert list(data["results"]) == list(MODES)
    for values in data["results"].values():
        assert {"ndcg@10", "recall@5", "recall@10", "mrr@10", "latency_ms_p50"} <= set(values)
        assert all(0.0 <= values[k] <= 1.0 for k in ("ndcg@10", "recall@5", "recall@10", "mrr@10"))
    assert not (tmp_path / "home").exists()  # a temporary store, not the one under BUNKO_HOME


def test_cli_eval_answers_with_an_llm(tiny: Path) -> None:
    from .provider_fakes import OpenAIFake

    with OpenAIFake(reply_text="富士山の標高は3776メートルです[1]。") as fake:
        result = CliRunner().invoke(cli, ["eval", str(tiny), "--mode", "hybrid", "--answers", "--json", "--llm",
                                          "openai-compatible:test-model", "--base-url", fake.url + "/v1"],
                                    catch_exceptions=False)
    assert result.exit_code == 0, result.output
    answers = json.loads(result.stdout)["answers"]
    assert list(answers) == ["extractive", "openai-compatible:test-model"]
    llm = answers["openai-compatible:test-model"]
    assert llm["questions"] == 4 and llm["contains_gold"] == 0.25 and llm["empty"] == 0  # only q1's gold
    assert llm["mean_chars"] == len("富士山の標高は3776メートルです[1]。")
    assert answers["extractive"]["cited_contains_gold"] == 1.0


def test_cli_eval_explicit_db_and_limit(tiny: Path, tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'mine.db'}"
    runner = CliRunner()
    result = runner.invoke(cli, ["--db", db, "eval", str(tiny), "--mode", "keyword", "--limit-queries", "2",
                                 "--analyzer", "whitespace", "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["queries"] == 2 and list(data["results"]) == ["keyword"] and data["analyzer"] == "whitespace"
    assert (tmp_path / "mine.db").exists()
    collections = json.loads(runner.invoke(cli, ["--db", db, "collections", "--json"]).stdout)
    assert collections == {"collections": []}


def test_cli_eval_table_and_errors(tiny: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["eval", str(tiny), "--mode", "vector"], catch_exceptions=False)
    assert result.exit_code == 0
    assert "vector" in result.stdout and "ndcg@10" in result.stdout and "keyword" not in result.stdout
    assert "1 queries without relevance judgments skipped" in result.stderr

    result = CliRunner().invoke(cli, ["eval", str(tmp_path / "nowhere"), "--json"], catch_exceptions=False)
    assert result.exit_code == 1
    assert json.loads(result.stdout)["error"]["type"] == "ConfigError"
