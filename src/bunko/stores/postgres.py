"""PostgreSQL + pgvector backend: the same contract as the embedded store, for production.

Install with ``pip install "bunko[postgres]"`` and point ``BUNKO_DATABASE_URL`` (or
``--db``) at ``postgresql://...``.

* Schema: versioned migrations in :mod:`bunko.stores.pg_migrations` (``bunko db migrate``).
* Isolation (R15): every statement filters by ``tenant_id``, and Row-Level Security
  checks the per-transaction setting ``bunko.tenant_id`` on every tenant table. The
  pool runs as ``bunko_app`` (``SET ROLE`` when the login role is a superuser or
  may bypass RLS), so even a query that forgot its predicate returns nothing.
* Vectors: a ``vector`` column (dimension fixed per collection and checked on every
  write and query) and, once a collection is large enough, a partial HNSW cosine
  index per collection on ``embedding::vector(d)`` (``halfvec(d)`` above 2,000
  dimensions), built after bulk loads.
* Writes: documents are written in batches with binary ``COPY``, one transaction per
  batch; a new version of a document replaces its chunks inside that transaction.
* Restricted search (R21): a planner that counts the restricted rows and picks an
  exact scan (few rows, or no index), an HNSW iterative index scan (pgvector 0.8+,
  verified with ``SHOW``), or an over-fetch-and-retry loop, so that when k matching
  chunks exist, k come back in the right order.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from ..analysis import Analyzer, get_analyzer, tsquery_literal, tsvector_literal
from ..errors import (
    CollectionNotFoundError,
    ConfigError,
    DimensionMismatchError,
    DocumentNotFoundError,
    EmbedderMismatchError,
    VectorStoreError,
)
from ..filters import Filter, FilterLike, as_filter, compile_postgres
from ..types import (
    Collection,
    ConversationTurn,
    DocumentInfo,
    EmbedderInfo,
    IngestResult,
    SearchHit,
    UsageEvent,
    UsageTotal,
    VectorRecord,
    new_id,
)
from . import pg_migrations
from .base import (
    DocumentWrite,
    add_usage,
    check_analyzer,
    check_conversation_id,
    check_query_vector,
    check_turns,
    make_hit,
    utc,
)
from .sqlite import _check_name, _check_top_k, _same_analyzer

try:  # optional dependencies: the "postgres" extra
    import psycopg
    from pgvector.psycopg import register_vector
    from psycopg import sql
    from psycopg.types.json import Jsonb
    from psycopg_pool import ConnectionPool

    HAVE_POSTGRES = True
except ImportError:  # pragma: no cover - exercised by the optional-dependency test
    HAVE_POSTGRES = False

logger = logging.getLogger(__name__)


# The backend's tuning knobs (pool, HNSW, search paths, keyword ranking) are the [postgres]
# section of the settings tree: ``BUNKO_PG_<KEY>`` or ``[postgres] <key>`` in bunko.toml.
from ..config import PostgresSettings  # noqa: E402


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text)[:3])


class PostgresBackend:
    """A PostgreSQL database that hands out tenant-bound stores."""

    scheme = "postgresql"

    def __init__(self, url: str, *, settings: PostgresSettings | None = None, migrate: bool = True) -> None:
        if not HAVE_POSTGRES:
            raise ConfigError('the PostgreSQL backend needs extra packages: pip install "bunko[postgres]"')
        self.url = url
        self.settings = settings or PostgresSettings.from_env()
        conninfo = re.sub(r"^postgresql\+psycopg://", "postgresql://", url)
        self._conninfo = conninfo
        if migrate:
            migrate_database(conninfo)
        self._check_schema()
        self._pool = ConnectionPool(
            conninfo, min_size=self.settings.pool_min, max_size=self.settings.pool_max,
            configure=self._configure, open=False, name="bunko",
            # No server-side prepared statements: a generic plan chosen before ANALYZE (or for
            # one restriction size) would stick to the connection; custom plans fit each query.
            kwargs={"prepare_threshold": None},
            # A connection the server dropped (restart, idle timeout) is replaced on checkout.
            check=ConnectionPool.check_connection,
        )
        try:
            self._pool.open(wait=True, timeout=30)
        except Exception as exc:
            raise VectorStoreError(f"cannot connect to PostgreSQL: {exc}") from exc
        self.pgvector_version = self._scalar("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        self._iterative = (
            self.settings.iterative_scan is not False and _version_tuple(self.pgvector_version) >= (0, 8)
        )
        self._index_lock = threading.Lock()
        self._indexed: set[int] = set()  # collections whose HNSW index is known to exist

    # -- connections ---------------------------------------------------------------------
    def _configure(self, conn: Any) -> None:
        """Per pooled connection: vector types, and drop to the application role if needed."""
        register_vector(conn)
        # The search breadth every HNSW scan starts from; a scan that needs more sets it locally.
        conn.execute("SELECT set_config('hnsw.ef_search', %s, false)", (str(self.settings.ef_search),))
        bypass = conn.execute(
            "SELECT rolsuper OR rolbypassrls FROM pg_roles WHERE rolname = current_user"
        ).fetchone()[0]
        if bypass:
            conn.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(pg_migrations.APP_ROLE)))
        # COPY cannot write into a table with row-level security, so bulk rows go through this
        # session-private staging table and then one INSERT ... SELECT that RLS checks.
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS bunko_chunk_stage (uid text, tenant_id int8, collection_id int8, "
            "document_id int8, version_id int8, chunk_index int4, start_offset int4, end_offset int4, "
            "token_count int4, content text, metadata jsonb, embedding vector, fts_text text, fts_length int4) "
            "ON COMMIT DELETE ROWS"
        )
        conn.commit()

    def _check_schema(self) -> None:
        try:
            with psycopg.connect(self._conninfo, connect_timeout=10) as conn:
                version = conn.execute(
                    "SELECT coalesce(max(version), 0) FROM bunko.schema_migrations"
                ).fetchone()[0]
        except psycopg.errors.UndefinedTable as exc:
            raise VectorStoreError("the database has no bunko schema yet: run `bunko db migrate`") from exc
        except psycopg.OperationalError as exc:
            raise VectorStoreError(f"cannot connect to PostgreSQL: {exc}") from exc
        if version < len(pg_migrations.MIGRATIONS):
            raise VectorStoreError(
                f"the database schema is at version {version}, this bunko needs {len(pg_migrations.MIGRATIONS)}: "
                "run `bunko db migrate`"
            )

    def _scalar(self, query: str) -> Any:
        with self._pool.connection() as conn:
            return conn.execute(query).fetchone()[0]

    @contextmanager
    def transaction(self, tenant: str, tenant_pk: int | None) -> Iterator[Any]:
        """A pooled connection in a transaction with the tenant settings RLS checks."""
        try:
            with self._pool.connection() as conn, conn.transaction():
                conn.execute(
                    "SELECT set_config('bunko.tenant', %s, true), set_config('bunko.tenant_id', %s, true)",
                    (tenant, "" if tenant_pk is None else str(tenant_pk)),
                )
                yield conn
        except psycopg.errors.UndefinedFile as exc:
            raise VectorStoreError(f"PostgreSQL is missing a file or extension: {exc}") from exc
        except psycopg.OperationalError as exc:
            raise VectorStoreError(f"lost the connection to PostgreSQL: {exc}") from exc
        except psycopg.errors.DataException as exc:
            raise VectorStoreError(f"PostgreSQL refused the data: {exc}") from exc
        except psycopg.Error as exc:
            raise VectorStoreError(f"PostgreSQL error: {exc}") from exc

    def for_tenant(self, tenant: str) -> PostgresVectorStore:
        """A store bound to ``tenant``; the only way to reach data."""
        return PostgresVectorStore(self, _check_name("tenant", tenant))

    def close(self) -> None:
        """Close the pool."""
        self._pool.close()

    def __repr__(self) -> str:
        return f"PostgresBackend({re.sub(r'://[^@/]*@', '://***@', self.url)!r})"


def migrate_database(conninfo: str, *, target: int | None = None) -> list[str]:
    """Apply pending migrations (up to version ``target``, default all); returns the names applied.

    Needs a role that owns the schema.
    """
    if not HAVE_POSTGRES:
        raise ConfigError('the PostgreSQL backend needs extra packages: pip install "bunko[postgres]"')
    applied: list[str] = []
    try:
        with psycopg.connect(conninfo, connect_timeout=10, autocommit=True) as conn:
            # One migrator at a time: other processes wait here, then find nothing to do.
            conn.execute("SELECT pg_advisory_lock(727274)")
            try:
                with conn.transaction():
                    for statement in pg_migrations.BOOTSTRAP:
                        conn.execute(statement)
                    conn.execute(pg_migrations.CREATE_APP_ROLE)
                    done = {r[0] for r in conn.execute("SELECT version FROM bunko.schema_migrations")}
                    for number, (name, statements) in enumerate(pg_migrations.MIGRATIONS, start=1):
                        if number in done or (target is not None and number > target):
                            continue
                        for statement in statements:
                            conn.execute(statement)
                        conn.execute("INSERT INTO bunko.schema_migrations (version, name) VALUES (%s, %s)",
                                     (number, name))
                        applied.append(name)
                    for statement in pg_migrations.GRANTS:
                        conn.execute(statement)
                    if not conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone()[0]:
                        conn.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(
                            sql.Identifier(pg_migrations.APP_ROLE)))
            finally:
                conn.execute("SELECT pg_advisory_unlock(727274)")
    except psycopg.errors.InsufficientPrivilege as exc:
        raise VectorStoreError(
            f"not allowed to migrate the bunko schema ({exc}); run `bunko db migrate` as the schema owner"
        ) from exc
    except psycopg.errors.FeatureNotSupported as exc:
        raise VectorStoreError(f"PostgreSQL lacks a feature bunko needs: {exc}") from exc
    except (psycopg.errors.UndefinedFile, psycopg.errors.UndefinedObject) as exc:
        raise VectorStoreError(
            f"the pgvector extension is not available on this server ({exc}); install pgvector"
        ) from exc
    except psycopg.OperationalError as exc:
        raise VectorStoreError(f"cannot connect to PostgreSQL: {exc}") from exc
    return applied


def schema_status(conninfo: str) -> dict[str, Any]:
    """Applied and pending migrations, and the server's versions."""
    if not HAVE_POSTGRES:
        raise ConfigError('the PostgreSQL backend needs extra packages: pip install "bunko[postgres]"')
    try:
        with psycopg.connect(conninfo, connect_timeout=10) as conn:
            server = conn.execute("SHOW server_version").fetchone()[0]
            vector = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
            try:
                rows = conn.execute("SELECT version, name, applied_at FROM bunko.schema_migrations ORDER BY version")
                applied = [{"version": v, "name": n, "applied_at": a.isoformat()} for v, n, a in rows]
            except psycopg.errors.UndefinedTable:
                applied = []
    except psycopg.OperationalError as exc:
        raise VectorStoreError(f"cannot connect to PostgreSQL: {exc}") from exc
    names = {a["version"] for a in applied}
    pending = [{"version": i, "name": n} for i, (n, _) in enumerate(pg_migrations.MIGRATIONS, start=1)
               if i not in names]
    return {"server_version": server, "pgvector_version": vector[0] if vector else None,
            "applied": applied, "pending": pending}


