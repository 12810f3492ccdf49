"""Tests for bunko.splitters (R7): the recursive splitter's rules, invariants and registry."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from bunko import splitters
from bunko.errors import ConfigError, SplitterError, UnknownProviderError
from bunko.splitters import (
    DEFAULT_SEPARATORS,
    RecursiveCharacterSplitter,
    Splitter,
    available_splitters,
    get_splitter,
    register_splitter,
)
from bunko.types import TextChunk

# Characters no chunk may start with (closing punctuation, kinsoku).
NO_START = set("。．.、，,！？!?：；:;」』）)］]】〕〉》”’")

JA = "今日は晴れです。明日は雨でしょう。明後日は曇りです。"
EN = "Hi. I am Ken. It is hot. Go home."


def triples(chunks: list[TextChunk]) -> list[tuple[str, int, int]]:
    """(content, start, end) of each chunk, for exact comparisons."""
    return [(c.content, c.start, c.end) for c in chunks]


def check_invariants(text: str, chunks: list[TextChunk], chunk_size: int, chunk_overlap: int) -> None:
    """Assert every invariant R7 promises for any input."""
    if not text.strip():
        assert chunks == []
        return
    assert chunks, "non-blank text must give at least one chunk"
    for i, c in enumerate(chunks):
        assert c.index == i
        assert text[c.start : c.end] == c.content
        assert 0 < len(c.content) <= chunk_size
        assert c.content == c.content.strip()
    for prev, nxt in pairwise(chunks):
        assert nxt.start > prev.start
        assert nxt.end >= prev.end
        # Overlap is bounded: at most chunk_overlap characters carried over.
        assert nxt.start >= prev.end - chunk_overlap
        # Coverage: whatever lies between two chunks is whitespace only.
        assert text[prev.end : nxt.start].strip() == ""
    assert text[: chunks[0].start].strip() == ""
    assert text[chunks[-1].end :].strip() == ""
    if len(text.strip()) <= chunk_size:
        assert triples(chunks) == [(text.strip(), len(text) - len(text.lstrip()), len(text.rstrip()))]


# -- configuration -----------------------------------------------------------------


def test_defaults() -> None:
    """Defaults are 512/64 with the documented separator order."""
    s = RecursiveCharacterSplitter()
    assert (s.chunk_size, s.chunk_overlap) == (512, 64)
    assert s.separators == ["\n\n", "\n", "。", ". ", " ", ""]
    assert tuple(s.separators) == DEFAULT_SEPARATORS


@pytest.mark.parametrize(
    "kwargs",
    [
        {"chunk_size": 0},
        {"chunk_size": -5, "chunk_overlap": 0},
        {"chunk_overlap": -1},
        {"chunk_size": 10, "chunk_overlap": 10},
        {"chunk_size": 10, "chunk_overlap": 11},
        {"separators": []},
        {"separators": ["\n", 3]},
        {"chunk_size": 10.5},
        {"chunk_size": True},
        {"chunk_overlap": "8"},
    ],
)
def test_invalid_config_raises(kwargs: dict[str, object]) -> None:
    """Invalid sizes, overlap >= size and an empty separator list are SplitterErrors."""
    with pytest.raises(SplitterError):
        RecursiveCharacterSplitter(**kwargs)  # type: ignore[arg-type]


def test_overlap_just_below_size_is_valid() -> None:
    """overlap = size - 1 is allowed (a sliding window one character at a time)."""
    s = RecursiveCharacterSplitter(chunk_size=4, chunk_overlap=3)
    text = "あいうえおかきくけこ"
    chunks = s.split(text)
    check_invariants(text, chunks, 4, 3)
    assert [c.start for c in chunks] == list(range(len(chunks)))


def test_non_str_text_raises() -> None:
    """Splitting something that is not text is a SplitterError."""
    with pytest.raises(SplitterError):
        RecursiveCharacterSplitter().split(b"bytes")  # type: ignore[arg-type]


# -- basic behaviour -----------------------------------------------------------------


@pytest.mark.parametrize("text", ["", " ", "\n\n", " \t\u3000\n"])
def test_blank_text_gives_no_chunks(text: str) -> None:
    """Empty or whitespace-only text gives []."""
    assert RecursiveCharacterSplitter(chunk_size=5, chunk_overlap=1).split(text) == []


def test_text_that_fits_is_one_stripped_chunk() -> None:
    """A text within chunk_size is one chunk, stripped, with offsets into the input."""
    text = "  本日は晴天なり。 \n"
    assert RecursiveCharacterSplitter(chunk_size=9, chunk_overlap=2).split(text) == [
        TextChunk("本日は晴天なり。", 0, 2, 10)
    ]


def test_text_of_exactly_chunk_size_is_one_chunk() -> None:
    """The size limit is inclusive."""
    assert triples(RecursiveCharacterSplitter(26, 10).split(JA)) == [(JA, 0, 26)]


# -- exact expectations (the seed's rules) -----------------------------------------------


def test_japanese_sentences_merge_up_to_chunk_size() -> None:
    """Sentences split at 。, the 。 stays at the end, and pieces merge up to 20 chars."""
    chunks = RecursiveCharacterSplitter(chunk_size=20, chunk_overlap=0).split(JA)
    assert triples(chunks) == [
        ("今日は晴れです。明日は雨でしょう。", 0, 17),
        ("明後日は曇りです。", 17, 26),
    ]
    assert [c.index for c in chunks] == [0, 1]


def test_english_sentences_merge_up_to_chunk_size() -> None:
    """'. ' splits keep the '.' on the preceding chunk; the space is dropped."""
    chunks = RecursiveCharacterSplitter(chunk_size=20, chunk_overlap=0).split(EN)
    assert triples(chunks) == [("Hi. I am Ken.", 0, 13), ("It is hot. Go home.", 14, 33)]


def test_long_english_sentence_falls_back_to_words() -> None:
    """A sentence longer than the chunk is split at spaces; its neighbours stay whole."""
    text = "The sky is clear. It will rain tomorrow. Clouds come later."
    chunks = RecursiveCharacterSplitter(chunk_size=20, chunk_overlap=0).split(text)
    assert [c.content for c in chunks] == [
        "The sky is clear.",
        "It will rain",
        "tomorrow.",
        "Clouds come later.",
    ]


def test_hard_character_split() -> None:
    """With no separator present, the "" separator cuts every chunk_size characters."""
    chunks = RecursiveCharacterSplitter(chunk_size=20, chunk_overlap=0).split("あ" * 50)
    assert [(c.start, c.end) for c in chunks] == [(0, 20), (20, 40), (40, 50)]


def test_hard_split_respects_kinsoku() -> None:
    """A hard cut moves back so the next chunk does not start with a closing bracket."""
    chunks = RecursiveCharacterSplitter(chunk_size=4, chunk_overlap=0, separators=[""]).split("ああああ」いい")
    assert triples(chunks) == [("あああ", 0, 3), ("あ」いい", 3, 7)]


def test_missing_empty_separator_still_enforces_chunk_size() -> None:
    """Without "" in the list the splitter still hard-cuts oversize pieces."""
    text = "abcdefghij klmnopqrstuvwxyz"
    chunks = RecursiveCharacterSplitter(chunk_size=8, chunk_overlap=0, separators=[" "]).split(text)
    assert [c.content for c in chunks] == ["abcdefgh", "ij", "klmnopqr", "stuvwxyz"]
    check_invariants(text, chunks, 8, 0)


def test_closing_brackets_stay_with_their_sentence() -> None:
    """A 「…。」 quote is cut after the 」, not between 。 and 」."""
    text = "「はい。」と言った。「いいえ。」と答えた。"
    chunks = RecursiveCharacterSplitter(chunk_size=12, chunk_overlap=0).split(text)
    assert [c.content for c in chunks] == ["「はい。」と言った。", "「いいえ。」と答えた。"]


def test_decimal_point_is_not_a_sentence_end() -> None:
    """'. ' needs the space: 3.14 is not cut."""
    text = "Pi is 3.14 today. Next one is here."
    chunks = RecursiveCharacterSplitter(chunk_size=20, chunk_overlap=0).split(text)
    assert [c.content for c in chunks] == ["Pi is 3.14 today.", "Next one is here."]


def test_ellipsis_stays_together() -> None:
    """A run of dots is one sentence end; the next chunk does not start with '.'."""
    text = "Wait... what? Yes. Done."
    chunks = RecursiveCharacterSplitter(chunk_size=10, chunk_overlap=0).split(text)
    assert [c.content for c in chunks] == ["Wait...", "what? Yes.", "Done."]


def test_newline_before_punctuation_is_not_a_cut() -> None:
    """A line starting with 。 is not split off; the 。 ends the preceding piece."""
    text = "abc\n。def。ghi"
    chunks = RecursiveCharacterSplitter(chunk_size=6, chunk_overlap=0).split(text)
    assert [c.content for c in chunks] == ["abc\n。", "def。", "ghi"]


def test_custom_separators() -> None:
    """A custom punctuation separator (！) stays attached to the preceding piece."""
    text = "すごい！本当に！やった！"
    chunks = RecursiveCharacterSplitter(chunk_size=8, chunk_overlap=0, separators=["！", ""]).split(text)
    assert [c.content for c in chunks] == ["すごい！本当に！", "やった！"]


# -- boundary priority -------------------------------------------------------------------


P1 = "今日は晴れです。明日は雨でしょう。"  # 17 characters
P2 = "明後日は曇りです。週末は晴れるでしょう。"  # 20 characters


def test_paragraphs_preferred_over_sentences_without_overlap() -> None:
    """Two paragraphs that fit alone but not together give one chunk each.

    A flat sentence merge would have put P2's first sentence into the first chunk.
    """
    text = f"{P1}\n\n{P2}"
    chunks = RecursiveCharacterSplitter(chunk_size=30, chunk_overlap=0).split(text)
    assert triples(chunks) == [(P1, 0, 17), (P2, 19, 39)]


def test_paragraphs_preferred_over_sentences_with_overlap() -> None:
    """With overlap the second chunk's own text still starts at the blank line."""
    text = f"{P1}\n\n{P2}"
    chunks = RecursiveCharacterSplitter(chunk_size=30, chunk_overlap=5).split(text)
    assert len(chunks) == 2
    assert triples(chunks)[0] == (P1, 0, 17)
    # The overlap is a character cut (no clean boundary in "でしょう。").
    assert triples(chunks)[1] == (f"でしょう。\n\n{P2}", 12, 39)


