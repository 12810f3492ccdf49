"""``ctx``: what a block may do, bound to the tenant of the execution context (seed 000 §4).

A workflow run builds one :class:`ExecutionContext` per step from the tenant scope it runs in (a
:class:`~bunko.scope.TenantScope`, e.g. a ``Tenant``), and hands the block a :class:`BlockContext` over
it. The services below are the only way a block reaches data:

* ``ctx.embedding.embed(provider, model, texts)`` — the engine's embedder by default;
* ``ctx.vector.upsert / query / delete / list_collections`` — the tenant's collections;
* ``ctx.llm.chat(provider, model, messages, options)`` — the engine's LLM, or an extractive answer
  from the numbered context in the messages when no LLM is configured; ``ctx.llm.answer`` answers a
  question from search hits exactly as ``Tenant.ask`` does;
* ``ctx.http.get(url)`` / ``ctx.http.load(url)`` — the SSRF-guarded fetcher of :mod:`bunko.loaders.url`
  under the engine's ``[fetch]`` policy.

No method takes a tenant: every call goes through the tenant-bound store of the scope the run was
started in (``WHERE tenant_id = …`` below the API, and row-level security on PostgreSQL), so a block
cannot name or reach another tenant whatever its config or input says. Every embedding, LLM call,
search, upsert and delete is metered into that tenant's usage records (R13) through the step's
recorder, tagged with the workflow and step (and carrying the scope's user, if it has one).
"""

from __future__ import annotations

import asyncio
import json
import re
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .. import usage as metering
from .. import vectors
from ..embedders import embedder_info, get_embedder
from ..errors import (
    BunkoError,
    ConfigError,
    EmbeddingError,
    GenerationError,
    ProviderFailure,
    RetrievalError,
)
from ..generation import Generator
from ..indexing import IndexManager
from ..llm import LLMMessage, LLMProvider, get_llm
from ..loaders import LoadOptions
from ..loaders.url import FetchPolicy, fetch, load_url
from ..requests import MODES, QueryRequest, SearchRequest
from ..retrieval import Retriever
from ..scope import EngineServices, TenantScope
from ..types import Document, GenerationResult, SearchHit, UsageEvent
from .errors import BlockInputError, BlockProviderError

DEFAULT = "default"  # the provider name that means "the engine's configured one"
EXCERPT_CHARS = 200
_QUERY_OPTIONS = frozenset({"top_k", "filter", "threshold", "include_content", "mode", "document_ids",
                            "embedding_provider", "embedding_model"})
_DERIVED_FIELDS = frozenset({"char_count"})  # fields blocks add to documents that the store does not keep

# Embedders and LLMs named by a block (other than the engine's own), built once per engine.
_clients: weakref.WeakKeyDictionary[EngineServices, dict[str, Any]] = weakref.WeakKeyDictionary()


class StepRecorder(metering.UsageRecorder):
    """The usage recorder of one step: every event is tagged with the workflow, step and block."""

    def __init__(self, store: Any, *, anonymize_queries: bool, workflow: str, step: str, block: str,
                 user_id: str | None = None) -> None:
        super().__init__(store, user_id=user_id, anonymize_queries=anonymize_queries)
        self.tags = {"workflow": workflow, "step": step, "block": block}

    def add(self, event: UsageEvent) -> None:
        """Buffer ``event`` with the step's tags in its metadata."""
        event.metadata = {**event.metadata, **self.tags}
        super().add(event)


@dataclass(slots=True)
class ExecutionContext:
    """Where a step runs: the tenant scope (set by the runner, never by a block), workflow and step."""

    tenant: TenantScope[EngineServices]
    workflow: str = "workflow"
    step: str = "step"
    block: str = ""
    recorder: StepRecorder | None = field(default=None)

    @property
    def engine(self) -> EngineServices:
        """The engine of the tenant scope."""
        return self.tenant.engine

    def tokens_since(self, mark: int, operation: str) -> int:
        """Input tokens of ``operation`` events recorded since the recorder held ``mark`` events."""
        if self.recorder is None:
            return 0
        return sum(e.input_tokens for e in self.recorder.events[mark:] if e.operation == operation)

    def mark(self) -> int:
        """How many events the step's recorder holds now (see :meth:`tokens_since`)."""
        return len(self.recorder.events) if self.recorder is not None else 0


def _provider_error(exc: BunkoError, what: str) -> BlockProviderError:
    error = BlockProviderError("PROVIDER_001", f"{what}: {exc.message}")
    error.__cause__ = exc
    return error


