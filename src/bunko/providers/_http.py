"""The HTTP core every hosted provider shares: one async client, retries, typed errors, SSE.

* **Retries.** 429, 5xx (and 408), timeouts and connection errors are retried with
  exponential backoff and jitter, up to ``max_retries`` retries after the first try
  (default 4, so at most 5 tries in all, R12). A ``Retry-After`` header (seconds or an
  HTTP date) replaces the computed backoff; a wait longer than ``max_retry_after`` is
  not slept through, the call fails at once with the provider's figure in ``retry_after``.
* **Errors.** Every failure becomes one error of the caller's family (embedding, LLM,
  rerank): rate limit, timeout, auth, or the family's generic provider error. The message
  names provider, model and cause (HTTP status and the provider's own message). The API
  key is never part of a message, a log line or a ``repr``; if a provider echoes it back
  it is masked.
* **Streaming.** ``stream_events`` parses Server-Sent Events and retries only until the
  first event has been handed to the caller; after that a failure is raised, never
  replayed, so no text is emitted twice.
* **Event loops.** An ``httpx.AsyncClient`` belongs to the loop that opened its
  connections. Callers run ``asyncio.run`` more than once (the CLI, tests), so the core
  keeps one client per running loop and opens a new one when the loop changes.
"""

from __future__ import annotations

import asyncio
import email.utils
import json
import logging
import os
import random
import time
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx

from .. import metrics
from ..errors import (
    BunkoError,
    ConfigError,
    EmbeddingAuthError,
    EmbeddingProviderError,
    EmbeddingRateLimitError,
    EmbeddingTimeoutError,
    LLMAuthError,
    LLMProviderError,
    LLMRateLimitError,
    LLMTimeoutError,
    MissingAPIKeyError,
    ProviderFailure,
    RerankAuthError,
    RerankProviderError,
    RerankRateLimitError,
    RerankTimeoutError,
)

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 60.0
DEFAULT_MAX_RETRIES = 4  # retries after the first try: 5 tries in all (R12)
RETRY_STATUSES = frozenset({408, 429, 500, 502, 503, 504}) | frozenset(range(520, 530))
MAX_MESSAGE_CHARS = 500


@dataclass(frozen=True, slots=True)
class ErrorFamily:
    """The error classes one seam raises: generic, rate limit, timeout, auth."""

    generic: type[ProviderFailure]
    rate_limit: type[ProviderFailure]
    timeout: type[ProviderFailure]
    auth: type[ProviderFailure]


EMBEDDING_ERRORS = ErrorFamily(EmbeddingProviderError, EmbeddingRateLimitError, EmbeddingTimeoutError,
                               EmbeddingAuthError)
LLM_ERRORS = ErrorFamily(LLMProviderError, LLMRateLimitError, LLMTimeoutError, LLMAuthError)
RERANK_ERRORS = ErrorFamily(RerankProviderError, RerankRateLimitError, RerankTimeoutError, RerankAuthError)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How failed calls are retried.

    The n-th retry waits ``min(backoff_max, backoff_base * 2**n)``, of which the upper half
    is random (jitter), unless the provider sent ``Retry-After``.
    """

    max_retries: int = DEFAULT_MAX_RETRIES
    backoff_base: float = 0.5
    backoff_max: float = 20.0
    max_retry_after: float = 60.0

    def backoff(self, retry: int) -> float:
        """The wait before retry number ``retry`` (0-based) when the provider gave no ``Retry-After``."""
        delay = min(self.backoff_max, self.backoff_base * (2**retry))
        return delay / 2 + random.uniform(0, delay / 2)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delay-seconds or an HTTP date; None if absent or invalid."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)


def resolve_api_key(provider: str, api_key: str | None, env_vars: tuple[str, ...], *,
                    required: bool = True) -> str | None:
    """The API key from the explicit option, else the first set environment variable, else an error."""
    if api_key:
        return api_key
    for var in env_vars:
        value = os.environ.get(var, "").strip()
        if value:
            return value
    if not required:
        return None
    names = " or ".join(env_vars)
    raise MissingAPIKeyError(f"{provider}: no API key; set {names} or pass api_key")


def _provider_message(body: Any) -> str:
    """The human message inside a provider's error body, whatever its shape."""
    if isinstance(body, list) and body:
        body = body[0]  # Gemini sometimes wraps errors in a list
    if not isinstance(body, dict):
        return ""
    error = body.get("error")
    if isinstance(error, dict):
        message = error.get("message") or error.get("type") or ""
        status = error.get("status") or error.get("type")
        if message and status and status != message:
            return f"{status}: {message}"
        return str(message)
    if isinstance(error, str):
        return error
    for key in ("message", "detail", "title"):
        value = body.get(key)
        if isinstance(value, str) and value:
            return value
        if isinstance(value, list) and value:  # FastAPI-style validation details
            first = value[0]
            return str(first.get("msg") if isinstance(first, dict) else first)
    return ""


