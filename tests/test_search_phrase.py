"""Phrase and proximity in keyword ranking (issue 24): a chunk that holds the query's terms in order, next
to each other, ranks above one that only repeats or scatters them, for stemmed English and Japanese
bigrams, with the same scores on both stores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bunko.analysis import get_analyzer, sequence_tokens, sequence_units
from bunko.engine import Bunko
from bunko.search import keyword_query
from bunko.search.keyword import Proximity, proximity_shares, query_pairs
from bunko.stores import open_backend
from bunko.testing.store_suite import INFO, make_document, unit_vectors
from bunko.types import Document

from .conftest import SHARED_DOCUMENTS

TITLE = "Trace-based Just-in-Time Type Specialization for Dynamic Languages"
ENGLISH = [
    # The title chunk: the whole title in order, then names and the start of the abstract.
    f"{TITLE}\nAndreas Gal, Brendan Eich, Mike Shaver, David Anderson. Mozilla Corporation. Abstract: "
    "scripts written in JavaScript are harder to compile well than programs written in C.",
    # A chunk that repeats "trace" and holds the other words apart: more BM25, no phrase.
    "Each trace carries a type. Dynamic traces run, and languages trace loops just once, in record time: "
    "the trace is a base for later traces.",
    "Dynamic languages are popular for web programming. Their compilers must handle many types at run time.",
    "Type inference for static languages finds the type of every variable before the program runs.",
    "The interpreter records a trace when a loop becomes hot and compiles it to machine code.",
    "Garbage collection of JavaScript objects runs between traces.",
]
JAPANESE_QUERY = "東京都防災マニュアル"
JAPANESE = [
    "東京都防災マニュアルは、災害に備えて家庭で準備しておくことをまとめた冊子です。各家庭に配られました。",
    "東京と京都の防災の話。都の防災の本とマニュアル。",
    "地震のときは家具の転倒に注意してください。",
    "非常食と飲料水を家族の人数分用意します。",
    "避難所の場所を家族で確認しておきましょう。",
]


# Chunks that share no query term, so the query's terms are rare enough to have an idf.
FILLER = [f"Note {i}: the weather was mild and the rice was cooked slowly. 天気は晴れで、米をゆっくり炊いた。"
          for i in range(30)]


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'phrase.db'}"
    return str(request.getfixturevalue("pg_url"))


def _ranked(db_url: str, texts: list[str], query: str, analyzer: str, **options) -> list[tuple[str, float]]:
    backend = open_backend(db_url)
    try:
        store = backend.for_tenant("t")
        store.ensure_collection(analyzer, INFO, analyzer=analyzer)
        store.write_documents(analyzer, [make_document(f"d{i}.txt", [t], unit_vectors(1, i))
                                    for i, t in enumerate([*texts, *FILLER])])
        return [(h.content, h.score) for h in keyword_query(store, analyzer, query, 5, **options)]
    finally:
        backend.close()


@pytest.mark.parametrize(("texts", "query", "analyzer"), [(ENGLISH, TITLE, "bigram_en"),
                                                          (JAPANESE, JAPANESE_QUERY, "bigram")])
def test_the_chunk_that_holds_the_phrase_ranks_first(db_url: str, texts: list[str], query: str,
                                                     analyzer: str) -> None:
    """The chunk that holds the query word for word is first; by BM25 alone another chunk outscores it."""
    ranked = _ranked(db_url, texts, query, analyzer)
    assert ranked[0][0] == texts[0], ranked
    bm25 = _ranked(db_url, texts, query, analyzer, proximity=None)
    assert bm25[0][0] == texts[1], bm25  # the case the phrase fixes
    # The phrase chunk gains at most 1 + phrase + near times its BM25 score; the others gain less.
    by_text = dict(bm25)
    for text, score in ranked:
        assert by_text[text] <= score <= by_text[text] * 1.6 + 1e-9


def test_both_stores_give_the_same_phrase_scores(tmp_path: Path, pg_url: str) -> None:
    """The re-scoring reads the same text on either store, so the scores agree to the last digit."""
    for texts, query, analyzer in ((ENGLISH, TITLE, "combined_en"), (JAPANESE, JAPANESE_QUERY, "combined")):
        sqlite = _ranked(f"sqlite:///{tmp_path / analyzer}.db", texts, query, analyzer)
        postgres = _ranked(pg_url, texts, query, analyzer)
        assert sqlite == postgres and len(sqlite) >= 2, analyzer
        assert sqlite != _ranked(f"sqlite:///{tmp_path / analyzer}-bm25.db", texts, query, analyzer, proximity=None)


def test_units_pairs_and_shares() -> None:
    """A query's terms are its phrases' terms (words, CJK bigrams); adjacent ones make the pairs, which a
    chunk holds in order, near, or not at all."""
    bigram = get_analyzer("bigram")
    assert [u for _, u in sequence_units(sequence_tokens(bigram, "東京都 water"))] == ["東 京", "京 都", "water"]
    english = get_analyzer("bigram_en")
    tokens = sequence_tokens(english, "Specialization for Dynamic Languages")
    assert tokens == ["special", "dynam", "languag"]  # the stop word goes, so the pair is adjacent
    idf = {"special": 2.0, "dynam": 1.0, "languag": 1.0}
    pairs = query_pairs(tokens, idf)
    assert pairs == [("special", "dynam", 3.0), ("dynam", "languag", 2.0)]
    def shares(text: str) -> tuple[float, float]:
        return proximity_shares(sequence_tokens(english, text), pairs, 8)

    assert shares("type specialization for dynamic languages") == (1.0, 0.0)
    assert shares("specialization dynamic, fast languages") == (0.6, 0.4)
    assert shares("dynamic specialization of languages") == (0.0, 1.0)  # reversed, and apart: near
    assert shares("dynamic " + "x " * 20 + "specialization languages") == (0.0, 0.0)
    # Combined's sequence is bigram's: the dictionary never runs for it.
    combined = get_analyzer("combined")
    assert sequence_tokens(combined, "東京都に住む") == bigram.index_tokens("東京都に住む")


def test_a_query_of_one_term_is_ranked_by_bm25_alone(db_url: str) -> None:
    one = _ranked(db_url, ENGLISH, "trace", "bigram_en")
    assert one == _ranked(db_url, ENGLISH, "trace", "bigram_en", proximity=None)
    no_weight = _ranked(db_url, ENGLISH, TITLE, "bigram_en", proximity=Proximity(0.0, 0.0))
    assert no_weight == _ranked(db_url, ENGLISH, TITLE, "bigram_en", proximity=None)
    assert np.all(np.diff([s for _, s in no_weight]) <= 0)


@pytest.mark.shared_data
@pytest.mark.parametrize("alone", [True, False])
def test_the_tracemonkey_title_finds_its_title_chunk_first(tmp_path: Path, embedder, alone: bool) -> None:
    """The paper's exact title, searched in keyword and hybrid mode, finds the chunk that holds it first:
    with the paper alone in its collection, and among the shared documents."""
    paths = [SHARED_DOCUMENTS / "tracemonkey.pdf"] if alone else sorted(
        p for p in SHARED_DOCUMENTS.iterdir() if p.suffix in (".pdf", ".html", ".md", ".docx"))
    with Bunko(f"sqlite:///{tmp_path / 'tm.db'}", embedder=embedder) as engine:
        scope = engine.tenant("t")
        scope.ingest(paths, "docs")
        for mode in ("keyword", "hybrid"):
            hits = scope.search(TITLE, "docs", mode=mode, top_k=3).results
            assert hits[0].source.endswith("tracemonkey.pdf") and TITLE in " ".join(hits[0].content.split()), (
                mode, [(h.source, h.content[:60]) for h in hits])


# -- titles ------------------------------------------------------------------------------------------
def test_a_documents_title_comes_from_its_loader_its_first_line_or_its_file_name() -> None:
    from bunko.indexing import document_title

    assert document_title({"title": "  Pocket   library "}, "x") == "Pocket library"
    # A title that only names a file gives way to the first line of text.
    for junk in ("IBM-PDFs.graffle", "zen_of_python.txt", "Microsoft Word - report.doc"):
        assert document_title({"title": junk}, "\n\n# The Zen of Python\nBeautiful is better.") == "The Zen of Python"
    assert document_title({"filename": "notes.md"}, "  \n  ") == "notes"
    assert document_title({"source": "/a/b/plan.v2.pdf"}, "") == "plan.v2"
    assert len(document_title({}, "x" * 500)) == 200


def test_a_title_match_ranks_the_titled_document_first_and_hits_carry_the_title(db_url: str, embedder) -> None:
    """The document titled as the query comes first in keyword and hybrid mode (a title leg joins the
    fusion) though another chunk holds the words more often; its hits carry the title."""
    with Bunko(db_url, embedder=embedder) as engine:
        scope = engine.tenant("t")
        scope.add_document(Document("Each household keeps a kit: water, food and a radio.",
                                    {"source": "guide.txt", "title": "Household earthquake kit"}), "docs")
        scope.add_document(Document("School drills\nEarthquake drills: every household practises the earthquake "
                                    "drill, and the earthquake kit of the school is checked.", {"source": "drill.txt"}),
                           "docs")
        for i in range(20):
            scope.add_document(Document(f"Note {i}: the weather was mild and the rice was cooked slowly.",
                                        {"source": f"n{i}.txt"}), "docs")
        bm25 = keyword_query(scope.store, "docs", "Household earthquake kit", 3, proximity=None)
        assert bm25[0].source == "drill.txt"  # by its words alone, the drill comes first
        for mode in ("keyword", "hybrid"):
            hits = scope.search("Household earthquake kit", "docs", mode=mode, top_k=3).results
            assert hits[0].source == "guide.txt", (mode, [h.source for h in hits])
            assert hits[0].metadata["title"] == "Household earthquake kit"
        assert "title" in hits[0].metadata["legs"]  # the hybrid hit came through the title leg too
        second = scope.search("Household earthquake kit", "docs", mode="keyword", top_k=3).results[1]
        assert second.metadata["title"] == "School drills"  # no loader title: the first line


def test_a_reader_reads_the_text_and_titles_of_its_own_tenant_and_collection_only(db_url: str) -> None:
    backend = open_backend(db_url)
    try:
        stores = {name: backend.for_tenant(name) for name in ("a", "b")}
        for name, store in stores.items():
            for collection in ("c", "d"):
                store.ensure_collection(collection, INFO, analyzer="bigram_en")
                store.write_documents(collection, [make_document(
                    f"{name}{collection}.txt", [f"{name} {collection} text {i}" for i in range(3)], unit_vectors(3, 1),
                    metadata={"source": f"{name}{collection}.txt", "title": f"title {name} {collection}"})])
        every = np.arange(0, 10_000, dtype=np.int64)  # every key there is, whoever's
        for name, store in stores.items():
            for collection in ("c", "d"):
                with store.reader(store.read_collection(collection)) as reader:
                    found = reader.texts(every)
                assert sorted(text for text, _, _ in found.values()) == [f"{name} {collection} text {i}"
                                                                         for i in range(3)]
                assert {title for _, _, title in found.values()} == {f"title {name} {collection}"}
                assert len({document for _, document, _ in found.values()}) == 1
    finally:
        backend.close()


def test_a_json_record_gets_no_title_but_its_own() -> None:
    from bunko.indexing import document_title

    assert document_title({"json_index": 2, "id": "q-17"}, "Check the batteries.") == ""
    assert document_title({"json_index": 0, "title": "Water"}, "Store water.") == "Water"


def test_pairs_found_in_the_joined_tokens_are_the_pairs_the_positions_find() -> None:
    """The in-order share without ``near`` finds pairs of words and CJK bigrams as runs of the joined tokens;
    it agrees with the positions (what the near share reads) on every sequence: lone one-character units,
    runs of one-character tokens of every length, words, and a token that holds the separator."""
    rng = np.random.default_rng(24)
    vocabulary = ["東", "京", "都", "の", "7", "trace", "type", "x", "東京", "a\x1fb"]
    for _ in range(3000):
        tokens = [str(t) for t in rng.choice(vocabulary, size=int(rng.integers(1, 14)))]
        query = [str(t) for t in rng.choice(vocabulary[:9], size=int(rng.integers(2, 6)))]
        units = {u for _, u in sequence_units(query)} | {u for _, u in sequence_units(tokens)}
        pairs = query_pairs(query, dict.fromkeys(units, 1.0))
        if not pairs:
            continue
        fast, _ = proximity_shares(tokens, pairs, 0)
        by_positions, _ = proximity_shares(tokens, pairs, 1)  # a window: every pair through the positions
        assert fast == by_positions, (tokens, query, pairs)


def test_a_deeper_leg_re_ranks_as_many_as_the_search_shows_and_keeps_bm25_order_below(db_url: str) -> None:
    """A hybrid search's keyword leg goes deeper than the search shows (fusion reads it): the phrase re-ranking
    takes BM25's best ``candidates``, at least as many as are shown, and the chunks past those follow in BM25's
    order and scores; without ``shown`` (a keyword search) every chunk returned is re-ranked."""
    from bunko.search.keyword import keyword_legs

    rng = np.random.default_rng(5)
    words = ["trace", "based", "type", "specialization", "dynamic", "languages", "loop", "record"]
    texts = [" ".join(rng.permutation(words[:6]).tolist() if i % 3 else words[:6]) + " " +
             " ".join(str(w) for w in rng.choice(words, size=int(rng.integers(0, 12))))
             for i in range(60)]
    how = Proximity(phrase=0.5, candidates=5)
    backend = open_backend(db_url)
    try:
        store = backend.for_tenant("t")
        store.ensure_collection("c", INFO, analyzer="bigram_en")
        store.write_documents("c", [make_document(f"d{i}.txt", [t], unit_vectors(1, i)) for i, t in enumerate(texts)])
        with store.reader(store.read_collection("c")) as reader:
            def legs(top_k: int, proximity: Proximity | None, shown: int | None = None) -> tuple[list, list]:
                ranked = keyword_legs(reader, TITLE, top_k, shown=shown, proximity=proximity).keyword
                return ranked.keys.tolist(), ranked.scores.tolist()

            deep, deep_scores = legs(30, how, shown=10)
            shown, shown_scores = legs(10, how)  # a keyword search of 10: BM25's best 10 re-ranked
            bm25, bm25_scores = legs(30, None)
            every, _ = legs(30, how)  # a keyword search of 30: all 30 re-ranked
    finally:
        backend.close()
    assert len(deep) == 30 and deep[:10] == shown and deep_scores[:10] == shown_scores
    assert deep[10:] == bm25[10:] and deep_scores[10:] == bm25_scores[10:]
    assert sorted(deep[:10]) == sorted(bm25[:10]) and deep[:10] != bm25[:10]  # re-ranked among themselves
    assert np.all(np.diff(deep_scores) <= 0)
    assert sorted(every) == sorted(bm25) and every != deep
