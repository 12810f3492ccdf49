"""TokenSplitter (R8): token budgets, paragraph/section/sentence boundaries, overlap, no truncation."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bunko.embedders import UniversalSentenceEncoderEmbedder
from bunko.errors import SplitterError
from bunko.preprocess import normalize
from bunko.splitters import TokenSplitter, estimate_tokens, get_splitter

from .conftest import EXAMPLES


def check_invariants(text: str, splitter: TokenSplitter) -> list:
    chunks = splitter.split(text)
    for i, chunk in enumerate(chunks):
        assert chunk.index == i
        assert text[chunk.start : chunk.end] == chunk.content
        assert chunk.content == chunk.content.strip() and chunk.content
        assert splitter.counter(chunk.content) <= splitter.max_tokens
    covered = set()
    for chunk in chunks:
        covered.update(range(chunk.start, chunk.end))
    assert all(i in covered for i, ch in enumerate(text) if not ch.isspace())
    assert all(a.start < b.start for a, b in itertools.pairwise(chunks))
    return chunks


def test_estimate_counts_japanese_per_character_and_english_per_word() -> None:
    assert estimate_tokens("地震に備える") == 6
    assert estimate_tokens("drop cover hold") == 4  # about four characters a token
    assert estimate_tokens("earthquake-preparedness") >= 4


def test_paragraphs_stay_whole_and_headings_stay_with_their_text() -> None:
    text = "# 見出し\n\n" + "水を備蓄します。" * 20 + "\n\n## 次の節\n\n" + "家具を固定します。" * 20
    chunks = check_invariants(text, TokenSplitter(max_tokens=200, overlap_tokens=0))
    assert chunks[0].content.startswith("# 見出し\n\n水を")
    assert any(c.content.startswith("## 次の節\n\n家具") for c in chunks)
    assert not any(c.content.rstrip().endswith(("見出し", "次の節")) for c in chunks)


def test_long_japanese_paragraph_is_cut_at_sentence_ends_with_closing_brackets() -> None:
    sentence = "彼は「地震が来たら机の下に入る。」と言った。"
    text = sentence * 30
    chunks = check_invariants(text, TokenSplitter(max_tokens=60, overlap_tokens=0))
    assert len(chunks) > 1
    assert all(c.content.endswith(("と言った。", "入る。」")) for c in chunks[:-1])  # 。」 ends a sentence too
    assert not any(c.content.startswith(("」", "。")) for c in chunks)


def test_overlap_carries_whole_sentences() -> None:
    text = " ".join(f"Sentence number {i} is here." for i in range(60))
    chunks = check_invariants(text, TokenSplitter(max_tokens=50, overlap_tokens=12))
    for prev, nxt in itertools.pairwise(chunks):
        assert nxt.start < prev.end  # overlapping
        assert nxt.content.startswith("Sentence number")


def test_a_text_with_no_boundaries_is_cut_never_truncated() -> None:
    text = "あ" * 5000
    chunks = check_invariants(text, TokenSplitter(max_tokens=100, overlap_tokens=0))
    assert sum(len(c.content) for c in chunks) == 5000


def test_real_tokenizer_budget_on_the_samples() -> None:
    embedder = UniversalSentenceEncoderEmbedder()
    splitter = get_splitter("token", max_tokens=120, overlap_tokens=20, counter=embedder.count_tokens)
    for path in sorted(EXAMPLES.iterdir()):
        check_invariants(normalize(path.read_text(encoding="utf-8")), splitter)


def test_invalid_configuration() -> None:
    with pytest.raises(SplitterError):
        TokenSplitter(max_tokens=4)
    with pytest.raises(SplitterError):
        TokenSplitter(max_tokens=100, overlap_tokens=60)


_alphabet = st.sampled_from([*list("あいうえお漢字文庫。、！？「」abc xyz.\n"), "\n\n", "# 見出し\n\n", ". "])


@settings(max_examples=200, deadline=None)
@given(st.lists(_alphabet, min_size=1, max_size=400).map("".join), st.integers(8, 80), st.integers(0, 3))
def test_properties_hold_for_arbitrary_text(text: str, max_tokens: int, overlap_div: int) -> None:
    overlap = max_tokens // 2 - 1 if overlap_div == 0 else max_tokens // (overlap_div * 4)
    check_invariants(text, TokenSplitter(max_tokens=max_tokens, overlap_tokens=max(0, overlap)))
