"""The error hierarchy: one root, one family per seam.

Every error bunko raises on purpose derives from :class:`BunkoError`. Each carries
a stable ``code`` that the CLI prints in ``--json`` output and a later HTTP API
maps to a problem type. Lower-layer exceptions (sqlite3, numpy, OS errors) are
translated at the seam that sees them, with the original kept as ``__cause__``.
"""

from __future__ import annotations

from typing import Any


class BunkoError(Exception):
    """Base class of every error bunko raises on purpose; safe to show to a user."""

    code = "BUNKO_ERROR"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    @property
    def type_name(self) -> str:
        """The class name, used as the error ``type`` in JSON output."""
        return type(self).__name__


class ConfigError(BunkoError):
    """The configuration (database URL, provider name, option) is invalid."""

    code = "CONFIG_ERROR"


class MissingAPIKeyError(ConfigError):
    """A hosted provider needs an API key and none was given or found in its environment variable."""

    code = "MISSING_API_KEY"


class UnknownProviderError(ConfigError, KeyError):
    """No backend, embedder or generator is registered under that name."""

    code = "UNKNOWN_PROVIDER"

    def __str__(self) -> str:  # KeyError would quote the message
        return self.message


class LoaderError(BunkoError):
    """A source could not be read into a document."""

    code = "LOADER_ERROR"


class UnsupportedFormatError(LoaderError):
    """The file type has no loader."""

    code = "UNSUPPORTED_FORMAT"


class EncryptedDocumentError(LoaderError):
    """The file is encrypted and cannot be read without a password."""

    code = "ENCRYPTED_DOCUMENT"


class NoTextError(LoaderError):
    """The file has no extractable text (for example a scanned PDF; OCR is not enabled)."""

    code = "NO_TEXT"


class OCRUnavailableError(NoTextError):
    """A page or image has no text layer and OCR cannot run here: the message names what to install."""

    code = "OCR_UNAVAILABLE"


class OCRError(LoaderError):
    """OCR of a page without a text layer failed or went past its limits."""

    code = "OCR_ERROR"


class OCRTimeoutError(OCRError):
    """OCR of one page took longer than the per-page time limit."""

    code = "OCR_TIMEOUT"


class OCRPageLimitError(OCRError):
    """A document has more pages to OCR than the page limit."""

    code = "OCR_PAGE_LIMIT"


class CorruptDocumentError(LoaderError):
    """The file is damaged or not what its type claims, and no reader could recover it."""

    code = "CORRUPT_DOCUMENT"


class ArchiveTooLargeError(LoaderError):
    """A ZIP-based file (Word, PowerPoint, ...) unpacks to more than the size limit for one file (a zip bomb)."""

    code = "ARCHIVE_TOO_LARGE"


class GarbledTextError(LoaderError):
    """Text came out as mojibake (CID codes, replacement characters) from every extractor."""

    code = "GARBLED_TEXT"


class EncodingDetectionError(LoaderError):
    """The text encoding could not be determined."""

    code = "UNKNOWN_ENCODING"


class FetchError(LoaderError):
    """A URL could not be fetched (network, status, size or content type)."""

    code = "FETCH_ERROR"


class BlockedURLError(FetchError):
    """A URL was refused by the SSRF guard (private, loopback, link-local or metadata address)."""

    code = "BLOCKED_URL"


class PreprocessingError(BunkoError):
    """Text could not be normalised, or is empty after normalisation."""

    code = "PREPROCESSING_ERROR"


class SplitterError(BunkoError):
    """A splitter was configured wrongly (for example overlap >= chunk size)."""

    code = "SPLITTER_ERROR"


class ProviderFailure(Exception):
    """Mixin of errors that come from a hosted provider's API; carries what the API said.

    ``provider`` and ``model`` name the call, ``status`` is the HTTP status (``None`` for
    network errors and timeouts) and ``retry_after`` the wait the provider asked for, if any.
    Catch the marker subclasses (``RateLimited``, ``ProviderTimeout``, ``ProviderAuthFailed``)
    to handle one kind of failure across embedders, LLMs and rerankers.
    """

    provider: str = ""
    model: str = ""
    status: int | None = None
    retry_after: float | None = None


class RateLimited(ProviderFailure):
    """The provider refused the call for rate or quota reasons (HTTP 429) after every retry."""


class ProviderTimeout(ProviderFailure):
    """The provider did not answer within the timeout, on every try."""


class ProviderAuthFailed(ProviderFailure):
    """The provider rejected the API key (HTTP 401 or 403)."""


