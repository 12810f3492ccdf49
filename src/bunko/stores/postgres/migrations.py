"""Versioned migrations of the PostgreSQL schema (``bunko`` schema), applied in order.

Each migration is a name and a list of steps (SQL statements, or functions of the connection for
what SQL cannot say) run in one transaction by ``bunko db migrate`` (or automatically on first use
when the connecting role may).
Applied versions are recorded in ``bunko.schema_migrations``. A function step holds what it runs: it
uses this module and versioned modules that never change (the postings of format 2,
:mod:`bunko.stores.sql.postings`), never the store's live code, so a later change to the store cannot
change what an old migration does.

Isolation is enforced twice (R15): every statement bunko sends filters by
``tenant_id``, and Row-Level Security on every tenant table admits only rows whose
``tenant_id`` equals the per-transaction setting ``bunko.tenant_id`` (and, on the per-user tables, a
transaction acting for a user sees or changes only that user's rows: m022). RLS is FORCEd,
so it binds the tables' owner too; the application works as ``bunko_app``, a role
with no BYPASSRLS, so a query that forgets its predicate sees nothing.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from ...analysis import get_analyzer, token_pairs
from ..sql.postings import Counted
from .dialect import POSTGRES, PostingsCopy
from .migrations_tenancy import (
    M016_RECORD_OWNERS,
    M017_SLIDING_RATES,
    M018_FAIR_CLAIMS,
    M019_JOB_REUSE,
    M020_TENANT_QUOTAS,
    M021_OPERATOR_KEYS,
    M022_USER_RLS,
)

logger = logging.getLogger(__name__)

# A step of a migration: a SQL statement, or a function of the connection for steps SQL cannot say.
Statement = str | Callable[[Any], None]

APP_ROLE = "bunko_app"

_TENANT = "NULLIF(current_setting('bunko.tenant_id', true), '')::bigint"

# CJK characters to space out for the keyword index, mirroring analysis.BigramAnalyzer:
# each becomes its own token, and queries ask for CJK bigrams as two-token phrases.
_CJK_CLASS = (
    "[\\u3040-\\u309f\\u30a0-\\u30ff\\u31f0-\\u31ff\\u3400-\\u4dbf\\u4e00-\\u9fff"
    "\\uf900-\\ufaff\\uff66-\\uff9f\\uac00-\\ud7af\\u3005\\u3006]"
)

_TENANT_TABLES = ("collections", "documents", "document_versions", "chunks", "usage_records", "search_logs")


def _rls(table: str) -> list[str]:
    return [
        f"ALTER TABLE bunko.{table} ENABLE ROW LEVEL SECURITY",
        f"ALTER TABLE bunko.{table} FORCE ROW LEVEL SECURITY",
        f"CREATE POLICY tenant_isolation ON bunko.{table} USING (tenant_id = {_TENANT}) "
        f"WITH CHECK (tenant_id = {_TENANT})",
    ]


_M001 = [
    "CREATE EXTENSION IF NOT EXISTS vector",
    """CREATE TABLE bunko.tenants (
        id bigserial PRIMARY KEY,
        name text NOT NULL UNIQUE,
        created_at timestamptz NOT NULL DEFAULT now()
    )""",
    """CREATE TABLE bunko.collections (
        id bigserial PRIMARY KEY,
        tenant_id bigint NOT NULL REFERENCES bunko.tenants (id) ON DELETE CASCADE,
        name text NOT NULL,
        description text NOT NULL DEFAULT '',
        embedding_provider text NOT NULL,
        embedding_model text NOT NULL,
        dimension integer NOT NULL CHECK (dimension > 0 AND dimension <= 16000),
        analyzer text NOT NULL DEFAULT 'bigram',
        hnsw_m integer NOT NULL DEFAULT 16,
        hnsw_ef_construction integer NOT NULL DEFAULT 64,
        document_count bigint NOT NULL DEFAULT 0,
        chunk_count bigint NOT NULL DEFAULT 0,
        metadata jsonb NOT NULL DEFAULT '{}',
        config jsonb NOT NULL DEFAULT '{}',
        created_at timestamptz NOT NULL DEFAULT now(),
        UNIQUE (tenant_id, name),
        UNIQUE (tenant_id, id)
    )""",
    """CREATE TABLE bunko.documents (
        id bigserial PRIMARY KEY,
        uid text NOT NULL,
        tenant_id bigint NOT NULL,
        collection_id bigint NOT NULL,
        source text NOT NULL,
        content_hash text NOT NULL DEFAULT '',
        metadata jsonb NOT NULL DEFAULT '{}',
        chunk_count integer NOT NULL DEFAULT 0,
        version integer NOT NULL DEFAULT 1,
        current_version_id bigint,
        user_id text,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        UNIQUE (tenant_id, uid),
        UNIQUE (tenant_id, collection_id, source),
        UNIQUE (tenant_id, id),
        FOREIGN KEY (tenant_id, collection_id) REFERENCES bunko.collections (tenant_id, id) ON DELETE CASCADE
    )""",
    """CREATE TABLE bunko.document_versions (
        id bigserial PRIMARY KEY,
        tenant_id bigint NOT NULL,
        document_id bigint NOT NULL,
        version integer NOT NULL,
        content_hash text NOT NULL DEFAULT '',
        metadata jsonb NOT NULL DEFAULT '{}',
        chunk_count integer NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL DEFAULT now(),
        UNIQUE (document_id, version),
        FOREIGN KEY (tenant_id, document_id) REFERENCES bunko.documents (tenant_id, id) ON DELETE CASCADE
    )""",
    f"""CREATE TABLE bunko.chunks (
        id bigserial PRIMARY KEY,
        uid text NOT NULL,
        tenant_id bigint NOT NULL,
        collection_id bigint NOT NULL,
        document_id bigint,
        version_id bigint,
        chunk_index integer NOT NULL DEFAULT 0,
        start_offset integer NOT NULL DEFAULT 0,
        end_offset integer NOT NULL DEFAULT 0,
        token_count integer NOT NULL DEFAULT 0,
        content text NOT NULL,
        metadata jsonb NOT NULL DEFAULT '{{}}',
        embedding vector NOT NULL,
        -- Keyword index over the analyzed text (the analyzer seam: CJK characters spaced out).
        fts tsvector GENERATED ALWAYS AS
            (to_tsvector('simple'::regconfig, regexp_replace(content, '({_CJK_CLASS})', ' \\1 ', 'g'))) STORED,
        UNIQUE (tenant_id, collection_id, uid),
        FOREIGN KEY (tenant_id, collection_id) REFERENCES bunko.collections (tenant_id, id) ON DELETE CASCADE,
        FOREIGN KEY (tenant_id, document_id) REFERENCES bunko.documents (tenant_id, id) ON DELETE CASCADE
    )""",
    # Keep rows (a 512-d vector is 2 KiB) inline instead of in TOAST: exact scans read half as much.
    "ALTER TABLE bunko.chunks SET (toast_tuple_target = 8160)",
    "CREATE INDEX chunks_scan ON bunko.chunks (tenant_id, collection_id, id)",
    "CREATE INDEX chunks_document ON bunko.chunks (tenant_id, document_id)",
    "CREATE INDEX chunks_metadata ON bunko.chunks USING gin (metadata jsonb_path_ops)",
    "CREATE INDEX chunks_fts ON bunko.chunks USING gin (fts)",
    "CREATE INDEX documents_metadata ON bunko.documents USING gin (metadata jsonb_path_ops)",
    """CREATE TABLE bunko.usage_records (
        id bigserial PRIMARY KEY,
        tenant_id bigint NOT NULL REFERENCES bunko.tenants (id) ON DELETE CASCADE,
        user_id text,
        operation text NOT NULL,
        provider text,
        model text,
        input_tokens integer NOT NULL DEFAULT 0,
        output_tokens integer NOT NULL DEFAULT 0,
        latency_ms double precision,
        created_at timestamptz NOT NULL DEFAULT now()
    )""",
    "CREATE INDEX usage_records_tenant ON bunko.usage_records (tenant_id, created_at)",
    """CREATE TABLE bunko.search_logs (
        id bigserial PRIMARY KEY,
        tenant_id bigint NOT NULL REFERENCES bunko.tenants (id) ON DELETE CASCADE,
        user_id text,
        query text,
        result_count integer NOT NULL,
        search_time_ms double precision NOT NULL,
        search_type text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now()
    )""",
    "CREATE INDEX search_logs_tenant ON bunko.search_logs (tenant_id, created_at)",
    # Tenants: a row is visible only to a transaction that names it.
    "ALTER TABLE bunko.tenants ENABLE ROW LEVEL SECURITY",
    "ALTER TABLE bunko.tenants FORCE ROW LEVEL SECURITY",
    "CREATE POLICY tenant_self ON bunko.tenants USING (name = current_setting('bunko.tenant', true)) "
    "WITH CHECK (name = current_setting('bunko.tenant', true))",
    *[statement for table in _TENANT_TABLES for statement in _rls(table)],
    # Index DDL needs the table owner; the application role gets exactly this, tenant-checked.
    f"""CREATE FUNCTION bunko.build_hnsw_index(p_collection_id bigint, p_maintenance_work_mem text,
                                             p_parallel_workers integer) RETURNS text
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
    DECLARE
        c record;
        idx text;
    BEGIN
        SELECT id, dimension, hnsw_m, hnsw_ef_construction INTO c FROM bunko.collections
         WHERE id = p_collection_id AND tenant_id = {_TENANT};
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        PERFORM set_config('maintenance_work_mem', p_maintenance_work_mem, true);
        PERFORM set_config('max_parallel_maintenance_workers', p_parallel_workers::text, true);
        idx := 'chunks_hnsw_' || c.id;
        IF c.dimension <= 2000 THEN
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON bunko.chunks USING hnsw '
                           '((embedding::vector(%s)) vector_cosine_ops) WITH (m = %s, ef_construction = %s) '
                           'WHERE collection_id = %s', idx, c.dimension, c.hnsw_m, c.hnsw_ef_construction, c.id);
        ELSE
            EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON bunko.chunks USING hnsw '
                           '((embedding::halfvec(%s)) halfvec_cosine_ops) WITH (m = %s, ef_construction = %s) '
                           'WHERE collection_id = %s', idx, c.dimension, c.hnsw_m, c.hnsw_ef_construction, c.id);
        END IF;
        -- Fresh statistics, or the planner keeps estimating an empty table and never uses the index.
        ANALYZE bunko.chunks;
        ANALYZE bunko.documents;
        RETURN idx;
    END
    $fn$""",
    """CREATE FUNCTION bunko.analyze_tables() RETURNS void
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
    BEGIN
        ANALYZE bunko.chunks;
        ANALYZE bunko.documents;
    END
    $fn$""",
    f"""CREATE FUNCTION bunko.drop_hnsw_index(p_collection_id bigint) RETURNS void
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
    BEGIN
        IF EXISTS (SELECT 1 FROM bunko.collections WHERE id = p_collection_id AND tenant_id = {_TENANT}) THEN
            EXECUTE format('DROP INDEX IF EXISTS bunko.%I', 'chunks_hnsw_' || p_collection_id);
        END IF;
    END
    $fn$""",
]

# Statements that (re)grant the application role; run after every migration.
_GRANTS = [
    f"GRANT USAGE ON SCHEMA bunko TO {APP_ROLE}",
    f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA bunko TO {APP_ROLE}",
    f"REVOKE INSERT, UPDATE, DELETE ON bunko.schema_migrations FROM {APP_ROLE}",
    f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA bunko TO {APP_ROLE}",
    f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA bunko TO {APP_ROLE}",
    # Keys and rate windows: only through bunko.authenticate_key and bunko.rate_hit (migration 6).
    f"""DO $do$
    BEGIN
        IF to_regprocedure('bunko.authenticate_key(text)') IS NOT NULL THEN
            REVOKE ALL ON bunko.api_keys, bunko.rate_windows FROM {APP_ROLE};
            REVOKE ALL ON SEQUENCE bunko.api_keys_id_seq FROM {APP_ROLE};
        END IF;
        IF to_regclass('bunko.tenant_quotas') IS NOT NULL THEN  -- quotas: the operator's (m020)
            REVOKE INSERT, UPDATE, DELETE ON bunko.tenant_quotas FROM {APP_ROLE};
        END IF;
        IF to_regclass('bunko.operator_keys') IS NOT NULL THEN  -- operator keys: through functions only (m021)
            REVOKE ALL ON bunko.operator_keys FROM {APP_ROLE};
            REVOKE ALL ON SEQUENCE bunko.operator_keys_id_seq FROM {APP_ROLE};
        END IF;
    END
    $do$""",
]

# The keyword column is filled by the application's analyzer (the same one that builds the
# queries) instead of a generated SQL expression: identical analysis at index and query time,
# analyzers SQL cannot run (morphological ones), and no per-row regular expression on ingest.
_M002 = [
    "ALTER TABLE bunko.chunks DROP COLUMN fts",  # drops chunks_fts with it
    "ALTER TABLE bunko.chunks ADD COLUMN fts tsvector NOT NULL DEFAULT ''::tsvector",
    # Rows written before this migration keep their keyword index, analyzed as before.
    f"UPDATE bunko.chunks SET fts = to_tsvector('simple'::regconfig, "
    f"regexp_replace(content, '({_CJK_CLASS})', ' \\1 ', 'g'))",
    "CREATE INDEX chunks_fts ON bunko.chunks USING gin (fts)",
]

# Usage records gain the item count and free-form metadata; conversations get their own RLS table.
_M003 = [
    "ALTER TABLE bunko.usage_records ADD COLUMN items integer NOT NULL DEFAULT 0",
    "ALTER TABLE bunko.usage_records ADD COLUMN metadata jsonb NOT NULL DEFAULT '{}'",
    """CREATE TABLE bunko.conversation_turns (
        id bigserial PRIMARY KEY,
        tenant_id bigint NOT NULL REFERENCES bunko.tenants (id) ON DELETE CASCADE,
        conversation_id text NOT NULL,
        role text NOT NULL CHECK (role IN ('user', 'assistant')),
        content text NOT NULL,
        metadata jsonb NOT NULL DEFAULT '{}',
        created_at timestamptz NOT NULL DEFAULT now()
    )""",
    "CREATE INDEX conversation_turns_scope ON bunko.conversation_turns (tenant_id, conversation_id, id)",
    *_rls("conversation_turns"),
]

# The HTTP server's records (stores/service.py). API keys and rate-limit windows are looked up
# before any tenant is known (the tenant comes from the key), so they have no tenant RLS; they hold
# only hashes and counters. Upload jobs are tenant data and get the same RLS as every other table.
_M004 = [
    """CREATE TABLE bunko.api_keys (
        id bigserial PRIMARY KEY,
        key_hash text NOT NULL UNIQUE,
        prefix text NOT NULL,
        tenant text NOT NULL,
        user_id text,
        admin boolean NOT NULL DEFAULT false,
        created_at timestamptz NOT NULL DEFAULT now(),
        revoked_at timestamptz
    )""",
    "CREATE INDEX api_keys_tenant ON bunko.api_keys (tenant)",
    """CREATE TABLE bunko.rate_windows (
        key_id bigint NOT NULL REFERENCES bunko.api_keys (id) ON DELETE CASCADE,
        window_start bigint NOT NULL,
        hits integer NOT NULL,
        PRIMARY KEY (key_id, window_start)
    )""",
    """CREATE TABLE bunko.jobs (
        id bigserial PRIMARY KEY,
        uid text NOT NULL,
        tenant_id bigint NOT NULL REFERENCES bunko.tenants (id) ON DELETE CASCADE,
        collection text NOT NULL,
        filename text NOT NULL,
        file_size bigint NOT NULL DEFAULT 0,
        mime_type text NOT NULL DEFAULT '',
        user_id text,
        status text NOT NULL CHECK (status IN ('processing', 'completed', 'failed')),
        chunk_count integer NOT NULL DEFAULT 0,
        processing_time_ms double precision,
        error_code text,
        error text,
        metadata jsonb NOT NULL DEFAULT '{}',
        lease_until double precision NOT NULL DEFAULT 0,
        created_at timestamptz NOT NULL DEFAULT now(),
        updated_at timestamptz NOT NULL DEFAULT now(),
        UNIQUE (tenant_id, uid)
    )""",
    "CREATE INDEX jobs_user ON bunko.jobs (tenant_id, user_id)",
    "CREATE INDEX search_logs_user ON bunko.search_logs (tenant_id, user_id)",
    "CREATE INDEX usage_records_user ON bunko.usage_records (tenant_id, user_id)",
    *_rls("jobs"),
]

# BM25 in SQL needs each chunk's token count and, per collection, the total (average length =
# keyword_tokens / chunk_count); the analyzer's tokens arrive as a tsvector literal with positions.
_M005 = [
    "ALTER TABLE bunko.chunks ADD COLUMN fts_length integer NOT NULL DEFAULT 0",
    "UPDATE bunko.chunks SET fts_length = (SELECT coalesce(sum(cardinality(positions)), 0) FROM unnest(fts))",
    "ALTER TABLE bunko.collections ADD COLUMN keyword_tokens bigint NOT NULL DEFAULT 0",
    "UPDATE bunko.collections c SET keyword_tokens = (SELECT coalesce(sum(fts_length), 0) FROM bunko.chunks k "
    "WHERE k.tenant_id = c.tenant_id AND k.collection_id = c.id)",
    # How often a phrase (lexemes at consecutive positions) occurs in a tsvector: BM25's tf.
    # setweight + ts_filter cut the vector down to the phrase's lexemes in C before SQL looks at it.
    """CREATE FUNCTION bunko.phrase_tf(v tsvector, toks text[]) RETURNS integer
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $fn$
        WITH p AS (SELECT lexeme, positions FROM unnest(ts_filter(setweight(v, 'A', toks), '{a}')))
        SELECT CASE WHEN cardinality(toks) = 1 THEN coalesce((SELECT cardinality(positions) FROM p), 0)
        ELSE (SELECT count(*)::integer FROM unnest((SELECT positions FROM p WHERE lexeme = toks[1])) AS s(pos)
              WHERE NOT EXISTS (SELECT 1 FROM generate_series(2, cardinality(toks)) AS k WHERE NOT EXISTS (
                  SELECT 1 FROM p WHERE p.lexeme = toks[k] AND (pos + k - 1)::smallint = ANY (p.positions))))
        END
    $fn$""",
]

# Agent memories (bunko.memory, stores/sql/memory.py): named memory stores per tenant and memories per
# user inside them. Vectors are normalised float32 bytes, ranked exactly over one user's memories in
# the SQL core (no ANN index: a search never leaves one user's rows); tenant RLS like every table.
_M006_AGENT_MEMORIES = [
    """CREATE TABLE bunko.memory_stores (
        id bigserial PRIMARY KEY,
        tenant_id bigint NOT NULL REFERENCES bunko.tenants (id) ON DELETE CASCADE,
        name text NOT NULL,
        embedding_provider text NOT NULL,
        embedding_model text NOT NULL,
        dimension integer NOT NULL CHECK (dimension > 0 AND dimension <= 16000),
        analyzer text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        UNIQUE (tenant_id, name),
        UNIQUE (tenant_id, id)
    )""",
    """CREATE TABLE bunko.memories (
        id bigserial PRIMARY KEY,
        uid text NOT NULL,
        tenant_id bigint NOT NULL,
        store_id bigint NOT NULL,
        user_id text NOT NULL,
        session_id text,
        memory_type text NOT NULL,
        subject text,
        occurred_at text NOT NULL,
        content text NOT NULL,
        metadata jsonb NOT NULL DEFAULT '{}',
        terms text NOT NULL DEFAULT '',
        embedding bytea NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        UNIQUE (tenant_id, store_id, user_id, uid),
        FOREIGN KEY (tenant_id, store_id) REFERENCES bunko.memory_stores (tenant_id, id) ON DELETE CASCADE
    )""",
    "CREATE INDEX memories_user ON bunko.memories (tenant_id, user_id, session_id)",
    *_rls("memory_stores"),
    *_rls("memories"),
]

# API keys and rate windows leave the application role's reach: it may no longer read, change or
# delete their rows. A request's key is looked up by its hash through authenticate_key (one row for
# one hash; the hash of a 256-bit key cannot be guessed), and counted through rate_hit. Creating,
# listing and revoking keys is the owner login's work (`bunko admin keys ...`).
_M007_API_KEYS = [
    """CREATE FUNCTION bunko.authenticate_key(p_hash text)
        RETURNS TABLE (id bigint, prefix text, tenant text, user_id text, admin boolean,
                       created_at timestamptz, revoked_at timestamptz, key_hash text)
        LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
        SELECT k.id, k.prefix, k.tenant, k.user_id, k.admin, k.created_at, k.revoked_at, k.key_hash
          FROM bunko.api_keys k WHERE k.key_hash = p_hash
    $fn$""",
    """CREATE FUNCTION bunko.rate_hit(p_key_id bigint, p_window bigint) RETURNS integer
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
    DECLARE
        n integer;
    BEGIN
        INSERT INTO bunko.rate_windows AS w (key_id, window_start, hits) VALUES (p_key_id, p_window, 1)
            ON CONFLICT (key_id, window_start) DO UPDATE SET hits = w.hits + 1 RETURNING w.hits INTO n;
        IF n = 1 THEN  -- a new window: forget the old ones of this key
            DELETE FROM bunko.rate_windows WHERE key_id = p_key_id AND window_start < p_window;
        END IF;
        RETURN n;
    END
    $fn$""",
    "REVOKE EXECUTE ON FUNCTION bunko.authenticate_key(text) FROM PUBLIC",
    "REVOKE EXECUTE ON FUNCTION bunko.rate_hit(bigint, bigint) FROM PUBLIC",
]

# The collection's write counter: every ingest, delete or version change bumps it (the search
# cache's key), like SQLite's.
_M008_WRITE_SEQ = [
    "ALTER TABLE bunko.collections ADD COLUMN write_seq bigint NOT NULL DEFAULT 0",
]

# Upload jobs as a queue that worker processes claim (bunko.worker): attempts, the claiming worker, a
# status that only moves forward (a trigger), and the claim itself. Jobs are tenant data under RLS, so
# the application role cannot look across tenants for work: ``claim_job`` (SECURITY DEFINER, run as the
# tables' owner, whom a policy on jobs and tenants lets see every row) takes the oldest claimable job
# with FOR UPDATE SKIP LOCKED and returns only its tenant name and id; everything else the worker
# reads and writes in that tenant's own RLS-checked transactions.
_M009_JOB_QUEUE = [
    "ALTER TABLE bunko.jobs ADD COLUMN attempts integer NOT NULL DEFAULT 0",
    "ALTER TABLE bunko.jobs ADD COLUMN max_attempts integer NOT NULL DEFAULT 3",
    "ALTER TABLE bunko.jobs ADD COLUMN worker text",
    "CREATE INDEX jobs_queue ON bunko.jobs (lease_until) WHERE status = 'processing'",
    """CREATE FUNCTION bunko.job_status_forward() RETURNS trigger LANGUAGE plpgsql AS $fn$
    BEGIN
        IF OLD.status <> 'processing' AND NEW.status IS DISTINCT FROM OLD.status THEN
            RAISE EXCEPTION 'job % is %: a finished job keeps its status', OLD.uid, OLD.status
                USING ERRCODE = 'check_violation';
        END IF;
        RETURN NEW;
    END
    $fn$""",
    "CREATE TRIGGER jobs_status_forward BEFORE UPDATE OF status ON bunko.jobs FOR EACH ROW "
    "EXECUTE FUNCTION bunko.job_status_forward()",
    # Only the owner (inside SECURITY DEFINER functions) sees across tenants; bunko_app never does.
    "CREATE POLICY job_queue ON bunko.jobs TO CURRENT_USER USING (true) WITH CHECK (true)",
    "CREATE POLICY job_queue ON bunko.tenants FOR SELECT TO CURRENT_USER USING (true)",
    """CREATE FUNCTION bunko.claim_job(p_worker text, p_now double precision, p_lease double precision,
                                     p_error text)
        RETURNS TABLE (tenant text, job_uid text, attempt integer, claimed boolean)
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
    DECLARE
        j record;
    BEGIN
        LOOP
            SELECT q.id, q.tenant_id, q.uid, q.attempts, q.max_attempts INTO j FROM bunko.jobs q
             WHERE q.status = 'processing' AND q.lease_until < p_now
             ORDER BY q.lease_until, q.id LIMIT 1 FOR UPDATE SKIP LOCKED;
            IF NOT FOUND THEN
                RETURN;
            END IF;
            tenant := (SELECT t.name FROM bunko.tenants t WHERE t.id = j.tenant_id);
            job_uid := j.uid;
            IF j.attempts >= j.max_attempts THEN
                -- Its workers died as often as allowed: failed, with the reason.
                UPDATE bunko.jobs SET status = 'failed', error_code = 'JOB_ABANDONED',
                       error = format(p_error, j.attempts), worker = NULL, updated_at = now() WHERE id = j.id;
                attempt := j.attempts;
                claimed := false;
                RETURN NEXT;
            ELSE
                UPDATE bunko.jobs SET attempts = j.attempts + 1, worker = p_worker, lease_until = p_now + p_lease,
                       updated_at = now() WHERE id = j.id;
                attempt := j.attempts + 1;
                claimed := true;
                RETURN NEXT;
                RETURN;
            END IF;
        END LOOP;
    END
    $fn$""",
    "REVOKE ALL ON FUNCTION bunko.claim_job(text, double precision, double precision, text) FROM PUBLIC",
    f"GRANT EXECUTE ON FUNCTION bunko.claim_job(text, double precision, double precision, text) TO {APP_ROLE}",
]

# The statistics terms of one tsvector: each lexeme, and "a b" for every one-character lexeme a at
# position p with a one-character lexeme b at p + 1 (what postgres.store.keyword_literals computes from the tokens).
KEYWORD_TERMS = """SELECT u.lexeme AS term FROM unnest({fts}) u
            UNION
            SELECT a.lexeme || ' ' || b.lexeme
            FROM (SELECT u.lexeme, p FROM unnest({fts}) u, unnest(u.positions) p WHERE char_length(u.lexeme) = 1) a
            JOIN (SELECT u.lexeme, p FROM unnest({fts}) u, unnest(u.positions) p WHERE char_length(u.lexeme) = 1) b
            ON b.p = a.p + 1"""

# Keyword statistics per collection: how many chunks hold each token and each pair of adjacent
# one-character tokens (a CJK bigram phrase). A search reads its phrases' document frequencies from
# here in one index lookup instead of counting matching chunks, and then only has to look at the
# chunks that hold its rarer phrases (see postgres.py, _bm25). Kept exact by every write and delete.
_M010_KEYWORD_DF = [
    """CREATE TABLE bunko.keyword_df (
        tenant_id bigint NOT NULL,
        collection_id bigint NOT NULL,
        term text NOT NULL,
        df bigint NOT NULL,
        PRIMARY KEY (tenant_id, collection_id, term),
        FOREIGN KEY (tenant_id, collection_id) REFERENCES bunko.collections (tenant_id, id) ON DELETE CASCADE
    )""",
    *_rls("keyword_df"),
    # The statistics of the chunks already stored, from their tsvectors (a pair: p and p + 1).
    f"""INSERT INTO bunko.keyword_df (tenant_id, collection_id, term, df)
    SELECT tenant_id, collection_id, term, count(*) FROM (
        SELECT DISTINCT c.id, c.tenant_id, c.collection_id, t.term FROM bunko.chunks c, LATERAL (
            {KEYWORD_TERMS.format(fts='c.fts')}
        ) t
    ) x GROUP BY tenant_id, collection_id, term""",
]

# Files and URLs whose ingest failed, with the reason, until a later ingest of the same source
# succeeds (SQLStore.ingest_failures). Tenant data: the tenant leads the key, RLS like every table.
_M011_INGEST_FAILURES = [
    """CREATE TABLE bunko.ingest_failures (
        tenant_id bigint NOT NULL REFERENCES bunko.tenants (id) ON DELETE CASCADE,
        collection text NOT NULL,
        source text NOT NULL,
        error_type text NOT NULL,
        error_code text NOT NULL,
        message text NOT NULL,
        attempts integer NOT NULL DEFAULT 1,
        first_failed_at timestamptz NOT NULL DEFAULT now(),
        failed_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (tenant_id, collection, source)
    )""",
    *_rls("ingest_failures"),
]

# Pairs of adjacent one-character lexemes (CJK bigrams) as whole lexemes of their own, at the position of
# their first character ("a b":p). A bigram phrase query on ``fts`` asks the GIN index for every chunk
# holding both characters and then rechecks their positions row by row (12,435 rows read for 994
# matches at 100k chunks); on ``fts_pairs`` the index answers exactly, and the pair's positions are its
# term frequency. Written by postgres.store.keyword_literals; here filled from ``fts`` for the chunks stored
# (a lexeme quoted as in a tsvector literal: backslash and quote escaped).
_M012_FTS_PAIRS = [
    "ALTER TABLE bunko.chunks ADD COLUMN fts_pairs tsvector NOT NULL DEFAULT ''::tsvector",
    r"""UPDATE bunko.chunks c SET fts_pairs = x.pairs::tsvector FROM (
        SELECT k.id, string_agg(
            '''' || replace(replace(p.term, '\', '\\'), '''', '''''') || ''':' || p.positions, ' ') AS pairs
        FROM bunko.chunks k, LATERAL (
            SELECT a.lexeme || ' ' || b.lexeme AS term, string_agg(a.p::text, ',' ORDER BY a.p) AS positions
            FROM (SELECT u.lexeme, p FROM unnest(k.fts) u, unnest(u.positions) p WHERE char_length(u.lexeme) = 1) a
            JOIN (SELECT u.lexeme, p FROM unnest(k.fts) u, unnest(u.positions) p WHERE char_length(u.lexeme) = 1) b
            ON b.p = a.p + 1 GROUP BY 1
        ) p GROUP BY k.id
    ) x WHERE c.id = x.id""",
    "CREATE INDEX chunks_fts_pairs ON bunko.chunks USING gin (fts_pairs)",
    # Under row-level security the planner never uses a GIN index for ``@@``: the operator is not
    # LEAKPROOF, so it may only run after the policy's check, row by row (a scan of the collection: 700 ms
    # at 100k chunks, against 10 ms through the indexes). This function finds the matching chunk ids
    # as the schema owner, whose own policy lets its index scans through, and keeps to the session's
    # tenant exactly as the tenant_isolation policy does; the caller reads the rows under RLS.
    f"""CREATE FUNCTION bunko.keyword_match(p_collection_id bigint, p_tokens tsquery, p_pairs tsquery)
        RETURNS SETOF bigint
        LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
        SELECT c.id FROM bunko.chunks c
         WHERE c.tenant_id = {_TENANT} AND c.collection_id = p_collection_id
           AND (c.fts @@ p_tokens OR c.fts_pairs @@ p_pairs)
    $fn$""",
    "CREATE POLICY owner_keyword_match ON bunko.chunks FOR SELECT TO CURRENT_USER USING (true)",
    "REVOKE ALL ON FUNCTION bunko.keyword_match(bigint, tsquery, tsquery) FROM PUBLIC",
    f"GRANT EXECUTE ON FUNCTION bunko.keyword_match(bigint, tsquery, tsquery) TO {APP_ROLE}",
]

# Bumped by every statement that removes chunks (a delete, a new version of a document): a process
# that holds a collection's metadata columns in memory (filtered search) appends new rows while it
# is unchanged and reads the columns again when it moves.
_M013_MUTATION_SEQ = [
    "ALTER TABLE bunko.collections ADD COLUMN mutation_seq bigint NOT NULL DEFAULT 0",
]

# Keyword postings per collection in segments (see stores/sql/postings.py): a search reads its phrases'
# postings in one index lookup each and ranks in numpy, as SQLite does, instead of reading every
# candidate chunk's tsvectors. The entries are read whole on every search: stored out of line,
# uncompressed. Filled by m015.
_M014_KEYWORD_POSTINGS: list[Statement] = [
    """CREATE TABLE bunko.keyword_postings (
        tenant_id bigint NOT NULL,
        collection_id bigint NOT NULL,
        segment bigint NOT NULL,
        term text NOT NULL,
        entries bytea NOT NULL,
        PRIMARY KEY (tenant_id, collection_id, segment, term),
        FOREIGN KEY (tenant_id, collection_id) REFERENCES bunko.collections (tenant_id, id) ON DELETE CASCADE
    )""",
    "ALTER TABLE bunko.keyword_postings ALTER COLUMN entries SET STORAGE EXTERNAL",
    *_rls("keyword_postings"),
]

# tsvector positions stop at 16383, and a lexeme keeps at most 256 of them.
_TS_POSITIONS = 16383
_TS_LEXEME_POSITIONS = 256


def fill_postings_format_2(conn: Any) -> None:
    """Migration m015: every collection's postings in format 2 (8-byte entries, counts never cut short),
    rebuilt from each chunk's ``fts`` and ``fts_pairs`` as the owner, each collection under its own
    tenant (which the table's policy checks); a database at m014 held them in format 1.

    A chunk whose tsvector may have cut a count short (a lexeme at its 256 positions, or tokens past the
    last position) is analyzed again from its text, with its collection's analyzer."""
    path = conn.execute("SELECT current_setting('search_path')").fetchone()[0]
    conn.execute("SELECT set_config('search_path', 'bunko, ' || %s, true)", (path,))  # the core's table names
    postings = PostingsCopy(POSTGRES)
    postings.prepare(conn)
    conn.execute("DELETE FROM bunko.keyword_postings")
    # The owner reads every chunk (its own policy on chunks, m012); the rest under each chunk's tenant.
    scopes = conn.execute("SELECT DISTINCT tenant_id, collection_id FROM bunko.chunks").fetchall()
    for tenant_pk, collection_pk in scopes:
        conn.execute("SELECT set_config('bunko.tenant_id', %s, true)", (str(tenant_pk),))
        analyzer_name = conn.execute("SELECT analyzer FROM bunko.collections WHERE tenant_id = %s AND id = %s",
                                     (tenant_pk, collection_pk)).fetchone()[0]
        analyzer = None
        with conn.cursor(name="bunko_fill_postings") as cur:
            cur.execute(
                "SELECT c.id, c.fts_length, ARRAY(SELECT u.lexeme FROM unnest(c.fts) u), "
                "ARRAY(SELECT cardinality(u.positions) FROM unnest(c.fts) u), "
                "ARRAY(SELECT u.lexeme FROM unnest(c.fts_pairs) u), "
                "ARRAY(SELECT cardinality(u.positions) FROM unnest(c.fts_pairs) u), c.content "
                "FROM bunko.chunks c WHERE c.tenant_id = %s AND c.collection_id = %s ORDER BY c.id",
                (tenant_pk, collection_pk))
            done = 0
            while batch := cur.fetchmany(8192):
                rows: list[Counted] = []
                for key, length, lexemes, counts, pairs, pair_counts, content in batch:
                    found = {**dict(zip(lexemes, counts, strict=True)), **dict(zip(pairs, pair_counts, strict=True))}
                    if int(length) > _TS_POSITIONS or any(n >= _TS_LEXEME_POSITIONS for n in found.values()):
                        analyzer = analyzer or get_analyzer(analyzer_name)
                        tokens = analyzer.index_tokens(content)
                        exact = Counter(tokens)
                        exact.update(term for _, term in token_pairs(tokens[:_TS_POSITIONS + 1]))
                        found = dict(exact)
                    rows.append((int(key), found, int(length)))
                postings.add(conn, (int(tenant_pk), int(collection_pk)), rows)
                done += len(rows)
                if done % (8192 * 16) < len(rows):
                    logger.info("keyword postings of collection %s: %d chunks so far", collection_pk, done)
    conn.execute("SELECT set_config('bunko.tenant_id', '', true), set_config('search_path', %s, true)", (path,))


_M015_POSTINGS_FORMAT_2: list[Statement] = [fill_postings_format_2]

# Indexes no query reads, kept up by every chunk written (issue 25, bulk writes):
# * the GIN indexes over ``fts`` and ``fts_pairs``: keyword search reads the postings (m014); they served
#   only bunko.keyword_match, which the SQL test oracle calls, and which now scans the collection's rows.
#   Each chunk written added about a hundred lexemes and a hundred pairs to them: at 20,000 chunks of
#   benchmarks/bench_search.py the INSERT into chunks wrote 352 MB of WAL with them, 142 MB without.
#   The columns stay: a delete reads ``fts`` to take a chunk's terms off keyword_df, m015 reads both;
# * the GIN index over chunks.metadata (jsonb_path_ops): it serves ``@>`` on the whole document only,
#   filters compile to ``metadata #> path`` (and under row-level security no jsonb operator may use an
#   index for the application role: docs/FILTERS.md).
# And room on keyword_df's pages: a write adds to the df of most of its terms, and with half of each
# page free the new row version stays on its page (a HOT update) instead of adding an index entry:
# half the WAL of that statement.
_M024_WRITE_INDEXES: list[Statement] = [
    "DROP INDEX IF EXISTS bunko.chunks_fts",
    "DROP INDEX IF EXISTS bunko.chunks_fts_pairs",
    "DROP INDEX IF EXISTS bunko.chunks_metadata",
    "ALTER TABLE bunko.keyword_df SET (fillfactor = 50)",
]


# Keyword postings without a foreign key to collections (issue 25): each postings row a write adds (about
# 7 per chunk, plus the rows merges write again) was checked against its collection's row, a lookup and a
# trigger event per row, about 860,000 checks for a bulk write of 100,000 chunks. The rows go with their
# collection because every path that removes a collection removes them itself, in its transaction and
# under the same row-level security: ``PostgresVectorStore._drop_collection`` (deleting a collection, and
# so erasing a tenant, which deletes its collections one by one) and the tenant's erasure, which deletes
# whatever postings its tenant still holds. A writer locks its collection's row before it adds postings,
# so a write racing a delete of its collection either commits first (and its postings go with the
# collection) or fails on the chunks' own foreign key.
_M026_POSTINGS_NO_FOREIGN_KEY: list[Statement] = [
    """DO $do$
    DECLARE c record;
    BEGIN
        FOR c IN SELECT conname FROM pg_constraint
                 WHERE conrelid = 'bunko.keyword_postings'::regclass AND contype = 'f' LOOP
            EXECUTE format('ALTER TABLE bunko.keyword_postings DROP CONSTRAINT %I', c.conname);
        END LOOP;
    END
    $do$""",
]

# HNSW over halfvec (issue 24): the definer functions a login that does not own the schema builds and drops
# vector indexes through build ``chunks_hnswh_<pk>`` over halfvec(d) (searched with its candidates re-ranked by
# the full vectors, see stores/postgres/search.py) and drop the former ``chunks_hnsw_<pk>`` once it is built;
# dropping a collection drops whichever of its vector indexes exist (HNSW, former HNSW, IVFFlat).
_M023_HALFVEC_HNSW: list[Statement] = [
    f"""CREATE OR REPLACE FUNCTION bunko.build_hnsw_index(p_collection_id bigint, p_maintenance_work_mem text,
                                                        p_parallel_workers integer) RETURNS text
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
    DECLARE
        c record;
        idx text;
    BEGIN
        SELECT id, dimension, hnsw_m, hnsw_ef_construction INTO c FROM bunko.collections
         WHERE id = p_collection_id AND tenant_id = {_TENANT};
        IF NOT FOUND THEN
            RETURN NULL;
        END IF;
        IF to_regclass('bunko.chunks_ivf_' || c.id) IS NOT NULL THEN
            RETURN 'chunks_ivf_' || c.id;
        END IF;
        PERFORM set_config('maintenance_work_mem', p_maintenance_work_mem, true);
        PERFORM set_config('max_parallel_maintenance_workers', p_parallel_workers::text, true);
        idx := 'chunks_hnswh_' || c.id;
        EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON bunko.chunks USING hnsw '
                       '((embedding::halfvec(%s)) halfvec_cosine_ops) WITH (m = %s, ef_construction = %s) '
                       'WHERE collection_id = %s', idx, c.dimension, c.hnsw_m, c.hnsw_ef_construction, c.id);
        EXECUTE format('DROP INDEX IF EXISTS bunko.%I', 'chunks_hnsw_' || c.id);
        -- Fresh statistics, or the planner keeps estimating an empty table and never uses the index.
        ANALYZE bunko.chunks;
        ANALYZE bunko.documents;
        RETURN idx;
    END
    $fn$""",
    f"""CREATE OR REPLACE FUNCTION bunko.drop_hnsw_index(p_collection_id bigint) RETURNS void
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
    BEGIN
        IF EXISTS (SELECT 1 FROM bunko.collections WHERE id = p_collection_id AND tenant_id = {_TENANT}) THEN
            EXECUTE format('DROP INDEX IF EXISTS bunko.%I', 'chunks_hnsw_' || p_collection_id);
            EXECUTE format('DROP INDEX IF EXISTS bunko.%I', 'chunks_hnswh_' || p_collection_id);
            EXECUTE format('DROP INDEX IF EXISTS bunko.%I', 'chunks_ivf_' || p_collection_id);
        END IF;
    END
    $fn$""",
]


# Chunk reuse across documents (issue 25): ingest looks for a stored chunk of the collection with the same text
# (any document, any version) and takes its vector instead of embedding the text again. A hash index over the
# text of document chunks: it holds a 4-byte hash per chunk whatever the text's length, no row is rewritten,
# and text equality (texteq, leakproof) may use it under row-level security -- an index over an expression
# (a hash function of the text) may not, since its functions are not leakproof.
_M025_CHUNK_TEXTS: list[Statement] = [
    "CREATE INDEX IF NOT EXISTS chunks_text ON bunko.chunks USING hash (content) WHERE document_id IS NOT NULL",
]


MIGRATIONS: list[tuple[str, Sequence[Statement]]] = [
    ("m001_tenants_collections_documents_chunks_rls", _M001),
    ("m002_keyword_text_from_the_analyzer", _M002),
    ("m003_usage_items_conversations", _M003),
    ("m004_api_keys_rate_windows_jobs", _M004),
    ("m005_keyword_lengths_and_bm25", _M005),
    ("m006_agent_memories", _M006_AGENT_MEMORIES),
    ("m007_api_keys_behind_functions", _M007_API_KEYS),
    ("m008_collection_write_seq", _M008_WRITE_SEQ),
    ("m009_job_queue", _M009_JOB_QUEUE),
    ("m010_keyword_document_frequencies", _M010_KEYWORD_DF),
    ("m011_ingest_failures", _M011_INGEST_FAILURES),
    ("m012_keyword_pairs", _M012_FTS_PAIRS),
    ("m013_collection_mutation_seq", _M013_MUTATION_SEQ),
    ("m014_keyword_postings", _M014_KEYWORD_POSTINGS),
    ("m015_keyword_postings_format_2", _M015_POSTINGS_FORMAT_2),
    ("m016_record_owners", M016_RECORD_OWNERS),
    ("m017_sliding_rate_windows", M017_SLIDING_RATES),
    ("m018_fair_job_claims", M018_FAIR_CLAIMS),
    ("m019_job_chunk_reuse", M019_JOB_REUSE),
    ("m020_tenant_quotas", M020_TENANT_QUOTAS),
    ("m021_operator_keys", M021_OPERATOR_KEYS),
    ("m022_user_rls", M022_USER_RLS),
    ("m023_halfvec_hnsw", _M023_HALFVEC_HNSW),
    ("m024_no_unread_chunk_indexes", _M024_WRITE_INDEXES),
    ("m025_chunk_texts", _M025_CHUNK_TEXTS),
    ("m026_postings_without_collection_key", _M026_POSTINGS_NO_FOREIGN_KEY),
]

BOOTSTRAP = [
    "CREATE SCHEMA IF NOT EXISTS bunko",
    """CREATE TABLE IF NOT EXISTS bunko.schema_migrations (
        version integer PRIMARY KEY,
        name text NOT NULL,
        applied_at timestamptz NOT NULL DEFAULT now()
    )""",
]

CREATE_APP_ROLE = f"""DO $do$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{APP_ROLE}') THEN
        CREATE ROLE {APP_ROLE} NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
    END IF;
END
$do$"""

GRANTS = _GRANTS