def _named_client(engine: EngineServices, spec: str, build: Any) -> Any:
    clients = _clients.setdefault(engine, {})
    if spec not in clients:
        client = build(spec)
        metering.install(client)
        clients[spec] = client
    return clients[spec]


async def aclose_clients(engine: EngineServices) -> None:
    """Close the HTTP clients (of the running loop) of the embedders and LLMs blocks named on ``engine``."""
    for client in list(_clients.get(engine, {}).values()):
        close = getattr(client, "close", None)
        if close is not None:
            try:
                await close()
            except Exception:  # closing is best effort
                pass


class EmbeddingService:
    """``ctx.embedding``: text to vectors with the engine's embedder or a named one."""

    def __init__(self, execution: ExecutionContext) -> None:
        self._execution = execution

    def embedder(self, provider: str | None = None, model: str | None = None) -> Any:
        """The embedder ``provider:model``; ``None`` or ``"default"`` mean the engine's configured one."""
        engine = self._execution.engine
        default = engine.embedder
        provider = None if provider in (None, "", DEFAULT) else provider
        model = None if model in (None, "", DEFAULT) else model
        if provider is None and model is None:
            return default
        info = embedder_info(default)
        if provider in (None, info.provider) and model in (None, info.model):
            return default
        spec = f"{provider or info.provider}:{model}" if model else str(provider)
        try:
            return _named_client(engine, spec, get_embedder)
        except ConfigError as exc:
            raise _provider_error(exc, f"embedder {spec}") from exc

    async def embed(self, provider: str | None, model: str | None, texts: str | Sequence[str]) -> dict[str, Any]:
        """``{"vectors", "model", "dimension", "usage": {"total_tokens"}}`` for one text or a list."""
        items = [texts] if isinstance(texts, str) else list(texts)
        if not items or not all(isinstance(t, str) and t.strip() for t in items):
            raise BlockInputError("INPUT_001", "embedding needs non-empty texts")
        embedder = self.embedder(provider, model)
        mark = self._execution.mark()
        try:
            rows = await embedder.embed_batch(items)
        except (EmbeddingError, ConfigError) as exc:
            if isinstance(exc, ProviderFailure | ConfigError):
                raise _provider_error(exc, f"embedder {embedder.provider}:{embedder.model}") from exc
            raise
        tokens = self._execution.tokens_since(mark, "embedding")
        vectors_ = [[float(v) for v in row] for row in rows]
        return {"vectors": vectors_, "model": f"{embedder.provider}:{embedder.model}",
                "dimension": len(vectors_[0]) if vectors_ else int(embedder.dimension),
                "usage": {"total_tokens": tokens}}


def _match(hit: SearchHit, include_content: bool) -> dict[str, Any]:
    data: dict[str, Any] = {"id": hit.chunk_id, "score": round(float(hit.score), 6), "metadata": hit.metadata,
                            "document_id": hit.document_id or None, "source": hit.source or None}
    if include_content:
        data["content"] = hit.content
    return data