def _provider_errors(seam: type[BunkoError], name: str, api: str,
                     failures: str) -> tuple[type[Any], type[Any], type[Any], type[Any]]:
    """The four errors a hosted API of one seam raises: ``<name>ProviderError`` (a subclass of ``seam`` and of
    :class:`ProviderFailure`: ``failures``, e.g. "an HTTP error or a malformed body") and its rate-limit, timeout
    and auth subclasses, each also a subclass of its marker. Their codes are ``<API>_PROVIDER_ERROR``,
    ``<API>_RATE_LIMITED``, ``<API>_TIMEOUT`` and ``<API>_AUTH``."""
    prefix = api.upper()

    def error(suffix: str, bases: tuple[type, ...], code: str, doc: str) -> type[Any]:
        # Named and placed as if written out in this module, so that pickle and tracebacks find them.
        return type(name + suffix, bases, {"__module__": __name__, "__qualname__": name + suffix,
                                           "__doc__": doc, "code": f"{prefix}_{code}"})

    generic = error("ProviderError", (seam, ProviderFailure), "PROVIDER_ERROR",
                    f"A hosted {api} API failed: {failures}.")
    return (generic,
            error("RateLimitError", (generic, RateLimited), "RATE_LIMITED", f"The {api} API kept answering 429."),
            error("TimeoutError", (generic, ProviderTimeout), "TIMEOUT", f"The {api} API did not answer in time."),
            error("AuthError", (generic, ProviderAuthFailed), "AUTH", f"The {api} API rejected the API key."))


class EmbeddingError(BunkoError):
    """An embedder failed or was given invalid input (empty text or list)."""

    code = "EMBEDDING_ERROR"


EmbeddingProviderError, EmbeddingRateLimitError, EmbeddingTimeoutError, EmbeddingAuthError = _provider_errors(
    EmbeddingError, "Embedding", "embedding", "an HTTP error, a malformed body or a wrong dimension")


class VectorStoreError(BunkoError):
    """The store failed, or refused an operation (dimension mismatch, bad id)."""

    code = "VECTOR_STORE_ERROR"


class TransientStoreError(VectorStoreError):
    """The database failed for a moment and changed nothing: a serialization failure or a deadlock rolled the
    transaction back, the connection was lost, the server is restarting, the pool or the file lock was busy.
    The same operation may succeed when tried again (the stores decide which driver errors these are)."""

    code = "STORE_UNAVAILABLE"


class StorageFullError(VectorStoreError):
    """The disk under the store or the upload spool is full (SQLite's "database or disk is full", PostgreSQL's
    ``disk_full``, ``ENOSPC``): the write was refused whole and nothing of it was kept. Writing succeeds again
    once the operator frees or adds space; reads go on meanwhile."""

    code = "STORAGE_FULL"


class DimensionMismatchError(VectorStoreError):
    """A vector's dimension differs from its collection's fixed dimension."""

    code = "DIMENSION_MISMATCH"


class EmbedderMismatchError(VectorStoreError):
    """The embedder in use differs from the one a collection was built with."""

    code = "EMBEDDER_MISMATCH"


class AnalyzerMismatchError(VectorStoreError):
    """The keyword analyzer named differs from the one a collection was created with."""

    code = "ANALYZER_MISMATCH"


class PgvectorVersionError(VectorStoreError):
    """The PostgreSQL server's pgvector is older than the features bunko uses (``bunko db migrate`` refuses it)."""

    code = "PGVECTOR_TOO_OLD"


class NotFoundError(VectorStoreError):
    """A collection, document or chunk does not exist in this tenant."""

    code = "NOT_FOUND"


class TenantNotFoundError(NotFoundError):
    """No tenant of that name is registered (the operator's commands and the HTTP admin API)."""

    code = "TENANT_NOT_FOUND"


class CollectionNotFoundError(NotFoundError):
    """The collection does not exist in this tenant."""

    code = "COLLECTION_NOT_FOUND"


class UploadInProgressError(VectorStoreError):
    """A file of the same name is still being processed in the collection: its new version waits until it ends."""

    code = "UPLOAD_IN_PROGRESS"


class DocumentNotFoundError(NotFoundError):
    """The document does not exist in this tenant's collection."""

    code = "DOCUMENT_NOT_FOUND"


class RetrievalError(BunkoError):
    """A search failed (embedding the query, or reading the store)."""

    code = "RETRIEVAL_ERROR"


class RerankError(RetrievalError):
    """A reranker failed (hosted API or local model)."""

    code = "RERANK_ERROR"


RerankProviderError, RerankRateLimitError, RerankTimeoutError, RerankAuthError = _provider_errors(
    RerankError, "Rerank", "rerank", "an HTTP error or a malformed body")


class FilterProblem:
    """One bad part of a filter: where it is (``$and[1].year``) and what is wrong with it."""

    __slots__ = ("message", "path")

    def __init__(self, path: str, message: str) -> None:
        self.path = path
        self.message = message

    def __str__(self) -> str:
        return f"{self.path or '(filter)'}: {self.message}"

    def __repr__(self) -> str:
        return f"FilterProblem({self.path!r}, {self.message!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FilterProblem) and (self.path, self.message) == (other.path, other.message)

    def __hash__(self) -> int:
        return hash((self.path, self.message))

    def to_dict(self) -> dict[str, str]:
        """A JSON-ready dict."""
        return {"path": self.path, "message": self.message}


class FilterError(RetrievalError):
    """A metadata filter is malformed; ``problems`` lists every bad part with its path."""

    code = "INVALID_FILTER"

    def __init__(self, problems: list[FilterProblem]) -> None:
        self.problems = list(problems)
        super().__init__("invalid filter: " + "; ".join(str(p) for p in self.problems))


