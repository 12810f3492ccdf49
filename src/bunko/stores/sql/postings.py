"""Keyword postings in segments, and BM25 top-k scored over them in numpy: both stores' keyword path.

``keyword_postings`` is an inverted index of each collection in segments, as an LSM tree keeps
them: a write adds one segment (its key ``segment`` is the smallest chunk rowid it holds), with one
row per statistics term of its chunks (see ``term_counts``), plus a row for the term ``ALL`` that
lists every chunk of the segment. A row's blob is a sequence of 7-byte entries (``ENTRY``): the
chunk rowid's offset from the segment key, the term's count in the chunk and the chunk's token
count (the last two saturate at their maximum, which sends the search back to the store's own
ranking), in rowid order. The rows of a segment are adjacent in the table (the key leads the
term), so a write touches few pages. Segments merge in tiers: once the newest ``FANOUT`` or more
segments are of the last one's size class or below (classes grow by ``FANOUT``), or two or more of
them would fill a segment of ``SEGMENT_ROWS`` chunks (the largest), they become one: a few
segments per class, each posting rewritten about once per class. A delete lists the chunks under
the term ``DEAD`` of their segment (searches skip them) until the segment merges or half its
chunks are gone, when it is rewritten without them.

On SQLite one writer at a time appends rowids, so segments never overlap; on PostgreSQL two
transactions may draw chunk ids from the sequence in turns before the collection's row lock
orders them, so a segment may hold ids below a newer one's key: merges and reads sort where the
segments overlap, and a delete finds each chunk in its segment's ``ALL`` row.

A search reads the postings of its phrases in one statement and ranks exactly (``bm25_top``):
FTS5's ``bm25()`` to the bit, which both stores' keyword scores are.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ...analysis import token_pairs
from .dialect import Dialect

FANOUT = 8
SEGMENT_ROWS = 32_768
TF_MAX = 255
LENGTH_MAX = 65535
_OFFSET_MAX = 2**32 - 1
ENTRY = np.dtype([("offset", "<u4"), ("tf", "u1"), ("size", "<u2")])  # 7 bytes, packed
ALL = ""  # the term of a segment's row listing all its chunks
DEAD = " "  # the term of a segment's row listing its deleted chunks (no token holds a space)

# FTS5's bm25() (fts5_aux.c, default weights): k1 = 1.2, b = 0.75; a phrase's idf is
# ln((N - n + 0.5) / (n + 0.5)) over N rows, n of which hold the phrase, or 1e-6 when that is not
# positive; a row scores sum over the phrases, in query order, of
# idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * D / avgdl)), D its token count.
K1 = 1.2
B = 0.75
# MaxScore: the rarest phrases whose document counts add up to at most this many are essential at first.
KEYWORD_CANDIDATES = 20_000

# A chunk's postings input: (rowid, its statistics terms with their counts, its token count).
Counted = tuple[int, Mapping[str, int], int]
# A term's postings: (rowids ascending, term counts uint8, token counts uint16).
Column = tuple[np.ndarray, np.ndarray, np.ndarray]
_EMPTY: Column = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint8), np.zeros(0, dtype=np.uint16))


def term_counts(tokens: Sequence[str]) -> Counter[str]:
    """The keyword statistics terms of a chunk with their counts: its tokens, and "a b" for adjacent
    one-character tokens a, b (a CJK bigram phrase; overlaps counted, as an FTS5 phrase matches)."""
    counts = Counter(tokens)
    counts.update(term for _, term in token_pairs(tokens))
    return counts


def phrase_term(phrase: Sequence[str]) -> str | None:
    """The statistics term of a query phrase, or None for a phrase of another shape."""
    if len(phrase) == 1:
        return phrase[0]
    if len(phrase) == 2 and len(phrase[0]) == 1 and len(phrase[1]) == 1:
        return " ".join(phrase)
    return None


def bm25_idf(total_rows: int, n: int) -> float:
    """A phrase's idf as FTS5's ``bm25()`` computes it."""
    value = math.log((total_rows - n + 0.5) / (n + 0.5))
    return value if value > 0.0 else 1e-6


def pack(first: int, ids: np.ndarray, tf: np.ndarray, sizes: np.ndarray) -> bytes:
    entries = np.empty(len(ids), dtype=ENTRY)
    entries["offset"] = ids - first
    entries["tf"] = np.minimum(tf, TF_MAX)
    entries["size"] = np.minimum(sizes, LENGTH_MAX)
    return entries.tobytes()


def unpack(first: int, blob: bytes) -> Column:
    """A row's (rowids int64, term counts uint8, token counts uint16)."""
    entries = np.frombuffer(blob, dtype=ENTRY)
    return entries["offset"].astype(np.int64) + first, entries["tf"], entries["size"]


