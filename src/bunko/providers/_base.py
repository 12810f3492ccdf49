"""The base of every hosted provider client, and the hosted embedder and LLM built on it.

``HostedClient`` resolves, once for all hosted embedders, LLMs and rerankers, what a client
needs: the model (argument, else the provider's default), the base URL, the API key (argument,
else the provider's environment variables; masked in every message), timeout and retries; and
it owns the HTTP core. A provider subclass sets class attributes and speaks its wire format.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypedDict, TypeVar, Unpack

import httpx
import numpy as np

from ..config import DEFAULT_MAX_TOKENS, DEFAULT_TEMPERATURE
from ..embedders import BaseEmbedder, EmbeddingBatch
from ..errors import BunkoError, ConfigError, GenerationError
from ..llm import LLMDelta, LLMMessage, LLMResponse
from ..types import UsageEvent
from ._http import EMBEDDING_ERRORS, LLM_ERRORS, ErrorFamily, HTTPCore, RetryPolicy, resolve_api_key

R = TypeVar("R")


def _positive_int(name: str, value: Any, default: int) -> int:
    if value is None:
        return default
    try:
        number = int(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name} must be a positive integer; got {value!r}") from exc
    if number <= 0 or isinstance(value, bool):
        raise ConfigError(f"{name} must be a positive integer; got {value!r}")
    return number


class ClientOptions(TypedDict, total=False):
    """The keyword arguments every hosted client's constructor takes."""

    base_url: str | None
    api_key: str | None
    timeout: float | None
    max_retries: int | None
    retry: RetryPolicy | None
    usage_sink: Callable[[UsageEvent], None] | None
    transport: httpx.AsyncBaseTransport | None


class HostedClient:
    """A client of one hosted API and model, on the shared HTTP core.

    Subclasses set ``provider``, ``default_base_url``, ``env_vars`` (the key's environment
    variables, first set wins), ``key_required``, ``default_model`` and ``errors`` (the
    seam's error family). A missing key raises ``MissingAPIKeyError`` here, when the
    client is built; a missing model or base URL raises ``ConfigError``.
    """

    provider = ""
    default_base_url = ""
    env_vars: tuple[str, ...] = ()
    key_required = True
    default_model = ""
    #: Seconds to wait for an answer when the caller gives no ``timeout``; None: the HTTP core's default.
    default_timeout: float | None = None
    errors: ClassVar[ErrorFamily]
    usage_sink: Callable[[UsageEvent], None] | None = None

    def __init__(self, model: str | None = None, **options: Unpack[ClientOptions]) -> None:
        unknown = sorted(set(options) - ClientOptions.__optional_keys__)
        if unknown:
            raise ConfigError(f"{self.provider} does not take the option(s) {', '.join(unknown)}")
        self.model = model or self.default_model
        if not self.model:
            raise ConfigError(f"{self.provider}: a model name is required, e.g. '{self.provider}:<model>'")
        url = options.get("base_url") or self.default_base_url
        if not url:
            raise ConfigError(f"{self.provider}: base_url is required (for example http://127.0.0.1:8000/v1)")
        self.usage_sink = options.get("usage_sink")
        key = resolve_api_key(self.provider, options.get("api_key"), self.env_vars, required=self.key_required)
        timeout = options.get("timeout")
        self.core = HTTPCore(provider=self.provider, model=self.model, base_url=url, errors=self.errors,
                             headers=self._headers(key), api_key=key,
                             timeout=self.default_timeout if timeout is None else timeout,
                             max_retries=options.get("max_retries"), retry=options.get("retry"),
                             transport=options.get("transport"))

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}({self.provider}:{self.model})"

    def _headers(self, api_key: str | None) -> dict[str, str]:
        """The headers that carry the key (``Authorization: Bearer`` unless the provider differs)."""
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def _read(self, parse: Callable[..., R], *args: Any) -> R:
        """``parse(*args)`` over an answer; a malformed answer becomes the family's typed error."""
        try:
            return parse(*args)
        except BunkoError:
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            raise self.core.error(f"unexpected response shape ({type(exc).__name__}: {exc})") from exc

    async def close(self) -> None:
        """Close the HTTP client."""
        await self.core.aclose()


