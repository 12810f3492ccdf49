"""The search port of the SQL core: one read transaction over one collection, for one search.

:class:`SQLReader` is what every SQL backend shares of :class:`~bunko.stores.base.CollectionReader`:
a restriction compiled once per search (its documents' row ids looked up once, its filter compiled
once), the allowed chunks in SQL, the keyword statistics and postings, and the hydration of the final
hits in one query. A backend subclasses it for its vector search and for faster ways to the allowed
chunks (in-memory columns), and keeps the SQL path as the exact answer they fall back to.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ...types import SearchHit
from ..base import CollectionRow, KeywordTotals, Postings, Ranked, Restriction, make_hit

if TYPE_CHECKING:
    from .dialect import Dialect
    from .store import SQLBackend, SQLStore

# Metadata filters read the chunk as c and its document as d.
DOCUMENT_JOIN = " LEFT JOIN documents d ON d.tenant_id = c.tenant_id AND d.id = c.document_id"


def hit_join(dialect: Dialect) -> str:
    """How a read of chunks by key joins their documents (as ``d``) in the dialect (``Dialect.hit_join``)."""
    return dialect.hit_join or DOCUMENT_JOIN


def hit_columns(dialect: Dialect) -> str:
    """A chunk read whole, in make_hit's column order, then its document's key (a hit's vector comes after);
    the JSON columns as the dialect reads them for a search (``Dialect.json_text``)."""
    return ("c.id, c.uid, coalesce(d.uid, ''), coalesce(d.source, ''), c.content, c.chunk_index, "
            f"c.metadata{dialect.json_text}, d.metadata{dialect.json_text}, c.start_offset, c.end_offset, "
            "c.token_count, d.chunk_count, c.document_id")


class CompiledRestriction:
    """A restriction as one search uses it: its documents' row ids and its filter's SQL, found once."""

    __slots__ = ("conditions", "document_pks", "params", "restriction", "where")

    def __init__(self, restriction: Restriction, document_pks: list[int] | None,
                 where: tuple[str, list[Any]] | None, documents: tuple[str, list[Any]] | None) -> None:
        self.restriction = restriction
        self.document_pks = document_pks
        self.where = where
        # The whole restriction as conditions over c (and d) to AND in, with their parameters.
        self.conditions, self.params = "", []
        if documents is not None:
            self.conditions += f" AND {documents[0]}" if document_pks else " AND 1 = 0"
            self.params += documents[1] if document_pks else []
        if where is not None:
            self.conditions += f" AND {where[0]}"
            self.params += where[1]


class SQLReader:
    """One collection of one tenant, read inside one transaction of its store."""

    # Whether hit hydration also names the collection. Planners differ: SQLite's then looks the rows
    # up by its (tenant, collection, id) index and otherwise scans the tenant's; PostgreSQL's would
    # scan the collection instead of using the primary key.
    hydrate_by_collection = False

    def __init__(self, store: SQLStore, backend: SQLBackend, conn: Any, tenant_pk: int, row: CollectionRow) -> None:
        self._store = store
        self._backend = backend
        self._conn = conn
        self._tenant_pk = tenant_pk
        self._row = row
        self._d = store.dialect
        self._compiled: dict[int, CompiledRestriction] = {}
        self._read: dict[int, Any] = {}  # chunks read whole by texts(), by key

    @property
    def row(self) -> CollectionRow:
        """The collection this reader works on, as read before the reader opened."""
        return self._row

    @property
    def scope(self) -> tuple[int, int]:
        """(tenant row id, collection row id): the key prefix of the collection's rows."""
        return self._tenant_pk, self._row.key

    def run(self, statement: str, params: Sequence[Any] = ()) -> Any:
        """Execute a core statement (``?`` placeholders, unqualified tables) in this transaction."""
        return self._conn.execute(self._d.sql(statement), params)

    # -- restrictions ----------------------------------------------------------------------------
    def compile(self, restriction: Restriction) -> CompiledRestriction:
        """The restriction's documents and filter, looked up and compiled once per search."""
        found = self._compiled.get(id(restriction))
        if found is not None and found.restriction is restriction:
            return found
        pks = None
        if restriction.document_ids is not None:
            listed, values = self._d.any("uid", list(restriction.document_ids))
            pks = [int(r[0]) for r in self.run(
                f"SELECT id FROM documents WHERE tenant_id = ? AND collection_id = ? AND {listed}",
                (*self.scope, *values))]
        where = self._d.compile_filter(restriction.filter) if restriction.filter is not None else None
        documents = self._d.any("c.document_id", pks) if pks is not None else None
        compiled = self._compiled[id(restriction)] = CompiledRestriction(restriction, pks, where, documents)
        return compiled

    def allowed_in_sql(self, restriction: Restriction) -> np.ndarray:
        """The keys (ascending) of the collection's chunks that pass ``restriction``, found in SQL."""
        compiled = self.compile(restriction)
        join = DOCUMENT_JOIN if compiled.where is not None else ""
        return np.fromiter((r[0] for r in self.run(
            f"SELECT c.id FROM chunks c{join} WHERE c.tenant_id = ? AND c.collection_id = ?{compiled.conditions} "
            "ORDER BY c.id", (*self.scope, *compiled.params))), dtype=np.int64)

    def allowed(self, restriction: Restriction) -> np.ndarray:
        """The keys (ascending) of the collection's chunks that pass ``restriction``."""
        return self.allowed_in_sql(restriction)

    # -- keyword statistics and postings -------------------------------------------------------------
    def document_frequencies(self, terms: Sequence[str]) -> dict[str, int]:
        """How many of the collection's chunks hold each term (terms none hold are left out): those of terms
        searched since the collection's last write from the backend's postings cache, the others from the
        segments held in memory when it holds them all, else in SQL."""
        if not terms:
            return {}
        table = self._backend.postings
        cache, version = table.cache, self._version()
        found = cache.frequencies(version, terms)
        missing = sorted(set(terms) - found.keys())
        if missing and table.holds_all(self._conn, self.scope, version[1]):
            # Every segment in memory: a term's frequency is its live postings' length (which keyword_df
            # counts the same way), and the postings read here are the search's next step, from the cache.
            held = self.postings(missing)
            counts = {t: len(held[t][0]) if t in held else 0 for t in missing}
            cache.put_frequencies(version, counts)
            found.update(counts)
        elif missing:
            listed, values = self._d.any("term", missing)
            read = {t: int(n) for t, n in self.run(
                f"SELECT term, df FROM keyword_df WHERE tenant_id = ? AND collection_id = ? AND {listed}",
                (*self.scope, *values))}
            counts = {t: max(read.get(t, 0), 0) for t in missing}
            cache.put_frequencies(version, counts)
            found.update(counts)
        return {t: n for t, n in found.items() if n > 0}

    def _version(self) -> tuple[Any, ...]:
        """The collection's state as the postings cache names it (see ``PostingsCache``)."""
        row = self._row
        return self.scope, (row.created_at, row.write_seq, row.mutation_seq, row.chunk_count, row.high_water)

    def keyword_totals(self, terms: Sequence[str]) -> KeywordTotals:
        """The collection's chunk count and mean token count, with the document frequencies of ``terms``."""
        rows, tokens = self._row.chunk_count, self._row.keyword_tokens or 0
        return KeywordTotals(rows, max(tokens, 1) / max(rows, 1), self.document_frequencies(terms))

    def postings(self, terms: Sequence[str]) -> dict[str, Postings]:
        """The postings of ``terms`` in the collection, without deleted chunks: those of terms searched
        since the collection's last write from the backend's cache, the others in one statement."""
        return self._backend.postings.read_cached(self._conn, self.scope, self._version()[1], terms)

    def texts(self, keys: np.ndarray) -> dict[int, tuple[str, int, str]]:
        """The text of these chunks of the collection, by key, with their document's key and title (its
        ``title`` metadata, "" without one), in one query; chunks gone are left out. The chunks are read
        whole, as :meth:`hits` reads them, and kept: a hit among them is not read again (``rows_read``)."""
        if not len(keys):
            return {}
        d = self._d
        listed, params = d.any("c.id", [int(k) for k in keys.tolist()])
        titles: dict[int, str] = {}
        out: dict[int, tuple[str, int, str]] = {}
        for row in self.run(f"SELECT {hit_columns(d)} FROM chunks c{hit_join(d)} WHERE c.tenant_id = ? "
                            f"AND c.collection_id = ? AND {listed}", (*self.scope, *params)):
            key, content, document, metadata = int(row[0]), row[4], row[12], row[7]
            self._read[key] = row
            document = -key if document is None else int(document)  # a loose record: its own document
            if document not in titles:
                found = d.json_out(metadata) if metadata is not None else None
                title = found.get("title") if isinstance(found, dict) else None
                titles[document] = title if isinstance(title, str) else ""
            out[key] = (str(content), document, titles[document])
        return out

    def keep_rows(self, rows: Iterable[Any]) -> None:
        """Keep chunks a search statement read whole (``hit_columns``, ``hit_join``) with its ranking:
        :meth:`hits` then takes them instead of reading them again."""
        for row in rows:
            self._read[int(row[0])] = row

    def rows_read(self) -> Mapping[int, Any]:
        """The chunks :meth:`texts` read whole, by key: what another reader's :meth:`hits` may take instead
        of reading them again (``read``)."""
        return self._read

    # -- hits --------------------------------------------------------------------------------------
    def hits(self, ranked: Ranked, *, include_content: bool = True, vectors: dict[str, np.ndarray] | None = None,
             extra: Mapping[int, Mapping[str, Any]] | None = None,
             read: Mapping[int, Any] | None = None) -> list[SearchHit]:
        """Hits with content and metadata for ranked chunks, in order, in one query; chunks deleted
        meanwhile are left out. ``vectors``, if a dict, receives their stored vectors by chunk id;
        ``extra`` adds metadata to the hits of some keys (a search's per-leg ranks). Chunks this reader's
        :meth:`texts` read, or another reader's of the same search (``read``), are not read again
        (unless their vectors are asked for)."""
        if not len(ranked):
            return []
        d = self._d
        by_key: dict[int, Any] = {}
        if vectors is None:
            for known in (read or {}), self._read:
                by_key.update((k, known[k]) for k in ranked.keys.tolist() if k in known)
        missing = [k for k in ranked.keys.tolist() if k not in by_key]
        if missing:
            listed, params = d.any("c.id", missing)
            scope, scope_params = "c.tenant_id = ?", [self._tenant_pk]
            if self.hydrate_by_collection:
                scope, scope_params = "c.tenant_id = ? AND c.collection_id = ?", list(self.scope)
            by_key.update((int(r[0]), r) for r in self.run(
                f"SELECT {hit_columns(d)}{', c.embedding' if vectors is not None else ''} "
                f"FROM chunks c{hit_join(d)} WHERE {scope} AND {listed}", (*scope_params, *params)).fetchall())
        out = []
        for key, score in ranked.pairs():
            r = by_key.get(key)
            if r is None:
                continue
            hit = make_hit(r, float(score), {} if r[7] is None else d.json_out(r[7]), d.json_out(r[6]),
                           include_content)
            if extra is not None and key in extra:
                hit.metadata.update(extra[key])
            out.append(hit)
            if vectors is not None:
                vectors[r[1]] = d.vector_out(r[13])
        return out

    def keys_of(self, chunk_ids: Sequence[str]) -> dict[str, int]:
        """The keys of these chunks of the collection, by chunk id (unknown ids are left out)."""
        if not chunk_ids:
            return {}
        listed, values = self._d.any("uid", [str(i) for i in chunk_ids])
        return {str(uid): int(key) for key, uid in self.run(
            f"SELECT id, uid FROM chunks WHERE tenant_id = ? AND collection_id = ? AND {listed}",
            (*self.scope, *values))}

    # -- vectors: what each backend supplies ------------------------------------------------------------
    def nearest(self, vector: np.ndarray, top_k: int, restriction: Restriction | None = None, *,
                threshold: float | None = None) -> Ranked:
        """The ``top_k`` chunks most similar to ``vector`` (unit length) inside ``restriction``."""
        raise NotImplementedError


__all__ = ["DOCUMENT_JOIN", "CompiledRestriction", "SQLReader", "hit_columns", "hit_join"]
