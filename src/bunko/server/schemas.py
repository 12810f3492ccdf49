"""Request and response bodies of the API, in seed 002's (camelCase) shapes.

Request bodies turn into the engine's request objects (:mod:`bunko.requests`) with
``to_request()``; the engine checks them as it checks a Python caller's.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from .. import requests
from ..errors import FilterError, FilterProblem
from ..types import UNSTORABLE, unstorable_path

# Names the stores accept (collections, document and conversation ids); text without NUL characters.
NAME_PATTERN = r"^[\w][\w.\-]{0,99}$"
ID_PATTERN = r"^[\w][\w.:\-]{0,99}$"
CONVERSATION_PATTERN = r"^[\w][\w.:\-]{0,89}$"
USER_PATTERN = r"^[\w][\w.@\-]{0,99}$"
TEXT_PATTERN = r"^[^\x00]*$"

DocumentId = Annotated[str, Field(pattern=ID_PATTERN)]
FiniteFloat = Annotated[float, Field(allow_inf_nan=False)]
MAX_DIMENSION = 16_384
FileType = Annotated[str, Field(min_length=1, max_length=20, pattern=r"^[\w.\-]+$")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DateRange(_Model):
    start: str | None = Field(None, max_length=40, pattern=TEXT_PATTERN, description="ISO-8601 date (inclusive)")
    end: str | None = Field(None, max_length=40, pattern=TEXT_PATTERN, description="ISO-8601 date (inclusive)")
    field: str | None = Field(None, max_length=100, pattern=TEXT_PATTERN,
                              description="metadata date field (default created_at)")


def checked_filter(spec: dict[str, Any] | None) -> None:
    """Refuse a metadata filter with NUL characters (no store can hold them) as a ``FilterError``."""
    where = None if spec is None else unstorable_path(spec)
    if where is not None:
        raise FilterError([FilterProblem(where, UNSTORABLE)])


class Restriction(_Model):
    """Where to search: documents, a metadata filter (see docs/FILTERS.md), file types, a date range."""

    documentIds: list[DocumentId] | None = Field(None, max_length=1000)
    filter: dict[str, Any] | None = Field(None, description="metadata filter: {\"year\": {\"$gte\": 2020}}")
    fileTypes: list[FileType] | None = Field(None, max_length=50)
    dateRange: DateRange | None = None
    diversityLambda: float | None = Field(None, ge=0, le=1, description="MMR diversity (seed 002: 0.5): 1 ranks by "
                                          "relevance only, 0 by diversity only; default: off")

    def options(self) -> dict[str, Any]:
        """The restriction and ranking as options of :class:`bunko.requests.SearchRequest`."""
        checked_filter(self.filter)
        since = until = date_field = None
        if self.dateRange is not None:
            since, until, date_field = self.dateRange.start, self.dateRange.end, self.dateRange.field
        return {"document_ids": self.documentIds, "filter": self.filter, "file_types": self.fileTypes,
                "since": since, "until": until, "date_field": date_field, "mmr_lambda": self.diversityLambda}


# The API's names of the search modes (seed 002) and the engine's.
MODES: dict[str, requests.SearchMode] = {"semantic": "vector", "keyword": "keyword", "hybrid": "hybrid"}


class SearchRequest(Restriction):
    query: str = Field(..., min_length=1, max_length=4000, pattern=TEXT_PATTERN)
    limit: int = Field(10, ge=1, le=100)
    threshold: float | None = Field(None, ge=-1.0, le=1.0, description="minimum cosine similarity (semantic)")
    collection: str = Field("default", pattern=NAME_PATTERN)

    def to_request(self, kind: str) -> requests.SearchRequest:
        """The engine's search request, in mode ``kind`` (semantic, keyword, hybrid)."""
        return requests.SearchRequest(query=self.query, collection=self.collection, top_k=self.limit,
                                      mode=MODES[kind], threshold=self.threshold, **self.options())


class SearchResult(BaseModel):
    id: str
    documentId: str
    documentName: str
    content: str
    score: float
    chunkIndex: int
    section: str | None = None
    pageNumber: int | None = None
    metadata: dict[str, Any]


class SearchResponse(BaseModel):
    results: list[SearchResult]
    totalMatches: int
    searchTime: float = Field(description="milliseconds")
    searchType: Literal["semantic", "keyword", "hybrid"]


class SearchParams(Restriction):
    topK: int = Field(5, ge=1, le=50)
    mode: Literal["semantic", "keyword", "hybrid"] = Field(
        "hybrid", description="hybrid (the default: semantic and keyword results fused), semantic or keyword")


