"""The keyword analyzer and the language guess."""

from __future__ import annotations

import pytest

from bunko.analysis import DEFAULT_ANALYZER, detect_language


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("水の備蓄は1人1日3リットルが目安です。", "ja"),
        ("カタカナだけのテキスト", "ja"),
        ("这是一个中文句子，没有假名。", "zh"),
        ("한국어 문장입니다", "ko"),
        ("What should I pack in a go-bag for an earthquake?", "en"),
        ("Die Topologie ist ein Teilgebiet der Mathematik und nicht einfach.", "de"),
        ("Le chat est sur la table et il dort dans la maison.", "fr"),
        ("12345 !!!", "und"),
    ],
)
def test_detect_language(text: str, language: str) -> None:
    assert detect_language(text) == language


def test_terms_are_words_and_cjk_bigrams() -> None:
    assert DEFAULT_ANALYZER.terms("水の備蓄 EARTHQUAKE Ｋｉｔ") == ["水の", "の備", "備蓄", "earthquake", "kit"]
    assert DEFAULT_ANALYZER.terms("水") == ["水"]


def test_index_text_spaces_out_cjk_and_queries_are_quoted_phrases() -> None:
    assert DEFAULT_ANALYZER.index_text("水の備蓄abc").split() == ["水", "の", "備", "蓄", "abc"]
    query = DEFAULT_ANALYZER.match_query('備蓄 "drop" OR')
    assert query == '"備 蓄" OR "drop" OR "or"'  # user quotes and operators are plain terms
    assert DEFAULT_ANALYZER.match_query("。、！") is None