def test_lines_preferred_over_sentences() -> None:
    """A single newline beats 。 when both would do."""
    text = "一行目です。まだ続く。\n二行目です。"
    chunks = RecursiveCharacterSplitter(chunk_size=15, chunk_overlap=0).split(text)
    assert [c.content for c in chunks] == ["一行目です。まだ続く。", "二行目です。"]


def test_sentences_preferred_over_words() -> None:
    """'. ' beats ' ': chunks end at sentence ends when sentences fit."""
    text = "One two three. Four five six. Seven eight nine."
    chunks = RecursiveCharacterSplitter(chunk_size=30, chunk_overlap=0).split(text)
    assert [c.content for c in chunks] == ["One two three. Four five six.", "Seven eight nine."]


# -- overlap ---------------------------------------------------------------------------


def test_english_overlap_starts_after_whitespace() -> None:
    """The overlap begins at a word start inside the window."""
    chunks = RecursiveCharacterSplitter(chunk_size=20, chunk_overlap=5).split(EN)
    assert triples(chunks) == [
        ("Hi. I am Ken.", 0, 13),
        ("Ken. It is hot.", 9, 24),
        ("hot. Go home.", 20, 33),
    ]


def test_japanese_overlap_prefers_boundary_after_maru_else_character_cut() -> None:
    """After 。 when the window has one, else the earliest plain character; never on 。."""
    text = "はい。いいえ。そうです。違います。"
    chunks = RecursiveCharacterSplitter(chunk_size=10, chunk_overlap=4).split(text)
    assert triples(chunks) == [
        ("はい。", 0, 3),
        ("い。いいえ。", 1, 7),  # window "い。": no clean start, plain cut at い
        ("いいえ。そうです。", 3, 12),  # window "。いいえ。": starts right after the 。
        ("うです。違います。", 8, 17),  # window "うです。": plain cut
    ]