class ChatRequest(_Model):
    message: str = Field(..., min_length=1, max_length=8000, pattern=TEXT_PATTERN)
    conversationId: str | None = Field(None, pattern=CONVERSATION_PATTERN)
    documentIds: list[DocumentId] | None = Field(None, max_length=1000)
    collection: str = Field("default", pattern=NAME_PATTERN)
    searchParams: SearchParams | None = None

    def to_request(self) -> requests.AskRequest:
        """The engine's question; ``documentIds`` here wins over the one in ``searchParams``."""
        params = self.searchParams or SearchParams()
        options = params.options()
        if self.documentIds is not None:
            options["document_ids"] = self.documentIds
        return requests.AskRequest(query=self.message, collection=self.collection, top_k=params.topK,
                                   mode=MODES[params.mode], conversation_id=self.conversationId, **options)


class VectorRecord(_Model):
    """A record to upsert (R14): its own vector, or content the collection's embedder embeds."""

    id: str | None = Field(None, pattern=ID_PATTERN, description="generated when missing; an existing id is updated")
    content: str = Field("", max_length=100_000, pattern=TEXT_PATTERN)
    metadata: dict[str, Any] = Field(default_factory=dict)
    vector: list[FiniteFloat] | None = Field(None, min_length=1, max_length=MAX_DIMENSION)
    documentId: DocumentId | None = Field(None, description="attach the record to a stored document")

    @model_validator(mode="after")
    def _something_to_store(self) -> VectorRecord:
        if self.vector is None and not self.content.strip():
            raise ValueError("give a vector, or content to embed")
        where = unstorable_path(self.metadata, "metadata")
        if where is not None:
            raise ValueError(f"{where}: {UNSTORABLE}")
        return self

    def to_record(self) -> dict[str, Any]:
        """The record as ``Tenant.upsert`` takes it."""
        return {"id": self.id, "content": self.content, "metadata": self.metadata, "vector": self.vector,
                "document_id": self.documentId}


class UpsertRequest(_Model):
    records: list[VectorRecord] = Field(..., min_length=1, max_length=1000)


class UpsertResponse(BaseModel):
    collection: str
    ids: list[str]
    upserted: int


class VectorQuery(_Model):
    """A query by ``vector`` or by ``text`` (embedded by the collection's embedder); give exactly one."""

    vector: list[FiniteFloat] | None = Field(None, min_length=1, max_length=MAX_DIMENSION)
    text: str | None = Field(None, min_length=1, max_length=4000, pattern=TEXT_PATTERN)
    topK: int = Field(5, ge=1, le=100)
    threshold: float | None = Field(None, ge=-1.0, le=1.0, description="minimum cosine similarity")
    filter: dict[str, Any] | None = Field(None, description="metadata filter: {\"year\": {\"$gte\": 2020}}")
    documentIds: list[DocumentId] | None = Field(None, max_length=1000)
    includeContent: bool = True

    @model_validator(mode="after")
    def _one_of_vector_and_text(self) -> VectorQuery:
        if (self.vector is None) == (self.text is None):
            raise ValueError("give exactly one of vector and text")
        return self

    def to_request(self, collection: str) -> requests.QueryRequest:
        """The engine's query of ``collection``."""
        checked_filter(self.filter)
        return requests.QueryRequest(collection=collection, vector=self.vector, text=self.text, top_k=self.topK,
                                     threshold=self.threshold, filter=self.filter, document_ids=self.documentIds,
                                     include_content=self.includeContent)


class QueryResult(BaseModel):
    id: str
    score: float
    documentId: str | None = None
    content: str | None = None
    metadata: dict[str, Any]


class QueryResponse(BaseModel):
    results: list[QueryResult]
    totalMatches: int
    searchTime: float = Field(description="milliseconds")


class DocumentError(BaseModel):
    code: str
    message: str


_EMBEDDED = "chunks of the upload that were embedded (once its processing completed)"
_REUSED = ("chunks of the upload that took the vector of the same chunk of the version it replaced, instead of "
           "being embedded again (once its processing completed)")


class DocumentInfo(BaseModel):
    id: str
    filename: str
    fileSize: int
    chunkCount: int
    uploadedAt: str
    status: Literal["processing", "completed", "failed"]
    collection: str
    processingTime: float | None = None
    error: DocumentError | None = None
    metadata: dict[str, Any]
    version: int | None = Field(None, description="the stored version (1, then one more per changed re-upload); "
                                "none while the first version is processing")
    embeddedChunks: int | None = Field(None, description=_EMBEDDED)
    reusedChunks: int | None = Field(None, description=_REUSED)


