"""PostgreSQL's dialect for the SQL core, its optional drivers, and the bulk path of the postings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...filters import compile_postgres
from ..sql import Dialect, iso_text, json_value
from ..sql.postings import PostingsTable

try:  # optional dependencies: the "postgres" extra
    import psycopg  # noqa: F401  (imported here so the other modules can test HAVE_POSTGRES)
    from psycopg.types.json import Jsonb

    HAVE_POSTGRES = True
except ImportError:  # pragma: no cover - exercised by the optional-dependency test
    HAVE_POSTGRES = False


def _executemany(conn: Any, statement: str, rows: list[Sequence[Any]]) -> None:
    with conn.cursor() as cur:
        cur.executemany(statement, rows)


def _vector(value: Any) -> np.ndarray:
    return np.asarray(value.to_numpy() if hasattr(value, "to_numpy") else value, dtype=np.float32)


POSTGRES = Dialect(
    name="postgresql",
    mark="%s",
    now="now()",
    any_list=lambda column, values: (f"{column} = ANY(?)", [values]),
    json_in=lambda value: Jsonb(value),
    json_out=json_value,
    # psycopg parses jsonb in Python as it reads a row; text costs nothing until a hit needs it.
    json_text="::text",
    # Each chunk's document by its key: as a plain join, the planner hashes every document of the tenant
    # to look up the few a search reads (30 chunks of 1,000 documents: 1.1-1.4 ms of execution, against
    # 0.4 ms looked up by key). OFFSET 0 keeps the subquery from being folded back into that join.
    hit_join=(" LEFT JOIN LATERAL (SELECT dd.uid, dd.source, dd.metadata, dd.chunk_count FROM documents dd "
              "WHERE dd.tenant_id = c.tenant_id AND dd.id = c.document_id OFFSET 0) d ON true"),
    time_out=iso_text,
    vector_out=_vector,
    compile_filter=compile_postgres,
    executemany=_executemany,
    no_limit=None,
    for_update=" FOR UPDATE",
    # A hash index over document chunks' text (m025): text equality may use it under row-level security.
    chunk_texts=lambda texts: ("c.content = ANY(?)", [texts]),
)

# The largest toast_tuple_target PostgreSQL takes (8 kB pages): a row is compressed or moved out of line
# only above it.
_STAGE_TUPLE_TARGET = 8160


def stage_table(name: str, columns: str, stored: Sequence[str]) -> list[str]:
    """The statements that create a session's staging table (``ON COMMIT DELETE ROWS``) whose rows are kept
    as they come: a write's rows stay there for one statement, so compressing them is wasted work.

    By default PostgreSQL compresses (pglz) the text and bytea values of any row above 2 kB, as a chunk's
    row with its tsvector literals and a postings row of a common term are, and the ``INSERT ... SELECT``
    that follows decompresses them again: measured with ``perf`` on the server during
    ``bench_search.py --store postgres --chunks 100000``, ``pglz_compress`` was 34% of the writing backend's
    CPU. Rows up to ``_STAGE_TUPLE_TARGET`` bytes now stay whole in the page, and the values of the
    ``stored`` columns of a larger row move out of line uncompressed (``STORAGE EXTERNAL``).
    """
    return [f"CREATE TEMP TABLE IF NOT EXISTS {name} ({columns}) WITH (toast_tuple_target = {_STAGE_TUPLE_TARGET}) "
            "ON COMMIT DELETE ROWS",
            f"ALTER TABLE {name} " + ", ".join(f"ALTER COLUMN {column} SET STORAGE EXTERNAL" for column in stored)]


# A session's staging table for postings rows (see PostingsCopy).
POSTINGS_STAGE = stage_table("bunko_postings_stage",
                             "tenant_id int8, collection_id int8, segment int8, term text, entries bytea",
                             ["term", "entries"])
# A session's staging table for chunk rows (see PostgresVectorStore._copy_chunks); ``embedding`` is a pgvector
# ``vector``, stored EXTERNAL by its type.
CHUNK_STAGE = stage_table(
    "bunko_chunk_stage",
    "uid text, tenant_id int8, collection_id int8, document_id int8, version_id int8, chunk_index int4, "
    "start_offset int4, end_offset int4, token_count int4, content text, metadata jsonb, embedding vector, "
    "fts_text text, fts_length int4, fts_pairs_text text",
    ["uid", "content", "metadata", "fts_text", "fts_pairs_text"])


def create_stages(conn: Any) -> None:
    """Create the session's staging tables of chunk and postings rows (each pooled connection does once)."""
    for statement in (*CHUNK_STAGE, *POSTINGS_STAGE):
        conn.execute(statement)


class PostingsCopy(PostingsTable):
    """Keyword postings (see :mod:`bunko.stores.sql.postings`) written in bulk. A write of 2,000 chunks
    makes about 70,000 rows: they go through the session's staging table, in binary COPY, and one
    INSERT ... SELECT (COPY cannot write a table under row-level security): 0.35 s for 71,000 rows,
    against 1.0 s as arrays in one INSERT."""

    @staticmethod
    def prepare(conn: Any) -> None:
        """Create the session's staging table of postings rows (each pooled connection does once)."""
        for statement in POSTINGS_STAGE:
            conn.execute(statement)

    def _fetch(self, conn: Any, statement: str, params: Sequence[Any] = ()) -> list[Any]:
        # In binary: a text result doubles every blob's bytes in hex, which the client then decodes
        # (a 100k-chunk query's postings, 2.4 MB: 10 ms in text, 5 ms in binary).
        return list(conn.execute(self._d.sql(statement), params, binary=True).fetchall())

    def _insert(self, conn: Any, rows: Sequence[tuple[int, int, int, str, bytes]]) -> None:
        if not rows:
            return
        with conn.cursor() as cur:
            with cur.copy("COPY bunko_postings_stage FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(["int8", "int8", "int8", "text", "bytea"])
                for row in rows:
                    copy.write_row(row)
            cur.execute("INSERT INTO keyword_postings SELECT * FROM bunko_postings_stage")
            cur.execute("TRUNCATE bunko_postings_stage")
