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

__all__ = ["M016_RECORD_OWNERS", "M017_SLIDING_RATES"]