class UploadResponse(BaseModel):
    documentId: str
    filename: str
    status: Literal["processing", "completed", "failed"]
    chunkCount: int
    processingTime: float | None = None
    error: DocumentError | None = None
    embeddedChunks: int | None = Field(None, description=_EMBEDDED)
    reusedChunks: int | None = Field(None, description=_REUSED)


class DocumentList(BaseModel):
    documents: list[DocumentInfo]
    totalCount: int
    totalSize: int


class Deleted(BaseModel):
    deleted: bool
    id: str


class Erasure(BaseModel):
    deleted: dict[str, int]


class CollectionInfo(BaseModel):
    name: str
    description: str
    documentCount: int
    chunkCount: int
    embedding: dict[str, Any]
    createdAt: str


class CollectionList(BaseModel):
    collections: list[CollectionInfo]


class QuotaFigure(BaseModel):
    limit: int | None = Field(description="the operator's limit; null: no limit")
    usage: int = Field(description="what the tenant holds now (documents, chunks, bytes), uploaded in the last "
                                   "24 hours (upload_bytes_per_day) or requested this minute (requests_per_minute)")


# The quotas' names in the API's camelCase (bunko.stores.quotas.QUOTA_NAMES in the same order).
QUOTA_FIELDS = {"documents": "documents", "chunks": "chunks", "bytes": "bytes",
                "uploadBytesPerDay": "upload_bytes_per_day", "requestsPerMinute": "requests_per_minute"}
_BIG = 2**63 - 1


class QuotaLimits(_Model):
    """A tenant's quotas (null or absent: no limit). ``PUT`` replaces them all; ``PATCH`` changes the fields
    it names (null: no limit)."""

    documents: int | None = Field(None, ge=0, le=_BIG, description="documents the tenant may hold")
    chunks: int | None = Field(None, ge=0, le=_BIG, description="chunks (records) it may hold, uploads and upserts")
    bytes: int | None = Field(None, ge=0, le=_BIG, description="bytes of chunk text (UTF-8) it may hold")
    uploadBytesPerDay: int | None = Field(None, ge=0, le=_BIG,
                                          description="bytes of files it may upload over HTTP in 24 hours")
    requestsPerMinute: int | None = Field(None, ge=0, le=2**31 - 1,
                                          description="HTTP requests per minute over all of its keys")

    def limits(self) -> dict[str, int | None]:
        """The limits by the store's quota names."""
        return {name: getattr(self, field) for field, name in QUOTA_FIELDS.items()}

    def named(self) -> set[str]:
        """The store's names of the fields the request gave (null ones included)."""
        return {QUOTA_FIELDS[field] for field in self.model_fields_set}

    @classmethod
    def of(cls, limits: dict[str, int | None]) -> QuotaLimits:
        """The API form of a quota (``Quota.to_dict()``)."""
        return cls(**{field: limits.get(name) for field, name in QUOTA_FIELDS.items()})


class TenantQuotaResponse(BaseModel):
    tenant: str
    quota: QuotaLimits = Field(description="the limits in force, in the shape PUT takes")
    quotas: dict[str, QuotaFigure] = Field(description="each quota beside the tenant's usage (as GET /usage shows it)")


class OperatorTenant(BaseModel):
    name: str
    createdAt: str
    quota: QuotaLimits


class OperatorTenantList(BaseModel):
    tenants: list[OperatorTenant]


class UsageResponse(BaseModel):
    tenant: str
    usage: list[dict[str, Any]]
    quotas: dict[str, QuotaFigure] = Field(default_factory=dict,
                                           description="each quota beside its usage (bunko admin tenants set-quota)")


class SearchLogEntry(BaseModel):
    query: str | None
    resultCount: int
    searchTime: float
    searchType: str
    createdAt: str


class SearchLogResponse(BaseModel):
    logs: list[SearchLogEntry]


class Turn(BaseModel):
    role: str
    content: str
    metadata: dict[str, Any]
    createdAt: str | None = None


class ConversationResponse(BaseModel):
    conversationId: str
    turns: list[Turn]


class Health(BaseModel):
    status: str
    store: str | None = None


class ProblemDocument(BaseModel):
    type: str
    title: str
    status: int
    detail: str
    code: str
