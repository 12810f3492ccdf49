"""Keyword rankings the tests hold the postings to: each database's own BM25 over a collection.

bunko ranks keywords in one place, from the postings (:mod:`bunko.search.keyword`). These rankers
compute the same BM25 another way, from what the stores keep beside the postings, so a test can ask
for the same chunks, the same scores to the bit and the same order of ties:

* SQLite: FTS5's own ``bm25()`` over an FTS5 table in memory, filled with the analyzer's tokens of the
  text of every chunk of the collection, analyzed again here (the store keeps no FTS5 table: not its
  stored terms, its postings nor its counters);
* PostgreSQL: BM25 in SQL over the chunks' tsvectors (``fts``), with the phrases' term and document
  frequencies counted there, and N and the average length from the collection's counters.

Both need phrases of at most two tokens (every built-in analyzer's). They read the whole collection, so
they are for tests, not for searches.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable, Sequence
from typing import Any

from ..analysis import fts5_document, fts5_query, get_analyzer, tsquery_literal
from ..filters import FilterLike, as_filter
from ..search.keyword import K1, B, bm25_idf


def keyword_oracle(store: Any, collection: str, query: str, top_k: int, *,
                   document_ids: Sequence[str] | None = None, filter: FilterLike = None) -> list[tuple[str, float]]:
    """The top-k (chunk id, score) of ``query`` in a collection of a tenant-bound SQL store, ranked by the
    database's own BM25, inside ``document_ids`` and ``filter``."""
    flt = as_filter(filter)
    with store.session() as (conn, tenant_pk):
        found = conn.execute(store.dialect.sql(
            "SELECT id, analyzer, chunk_count, write_seq, mutation_seq, created_at FROM collections "
            "WHERE tenant_id = ? AND name = ?"),
            (tenant_pk, collection)).fetchone()
        if found is None:
            return []
        collection_pk, analyzer, chunks = int(found[0]), found[1], int(found[2])
        phrases = get_analyzer(analyzer).query_phrases(query)
        restriction = _restriction(store.dialect, tenant_pk, document_ids, flt)
        if store.kind == "sqlite":
            # The database file, the collection and its counters name what the chunks are.
            version = (conn.execute("PRAGMA database_list").fetchone()[2], store.database, tenant_pk,
                       collection_pk, *found[2:])
            ranked = _fts5(conn, tenant_pk, collection_pk, analyzer, version, phrases, top_k, restriction)
        else:
            ranked = _postgres(conn, tenant_pk, collection_pk, chunks, phrases, top_k, restriction)
        uids = dict(conn.execute(store.dialect.sql("SELECT id, uid FROM chunks WHERE tenant_id = ? "
                                                   "AND collection_id = ?"), (tenant_pk, collection_pk)).fetchall())
    return [(uids[key], score) for key, score in ranked]


def _restriction(dialect: Any, tenant_pk: int, document_ids: Sequence[str] | None,
                 flt: Any) -> tuple[str, str, list[Any]]:
    """The JOIN, the `` AND ...`` conditions on the chunks ``c`` and their parameters, in the store's dialect,
    that keep a ranking inside ``document_ids`` and ``flt``."""
    join, restrict, params = "", "", []
    if document_ids is not None:
        inside, values = dialect.any("uid", [str(d) for d in document_ids])
        restrict += dialect.sql(f" AND c.document_id IN (SELECT id FROM documents WHERE tenant_id = ? AND {inside})")
        params += [tenant_pk, *values]
    if flt is not None:
        join = " LEFT JOIN documents d ON d.id = c.document_id AND d.tenant_id = c.tenant_id"
        where, where_params = dialect.compile_filter(flt)
        restrict += f" AND {where}"
        params += where_params
    return join, restrict, params


# The in-memory FTS5 table of the collection version asked last (tests ask one collection many questions).
_FTS5: dict[Hashable, sqlite3.Connection] = {}


def _fts5_table(conn: Any, tenant_pk: int, collection_pk: int, analyzer: str, version: Hashable) -> sqlite3.Connection:
    """An FTS5 table ``f`` in memory holding every chunk of the collection at ``version``: its rowid the
    chunk's, its text the collection's analyzer's tokens of the chunk's content."""
    held = _FTS5.get(version)
    if held is not None:
        return held
    for old in _FTS5.values():
        old.close()
    _FTS5.clear()
    tokens = get_analyzer(analyzer).index_tokens
    memory = sqlite3.connect(":memory:")
    memory.execute("CREATE VIRTUAL TABLE f USING fts5 (terms, tokenize = 'unicode61 remove_diacritics 0')")
    memory.executemany("INSERT INTO f (rowid, terms) VALUES (?, ?)", (
        (int(key), fts5_document(tokens(text))) for key, text in conn.execute(
            "SELECT id, content FROM chunks WHERE tenant_id = ? AND collection_id = ? ORDER BY id",
            (tenant_pk, collection_pk))))
    _FTS5[version] = memory
    return memory


