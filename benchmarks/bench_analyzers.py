"""Keyword analyzers compared without the embedder: speed, and BM25 quality on a BEIR-style dataset.

For each analyzer the corpus (title + text, as ``bunko eval`` ingests it, one row per
document, no chunking) is analyzed once (timed: characters/s and tokens/s, one thread),
stored in an in-memory FTS5 table exactly as the SQLite store stores it, and every judged
query is run as the store runs it (quoted phrases ORed, ``bm25()``), giving nDCG@10 and
recall@10. ``bunko eval --mode keyword --analyzer NAME`` is the end-to-end figure; this
one isolates the analyzer and takes seconds.

``--mecab`` adds MeCab (fugashi + unidic-lite, if installed) as a comparison point for the
Sudachi-based analyzers; it is not a bunko analyzer.

Usage::

    python benchmarks/bench_analyzers.py ../shared/data/jsquad-dev [--analyzers bigram combined] [--mecab]
"""

from __future__ import annotations

import argparse
import sqlite3
import time
from pathlib import Path
from typing import Any

from bunko.analysis import (
    _CJK_CHAR_RE,
    _SKIP_POS,
    _TOKEN_RE,
    _WORD_RE,
    Phrase,
    _distinct,
    _normalize,
    analyzer_names,
    fts5_document,
    fts5_query,
    get_analyzer,
)
from bunko.evaluation import load_beir, ndcg_at_k, recall_at_k


class MeCabComparison:
    """MeCab (fugashi + unidic-lite) morphemes for CJK runs, words otherwise: the same rules as ``sudachi``."""

    name = "mecab (comparison)"

    def __init__(self) -> None:
        import fugashi

        self._tagger = fugashi.Tagger()

    def index_tokens(self, text: str) -> list[str]:
        out: list[str] = []
        for cjk, word in _TOKEN_RE.findall(_normalize(text)):
            if word:
                out.append(word)
                continue
            for w in self._tagger(cjk):
                if (w.feature.pos1 or "") not in _SKIP_POS and _CJK_CHAR_RE.search(w.surface):
                    out.extend(_WORD_RE.findall((w.feature.orthBase or w.surface).lower()))
        return out

    def query_phrases(self, text: str) -> list[Phrase]:
        return _distinct((t,) for t in self.index_tokens(text))


def measure(analyzer: Any, dataset: Any) -> dict[str, float]:
    ids = list(dataset.corpus)
    texts = ["\n\n".join(p for p in dataset.corpus[i] if p.strip()) for i in ids]
    analyzer.index_tokens("warm up 準備")
    started = time.perf_counter()
    tokens = [analyzer.index_tokens(t) for t in texts]
    elapsed = time.perf_counter() - started
    db = sqlite3.connect(":memory:")
    db.execute("CREATE VIRTUAL TABLE f USING fts5 (terms, tokenize = 'unicode61 remove_diacritics 0')")
    db.executemany("INSERT INTO f (rowid, terms) VALUES (?, ?)", [(i, fts5_document(t)) for i, t in enumerate(tokens)])
    queries = [(q, t) for q, t in dataset.queries.items() if any(s >= 1 for s in dataset.qrels.get(q, {}).values())]
    ndcg, recall = [], []
    for query_id, text in queries:
        match = fts5_query(analyzer.query_phrases(text))
        rows = db.execute("SELECT rowid FROM f WHERE f MATCH ? ORDER BY bm25(f) LIMIT 10", (match,)).fetchall() \
            if match else []
        ranked = [ids[r[0]] for r in rows]
        ndcg.append(ndcg_at_k(ranked, dataset.qrels[query_id], 10))
        recall.append(recall_at_k(ranked, dataset.qrels[query_id], 10))
    return {"ndcg@10": sum(ndcg) / len(ndcg), "recall@10": sum(recall) / len(recall),
            "chars_per_s": sum(map(len, texts)) / elapsed, "tokens_per_s": sum(map(len, tokens)) / elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("dataset", help="a BEIR-style folder (corpus.jsonl, queries.jsonl, qrels.tsv)")
    parser.add_argument("--analyzers", nargs="+", default=analyzer_names())
    parser.add_argument("--mecab", action="store_true", help="add MeCab (fugashi + unidic-lite) for comparison")
    args = parser.parse_args()
    if not Path(args.dataset).is_dir():
        parser.error(f"{args.dataset}: no such dataset folder (the evaluation sets live in ../shared/data)")
    dataset = load_beir(args.dataset)
    analyzers: list[Any] = [get_analyzer(name) for name in args.analyzers]
    if args.mecab:
        analyzers.append(MeCabComparison())
    print(f"{dataset.name}: {len(dataset.corpus)} documents")
    print(f"{'analyzer':20s} {'nDCG@10':>8s} {'recall@10':>9s} {'chars/s':>11s} {'tokens/s':>11s}")
    for analyzer in analyzers:
        r = measure(analyzer, dataset)
        print(f"{analyzer.name:20s} {r['ndcg@10']:8.4f} {r['recall@10']:9.4f} {r['chars_per_s']:11,.0f} "
              f"{r['tokens_per_s']:11,.0f}", flush=True)


if __name__ == "__main__":
    main()