class GenerationError(BunkoError):
    """An answer could not be generated."""

    code = "GENERATION_ERROR"


LLMProviderError, LLMRateLimitError, LLMTimeoutError, LLMAuthError = _provider_errors(
    GenerationError, "LLM", "LLM", "an HTTP error, a malformed body or a broken stream")


class ArchiveError(BunkoError):
    """A tenant export cannot be read or imported: missing files, a checksum that does not match, a
    format this version does not know, or data that conflicts with what the target store holds."""

    code = "ARCHIVE_ERROR"


class QuotaExceededError(BunkoError):
    """A tenant's quota (set by the operator, ``bunko admin tenants set-quota``) refuses the work before it starts.

    ``quota`` names it (``documents``, ``chunks``, ``bytes``, ``upload_bytes_per_day``, ``requests_per_minute``),
    ``limit`` is its value and ``usage`` what the tenant holds or used (before the refused work). ``rate_like``:
    the refusal ends with time (uploads per day, requests per minute), not only by deleting data.
    """

    code = "QUOTA_EXCEEDED"

    def __init__(self, message: str, *, quota: str, limit: int, usage: int, rate_like: bool = False) -> None:
        super().__init__(message)
        self.quota = quota
        self.limit = limit
        self.usage = usage
        self.rate_like = rate_like


class InvalidMemoryError(BunkoError, ValueError):
    """An agent memory record or request is malformed (empty content, unknown memory type, bad user id)."""

    code = "INVALID_MEMORY"


class InvalidFieldError(BunkoError, ValueError):
    """A field of a record cannot be stored as given (a NUL character, which neither store keeps); ``field``
    is its path (``metadata.author``, ``content``)."""

    code = "VALIDATION_ERROR"

    def __init__(self, message: str, *, field: str) -> None:
        super().__init__(message)
        self.field = field


class InvalidMemoryFieldError(InvalidMemoryError, InvalidFieldError):
    """A field of an agent memory cannot be stored as given (see :class:`InvalidFieldError`)."""

    code = "VALIDATION_ERROR"


class ForbiddenError(BunkoError):
    """The caller may not touch this: a user's key writing or deleting records of another user's documents,
    or records another user created (tenant and admin keys may)."""

    code = "FORBIDDEN"


class RagSearchError(RetrievalError):
    """An agent memory search failed (the seed's ``RagSearchError``; see :mod:`bunko.memory`)."""

    code = "RAG_SEARCH_ERROR"


class RagCorpusNotFoundError(RagSearchError, NotFoundError):
    """The memory store searched does not exist in the tenant (the seed's ``RagCorpusNotFoundError``)."""

    code = "RAG_CORPUS_NOT_FOUND"


class RagSearchTimeoutError(RagSearchError):
    """A memory search did not finish within its time budget (the seed's ``RagSearchTimeoutError``)."""

    code = "RAG_SEARCH_TIMEOUT"


class RAGPipelineError(BunkoError):
    """A pipeline step failed; the step's own error is the ``__cause__``."""

    code = "RAG_PIPELINE_ERROR"


__all__ = [
    "AnalyzerMismatchError",
    "ArchiveError",
    "BlockedURLError",
    "BunkoError",
    "CollectionNotFoundError",
    "ConfigError",
    "CorruptDocumentError",
    "DimensionMismatchError",
    "DocumentNotFoundError",
    "EmbedderMismatchError",
    "EmbeddingAuthError",
    "EmbeddingError",
    "EmbeddingProviderError",
    "EmbeddingRateLimitError",
    "EmbeddingTimeoutError",
    "EncodingDetectionError",
    "EncryptedDocumentError",
    "FetchError",
    "FilterError",
    "FilterProblem",
    "ForbiddenError",
    "GarbledTextError",
    "GenerationError",
    "InvalidFieldError",
    "InvalidMemoryError",
    "InvalidMemoryFieldError",
    "LLMAuthError",
    "LLMProviderError",
    "LLMRateLimitError",
    "LLMTimeoutError",
    "LoaderError",
    "MissingAPIKeyError",
    "NoTextError",
    "NotFoundError",
    "OCRError",
    "OCRPageLimitError",
    "OCRTimeoutError",
    "OCRUnavailableError",
    "PreprocessingError",
    "ProviderAuthFailed",
    "ProviderFailure",
    "ProviderTimeout",
    "QuotaExceededError",
    "RAGPipelineError",
    "RagCorpusNotFoundError",
    "RagSearchError",
    "RagSearchTimeoutError",
    "RateLimited",
    "RerankAuthError",
    "RerankError",
    "RerankProviderError",
    "RerankRateLimitError",
    "RerankTimeoutError",
    "RetrievalError",
    "SplitterError",
    "StorageFullError",
    "TenantNotFoundError",
    "TransientStoreError",
    "UnknownProviderError",
    "UnsupportedFormatError",
    "UploadInProgressError",
    "VectorStoreError",
]