def _vector_literal_type(dim: int) -> str:
    return f"vector({dim})" if dim <= 2000 else f"halfvec({dim})"


class PostgresVectorStore:
    """The PostgreSQL store bound to one tenant. Build it with ``PostgresBackend.for_tenant``."""

    def __init__(self, backend: PostgresBackend, tenant: str) -> None:
        self._backend = backend
        self._tenant = tenant
        self._tenant_pk: int | None = None
        self._bulk = False
        self.last_plan = ""  # the strategy of the last vector search (for tests and benchmarks)

    @property
    def tenant(self) -> str:
        """The tenant this store is bound to (read-only)."""
        return self._tenant

    def __repr__(self) -> str:
        return f"PostgresVectorStore(tenant={self._tenant!r})"

    # -- scope ----------------------------------------------------------------------------
    @contextmanager
    def _tx(self, *, create: bool = False) -> Iterator[tuple[Any, int | None]]:
        """A transaction scoped to this tenant: (connection, tenant_pk or None if it has no data)."""
        with self._backend.transaction(self._tenant, self._tenant_pk) as conn:
            if self._tenant_pk is None:
                row = conn.execute("SELECT id FROM bunko.tenants WHERE name = %s", (self._tenant,)).fetchone()
                if row is None and create:
                    conn.execute("INSERT INTO bunko.tenants (name) VALUES (%s) ON CONFLICT (name) DO NOTHING",
                                 (self._tenant,))
                    row = conn.execute("SELECT id FROM bunko.tenants WHERE name = %s", (self._tenant,)).fetchone()
                if row is not None:
                    self._tenant_pk = int(row[0])
                    conn.execute("SELECT set_config('bunko.tenant_id', %s, true)", (str(self._tenant_pk),))
            yield conn, self._tenant_pk

    def _collection_row(self, conn: Any, tenant_pk: int | None, name: str) -> tuple:
        row = None
        if tenant_pk is not None:
            row = conn.execute(_COLLECTION_SELECT + " WHERE tenant_id = %s AND name = %s", (tenant_pk, name)).fetchone()
        if row is None:
            raise CollectionNotFoundError(f"collection {name!r} does not exist in tenant {self._tenant!r}")
        return row

    @staticmethod
    def _collection(row: tuple) -> Collection:
        return Collection(name=row[1], description=row[2], embedding_provider=row[3], embedding_model=row[4],
                          dimension=int(row[5]), created_at=row[6].isoformat(), document_count=int(row[7]),
                          chunk_count=int(row[8]), config=dict(row[9]), analyzer=row[10])

    @staticmethod
    def _count(conn: Any, tenant_pk: int, collection_pk: int, documents: int, chunks: int, tokens: int = 0) -> None:
        conn.execute(
            "UPDATE bunko.collections SET document_count = document_count + %s, chunk_count = chunk_count + %s, "
            "keyword_tokens = keyword_tokens + %s WHERE tenant_id = %s AND id = %s",
            (documents, chunks, tokens, tenant_pk, collection_pk),
        )

    @staticmethod
    def _delete_chunks(conn: Any, where: str, params: Sequence[Any]) -> tuple[int, int]:
        """Delete chunks matching ``where``; returns (chunks, keyword tokens) removed."""
        row = conn.execute(
            f"WITH gone AS (DELETE FROM bunko.chunks WHERE {where} RETURNING fts_length) "
            "SELECT count(*), coalesce(sum(fts_length), 0) FROM gone",
            params,
        ).fetchone()
        return int(row[0]), int(row[1])

    def _analyzer(self, collection: str) -> Analyzer:
        """The analyzer a collection records (fixed at creation)."""
        return get_analyzer(self.get_collection(collection).analyzer)

    # -- collections ----------------------------------------------------------------------
    def ensure_collection(self, name: str, embedder: EmbedderInfo, description: str = "",
                          config: dict[str, Any] | None = None, *, analyzer: str | None = None) -> Collection:
        """Return the collection, creating it for this embedder and analyzer if missing; refuse others."""
        _check_name("collection", name)
        analyzer_name = get_analyzer(analyzer).name  # an unknown name fails before anything is written
        settings = self._backend.settings
        with self._tx(create=True) as (conn, tenant_pk):
            conn.execute(
                "INSERT INTO bunko.collections (tenant_id, name, description, embedding_provider, embedding_model, "
                "dimension, analyzer, hnsw_m, hnsw_ef_construction, config) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (tenant_id, name) DO NOTHING",
                (tenant_pk, name, description, embedder.provider, embedder.model, embedder.dimension,
                 analyzer_name, settings.hnsw_m, settings.hnsw_ef_construction, Jsonb(config or {})),
            )
            collection = self._collection(self._collection_row(conn, tenant_pk, name))
        if collection.embedder != embedder:
            raise EmbedderMismatchError(
                f"collection {name!r} was built with {collection.embedding_provider}:{collection.embedding_model} "
                f"({collection.dimension} dimensions); the embedder in use is {embedder.provider}:{embedder.model} "
                f"({embedder.dimension} dimensions). Use the same embedder, or another collection"
            )
        check_analyzer(collection, analyzer)
        return collection

    def get_collection(self, name: str) -> Collection:
        """The collection, or ``CollectionNotFoundError``."""
        with self._tx() as (conn, tenant_pk):
            return self._collection(self._collection_row(conn, tenant_pk, name))

    def list_collections(self) -> list[Collection]:
        """This tenant's collections, by name."""
        with self._tx() as (conn, tenant_pk):
            if tenant_pk is None:
                return []
            rows = conn.execute(_COLLECTION_SELECT + " WHERE tenant_id = %s ORDER BY name", (tenant_pk,)).fetchall()
        return [self._collection(r) for r in rows]

    def delete_collection(self, name: str) -> None:
        """Delete a collection with all its documents, chunks, vectors and its index."""
        with self._tx() as (conn, tenant_pk):
            row = self._collection_row(conn, tenant_pk, name)
            conn.execute("SELECT bunko.drop_hnsw_index(%s)", (row[0],))
            self._backend._indexed.discard(int(row[0]))
            conn.execute("DELETE FROM bunko.collections WHERE tenant_id = %s AND id = %s", (tenant_pk, row[0]))

    # -- documents ------------------------------------------------------------------------
    def write_document(self, collection: str, document: DocumentWrite) -> IngestResult:
        """Store a document and its chunks atomically; replace an older one with the same source."""
        return self.write_documents(collection, [document])[0]

    def write_documents(self, collection: str, documents: Sequence[DocumentWrite]) -> list[IngestResult]:
        """Store several documents in one transaction: a fixed number of set-based statements, chunks by COPY.

        However many documents the batch holds, it costs one lookup of the existing sources, one
        insert of the new documents, one of their versions, one update of the current versions,
        one COPY of the chunks and one counter update (plus one delete and update per replaced
        document). Per-document round trips used to dominate small-document loads.
        """
        started = time.perf_counter()
        analyzer = self._analyzer(collection)
        # Analysis (possibly morphological, so slow) runs before the transaction opens.
        keywords = [[_keyword_columns(analyzer, c.content) for c in d.chunks] for d in documents]
        with self._tx() as (conn, tenant_pk):
            row = self._collection_row(conn, tenant_pk, collection)
            _same_analyzer(row[10], analyzer, collection)
            collection_pk, dim = int(row[0]), int(row[5])
            assert tenant_pk is not None
            prepared = [(document, self._checked_vectors(collection, dim, document)) for document in documents]
            sources = [document.source for document, _ in prepared]
            if len(set(sources)) != len(sources):
                raise VectorStoreError("write_documents got the same source twice in one call")
            existing = {
                r[0]: r[1:]
                for r in conn.execute(
                    "SELECT source, id, uid, content_hash, chunk_count, version FROM bunko.documents "
                    "WHERE tenant_id = %s AND collection_id = %s AND source = ANY(%s) FOR UPDATE",
                    (tenant_pk, collection_pk, sources),
                )
            }
            results: list[IngestResult | None] = [None] * len(prepared)
            new: list[int] = []  # positions of documents to create
            doc_pks: dict[int, int] = {}  # position -> documents.id
            versions: dict[int, int] = {}  # position -> version number
            removed = removed_tokens = 0
            for position, (document, _) in enumerate(prepared):
                old = existing.get(document.source)
                if old is None:
                    new.append(position)
                    versions[position] = 1
                    continue
                old_pk, old_uid, old_hash, old_chunks, old_version = old
                if document.content_hash and old_hash == document.content_hash:
                    results[position] = IngestResult(old_uid, document.source, int(old_chunks), "unchanged",
                                                     version=old_version)
                    continue
                doc_pks[position], versions[position] = int(old_pk), int(old_version) + 1
                results[position] = IngestResult(old_uid, document.source, len(document.chunks), "replaced",
                                                 version=versions[position])
            replaced = list(doc_pks)
            if replaced:
                removed, removed_tokens = self._delete_chunks(
                    conn, "tenant_id = %s AND document_id = ANY(%s)", (tenant_pk, [doc_pks[p] for p in replaced]))
                with conn.cursor() as cur:
                    cur.executemany(
                        "UPDATE bunko.documents SET content_hash = %s, metadata = %s, chunk_count = %s, "
                        "version = %s, updated_at = now() WHERE tenant_id = %s AND id = %s",
                        [(prepared[p][0].content_hash, Jsonb(prepared[p][0].metadata), len(prepared[p][0].chunks),
                          versions[p], tenant_pk, doc_pks[p]) for p in replaced],
                    )
            if new:
                created = conn.execute(
                    "INSERT INTO bunko.documents (uid, tenant_id, collection_id, source, content_hash, metadata, "
                    "chunk_count) SELECT u, %s, %s, s, h, m, n "
                    "FROM unnest(%s::text[], %s::text[], %s::text[], %s::jsonb[], %s::int4[]) AS t(u, s, h, m, n) "
                    "RETURNING uid, id",
                    (tenant_pk, collection_pk, [prepared[p][0].id for p in new], [prepared[p][0].source for p in new],
                     [prepared[p][0].content_hash for p in new], [Jsonb(prepared[p][0].metadata) for p in new],
                     [len(prepared[p][0].chunks) for p in new]),
                ).fetchall()
                pk_by_uid = {uid: int(pk) for uid, pk in created}
                for p in new:
                    document = prepared[p][0]
                    doc_pks[p] = pk_by_uid[document.id]
                    results[p] = IngestResult(document.id, document.source, len(document.chunks), "created",
                                              version=1)
            written = [p for p in range(len(prepared)) if p in doc_pks]
            version_pks: dict[int, int] = {}
            if written:
                version_rows = conn.execute(
                    "INSERT INTO bunko.document_versions (tenant_id, document_id, version, content_hash, metadata, "
                    "chunk_count) SELECT %s, d, v, h, m, n "
                    "FROM unnest(%s::int8[], %s::int4[], %s::text[], %s::jsonb[], %s::int4[]) AS t(d, v, h, m, n) "
                    "RETURNING document_id, id",
                    (tenant_pk, [doc_pks[p] for p in written], [versions[p] for p in written],
                     [prepared[p][0].content_hash for p in written], [Jsonb(prepared[p][0].metadata) for p in written],
                     [len(prepared[p][0].chunks) for p in written]),
                ).fetchall()
                version_by_doc = {int(d): int(v) for d, v in version_rows}
                version_pks = {p: version_by_doc[doc_pks[p]] for p in written}
                conn.execute(
                    "UPDATE bunko.documents d SET current_version_id = t.v FROM unnest(%s::int8[], %s::int8[]) "
                    "AS t(d, v) WHERE d.tenant_id = %s AND d.id = t.d",
                    ([doc_pks[p] for p in written], [version_pks[p] for p in written], tenant_pk),
                )
            copy_rows: list[tuple] = []
            for p in written:
                document, vectors = prepared[p]
                for i, chunk in enumerate(document.chunks):
                    copy_rows.append((chunk.id, tenant_pk, collection_pk, doc_pks[p], version_pks[p], chunk.index,
                                      chunk.start, chunk.end, chunk.token_count, chunk.content,
                                      Jsonb(chunk.metadata), vectors[i], *keywords[p][i]))
            self._copy_chunks(conn, copy_rows)
            added = len(copy_rows) - removed
            tokens = sum(r[-1] for r in copy_rows) - removed_tokens
            self._count(conn, tenant_pk, collection_pk, len(new), added, tokens)
            total = int(row[8]) + added
        self._maybe_build_index(collection_pk, total)
        elapsed = (time.perf_counter() - started) * 1000
        final = [r for r in results if r is not None]
        for result in final:
            result.processing_time_ms = elapsed / max(1, len(final))
        return final

    @staticmethod
    def _checked_vectors(collection: str, dim: int, document: DocumentWrite) -> np.ndarray:
        vectors = np.asarray(document.vectors, dtype=np.float32)
        if not document.chunks:
            return vectors
        if vectors.ndim != 2 or vectors.shape[0] != len(document.chunks):
            raise VectorStoreError(
                f"document {document.source!r}: {len(document.chunks)} chunks but vectors of shape {vectors.shape}"
            )
        if vectors.shape[1] != dim:
            raise DimensionMismatchError(
                f"collection {collection!r} holds {dim}-dimensional vectors; got {vectors.shape[1]} dimensions"
            )
        if not np.all(np.isfinite(vectors)):
            raise VectorStoreError("vectors contain NaN or infinite values")
        return vectors

    _CHUNK_COLUMNS = ("uid, tenant_id, collection_id, document_id, version_id, chunk_index, start_offset, end_offset, "
                      "token_count, content, metadata, embedding")

    @classmethod
    def _copy_chunks(cls, conn: Any, rows: list[tuple]) -> None:
        """COPY rows (the chunk columns plus the analyzed keyword text) in binary, then one checked INSERT."""
        if not rows:
            return
        columns = cls._CHUNK_COLUMNS
        with conn.cursor() as cur:
            with cur.copy(f"COPY bunko_chunk_stage ({columns}, fts_text, fts_length) FROM STDIN (FORMAT BINARY)"
                          ) as copy:
                copy.set_types(["text", "int8", "int8", "int8", "int8", "int4", "int4", "int4", "int4", "text",
                                "jsonb", "vector", "text", "int4"])
                for r in rows:
                    copy.write_row(r)
            # The analyzer's tokens arrive as a tsvector literal: the cast only parses it, no text-search
            # parser or dictionary runs, so the lexemes are exactly the tokens the queries ask for.
            cur.execute(f"INSERT INTO bunko.chunks ({columns}, fts, fts_length) SELECT {columns}, "
                        "fts_text::tsvector, fts_length FROM bunko_chunk_stage")
            cur.execute("TRUNCATE bunko_chunk_stage")

    def _maybe_build_index(self, collection_pk: int, chunk_count: int) -> None:
        """Build the collection's HNSW index once it is big enough -- unless a bulk load is on.

        Inserting through an HNSW index is several times slower than building it once after
        the load, so ``bulk_load()`` defers the build to its end. The data is committed
        already, so a failing build is logged, not raised into the write.
        """
        if self._bulk or chunk_count < self._backend.settings.hnsw_min_rows:
            return
        try:
            self.build_index(collection_pk=collection_pk)
        except VectorStoreError as exc:
            logger.warning("could not build the HNSW index of collection %s: %s", collection_pk, exc)

    @contextmanager
    def bulk_load(self, collection: str) -> Iterator[None]:
        """Defer index builds while many documents are written; build and ANALYZE at the end."""
        self._bulk = True
        try:
            yield
        finally:
            self._bulk = False
            try:
                with self._tx() as (conn, tenant_pk):
                    row = self._collection_row(conn, tenant_pk, collection)
                    collection_pk, total = int(row[0]), int(row[8])
            except CollectionNotFoundError:
                return
            self._maybe_build_index(collection_pk, total)
            with self._tx() as (conn, _):
                conn.execute("SELECT bunko.analyze_tables()")

    def build_index(self, collection: str | None = None, *, collection_pk: int | None = None) -> str | None:
        """Build (if missing) the HNSW index of a collection; returns its name."""
        settings = self._backend.settings
        with self._backend._index_lock, self._tx() as (conn, tenant_pk):
            if collection_pk is None:
                collection_pk = int(self._collection_row(conn, tenant_pk, collection or "")[0])
            return conn.execute(
                "SELECT bunko.build_hnsw_index(%s, %s, %s)",
                (collection_pk, settings.maintenance_work_mem, settings.parallel_workers),
            ).fetchone()[0]

    def _has_index(self, conn: Any, collection_pk: int) -> bool:
        # Only "it exists" is cached: an index goes away only with its collection, and then the
        # collection lookup before this fails first. One round trip less per search.
        if collection_pk in self._backend._indexed:
            return True
        found = bool(conn.execute("SELECT to_regclass(%s) IS NOT NULL",
                                  (f"bunko.chunks_hnsw_{collection_pk}",)).fetchone()[0])
        if found:
            self._backend._indexed.add(collection_pk)
        return found

    def find_by_source(self, collection: str, source: str) -> DocumentInfo | None:
        """The document stored under ``source``, or None (also when the collection is missing)."""
        with self._tx() as (conn, tenant_pk):
            try:
                row = self._collection_row(conn, tenant_pk, collection)
            except CollectionNotFoundError:
                return None
            found = conn.execute(_DOC_SELECT + " AND d.collection_id = %s AND d.source = %s",
                                 (tenant_pk, row[0], source)).fetchone()
        return None if found is None else _doc_info(found)

    def list_documents(self, collection: str, limit: int | None = None, offset: int = 0) -> list[DocumentInfo]:
        """Documents of a collection, oldest first."""
        with self._tx() as (conn, tenant_pk):
            row = self._collection_row(conn, tenant_pk, collection)
            rows = conn.execute(_DOC_SELECT + " AND d.collection_id = %s ORDER BY d.id LIMIT %s OFFSET %s",
                                (tenant_pk, row[0], limit, int(offset))).fetchall()
        return [_doc_info(r) for r in rows]

    def get_document(self, document_id: str, collection: str | None = None) -> DocumentInfo:
        """One document of this tenant, or ``DocumentNotFoundError``."""
        with self._tx() as (conn, tenant_pk):
            found = None
            if tenant_pk is not None:
                query, params = _DOC_SELECT + " AND d.uid = %s", [tenant_pk, document_id]
                if collection is not None:
                    query += " AND d.collection_id = %s"
                    params.append(self._collection_row(conn, tenant_pk, collection)[0])
                found = conn.execute(query, params).fetchone()
        if found is None:
            raise DocumentNotFoundError(f"document {document_id!r} does not exist in tenant {self._tenant!r}")
        return _doc_info(found)

    def delete_documents(self, document_ids: Sequence[str], collection: str | None = None) -> int:
        """Delete documents (and their chunks); returns how many existed in this tenant."""
        ids = [str(i) for i in document_ids]
        if not ids:
            return 0
        with self._tx() as (conn, tenant_pk):
            if tenant_pk is None:
                return 0
            query, params = ("SELECT id, collection_id, chunk_count FROM bunko.documents "
                             "WHERE tenant_id = %s AND uid = ANY(%s)"), [tenant_pk, ids]
            if collection is not None:
                query += " AND collection_id = %s"
                params.append(self._collection_row(conn, tenant_pk, collection)[0])
            rows = conn.execute(query + " FOR UPDATE", params).fetchall()
            for doc_pk, collection_pk, _ in rows:
                removed, tokens = self._delete_chunks(conn, "tenant_id = %s AND document_id = %s", (tenant_pk, doc_pk))
                conn.execute("DELETE FROM bunko.documents WHERE tenant_id = %s AND id = %s", (tenant_pk, doc_pk))
                self._count(conn, tenant_pk, collection_pk, -1, -removed, -tokens)
        return len(rows)

    # -- chunks and vectors -----------------------------------------------------------------
    def upsert(self, collection: str, records: Sequence[VectorRecord]) -> list[str]:
        """Insert or update records that carry vectors; ids are generated when missing (R14)."""
        if not records:
            return []
        for record in records:
            if record.vector is None:
                raise VectorStoreError("upsert needs a vector on every record; embed the content first")
        ids = [r.id or new_id() for r in records]
        if len(set(ids)) != len(ids):
            raise VectorStoreError("upsert got the same id twice in one call")
        vectors = np.asarray([r.vector for r in records], dtype=np.float32)
        analyzer = self._analyzer(collection)
        keywords = [_keyword_columns(analyzer, r.content) for r in records]
        with self._tx() as (conn, tenant_pk):
            row = self._collection_row(conn, tenant_pk, collection)
            _same_analyzer(row[10], analyzer, collection)
            collection_pk, dim = int(row[0]), int(row[5])
            if vectors.ndim != 2 or vectors.shape[1] != dim:
                raise DimensionMismatchError(
                    f"collection {collection!r} holds {dim}-dimensional vectors; got {vectors.shape[-1]} dimensions"
                )
            if not np.all(np.isfinite(vectors)):
                raise VectorStoreError("vectors contain NaN or infinite values")
            doc_pks: dict[str, int] = {}
            for record in records:
                if record.document_id and record.document_id not in doc_pks:
                    found = conn.execute(
                        "SELECT id FROM bunko.documents WHERE tenant_id = %s AND collection_id = %s AND uid = %s",
                        (tenant_pk, collection_pk, record.document_id),
                    ).fetchone()
                    if found is None:
                        raise DocumentNotFoundError(
                            f"document {record.document_id!r} does not exist in collection {collection!r}"
                        )
                    doc_pks[record.document_id] = int(found[0])
            removed, removed_tokens = self._delete_chunks(
                conn, "tenant_id = %s AND collection_id = %s AND uid = ANY(%s)", (tenant_pk, collection_pk, ids))
            rows = [(ids[i], tenant_pk, collection_pk, doc_pks.get(r.document_id or ""), None,
                     int(r.metadata.get("chunk_index", 0)), 0, len(r.content), 0, r.content, Jsonb(r.metadata),
                     vectors[i], *keywords[i]) for i, r in enumerate(records)]
            self._copy_chunks(conn, rows)
            self._count(conn, tenant_pk, collection_pk, 0, len(records) - removed,
                        sum(k[1] for k in keywords) - removed_tokens)
        return ids

    def delete(self, collection: str, ids: Sequence[str]) -> int:
        """Delete chunks by id; returns how many existed in this tenant's collection."""
        if not ids:
            return 0
        with self._tx() as (conn, tenant_pk):
            row = self._collection_row(conn, tenant_pk, collection)
            removed, tokens = self._delete_chunks(conn, "tenant_id = %s AND collection_id = %s AND uid = ANY(%s)",
                                                  (tenant_pk, row[0], [str(i) for i in ids]))
            self._count(conn, tenant_pk, row[0], 0, -removed, -tokens)
        return int(removed)

    def chunk_vectors(self, collection: str, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
        """The stored vectors of these chunks of this tenant's collection (unknown ids are left out)."""
        if not chunk_ids:
            return {}
        with self._tx() as (conn, tenant_pk):
            row = self._collection_row(conn, tenant_pk, collection)
            rows = conn.execute(
                "SELECT uid, embedding FROM bunko.chunks WHERE tenant_id = %s AND collection_id = %s AND uid = ANY(%s)",
                (tenant_pk, row[0], [str(i) for i in chunk_ids]),
            ).fetchall()
        return {uid: np.asarray(vector.to_numpy() if hasattr(vector, "to_numpy") else vector, dtype=np.float32)
                for uid, vector in rows}

    def count(self, collection: str, *, filter: FilterLike = None) -> int:
        """Number of chunks in a collection (that pass ``filter``, if given)."""
        flt = as_filter(filter)
        if flt is None:
            return self.get_collection(collection).chunk_count
        where, params = compile_postgres(flt)
        with self._tx() as (conn, tenant_pk):
            row = self._collection_row(conn, tenant_pk, collection)
            return int(conn.execute(
                f"SELECT count(*) FROM bunko.chunks c{_DOC_JOIN} WHERE c.tenant_id = %s AND c.collection_id = %s "
                f"AND {where}", [tenant_pk, row[0], *params],
            ).fetchone()[0])

    # -- search ---------------------------------------------------------------------------
    def query(
        self,
        collection: str,
        vector: Sequence[float],
        top_k: int = 5,
        *,
        threshold: float | None = None,
        document_ids: Sequence[str] | None = None,
        include_content: bool = True,
        filter: FilterLike = None,
    ) -> list[SearchHit]:
        """Top-k by cosine similarity, best first; restricted to ``document_ids`` and ``filter`` if given (R21)."""
        top_k = _check_top_k(top_k)
        q = check_query_vector(vector)
        flt = as_filter(filter)
        with self._tx() as (conn, tenant_pk):
            row = self._collection_row(conn, tenant_pk, collection)
            collection_pk, dim, total = int(row[0]), int(row[5]), int(row[8])
            if q.shape[0] != dim:
                raise DimensionMismatchError(
                    f"collection {collection!r} holds {dim}-dimensional vectors; got {q.shape[0]} dimensions"
                )
            plan = self.plan(conn, tenant_pk, collection_pk, dim, total, top_k, document_ids, flt)
            ranked = plan.run(conn, q)
            if threshold is not None:
                ranked = [(pk, s) for pk, s in ranked if s >= threshold]
            self.last_plan = plan.strategy
            return _fetch_hits(conn, tenant_pk, ranked, include_content)

    def plan(self, conn: Any, tenant_pk: int, collection_pk: int, dim: int, total: int, top_k: int,
             document_ids: Sequence[str] | None, flt: Filter | None = None) -> _Plan:
        """Choose how to search: exact scan, HNSW (iterative or over-fetch), from the restriction's size.

        A ``document_ids`` restriction is sized from the documents' chunk counts. A filter is sized
        by counting the chunks that pass it, stopping one past the exact-scan limit: a selective
        filter is known exactly and takes the exact path; a broad one is known to leave more than
        that, which is all the index strategies need (they fall back to the exact scan whenever
        they come back with fewer than min(k, matching) hits).
        """
        settings = self._backend.settings
        doc_pks: list[int] | None = None
        matching = total
        if document_ids is not None:
            doc_pks = [r[0] for r in conn.execute(
                "SELECT id FROM bunko.documents WHERE tenant_id = %s AND collection_id = %s AND uid = ANY(%s)",
                (tenant_pk, collection_pk, [str(d) for d in document_ids]))]
            matching = sum(r[0] for r in conn.execute(
                "SELECT chunk_count FROM bunko.documents WHERE tenant_id = %s AND id = ANY(%s)",
                (tenant_pk, doc_pks))) if doc_pks else 0
        has_index = total >= settings.hnsw_min_rows and self._has_index(conn, collection_pk)
        where: tuple[str, list[Any]] | None = compile_postgres(flt) if flt is not None else None
        restricted = doc_pks is not None or where is not None
        if where is not None and has_index and matching > 0:
            # Without an index the exact scan applies the filter itself; no need to count first.
            bound = max(settings.exact_max_rows, top_k) + 1
            docs = " AND c.document_id = ANY(%s)" if doc_pks is not None else ""
            matching = int(conn.execute(
                f"SELECT count(*) FROM (SELECT 1 FROM bunko.chunks c{_DOC_JOIN} WHERE c.tenant_id = %s "
                f"AND c.collection_id = %s{docs} AND {where[0]} LIMIT %s) AS passing",
                [tenant_pk, collection_pk, *([doc_pks] if doc_pks is not None else []), *where[1], bound],
            ).fetchone()[0])
        if matching == 0:
            strategy = "empty"
        elif not has_index or (restricted and matching <= settings.exact_max_rows):
            strategy = "exact"
        elif not restricted:
            strategy = "hnsw"
        elif self._backend._iterative:
            strategy = "hnsw-iterative"
        else:
            strategy = "hnsw-overfetch"
        return _Plan(strategy, tenant_pk, collection_pk, dim, top_k, doc_pks, matching, total, settings, where)

    def keyword_search(
        self,
        collection: str,
        query: str,
        top_k: int = 5,
        *,
        document_ids: Sequence[str] | None = None,
        filter: FilterLike = None,
    ) -> list[SearchHit]:
        """Top-k by BM25 (or ``ts_rank``, see ``PostgresSettings.keyword_ranking``) over the analyzed text.

        ``document_ids`` and ``filter`` restrict the matches; BM25's document frequencies are the
        collection's.
        """
        top_k = _check_top_k(top_k)
        flt = as_filter(filter)
        with self._tx() as (conn, tenant_pk):
            row = self._collection_row(conn, tenant_pk, collection)
            # The query is analyzed as the collection's chunks were, and sent as a tsquery literal:
            # user text is never parsed as tsquery syntax.
            phrases = get_analyzer(row[10]).query_phrases(query)
            tsquery = tsquery_literal(phrases)
            if tsquery is None:
                return []
            restrict, restrict_params = "", []
            if document_ids is not None:
                restrict = (" AND c.document_id IN (SELECT id FROM bunko.documents WHERE tenant_id = %s "
                            "AND uid = ANY(%s))")
                restrict_params = [tenant_pk, [str(d) for d in document_ids]]
            join = ""
            if flt is not None:
                where, where_params = compile_postgres(flt)
                join = _DOC_JOIN
                restrict += f" AND {where}"
                restrict_params += where_params
            settings = self._backend.settings
            if settings.keyword_ranking == "ts_rank":
                ranked = conn.execute(
                    "SELECT c.id, ts_rank(c.fts, %s::tsquery) AS score FROM bunko.chunks c" + join +
                    " WHERE c.tenant_id = %s AND c.collection_id = %s AND c.fts @@ %s::tsquery"
                    + restrict + " ORDER BY score DESC, c.id LIMIT %s",
                    [tsquery, tenant_pk, row[0], tsquery, *restrict_params, top_k],
                ).fetchall()
            else:
                if any(len(p) > 2 for p in phrases):
                    raise VectorStoreError(f"BM25 on PostgreSQL scores phrases of one or two tokens; the "
                                           f"{row[10]!r} analyzer made a longer one. Set keyword_ranking='ts_rank'")
                chunks, tokens = int(row[8]), int(row[11])
                ranked = conn.execute(
                    _BM25_SQL.format(join=join, restrict=restrict),
                    [[p[0] for p in phrases], [p[1] if len(p) > 1 else "" for p in phrases],
                     tenant_pk, row[0], tsquery, sorted({t for p in phrases for t in p}), chunks, settings.bm25_k1,
                     settings.bm25_k1,
                     settings.bm25_b, settings.bm25_b, max(tokens, 1) / max(chunks, 1),
                     tenant_pk, *restrict_params, top_k],
                ).fetchall()
            return _fetch_hits(conn, tenant_pk, [(r[0], float(r[1])) for r in ranked], True)

    # -- usage records, search logs and conversations --------------------------------------
    def record_usage(self, events: Sequence[UsageEvent], *, user_id: str | None = None) -> None:
        """Store metered operations (embedding, llm, search, upsert, ...) for this tenant (and user, if given)."""
        items = list(events)
        if not items:
            return
        with self._tx(create=True) as (conn, tenant_pk), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO bunko.usage_records (tenant_id, user_id, operation, provider, model, input_tokens, "
                "output_tokens, latency_ms, items, metadata) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                [(tenant_pk, user_id, e.operation, e.provider, e.model, int(e.input_tokens), int(e.output_tokens),
                  float(e.latency_ms), int(e.items), Jsonb(e.metadata)) for e in items],
            )

    def usage_summary(self, since: datetime | None = None) -> list[UsageTotal]:
        """This tenant's usage grouped by operation, provider and model (since ``since`` if given)."""
        with self._tx() as (conn, tenant_pk):
            if tenant_pk is None:
                return []
            where, params = "tenant_id = %s", [tenant_pk]
            if since is not None:
                where += " AND created_at >= %s"
                params.append(utc(since))
            rows = conn.execute(
                "SELECT operation, provider, model, count(*), sum(input_tokens), sum(output_tokens), sum(items), "
                f"sum(latency_ms) FROM bunko.usage_records WHERE {where} GROUP BY operation, provider, model "
                "ORDER BY operation, provider, model",
                params,
            ).fetchall()
        totals: dict[tuple[str, str, str], UsageTotal] = {}
        for row in rows:
            add_usage(totals, row)
        return list(totals.values())

    def log_search(self, query: str | None, result_count: int, search_time_ms: float, search_type: str, *,
                   user_id: str | None = None) -> None:
        """Record one search (``query`` None when search logs are anonymised; ``user_id`` who searched)."""
        with self._tx(create=True) as (conn, tenant_pk):
            conn.execute(
                "INSERT INTO bunko.search_logs (tenant_id, user_id, query, result_count, search_time_ms, "
                "search_type) VALUES (%s, %s, %s, %s, %s, %s)",
                (tenant_pk, user_id, query, int(result_count), float(search_time_ms), search_type),
            )

    def search_log(self, limit: int = 100) -> list[dict[str, Any]]:
        """This tenant's latest searches, newest first."""
        with self._tx() as (conn, tenant_pk):
            if tenant_pk is None:
                return []
            rows = conn.execute(
                "SELECT query, result_count, search_time_ms, search_type, created_at FROM bunko.search_logs "
                "WHERE tenant_id = %s ORDER BY id DESC LIMIT %s",
                (tenant_pk, int(limit)),
            ).fetchall()
        return [{"query": r[0], "result_count": r[1], "search_time_ms": r[2], "search_type": r[3],
                 "created_at": r[4].isoformat()} for r in rows]

    def append_turns(self, conversation_id: str, turns: Sequence[ConversationTurn]) -> None:
        """Append turns to one of this tenant's conversations (created on first use)."""
        check_conversation_id(conversation_id)
        items = check_turns(turns)
        if not items:
            return
        with self._tx(create=True) as (conn, tenant_pk), conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO bunko.conversation_turns (tenant_id, conversation_id, role, content, metadata) "
                "VALUES (%s, %s, %s, %s, %s)",
                [(tenant_pk, conversation_id, t.role, t.content, Jsonb(t.metadata)) for t in items],
            )

    def conversation(self, conversation_id: str, limit: int | None = None) -> list[ConversationTurn]:
        """The last ``limit`` turns (all if None) of a conversation, oldest first; [] if it does not exist."""
        check_conversation_id(conversation_id)
        with self._tx() as (conn, tenant_pk):
            if tenant_pk is None:
                return []
            rows = conn.execute(
                "SELECT role, content, metadata, created_at FROM bunko.conversation_turns "
                "WHERE tenant_id = %s AND conversation_id = %s ORDER BY id DESC LIMIT %s",
                (tenant_pk, conversation_id, limit),
            ).fetchall()
        return [ConversationTurn(r[0], r[1], dict(r[2]), r[3].isoformat()) for r in reversed(rows)]

    def delete_conversation(self, conversation_id: str) -> int:
        """Delete a conversation; returns how many turns it had."""
        check_conversation_id(conversation_id)
        with self._tx() as (conn, tenant_pk):
            if tenant_pk is None:
                return 0
            return conn.execute(
                "DELETE FROM bunko.conversation_turns WHERE tenant_id = %s AND conversation_id = %s",
                (tenant_pk, conversation_id),
            ).rowcount


