"""The keyword analyzers, how the stores render them, and the language guess."""

from __future__ import annotations

import sqlite3

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bunko.analysis import (
    DEFAULT_ANALYZER,
    DEFAULT_ANALYZER_NAME,
    analyzer_names,
    detect_language,
    fts5_document,
    fts5_query,
    get_analyzer,
    tsquery_literal,
    tsvector_literal,
)
from bunko.errors import ConfigError

ANALYZERS = ["bigram", "combined", "sudachi", "whitespace"]


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


def test_registry_names_the_built_ins_and_refuses_unknown_names() -> None:
    assert set(ANALYZERS) <= set(analyzer_names())
    assert get_analyzer(None).name == DEFAULT_ANALYZER_NAME == "combined_en"  # the ja extra is part of dev
    assert get_analyzer("bigram") is get_analyzer("bigram")
    with pytest.raises(ConfigError, match=r"unknown analyzer 'kuromoji'.*bigram"):
        get_analyzer("kuromoji")


def test_bigram_indexes_characters_and_queries_bigram_phrases() -> None:
    bigram = get_analyzer("bigram")
    assert bigram.index_tokens("水の備蓄 EARTHQUAKE Ｋｉｔ") == ["水", "の", "備", "蓄", "earthquake", "kit"]
    assert bigram.query_phrases("水の備蓄 kit 備蓄") == [("水", "の"), ("の", "備"), ("備", "蓄"), ("kit",)]
    assert bigram.query_phrases("水") == [("水",)]
    assert DEFAULT_ANALYZER.terms("水の備蓄 EARTHQUAKE") == ["水の", "の備", "備蓄", "earthquake"]


def test_whitespace_keeps_runs_whole() -> None:
    ws = get_analyzer("whitespace")
    assert ws.index_tokens("水の備蓄は大切。Drop, cover!") == ["水の備蓄は大切", "drop", "cover"]
    assert ws.query_phrases("drop drop") == [("drop",)]


def test_sudachi_gives_normal_forms_without_particles() -> None:
    sudachi = get_analyzer("sudachi")
    assert sudachi.index_tokens("附属の資料を読んだ") == ["付属", "資料", "読む"]
    assert sudachi.index_tokens("Python3で書く") == ["python3", "書く"]  # words as every analyzer cuts them
    assert sudachi.query_phrases("資料と資料") == [("資料",)]


def test_combined_adds_whole_morphemes_after_the_characters() -> None:
    combined = get_analyzer("combined")
    assert combined.index_tokens("地震対策の基本") == ["地", "震", "対", "策", "の", "基", "本", "地震", "対策", "基本"]
    phrases = combined.query_phrases("地震対策")
    assert phrases == [("地", "震"), ("震", "対"), ("対", "策"), ("地震",), ("対策",)]
    assert combined.index_tokens("Drop and cover") == get_analyzer("bigram").index_tokens("Drop and cover")


def test_store_renderings_quote_every_token() -> None:
    phrases = [("備", "蓄"), ('"',), ("it's",), ("a\\b",)]
    assert fts5_query(phrases) == '"備 蓄" OR """" OR "it\'s" OR "a\\b"'
    assert tsquery_literal(phrases) == "('備' <-> '蓄') | ('\"') | ('it''s') | ('a\\\\b')"
    assert fts5_query([]) is None and tsquery_literal([]) is None
    assert tsvector_literal(["水", "の", "水"]) == "'水':1 'の':2 '水':3"  # the cast merges positions
    assert tsvector_literal(["it's", "a\\b"]) == "'it''s':1 'a\\\\b':2"
    assert fts5_document(["水", "の"]) == "水 の"


def _fts5_tokens(text: str) -> list[str]:
    """How SQLite's unicode61 tokenizer (the one chunks_fts uses) splits ``text``."""
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5 (terms, tokenize = 'unicode61 remove_diacritics 0')")
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab (t, 'instance')")
    conn.execute("INSERT INTO t (rowid, terms) VALUES (1, ?)", (text,))
    return [r[0] for r in conn.execute("SELECT term FROM v ORDER BY offset")]


_CHARS = "水の備蓄は地震対策ー々〆カタﾊﾟﾞ゛゜゠・ゝヽ한국語" "abcXYZé0123 \n\t.,、。!?'\"*()&|:-_\\"
_TEXT = st.text(
    alphabet=st.sampled_from(list(_CHARS)),
    max_size=60,
)


@pytest.mark.parametrize("name", ANALYZERS)
@settings(max_examples=150, deadline=None)
@given(text=_TEXT)
def test_fts5_keeps_every_token_whole(name: str, text: str) -> None:
    """SQLite re-tokenizes the stored text: it must find exactly the analyzer's tokens, in order."""
    tokens = get_analyzer(name).index_tokens(text)
    assert _fts5_tokens(fts5_document(tokens)) == tokens
