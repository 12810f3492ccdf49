"""PostgreSQL migrations of many tenants and users on one engine (m016 on), kept apart from
:mod:`.migrations` (which lists them in order) so each module stays readable.

Like every migration they hold what they run: plain SQL, no call into the store's live code.
"""

from __future__ import annotations

# m016: the user who created a record upserted without a document (bunko.stores.sql.owners).
M016_RECORD_OWNERS = [
    "ALTER TABLE bunko.chunks ADD COLUMN owner text",
]

# m017: the sliding rate limiter's count (bunko.ratelimit): the current window's hits after this one and the
# previous window's, which it keeps (rate_hit forgot every window before the current one). Like rate_hit
# (m007) it runs as its owner: the application role cannot read or change rate windows itself.
M017_SLIDING_RATES = [
    """CREATE FUNCTION bunko.rate_count(p_key_id bigint, p_window bigint)
        RETURNS TABLE (current_hits integer, previous_hits integer)
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
    BEGIN
        INSERT INTO bunko.rate_windows AS w (key_id, window_start, hits) VALUES (p_key_id, p_window, 1)
            ON CONFLICT (key_id, window_start) DO UPDATE SET hits = w.hits + 1 RETURNING w.hits INTO current_hits;
        IF current_hits = 1 THEN  -- a new window: forget those before the previous one
            DELETE FROM bunko.rate_windows WHERE key_id = p_key_id AND window_start < p_window - 1;
        END IF;
        previous_hits := coalesce((SELECT w.hits FROM bunko.rate_windows w
                                    WHERE w.key_id = p_key_id AND w.window_start = p_window - 1), 0);
        RETURN NEXT;
    END
    $fn$""",
    "REVOKE EXECUTE ON FUNCTION bunko.rate_count(bigint, bigint) FROM PUBLIC",
]

# m018: fair job claims (bunko.stores.sql.service: claim_job). A claim records its time (claimed_at); the
# next claim goes to the tenant with waiting jobs whose last claim is the oldest (never: first), and in it
# to the user (the tenant's keys without a user are one) whose last claim is the oldest, its oldest waiting
# job, so one tenant's (or user's) backlog delays only itself; a tenant with ``p_cap`` jobs in flight (claimed,
# lease live) waits its turn (0: no cap). Claims take a transaction-scoped advisory lock, one at a time, so
# the order and the cap hold with concurrent claimers; a claim is a few index lookups. The m009 function
# stays for processes of earlier versions during an upgrade.
M018_FAIR_CLAIMS = [
    "ALTER TABLE bunko.jobs ADD COLUMN claimed_at double precision",
    "CREATE INDEX jobs_claims ON bunko.jobs (tenant_id, claimed_at)",
    "CREATE INDEX jobs_user_claims ON bunko.jobs (tenant_id, user_id, claimed_at)",
    "CREATE INDEX jobs_waiting ON bunko.jobs (tenant_id, lease_until, id) WHERE status = 'processing'",
    """CREATE FUNCTION bunko.claim_job(p_worker text, p_now double precision, p_lease double precision,
                                     p_error text, p_cap integer)
        RETURNS TABLE (tenant text, job_uid text, attempt integer, claimed boolean)
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
    DECLARE
        t record;
        u record;
        j record;
    BEGIN
        PERFORM pg_advisory_xact_lock(727275);
        FOR t IN
            SELECT w.tenant_id FROM (SELECT q.tenant_id, min(q.id) AS first_id FROM bunko.jobs q
                                      WHERE q.status = 'processing' AND q.lease_until < p_now
                                      GROUP BY q.tenant_id) w
             WHERE p_cap <= 0 OR (SELECT count(*) FROM bunko.jobs f WHERE f.tenant_id = w.tenant_id
                                   AND f.status = 'processing' AND f.lease_until >= p_now) < p_cap
             ORDER BY (SELECT max(c.claimed_at) FROM bunko.jobs c WHERE c.tenant_id = w.tenant_id) NULLS FIRST,
                      w.first_id
        LOOP
            FOR u IN
                SELECT q.user_id FROM bunko.jobs q
                 WHERE q.tenant_id = t.tenant_id AND q.status = 'processing' AND q.lease_until < p_now
                 GROUP BY q.user_id
                 ORDER BY (SELECT max(c.claimed_at) FROM bunko.jobs c WHERE c.tenant_id = t.tenant_id
                            AND c.user_id IS NOT DISTINCT FROM q.user_id) NULLS FIRST, min(q.id)
            LOOP
                LOOP
                    SELECT q.id, q.uid, q.attempts, q.max_attempts INTO j FROM bunko.jobs q
                     WHERE q.tenant_id = t.tenant_id AND q.user_id IS NOT DISTINCT FROM u.user_id
                       AND q.status = 'processing' AND q.lease_until < p_now
                     ORDER BY q.lease_until, q.id LIMIT 1 FOR UPDATE SKIP LOCKED;
                    EXIT WHEN NOT FOUND;
                    tenant := (SELECT n.name FROM bunko.tenants n WHERE n.id = t.tenant_id);
                    job_uid := j.uid;
                    IF j.attempts >= j.max_attempts THEN
                        -- Its workers died as often as allowed: failed, with the reason.
                        UPDATE bunko.jobs SET status = 'failed', error_code = 'JOB_ABANDONED',
                               error = format(p_error, j.attempts), worker = NULL, updated_at = now()
                         WHERE id = j.id;
                        attempt := j.attempts;
                        claimed := false;
                        RETURN NEXT;
                    ELSE
                        UPDATE bunko.jobs SET attempts = j.attempts + 1, worker = p_worker,
                               lease_until = p_now + p_lease, claimed_at = p_now, updated_at = now()
                         WHERE id = j.id;
                        attempt := j.attempts + 1;
                        claimed := true;
                        RETURN NEXT;
                        RETURN;
                    END IF;
                END LOOP;
            END LOOP;
        END LOOP;
    END
    $fn$""",
    "REVOKE ALL ON FUNCTION bunko.claim_job(text, double precision, double precision, text, integer) FROM PUBLIC",
]