def test_overlap_prefers_clean_boundary_over_earlier_character() -> None:
    """A later start after 。 beats the earlier plain cut at は (shorter but clean overlap)."""
    text = "今日は雨。晴れ。明日は雪です。"
    chunks = RecursiveCharacterSplitter(chunk_size=14, chunk_overlap=6).split(text)
    # Window is text[2:8] == "は雨。晴れ。": the plain cut would start at は (2).
    assert triples(chunks) == [("今日は雨。晴れ。", 0, 8), ("晴れ。明日は雪です。", 5, 15)]


def test_japanese_overlap_with_comma_boundary() -> None:
    """、 is a clean boundary too."""
    text = "雨が降り、風も強い。明日は晴れる。"
    chunks = RecursiveCharacterSplitter(chunk_size=16, chunk_overlap=6).split(text)
    assert triples(chunks) == [("雨が降り、風も強い。", 0, 10), ("風も強い。明日は晴れる。", 5, 17)]


def test_zero_overlap_partitions_text() -> None:
    """With overlap 0 chunks never share characters and lose none."""
    text = (JA + "\n") * 5 + EN * 3
    chunks = RecursiveCharacterSplitter(chunk_size=25, chunk_overlap=0).split(text)
    check_invariants(text, chunks, 25, 0)
    for prev, nxt in pairwise(chunks):
        assert nxt.start >= prev.end
    # Disjoint and covering: the chunks are the text minus the whitespace between them.
    assert "".join("".join(c.content.split()) for c in chunks) == "".join(text.split())


