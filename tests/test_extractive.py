"""The extractive answer (no LLM): passages, never-empty answers, lists, not-found sentences, README examples."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import numpy as np
import pytest

from bunko import Bunko, Generator
from bunko.embedders import UniversalSentenceEncoderEmbedder
from bunko.extractive import MESSAGES, answer_body, is_not_found, split_passages
from bunko.generation import parse_citations
from bunko.types import GenerationResult, SearchHit

from .conftest import EXAMPLES, SHARED_DOCUMENTS

ROOT = Path(__file__).resolve().parents[1]

# The opening of 『春と修羅』序 as a PDF loader gives it: one verse line per paragraph, no punctuation.
VERSE = "\n\n".join([
    "序", "わたくしといふ現象は", "假定された有機交流電燈の", "ひとつの青い照明です", "(あらゆる透明な幽霊の複合体)",
    "風景やみんなといっしょに", "せはしくせはしく明滅しながら", "いかにもたしかにともりつづける", "因果交流電燈の",
    "ひとつの青い照明です",
])
SLIDES = ("2\n研究の背景\n• 固有表現抽出:\n- 文脈、あるいは字句的な知識をもちい\nて、文章中に現れる固有表現をタグ付け\n"
          "する。\n- コーパスや辞書からあらかじめ学習(発\n見)しておく方法が主流。\n\n3\nまとめ")


def hit(content: str, number: int = 1, **metadata: object) -> SearchHit:
    return SearchHit(f"c{number}", f"d{number}", f"doc{number}.txt", content, 1.0 / number, 0, dict(metadata))


def answer(generator: Generator, question: str, hits: list[SearchHit], **options: object) -> GenerationResult:
    return asyncio.run(generator.generate(question, hits, **options))  # type: ignore[arg-type]


@pytest.fixture()
def extractive(embedder: UniversalSentenceEncoderEmbedder) -> Generator:
    return Generator(None, embedder=embedder)


# -- passages --------------------------------------------------------------------------------------


def test_verse_without_punctuation_is_grouped_into_quotable_passages() -> None:
    passages = split_passages(VERSE)
    assert passages, "text without sentence punctuation must still give passages"
    assert all(len(p.text) <= 100 for p in passages)
    assert passages[0].text.startswith("わたくしといふ現象は / 假定された有機交流電燈の")  # "序" alone: too short
    assert "".join(p.text.replace(" / ", "") for p in passages) == VERSE.replace("\n", "").removeprefix("序")


def test_wrapped_lines_are_joined_into_whole_sentences() -> None:
    pdf = ("内閣は、道路交通法の一部を改正する法律の一部の施行に伴い、並び\nに道路交通法第四条第一項の規定に基づき、"
           "この政令を制定する。\n\nDynamic languages such as JavaScript are more difficult to\ncompile than "
           "statically typed ones. Since no concrete type information\nis available, traditional compilers must "
           "generate generic code.")
    texts = [p.text for p in split_passages(pdf)]
    assert texts[0] == ("内閣は、道路交通法の一部を改正する法律の一部の施行に伴い、並びに道路交通法第四条第一項の規定に"
                        "基づき、この政令を制定する。")
    assert texts[1] == "Dynamic languages such as JavaScript are more difficult to compile than statically typed ones."
    assert texts[2].startswith("Since no concrete type information is available")


def test_slides_keep_wrapped_items_and_nested_lists() -> None:
    passages = split_passages(SLIDES)
    lead = next(p for p in passages if p.text == "固有表現抽出:")
    assert lead.items == ["文脈、あるいは字句的な知識をもちいて、文章中に現れる固有表現をタグ付けする。",
                          "コーパスや辞書からあらかじめ学習(発見)しておく方法が主流。"]
    assert all(p.text not in ("2", "3") for p in passages)  # page numbers are not quotable


def test_a_list_lead_in_carries_its_items_and_a_table_row_its_header() -> None:
    text = ("Pack the following items:\n\n- Water, three bottles per person.\n- A flashlight and spare batteries.\n\n"
            "| item | amount |\n|---|---|\n| water | 3 litres a day |\n| toilet bags | 5 a day |")
    passages = split_passages(text)
    assert passages[0].text == "Pack the following items:"
    assert passages[0].items == ["Water, three bottles per person.", "A flashlight and spare batteries."]
    assert passages[0].render() == ("Pack the following items:\n    - Water, three bottles per person.\n"
                                    "    - A flashlight and spare batteries.")
    assert [p.text for p in passages[-2:]] == ["item: water; amount: 3 litres a day",
                                               "item: toilet bags; amount: 5 a day"]


# A chunk of a spreadsheet as bunko.loaders.tables writes it: the sheet's name, the header row, the rows.
SHEET_CHUNK = ("## 価格表\n| 品番 | 品名 | 単価 | 数量 | 備考 |\n| --- | --- | --- | --- | --- |\n"
               "| B-112 | ファイル A4 | 95 | 22 | 取り寄せ |\n| B-113 | クリアファイル | 30 | 9 | A\\|B 兼用 |\n"
               "| B-114 | 封筒 長3 | 420 | 16 |  |")
# A row too wide to go with its header: "name: value" lines.
LONG_ROW = ("品番: B-120\n品名: 電卓\n単価: 1980\n数量: 18\n備考: 在庫限りの特価品です。"
            + "お取り寄せには二週間ほどかかり、色や仕様はメーカーの都合で予告なく変わることがあります。" * 4
            + "\n型番: CALC-2024X 12桁 ソーラー電源\n仕入先: 株式会社文具センター 東京営業所"
            "\n保管場所: 本社3階 倉庫B-12 棚番号4-2"
            "\n注意事項: 電池は付属しません、交換用の電池は別売りです、詳しくは取扱説明書をご覧ください"
            "\n保証期間: 購入日から3年間")


def test_a_sheet_row_is_a_passage_of_name_value_pairs() -> None:
    passages = split_passages(SHEET_CHUNK)
    assert [p.text for p in passages] == ["品番: B-112; 品名: ファイル A4; 単価: 95; 数量: 22; 備考: 取り寄せ",
                                          "品番: B-113; 品名: クリアファイル; 単価: 30; 数量: 9; 備考: A|B 兼用",
                                          "品番: B-114; 品名: 封筒 長3; 単価: 420; 数量: 16"]
    assert all(p.row for p in passages)
    [record] = split_passages(LONG_ROW)  # one row, never cut into pieces; the long value shortened
    assert record.row
    assert record.text.startswith("品番: B-120; 品名: 電卓; 単価: 1980; 数量: 18; 備考: 在庫限りの特価品です。")
    assert "…; 型番: CALC-2024X 12桁 ソーラー電源; 仕入先: 株式会社文具センター 東京営業所; " in record.text
    assert record.text.endswith("; 保証期間: 購入日から3年間")
    assert len(record.text) > 240  # longer than a sentence may be before it is cut in pieces
    # two "name: value" lines are no record: they are read as text, as before
    texts = [p.text for p in split_passages("Note: the office is closed on Sunday.\nTel: 03-1234-5678")]
    assert texts == ["Note: the office is closed on Sunday.", "Tel: 03-1234-5678"]


def test_a_table_row_is_quoted_with_its_headers(extractive: Generator) -> None:
    hits = [hit(SHEET_CHUNK), hit(VERSE, 2)]
    result = answer(extractive, "クリアファイルの単価はいくらですか？", hits)
    body = answer_body(result.answer)
    assert body.startswith("- 品番: B-113; 品名: クリアファイル; 単価: 30; 数量: 9; 備考: A|B 兼用 [1]"), result.answer
    result = answer(extractive, "電卓の保証期間は何年ですか？", [hit(LONG_ROW), hit(SHEET_CHUNK, 2)])
    first = answer_body(result.answer).splitlines()[0]
    # a long row is quoted from its first pair (which row it is) to the pairs that answer
    assert first.startswith("- 品番: B-120; …") and first.endswith("保証期間: 購入日から3年間 [1]"), result.answer
    assert len(first) < 220


def test_the_row_of_a_part_number_is_quoted_first(extractive: Generator) -> None:
    """Rows of codes and amounts are mostly digits: their words still count against the question's."""
    kinds = ["文具", "家具", "食品", "工具", "書籍"]
    rows = [(i, f"2023-08-{i - 4307:02d}", kinds[i % 5], 100 + i % 900, 1 + i % 17) for i in range(4318, 4324)]
    chunk = ("## シート3\n| 品番 | 登録日 | 品名 | 分類 | 単価 | 数量 | 金額 |\n"
             "| --- | --- | --- | --- | --- | --- | --- |\n"
             + "\n".join(f"| P-{i:07d} | {day} | 品目{i} | {kind} | {price} | {n} | {price * n} |"
                         for i, day, kind, price, n in rows))
    result = answer(extractive, "品番 P-0004321 の金額はいくらですか？", [hit(chunk)])
    assert answer_body(result.answer).startswith(
        "- 品番: P-0004321; 登録日: 2023-08-14; 品名: 品目4321; 分類: 家具; 単価: 821; 数量: 4; 金額: 3284 [1]"), \
        result.answer