def _segment(rows: list[Counted]) -> tuple[list[tuple[str, bytes]], dict[str, int]]:
    """A new segment's rows (term, entries) from chunks in rowid order, packed in one pass (the ``ALL``
    row included), and each term's number of chunks."""
    key = rows[0][0]
    index: dict[str, int] = {}
    widths = [len(counts) for _, counts, _ in rows]
    total = sum(widths)
    terms = np.fromiter((index.setdefault(t, len(index)) for _, counts, _ in rows for t in counts),
                        dtype=np.int64, count=total)
    tf = np.fromiter((n for _, counts, _ in rows for n in counts.values()), dtype=np.int64, count=total)
    chunks = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    sizes = np.fromiter((r[2] for r in rows), dtype=np.int64, count=len(rows))
    order = np.argsort(terms, kind="stable")  # by term, each term's chunks in rowid order
    blob = pack(key, np.repeat(chunks, widths)[order], tf[order], np.repeat(sizes, widths)[order])
    counts = np.bincount(terms, minlength=len(index)).tolist()
    ends = (np.cumsum(counts) * ENTRY.itemsize).tolist()
    out = [(t, blob[start:end]) for t, start, end in zip(index, [0, *ends][:len(ends)], ends, strict=True)]
    out.append((ALL, pack(key, chunks, np.zeros(len(rows), dtype=np.int64), sizes)))
    return out, dict(zip(index, counts, strict=True))


def _level(chunks: int) -> int:
    """A segment's size class: 0 below ``FANOUT`` chunks, 1 below ``FANOUT`` squared, ..."""
    level = 0
    while chunks >= FANOUT:
        chunks //= FANOUT
        level += 1
    return level


def _ascending(entries: np.ndarray) -> np.ndarray:
    """Entries in offset order (parts from overlapping segments may interleave)."""
    offsets = entries["offset"]
    if len(offsets) > 1 and not bool((offsets[1:] > offsets[:-1]).all()):
        return entries[np.argsort(offsets, kind="stable")]
    return entries


