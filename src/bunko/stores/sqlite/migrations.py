"""The embedded store's schema: ordered migrations, applied in one transaction when a file is opened.

A migration is a SQL script or a function of the connection (for steps that name tables per
collection). A function holds what it runs: it uses the helpers of this module and versioned modules
that never change (the postings of format 2, :mod:`bunko.stores.sql.postings`; the chunk text keys,
``schema.text_key``), never the store's live code, so a later change to the store cannot change what an
old migration does.
"""

from __future__ import annotations

import itertools
import sqlite3
from collections import Counter
from collections.abc import Callable, Sequence

from ...errors import VectorStoreError
from ..sql.postings import PostingsTable, counted
from .schema import SQLITE, create_fts, fts_table, has_fts, text_key


def _m007_fts_per_collection(conn: sqlite3.Connection) -> None:
    """Move every collection's rows out of the shared ``chunks_fts`` into its own FTS5 table."""
    for (collection_pk,) in conn.execute("SELECT id FROM collections").fetchall():
        create_fts(conn, collection_pk)
        conn.execute(f"INSERT INTO {fts_table(collection_pk)} (rowid, terms) SELECT f.rowid, f.terms "
                     "FROM chunks_fts f JOIN chunks c ON c.id = f.rowid WHERE c.collection_id = ?", (collection_pk,))
    conn.execute("DROP TABLE chunks_fts")


def _m009_keyword_df(conn: sqlite3.Connection) -> None:
    """Keyword statistics per collection: how many chunks hold each term (a token, or "a b" for two
    adjacent one-character tokens), counted from every collection's FTS5 text."""
    conn.execute("""CREATE TABLE keyword_df (
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        term TEXT NOT NULL,
        df INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, collection_id, term)
    ) WITHOUT ROWID""")
    for tenant_pk, collection_pk in conn.execute("SELECT tenant_id, id FROM collections").fetchall():
        if not has_fts(conn, collection_pk):
            continue
        counts: Counter[str] = Counter()
        cursor = conn.execute(f"SELECT c0 FROM {fts_table(collection_pk)}_content")
        while rows := cursor.fetchmany(4096):
            for (text,) in rows:
                tokens = text.split(" ") if text else []
                counts.update(set(tokens))
                counts.update({f"{a} {b}" for a, b in itertools.pairwise(tokens)
                               if len(a) == 1 and len(b) == 1})
        conn.executemany("INSERT INTO keyword_df (tenant_id, collection_id, term, df) VALUES (?, ?, ?, ?)",
                         [(tenant_pk, collection_pk, term, n) for term, n in sorted(counts.items())])


def _m010_keyword_postings(conn: sqlite3.Connection) -> None:
    """The table of keyword postings per collection in segments (migration 11 fills it)."""
    conn.execute("""CREATE TABLE keyword_postings (
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        segment INTEGER NOT NULL,
        term TEXT NOT NULL,
        entries BLOB NOT NULL,
        PRIMARY KEY (tenant_id, collection_id, segment, term)
    ) WITHOUT ROWID""")


def _m011_postings_format_2(conn: sqlite3.Connection) -> None:
    """Every collection's postings in format 2 (8-byte entries, counts never cut short), rebuilt from its
    FTS5 text; a database at version 10 held them in format 1."""
    conn.execute("DELETE FROM keyword_postings")
    postings = PostingsTable(SQLITE)
    for tenant_pk, collection_pk in conn.execute("SELECT tenant_id, id FROM collections").fetchall():
        if not has_fts(conn, collection_pk):
            continue
        cursor = conn.execute(f"SELECT id, c0 FROM {fts_table(collection_pk)}_content ORDER BY id")
        while rows := cursor.fetchmany(8192):
            postings.add(conn, (tenant_pk, collection_pk), counted(rows))