def test_acronyms_end_sentences_and_initials_do_not() -> None:
    text = "Bring copies of your ID. Keep them dry. J. Smith of the U.S. Army agreed."
    texts = [p.text for p in split_passages(text)]
    assert texts == ["Bring copies of your ID.", "Keep them dry.", "J. Smith of the U.S. Army agreed."]


# -- answers ---------------------------------------------------------------------------------------


def test_an_answer_from_verse_is_never_empty(extractive: Generator) -> None:
    for question in ("わたくしといふ現象は何ですか？", "因果交流電燈とは？", "青い照明"):
        result = answer(extractive, question, [hit(VERSE)])
        body = answer_body(result.answer)
        assert body and result.sources and re.search(r"\[1\]", body), (question, result.answer)
        assert "照明" in body or "電燈" in body


def test_an_answer_is_a_cited_quote_or_the_not_found_sentence(extractive: Generator) -> None:
    hits = [hit(VERSE), hit(SLIDES, 2)]
    for question in ("固有表現抽出とは何ですか？", "わたくしといふ現象は", "What is named entity extraction?",
                     "ペルーの首都はどこですか？", "x"):
        result = answer(extractive, question, hits)
        body = answer_body(result.answer)
        assert body, question
        cited, invalid = parse_citations(body, len(hits))
        assert (cited and result.sources and not invalid) or (is_not_found(body) and not result.sources), question