def test_overlap_is_positive_in_prose() -> None:
    """Ordinary prose with overlap > 0: every pair of neighbours shares text."""
    text = ("Retrieval augmented generation needs good chunks. " * 30).strip()
    chunks = RecursiveCharacterSplitter(chunk_size=120, chunk_overlap=30).split(text)
    assert len(chunks) > 5
    check_invariants(text, chunks, 120, 30)
    for prev, nxt in pairwise(chunks):
        shared = prev.end - nxt.start
        assert 0 < shared <= 30
        # Clean boundary: the overlap starts at a word start.
        assert text[nxt.start - 1] == " "


def test_long_japanese_text_chunks_end_with_maru() -> None:
    """Every chunk but the last ends with 。 and none starts with 。 (with and without overlap)."""
    text = JA * 40
    for overlap in (0, 10):
        chunks = RecursiveCharacterSplitter(chunk_size=60, chunk_overlap=overlap).split(text)
        check_invariants(text, chunks, 60, overlap)
        assert len(chunks) > 10
        assert all(c.content.endswith("。") for c in chunks[:-1])
        assert not any(c.content.startswith("。") for c in chunks)


def test_english_chunks_end_with_period() -> None:
    """'. ' splits keep the '.' at the end of the preceding chunk."""
    text = " ".join(f"Sentence number {i} is here." for i in range(50))
    chunks = RecursiveCharacterSplitter(chunk_size=70, chunk_overlap=0).split(text)
    assert all(c.content.endswith(".") for c in chunks)
    assert not any(c.content[0] in ". " for c in chunks)


# -- large and pathological inputs (their speed is measured in benchmarks/bench_splitters.py) ----