# BM25 over the analyzer's phrases (of one or two tokens), in one statement:
# * ``candidates``: chunks matching any phrase, through the GIN index;
# * ``lexemes``: each query token's positions in each candidate, cut out of the tsvector in C
#   (setweight marks the query's lexemes, ts_filter keeps only them);
# * ``tf``: per (phrase, chunk), how often the phrase occurs: the token's positions, or for a
#   two-token phrase the positions p of the first with p + 1 among the second's; a phrase's
#   document frequency is its number of chunks, counted
#   before any restriction so that a restricted search scores like an unrestricted one;
# * idf = ln((N - df + 0.5) / (df + 0.5)), at least 1e-6, as SQLite's FTS5 computes it, so a phrase in
#   half the chunks or more counts for (almost) nothing; N and the average length come from the
#   collection's counters (chunk_count, keyword_tokens).
_BM25_SQL = """
WITH q AS (
    SELECT i, t1, nullif(t2, '') AS t2 FROM unnest(%s::text[], %s::text[]) WITH ORDINALITY AS x(t1, t2, i)
), candidates AS MATERIALIZED (
    SELECT c.id, c.fts, c.fts_length FROM bunko.chunks c
    WHERE c.tenant_id = %s AND c.collection_id = %s AND c.fts @@ %s::tsquery
), lexemes AS MATERIALIZED (
    SELECT k.id, u.lexeme, u.positions
    FROM candidates k, unnest(ts_filter(setweight(k.fts, 'A', %s::text[]), '{{a}}')) AS u
), tf AS (
    SELECT q.i, l.id, cardinality(l.positions) AS tf FROM q JOIN lexemes l ON l.lexeme = q.t1 WHERE q.t2 IS NULL
    UNION ALL
    SELECT i, id, tf FROM (
        SELECT q.i, a.id, (SELECT count(*) FROM unnest(a.positions) AS p WHERE p + 1 = ANY (b.positions)) AS tf
        FROM q JOIN lexemes a ON a.lexeme = q.t1 JOIN lexemes b ON b.id = a.id AND b.lexeme = q.t2
    ) pairs WHERE tf > 0
), idf AS (
    SELECT i, greatest(ln((greatest(%s, count(*)) - count(*) + 0.5) / (count(*) + 0.5)), 1e-6) AS idf
    FROM tf GROUP BY i
), scored AS (
    SELECT t.id, sum(idf.idf * t.tf * (%s + 1) / (t.tf + %s * (1 - %s + %s * k.fts_length / %s::float8))) AS score
    FROM tf t JOIN idf USING (i) JOIN candidates k ON k.id = t.id GROUP BY t.id
)
SELECT s.id, s.score FROM scored s JOIN bunko.chunks c ON c.id = s.id{join}
WHERE c.tenant_id = %s{restrict}
ORDER BY s.score DESC, s.id LIMIT %s
"""