def _m017_keyword_text_in_chunks(conn: sqlite3.Connection) -> None:
    """Each chunk's analyzed text moves from its collection's FTS5 table into ``chunks.terms``, each
    collection's keyword token total into ``collections.keyword_tokens`` (what BM25 divides by, counted
    from that text), and the FTS5 tables go: keyword search ranks from the postings, and a write no
    longer builds an FTS5 index nothing reads."""
    conn.execute("ALTER TABLE chunks ADD COLUMN terms TEXT NOT NULL DEFAULT ''")
    conn.execute("ALTER TABLE collections ADD COLUMN keyword_tokens INTEGER NOT NULL DEFAULT 0")
    for (collection_pk,) in conn.execute("SELECT id FROM collections").fetchall():
        if has_fts(conn, collection_pk):
            conn.execute(f"UPDATE chunks SET terms = coalesce(f.c0, '') FROM {fts_table(collection_pk)}_content f "
                         "WHERE f.id = chunks.id AND chunks.collection_id = ?", (collection_pk,))
    # The tokens are joined by single spaces, and none holds a space.
    conn.execute("UPDATE collections SET keyword_tokens = (SELECT coalesce(sum(CASE WHEN k.terms = '' THEN 0 "
                 "ELSE length(k.terms) - length(replace(k.terms, ' ', '')) + 1 END), 0) FROM chunks k "
                 "WHERE k.tenant_id = collections.tenant_id AND k.collection_id = collections.id)")
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                "AND name GLOB 'chunks_fts_[0-9]*' AND sql LIKE 'CREATE VIRTUAL TABLE%'").fetchall():
        conn.execute(f'DROP TABLE "{name}"')


def _m018_chunk_text_keys(conn: sqlite3.Connection) -> None:
    """Each document chunk's text key (``schema.text_key``), indexed per collection: ingest
    finds a stored chunk of the collection with the same text (any document, any version) and takes its
    vector instead of embedding the text again. Chunks upserted without a document keep NULL."""
    conn.execute("ALTER TABLE chunks ADD COLUMN text_key INTEGER")
    conn.create_function("bunko_text_key", 1, text_key, deterministic=True)
    conn.execute("UPDATE chunks SET text_key = bunko_text_key(content) WHERE document_id IS NOT NULL")
    conn.execute("CREATE INDEX chunks_text ON chunks (collection_id, text_key) WHERE text_key IS NOT NULL")


Migration = str | Callable[[sqlite3.Connection], None]