# m019: what an upload job's ingest embedded and what it took from the version it replaced (chunk-level reuse,
# bunko.indexing), reported with the job.
M019_JOB_REUSE = [
    "ALTER TABLE bunko.jobs ADD COLUMN embedded_chunks integer NOT NULL DEFAULT 0, "
    "ADD COLUMN reused_chunks integer NOT NULL DEFAULT 0",
]

# m020: per-tenant quotas (bunko.stores.quotas; NULL: no limit). The operator (the owner login) sets them; the
# application role reads its own tenant's row only (the grants revoke its writes), so a server process cannot
# raise its tenant's quota. A tenant's request windows (its requests-per-minute quota) are tenant data.
M020_TENANT_QUOTAS = [
    """CREATE TABLE bunko.tenant_quotas (
        tenant_id bigint PRIMARY KEY REFERENCES bunko.tenants (id) ON DELETE CASCADE,
        documents bigint,
        chunks bigint,
        bytes bigint,
        upload_bytes_per_day bigint,
        requests_per_minute integer
    )""",
    "ALTER TABLE bunko.tenant_quotas ENABLE ROW LEVEL SECURITY",
    "ALTER TABLE bunko.tenant_quotas FORCE ROW LEVEL SECURITY",
    "CREATE POLICY tenant_read ON bunko.tenant_quotas FOR SELECT "
    "USING (tenant_id = NULLIF(current_setting('bunko.tenant_id', true), '')::bigint)",
    "CREATE POLICY quota_operator ON bunko.tenant_quotas TO CURRENT_USER USING (true) WITH CHECK (true)",
    """CREATE TABLE bunko.tenant_rate_windows (
        tenant_id bigint NOT NULL REFERENCES bunko.tenants (id) ON DELETE CASCADE,
        window_start bigint NOT NULL,
        hits integer NOT NULL,
        PRIMARY KEY (tenant_id, window_start)
    )""",
    "ALTER TABLE bunko.tenant_rate_windows ENABLE ROW LEVEL SECURITY",
    "ALTER TABLE bunko.tenant_rate_windows FORCE ROW LEVEL SECURITY",
    "CREATE POLICY tenant_isolation ON bunko.tenant_rate_windows "
    "USING (tenant_id = NULLIF(current_setting('bunko.tenant_id', true), '')::bigint) "
    "WITH CHECK (tenant_id = NULLIF(current_setting('bunko.tenant_id', true), '')::bigint)",
]