class HostedEmbedder(HostedClient, BaseEmbedder):
    """An embedder behind an HTTP API: batches of ``batch_size``, ``concurrency`` calls in flight.

    Subclasses set the class attributes and implement ``_request(texts, query)`` and
    ``_parse(data)``; the base sends, retries, checks shapes and reports usage.
    """

    errors = EMBEDDING_ERRORS
    batch_size = 100
    max_batch_size = 100
    concurrency = 4
    #: Known models and their native dimensions; others need ``dimensions`` or learn it from the response.
    known_dimensions: ClassVar[Mapping[str, int]] = {}

    def __init__(
        self,
        model: str | None = None,
        *,
        dimensions: int | None = None,
        batch_size: int | None = None,
        concurrency: int | None = None,
        **options: Unpack[ClientOptions],
    ) -> None:
        super().__init__(model, **options)
        self.requested_dimensions = _positive_int("dimensions", dimensions, 0) if dimensions is not None else None
        self.dimension = self.requested_dimensions or int(self.known_dimensions.get(self.model, 0))
        self.batch_size = min(_positive_int("batch_size", batch_size, type(self).batch_size), self.max_batch_size)
        self.concurrency = _positive_int("concurrency", concurrency, type(self).concurrency)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.provider}:{self.model}, dimension={self._dimension or 'unknown'})"

    _dimension = 0
    _probing = False

    @property
    def dimension(self) -> int:
        """The vector size; when neither known nor given, one probe call learns it from the server."""
        if not self._dimension and not self._probing:
            self._probe_dimension()
        return self._dimension

    @dimension.setter
    def dimension(self, value: int) -> None:
        self._dimension = int(value)

    def _probe_dimension(self) -> None:
        # Collections record their dimension before the first embedding call, so an unknown
        # dimension is learned here, with one short call. It runs on its own loop in a worker
        # thread, so it works whether or not the caller is inside an event loop.
        outcome: dict[str, Any] = {}

        async def probe() -> EmbeddingBatch:
            try:
                return await self._call(["dimension probe"], False)
            finally:
                await self.core.aclose()

        def work() -> None:
            started = time.perf_counter()
            try:
                batch = asyncio.run(probe())
            except BaseException as exc:  # handed to the caller's thread below
                outcome["error"] = exc
                return
            outcome["dimension"] = int(np.asarray(batch.vectors).shape[1])
            self._report_usage(UsageEvent("embedding", self.provider, self.model, input_tokens=batch.input_tokens,
                                          latency_ms=(time.perf_counter() - started) * 1000, items=1,
                                          metadata={"probe": True}))

        self._probing = True
        try:
            thread = threading.Thread(target=work, name=f"{self.provider}-dimension-probe")
            thread.start()
            thread.join()
        finally:
            self._probing = False
        if "error" in outcome:
            raise outcome["error"]
        self._dimension = outcome["dimension"]

    def _known_dimension(self) -> int:
        return self._dimension

    def warm_up(self) -> None:
        """Learn the dimension now if it is not known (one short API call)."""
        _ = self.dimension

    def _request(self, texts: list[str], query: bool) -> tuple[str, dict[str, Any]]:
        """The path and JSON body of one call."""
        raise NotImplementedError

    def _parse(self, data: Any) -> tuple[list[Any], int]:
        """The vectors (in input order) and input tokens of one response."""
        raise NotImplementedError

    def _matrix(self, vectors: Sequence[Any], count: int) -> np.ndarray:
        if len(vectors) != count:
            raise self.core.error(f"the API returned {len(vectors)} vectors for {count} texts")
        try:
            matrix = np.asarray(vectors, dtype=np.float32)
        except (TypeError, ValueError) as exc:
            raise self.core.error("the API returned vectors of different lengths or non-numbers") from exc
        if matrix.ndim != 2 or matrix.shape[1] == 0:
            raise self.core.error(f"the API returned vectors of shape {matrix.shape}")
        if self._dimension and matrix.shape[1] != self._dimension:
            raise self.core.error(
                f"the API returned {matrix.shape[1]}-d vectors; this embedder is {self._dimension}-d"
                + (" (the dimensions option may be unsupported by this model)" if self.requested_dimensions else "")
            )
        return matrix

    async def _call(self, texts: list[str], query: bool) -> EmbeddingBatch:
        path, body = self._request(texts, query)
        result = await self.core.post_json(path, body)
        vectors, tokens = self._read(self._parse, result.data)
        return EmbeddingBatch(self._matrix(vectors, len(texts)), int(tokens or 0), {"attempts": result.attempts})

    async def _embed_many(self, texts: list[str]) -> EmbeddingBatch:
        return await self._call(texts, False)

    async def _embed_query_many(self, texts: list[str]) -> EmbeddingBatch:
        return await self._call(texts, True)


@dataclass(slots=True)
class StreamState:
    """What a streaming call has gathered so far."""

    parts: list[str] = field(default_factory=list)
    model: str = ""
    input_tokens: int = 0
    output_tokens: int = 0
    finish_reason: str | None = None
    done: bool = False
    raw: dict[str, Any] = field(default_factory=dict)


def normalise_messages(provider: str, messages: Sequence[LLMMessage | Mapping[str, Any]]) -> list[LLMMessage]:
    """Messages checked and as ``LLMMessage`` (dicts with role and content are accepted too)."""
    if isinstance(messages, str | bytes) or not messages:
        raise GenerationError(f"{provider}: no messages to send")
    result = []
    for position, message in enumerate(messages):
        if isinstance(message, Mapping):
            message = LLMMessage(str(message.get("role", "")), message.get("content", ""))
        if not isinstance(message, LLMMessage) or message.role not in ("system", "user", "assistant"):
            raise GenerationError(f"{provider}: message {position} needs a role of system, user or assistant")
        if not isinstance(message.content, str):
            raise GenerationError(f"{provider}: message {position} content must be text")
        result.append(message)
    if all(m.role == "system" for m in result):
        raise GenerationError(f"{provider}: there is no user message")
    return result