class VectorService:
    """``ctx.vector``: the tenant's collections; no method can name another tenant."""

    def __init__(self, execution: ExecutionContext, embedding: EmbeddingService) -> None:
        self._execution = execution
        self._embedding = embedding

    async def upsert(self, collection: str, documents: Sequence[Mapping[str, Any]],
                     options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """Store ``documents`` (``{id?, content, metadata?, vector?}``); returns ``{"upserted_count", "ids"}``.

        A document without a vector is embedded by the collection's embedder: the engine's, or the one
        ``options["embedding_provider"/"embedding_model"]`` name, which must be the collection's. A
        missing collection is created for that embedder; a vector of another dimension is refused.
        """
        options = dict(options or {})
        records = []
        for position, document in enumerate(documents):
            if not isinstance(document, Mapping):
                raise BlockInputError("INPUT_001", f"documents[{position}] is not an object")
            records.append({k: v for k, v in document.items() if k not in _DERIVED_FIELDS})
        items = [vectors.record(r, i) for i, r in enumerate(records)]
        manager, retriever = self._layers(collection, options.get("embedding_provider"),
                                          options.get("embedding_model"))
        try:
            ids = await vectors.upsert(manager, retriever, items, owner=self._execution.tenant.record_owner)
        except EmbeddingError as exc:
            if isinstance(exc, ProviderFailure):
                raise _provider_error(exc, f"embedder {manager.embedder.provider}:{manager.embedder.model}") from exc
            raise
        return {"upserted_count": len(ids), "ids": ids}

    def _layers(self, collection: str, provider: str | None, model: str | None) -> tuple[IndexManager, Retriever]:
        """The tenant's index manager and retriever over ``collection``, with the engine's or a named embedder."""
        scope = self._execution.tenant
        embedder = self._embedding.embedder(provider, model)
        named = None if embedder is self._execution.engine.embedder else embedder  # a named one: uncached searches
        return scope.index_manager(collection, embedder=named), scope.retriever(collection, embedder=named)

    async def search_hits(self, collection: str, query: str | Sequence[float],
                          options: Mapping[str, Any] | None = None) -> list[SearchHit]:
        """The hits of :meth:`query`, as ``SearchHit`` objects (for blocks that pass them on)."""
        options = dict(options or {})
        unknown = sorted(set(options) - _QUERY_OPTIONS)
        if unknown:
            raise BlockInputError("INPUT_001", f"unknown query option(s): {', '.join(unknown)}")
        top_k = options.get("top_k", 5)
        include_content = options.get("include_content", True)
        if not isinstance(include_content, bool):
            raise BlockInputError("INPUT_001", "include_content must be true or false")
        mode = options.get("mode")
        _, retriever = self._layers(collection, options.get("embedding_provider"), options.get("embedding_model"))
        if isinstance(query, str):
            if mode is not None and mode not in MODES:
                raise RetrievalError(f"unknown search mode {mode!r}; use one of: {', '.join(MODES)}")
            if mode in (None, "vector") and (options.get("threshold") is not None or not include_content):
                # The low-level query (R14) honours a threshold and leaves content out when asked.
                request = QueryRequest(collection=collection, text=query, top_k=top_k,
                                       threshold=options.get("threshold"), filter=options.get("filter"),
                                       document_ids=options.get("document_ids"), include_content=include_content)
                request.check()
                return await vectors.query(retriever, request)
            search: dict[str, Any] = {"top_k": top_k, "filter": options.get("filter"),
                                      "threshold": options.get("threshold"),
                                      "document_ids": options.get("document_ids")}
            if mode is not None:
                search["mode"] = mode
            built = SearchRequest.build(query, collection, **search).resolved()
            hits = await retriever.search(built)
            if not include_content:
                for hit in hits:
                    hit.content = ""
            return hits
        if mode not in (None, "vector"):
            raise BlockInputError("INPUT_001", f"a query by vector searches by vector; mode {mode!r} needs a text")
        request = QueryRequest(collection=collection, vector=list(query), top_k=top_k,
                               threshold=options.get("threshold"), filter=options.get("filter"),
                               document_ids=options.get("document_ids"), include_content=include_content)
        request.check()
        return await vectors.query(retriever, request)

    async def query(self, collection: str, query: str | Sequence[float],
                    options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The records nearest to a vector or a text: ``{"matches": [{id, score, content?, metadata}]}``.

        ``options``: ``top_k`` (5), ``filter`` (a metadata filter), ``threshold`` (lowest cosine),
        ``include_content`` (true), ``mode`` (``vector``, ``keyword`` or ``hybrid``; a text only,
        default: the engine's search default), ``document_ids``, and ``embedding_provider`` /
        ``embedding_model`` to embed a text with a named embedder (the collection's).
        """
        include_content = (options or {}).get("include_content", True)
        hits = await self.search_hits(collection, query, options)
        return {"matches": [_match(hit, include_content is not False) for hit in hits]}

    async def delete(self, collection: str, ids: Sequence[str]) -> dict[str, Any]:
        """Delete records of ``collection`` by id (this tenant's only): ``{"deleted_count"}``."""
        if not all(isinstance(i, str) and i for i in ids):
            raise BlockInputError("INPUT_001", "ids must be non-empty strings")
        # A missing collection is COLLECTION_NOT_FOUND.
        deleted = await asyncio.to_thread(self._execution.tenant.delete_records, collection, list(ids))
        return {"deleted_count": deleted}

    async def list_collections(self) -> list[dict[str, Any]]:
        """This tenant's collections: ``[{name, document_count, chunk_count, dimension, created_at, ...}]``."""
        collections = await asyncio.to_thread(self._execution.tenant.store.list_collections)  # the tenant's only
        return [{"name": c.name, "document_count": c.document_count, "chunk_count": c.chunk_count,
                 "dimension": c.dimension, "embedding_provider": c.embedding_provider,
                 "embedding_model": c.embedding_model, "created_at": c.created_at} for c in collections]


_CONTEXT_BLOCK = re.compile(r"^\[(\d+)\][ \t]*(?:\(([^)\n]*)\))?[ \t]*\n?", re.MULTILINE)
_SECTION = re.compile(r"^##[ \t]*(Context|Question|Answer)[ \t]*$", re.MULTILINE | re.IGNORECASE)


def context_from_messages(messages: Sequence[LLMMessage]) -> tuple[str, list[SearchHit]]:
    """The question and the numbered passages ``[N] (source) text`` of the last user message.

    This is the layout the seed's rag-query prompt and bunko's own generator send
    (``## Context … ## Question … ## Answer``); a message without it is all question.
    """
    user = next((m.content for m in reversed(messages) if m.role == "user"), "")
    sections: dict[str, str] = {}
    marks = list(_SECTION.finditer(user))
    for i, mark in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(user)
        sections[mark.group(1).lower()] = user[mark.end():end].strip()
    question = sections.get("question") or (user if not marks else "")
    context = sections.get("context", "")
    hits: list[SearchHit] = []
    blocks = list(_CONTEXT_BLOCK.finditer(context))
    for i, block in enumerate(blocks):
        end = blocks[i + 1].start() if i + 1 < len(blocks) else len(context)
        text = context[block.end():end].strip().removesuffix("---").strip()
        if text:
            label = (block.group(2) or "").strip()
            hits.append(SearchHit(chunk_id=block.group(1), document_id="", source=label, content=text,
                                  score=1.0, metadata={"source": label} if label else {}))
    return question.strip(), hits


def _messages(messages: Any) -> list[LLMMessage]:
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise BlockInputError("INPUT_001", "messages must be a non-empty list of {role, content}")
    out = []
    for position, message in enumerate(messages):
        if isinstance(message, LLMMessage):
            out.append(message)
            continue
        if (not isinstance(message, Mapping) or message.get("role") not in ("system", "user", "assistant")
                or not isinstance(message.get("content"), str)):
            raise BlockInputError("INPUT_001", f"messages[{position}] must be {{role: system|user|assistant, "
                                               "content: text}")
        out.append(LLMMessage(message["role"], message["content"]))
    return out


class LLMService:
    """``ctx.llm``: chat with the engine's LLM or a named one; extractive when none is configured."""

    def __init__(self, execution: ExecutionContext) -> None:
        self._execution = execution

    def model(self, provider: str | None = None, model: str | None = None) -> LLMProvider | None:
        """The LLM ``provider:model``; ``None``/``"default"`` mean the engine's (None: no LLM configured)."""
        engine = self._execution.engine
        provider = None if provider in (None, "", DEFAULT) else provider
        model = None if model in (None, "", DEFAULT) else model
        configured = engine.llm
        if provider is None and model is None:
            return configured
        if configured is not None and provider in (None, configured.name) and model in (None, configured.model):
            return configured
        if provider is None:
            if configured is None:
                raise BlockProviderError("PROVIDER_001", f"no LLM is configured to run model {model!r} with; "
                                                         "name the provider too")
            provider = configured.name
        spec = f"{provider}:{model}" if model else str(provider)
        try:
            return _named_client(engine, spec, get_llm)
        except ConfigError as exc:
            raise _provider_error(exc, f"LLM {spec}") from exc

    async def chat(self, provider: str | None, model: str | None, messages: Any,
                   options: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """One chat completion: ``{"content", "model", "usage": {input_tokens, output_tokens}, "extractive"}``.

        ``messages`` is a list of ``{role, content}`` (or the seed's ``{messages, temperature,
        max_tokens}``); ``options`` takes ``temperature`` (default 0.3) and ``max_tokens`` (2000).
        With no LLM configured (and none named) the answer is extractive: the sentences of the
        numbered context in the last user message that best answer its question, each with its
        ``[N]``.
        """
        opts = dict(options or {})
        if isinstance(messages, Mapping):
            opts = {**{k: v for k, v in messages.items() if k != "messages"}, **opts}
            messages = messages.get("messages")
        chat = _messages(messages)
        temperature, max_tokens = opts.get("temperature", 0.3), opts.get("max_tokens", 2000)
        llm = self.model(provider, model)
        if llm is None:
            question, hits = context_from_messages(chat)
            if not question:
                raise BlockInputError("INPUT_001", "no LLM is configured and the messages hold no question to "
                                                   "answer extractively")
            result = await self._generate(None, question, hits, {})
            return {"content": result.answer, "model": "extractive", "extractive": True,
                    "usage": {"input_tokens": 0, "output_tokens": 0}}
        try:
            response = await llm.complete(chat, temperature=float(temperature), max_tokens=int(max_tokens))
        except BunkoError as exc:
            raise _provider_error(exc, f"LLM {llm.name}:{llm.model}") from exc
        return {"content": response.text, "model": response.model or llm.model, "extractive": False,
                "usage": {"input_tokens": response.input_tokens, "output_tokens": response.output_tokens}}

    async def answer(self, query: str, hits: Sequence[SearchHit], options: Mapping[str, Any] | None = None
                     ) -> GenerationResult:
        """An answer to ``query`` from ``hits`` with ``[N]`` citations, as ``Tenant.ask`` writes it.

        ``options``: ``llm_provider``, ``llm_model``, ``system_prompt``, ``temperature``, ``max_tokens``.
        """
        opts = dict(options or {})
        llm = self.model(opts.get("llm_provider"), opts.get("llm_model"))
        return await self._generate(llm, query, list(hits), opts)

    async def _generate(self, llm: LLMProvider | None, query: str, hits: list[SearchHit],
                        opts: Mapping[str, Any]) -> GenerationResult:
        tenant, settings = self._execution.tenant, self._execution.engine.settings.llm
        if llm is self._execution.engine.llm:
            generator = tenant.generator(temperature=opts.get("temperature"), max_tokens=opts.get("max_tokens"),
                                         system_prompt=opts.get("system_prompt"))
        else:
            temperature = opts.get("temperature")
            generator = Generator(llm, system_prompt=opts.get("system_prompt") or settings.system_prompt,
                                  embedder=self._execution.engine.embedder,
                                  temperature=settings.temperature if temperature is None else temperature,
                                  max_tokens=opts.get("max_tokens") or settings.max_tokens,
                                  context_tokens=settings.context_tokens)
        try:
            return await generator.generate(query, hits)
        except GenerationError as exc:
            cause = exc.__cause__ if isinstance(exc.__cause__, BunkoError) else exc
            if isinstance(cause, ProviderFailure) or llm is not None:
                raise _provider_error(exc, "answer generation") from exc
            raise


class HttpService:
    """``ctx.http``: GET a URL through the SSRF-guarded fetcher, under the engine's fetch policy."""

    def __init__(self, execution: ExecutionContext) -> None:
        self._execution = execution

    @property
    def policy(self) -> FetchPolicy:
        """The engine's fetch policy (``[fetch] allow_hosts``; public hosts only by default)."""
        return FetchPolicy.from_settings(self._execution.engine.settings)

    async def get(self, url: str) -> dict[str, Any]:
        """``{"url", "status", "headers", "content_type", "data"}``; ``data`` is text, or parsed JSON."""
        if not isinstance(url, str) or not url.strip():
            raise BlockInputError("INPUT_001", "a URL is required")
        response = await asyncio.to_thread(fetch, url, self.policy)
        charset = response.charset or "utf-8"
        try:
            text = response.body.decode(charset, errors="replace")
        except LookupError:
            text = response.body.decode("utf-8", errors="replace")
        data: Any = text
        if response.mime_type == "application/json" or response.mime_type.endswith("+json"):
            try:
                data = json.loads(text)
            except ValueError:
                data = text
        return {"url": response.url, "status": response.status, "headers": response.headers,
                "content_type": response.mime_type, "fetched_at": response.fetched_at, "data": data}

    async def load(self, url: str, options: LoadOptions | None = None) -> list[Document]:
        """The documents at ``url`` as the URL loader reads them (HTML main text, PDF pages, text, JSON)."""
        if not isinstance(url, str) or not url.strip():
            raise BlockInputError("INPUT_001", "a URL is required")
        return await asyncio.to_thread(load_url, url, options, policy=self.policy)


class BlockContext:
    """The ``ctx`` a block runs with: ``embedding``, ``vector``, ``llm`` and ``http``, all tenant-bound."""

    __slots__ = ("_execution", "embedding", "http", "llm", "vector")

    def __init__(self, execution: ExecutionContext) -> None:
        self._execution = execution
        self.embedding = EmbeddingService(execution)
        self.vector = VectorService(execution, self.embedding)
        self.llm = LLMService(execution)
        self.http = HttpService(execution)

    @property
    def step(self) -> str:
        """The id of the step being run."""
        return self._execution.step

    @property
    def workflow(self) -> str:
        """The name of the workflow being run."""
        return self._execution.workflow

    def usage_mark(self) -> int:
        """A mark of the step's usage so far, for :meth:`tokens_since`."""
        return self._execution.mark()

    def tokens_since(self, mark: int, operation: str = "embedding") -> int:
        """Input tokens the step's ``operation`` calls (``embedding``, ``llm``) used since ``mark``."""
        return self._execution.tokens_since(mark, operation)

    @property
    def settings(self) -> Any:
        """The engine's settings tree (read it; it is shared)."""
        return self._execution.engine.settings


__all__ = ["DEFAULT", "BlockContext", "EmbeddingService", "ExecutionContext", "HttpService", "LLMService",
           "StepRecorder", "VectorService", "aclose_clients", "context_from_messages"]
