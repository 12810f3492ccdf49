"""Request objects: what a search, an answer or a vector query asks for, written down once.

The Python API (``Tenant.search/ask/astream_ask/query``), ``RAGPipeline``, ``Retriever``,
the CLI and the HTTP API all pass these objects on instead of repeating their options
as keyword arguments; a new search or ranking option is a new field here, and every
layer that passes the request on carries it without change.

``Tenant.search("水", "docs", top_k=3)`` builds ``SearchRequest(query="水", collection="docs",
top_k=3)``; ``Tenant.search(SearchRequest(...))`` takes one as is. A request is checked
(:meth:`SearchRequest.check`) and its restriction built (:meth:`SearchRequest.resolved`)
before anything is embedded, so bad input fails early with a typed error. A search answers with a
:class:`SearchResponse`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, TypeVar

from .config import DEFAULT_COLLECTION
from .errors import RetrievalError, VectorStoreError
from .filters import Filter, FilterLike, as_filter, build_filter
from .types import SearchHit

SearchMode = Literal["vector", "keyword", "hybrid"]
MODES: tuple[str, ...] = ("vector", "keyword", "hybrid")
# Hybrid finds both what a question means and the exact words it names (measured in
# docs/ARCHITECTURE.md "Hybrid defaults"), so it is what every entry point does unless told otherwise.
DEFAULT_MODE: SearchMode = "hybrid"
MAX_TOP_K = 100

R = TypeVar("R", bound="SearchRequest")


def _check_top_k(top_k: Any) -> None:
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 1 <= top_k <= MAX_TOP_K:
        raise RetrievalError(f"top_k must be an integer from 1 to {MAX_TOP_K}; got {top_k!r}")


@dataclass(slots=True, kw_only=True)
class SearchRequest:
    """A search of one collection (R18–R22).

    * ``query``, ``collection``, ``top_k`` (1–100) and ``mode``: ``hybrid`` (the default: both legs,
      fused), ``vector`` (semantic only) or ``keyword`` (BM25 only).
    * The restriction (R21): ``document_ids``; ``filter`` (a metadata filter, see :mod:`bunko.filters`);
      the shortcuts ``file_types`` (``["pdf", "md"]``) and ``since``/``until`` on ``date_field``
      (default ``created_at``), ANDed with the filter; ``threshold``, the lowest cosine similarity
      a vector hit may have.
    * Ranking: ``fusion`` (``{"method", "vector_weight", "keyword_weight", "k", "floor"}``) tunes a hybrid
      search; ``mmr_lambda`` (0–1) diversifies by maximal marginal relevance; ``dedupe`` drops
      near-duplicate chunks; ``rerank`` (``"cohere:rerank-v3.5"``) reorders the candidates.
    """

    query: str
    collection: str = DEFAULT_COLLECTION
    top_k: int = 5
    mode: SearchMode = DEFAULT_MODE
    document_ids: Sequence[str] | None = None
    threshold: float | None = None
    filter: FilterLike = None
    file_types: Sequence[str] | None = None
    since: str | None = None
    until: str | None = None
    date_field: str | None = None
    fusion: Mapping[str, Any] | None = None
    mmr_lambda: float | None = None
    dedupe: bool = False
    rerank: str | None = None

    @classmethod
    def build(cls: type[R], query: str | R, collection: str | None = None, **options: Any) -> R:
        """The request for the keyword form of the API: ``query`` and options, or a request (options override)."""
        if isinstance(query, cls):
            if collection is not None:
                options["collection"] = collection
            return replace(query, **options) if options else query
        if isinstance(query, SearchRequest):
            raise TypeError(f"expected a {cls.__name__} or a query text, got a {type(query).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"{cls.__name__} has no option(s) {', '.join(unknown)}")
        return cls(query=query, collection=collection or DEFAULT_COLLECTION, **options)

    def check(self) -> None:
        """Refuse an empty query, an unknown mode, or ``top_k`` / ``mmr_lambda`` out of range."""
        if not isinstance(self.query, str) or not self.query.strip():
            raise RetrievalError("the query is empty")
        if self.mode not in MODES:
            raise RetrievalError(f"unknown search mode {self.mode!r}; use one of: {', '.join(MODES)}")
        _check_top_k(self.top_k)
        lam = self.mmr_lambda
        if lam is not None and (isinstance(lam, bool) or not isinstance(lam, int | float) or not 0 <= lam <= 1):
            raise RetrievalError(f"mmr_lambda must be a number from 0 to 1; got {lam!r}")

    def resolved(self: R) -> R:
        """This request checked, with the filter and the shortcuts built into one :class:`Filter` (or None)."""
        self.check()
        flt = build_filter(self.filter, file_types=self.file_types, since=self.since, until=self.until,
                           date_field=self.date_field)
        return replace(self, filter=flt, file_types=None, since=None, until=None, date_field=None)

    @property
    def restriction(self) -> Filter | None:
        """The metadata filter of a resolved request (the shortcuts are folded in by :meth:`resolved`)."""
        return as_filter(self.filter) if not isinstance(self.filter, Filter) else self.filter

    @property
    def ranked(self) -> bool:
        """Whether a stage after the search trims or reorders the hits (it then sees a wider pool)."""
        return self.mmr_lambda is not None or self.dedupe or self.rerank is not None


@dataclass(slots=True, kw_only=True)
class AskRequest(SearchRequest):
    """A question answered from a collection: the search, plus the conversation and the LLM's settings.

    ``query`` is the question. With ``conversation_id`` the conversation's last turns go to the
    LLM, a follow-up is searched together with the question before it, and the question and its
    answer are stored. ``temperature``, ``max_tokens`` and ``system_prompt`` override the engine's
    settings for this answer.
    """

    conversation_id: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    system_prompt: str | None = None

    @property
    def question(self) -> str:
        """The question (the ``query`` field)."""
        return self.query

    def search_for(self, query: str) -> SearchRequest:
        """The search this question runs, for ``query`` (the question, or the question with its context)."""
        values = {f.name: getattr(self, f.name) for f in fields(SearchRequest)}
        values["query"] = query
        return SearchRequest(**values)


@dataclass(slots=True, kw_only=True)
class QueryRequest:
    """A low-level query of a collection (R14): by a vector, or by a text the collection's embedder embeds.

    ``top_k`` (1–100), ``threshold`` (lowest cosine similarity), ``filter`` (metadata),
    ``document_ids`` and ``include_content`` (leave the text out of the hits).
    """

    collection: str = DEFAULT_COLLECTION
    vector: Sequence[float] | None = None
    text: str | None = None
    top_k: int = 5
    threshold: float | None = None
    filter: FilterLike = None
    document_ids: Sequence[str] | None = None
    include_content: bool = True

    def check(self) -> None:
        """Exactly one of ``vector`` and ``text``; ``top_k`` in range; a valid filter."""
        if (self.vector is None) == (self.text is None):
            raise VectorStoreError("query by a vector or by a text: give exactly one of vector= and text=")
        if self.text is not None and (not isinstance(self.text, str) or not self.text.strip()):
            raise RetrievalError("the query text is empty")
        _check_top_k(self.top_k)
        as_filter(self.filter)  # a malformed filter raises FilterError here


@dataclass(slots=True)
class SearchResponse:
    """Search hits and how long the search took."""

    results: list[SearchHit]
    search_time_ms: float
    filter: Filter | None = None  # the metadata filter applied (shortcuts included), if any

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict in the CLI's ``search --json`` shape."""
        data: dict[str, Any] = {"results": [h.to_dict() for h in self.results],
                                "search_time_ms": round(self.search_time_ms, 2)}
        if self.filter is not None:
            data["filter"] = self.filter.spec
        return data


__all__ = ["DEFAULT_MODE", "MODES", "AskRequest", "QueryRequest", "SearchMode", "SearchRequest", "SearchResponse"]