class HostedLLM(HostedClient):
    """An ``LLMProvider`` behind an HTTP API.

    Subclasses implement ``_complete_request``/``_parse_complete`` for one-shot calls and
    ``_stream_request``/``_on_event`` for streaming; the base retries, times and reports
    one ``UsageEvent("llm", ...)`` per call, failed calls included (with ``metadata["error"]``).
    Without ``temperature`` and ``max_tokens`` a call uses ``bunko.config``'s defaults.
    """

    errors = LLM_ERRORS
    default_timeout = 120.0

    def __init__(
        self,
        model: str | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        **options: Unpack[ClientOptions],
    ) -> None:
        super().__init__(model, **options)
        self.name = self.provider  # the LLMProvider protocol's word for it
        self.default_temperature = DEFAULT_TEMPERATURE if temperature is None else float(temperature)
        self.default_max_tokens = _positive_int("max_tokens", max_tokens, DEFAULT_MAX_TOKENS)

    # -- provider specifics ----------------------------------------------------------------------

    def _complete_request(self, messages: list[LLMMessage], temperature: float,
                          max_tokens: int) -> tuple[str, dict[str, Any], dict[str, str] | None]:
        raise NotImplementedError

    def _parse_complete(self, data: Any) -> LLMResponse:
        raise NotImplementedError

    def _stream_request(self, messages: list[LLMMessage], temperature: float,
                        max_tokens: int) -> tuple[str, dict[str, Any], dict[str, str] | None]:
        raise NotImplementedError

    def _on_event(self, event: str, data: str, state: StreamState) -> list[str]:
        """Text pieces carried by one SSE event; sets ``state.done`` at the end of the stream."""
        raise NotImplementedError

    # -- the LLMProvider protocol ----------------------------------------------------------------

    def _report(self, started: float, *, input_tokens: int = 0, output_tokens: int = 0,
                **metadata: Any) -> None:
        if self.usage_sink is None:
            return
        self.usage_sink(UsageEvent("llm", self.provider, self.model, input_tokens=input_tokens,
                                   output_tokens=output_tokens, latency_ms=(time.perf_counter() - started) * 1000,
                                   items=1, metadata=metadata))

    def _settings(self, temperature: float | None, max_tokens: int | None) -> tuple[float, int]:
        t = self.default_temperature if temperature is None else float(temperature)
        return t, _positive_int("max_tokens", max_tokens, self.default_max_tokens)

    async def complete(self, messages: list[LLMMessage], *, temperature: float | None = None,
                       max_tokens: int | None = None) -> LLMResponse:
        """One non-streaming chat completion."""
        checked = normalise_messages(self.provider, messages)
        temperature, max_tokens = self._settings(temperature, max_tokens)
        started = time.perf_counter()
        try:
            path, body, params = self._complete_request(checked, temperature, max_tokens)
            result = await self.core.post_json(path, body, params=params)
            response = self._read(self._parse_complete, result.data)
        except BunkoError as exc:
            self._report(started, stream=False, error=exc.code)
            raise
        self._report(started, input_tokens=response.input_tokens, output_tokens=response.output_tokens,
                     stream=False, attempts=result.attempts)
        return response

    async def stream(self, messages: list[LLMMessage], *, temperature: float | None = None,
                     max_tokens: int | None = None) -> AsyncIterator[LLMDelta]:
        """Text deltas as they arrive, then one final delta carrying the complete ``LLMResponse``."""
        checked = normalise_messages(self.provider, messages)
        temperature, max_tokens = self._settings(temperature, max_tokens)
        started = time.perf_counter()
        state = StreamState(model=self.model)
        outcome: dict[str, Any] = {"error": "CANCELLED"}  # replaced on success or on a typed error
        try:
            path, body, params = self._stream_request(checked, temperature, max_tokens)
            # aclosing: leaving the loop early (end marker, error, caller gone) closes the HTTP stream now.
            async with aclosing(self.core.stream_events(path, body, params=params)) as events:
                async for event, data in events:
                    for piece in self._read(self._on_event, event, data, state):
                        if piece:
                            state.parts.append(piece)
                            yield LLMDelta(text=piece)
                    if state.done:
                        break
            if not state.done and not self._stream_may_end_silently:
                raise self.core.error("the stream ended before the provider's end-of-stream marker")
            outcome = {}
        except BunkoError as exc:
            outcome = {"error": exc.code}
            raise
        finally:
            self._report(started, input_tokens=state.input_tokens, output_tokens=state.output_tokens,
                         stream=True, **outcome)
        yield LLMDelta(response=LLMResponse("".join(state.parts), state.model or self.model, state.input_tokens,
                                            state.output_tokens, raw={"finish_reason": state.finish_reason,
                                                                      **state.raw}))

    #: Gemini's SSE stream has no end marker; the others end with one.
    _stream_may_end_silently = False