# m021: operator keys (bunko.stores.service: the HTTP admin API for quotas). An operator key belongs to no
# tenant; it may list tenants and read and set their quotas, nothing else. Like API keys (m007) the table is
# out of the application role's reach (the grants revoke it): a server process authenticates an operator key
# through ``operator_key(hash)`` and reads and writes quotas through ``operator_tenants(hash)`` and
# ``operator_set_quota(hash, ...)``, which check the hash again themselves, so a statement of the application
# (an injection, say) cannot change a quota without an operator key. ``operator_set_quota`` answers 1 (set),
# 0 (no such tenant) or -1 (not a valid operator key).
M021_OPERATOR_KEYS = [
    """CREATE TABLE bunko.operator_keys (
        id bigserial PRIMARY KEY,
        key_hash text NOT NULL UNIQUE,
        prefix text NOT NULL,
        label text,
        created_at timestamptz NOT NULL DEFAULT now(),
        revoked_at timestamptz
    )""",
    """CREATE FUNCTION bunko.operator_key(p_hash text)
        RETURNS TABLE (id bigint, prefix text, label text, created_at timestamptz, revoked_at timestamptz,
                       key_hash text)
        LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
        SELECT k.id, k.prefix, k.label, k.created_at, k.revoked_at, k.key_hash
          FROM bunko.operator_keys k WHERE k.key_hash = p_hash
    $fn$""",
    """CREATE FUNCTION bunko.operator_tenants(p_hash text)
        RETURNS TABLE (name text, created_at timestamptz, documents bigint, chunks bigint, bytes bigint,
                       upload_bytes_per_day bigint, requests_per_minute integer)
        LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
        SELECT t.name, t.created_at, q.documents, q.chunks, q.bytes, q.upload_bytes_per_day, q.requests_per_minute
          FROM bunko.tenants t LEFT JOIN bunko.tenant_quotas q ON q.tenant_id = t.id
         WHERE EXISTS (SELECT 1 FROM bunko.operator_keys k WHERE k.key_hash = p_hash AND k.revoked_at IS NULL)
         ORDER BY t.name
    $fn$""",
    """CREATE FUNCTION bunko.operator_set_quota(p_hash text, p_tenant text, p_documents bigint, p_chunks bigint,
                                               p_bytes bigint, p_upload_bytes_per_day bigint,
                                               p_requests_per_minute integer) RETURNS integer
        LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $fn$
    DECLARE
        t_id bigint;
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM bunko.operator_keys k WHERE k.key_hash = p_hash AND k.revoked_at IS NULL) THEN
            RETURN -1;
        END IF;
        SELECT t.id INTO t_id FROM bunko.tenants t WHERE t.name = p_tenant;
        IF t_id IS NULL THEN
            RETURN 0;
        END IF;
        INSERT INTO bunko.tenant_quotas AS q (tenant_id, documents, chunks, bytes, upload_bytes_per_day,
                                              requests_per_minute)
            VALUES (t_id, p_documents, p_chunks, p_bytes, p_upload_bytes_per_day, p_requests_per_minute)
            ON CONFLICT (tenant_id) DO UPDATE SET documents = excluded.documents, chunks = excluded.chunks,
                bytes = excluded.bytes, upload_bytes_per_day = excluded.upload_bytes_per_day,
                requests_per_minute = excluded.requests_per_minute;
        RETURN 1;
    END
    $fn$""",
    "REVOKE EXECUTE ON FUNCTION bunko.operator_key(text) FROM PUBLIC",
    "REVOKE EXECUTE ON FUNCTION bunko.operator_tenants(text) FROM PUBLIC",
    "REVOKE EXECUTE ON FUNCTION bunko.operator_set_quota(text, text, bigint, bigint, bigint, bigint, integer) "
    "FROM PUBLIC",
]

# m022: row-level security for per-user rows inside a tenant. A transaction acting for a user (an API key's, an
# upload job's, a memory call's: ``SQLStore.for_user``) sets ``bunko.user_id`` beside ``bunko.tenant_id``; a
# tenant or admin key leaves it empty, and then the tenant policy alone applies (erasure of a user by an admin
# key, the tenant's search log, claims). These policies are RESTRICTIVE: a row must pass them AND the tenant's.
# - memories, conversation_turns, search_logs are the user's own: a transaction acting for a user sees, changes
#   and writes only rows of that user; rows without a user (a tenant key's conversations and searches) are the
#   tenant's and hidden from it too.
# - jobs and usage_records are read by every key of the tenant (the document list, the same-name upload check,
#   the upload quota, the tenant's usage), so only their writes are the user's: a transaction acting for a user
#   inserts rows of that user only, and updates or deletes only its own.
# Conversations keep their user in the id's namespace (``u.<user>:``); a generated column spells it out.
_USER = "NULLIF(current_setting('bunko.user_id', true), '')"
_MINE = f"({_USER} IS NULL OR user_id = {_USER})"


def _user_rls(table: str) -> list[str]:
    return [f"CREATE POLICY user_isolation ON bunko.{table} AS RESTRICTIVE USING {_MINE} WITH CHECK {_MINE}"]


def _user_writes(table: str) -> list[str]:
    return [
        f"CREATE POLICY user_insert ON bunko.{table} AS RESTRICTIVE FOR INSERT WITH CHECK {_MINE}",
        f"CREATE POLICY user_update ON bunko.{table} AS RESTRICTIVE FOR UPDATE USING {_MINE} WITH CHECK {_MINE}",
        f"CREATE POLICY user_delete ON bunko.{table} AS RESTRICTIVE FOR DELETE USING {_MINE}",
    ]


M022_USER_RLS = [
    "ALTER TABLE bunko.conversation_turns ADD COLUMN user_id text GENERATED ALWAYS AS "
    "(CASE WHEN conversation_id LIKE 'u.%:%' THEN NULLIF(split_part(substr(conversation_id, 3), ':', 1), '') END) "
    "STORED",
    *_user_rls("memories"),
    *_user_rls("conversation_turns"),
    *_user_rls("search_logs"),
    *_user_writes("jobs"),
    *_user_writes("usage_records"),
]

__all__ = ["M016_RECORD_OWNERS", "M017_SLIDING_RATES", "M018_FAIR_CLAIMS", "M019_JOB_REUSE", "M020_TENANT_QUOTAS",
           "M021_OPERATOR_KEYS", "M022_USER_RLS"]