@dataclass(slots=True)
class JSONResult:
    """A parsed JSON response with how it was obtained."""

    data: Any
    latency_ms: float
    attempts: int


class HTTPCore:
    """An async JSON/SSE client for one provider and model, with retries and typed errors."""

    def __init__(
        self,
        *,
        provider: str,
        model: str,
        base_url: str,
        errors: ErrorFamily,
        headers: Mapping[str, str] | None = None,
        api_key: str | None = None,
        timeout: float | None = None,
        max_retries: int | None = None,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.provider = provider
        self.model = model
        self.base_url = base_url.rstrip("/")
        self.errors = errors
        self._headers = dict(headers or {})
        self._secret = api_key or ""  # only to mask it if a provider echoes it back
        try:
            self.timeout = float(timeout) if timeout is not None else DEFAULT_TIMEOUT
        except (TypeError, ValueError):
            self.timeout = -1.0
        if not self.timeout > 0:
            raise ConfigError(f"{provider}: timeout must be a positive number of seconds; got {timeout!r}")
        policy = retry or RetryPolicy()
        if max_retries is not None:
            if isinstance(max_retries, bool) or not isinstance(max_retries, int) or max_retries < 0:
                raise ConfigError(f"{provider}: max_retries must be a whole number, 0 or more; got {max_retries!r}")
            policy = RetryPolicy(max_retries, policy.backoff_base, policy.backoff_max, policy.max_retry_after)
        self.retry = policy
        self._transport = transport
        self._clients: dict[int, tuple[asyncio.AbstractEventLoop, httpx.AsyncClient]] = {}

    def __repr__(self) -> str:  # no headers: they hold the key
        return f"HTTPCore({self.provider}:{self.model} at {self.base_url})"

    # -- clients ---------------------------------------------------------------------------------

    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        entry = self._clients.get(id(loop))
        if entry is not None and entry[0] is loop and not entry[1].is_closed:
            return entry[1]
        # Forget clients of loops that have ended; their connections died with the loop.
        self._clients = {k: v for k, v in self._clients.items() if not v[0].is_closed()}
        client = httpx.AsyncClient(
            headers=self._headers,
            timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0)),
            transport=self._transport,
            follow_redirects=False,
        )
        self._clients[id(loop)] = (loop, client)
        return client

    async def aclose(self) -> None:
        """Close the client of the running loop (the others belong to loops that are gone)."""
        loop = asyncio.get_running_loop()
        entry = self._clients.pop(id(loop), None)
        if entry is not None:
            await entry[1].aclose()

    # -- errors ----------------------------------------------------------------------------------

    def _mask(self, text: str) -> str:
        if self._secret and self._secret in text:
            text = text.replace(self._secret, "***")
        return text

    def _error(self, kind: str, cause: str, *, status: int | None = None,
               retry_after: float | None = None, attempts: int = 1) -> BunkoError:
        cls = {"rate_limit": self.errors.rate_limit, "timeout": self.errors.timeout,
               "auth": self.errors.auth}.get(kind, self.errors.generic)
        tries = f" (after {attempts} tries)" if attempts > 1 else ""
        message = self._mask(f"{self.provider}:{self.model}: {cause}{tries}")
        error = cls(message)
        error.provider, error.model, error.status, error.retry_after = self.provider, self.model, status, retry_after
        return error  # type: ignore[return-value]

    def error(self, cause: str, *, status: int | None = None) -> BunkoError:
        """A generic error of this provider's family (malformed bodies, wrong dimensions)."""
        return self._error("generic", cause, status=status)

    def _status_error(self, response: httpx.Response, body_text: str, attempts: int) -> BunkoError:
        status = response.status_code
        try:
            detail = _provider_message(json.loads(body_text))
        except ValueError:
            detail = ""
        if not detail:
            detail = " ".join(body_text.split())[:200]
        detail = detail[:MAX_MESSAGE_CHARS]
        reason = response.reason_phrase or ""
        cause = f"HTTP {status} {reason}".rstrip() + (f": {detail}" if detail else "")
        kind = "rate_limit" if status == 429 else "auth" if status in (401, 403) else "generic"
        return self._error(kind, cause, status=status, attempts=attempts,
                           retry_after=parse_retry_after(response.headers.get("retry-after")))

    def _transport_error(self, exc: httpx.HTTPError, attempts: int) -> BunkoError:
        if isinstance(exc, httpx.TimeoutException):
            what = type(exc).__name__.replace("Timeout", " timeout").strip().lower()
            return self._error("timeout", f"no answer within {self.timeout:g}s ({what})", attempts=attempts)
        text = str(exc) or type(exc).__name__
        return self._error("generic", f"connection failed: {text}", attempts=attempts)

    # -- retry loop ------------------------------------------------------------------------------

    def _wait(self, retry: int, response: httpx.Response | None) -> float | None:
        """Seconds to wait before retry ``retry``; None when the provider asks for longer than we wait."""
        if response is not None:
            asked = parse_retry_after(response.headers.get("retry-after"))
            if asked is not None:
                if asked > self.retry.max_retry_after:
                    return None
                return asked
        return self.retry.backoff(retry)

    def _url(self, path: str) -> str:
        return path if path.startswith(("http://", "https://")) else f"{self.base_url}/{path.lstrip('/')}"

    async def post_json(self, path: str, body: Any, *, params: Mapping[str, str] | None = None) -> JSONResult:
        """POST ``body`` as JSON and return the parsed JSON answer, retrying as the policy says."""
        url = self._url(path)
        started = time.perf_counter()
        attempt = 0
        while True:
            attempt += 1
            response: httpx.Response | None = None
            try:
                response = await self._client().post(url, json=body, params=params)
            except httpx.HTTPError as exc:
                metrics.count_provider(self.provider, "timeout" if isinstance(exc, httpx.TimeoutException) else "error")
                error = self._transport_error(exc, attempt)
                retryable = True
            else:
                metrics.count_provider(self.provider, response.status_code)
                if response.is_success:
                    try:
                        data = response.json()
                    except ValueError as exc:
                        snippet = " ".join(response.text.split())[:120]
                        raise self._error("generic", f"malformed JSON in the response (HTTP {response.status_code}): "
                                                     f"{snippet!r}", status=response.status_code) from exc
                    return JSONResult(data, (time.perf_counter() - started) * 1000, attempt)
                error = self._status_error(response, response.text, attempt)
                retryable = response.status_code in RETRY_STATUSES
            if not retryable or attempt > self.retry.max_retries:
                raise error
            wait = self._wait(attempt - 1, response)
            if wait is None:
                raise error
            logger.info("%s:%s: retrying in %.2fs after %s", self.provider, self.model, wait,
                        f"HTTP {response.status_code}" if response is not None else "a network error")
            await asyncio.sleep(wait)

    async def stream_events(self, path: str, body: Any, *,
                            params: Mapping[str, str] | None = None) -> AsyncGenerator[tuple[str, str], None]:
        """POST ``body`` and yield Server-Sent Events as ``(event, data)``; retried only before the first event."""
        url = self._url(path)
        attempt = 0
        while True:
            attempt += 1
            delivered = False
            response: httpx.Response | None = None
            try:
                async with self._client().stream("POST", url, json=body, params=params,
                                                 headers={"accept": "text/event-stream"}) as response:
                    metrics.count_provider(self.provider, response.status_code)
                    if not response.is_success:
                        text = (await response.aread()).decode("utf-8", "replace")
                        error = self._status_error(response, text, attempt)
                        if response.status_code not in RETRY_STATUSES:
                            raise error
                    else:
                        async for event in _sse_events(response):
                            delivered = True
                            yield event
                        return
            except httpx.HTTPError as exc:
                if response is None:  # no answer at all (a broken stream was counted with its status)
                    metrics.count_provider(self.provider,
                                           "timeout" if isinstance(exc, httpx.TimeoutException) else "error")
                error = self._transport_error(exc, attempt)
                if delivered:
                    raise self._error(
                        "timeout" if isinstance(exc, httpx.TimeoutException) else "generic",
                        f"the stream broke off: {type(exc).__name__}"
                        + (f" after {self.timeout:g}s without data" if isinstance(exc, httpx.TimeoutException)
                           else f": {exc}"),
                    ) from exc
            if attempt > self.retry.max_retries:
                raise error
            wait = self._wait(attempt - 1, response)
            if wait is None:
                raise error
            logger.info("%s:%s: retrying the stream in %.2fs", self.provider, self.model, wait)
            await asyncio.sleep(wait)


async def _sse_events(response: httpx.Response) -> AsyncIterator[tuple[str, str]]:
    """Server-Sent Events of a response: ``(event name or "message", data)``, comments skipped."""
    event, data = "", list[str]()
    async for line in response.aiter_lines():
        if not line:
            if data:
                yield event or "message", "\n".join(data)
            event, data = "", []
            continue
        if line.startswith(":"):
            continue
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "event":
            event = value
        elif field == "data":
            data.append(value)
    if data:  # a last event without its blank line
        yield event or "message", "\n".join(data)


def parse_json_event(core: HTTPCore, data: str) -> Any:
    """The JSON of one SSE data field, or the family's error naming the bad piece."""
    try:
        return json.loads(data)
    except ValueError as exc:
        raise core.error(f"malformed JSON in the stream: {data[:120]!r}") from exc