def _fts5(conn: Any, tenant_pk: int, collection_pk: int, analyzer: str, version: Hashable,
          phrases: list[tuple[str, ...]], top_k: int,
          restriction: tuple[str, str, list[Any]]) -> list[tuple[int, float]]:
    """FTS5's ``bm25()`` of the whole query over the collection's chunks (in memory), kept to the chunks
    that pass the restriction."""
    match = fts5_query(phrases)
    if match is None:
        return []
    join, restrict, params = restriction
    allowed = {int(r[0]) for r in conn.execute(
        f"SELECT c.id FROM chunks c{join} WHERE c.tenant_id = ? AND c.collection_id = ?{restrict}",
        [tenant_pk, collection_pk, *params])}
    scored = _fts5_table(conn, tenant_pk, collection_pk, analyzer, version).execute(
        "SELECT rowid, -bm25(f) AS score FROM f WHERE f MATCH ? ORDER BY score DESC, rowid", (match,)).fetchall()
    return [(int(key), float(score)) for key, score in scored if int(key) in allowed][:top_k]


# Each phrase's term frequency in each chunk that holds it, from the tsvectors:
# * ``candidates``: chunks matching any phrase (bunko.keyword_match: a scan of the collection's rows as the
#   schema owner, within the session's tenant; its GIN indexes are gone since m024);
# * ``lexemes``: each query token's positions in each candidate, cut out of the tsvector in C;
# * ``tf``: per (phrase, chunk), how often the phrase occurs: the token's positions, or for a two-token
#   phrase the positions p of the first with p + 1 among the second's.
_TF_SQL = """
WITH q AS (
    SELECT i, t1, nullif(t2, '') AS t2 FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS x(t1, t2, i)
), candidates AS MATERIALIZED (
    SELECT c.id, c.fts, c.fts_length
    FROM bunko.keyword_match(%s, %s::tsquery, NULL) AS m(id) JOIN bunko.chunks c ON c.id = m.id
    WHERE c.tenant_id = %s AND c.collection_id = %s
), lexemes AS MATERIALIZED (
    SELECT k.id, u.lexeme, u.positions
    FROM candidates k, unnest(ts_filter(setweight(k.fts, 'A', %s::text[]), '{a}')) AS u
), tf AS (
    SELECT q.i, l.id, cardinality(l.positions) AS tf FROM q JOIN lexemes l ON l.lexeme = q.t1 WHERE q.t2 IS NULL
    UNION ALL
    SELECT i, id, tf FROM (
        SELECT q.i, a.id, (SELECT count(*) FROM unnest(a.positions) AS p WHERE p + 1 = ANY (b.positions)) AS tf
        FROM q JOIN lexemes a ON a.lexeme = q.t1 JOIN lexemes b ON b.id = a.id AND b.lexeme = q.t2
    ) pairs WHERE tf > 0
)"""

# A phrase's document frequency is its number of chunks, counted before any restriction (a restricted
# search scores as an unrestricted one).
_DF_SQL = _TF_SQL + " SELECT i, count(*) FROM tf GROUP BY i"

# FTS5's expression, summed in the query's phrase order, with the idf of each phrase given.
_SCORE_SQL = _TF_SQL + """, idf AS (
    SELECT * FROM unnest(%s::int8[], %s::float8[]) AS x(i, idf)
), scored AS (
    SELECT t.id, sum(idf.idf * ((t.tf * (%s + 1.0)) / (t.tf + %s * (1 - %s + %s * k.fts_length / %s::float8)))
                     ORDER BY t.i) AS score
    FROM tf t JOIN idf USING (i) JOIN candidates k ON k.id = t.id GROUP BY t.id
)
SELECT s.id, s.score FROM scored s JOIN bunko.chunks c ON c.id = s.id{join}
WHERE c.tenant_id = %s{restrict}
ORDER BY s.score DESC, s.id LIMIT %s
"""


def _postgres(conn: Any, tenant_pk: int, collection_pk: int, chunks: int, phrases: list[tuple[str, ...]],
              top_k: int, restriction: tuple[str, str, list[Any]]) -> list[tuple[int, float]]:
    """BM25 in SQL over the chunks' tsvectors."""
    tsquery = tsquery_literal(phrases)
    if tsquery is None:
        return []
    tokens = int(conn.execute("SELECT keyword_tokens FROM bunko.collections WHERE tenant_id = %s AND id = %s",
                              (tenant_pk, collection_pk)).fetchone()[0])
    matching = [[p[0] for p in phrases], [p[1] if len(p) > 1 else "" for p in phrases], collection_pk, tsquery,
                tenant_pk, collection_pk, sorted({t for p in phrases for t in p})]
    df = dict(conn.execute(_DF_SQL, matching).fetchall())
    known = sorted(df)
    join, restrict, params = restriction
    rows = conn.execute(
        _SCORE_SQL.replace("{join}", join).replace("{restrict}", restrict),
        [*matching, known, [bm25_idf(chunks, int(df[i])) for i in known], K1, K1, B, B,
         max(tokens, 1) / max(chunks, 1), tenant_pk, *params, top_k]).fetchall()
    return [(int(r[0]), float(r[1])) for r in rows]


__all__ = ["keyword_oracle"]
