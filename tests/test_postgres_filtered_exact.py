"""A narrow filtered PostgreSQL search scans the chunks that pass by their ids, found in the metadata columns,
without evaluating the filter again: a chunk's metadata never changes, nor its document's while the chunk
lives (a document written again with other metadata gets new chunk rows), so a listed chunk still passes if
it is there at all. A search working from a collection row read before such a write returns none of the
replaced chunks, and never another tenant's."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bunko.stores.base import Restriction
from bunko.stores.postgres import PostgresBackend, PostgresSettings
from bunko.testing.store_data import make_document

from .ann_data import INFO, clustered
from .pg import psycopg

pytestmark = pytest.mark.skipif(psycopg is None, reason="the postgres extra is not installed")

ROWS, PER_DOCUMENT = 3_000, 100


def _documents(vectors: np.ndarray, parts: dict[int, int]) -> list:
    return [make_document(f"d{i}", [f"d{i} {i * PER_DOCUMENT + j}" for j in range(PER_DOCUMENT)],
                          vectors[i * PER_DOCUMENT:(i + 1) * PER_DOCUMENT],
                          content_hash=f"d{i}-{parts.get(i, i % 10)}",
                          metadata={"source": f"d{i}", "part": parts.get(i, i % 10)})
            for i in range(len(vectors) // PER_DOCUMENT)]


def _rows(reader, ranked) -> list[int]:
    texts = reader.texts(ranked.keys)
    return [int(texts[k][0].split()[1]) for k in ranked.keys.tolist()]


def test_the_exact_filtered_scan_follows_the_collection_that_moved_after_its_row_was_read(pg_url: str) -> None:
    backend = PostgresBackend(pg_url, settings=PostgresSettings(hnsw_min_rows=1_000, exact_max_rows=500))
    try:
        vectors = clustered(ROWS, 31)
        store, other = backend.for_tenant("acme"), backend.for_tenant("bravo")
        for tenant in (store, other):
            tenant.ensure_collection("c", INFO)
            tenant.write_documents("c", _documents(vectors, {}))
        part = np.repeat(np.arange(ROWS // PER_DOCUMENT) % 10, PER_DOCUMENT)
        restriction = Restriction.of(None, {"part": 0})
        queries = vectors[[5, 1005, 2005]]  # chunks of d0, d10 and d20, all of part 0
        stale = store.read_collection("c")
        for q in queries:  # in step: the chunks of part 0 nearest to q, exactly
            with store.reader(stale) as reader:
                ranked = reader.nearest(q, 10, restriction)
                exact = np.flatnonzero(part == 0)[np.argsort(-(vectors[part == 0] @ q), kind="stable")[:10]]
                assert ranked.plan == "exact" and sorted(_rows(reader, ranked)) == sorted(exact.tolist())
        # d0 is written again with part 1 and the same chunks: its chunks get new rows (keys), so the keys the
        # metadata columns listed for part 0 are gone, not passing with other metadata.
        first = dataclasses.replace(_documents(vectors, {})[0], content_hash="d0-first")
        store.write_documents("c", [first])
        uids = [chunk.id for chunk in first.chunks]
        with store.reader(store.read_collection("c")) as reader:
            before = reader.keys_of(uids)
        stale = store.read_collection("c")
        with store.reader(stale) as reader:  # the columns as of this row
            assert 5 in _rows(reader, reader.nearest(queries[0], 10, restriction))
        store.write_documents("c", [dataclasses.replace(first, content_hash="d0-again", metadata={"source": "d0",
                                                                                                  "part": 1})])
        with store.reader(store.read_collection("c")) as reader:
            after = reader.keys_of(uids)
        assert len(before) == len(after) == PER_DOCUMENT and not set(before.values()) & set(after.values())
        # A search still working from the row read before finds the metadata columns in step with that row,
        # but not with the collection: none of d0's chunks.
        for q in queries:
            with store.reader(stale) as reader:
                ranked = reader.nearest(q, 10, restriction)
                rows = _rows(reader, ranked)
            assert ranked.plan == "exact" and len(rows) == 10
            assert not any(r < PER_DOCUMENT for r in rows), rows
            assert all(part[r] == 0 for r in rows)
        fresh = store.read_collection("c")
        with store.reader(fresh) as reader:
            ranked = reader.nearest(queries[0], 10, restriction)
            assert not any(r < PER_DOCUMENT for r in _rows(reader, ranked))
    finally:
        backend.close()
