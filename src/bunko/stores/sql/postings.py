"""Keyword postings in segments: the store side of keyword search, written once for both stores.

``keyword_postings`` is an inverted index of each collection in segments, as an LSM tree keeps
them: a write adds one segment (its key ``segment`` is the smallest chunk rowid it holds), with one
row per statistics term of its chunks (see ``term_counts``), plus a row for the term ``ALL`` that
lists every chunk of the segment. A row's blob is a sequence of 8-byte entries (``ENTRY``): the
chunk rowid's offset from the segment key, the term's count in the chunk and the chunk's token
count, in rowid order. A chunk holds at most ``MAX_TOKENS`` tokens (a write of a longer one is
refused), so no count is ever cut short. The rows of a segment are adjacent in the table (the key
leads the term), so a write touches few pages. Segments merge in tiers: once the newest ``FANOUT``
or more segments are of the last one's size class or below (classes grow by ``FANOUT``), or two or
more of them would fill a segment of ``SEGMENT_ROWS`` chunks (the largest), they become one: a few
segments per class, each posting rewritten about once per class. A delete lists the chunks under
the term ``DEAD`` of their segment (searches skip them) until the segment merges or half its
chunks are gone, when it is rewritten without them.

On SQLite one writer at a time appends rowids, so segments never overlap; on PostgreSQL two
transactions may draw chunk ids from the sequence in turns before the collection's row lock
orders them, so a segment may hold ids below a newer one's key: merges and reads sort where the
segments overlap, and a delete finds each chunk in its segment's ``ALL`` row.

A search reads the postings of its terms (``PostingsTable.read``) and ranks them above the stores
(:mod:`bunko.search.keyword`). Each backend holds whole segments in memory within a budget
(``SegmentIndex``): a segment never changes under its key and chunk list, so a search takes its terms'
entries from the segments held and reads only the others' from the table (``read_held``).

This is format 2 of the postings. Migrations fill the table with this module (SQLite migration 11,
PostgreSQL migration 15), so it stays as it is: a change of format is a new module beside this one
and a migration that rebuilds the postings with it.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ...analysis import token_pairs
from ...errors import VectorStoreError
from .dialect import Dialect

FORMAT = 2
FANOUT = 8
SEGMENT_ROWS = 32_768
MAX_TOKENS = 65535  # the most keyword tokens one chunk may hold (its count fits an entry)
_OFFSET_MAX = 2**32 - 1
ENTRY = np.dtype([("offset", "<u4"), ("tf", "<u2"), ("size", "<u2")])  # 8 bytes
ALL = ""  # the term of a segment's row listing all its chunks
DEAD = " "  # the term of a segment's row listing its deleted chunks (no token holds a space)

# A chunk's postings input: (rowid, its statistics terms with their counts, its token count).
Counted = tuple[int, Mapping[str, int], int]
# A term's postings: (rowids ascending int64, term counts uint16, token counts uint16).
Column = tuple[np.ndarray, np.ndarray, np.ndarray]
# A term's entries in one segment: (segment key, offsets from it uint32, term counts, token counts).
Part = tuple[int, np.ndarray, np.ndarray, np.ndarray]


def term_counts(tokens: Sequence[str]) -> Counter[str]:
    """The keyword statistics terms of a chunk with their counts: its tokens, and "a b" for adjacent
    one-character tokens a, b (a CJK bigram phrase; overlaps counted, as an FTS5 phrase matches)."""
    counts = Counter(tokens)
    counts.update(term for _, term in token_pairs(tokens))
    return counts


def counted(rows: Iterable[tuple[int, str]]) -> list[Counted]:
    """Chunks given as (rowid, analyzed text: the analyzer's tokens joined by spaces) as the postings
    take them: (rowid, term counts, token count)."""
    return [(rowid, term_counts(tokens), len(tokens))
            for rowid, text in rows for tokens in ([] if not text else text.split(" "),)]


def check_tokens(count: int) -> int:
    """A chunk's keyword token count, or ``VectorStoreError`` past ``MAX_TOKENS``."""
    if count > MAX_TOKENS:
        raise VectorStoreError(f"a chunk holds {count:,} keyword tokens; the keyword index takes at most "
                               f"{MAX_TOKENS:,} per chunk: split the text into smaller chunks")
    return count


def pack(first: int, ids: np.ndarray, tf: np.ndarray, sizes: np.ndarray) -> bytes:
    """Entries for chunk rowids (ascending, from ``first``), their term counts and token counts."""
    entries = np.empty(len(ids), dtype=ENTRY)
    entries["offset"] = ids - first
    entries["tf"] = tf
    entries["size"] = sizes
    return entries.tobytes()


def unpack(first: int, blob: bytes) -> Column:
    """A row's (rowids int64, term counts uint16, token counts uint16)."""
    entries = np.frombuffer(blob, dtype=ENTRY)
    return entries["offset"].astype(np.int64) + first, entries["tf"], entries["size"]


def _segment(rowids: np.ndarray, sizes: np.ndarray, terms: Sequence[str], owner: np.ndarray, term: np.ndarray,
             tf: np.ndarray) -> list[tuple[str, bytes]]:
    """A new segment's rows (term, entries), the ``ALL`` row last, from chunks given in columns: each
    chunk's rowid and token count, and entries (``owner``: the chunk's position, ``term``: an index into
    ``terms``, ``tf``) -- sorted in numpy, packed in one pass; the terms in the order of ``terms``."""
    key = int(rowids.min())
    check_tokens(int(sizes.max()))  # the stores refuse such chunks before their write; the entries could not hold them
    counts = np.bincount(term, minlength=len(terms))
    ordered = np.flatnonzero(counts)
    ids = rowids[owner]
    order = np.lexsort((ids, term))  # by term, each term's chunks in rowid order
    blob = pack(key, ids[order], tf[order], sizes[owner][order])
    ends = (np.cumsum(counts[ordered]) * ENTRY.itemsize).tolist()
    starts = [0, *ends[:-1]] if ends else []  # chunks without a term (empty, or stop words only) make no term row
    out = [(terms[t], blob[start:end]) for t, start, end in zip(ordered.tolist(), starts, ends, strict=True)]
    chunks = np.argsort(rowids, kind="stable")
    out.append((ALL, pack(key, rowids[chunks], np.zeros(len(rowids), dtype=np.int64), sizes[chunks])))
    return out


def _level(chunks: int) -> int:
    """A segment's size class: 0 below ``FANOUT`` chunks, 1 below ``FANOUT`` squared, ..."""
    level = 0
    while chunks >= FANOUT:
        chunks //= FANOUT
        level += 1
    return level


# The most bytes of decoded postings one backend keeps between searches (see PostingsCache).
CACHE_BYTES = 96 * 1024 * 1024
# The most document frequencies (term and collection version) one backend keeps (about 150 bytes each).
FREQUENCIES_HELD = 200_000


class PostingsCache:
    """Decoded postings of the terms searched lately, by collection version, the least recently used first
    to go past ``limit`` bytes.

    A search's collection row names the version: (tenant row id, collection row id, the row's creation
    time, write counter, removal counter, chunk count and highest chunk key). Every write bumps the write
    counter and every removal the removal counter, so a version's postings never change, and a search of
    a collection written since reads them again. The postings cached under a version were read in a
    transaction that saw that version or a later one: what a search racing that write could read from the
    table itself. A term no chunk holds is not kept. The terms' document frequencies are kept the same
    way (``frequencies``), a term no chunk holds as 0."""

    def __init__(self, limit: int = CACHE_BYTES) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._held: OrderedDict[tuple[Hashable, str], Column] = OrderedDict()
        self._bytes = 0
        self._df: OrderedDict[tuple[Hashable, str], int] = OrderedDict()  # document frequencies, by version

    @property
    def held_bytes(self) -> int:
        """The bytes of postings held now."""
        with self._lock:
            return self._bytes

    def get(self, version: Hashable, terms: Sequence[str]) -> dict[str, Column]:
        """The cached postings of ``terms`` at ``version``."""
        out: dict[str, Column] = {}
        with self._lock:
            for term in terms:
                column = self._held.get((version, term))
                if column is not None:
                    self._held.move_to_end((version, term))
                    out[term] = column
        return out

    def put(self, version: Hashable, columns: Mapping[str, Column]) -> None:
        """Keep these postings at ``version``, dropping the least recently used past the limit."""
        with self._lock:
            for term, column in columns.items():
                size = sum(part.nbytes for part in column)
                if size > self.limit or (version, term) in self._held:
                    continue
                for part in column:
                    part.flags.writeable = False  # shared by the searches that find it here
                self._held[(version, term)] = column
                self._bytes += size
            while self._bytes > self.limit and self._held:
                _, gone = self._held.popitem(last=False)
                self._bytes -= sum(part.nbytes for part in gone)

    @property
    def held_frequencies(self) -> int:
        """The document frequencies held now."""
        with self._lock:
            return len(self._df)

    def frequencies(self, version: Hashable, terms: Sequence[str]) -> dict[str, int]:
        """The cached document frequencies of ``terms`` at ``version`` (0: no chunk holds the term)."""
        out: dict[str, int] = {}
        with self._lock:
            for term in terms:
                n = self._df.get((version, term))
                if n is not None:
                    self._df.move_to_end((version, term))
                    out[term] = n
        return out

    def put_frequencies(self, version: Hashable, counts: Mapping[str, int]) -> None:
        """Keep these document frequencies at ``version``, dropping the least recently used past
        ``FREQUENCIES_HELD`` terms."""
        if self.limit <= 0:
            return
        with self._lock:
            for term, n in counts.items():
                self._df[(version, term)] = n
            while len(self._df) > FREQUENCIES_HELD:
                self._df.popitem(last=False)

    def forget(self, collection_pk: int) -> None:
        """Drop the postings of a deleted collection (keys ``((tenant, collection), version)``)."""
        with self._lock:
            for key in [k for k in self._held if k[0][0][1] == collection_pk]:  # type: ignore[index]
                self._bytes -= sum(part.nbytes for part in self._held.pop(key))
            for key in [k for k in self._df if k[0][0][1] == collection_pk]:  # type: ignore[index]
                del self._df[key]

    def clear(self) -> None:
        """Drop every cached posting."""
        with self._lock:
            self._held.clear()
            self._bytes = 0
            self._df.clear()


# The most bytes of postings one backend holds whole, segment by segment (see SegmentIndex).
INDEX_BYTES = 256 * 1024 * 1024
# The most bytes of segments one search loads into the SegmentIndex (later searches load the others).
LOAD_BYTES = 64 * 1024 * 1024  # (but at least one segment)
IDLE_S = 60.0  # a held segment no search used for this long may make room for another collection's
_TERM_BYTES = 120  # about what one term costs a held segment beside its entries (its dictionary entry)


class HeldSegment:
    """One segment's postings in memory, every term's entries one after another: a term's chunk offsets
    (from the segment key), term counts and token counts are slices of three arrays."""

    __slots__ = ("key", "nbytes", "offsets", "sizes", "spans", "terms", "tf")

    def __init__(self, key: int, rows: Sequence[tuple[str, bytes]]) -> None:
        self.key = key
        kept = [(str(term), bytes(blob)) for term, blob in rows if term not in (ALL, DEAD)]
        entries = np.frombuffer(b"".join(blob for _, blob in kept), dtype=ENTRY)
        self.offsets = entries["offset"].copy()
        self.tf = entries["tf"].copy()
        self.sizes = entries["size"].copy()
        ends = np.cumsum([len(blob) // ENTRY.itemsize for _, blob in kept], dtype=np.int64)
        self.spans = np.concatenate([[0], ends]).tolist()
        self.terms = {term: i for i, (term, _) in enumerate(kept)}
        self.nbytes = self.offsets.nbytes + self.tf.nbytes + self.sizes.nbytes + _TERM_BYTES * len(kept)

    def part(self, term: str) -> Part | None:
        """The term's entries here: (segment key, offsets, term counts, token counts), or None."""
        i = self.terms.get(term)
        if i is None:
            return None
        start, end = self.spans[i], self.spans[i + 1]
        return self.key, self.offsets[start:end], self.tf[start:end], self.sizes[start:end]


# A segment as a collection version holds it: (key, digest of its ALL row). A segment's term rows follow
# from its chunks (a chunk's text never changes under its rowid), which its ALL row lists: a merge or a
# purge that rewrites the segment under the same key changes the digest.
SegmentId = tuple[int, bytes]


class Layout:
    """A collection version's segments (oldest key first) and its deleted chunks (ascending)."""

    __slots__ = ("dead", "segments")

    def __init__(self, segments: list[SegmentId], dead: np.ndarray) -> None:
        self.segments = segments
        self.dead = dead


class SegmentIndex:
    """Whole segments' postings held in memory, by collection and segment, within ``limit`` bytes, so that
    a search takes a term's postings from memory instead of reading them (1-6 MB a question at 100k
    chunks). A segment is immutable under its identity (key and the digest of its chunk list), so a
    write leaves the held segments as they are and only adds or replaces the ones it wrote: a search
    then loads those (at most ``per_search`` bytes each search), and reads the terms of segments not held
    (not loaded yet, or past the limit) from the table. Segments a collection no longer has are dropped
    when its new layout is read. Layouts are kept by collection version, as ``PostingsCache`` keeps
    postings."""

    def __init__(self, limit: int = INDEX_BYTES, per_search: int = LOAD_BYTES) -> None:
        self.limit = limit
        self.per_search = per_search
        self._lock = threading.Lock()
        self._held: OrderedDict[tuple[tuple[int, int], SegmentId], HeldSegment] = OrderedDict()
        self._sizes: dict[tuple[tuple[int, int], SegmentId], int] = {}  # bytes of segments not (yet) held
        self._layouts: OrderedDict[Hashable, Layout] = OrderedDict()
        self._used: dict[tuple[tuple[int, int], SegmentId], float] = {}  # when a held segment was last searched
        self._bytes = 0

    @property
    def held_bytes(self) -> int:
        """The bytes of segments held now."""
        with self._lock:
            return self._bytes

    def held(self, scope: tuple[int, int]) -> list[SegmentId]:
        """The segments of a collection held now."""
        with self._lock:
            return [seg for (sc, seg) in self._held if sc == scope]

    def layout(self, scope: tuple[int, int], version: Hashable) -> Layout | None:
        """The layout kept for this collection version, if any."""
        with self._lock:
            found = self._layouts.get((scope, version))
            if found is not None:
                self._layouts.move_to_end((scope, version))
            return found

    def put_layout(self, scope: tuple[int, int], version: Hashable, layout: Layout) -> None:
        """Keep a version's layout; drop the segments of the collection it no longer has."""
        current = set(layout.segments)
        with self._lock:
            self._layouts[(scope, version)] = layout
            while len(self._layouts) > 256:
                self._layouts.popitem(last=False)
            for key in [k for k in self._held if k[0] == scope and k[1] not in current]:
                self._drop(key)
            for key in [k for k in self._sizes if k[0] == scope and k[1] not in current]:
                del self._sizes[key]

    def get(self, scope: tuple[int, int], segment: SegmentId) -> HeldSegment | None:
        """A held segment, if it is held."""
        with self._lock:
            found = self._held.get((scope, segment))
            if found is not None:
                self._held.move_to_end((scope, segment))
                self._used[(scope, segment)] = time.monotonic()
            return found

    def size(self, scope: tuple[int, int], segment: SegmentId) -> int | None:
        """A segment's size as noted (``note_size``), if it was."""
        with self._lock:
            return self._sizes.get((scope, segment))

    def note_size(self, scope: tuple[int, int], segment: SegmentId, size: int) -> None:
        """Note about the bytes a segment would take held."""
        with self._lock:
            self._sizes[(scope, segment)] = size

    def fits(self, size: int) -> bool:
        """Whether ``size`` more bytes fit, once segments no search has used for ``IDLE_S`` are dropped
        (the least recently used first): two collections too large to be held together do not take
        turns loading each other out."""
        with self._lock:
            if self._bytes + size <= self.limit or size > self.limit:
                return self._bytes + size <= self.limit
            idle = time.monotonic() - IDLE_S
            for key in list(self._held):  # the least recently used first
                if self._bytes + size <= self.limit:
                    break
                if self._used.get(key, 0.0) <= idle:
                    self._drop(key)
            return self._bytes + size <= self.limit

    def _drop(self, key: tuple[tuple[int, int], SegmentId]) -> None:
        self._bytes -= self._held.pop(key).nbytes
        self._used.pop(key, None)

    def put(self, scope: tuple[int, int], segment: SegmentId, held: HeldSegment) -> bool:
        """Hold a loaded segment if it fits within the limit (another search may have loaded it meanwhile)."""
        with self._lock:
            if (scope, segment) in self._held:
                return True
            if self._bytes + held.nbytes > self.limit:
                return False
            self._held[(scope, segment)] = held
            self._used[(scope, segment)] = time.monotonic()
            self._bytes += held.nbytes
            return True

    def forget(self, collection_pk: int) -> None:
        """Drop the segments and layouts of a deleted collection."""
        with self._lock:
            for key in [k for k in self._held if k[0][1] == collection_pk]:
                self._drop(key)
            for key in [k for k in self._sizes if k[0][1] == collection_pk]:
                del self._sizes[key]
            for version in [v for v in self._layouts if v[0][1] == collection_pk]:  # type: ignore[index]
                del self._layouts[version]

    def clear(self) -> None:
        """Drop every held segment and layout."""
        with self._lock:
            self._held.clear()
            self._used.clear()
            self._sizes.clear()
            self._layouts.clear()
            self._bytes = 0


def _join(parts: Sequence[Part], dead: np.ndarray) -> Column:
    """A term's postings from its entries in each segment ((key, offsets, term counts, token counts), by
    key), in rowid order (segments may overlap on PostgreSQL), without the ``dead`` chunks (ascending): one
    way for the segments held in memory and for rows read from the table."""
    if len(parts) == 1:
        key, offsets, tf, sizes = parts[0]
        ids = offsets.astype(np.int64)
        ids += key
        tf, sizes = tf.astype(np.uint16), sizes.astype(np.uint16)  # copies: the result owns its arrays
    else:
        ids = np.concatenate([p[1] for p in parts]).astype(np.int64)
        tf = np.concatenate([p[2] for p in parts]).astype(np.uint16, copy=False)
        sizes = np.concatenate([p[3] for p in parts]).astype(np.uint16, copy=False)
        at, ordered, last = 0, True, -1
        for key, offsets, _, _ in parts:
            m = len(offsets)
            if m:
                ids[at:at + m] += key
                ordered = ordered and int(ids[at]) > last  # each part is in rowid order: look where they meet
                last = int(ids[at + m - 1])
                at += m
        if not ordered:  # overlapping segments
            order = np.argsort(ids, kind="stable")
            ids, tf, sizes = ids[order], tf[order], sizes[order]
    if len(dead):
        live = _live(ids, dead)
        if live is not None:
            ids, tf, sizes = ids[live], tf[live], sizes[live]
    return ids, tf, sizes


def _part(key: int, blob: bytes) -> Part:
    """A row's entries as a :data:`Part` (views of ``blob``)."""
    entries = np.frombuffer(blob, dtype=ENTRY)
    return key, entries["offset"], entries["tf"], entries["size"]


def _digest(blob: bytes) -> bytes:
    return hashlib.blake2b(blob, digest_size=16).digest()


def _live(ids: np.ndarray, dead: np.ndarray) -> np.ndarray | None:
    """Which of ``ids`` (ascending) are not in ``dead`` (ascending), or None when all are: found by binary
    search, so a few deleted chunks cost a few look-ups, not a pass over the postings for each (``np.isin``
    compares every entry with each of up to a few dozen values)."""
    low, high = np.searchsorted(ids, dead, "left"), np.searchsorted(ids, dead, "right")
    held = high > low
    if not held.any():
        return None
    edges = np.zeros(len(ids) + 1, dtype=np.int64)
    np.add.at(edges, low[held], 1)
    np.add.at(edges, high[held], -1)
    return np.cumsum(edges[:-1]) == 0


class PostingsTable:
    """The ``keyword_postings`` table of one database, through its dialect. Every call takes the
    transaction's connection and the collection's ``scope`` (tenant row id, collection row id);
    writers hold the collection's write lock (SQLite's database lock, PostgreSQL's collection row).
    Searches read through a :class:`PostingsCache` (``read_cached``)."""

    def __init__(self, dialect: Dialect, cache_bytes: int = CACHE_BYTES, index_bytes: int = INDEX_BYTES) -> None:
        self._d = dialect
        self.cache = PostingsCache(cache_bytes)
        self.index = SegmentIndex(index_bytes)

    def _run(self, conn: Any, statement: str, params: Sequence[Any] = ()) -> Any:
        return conn.execute(self._d.sql(statement), params)

    def _fetch(self, conn: Any, statement: str, params: Sequence[Any] = ()) -> list[Any]:
        """The rows of a read of postings blobs (a backend may fetch them in a cheaper wire format)."""
        return list(self._run(conn, statement, params).fetchall())

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
        """Index new chunks, given as (rowid, term counts, token count), as a new segment (then merge);
        returns each term's number of new chunks."""
        if not rows:
            return {}
        index: dict[str, int] = {}
        widths = [len(counts) for _, counts, _ in rows]
        total = sum(widths)
        term = np.fromiter((index.setdefault(t, len(index)) for _, counts, _ in rows for t in counts),
                           dtype=np.int64, count=total)
        tf = np.fromiter((n for _, counts, _ in rows for n in counts.values()), dtype=np.int64, count=total)
        rowids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        sizes = np.fromiter((r[2] for r in rows), dtype=np.int64, count=len(rows))
        owner = np.repeat(np.arange(len(rows), dtype=np.int64), widths)
        return self.add_columns(conn, scope, rowids, sizes, list(index), owner, term, tf)

    def add_columns(self, conn: Any, scope: tuple[int, int], rowids: np.ndarray, sizes: np.ndarray,
                    terms: Sequence[str], owner: np.ndarray, term: np.ndarray, tf: np.ndarray) -> dict[str, int]:
        """Index new chunks given in columns (see ``_segment``) as a new segment (then merge); returns each
        term's number of new chunks."""
        if not len(rowids):
            return {}
        counts = np.bincount(term, minlength=len(terms))
        found = {terms[i]: int(counts[i]) for i in np.flatnonzero(counts).tolist()}
        key = int(rowids.min())
        self._write_segment(conn, scope, key, _segment(rowids, sizes, terms, owner, term, tf))
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
        entries shifted to that key, in rowid order. False if the offsets would not fit.

        The rows are put in term order, then segment order (a stable sort of the rows, read in key order:
        the database need not sort their entries), joined and shifted in numpy; a term's entries are then
        in rowid order unless segments overlap (then they are sorted)."""
        for key in keys:
            self._purge(conn, scope, key)
        listed, values = self._d.any("segment", keys)
        found = self._run(
            conn, f"SELECT segment, term, entries FROM keyword_postings WHERE tenant_id = ? AND collection_id = ? "
            f"AND {listed} ORDER BY segment", (*scope, *values)).fetchall()
        if not found:
            return True
        rows = sorted(found, key=lambda row: row[1])  # stable: each term's rows stay in segment order
        segments, terms, blobs = zip(*rows, strict=True)
        lengths = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=len(blobs)) // ENTRY.itemsize
        entries = np.frombuffer(b"".join(blobs), dtype=ENTRY).copy()
        shift = np.repeat(np.asarray(segments, dtype=np.int64) - keys[0], lengths)
        offsets = entries["offset"].astype(np.int64) + shift
        if len(offsets) and int(offsets.max()) > _OFFSET_MAX:
            return False
        entries["offset"] = offsets
        # A term's rows are adjacent (sorted by term): where each term's entries start and end.
        starts = [0, *(i for i in range(1, len(terms)) if terms[i] != terms[i - 1])]
        firsts = np.cumsum(np.concatenate(([0], lengths)))
        bounds = firsts[[*starts, len(terms)]]
        group = np.repeat(np.arange(len(starts)), np.diff(bounds))
        if len(offsets) > 1:
            falls = (offsets[1:] <= offsets[:-1]) & (group[1:] == group[:-1])
            if falls.any():  # overlapping segments: sort each term's entries by rowid
                entries = entries[np.lexsort((offsets, group))]
        blob = entries.tobytes()
        size = ENTRY.itemsize
        self._run(conn, f"DELETE FROM keyword_postings WHERE tenant_id = ? AND collection_id = ? AND {listed}",
                  (*scope, *values))
        self._write_segment(conn, scope, keys[0], [
            (terms[start], blob[int(lo) * size:int(hi) * size])
            for start, lo, hi in zip(starts, bounds[:-1].tolist(), bounds[1:].tolist(), strict=True)])
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

    def read_cached(self, conn: Any, scope: tuple[int, int], version: Hashable,
                    terms: Sequence[str]) -> dict[str, Column]:
        """:meth:`read`, through the cache: ``version`` names the collection's state (see PostingsCache)."""
        key = (scope, version)
        found = self.cache.get(key, terms)
        missing = [t for t in terms if t not in found]
        if missing:
            read = self.read_held(conn, scope, version, missing) if self.index.limit > 0 else self.read(
                conn, scope, missing)
            self.cache.put(key, read)
            found.update(read)
        return found

    def layout(self, conn: Any, scope: tuple[int, int], version: Hashable) -> Layout:
        """The collection's segments and deleted chunks at ``version`` (read once per version)."""
        found = self.index.layout(scope, version)
        if found is not None:
            return found
        keys = [key for key, _ in self.segments(conn, scope)]
        digests: dict[int, bytes] = {}
        parts: list[np.ndarray] = []
        if keys:
            listed, values = self._d.any("segment", keys)
            for key, term, blob in self._fetch(
                    conn, f"SELECT segment, term, entries FROM keyword_postings WHERE tenant_id = ? "
                    f"AND collection_id = ? AND {listed} AND term IN (?, ?)", (*scope, *values, ALL, DEAD)):
                if term == ALL:
                    digests[int(key)] = _digest(bytes(blob))
                else:
                    parts.append(unpack(int(key), bytes(blob))[0])
        dead = np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)
        found = Layout([(key, digests.get(key, b"")) for key in keys], dead)
        self.index.put_layout(scope, version, found)
        return found

    def holds_all(self, conn: Any, scope: tuple[int, int], version: Hashable) -> bool:
        """Whether every segment of the collection at ``version`` is held in memory (then a term's document
        frequency is the length of its postings, without a query)."""
        if self.index.limit <= 0:
            return False
        layout = self.layout(conn, scope, version)
        return all(self.index.get(scope, segment) is not None for segment in layout.segments)

    def _segment_size(self, conn: Any, scope: tuple[int, int], segment: SegmentId) -> int:
        """About the bytes a segment takes held (see HeldSegment), from the lengths of its rows."""
        size = self.index.size(scope, segment)
        if size is None:
            rows, total = self._run(conn, "SELECT count(*), sum(length(entries)) FROM keyword_postings WHERE "
                                          "tenant_id = ? AND collection_id = ? AND segment = ?",
                                    (*scope, segment[0])).fetchone()
            size = int(total or 0) + _TERM_BYTES * int(rows or 0)
            self.index.note_size(scope, segment, size)
        return size

    def _load(self, conn: Any, scope: tuple[int, int], segment: SegmentId) -> HeldSegment | None:
        """A segment read whole, or None when its chunk list is not the one ``segment`` names."""
        rows = [(str(term), bytes(blob)) for term, blob in self._fetch(
            conn, "SELECT term, entries FROM keyword_postings WHERE tenant_id = ? AND collection_id = ? "
                  "AND segment = ?", (*scope, segment[0]))]
        listed = next((blob for term, blob in rows if term == ALL), None)
        if listed is None or _digest(listed) != segment[1]:
            return None
        return HeldSegment(segment[0], rows)

    def read_held(self, conn: Any, scope: tuple[int, int], version: Hashable,
                  terms: Sequence[str]) -> dict[str, Column]:
        """:meth:`read` through the :class:`SegmentIndex`: the terms' entries in the segments it holds from
        memory (loading up to its ``per_search`` bytes of segments it lacks, if they fit), the others in
        one statement; the same postings as :meth:`read`."""
        layout = self.layout(conn, scope, version)
        if not layout.segments or not terms:
            return {}
        budget = self.index.per_search
        held: dict[int, HeldSegment] = {}
        unheld: list[int] = []
        for segment in layout.segments:
            found = self.index.get(scope, segment)
            if found is None and segment[1] and budget > 0:
                size = self._segment_size(conn, scope, segment)
                if (size <= budget or budget == self.index.per_search) and self.index.fits(size):
                    budget -= size
                    found = self._load(conn, scope, segment)
                    if found is not None:
                        self.index.put(scope, segment, found)
            if found is None:
                unheld.append(segment[0])
            else:
                held[segment[0]] = found
        read: dict[tuple[str, int], Part] = {}
        if unheld:
            listed, values = self._d.any("segment", unheld)
            wanted, words = self._d.any("term", sorted(set(terms)))
            for term, key, blob in self._fetch(
                    conn, f"SELECT term, segment, entries FROM keyword_postings WHERE tenant_id = ? "
                          f"AND collection_id = ? AND {listed} AND {wanted}", (*scope, *values, *words)):
                read[(str(term), int(key))] = _part(int(key), bytes(blob))
        out: dict[str, Column] = {}
        for term in dict.fromkeys(terms):
            parts: list[Part] = []
            for key, _ in layout.segments:
                whole = held.get(key)
                if whole is not None:
                    part = whole.part(term)
                    if part is not None:
                        parts.append(part)
                    continue
                entries = read.get((term, key))
                if entries is not None:
                    parts.append(entries)
            if parts:
                out[term] = _join(parts, layout.dead)
        return out

    def read(self, conn: Any, scope: tuple[int, int], terms: Sequence[str]) -> dict[str, Column]:
        """The postings of these terms in the collection, without deleted chunks, in one statement."""
        keys = [key for key, _ in self.segments(conn, scope)]
        if not keys or not terms:
            return {}
        listed, values = self._d.any("segment", keys)
        wanted, words = self._d.any("term", sorted({*terms, DEAD}))
        rows = self._fetch(conn, f"SELECT term, segment, entries FROM keyword_postings WHERE tenant_id = ? "
                                 f"AND collection_id = ? AND {listed} AND {wanted}", (*scope, *values, *words))
        parts: dict[str, list[Part]] = {}
        for term, key, blob in sorted(rows, key=lambda r: (r[0], r[1])):
            parts.setdefault(term, []).append(_part(int(key), bytes(blob)))
        none = np.zeros(0, dtype=np.int64)
        dead = _join(parts.pop(DEAD), none)[0] if DEAD in parts else none
        return {term: _join(columns, dead) for term, columns in parts.items()}