def test_the_list_lead_in_is_quoted_with_its_items(extractive: Generator) -> None:
    text = ("非常用持ち出し袋は玄関の近くに置きます。\n\n非常用持ち出し袋には、次のような物を入れておきます。\n\n"
            "- 飲料水を1人3本入れます。\n- 懐中電灯と予備の電池を入れます。\n- 携帯ラジオを入れます。")
    result = answer(extractive, "非常用持ち出し袋には何を入れますか？", [hit(text)])
    assert ("次のような物を入れておきます。 [1]\n    - 飲料水を1人3本入れます。\n"
            "    - 懐中電灯と予備の電池を入れます。") in result.answer
    assert "携帯ラジオ" in result.answer


def test_a_list_that_starts_in_the_next_chunk_is_read_from_it(extractive: Generator) -> None:
    first = "非常用持ち出し袋は玄関の近くに置きます。\n\n非常用持ち出し袋には、次のような物を入れておきます。"
    rest = "\n\n- 飲料水を1人3本入れます。\n- 懐中電灯と予備の電池を入れます。\n\n## 家族の連絡"
    asked: list[str] = []

    async def following(h: SearchHit) -> str | None:
        asked.append(h.chunk_id)
        return rest

    result = answer(extractive, "非常用持ち出し袋には何を入れますか？", [hit(first)], following=following)
    assert asked == ["c1"] and "- 飲料水を1人3本入れます。" in result.answer and "懐中電灯" in result.answer


@pytest.mark.parametrize(("question", "language"), [
    ("ペルーの首都はどこですか？", "ja"), ("What is the capital of Peru?", "en"),
])
def test_not_found_is_said_in_the_questions_language(extractive: Generator, question: str, language: str) -> None:
    for hits in ([], [hit(VERSE)]):
        result = answer(extractive, question, hits)
        assert result.answer == MESSAGES[language]["none"] and result.sources == [], (question, result.answer)
        assert is_not_found(answer_body(result.answer))


def test_the_question_is_not_embedded_again(embedder: UniversalSentenceEncoderEmbedder) -> None:
    seen: list[str] = []

    class Counting(UniversalSentenceEncoderEmbedder):
        async def embed_array(self, texts: list[str]) -> np.ndarray:  # type: ignore[override]
            seen.extend(texts)
            return await embedder.embed_array(texts)

    generator = Generator(None, embedder=Counting())
    question = "わたくしといふ現象は何ですか？"
    vector = asyncio.run(embedder.embed_array([question]))[0]
    result = answer(generator, question, [hit(VERSE)], query_vector=vector)
    assert result.sources and question not in seen and result.usage["embedded_texts"] == len(seen)
    seen.clear()
    answer(generator, question, [hit(VERSE)])  # no vector from a search: embedded once, here
    assert seen.count(question) == 1


# -- the README's own examples ---------------------------------------------------------------------


@pytest.fixture()
def demo(engine: Bunko):
    scope = engine.tenant("acme")
    assert scope.ingest([EXAMPLES], "bousai").errors == []
    return scope


def test_the_make_demo_question_is_answered_with_the_days(demo) -> None:
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    question = re.search(r"^DEMO_QUESTION \?= (.+)$", makefile, re.MULTILINE).group(1)  # type: ignore[union-attr]
    for asked in (question, "水は何日分？"):  # the Makefile's, and the short form of the issue
        result = demo.ask(asked, "bousai")
        assert "最低3日分" in result.answer and "1週間分" in result.answer, result.answer
        assert "bichiku.txt" in {s.metadata["filename"] for s in result.sources}


def test_the_go_bag_question_lists_what_to_pack(demo) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    question = "What should I pack in a go-bag?"
    assert f'DEMO_QUESTION="{question}"' in readme
    result = demo.ask(question, "bousai")
    text = result.answer.lower()
    assert all(word in text for word in ("water", "food", "radio", "first aid")), result.answer


def test_the_readme_python_snippet_answers_what_goes_in_the_bag(demo) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    question = re.search(r'acme\.ask\("([^"]+)", collection="bousai"\)', readme).group(1)  # type: ignore[union-attr]
    result = demo.ask(question, collection="bousai")
    assert all(item in result.answer for item in ("飲料水", "食料", "懐中電灯", "携帯ラジオ")), result.answer
    assert result.sources[0].metadata["filename"] == "jishin-sonae.md"


@pytest.mark.shared_data
def test_a_question_about_a_vertical_poem_gets_a_quote(engine: Bunko) -> None:
    scope = engine.tenant("acme")
    assert scope.ingest([SHARED_DOCUMENTS / "jo.pdf"], "poems").errors == []
    result = scope.ask("わたくしといふ現象は何ですか？", "poems")
    assert result.sources and "照明" in result.answer, result.answer