class PostingsTable:
    """The ``keyword_postings`` table of one database, through its dialect. Every call takes the
    transaction's connection and the collection's ``scope`` (tenant row id, collection row id);
    writers hold the collection's write lock (SQLite's database lock, PostgreSQL's collection row)."""

    def __init__(self, dialect: Dialect) -> None:
        self._d = dialect

    def _run(self, conn: Any, statement: str, params: Sequence[Any] = ()) -> Any:
        return conn.execute(self._d.sql(statement), params)

    def _write_segment(self, conn: Any, scope: tuple[int, int], key: int, rows: list[tuple[str, bytes]]) -> None:
        self._insert(conn, [(*scope, key, term, blob) for term, blob in rows])

    def _insert(self, conn: Any, rows: Sequence[tuple[int, int, int, str, bytes]]) -> None:
        """Insert rows (tenant, collection, segment, term, entries); a backend may do it in bulk."""
        self._d.executemany(conn, self._d.sql(
            "INSERT INTO keyword_postings (tenant_id, collection_id, segment, term, entries) VALUES (?, ?, ?, ?, ?)"),
            list(rows))

    def segments(self, conn: Any, scope: tuple[int, int]) -> list[tuple[int, int]]:
        """The collection's segments by key: (key, chunk count), one seek each."""
        out: list[tuple[int, int]] = []
        after = -1
        while (row := self._run(
                conn, "SELECT segment, length(entries) FROM keyword_postings WHERE tenant_id = ? AND collection_id = ? "
                "AND segment > ? ORDER BY segment, term LIMIT 1", (*scope, after)).fetchone()):
            out.append((int(row[0]), int(row[1]) // ENTRY.itemsize))
            after = int(row[0])
        return out

    def _rows(self, conn: Any, scope: tuple[int, int], keys: Sequence[int], term: str) -> list[tuple[int, bytes]]:
        listed, values = self._d.any("segment", list(keys))
        return [(int(k), bytes(b)) for k, b in self._run(
            conn, f"SELECT segment, entries FROM keyword_postings WHERE tenant_id = ? AND collection_id = ? "
            f"AND {listed} AND term = ?", (*scope, *values, term)).fetchall()]

    def _dead(self, conn: Any, scope: tuple[int, int], keys: Sequence[int]) -> np.ndarray:
        """The deleted chunk rowids still listed in these segments' postings (ascending)."""
        parts = [unpack(key, blob)[0] for key, blob in self._rows(conn, scope, keys, DEAD)]
        return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)

    def add(self, conn: Any, scope: tuple[int, int], rows: list[Counted]) -> dict[str, int]:
        """Index new chunks as a new segment (then merge); returns each term's number of new chunks."""
        if not rows:
            return {}
        rows = sorted(rows, key=lambda r: r[0])
        key = rows[0][0]
        segment, found = _segment(rows)
        self._write_segment(conn, scope, key, segment)
        segments = self.segments(conn, scope)
        while True:  # merge the newest segments of the last one's size class or below, FANOUT or more at once
            top, run, total, full = _level(segments[-1][1]), 0, 0, False
            while run < len(segments) and _level(segments[-1 - run][1]) <= top:
                if total + segments[-1 - run][1] > SEGMENT_ROWS:
                    full = True  # as many as make a segment of the largest size
                    break
                total += segments[-1 - run][1]
                run += 1
            if run < (2 if full else FANOUT) or not self._merge(conn, scope, [key for key, _ in segments[-run:]]):
                break
            segments[-run:] = [(segments[-run][0], total)]
        return found

    def _merge(self, conn: Any, scope: tuple[int, int], keys: list[int]) -> bool:
        """Merge segments (ascending keys) into the first, each without its deleted chunks: each term's
        entries shifted to that key, in rowid order. False if the offsets would not fit."""
        for key in keys:
            self._purge(conn, scope, key)
        merged: dict[str, list[np.ndarray]] = {}
        listed, values = self._d.any("segment", keys)
        rows = [(int(k), t, bytes(b)) for k, t, b in self._run(
            conn, f"SELECT segment, term, entries FROM keyword_postings WHERE tenant_id = ? AND collection_id = ? "
            f"AND {listed}", (*scope, *values)).fetchall()]
        for key, group in itertools.groupby(sorted(rows, key=lambda r: r[0]), key=lambda r: r[0]):
            part = list(group)
            entries = np.frombuffer(b"".join(blob for _, _, blob in part), dtype=ENTRY).copy()
            if len(entries) and int(entries["offset"].max()) + (key - keys[0]) > _OFFSET_MAX:
                return False
            entries["offset"] += key - keys[0]
            at = 0
            for _, term, blob in part:
                n = len(blob) // ENTRY.itemsize
                merged.setdefault(term, []).append(entries[at:at + n])
                at += n
        self._run(conn, f"DELETE FROM keyword_postings WHERE tenant_id = ? AND collection_id = ? AND {listed}",
                  (*scope, *values))
        self._write_segment(conn, scope, keys[0], [(term, _ascending(np.concatenate(parts)).tobytes())
                                                   for term, parts in sorted(merged.items())])
        return True

    def _purge(self, conn: Any, scope: tuple[int, int], key: int) -> None:
        """Rewrite a segment without its deleted chunks (and so without its list of them)."""
        dead = self._dead(conn, scope, [key])
        if not len(dead):
            return
        rows = [(t, bytes(b)) for t, b in self._run(
            conn, "SELECT term, entries FROM keyword_postings WHERE tenant_id = ? AND collection_id = ? "
            "AND segment = ? AND term <> ?", (*scope, key, DEAD)).fetchall()]
        self._run(conn, "DELETE FROM keyword_postings WHERE tenant_id = ? AND collection_id = ? AND segment = ?",
                  (*scope, key))
        entries = np.frombuffer(b"".join(blob for _, blob in rows), dtype=ENTRY)
        owner = np.repeat(np.arange(len(rows)), [len(blob) // ENTRY.itemsize for _, blob in rows])
        keep = ~np.isin(entries["offset"].astype(np.int64) + key, dead)
        counts = np.bincount(owner[keep], minlength=len(rows))
        ends = (np.cumsum(counts) * ENTRY.itemsize).tolist()
        blob = entries[keep].tobytes()
        self._write_segment(conn, scope, key, [(term, blob[start:end]) for (term, _), start, end, n
                                               in zip(rows, [0, *ends][:len(ends)], ends, counts.tolist(), strict=True)
                                               if n])

    def remove(self, conn: Any, scope: tuple[int, int], rowids: Iterable[int]) -> None:
        """Take chunks out of the postings: listed as deleted in their segments, which are rewritten
        without them when they merge or once half their chunks are deleted."""
        gone = np.unique(np.fromiter(rowids, dtype=np.int64))
        segments = self.segments(conn, scope)
        if not len(gone) or not segments:
            return
        sizes = dict(segments)
        keys = np.asarray([key for key, _ in segments], dtype=np.int64)
        guess = keys[np.maximum(np.searchsorted(keys, gone, side="right") - 1, 0)]  # the newest key at or below
        owned: dict[int, np.ndarray] = {}
        # Each chunk is in the segment of the newest key at or below its rowid, unless segments overlap:
        # then in an older one. Every segment lists its chunks under ALL.
        for key in sorted(set(guess.tolist()), reverse=True) + sorted(keys.tolist(), reverse=True):
            pending = gone[gone >= key]
            if not len(pending):
                continue
            members = self._rows(conn, scope, [key], ALL)
            here = pending[np.isin(pending, unpack(key, members[0][1])[0])] if members else pending[:0]
            if len(here):
                owned[key] = np.union1d(owned.get(key, here[:0]), here)
                gone = np.setdiff1d(gone, here, assume_unique=True)
            if not len(gone):
                break
        for key, mine in owned.items():
            dead = np.union1d(self._dead(conn, scope, [key]), mine)
            self._run(conn, "DELETE FROM keyword_postings WHERE tenant_id = ? AND collection_id = ? AND segment = ? "
                      "AND term = ?", (*scope, key, DEAD))
            self._write_segment(conn, scope, key, [(DEAD, pack(key, dead, dead * 0, dead * 0))])
            if 2 * len(dead) >= sizes[key]:
                self._purge(conn, scope, key)

    def read(self, conn: Any, scope: tuple[int, int], terms: Sequence[str]) -> dict[str, Column]:
        """The postings of these terms in the collection, without deleted chunks, in one statement."""
        keys = [key for key, _ in self.segments(conn, scope)]
        if not keys or not terms:
            return {}
        listed, values = self._d.any("segment", keys)
        wanted, words = self._d.any("term", sorted({*terms, DEAD}))
        rows = self._run(conn, f"SELECT term, segment, entries FROM keyword_postings WHERE tenant_id = ? "
                               f"AND collection_id = ? AND {listed} AND {wanted}", (*scope, *values, *words)).fetchall()
        parts: dict[str, list[Column]] = {}
        for term, key, blob in sorted(rows, key=lambda r: (r[0], r[1])):
            parts.setdefault(term, []).append(unpack(int(key), bytes(blob)))
        dead = np.sort(np.concatenate([p[0] for p in parts.pop(DEAD, [])] or [np.zeros(0, dtype=np.int64)]))
        out: dict[str, Column] = {}
        for term, columns in parts.items():
            ids, tf, sizes = (columns[0] if len(columns) == 1 else
                              tuple(np.concatenate(c) for c in zip(*columns, strict=True)))
            if len(ids) > 1 and not bool((ids[1:] > ids[:-1]).all()):  # overlapping segments
                order = np.argsort(ids, kind="stable")
                ids, tf, sizes = ids[order], tf[order], sizes[order]
            if len(dead):
                live = ~np.isin(ids, dead)
                ids, tf, sizes = ids[live], tf[live], sizes[live]
            out[term] = ids, tf, sizes
        return out

    def rank(self, conn: Any, scope: tuple[int, int], terms: Sequence[str], counts: Sequence[int],
             idf: Sequence[float], average: float, top_k: int, budget: int, *, k1: float = K1, b: float = B,
             allowed: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``bm25_top`` over the postings of the query's phrase terms, given each one's document count
        in the collection (0: none) and idf; with ``allowed`` (ascending rowids), over those chunks only
        (scored with the collection's statistics, as an unrestricted search scores them)."""
        found = self.read(conn, scope, sorted({t for t, n in zip(terms, counts, strict=True) if n}))
        columns = [found.get(t, _EMPTY) if n else _EMPTY for t, n in zip(terms, counts, strict=True)]
        if allowed is not None:
            columns = [(c[0][keep], c[1][keep], c[2][keep])
                       for c in columns for keep in (np.isin(c[0], allowed, assume_unique=True),)]
        return bm25_top(columns, list(idf), average, top_k, budget, k1=k1, b=b)


def bm25_top(columns: list[Column], idf: list[float], average: float, top_k: int, budget: int, *,
             k1: float = K1, b: float = B) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The exact BM25 top-k over phrases' postings (in query order, each with its idf): (rowids,
    scores, token counts) best first, ties by rowid; None when a saturated count makes the postings
    inexact (the store ranks instead).

    MaxScore: the phrases ranked by their bound idf x (k1 + 1), the first ("essential") ones,
    whose postings add up to the budget, are scored for every row that holds one; their k-th best
    share is a floor for the final k-th score, and a row's final score is at most its share plus
    the other phrases' bounds (``rest``). While ``rest`` reaches the floor, more phrases become
    essential. Then only the rows whose share plus ``rest`` reaches the floor are scored on every
    phrase, exactly as ``bm25()`` does: the same float operations, the phrases added in query order.
    """
    known = [j for j in range(len(columns)) if len(columns[j][0])]
    if not known:
        return np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=np.int64)
    for j in known:
        if (columns[j][1] == TF_MAX).any() or (columns[j][2] == LENGTH_MAX).any():
            return None
    counts = [len(c[0]) for c in columns]
    order = sorted(known, key=lambda j: (-idf[j], j))
    bound = [idf[j] * (k1 + 1.0) for j in order]

    def contribution(j: int, tf: np.ndarray, norm: np.ndarray) -> np.ndarray:
        f = tf.astype(np.float64)
        return idf[j] * ((f * (k1 + 1.0)) / (f + norm))

    split, total = 0, 0
    while split < len(order) and (split == 0 or total + counts[order[split]] <= budget):
        total += counts[order[split]]
        split += 1
    slack = 1.0 + 1e-9  # float rounding of sums taken in another order
    while True:
        rest = sum(bound[split:])
        essential = order[:split]
        ids = np.concatenate([columns[j][0] for j in essential])
        rows, where = np.unique(ids, return_inverse=True)
        sizes = np.empty(len(rows), dtype=np.int64)
        sizes[where] = np.concatenate([columns[j][2] for j in essential])
        norm = k1 * (1 - b + b * sizes.astype(np.float64) / average)
        share = np.zeros(len(rows), dtype=np.float64)
        at = 0
        for j in essential:
            found, tf, _ = columns[j]
            place = where[at:at + len(found)]
            share[place] += contribution(j, tf, norm[place])
            at += len(found)
        if split == len(order):
            keep = np.ones(len(rows), dtype=bool)  # every phrase is scored: no floor needed
            break
        if len(rows) >= top_k:
            floor = np.partition(share, len(rows) - top_k)[len(rows) - top_k]
            if rest * slack < floor:
                keep = (share + rest) * slack >= floor
                break
        budget *= 4  # widen: at least one more phrase, then as many as the larger budget takes
        split += 1
        total = sum(counts[j] for j in order[:split])
        while split < len(order) and total + counts[order[split]] <= budget:
            total += counts[order[split]]
            split += 1
    rows, norm, sizes = rows[keep], norm[keep], sizes[keep]
    score = np.zeros(len(rows), dtype=np.float64)
    for j in known:  # query order, as bm25() adds them
        found, tf, _ = columns[j]
        place = np.minimum(np.searchsorted(found, rows), len(found) - 1)
        hit = found[place] == rows
        score[hit] += contribution(j, tf[place[hit]], norm[hit])
    best = np.lexsort((rows, -score))[:top_k]
    return rows[best], score[best], sizes[best]