# Ordered migrations: index i upgrades a database from version i to i + 1; a migration is a SQL
# script or a function of the connection (for steps that name tables per collection).
MIGRATIONS: list[Migration] = [
    """
    CREATE TABLE tenants (
        id INTEGER PRIMARY KEY,
        name TEXT NOT NULL UNIQUE,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE TABLE collections (
        id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        description TEXT NOT NULL DEFAULT '',
        embedding_provider TEXT NOT NULL,
        embedding_model TEXT NOT NULL,
        dimension INTEGER NOT NULL CHECK (dimension > 0),
        analyzer TEXT NOT NULL DEFAULT 'bigram',
        config TEXT NOT NULL DEFAULT '{}',
        document_count INTEGER NOT NULL DEFAULT 0,
        chunk_count INTEGER NOT NULL DEFAULT 0,
        mutation_seq INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (tenant_id, name)
    );
    CREATE TABLE documents (
        id INTEGER PRIMARY KEY,
        uid TEXT NOT NULL,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        source TEXT NOT NULL,
        content_hash TEXT NOT NULL DEFAULT '',
        metadata TEXT NOT NULL DEFAULT '{}',
        chunk_count INTEGER NOT NULL DEFAULT 0,
        version INTEGER NOT NULL DEFAULT 1,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (tenant_id, uid),
        UNIQUE (tenant_id, collection_id, source)
    );
    CREATE TABLE chunks (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        uid TEXT NOT NULL,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        collection_id INTEGER NOT NULL REFERENCES collections(id) ON DELETE CASCADE,
        document_id INTEGER REFERENCES documents(id) ON DELETE CASCADE,
        chunk_index INTEGER NOT NULL DEFAULT 0,
        start_offset INTEGER NOT NULL DEFAULT 0,
        end_offset INTEGER NOT NULL DEFAULT 0,
        token_count INTEGER NOT NULL DEFAULT 0,
        content TEXT NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        embedding BLOB NOT NULL,
        UNIQUE (tenant_id, collection_id, uid)
    );
    CREATE INDEX chunks_scan ON chunks (tenant_id, collection_id, id);
    CREATE INDEX chunks_document ON chunks (document_id);
    CREATE VIRTUAL TABLE chunks_fts USING fts5 (terms, tokenize = 'unicode61 remove_diacritics 0');
    """,
    # 2: usage records (R13), search logs (R33) and conversation turns, like PostgreSQL's.
    """
    CREATE TABLE usage_records (
        id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        user_id TEXT,
        operation TEXT NOT NULL,
        provider TEXT,
        model TEXT,
        input_tokens INTEGER NOT NULL DEFAULT 0,
        output_tokens INTEGER NOT NULL DEFAULT 0,
        latency_ms REAL,
        items INTEGER NOT NULL DEFAULT 0,
        metadata TEXT NOT NULL DEFAULT '{}',
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE INDEX usage_records_tenant ON usage_records (tenant_id, created_at);
    CREATE TABLE search_logs (
        id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        user_id TEXT,
        query TEXT,
        result_count INTEGER NOT NULL,
        search_time_ms REAL NOT NULL,
        search_type TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE INDEX search_logs_tenant ON search_logs (tenant_id, created_at);
    CREATE TABLE conversation_turns (
        id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        conversation_id TEXT NOT NULL,
        role TEXT NOT NULL,
        content TEXT NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now'))
    );
    CREATE INDEX conversation_turns_scope ON conversation_turns (tenant_id, conversation_id, id);
    """,
    # 3: the HTTP server's records (stores/service.py): API keys (hashed), rate-limit windows and upload jobs.
    """
    CREATE TABLE api_keys (
        id INTEGER PRIMARY KEY,
        key_hash TEXT NOT NULL UNIQUE,
        prefix TEXT NOT NULL,
        tenant TEXT NOT NULL,
        user_id TEXT,
        admin INTEGER NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        revoked_at TEXT
    );
    CREATE INDEX api_keys_tenant ON api_keys (tenant);
    CREATE TABLE rate_windows (
        key_id INTEGER NOT NULL REFERENCES api_keys(id) ON DELETE CASCADE,
        window_start INTEGER NOT NULL,
        hits INTEGER NOT NULL,
        PRIMARY KEY (key_id, window_start)
    );
    CREATE TABLE jobs (
        id INTEGER PRIMARY KEY,
        uid TEXT NOT NULL,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        collection TEXT NOT NULL,
        filename TEXT NOT NULL,
        file_size INTEGER NOT NULL DEFAULT 0,
        mime_type TEXT NOT NULL DEFAULT '',
        user_id TEXT,
        status TEXT NOT NULL CHECK (status IN ('processing', 'completed', 'failed')),
        chunk_count INTEGER NOT NULL DEFAULT 0,
        processing_time_ms REAL,
        error_code TEXT,
        error TEXT,
        metadata TEXT NOT NULL DEFAULT '{}',
        lease_until REAL NOT NULL DEFAULT 0,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        updated_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (tenant_id, uid)
    );
    CREATE INDEX jobs_user ON jobs (tenant_id, user_id);
    CREATE INDEX search_logs_user ON search_logs (tenant_id, user_id);
    CREATE INDEX usage_records_user ON usage_records (tenant_id, user_id);
    """,
    # agent memories (bunko.memory, stores/sql/memory.py): named memory stores per tenant, and
    # memories per user inside them (normalised float32 vectors, the analyzer's tokens).
    """
    CREATE TABLE memory_stores (
        id INTEGER PRIMARY KEY,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        name TEXT NOT NULL,
        embedding_provider TEXT NOT NULL,
        embedding_model TEXT NOT NULL,
        dimension INTEGER NOT NULL CHECK (dimension > 0),
        analyzer TEXT NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (tenant_id, name)
    );
    CREATE TABLE memories (
        id INTEGER PRIMARY KEY,
        uid TEXT NOT NULL,
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        store_id INTEGER NOT NULL REFERENCES memory_stores(id) ON DELETE CASCADE,
        user_id TEXT NOT NULL,
        session_id TEXT,
        memory_type TEXT NOT NULL,
        subject TEXT,
        occurred_at TEXT NOT NULL,
        content TEXT NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        terms TEXT NOT NULL DEFAULT '',
        embedding BLOB NOT NULL,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        UNIQUE (tenant_id, store_id, user_id, uid)
    );
    CREATE INDEX memories_user ON memories (tenant_id, user_id, session_id);
    """,
    # 5: the collection write counter: every ingest, delete or version change bumps it (the search cache key).
    """
    ALTER TABLE collections ADD COLUMN write_seq INTEGER NOT NULL DEFAULT 0;
    """,
    # 6: upload jobs as a queue that worker processes claim (bunko.worker): attempts, the claiming worker,
    # and a status that only moves forward (processing -> completed | failed), enforced by a trigger.
    """
    ALTER TABLE jobs ADD COLUMN attempts INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN max_attempts INTEGER NOT NULL DEFAULT 3;
    ALTER TABLE jobs ADD COLUMN worker TEXT;
    CREATE INDEX jobs_queue ON jobs (lease_until) WHERE status = 'processing';
    CREATE TRIGGER jobs_status_forward BEFORE UPDATE OF status ON jobs
    WHEN OLD.status <> 'processing' AND NEW.status <> OLD.status
    BEGIN
        SELECT RAISE(ABORT, 'a finished job keeps its status');
    END;
    """,
    # 7: keyword statistics per collection (one FTS5 table each) instead of across all tenants.
    _m007_fts_per_collection,
    # 8: files and URLs whose ingest failed, with the reason, until one is ingested (see SQLStore.ingest_failures).
    """
    CREATE TABLE ingest_failures (
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        collection TEXT NOT NULL,
        source TEXT NOT NULL,
        error_type TEXT NOT NULL,
        error_code TEXT NOT NULL,
        message TEXT NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 1,
        first_failed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        failed_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        PRIMARY KEY (tenant_id, collection, source)
    );
    """,
    # 9: document frequencies of terms and CJK bigrams per collection, kept by every write (keyword search).
    _m009_keyword_df,
    # 10: the table of the chunks holding each of those terms, with their counts (filled by 11).
    _m010_keyword_postings,
    # 11: the postings of every collection in format 2 (bunko.stores.sql.postings), rebuilt from its FTS5 text.
    _m011_postings_format_2,
    # 12: the user who created a record upserted without a document (bunko.stores.sql.owners).
    """
    ALTER TABLE chunks ADD COLUMN owner TEXT;
    """,
    # 13: fair job claims (bunko.stores.sql.service: claim_job): when each job was claimed, so the next claim
    # goes to the tenant, and in it to the user, whose last claim is the oldest.
    """
    ALTER TABLE jobs ADD COLUMN claimed_at REAL;
    CREATE INDEX jobs_claims ON jobs (tenant_id, claimed_at);
    CREATE INDEX jobs_user_claims ON jobs (tenant_id, user_id, claimed_at);
    CREATE INDEX jobs_waiting ON jobs (tenant_id, lease_until, id) WHERE status = 'processing';
    """,
    # 14: what an upload job's ingest embedded and what it took from the version it replaced (bunko.indexing).
    """
    ALTER TABLE jobs ADD COLUMN embedded_chunks INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN reused_chunks INTEGER NOT NULL DEFAULT 0;
    """,
    # 15: per-tenant quotas set by the operator (bunko.stores.quotas; NULL: no limit), and the tenant's own
    # request windows for its requests-per-minute quota (bunko.ratelimit).
    """
    CREATE TABLE tenant_quotas (
        tenant_id INTEGER PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
        documents INTEGER,
        chunks INTEGER,
        bytes INTEGER,
        upload_bytes_per_day INTEGER,
        requests_per_minute INTEGER
    );
    CREATE TABLE tenant_rate_windows (
        tenant_id INTEGER NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
        window_start INTEGER NOT NULL,
        hits INTEGER NOT NULL,
        PRIMARY KEY (tenant_id, window_start)
    );
    """,
    # 16: operator keys (bunko.stores.service): no tenant's; they list tenants and read and set their quotas.
    """
    CREATE TABLE operator_keys (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        key_hash TEXT NOT NULL UNIQUE,
        prefix TEXT NOT NULL,
        label TEXT,
        created_at TEXT NOT NULL DEFAULT (strftime('%Y-%m-%dT%H:%M:%fZ', 'now')),
        revoked_at TEXT
    );
    """,
    # 17: no FTS5 tables: each chunk's analyzed text in chunks.terms, each collection's token total in a counter.
    _m017_keyword_text_in_chunks,
    # 18: document chunks' text keys, indexed per collection (chunk reuse across documents, bunko.indexing).
    _m018_chunk_text_keys,
]
SCHEMA_VERSION = len(MIGRATIONS)


def split_statements(script: str) -> list[str]:
    """The statements of a SQL script, split where SQLite says a statement is complete.

    Unlike splitting at every ``;``, a trigger body or a string literal with ``;`` stays whole.
    """
    statements: list[str] = []
    pending = ""
    for line in script.splitlines(keepends=True):
        pending += line
        if sqlite3.complete_statement(pending):
            statements.append(pending.strip())
            pending = ""
    if pending.strip():
        raise VectorStoreError(f"a migration ends with an incomplete statement: {pending.strip()[:80]!r}")
    return statements


def apply_migrations(conn: sqlite3.Connection, migrations: Sequence[Migration], *, path: str = "the store") -> None:
    """Bring a database from its ``user_version`` to ``len(migrations)``, inside the caller's transaction."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > len(migrations):
        raise VectorStoreError(
            f"{path} was written by a newer bunko (schema {version}, this one knows {len(migrations)}); upgrade bunko"
        )
    for target in range(version, len(migrations)):
        migration = migrations[target]
        if callable(migration):
            migration(conn)
            conn.execute(f"PRAGMA user_version = {target + 1}")
            continue
        # executescript() would COMMIT the caller's transaction first; run statement by statement instead.
        for statement in split_statements(migration):
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {target + 1}")
