"""Request and response bodies of the API, in seed 002's (camelCase) shapes."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Names the stores accept (collections, document and conversation ids); text without NUL characters.
NAME_PATTERN = r"^[\w][\w.\-]{0,99}$"
ID_PATTERN = r"^[\w][\w.:\-]{0,99}$"
CONVERSATION_PATTERN = r"^[\w][\w.:\-]{0,89}$"
USER_PATTERN = r"^[\w][\w.@\-]{0,99}$"
TEXT_PATTERN = r"^[^\x00]*$"

DocumentId = Annotated[str, Field(pattern=ID_PATTERN)]
FileType = Annotated[str, Field(min_length=1, max_length=20, pattern=r"^[\w.\-]+$")]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DateRange(_Model):
    start: str | None = Field(None, max_length=40, pattern=TEXT_PATTERN, description="ISO-8601 date (inclusive)")
    end: str | None = Field(None, max_length=40, pattern=TEXT_PATTERN, description="ISO-8601 date (inclusive)")
    field: str | None = Field(None, max_length=100, pattern=TEXT_PATTERN,
                              description="metadata date field (default created_at)")


class Restriction(_Model):
    """Where to search: documents, a metadata filter (see docs/FILTERS.md), file types, a date range."""

    documentIds: list[DocumentId] | None = Field(None, max_length=1000)
    filter: dict[str, Any] | None = Field(None, description="metadata filter: {\"year\": {\"$gte\": 2020}}")
    fileTypes: list[FileType] | None = Field(None, max_length=50)
    dateRange: DateRange | None = None


class SearchRequest(Restriction):
    query: str = Field(..., min_length=1, max_length=4000, pattern=TEXT_PATTERN)
    limit: int = Field(10, ge=1, le=100)
    threshold: float | None = Field(None, ge=-1.0, le=1.0, description="minimum cosine similarity (semantic)")
    collection: str = Field("default", pattern=NAME_PATTERN)


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
    mode: Literal["semantic", "keyword", "hybrid"] = "semantic"


class ChatRequest(_Model):
    message: str = Field(..., min_length=1, max_length=8000, pattern=TEXT_PATTERN)
    conversationId: str | None = Field(None, pattern=CONVERSATION_PATTERN)
    documentIds: list[DocumentId] | None = Field(None, max_length=1000)
    collection: str = Field("default", pattern=NAME_PATTERN)
    searchParams: SearchParams | None = None


class DocumentError(BaseModel):
    code: str
    message: str


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


class UploadResponse(BaseModel):
    documentId: str
    filename: str
    status: Literal["processing", "completed", "failed"]
    chunkCount: int
    processingTime: float | None = None
    error: DocumentError | None = None


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


class UsageResponse(BaseModel):
    tenant: str
    usage: list[dict[str, Any]]


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