def test_one_megabyte_splits_into_exact_slices() -> None:
    """1 MB of mixed text splits into chunks that are exact slices of it."""
    block = "今日は晴れです。明日は雨でしょう。The quick brown fox jumps over the lazy dog. " * 12 + "\n\n"
    text = block * (1_000_000 // len(block) + 1)
    chunks = RecursiveCharacterSplitter().split(text)
    assert len(chunks) > 1000
    assert all(text[c.start : c.end] == c.content for c in chunks[:: max(1, len(chunks) // 50)])


@pytest.mark.parametrize(
    "text",
    ["a" + " " * 300_000 + "b", "." * 300_000, "。" * 300_000, "\n。" * 150_000, " \t" * 150_000 + "x"],
    ids=["spaces", "dots", "maru", "newline-maru", "mixed-space"],
)
def test_pathological_inputs_split_within_bounds(text: str) -> None:
    """Long runs of one separator or punctuation still give bounded, overlapping, exact chunks."""
    chunks = RecursiveCharacterSplitter().split(text)
    check_invariants(text, chunks, 512, 64)


# -- properties --------------------------------------------------------------------------

# Single characters plus a few multi-character separator shapes, so separators,
# their runs and their neighbours all turn up often.
_MIXED = st.lists(
    st.sampled_from([*"あいう漢字カナーabcXYZ09 .。、!?」「\n\t\u3000", "\n\n", ". ", "。\n"]),
    max_size=300,
).map("".join)


@st.composite
def sizes(draw: st.DrawFn) -> tuple[int, int]:
    """A random valid (chunk_size, chunk_overlap)."""
    size = draw(st.integers(min_value=1, max_value=60))
    overlap = draw(st.integers(min_value=0, max_value=size - 1))
    return size, overlap


@settings(max_examples=400, deadline=None)
@given(text=_MIXED, cfg=sizes())
def test_property_invariants_on_random_text(text: str, cfg: tuple[int, int]) -> None:
    """Offsets, sizes, order, coverage and overlap bounds hold for any text."""
    size, overlap = cfg
    check_invariants(text, RecursiveCharacterSplitter(size, overlap).split(text), size, overlap)


_JA_WORD = st.text(alphabet=st.sampled_from(list("今日明後晴雨曇りですでしょうカタナ漢字")), min_size=2, max_size=8)
_EN_WORD = st.text(alphabet=st.sampled_from(list("abcdefghijkXYZ")), min_size=2, max_size=8)
_JA_SENTENCE = st.lists(_JA_WORD, min_size=1, max_size=4).map(lambda ws: "、".join(ws) + "。")
_EN_SENTENCE = st.lists(_EN_WORD, min_size=1, max_size=6).map(lambda ws: " ".join(ws) + ".")


@st.composite
def prose(draw: st.DrawFn) -> str:
    """Japanese, English or mixed paragraphs of well-formed sentences."""
    sentence = draw(st.sampled_from([_JA_SENTENCE, _EN_SENTENCE, _JA_SENTENCE | _EN_SENTENCE]))
    paragraphs = []
    for sentences in draw(st.lists(st.lists(sentence, min_size=1, max_size=6), min_size=1, max_size=5)):
        # Japanese sentences join directly, English ones with a space.
        text = ""
        for s in sentences:
            text += s if not text or s.endswith("。") else " " + s
        paragraphs.append(text)
    joiner = draw(st.sampled_from(["\n\n", "\n"]))
    return joiner.join(paragraphs)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=prose(), size=st.integers(min_value=12, max_value=120), data=st.data())
def test_property_prose(text: str, size: int, data: st.DataObject) -> None:
    """On prose: invariants, no chunk starts with punctuation, and overlap > 0 when asked.

    The step (size - overlap) is kept at 8 or more: with a step of one or two
    characters a chunk can be a lone character or punctuation, which no overlap
    can start inside (that degenerate range is covered by the random-text test).
    """
    overlap = data.draw(st.integers(min_value=0, max_value=size - 8), label="overlap")
    chunks = RecursiveCharacterSplitter(size, overlap).split(text)
    check_invariants(text, chunks, size, overlap)
    for c in chunks:
        assert c.content[0] not in NO_START, c
    if overlap >= 4:
        for prev, nxt in pairwise(chunks):
            assert nxt.start < prev.end, (prev, nxt)


@settings(max_examples=200, deadline=None)
@given(
    sentences=st.lists(_JA_SENTENCE, min_size=2, max_size=30),
    size=st.integers(min_value=10, max_value=100),
    data=st.data(),
)
def test_property_japanese_chunks_end_at_maru(sentences: list[str], size: int, data: st.DataObject) -> None:
    """When every sentence fits the step (size - overlap), every chunk but the last ends with 。."""
    overlap = data.draw(st.integers(min_value=0, max_value=size // 2), label="overlap")
    assume(max(len(s) for s in sentences) <= size - overlap)
    text = "".join(sentences)
    chunks = RecursiveCharacterSplitter(size, overlap).split(text)
    check_invariants(text, chunks, size, overlap)
    assert all(c.content.endswith("。") for c in chunks[:-1])
    assert not any(c.content.startswith("。") for c in chunks)
    if overlap == 0:
        # Without overlap the chunks partition the text exactly.
        assert "".join(c.content for c in chunks) == text


@settings(max_examples=200, deadline=None)
@given(
    sentences=st.lists(_EN_SENTENCE, min_size=2, max_size=30),
    size=st.integers(min_value=10, max_value=100),
    data=st.data(),
)
def test_property_english_chunks_end_at_period(sentences: list[str], size: int, data: st.DataObject) -> None:
    """When every sentence fits the step, every chunk but the last ends with '.'."""
    overlap = data.draw(st.integers(min_value=0, max_value=size // 2), label="overlap")
    assume(max(len(s) for s in sentences) <= size - overlap)
    text = " ".join(sentences)
    chunks = RecursiveCharacterSplitter(size, overlap).split(text)
    check_invariants(text, chunks, size, overlap)
    assert all(c.content.endswith(".") for c in chunks[:-1])
    assert not any(c.content.startswith(".") for c in chunks)
    if overlap == 0:
        assert " ".join(c.content for c in chunks) == text


@settings(max_examples=100, deadline=None)
@given(
    paragraphs=st.lists(st.lists(_JA_SENTENCE, min_size=1, max_size=3).map("".join), min_size=2, max_size=6),
    size=st.integers(min_value=10, max_value=80),
)
def test_property_paragraphs_fitting_are_never_split(paragraphs: list[str], size: int) -> None:
    """With overlap 0, a paragraph that fits is never split and chunks never cross a break
    unless both whole paragraphs fit together."""
    assume(max(len(p) for p in paragraphs) <= size)
    text = "\n\n".join(paragraphs)
    chunks = RecursiveCharacterSplitter(size, 0).split(text)
    check_invariants(text, chunks, size, 0)
    # Each chunk is a run of whole paragraphs.
    assert [p for c in chunks for p in c.content.split("\n\n")] == paragraphs


# -- Protocol and registry ------------------------------------------------------------


def test_splitter_protocol() -> None:
    """RecursiveCharacterSplitter satisfies the Splitter protocol."""
    assert isinstance(RecursiveCharacterSplitter(), Splitter)


def test_get_splitter_default_is_recursive() -> None:
    """The default name builds a RecursiveCharacterSplitter with the given options."""
    assert "recursive" in available_splitters()
    s = get_splitter()
    assert isinstance(s, RecursiveCharacterSplitter)
    assert (s.chunk_size, s.chunk_overlap) == (512, 64)
    s2 = get_splitter("recursive", chunk_size=20, chunk_overlap=0)
    assert isinstance(s2, RecursiveCharacterSplitter)
    assert [c.content for c in s2.split(JA)] == ["今日は晴れです。明日は雨でしょう。", "明後日は曇りです。"]


def test_get_splitter_unknown_name_lists_known() -> None:
    """An unknown name raises UnknownProviderError naming the registered splitters."""
    with pytest.raises(UnknownProviderError) as info:
        get_splitter("nope")
    message = str(info.value)
    assert "nope" in message and "recursive" in message
    assert isinstance(info.value, ConfigError) and isinstance(info.value, KeyError)


def test_get_splitter_bad_options() -> None:
    """Invalid or misspelt options are SplitterErrors."""
    with pytest.raises(SplitterError):
        get_splitter("recursive", chunk_size=10, chunk_overlap=10)
    with pytest.raises(SplitterError, match="chunk_sise"):
        get_splitter("recursive", chunk_sise=10)


def test_register_splitter() -> None:
    """A registered factory is found by name and receives the options."""

    class Whole:
        def __init__(self, tag: str = "") -> None:
            self.tag = tag

        def split(self, text: str) -> list[TextChunk]:
            return [TextChunk(text, 0, 0, len(text))]

    register_splitter("whole", Whole)
    try:
        s = get_splitter("whole", tag="x")
        assert isinstance(s, Whole) and s.tag == "x"
        assert isinstance(s, Splitter)
        assert s.split("abc") == [TextChunk("abc", 0, 0, 3)]
        assert available_splitters() == ["recursive", "token", "whole"]
    finally:
        splitters._REGISTRY.unregister("whole")
    assert available_splitters() == ["recursive", "token"]
    with pytest.raises(SplitterError):
        register_splitter("", Whole)
    with pytest.raises(SplitterError):
        register_splitter("bad", 42)  # type: ignore[arg-type]
