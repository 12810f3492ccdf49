"""Per-tenant quotas: what the operator lets a tenant hold and use (``bunko admin tenants set-quota``).

A quota is a limit or None (no limit). Kept with the tenant in the service records (table ``tenant_quotas``;
on PostgreSQL only the owner login writes it, the application role reads its own tenant's row):

- ``documents``, ``chunks`` and ``bytes`` (the UTF-8 size of the stored chunk text) limit what the tenant holds.
  Writes check them inside their own transaction, after a per-tenant lock, so concurrent writers cannot pass
  them together, and a refused write leaves nothing (:mod:`bunko.stores.sql.quotas`). A write that does not
  grow a count (a new version with fewer chunks) is never refused by it.
- ``upload_bytes_per_day`` limits the bytes of the files uploaded over HTTP in the last 24 hours (the upload
  jobs' file sizes); ``requests_per_minute`` the tenant's HTTP requests over all of its keys
  (:mod:`bunko.ratelimit`).

Size-like quotas answer HTTP 413 (retrying does not help until data is deleted or the quota is raised),
rate-like ones 429 (the same request succeeds later).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from ..errors import ConfigError, QuotaExceededError

QUOTA_NAMES = ("documents", "chunks", "bytes", "upload_bytes_per_day", "requests_per_minute")
RATE_LIKE = frozenset({"upload_bytes_per_day", "requests_per_minute"})
# The largest limit either store keeps (a signed 64-bit integer; requests per minute: a 32-bit one).
MAX_LIMIT = 2**63 - 1
MAX_LIMITS = {name: MAX_LIMIT for name in QUOTA_NAMES} | {"requests_per_minute": 2**31 - 1}


@dataclass(frozen=True, slots=True)
class Quota:
    """A tenant's limits; None: no limit."""

    documents: int | None = None
    chunks: int | None = None
    bytes: int | None = None
    upload_bytes_per_day: int | None = None
    requests_per_minute: int | None = None

    def to_dict(self) -> dict[str, int | None]:
        """A JSON-ready dict."""
        return asdict(self)

    def is_empty(self) -> bool:
        """Whether no limit is set."""
        return all(getattr(self, f.name) is None for f in fields(self))

    def changed(self, values: dict[str, int | None], clear: set[str] | frozenset[str] = frozenset()) -> Quota:
        """This quota with ``values`` set (None: left as it is) and the quotas named in ``clear`` removed."""
        unknown = (set(values) | set(clear)) - set(QUOTA_NAMES)
        if unknown:
            raise ConfigError(f"unknown quota {sorted(unknown)[0]!r}: use one of {', '.join(QUOTA_NAMES)}")
        updates: dict[str, Any] = {}
        for name, value in values.items():
            if value is not None:
                updates[name] = check_limit(name, value)
        updates.update({name: None for name in clear})
        return replace(self, **updates)


def check_limit(name: str, value: int) -> int:
    """A limit as given, or ``ConfigError`` (a whole number from 0 to 2**63 - 1; requests per minute 2**31 - 1)."""
    top = MAX_LIMITS.get(name, MAX_LIMIT)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= top:
        raise ConfigError(f"quota {name}: {value!r} is not a whole number from 0 to {top}")
    return value


def exceeded(name: str, limit: int, usage: int, adding: int | None, unit: str = "") -> QuotaExceededError:
    """The error for work that would take ``usage`` past ``limit`` by ``adding`` (None: the tenant is at it)."""
    what = name.replace("_", " ")
    rate_like = name in RATE_LIKE
    used = "has used" if rate_like else "has"
    grows = "it is at that quota" if adding is None else f"the request would add {adding}{unit}"
    remedy = "retry later" if rate_like else "delete some data"
    return QuotaExceededError(
        f"this tenant's {what} quota is {limit}{unit} and it {used} {usage}{unit}; {grows} ({remedy} or ask the "
        "operator to raise the quota)", quota=name, limit=limit, usage=usage, rate_like=rate_like)


__all__ = ["MAX_LIMIT", "MAX_LIMITS", "QUOTA_NAMES", "RATE_LIKE", "Quota", "check_limit", "exceeded"]
