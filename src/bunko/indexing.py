"""``IndexManager``: normalise → split → embed → store, one document at a time (R28).

A document's ``source`` is its stable key inside a collection. Indexing a source
whose content (and splitter and embedder) did not change is a no-op that embeds
nothing; changed content replaces the old chunks in one transaction, so a search
sees either the old version or the new one, never a mix.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from .analysis import detect_language, get_analyzer
from .embedders import BaseEmbedder, embedder_info, gather_or_cancel
from .errors import BunkoError, CollectionNotFoundError, ConfigError, EmbeddingError, PreprocessingError
from .preprocess import Preprocessor
from .splitters import DEFAULT_SPLITTER, Splitter, build_splitter
from .stores.base import ChunkWrite, DocumentWrite, VectorStore, check_analyzer
from .types import Collection, Document, IngestResult, TextChunk, UsageEvent, new_id
from .usage import route, store_kind

ProgressCallback = Callable[[int], None]
# Where a part lies in the normalised text: (start, end, its metadata, whether it is kept whole).
_Span = tuple[int, int, dict[str, Any], bool]


@dataclass(frozen=True, slots=True)
class StartedWrite:
    """Prepared documents whose write a store has started (``IndexManager.begin_write``)."""

    documents: list[DocumentWrite]
    pending: Any  # what the store's begin_write returned
    started: float


def _splitter_signature(splitter: Splitter) -> str:
    parts = [type(splitter).__name__]
    for attr in ("chunk_size", "chunk_overlap", "separators"):
        if hasattr(splitter, attr):
            parts.append(f"{attr}={getattr(splitter, attr)!r}")
    return ",".join(parts)


# A title longer than this is cut (a first "line" of a PDF may be a whole paragraph).
MAX_TITLE_CHARS = 200
# Titles that name a file, not the document: what PDF producers put in the metadata ("Microsoft Word -
# report.doc", "IBM-PDFs.graffle", "zen_of_python.txt").
_FILE_TITLE = re.compile(
    r"^(microsoft \w+ - .*|[^\s/\\]+\.(txt|pdf|docx?|rtf|odt|md|html?|tex|dvi|e?ps|ai|indd|qxd|pages|key|graffle"
    r"|pptx?|xlsx?|csv|png|jpe?g|tiff?|gif|svg|cdr|pub|sxw|wpd))$", re.IGNORECASE)


def document_title(metadata: dict[str, Any], text: str) -> str:
    """A document's title: its loader's ``title`` (PDF metadata, HTML ``<title>``, Markdown's first heading,
    DOCX core title or first heading), unless it only names a file; else its first line of text; else the
    file name without its suffix; one record of a JSON file has only its own ``title`` field. Kept in the
    document's metadata as ``title``: searches weigh matches in it (see :mod:`bunko.search.keyword`), and
    every hit of the document carries it."""
    given = metadata.get("title")
    if isinstance(given, str) and given.strip() and not _FILE_TITLE.match(given.strip()):
        return " ".join(given.split())[:MAX_TITLE_CHARS]
    if "json_index" in metadata:  # one record of a JSON file: a title only if the record has one (its name
        return ""  # in listings then tells it by its name or id field, not by its first line)
    for line in text.splitlines():
        line = " ".join(line.lstrip("#").split())
        if any(c.isalnum() for c in line):
            return line[:MAX_TITLE_CHARS]
    name = str(metadata.get("filename") or str(metadata.get("source") or "").rsplit("/", 1)[-1])
    return name.rsplit(".", 1)[0] if "." in name[1:] else name


class IndexManager:
    """Indexes documents into one collection of a tenant-bound store."""

    def __init__(
        self,
        preprocessor: Preprocessor,
        chunker: Splitter | None,
        embedder: Any,
        vector_store: VectorStore,
        collection: str = "default",
        *,
        splitter: dict[str, Any] | None = None,
        analyzer: str | None = None,
    ) -> None:
        """``chunker`` is used as given; without one, the collection's recorded splitter is.

        ``splitter`` (a spec from ``splitters.splitter_spec``) picks the splitter of a new
        collection; for an existing collection it must match what the collection records.
        ``analyzer`` (a name from ``bunko.analysis``) likewise picks the keyword analyzer of a
        new collection; naming another one for an existing collection raises
        ``AnalyzerMismatchError``.
        """
        self.preprocessor = preprocessor
        self.chunker = chunker
        self.embedder = embedder
        self.vector_store = vector_store
        self.collection = collection
        self.splitter = splitter
        self.analyzer = analyzer
        self._info_cache: Any = None
        self._ready = False
        self._gate: tuple[asyncio.AbstractEventLoop, asyncio.Semaphore] | None = None

    @property
    def _info(self) -> Any:
        # Checked on first use, not here: a hosted embedder may learn its dimension from its first answer,
        # and a pipeline built only to answer questions never needs it.
        if self._info_cache is None:
            self._info_cache = embedder_info(self.embedder)
        return self._info_cache

    async def _learn_dimension(self) -> None:
        if not int(getattr(self.embedder, "dimension", 0) or 0):
            await self.embedder.embed("dimension probe")

    def _ensure_collection(self) -> None:
        """Create the collection if needed and settle which splitter it uses."""
        spec = self.splitter or DEFAULT_SPLITTER
        collection = self.vector_store.ensure_collection(self.collection, self._info, config={"splitter": spec},
                                                         analyzer=self.analyzer)
        if self.chunker is None:
            stored = collection.config.get("splitter") or DEFAULT_SPLITTER
            if self.splitter is not None and self.splitter != stored:
                raise ConfigError(
                    f"collection {self.collection!r} splits documents with {stored}; it cannot switch to "
                    f"{self.splitter}. Use a new collection for another splitter"
                )
            self.chunker = build_splitter(stored, self.embedder)
        self._ready = True

    async def ensure_collection(self) -> Collection:
        """The collection, created for this manager's embedder (and splitter, analyzer) if it is missing."""
        if not self._ready:
            await self._learn_dimension()
            await asyncio.to_thread(self._ensure_collection)
        return await asyncio.to_thread(self.vector_store.get_collection, self.collection)

    def check_collection(self) -> None:
        """Fail early on an unknown analyzer, or a collection created with another analyzer or splitter."""
        get_analyzer(self.analyzer)
        try:
            collection = self.vector_store.get_collection(self.collection)
        except CollectionNotFoundError:
            return
        check_analyzer(collection, self.analyzer)
        stored = collection.config.get("splitter") or DEFAULT_SPLITTER
        if self.chunker is None and self.splitter is not None and self.splitter != stored:
            raise ConfigError(
                f"collection {self.collection!r} splits documents with {stored}; it cannot switch to "
                f"{self.splitter}. Use a new collection for another splitter"
            )

    def content_hash(self, normalized: str) -> str:
        """A key that changes when the text, the splitter or the embedder changes."""
        assert self.chunker is not None, "the splitter is settled when the collection is"
        h = hashlib.sha256()
        h.update(f"{self._info.provider}:{self._info.model}:{self._info.dimension}\n".encode())
        h.update(_splitter_signature(self.chunker).encode())
        h.update(b"\n")
        h.update(normalized.encode("utf-8"))
        return h.hexdigest()

    async def _vectors(self, texts: list[str]) -> Any:
        if isinstance(self.embedder, BaseEmbedder):
            return await self.embedder.embed_array(texts)
        return await self.embedder.embed_batch(texts)

    def _pieces(self, normalized: str, spans: list[_Span]) -> list[TextChunk]:
        """The splitter's chunks of the text; a ``whole`` part (table rows with their header) is a chunk
        of its own when the splitter keeps it in one, and the text between such parts is split as usual."""
        chunker = self.chunker
        assert chunker is not None
        if not any(whole for _, _, _, whole in spans):
            return chunker.split(normalized)
        pieces: list[TextChunk] = []

        def split(start: int, end: int) -> None:
            for piece in chunker.split(normalized[start:end]):
                pieces.append(TextChunk(piece.content, len(pieces), start + piece.start, start + piece.end))

        run_start: int | None = None
        for start, end, _, whole in spans:
            if not whole:
                run_start = start if run_start is None else run_start
                continue
            if run_start is not None:
                split(run_start, start)
                run_start = None
            split(start, end)  # one chunk when it fits; cut by the splitter only when it does not
        if run_start is not None:
            split(run_start, len(normalized))
        return pieces

    def _chunks(self, source: str, normalized: str, spans: list[_Span]) -> list[ChunkWrite]:
        """Split normalised text into chunk rows: offsets, token counts, part metadata and language."""
        pieces = self._pieces(normalized, spans)
        if not pieces:  # normalize() refuses empty text, so this means a splitter bug
            raise EmbeddingError(f"{source}: the splitter produced no chunks")
        # The bundled embedder keeps the ids a chunk's count makes for the chunk's embedding.
        counter = getattr(self.embedder, "count_chunk_tokens", None) or getattr(self.embedder, "count_tokens", None)
        return [
            ChunkWrite(
                id=new_id(),
                content=p.content,
                index=p.index,
                start=p.start,
                end=p.end,
                token_count=int(counter(p.content)) if counter else 0,
                # index, offsets and chunk_total live in columns; metadata holds only what is
                # specific to the chunk (section, page number, ...), which keeps bulk writes cheap.
                metadata={**_part_metadata(spans, p.start, p.end), "language": detect_language(p.content)},
            )
            for p in pieces
        ]

    async def prepare(
        self, document: Document, *, progress: ProgressCallback | None = None, embed: bool = True
    ) -> DocumentWrite | IngestResult:
        """Normalise, split and embed a document into a ``DocumentWrite`` ready to store.

        Returns an ``IngestResult`` with status ``unchanged`` instead when the stored
        version has the same content hash: nothing is embedded then. With ``embed=False``
        the vectors are left for :meth:`embed`, which batches several documents.
        ``progress`` is called with the number of chunks embedded so far, batch by batch.
        """
        started = time.perf_counter()
        # Normalising, splitting, token counting and language detection are CPU work: they run in a
        # thread, never on the event loop, so a large document does not stall a server's other requests.
        normalized, spans = await asyncio.to_thread(self.normalize, document)
        source = document.source
        if not self._ready:
            await self._learn_dimension()
            await asyncio.to_thread(self._ensure_collection)
        assert self.chunker is not None
        digest = self.content_hash(normalized)
        existing = await asyncio.to_thread(self.vector_store.find_by_source, self.collection, source)
        if existing is not None and existing.content_hash == digest:
            return IngestResult(existing.id, source, existing.chunks, "unchanged",
                                (time.perf_counter() - started) * 1000, version=existing.version)
        chunks = await asyncio.to_thread(self._chunks, source, normalized, spans)
        metadata = dict(document.metadata)
        metadata.setdefault("source", source)
        metadata.setdefault("char_count", len(normalized))
        title = document_title(metadata, normalized)
        if title:
            metadata["title"] = title
        write = DocumentWrite(document.id or new_id(), source, digest, metadata, chunks, None)
        if embed:
            await self.embed([write], progress=progress)
        return write

    @property
    def batch_size(self) -> int:
        """Texts per embedding request: the embedder's own batch size."""
        return max(1, int(getattr(self.embedder, "batch_size", 64) or 64))

    @property
    def concurrency(self) -> int:
        """Embedding requests this manager keeps in flight at most: the embedder's own concurrency."""
        return max(1, int(getattr(self.embedder, "concurrency", 1) or 1))

    def _embed_gate(self) -> asyncio.Semaphore:
        # One gate per manager (and event loop), shared by every ``embed`` call on it, so several
        # documents embedded at once still keep no more than ``concurrency`` requests in flight.
        loop = asyncio.get_running_loop()
        if self._gate is None or self._gate[0] is not loop:
            self._gate = (loop, asyncio.Semaphore(self.concurrency))
        return self._gate[1]

    async def stored_vectors(self, writes: list[DocumentWrite]) -> dict[str, np.ndarray]:
        """The vectors of stored chunks of the collection whose text equals a chunk of these writes, by text.

        A collection holds the vectors of one embedder (``EmbedderInfo``, R3) and a chunk's text is
        what was embedded, so a new chunk whose text equals a stored chunk's -- of the version it
        replaces, of another document, of an older upload -- can take that chunk's vector as it is.
        """
        texts = list(dict.fromkeys(c.content for w in writes for c in w.chunks))
        if not texts:
            return {}
        return await asyncio.to_thread(self.vector_store.stored_vectors, self.collection, texts)

    async def embed(self, writes: list[DocumentWrite], *, progress: ProgressCallback | None = None) -> None:
        """Embed the chunks of several documents together, filling each one's ``vectors``.

        A chunk whose text equals a chunk already stored in the collection (of the version its document
        replaces, or of any other document) takes that chunk's vector, and a text that several chunks of
        these writes share is embedded once, for the first: the others count as ``reused`` too, so
        ``embedded`` is the number of texts that went to the embedder.
        The other texts go out in requests of the embedder's ``batch_size``, up to its ``concurrency``
        at a time (counted over every ``embed`` call running on this manager). Batching across
        documents keeps the requests full when documents are small. ``progress`` is called with
        the number of chunks that have their vector so far (reused ones first), request by request.
        """
        if not any(w.chunks for w in writes):
            return
        known = await self.stored_vectors(writes)
        # Each text not stored yet is embedded once, for its first chunk; every other chunk is reused.
        first: dict[str, None] = {}
        reused = 0
        for write in writes:
            write.reused = 0
            for c in write.chunks:
                if c.content in known or c.content in first:
                    write.reused += 1
                else:
                    first[c.content] = None
            reused += write.reused
        missing = list(first)
        total = sum(len(w.chunks) for w in writes)
        if progress is not None and reused:
            progress(reused)
        if missing:
            counted = None if progress is None else (lambda done: progress(reused + round(
                done / len(missing) * (total - reused))))
            fresh = await self.embed_texts(missing, progress=counted)
            known = {**known, **dict(zip(missing, fresh, strict=True))}
        for write in writes:
            write.vectors = np.asarray([known[c.content] for c in write.chunks], dtype=np.float32)

    async def embed_texts(self, texts: list[str], *, progress: ProgressCallback | None = None) -> np.ndarray:
        """The vectors of ``texts`` (as documents), one row each, in requests of ``batch_size``.

        Up to ``concurrency`` requests are in flight, counted over every call on this manager.
        """
        size, gate = self.batch_size, self._embed_gate()
        done = 0

        async def one(start: int) -> np.ndarray:
            nonlocal done
            async with gate:
                vectors = np.asarray(await self._vectors(texts[start : start + size]), dtype=np.float32)
            done += min(size, len(texts) - start)
            if progress is not None:
                progress(done)
            return vectors

        return np.concatenate(await gather_or_cancel([one(start) for start in range(0, len(texts), size)]))

    def normalize(self, document: Document) -> tuple[str, list[_Span]]:
        """The normalised text, and where each part (page, section) lies in it.

        Parts are normalised one by one and joined by a blank line, so a chunk's offsets
        map back to the part it came from. Parts that are empty after normalisation are
        dropped; a document with no text left raises ``PreprocessingError``.
        """
        if not document.parts:
            return self.preprocessor.normalize(document.content), []
        pieces: list[str] = []
        spans: list[_Span] = []
        offset = 0
        for part in document.parts:
            try:
                text = self.preprocessor.normalize(part.text)
            except PreprocessingError:
                continue
            if pieces:
                offset += 2  # the "\n\n" joining parts
            spans.append((offset, offset + len(text), part.metadata, part.whole))
            pieces.append(text)
            offset += len(text)
        if not pieces:
            raise PreprocessingError(f"{document.source}: no text left after normalisation")
        return "\n\n".join(pieces), spans

    async def write(self, prepared: list[DocumentWrite]) -> list[IngestResult]:
        """Store prepared documents in one transaction: each is either fully stored or absent."""
        if not prepared:
            return []
        return await self.finish_write(await self.begin_write(prepared))

    async def begin_write(self, prepared: list[DocumentWrite]) -> StartedWrite:
        """Start writing prepared documents (``VectorStore.begin_write``: their keyword analysis begins);
        :meth:`finish_write` writes them in one transaction."""
        started = time.perf_counter()
        pending = await asyncio.to_thread(self.vector_store.begin_write, self.collection, prepared)
        return StartedWrite(prepared, pending, started)

    async def finish_write(self, write: StartedWrite) -> list[IngestResult]:
        """Write what :meth:`begin_write` started: each document is either fully stored or absent."""
        results = await asyncio.to_thread(self.vector_store.finish_write, write.pending)
        writes = {w.source: w for w in write.documents}
        for result in results:
            document = writes[result.source]
            if result.status != "unchanged":
                result.reused = document.reused
                result.embedded = len(document.chunks) - document.reused
        written = sum(r.chunks for r in results if r.status != "unchanged")
        route(UsageEvent("upsert", store_kind(self.vector_store),
                         latency_ms=(time.perf_counter() - write.started) * 1000, items=written,
                         metadata={"collection": self.collection, "documents": len(results)}))
        return results

    async def index_document(
        self, document: Document, *, progress: ProgressCallback | None = None
    ) -> IngestResult:
        """Index one document; returns whether it was created, replaced or unchanged."""
        started = time.perf_counter()
        prepared = await self.prepare(document, progress=progress)
        if isinstance(prepared, IngestResult):
            return prepared
        result = (await self.write([prepared]))[0]
        result.processing_time_ms = (time.perf_counter() - started) * 1000
        return result


def _part_metadata(spans: list[_Span], start: int, end: int) -> dict[str, Any]:
    """The metadata of the part a chunk starts in, plus ``page_end`` when it runs onto later pages
    (and ``row_end`` the last row of the table rows it runs onto)."""
    if not spans:
        return {}
    starts = [s for s, _, _, _ in spans]
    first = max(0, bisect_right(starts, start) - 1)
    last = max(0, bisect_right(starts, max(start, end - 1)) - 1)
    metadata = dict(spans[first][2])
    page, last_page = spans[first][2].get("page_number"), spans[last][2].get("page_number")
    if page is not None and last_page is not None and last_page != page:
        metadata["page_end"] = last_page
    last_row = spans[last][2].get("row_end")
    if last != first and "row_end" in metadata and last_row is not None and spans[last][2].get("sheet") == \
            metadata.get("sheet"):
        metadata["row_end"] = last_row
    return metadata


__all__ = ["BunkoError", "IndexManager"]