@dataclass(slots=True)
class _Plan:
    """A chosen way to run one vector search."""

    strategy: str  # "empty", "exact", "hnsw", "hnsw-iterative" or "hnsw-overfetch"
    tenant_pk: int
    collection_pk: int
    dim: int
    top_k: int
    doc_pks: list[int] | None
    matching: int  # exact, or (for a broad filter) a lower bound above settings.exact_max_rows
    total: int
    settings: PostgresSettings
    where: tuple[str, list[Any]] | None = None  # a compiled metadata filter over c (chunks) and d (documents)

    def run(self, conn: Any, q: np.ndarray) -> list[tuple[int, float]]:
        if self.strategy == "empty":
            return []
        if self.strategy == "exact":
            return self._exact(conn, q)
        want = min(self.top_k, self.matching)
        if self.strategy == "hnsw":
            found = self._index(conn, q, ef_search=max(self.settings.ef_search, self.top_k), limit=self.top_k)
        elif self.strategy == "hnsw-iterative":
            found = self._iterative(conn, q)
        else:
            found = self._overfetch(conn, q)
        if len(found) < want:  # never come back short: the exact scan is the last word
            self.strategy += "+exact"
            return self._exact(conn, q)
        return found

    def _restriction(self) -> tuple[str, str, list[Any]]:
        """(join, conditions, parameters) restricting ``c`` to the documents and the filter."""
        join, restrict, params = "", "", []
        if self.doc_pks is not None:
            restrict, params = " AND c.document_id = ANY(%s)", [self.doc_pks]
        if self.where is not None:
            join = _DOC_JOIN
            restrict += f" AND {self.where[0]}"
            params += self.where[1]
        return join, restrict, params

    def _exact(self, conn: Any, q: np.ndarray) -> list[tuple[int, float]]:
        # The ORDER BY expression differs from the index expression, so the planner cannot use HNSW here.
        join, restrict, params = self._restriction()
        rows = conn.execute(
            "SELECT c.id, c.embedding <=> %s::vector AS distance FROM bunko.chunks c" + join +
            " WHERE c.tenant_id = %s AND c.collection_id = %s" + restrict + " ORDER BY distance, c.id LIMIT %s",
            [q, self.tenant_pk, self.collection_pk, *params, self.top_k],
        ).fetchall()
        return [(int(r[0]), 1.0 - float(r[1])) for r in rows]

    def _index_sql(self) -> str:
        cast = _vector_literal_type(self.dim)
        join, restrict, _ = self._restriction()
        # collection_id is inlined as an integer literal so the partial index's predicate matches.
        return (
            f"SELECT c.id, 1 - ((c.embedding::{cast}) <=> %s::{cast}) AS score FROM bunko.chunks c{join} "
            f"WHERE c.tenant_id = %s AND c.collection_id = {int(self.collection_pk)}" + restrict +
            f" ORDER BY (c.embedding::{cast}) <=> %s::{cast} LIMIT %s"
        )

    def _index(self, conn: Any, q: np.ndarray, *, ef_search: int, limit: int) -> list[tuple[int, float]]:
        if ef_search != self.settings.ef_search:  # the session default is settings.ef_search (see _configure)
            conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(min(1000, ef_search)),))
        _, _, params = self._restriction()
        rows = conn.execute(self._index_sql(), [q, self.tenant_pk, *params, q, limit]).fetchall()
        return [(int(r[0]), float(r[1])) for r in rows]

    def _iterative(self, conn: Any, q: np.ndarray) -> list[tuple[int, float]]:
        conn.execute("SELECT set_config('hnsw.iterative_scan', 'strict_order', true)")
        conn.execute("SELECT set_config('hnsw.max_scan_tuples', %s, true)", (str(self.settings.max_scan_tuples),))
        # An invalid or unsupported value silently leaves iterative scans off: read it back.
        if conn.execute("SHOW hnsw.iterative_scan").fetchone()[0] != "strict_order":
            self.strategy = "hnsw-overfetch"
            return self._overfetch(conn, q)
        return self._index(conn, q, ef_search=max(self.settings.ef_search, self.top_k), limit=self.top_k)

    def _overfetch(self, conn: Any, q: np.ndarray) -> list[tuple[int, float]]:
        """Ask the index for more candidates than k, filter, and widen until k match."""
        selectivity = max(self.matching / max(self.total, 1), 1e-6)
        fetch = int(min(self.total, max(self.top_k * 4, self.top_k / selectivity * 2)))
        if fetch > 1000:  # ef_search tops out at 1000: the index cannot reach this deep
            self.strategy = "hnsw-overfetch+exact"
            return self._exact(conn, q)
        cast = _vector_literal_type(self.dim)
        join, restrict, params = self._restriction()
        while True:
            conn.execute("SELECT set_config('hnsw.ef_search', %s, true)", (str(min(1000, max(fetch, 40))),))
            rows = conn.execute(
                f"SELECT c.id, candidates.score FROM (SELECT id, 1 - ((embedding::{cast}) <=> %s::{cast}) AS score "
                f"FROM bunko.chunks WHERE tenant_id = %s AND collection_id = {int(self.collection_pk)} "
                f"ORDER BY (embedding::{cast}) <=> %s::{cast} LIMIT %s) candidates "
                f"JOIN bunko.chunks c ON c.id = candidates.id{join} WHERE c.tenant_id = %s{restrict} "
                "ORDER BY candidates.score DESC, c.id LIMIT %s",
                [q, self.tenant_pk, q, fetch, self.tenant_pk, *params, self.top_k],
            ).fetchall()
            if len(rows) >= min(self.top_k, self.matching) or fetch >= min(self.total, 1000):
                return [(int(r[0]), float(r[1])) for r in rows]
            fetch = min(self.total, fetch * 4)


