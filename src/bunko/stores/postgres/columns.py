"""Filtered search on PostgreSQL: a collection's chunk ids and metadata fields held in memory as columns.

A filter over a large collection costs, in SQL, a JSON path extraction per row and per leaf; over
in-memory columns (:mod:`bunko.stores.sql.columns`) it costs about a millisecond at 100,000 chunks. The
planner sizes a restriction from them and the exact scan reads the passing rows by primary key.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from ...filters import Filter
from ..sql.columns import Column, Misaligned, filter_mask

# Metadata filters read the chunk as c and its document as d.
DOCUMENT_JOIN = " LEFT JOIN bunko.documents d ON d.tenant_id = c.tenant_id AND d.id = c.document_id"

# How many collections' metadata columns a backend keeps, and about how many rows in all (16 bytes
# a row, plus 4 a field): the least recently filtered go first.
COLUMN_COLLECTIONS = 32
COLUMN_ROWS = 4_000_000


class MetadataColumns:
    """One collection's chunk ids and the metadata fields filters have read, in memory (per process).

    The rows are the collection's chunks in id order, as of the collection row a search read
    (its ``mutation_seq`` and ``chunk_count``): while ``mutation_seq`` (bumped by every removal of
    chunks) is unchanged, new chunks are only appended, so a refresh reads the rows above the highest
    id held, and none when the rows held are as many as ``chunk_count``. When the rows held then differ
    in number from ``chunk_count`` (a writer that took its ids before another but committed after it,
    or one that committed after the row was read), or a field
    is new, or ``mutation_seq`` moved, the columns are read again whole, and if they still do not
    line up the search asks SQL instead. The filter itself is evaluated by :func:`filter_mask`.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids = np.empty(0, dtype=np.int64)
        self.docs = np.empty(0, dtype=np.int64)  # the chunk's document id, -1 for none
        self.fields: dict[tuple[str, ...], Column] = {}
        self.mutation_seq = -1
        self.high_water = 0

    def passing(self, conn: Any, scope: tuple[int, int], state: tuple[int, int], flt: Filter,
                doc_pks: list[int] | None) -> np.ndarray | None:
        """The ids of the collection's chunks that pass ``flt`` (and belong to ``doc_pks``), as of ``state``
        (the collection row's ``mutation_seq`` and ``chunk_count``); None if unsure."""
        wanted = {tuple(f.split(".")) for f in flt.fields()}
        with self.lock:
            if not self._refresh(conn, scope, state, wanted, whole=not wanted <= self.fields.keys()):
                return None
            try:
                mask = filter_mask(flt, len(self.ids), self.fields.__getitem__)
            except Misaligned:  # pragma: no cover - every field was read with the ids
                return None
            if doc_pks is not None:
                mask &= np.isin(self.docs, np.asarray(doc_pks, dtype=np.int64))
            return self.ids[mask]

    def _refresh(self, conn: Any, scope: tuple[int, int], state: tuple[int, int], wanted: set[tuple[str, ...]],
                 *, whole: bool) -> bool:
        seq, count = state
        fields = sorted(set(self.fields) | wanted)
        if seq != self.mutation_seq:
            whole = True
        elif not whole and len(self.ids) == count:
            # No removal since the rows were read (mutation_seq), and as many rows as the collection row
            # counts: nothing was appended either, so no statement (one round trip less per search).
            return True
        for _attempt in range(2):
            start = 0 if whole else self.high_water
            values = ", ".join("coalesce(c.metadata #> %s::text[], d.metadata #> %s::text[])::text"
                               for _ in fields)
            found = conn.execute(
                f"SELECT c.id, coalesce(c.document_id, -1), {values} FROM bunko.chunks c{DOCUMENT_JOIN} "
                "WHERE c.tenant_id = %s AND c.collection_id = %s AND c.id > %s ORDER BY c.id",
                [*[list(f) for f in fields for _ in (0, 1)], *scope, start],
            ).fetchall()
            ids = np.fromiter((r[0] for r in found), dtype=np.int64, count=len(found))
            docs = np.fromiter((r[1] for r in found), dtype=np.int64, count=len(found))
            if whole:
                self.ids, self.docs, self.fields = ids, docs, {f: Column() for f in fields}
            else:
                self.ids, self.docs = np.concatenate([self.ids, ids]), np.concatenate([self.docs, docs])
            for j, field in enumerate(fields):
                self.fields[field].append([r[2 + j] for r in found])
            self.mutation_seq = seq
            if len(self.ids):
                self.high_water = int(self.ids[-1])
            if len(self.ids) == count:
                return True
            self.mutation_seq = -1  # out of line with the row: read everything again
            whole = True
        return False
