"""Bulk writes: keyword analysis in worker processes, the next batch analyzed while one is written, term
counts in columns -- the same keyword index as chunk by chunk, on both stores."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from bunko import workers
from bunko.analysis import BigramAnalyzer, fts5_document, get_analyzer, register_analyzer, token_pairs
from bunko.search import keyword_query
from bunko.stores import StoreBackend
from bunko.stores.postgres.store import keyword_literals
from bunko.stores.sql.keywords import KeywordBatch, PendingKeywords, count_terms
from bunko.stores.sql.postings import term_counts
from bunko.testing.oracles import keyword_oracle
from bunko.testing.store_suite import INFO, make_document, unit_vectors

TEXTS = [
    "東京都の防災マニュアル、2024年版。非常用の水は一人一日3リットル。",
    "Running flows of the naïve café; the flows run.",
    "水水水 の の 水",
    "",
    "ソウル 서울 北京 Zürich 123 abc-def",
    "東京 東京 大阪",
]


def _columns(batch: KeywordBatch) -> list[Counter[str]]:
    found: list[Counter[str]] = [Counter() for _ in range(len(batch))]
    for owner, term, tf in zip(batch.owner.tolist(), batch.term.tolist(), batch.tf.tolist(), strict=True):
        assert term not in found[owner]  # one entry per distinct term of a chunk
        found[owner][batch.terms[term]] = tf
    return found


def test_term_columns_count_tokens_and_pairs_as_chunk_by_chunk() -> None:
    analyzer = get_analyzer("combined_en")
    tokens = [analyzer.index_tokens(t) for t in TEXTS]
    batch = count_terms(tokens, [fts5_document(t) for t in tokens])
    assert _columns(batch) == [term_counts(t) for t in tokens]
    assert batch.sizes.tolist() == [len(t) for t in tokens]
    assert batch.rendered == [" ".join(t) for t in tokens]


def test_pairs_past_the_limit_are_not_counted() -> None:
    tokens = [list("水の水の水")]
    limited = _columns(count_terms(tokens, [""], pair_limit=2))[0]
    expected = Counter(tokens[0])
    expected.update(term for i, term in token_pairs(tokens[0]) if i < 2)
    assert limited == expected
    assert limited["水 の"] == 1 and limited["の 水"] == 1  # all: 2 and 2


def test_batches_join_and_select_as_analyzed_alone() -> None:
    analyzer = get_analyzer("combined_en")
    tokens = [analyzer.index_tokens(t) for t in TEXTS]
    whole = count_terms(tokens, [fts5_document(t) for t in tokens])
    joined = KeywordBatch.join([count_terms(tokens[:2], ["a", "b"]), count_terms(tokens[2:], ["c", "d", "e", "f"])])
    assert _columns(joined) == _columns(whole)
    picked = joined.select([1, 4, 5])
    assert _columns(picked) == [_columns(whole)[i] for i in (1, 4, 5)]
    assert picked.rendered == ["b", "e", "f"] and picked.sizes.tolist() == [len(tokens[i]) for i in (1, 4, 5)]
    assert picked.document_frequencies()["東京"] == 1


def test_a_large_batch_is_analyzed_in_the_workers_as_here() -> None:
    analyzer = get_analyzer("combined_en")
    texts = [f"{TEXTS[i % len(TEXTS)]} 第{i}条" for i in range(600)]
    workers.set_worker_count(2)
    try:
        pending = PendingKeywords(keyword_literals, analyzer, texts, 16382)
        assert len(pending._parts) == 2 and workers._pool is not None  # two parts, one per worker
        parallel = pending.result()
    finally:
        workers.set_worker_count(None)
    workers.set_worker_count(0)
    try:
        here = PendingKeywords(keyword_literals, analyzer, texts, 16382).result()
    finally:
        workers.set_worker_count(None)
    assert _columns(parallel) == _columns(here)
    assert parallel.rendered == here.rendered == [keyword_literals(analyzer.index_tokens(t)) for t in texts]


def _documents(n_docs: int, chunks: int, seed: int) -> list:
    texts = [f"{TEXTS[(d + i) % len(TEXTS)]} 文書{d} 第{i}節" for d in range(n_docs) for i in range(chunks)]
    return [make_document(f"doc{d}.txt", texts[d * chunks:(d + 1) * chunks], unit_vectors(chunks, seed + d))
            for d in range(n_docs)]


def test_write_batches_is_write_documents_in_turn(store_backend: StoreBackend) -> None:
    """Batches written with the next analyzed meanwhile give the keyword index a batch at a time gives."""
    piped, single = store_backend.for_tenant("piped"), store_backend.for_tenant("single")
    for store in (piped, single):
        store.ensure_collection("c", INFO)
    documents = _documents(12, 40, 10)  # 480 chunks: batches of 160 go to the workers
    batches = [documents[0:4], documents[4:8], documents[8:12]]
    results = [r for batch in piped.write_batches("c", batches) for r in batch]
    assert [r.status for r in results] == ["created"] * 12
    for batch in batches:
        single.write_documents("c", batch)
    # a new version of one document, through the pipeline
    changed = make_document("doc3.txt", ["水の量 変わった", "東京 大阪 京都"], unit_vectors(2, 99))
    assert [r.status for batch in piped.write_batches("c", [[changed]]) for r in batch] == ["replaced"]
    single.write_documents("c", [changed])
    for query in ("東京", "水", "文書3 第2節", "flows run", "第1節"):
        scores = [round(h.score, 6) for h in keyword_query(piped, "c", query, 10)]
        assert scores and scores == [round(h.score, 6) for h in keyword_query(single, "c", query, 10)]
        assert [(h.chunk_id, round(h.score, 6)) for h in keyword_query(piped, "c", query, 10, proximity=None)] == \
            [(i, round(s, 6)) for i, s in keyword_oracle(piped, "c", query, 10)]
    assert piped.count("c") == single.count("c") == 11 * 40 + 2


def test_write_batches_stay_in_their_tenant(store_backend: StoreBackend) -> None:
    mine, other = store_backend.for_tenant("mine"), store_backend.for_tenant("other")
    mine.ensure_collection("c", INFO)
    other.ensure_collection("c", INFO)
    list(mine.write_batches("c", [_documents(8, 40, 30)]))
    assert other.count("c") == 0 and keyword_query(other, "c", "東京", 10) == []
    assert mine.count("c") == 320 and keyword_query(mine, "c", "東京", 10)


class _Plugin(BigramAnalyzer):
    name = "plugin_upper"


def test_a_plugin_analyzer_runs_in_the_writing_process(store_backend: StoreBackend) -> None:
    """A worker could not build an analyzer registered here at run time: its writes are analyzed here."""
    register_analyzer("plugin_upper", _Plugin)
    store = store_backend.for_tenant("acme")
    store.ensure_collection("c", INFO, analyzer="plugin_upper")
    list(store.write_batches("c", [_documents(8, 40, 50)]))  # 320 chunks: enough for the workers
    assert store.count("c") == 320 and keyword_query(store, "c", "東京", 5)


def test_workers_do_not_run_the_main_script_again(tmp_path: Path) -> None:
    """A script without a main guard writes once: the workers import bunko's modules, not the script."""
    marker = tmp_path / "runs.txt"
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(f"""
        from bunko import workers
        from bunko.analysis import get_analyzer, fts5_document
        from bunko.stores.sql.keywords import PendingKeywords
        with open({str(marker)!r}, "a") as f:
            f.write("ran\\n")
        workers.set_worker_count(2)
        batch = PendingKeywords(fts5_document, get_analyzer("bigram"), ["水の量 " * 3] * 600, None).result()
        assert len(batch) == 600
        assert workers._pool is not None
        workers.shutdown()
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src")})
    assert done.returncode == 0, done.stderr
    assert marker.read_text().splitlines() == ["ran"]


@pytest.mark.parametrize("count", [0, 3])
def test_the_setting_picks_the_workers(count: int) -> None:
    from bunko.config import Settings

    assert Settings.resolve("sqlite:///x.db", ingest_workers=count).ingest.workers == count
    assert Settings.resolve("sqlite:///x.db").ingest.workers is None
    workers.set_worker_count(count)
    try:
        assert workers.worker_count() == count
    finally:
        workers.set_worker_count(None)
    assert workers.worker_count() == workers.machine_cores() >= 1


def test_a_worker_killed_while_it_analyzes_leaves_a_whole_write(store_backend: StoreBackend, tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker process SIGKILLed while it holds a part of a write: the part is analyzed in the writing
    process and the write goes in whole, with the same keyword index as a write without workers."""
    import signal
    import threading
    import time

    from bunko import crashpoints

    monkeypatch.setenv("BUNKO_CRASHPOINT_DIR", str(tmp_path))
    monkeypatch.setenv("BUNKO_CRASHPOINT_PAUSE", "keywords.worker")
    monkeypatch.setattr(crashpoints, "_config", (None, frozenset()))  # this process does not pause
    store = store_backend.for_tenant("acme")
    store.ensure_collection("c", INFO)
    store.ensure_collection("ref", INFO)
    documents = _documents(8, 40, 70)  # 320 chunks: two parts, one per worker
    workers.shutdown()  # new workers, started with the pause in their environment
    workers.set_worker_count(2)
    outcome: list[object] = []
    writer = threading.Thread(target=lambda: outcome.append(store.write_documents("c", documents)))
    try:
        writer.start()
        reached = tmp_path / "keywords.worker.reached"
        deadline = time.monotonic() + 600
        while not (reached.exists() and reached.read_text().split()):
            assert time.monotonic() < deadline and writer.is_alive(), "no worker reached the analysis"
            time.sleep(0.05)
        victim = int(reached.read_text().split()[0])
        assert victim != os.getpid()
        os.kill(victim, signal.SIGKILL)
        (tmp_path / "keywords.worker.go").touch()  # the other worker may go on
        writer.join(600)
        assert not writer.is_alive()
    finally:
        (tmp_path / "keywords.worker.go").touch()
        workers.set_worker_count(None)
        workers.shutdown()
    assert len(outcome) == 1, "the write raised"
    assert [r.status for r in outcome[0]] == ["created"] * 8  # type: ignore[attr-defined]
    assert store.count("c") == 320
    workers.set_worker_count(0)
    try:
        store.write_documents("ref", _documents(8, 40, 70))
    finally:
        workers.set_worker_count(None)
    for query in ("東京", "文書3 第7節", "flows café"):
        mine = [(h.content, round(h.score, 6)) for h in keyword_query(store, "c", query, 10)]
        reference = [(h.content, round(h.score, 6)) for h in keyword_query(store, "ref", query, 10)]
        assert mine == reference and mine


class _Recording:
    """A store that notes when a write is started and when it is written (everything else: the store's)."""

    def __init__(self, store: object) -> None:
        self._store = store
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> object:
        return getattr(self._store, name)

    def begin_write(self, collection: str, documents: list) -> object:
        self.calls.append(f"begin {len(documents)}")
        return self._store.begin_write(collection, documents)  # type: ignore[attr-defined]

    def finish_write(self, pending: object) -> list:
        self.calls.append("finish")
        return self._store.finish_write(pending)  # type: ignore[attr-defined]


def test_a_copy_writes_one_batch_while_the_next_is_analyzed(store_backend: StoreBackend, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Store-to-store copies (and imports) start each batch before they write the one before it, and land
    what a plain write would: the same chunks and keyword ranking, in the target tenant only."""
    from bunko.portability import copy_tenant, writer
    from bunko.stores import open_backend

    monkeypatch.setattr(writer, "WRITE_CHUNKS", 80)  # 2 documents of 40 chunks a batch
    source_backend = open_backend(f"sqlite:///{tmp_path / 'source.db'}")
    try:
        source = source_backend.for_tenant("acme")
        source.ensure_collection("c", INFO)
        source.write_documents("c", _documents(6, 40, 90))
        target = _Recording(store_backend.for_tenant("acme-copy"))
        summary = copy_tenant(source, target, collections=["c"])  # type: ignore[arg-type]
        assert summary.verified
        assert target.calls == ["begin 2", "begin 2", "finish", "begin 2", "finish", "finish"]
        copied = store_backend.for_tenant("acme-copy")
        assert copied.count("c") == 240
        for query in ("東京", "文書3 第7節"):
            assert [h.content for h in keyword_query(copied, "c", query, 10)] == \
                [h.content for h in keyword_query(source, "c", query, 10)]
        assert "c" not in [c.name for c in store_backend.for_tenant("acme").list_collections()]
    finally:
        source_backend.close()


def test_the_ungrouped_pairs_literal_stores_the_grouped_tsvector(pg_url: str) -> None:
    """PostgreSQL's cast merges a pair's positions: the literal of one entry per occurrence stores exactly
    the tsvector of the pairs grouped by term (quotes and backslashes included)."""
    import psycopg

    from bunko.analysis import pairs_literal, pairs_positions_literal

    analyzer = get_analyzer("combined_en")
    token_lists = [analyzer.index_tokens(t) for t in TEXTS] + [list("水の水の水の量"), list("東'京\\都東'京"),
                                                              ["a"], [], list("東") * 40]
    with psycopg.connect(pg_url) as conn:
        for tokens in token_lists:
            for limit in (16382, 3):
                grouped: dict[str, list[int]] = {}
                for i, term in token_pairs(tokens[:limit + 1]):
                    grouped.setdefault(term, []).append(i + 1)
                stored = conn.execute("SELECT %s::tsvector::text, %s::tsvector::text",
                                      (pairs_literal(grouped), pairs_positions_literal(tokens, limit))).fetchone()
                assert stored[0] == stored[1], tokens