def _fetch_hits(conn: Any, tenant_pk: int, ranked: list[tuple[int, float]], include_content: bool) -> list[SearchHit]:
    if not ranked:
        return []
    rows = conn.execute(
        "SELECT c.id, c.uid, coalesce(d.uid, ''), coalesce(d.source, ''), c.content, c.chunk_index, c.metadata, "
        "coalesce(d.metadata, '{}'::jsonb), c.start_offset, c.end_offset, c.token_count, d.chunk_count "
        "FROM bunko.chunks c LEFT JOIN bunko.documents d ON d.tenant_id = c.tenant_id AND d.id = c.document_id "
        "WHERE c.tenant_id = %s AND c.id = ANY(%s)",
        (tenant_pk, [pk for pk, _ in ranked]),
    ).fetchall()
    by_id = {r[0]: r for r in rows}
    hits = []
    for pk, score in ranked:
        r = by_id.get(pk)
        if r is None:
            continue
        hits.append(make_hit(r, score, r[7], r[6], include_content))
    return hits


# Metadata filters read the chunk as c and its document as d.
_DOC_JOIN = " LEFT JOIN bunko.documents d ON d.tenant_id = c.tenant_id AND d.id = c.document_id"

_COLLECTION_SELECT = (
    "SELECT id, name, description, embedding_provider, embedding_model, dimension, created_at, document_count, "
    "chunk_count, config, analyzer, keyword_tokens FROM bunko.collections"
)


def _keyword_columns(analyzer: Analyzer, content: str) -> tuple[str, int]:
    """The staged keyword columns of a chunk: its tsvector literal and its token count."""
    tokens = analyzer.index_tokens(content)
    return tsvector_literal(tokens), len(tokens)

_DOC_SELECT = (
    "SELECT d.uid, d.source, d.chunk_count, d.metadata, d.content_hash, d.created_at, d.version "
    "FROM bunko.documents d WHERE d.tenant_id = %s"
)


def _doc_info(row: tuple) -> DocumentInfo:
    return DocumentInfo(row[0], row[1], int(row[2]), dict(row[3]), row[4], row[5].isoformat(), int(row[6]))


def open_postgres(url: str) -> PostgresBackend:
    """Open a ``postgresql://`` URL as a backend (migrating the schema if needed)."""
    return PostgresBackend(url)

