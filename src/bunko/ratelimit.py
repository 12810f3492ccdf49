"""Requests per minute per API key, counted in the store so the limit holds across processes: a sliding window.

Each request counts in its key's window of the current minute (``ServiceRecords.rate_count``), which also
answers the previous minute's count. The limiter weighs that count by the part of the previous minute
still inside the last 60 seconds (the sliding-window estimate): ``previous * (1 - elapsed / 60) +
current``. A fixed one-minute window lets twice the limit through around a minute boundary (the limit
just before it, the limit again just after); the estimate does not, since just after the boundary the
previous minute still counts almost whole.

A tenant's requests-per-minute quota (set by the operator) is judged the same way over the tenant's own
windows, counting the requests of all of its keys (:meth:`RateLimiter.check_tenant`).

The REST API (:mod:`bunko.server.auth`) and MCP over HTTP (:mod:`bunko.integrations.mcp_server`) share
one limiter per process, over the same windows, so a key has one budget whichever way it calls.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from .stores.service import ServiceRecords

WINDOW_SECONDS = 60


@dataclass(frozen=True, slots=True)
class RateDecision:
    """One counted request: whether it may go on, the estimate it was judged by, and when to retry if not."""

    allowed: bool
    estimate: float
    limit: int
    retry_after: int = 0  # whole seconds until a request would be allowed again (0 when allowed)

    def message(self) -> str:
        """Why a refused request was refused, for the caller."""
        return (f"this API key made more than {self.limit} requests in the last minute; retry in "
                f"{self.retry_after} s")

    @property
    def used(self) -> int:
        """The requests counted in the last minute before this one (the estimate, rounded down)."""
        return max(0, math.floor(self.estimate) - 1)

    def quota_message(self) -> str:
        """Why a request refused by its tenant's requests-per-minute quota was refused, for the caller."""
        return (f"this tenant's requests per minute quota is {self.limit} and its keys made {self.used} requests "
                f"in the last minute; retry in {self.retry_after} s")


def sliding_estimate(current: int, previous: int, elapsed: float) -> float:
    """Requests in the last 60 seconds, estimated from this minute's ``current`` count, the previous minute's
    and the ``elapsed`` seconds of this minute."""
    weight = max(0.0, 1.0 - elapsed / WINDOW_SECONDS)
    return previous * weight + current


def retry_after(current: int, previous: int, elapsed: float, limit: int) -> int:
    """Whole seconds (at least 1) until a request would be allowed if none comes meanwhile: until the estimate
    with that request counted in (``current`` already holds the refused one) is back at ``limit``."""
    room = limit - current - 1  # what the previous minute's weighted count may still be
    if room >= 0 and previous > 0:  # within this minute, as the previous one's weight falls
        return max(1, math.ceil(WINDOW_SECONDS * (1.0 - room / previous) - elapsed))
    # In a later minute, when this one's count has become the previous one's and its weight fell enough.
    later = WINDOW_SECONDS * (1.0 - (limit - 1) / current) if current and limit > 1 else WINDOW_SECONDS
    return max(1, math.ceil(WINDOW_SECONDS - elapsed + max(0.0, later)))


# How long a process trusts the requests-per-minute quota it read for a tenant: a tenant without one then
# costs its requests no store transaction at all (most tenants), and a quota the operator sets or clears
# applies within this many seconds.
QUOTA_SECONDS = 5.0


class RateLimiter:
    """A per-key sliding-window limit of ``limit`` requests per minute (0: no limit), over ``records``.

    ``clock`` gives the time in seconds (default: ``time.time``, looked up at each request).
    """

    def __init__(self, records: ServiceRecords, limit: int, *, clock: Callable[[], float] | None = None) -> None:
        self.records = records
        self.limit = limit
        self.clock = clock
        self._quotas: dict[str, tuple[float, int | None]] = {}  # tenant -> (trusted until, monotonic; its quota)

    def _tenant_quota(self, tenant: str) -> int | None:
        """The tenant's requests-per-minute quota, read again once ``QUOTA_SECONDS`` have passed."""
        now = time.monotonic()
        known = self._quotas.get(tenant)
        if known is not None and known[0] > now:
            return known[1]
        limit = self.records.get_quota(tenant).requests_per_minute
        self._quotas[tenant] = (now + QUOTA_SECONDS, limit)
        return limit

    def check(self, key_id: int) -> RateDecision:
        """Count one request of ``key_id`` and judge it (blocking: it writes to the store)."""
        if not self.limit:
            return RateDecision(True, 0.0, 0)
        now = self.clock() if self.clock is not None else time.time()
        window = int(now // WINDOW_SECONDS)
        elapsed = now - window * WINDOW_SECONDS
        current, previous = self.records.rate_count(key_id, window)
        estimate = sliding_estimate(current, previous, elapsed)
        if estimate <= self.limit:
            return RateDecision(True, estimate, self.limit)
        return RateDecision(False, estimate, self.limit, retry_after(current, previous, elapsed, self.limit))

    def check_tenant(self, tenant: str) -> RateDecision:
        """Count one request of ``tenant`` against its requests-per-minute quota (:mod:`bunko.stores.quotas`),
        over all of its keys, and judge it the same way (allowed when it has no such quota)."""
        limit = self._tenant_quota(tenant)
        if limit is None:
            return RateDecision(True, 0.0, 0)
        now = self.clock() if self.clock is not None else time.time()
        window = int(now // WINDOW_SECONDS)
        elapsed = now - window * WINDOW_SECONDS
        current, previous = self.records.tenant_rate_count(tenant, window)
        estimate = sliding_estimate(current, previous, elapsed)
        if estimate <= limit:
            return RateDecision(True, estimate, limit)
        return RateDecision(False, estimate, limit, retry_after(current, previous, elapsed, limit))


__all__ = ["QUOTA_SECONDS", "WINDOW_SECONDS", "RateDecision", "RateLimiter", "retry_after", "sliding_estimate"]
