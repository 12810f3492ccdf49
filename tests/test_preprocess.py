"""Tests for bunko.preprocess (R6): the normalisation rules, in order."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bunko.errors import BunkoError, PreprocessingError
from bunko.preprocess import Preprocessor, normalize


@pytest.fixture
def pre() -> Preprocessor:
    """A default preprocessor."""
    return Preprocessor()


# -- rule 1: type check ----------------------------------------------------------


@pytest.mark.parametrize("value", [None, b"bytes", 42, ["a"], 3.5])
def test_non_str_input_raises(pre: Preprocessor, value: object) -> None:
    """Non-str input is a PreprocessingError, not a TypeError deep inside re."""
    with pytest.raises(PreprocessingError) as info:
        pre.normalize(value)  # type: ignore[arg-type]
    assert type(value).__name__ in str(info.value)
    assert info.value.code == "PREPROCESSING_ERROR"
    assert isinstance(info.value, BunkoError)


# -- rule 2: line endings --------------------------------------------------------


def test_crlf_becomes_lf(pre: Preprocessor) -> None:
    """A Windows file normalises exactly like the Unix one."""
    assert pre.normalize("一行目\r\n二行目\r\n") == "一行目\n二行目"
    assert pre.normalize("a\r\nb") == pre.normalize("a\nb")


def test_lone_cr_becomes_lf(pre: Preprocessor) -> None:
    """Old Mac line ends are newlines, not horizontal whitespace."""
    assert pre.normalize("a\rb") == "a\nb"


def test_crlf_paragraphs_collapse_like_lf(pre: Preprocessor) -> None:
    """\\r\\n\\r\\n\\r\\n is three newlines, so it collapses to a paragraph break."""
    assert pre.normalize("a\r\n\r\n\r\nb") == "a\n\nb"
    assert pre.normalize("a\r\n\r\nb") == "a\n\nb"
    assert pre.normalize("a\r\r\r\rb") == "a\n\nb"


# -- rule 3: NFKC ----------------------------------------------------------------


def test_fullwidth_ascii_becomes_halfwidth(pre: Preprocessor) -> None:
    """Full-width letters, digits and punctuation become ASCII."""
    assert pre.normalize("ＡＢＣ　ａｂｃ　１２３！") == "ABC abc 123!"


def test_halfwidth_katakana_becomes_fullwidth(pre: Preprocessor) -> None:
    """Half-width katakana (with voiced marks) compose into full-width katakana."""
    assert pre.normalize("ｶﾞｷﾞｸﾞ ﾃﾞｰﾀﾍﾞｰｽ") == "ガギグ データベース"


def test_ideographic_space_becomes_ascii_space(pre: Preprocessor) -> None:
    """U+3000 is an ordinary space after normalisation."""
    assert pre.normalize("日本語\u3000テキスト") == "日本語 テキスト"


def test_japanese_text_and_punctuation_kept(pre: Preprocessor) -> None:
    """Hiragana, kanji and Japanese punctuation survive unchanged."""
    text = "今日は晴れです。明日は「雨」でしょう、たぶん。"
    assert pre.normalize(text) == text


def test_nfkc_compatibility_forms(pre: Preprocessor) -> None:
    """NFKC folds compatibility characters (documented side effect)."""
    assert pre.normalize("①㈱ｷﾛ") == "1(株)キロ"


# -- rule 4: horizontal whitespace -------------------------------------------------


def test_space_and_tab_runs_collapse(pre: Preprocessor) -> None:
    """Runs of spaces and tabs become one space; newlines are kept."""
    assert pre.normalize("a  \t b\tc\nd    e") == "a b c\nd e"


def test_other_horizontal_whitespace_collapses(pre: Preprocessor) -> None:
    """NBSP, vertical tab, form feed and mixed runs are horizontal whitespace too."""
    assert pre.normalize("a\u00a0\u00a0b\x0bc\x0c \u3000d") == "a b c d"


def test_single_newline_kept(pre: Preprocessor) -> None:
    """A single newline is a line break and stays."""
    assert pre.normalize("行1\n行2") == "行1\n行2"


# -- rule 5: blank lines -----------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a\n\nb", "a\n\nb"),
        ("a\n\n\nb", "a\n\nb"),
        ("a\n\n\n\n\n\nb", "a\n\nb"),
        # Lines holding only whitespace count as empty lines.
        ("a\n \n \nb", "a\n\nb"),
        ("a\n\t\n\u3000\n\nb", "a\n\nb"),
        ("a\n \nb", "a\n\nb"),
        ("a\n\n\nb\n\n\n\nc", "a\n\nb\n\nc"),
    ],
)
def test_blank_lines_collapse_to_one_paragraph_break(pre: Preprocessor, raw: str, expected: str) -> None:
    """Three or more newlines (blank or space-only lines between) become exactly two."""
    assert pre.normalize(raw) == expected


def test_spaces_beside_text_on_a_line_are_not_removed(pre: Preprocessor) -> None:
    """Only whitespace-only lines are folded; a space at a line end is left (rule 4 only)."""
    assert pre.normalize("a \nb") == "a \nb"


# -- rules 6 and 7: strip, empty ---------------------------------------------------


def test_strip(pre: Preprocessor) -> None:
    """Leading and trailing whitespace (incl. newlines and U+3000) is removed."""
    assert pre.normalize("\n\n\u3000  本文です。 \t\n\n") == "本文です。"


@pytest.mark.parametrize("raw", ["", " ", "\n\n\n", "\u3000\u3000", "\r\n\t \r"])
def test_empty_or_whitespace_only_raises(pre: Preprocessor, raw: str) -> None:
    """Nothing left after normalisation is an error with a clear message."""
    with pytest.raises(PreprocessingError, match="empty"):
        pre.normalize(raw)


def test_rules_combined(pre: Preprocessor) -> None:
    """All rules together on a messy Windows-style Japanese document."""
    raw = "\r\n　第１章\u3000ﾃｽﾄ\r\n\r\n\r\n\r\n本文　　です。\t\tＯＫ！\r\n"
    assert pre.normalize(raw) == "第1章 テスト\n\n本文 です。 OK!"


def test_module_level_normalize_matches_class(pre: Preprocessor) -> None:
    """The convenience function is the default Preprocessor."""
    raw = "ＡＢＣ\r\n\r\n\r\nｶﾅ"
    assert normalize(raw) == pre.normalize(raw) == "ABC\n\nカナ"
    with pytest.raises(PreprocessingError):
        normalize("   ")


def test_constructor_takes_no_required_args() -> None:
    """Preprocessor() works and is reusable."""
    p = Preprocessor()
    assert p.normalize("x") == "x"
    assert p.normalize("y") == "y"


# -- properties --------------------------------------------------------------------

_ALPHABET = st.sampled_from(list("abcXYZ09 .。、\t\n\r\u3000\u00a0") + list("ＡＢＣ１２ｶﾞｷﾃﾞｰﾀ今日は晴れですカタカナ"))


@given(st.text(alphabet=_ALPHABET, max_size=80))
def test_properties(raw: str) -> None:
    """Output is NFKC, stripped, idempotent, with no \\r, tabs, double spaces or 3+ newlines."""
    pre = Preprocessor()
    try:
        out = pre.normalize(raw)
    except PreprocessingError:
        # Only an all-whitespace input may be rejected.
        assert unicodedata.normalize("NFKC", raw).strip() == ""
        return
    assert out
    assert out == out.strip()
    assert "\r" not in out and "\t" not in out and "\u3000" not in out
    assert "  " not in out
    assert "\n\n\n" not in out and "\n \n" not in out
    assert unicodedata.normalize("NFKC", out) == out
    assert pre.normalize(out) == out
    # Nothing but whitespace is ever removed.
    assert "".join(out.split()) == "".join(unicodedata.normalize("NFKC", raw).split())
