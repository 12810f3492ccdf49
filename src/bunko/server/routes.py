"""The endpoints of seed 002 (R29): documents, search, RAG chat, collections, usage, logs, erasure.

Every route works through the caller's tenant scope (``caller.scope``: the key's tenant, scoped to its
user with ``Tenant.for_user``) and the upload jobs it hands out (``scope.jobs``); no route touches a store.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
import re
import time
from collections.abc import AsyncIterator
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, File, Form, Query, Request, UploadFile
from fastapi import Path as PathParam
from fastapi.responses import Response, StreamingResponse

from ..engine import Tenant
from ..errors import (
    ArchiveTooLargeError,
    BunkoError,
    CollectionNotFoundError,
    DocumentNotFoundError,
    LoaderError,
    StorageFullError,
)
from ..jobs import TenantJobs
from ..loaders import check_archive, detect_kind, mime_type, sniff, supported_suffixes
from ..loaders.pdf import unlock_pdf
from ..stores.service import Job
from ..types import UNSTORABLE, new_id, unstorable_path
from ..types import DocumentInfo as StoredDocument
from . import schemas
from .auth import Caller, CallerDep
from .problems import Problem, problem_event, status_of_code

logger = logging.getLogger(__name__)
router = APIRouter(prefix="/api/v1")
NameParam = Annotated[str, PathParam(pattern=schemas.NAME_PATTERN)]
IdParam = Annotated[str, PathParam(pattern=schemas.ID_PATTERN)]
PROBLEM_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": schemas.ProblemDocument, "content": {"application/problem+json": {}}}
    for code in (401, 403, 404, 409, 422, 429)
}
_UNSAFE_NAME = re.compile(r"[\x00-\x1f/\\]+")
# How often ``?wait=true`` looks at its job's state while a worker processes it (at first, and at most).
_WAIT_POLL_SECONDS = 0.2
_WAIT_POLL_MAX_SECONDS = 1.0


def _state(request: Request) -> Any:
    return request.app.state.bunko


# -- documents ------------------------------------------------------------------------------
def _reuse(job: Job) -> dict[str, int | None]:
    """How a completed job's chunks got their vectors (nothing to say before it completes)."""
    done = job.status == "completed"
    return {"embeddedChunks": job.embedded_chunks if done else None,
            "reusedChunks": job.reused_chunks if done else None}


def _job_info(job: Job) -> schemas.DocumentInfo:
    error = schemas.DocumentError(code=job.error_code or "ERROR", message=job.error or "") if job.error else None
    return schemas.DocumentInfo(id=job.id, filename=job.filename, fileSize=job.file_size, chunkCount=job.chunk_count,
                                uploadedAt=job.created_at, status=job.status,
                                collection=job.collection, processingTime=job.processing_time_ms, error=error,
                                metadata=job.metadata, **_reuse(job))


def _stored_info(document: StoredDocument, collection: str) -> schemas.DocumentInfo:
    meta = document.metadata
    return schemas.DocumentInfo(id=document.id, filename=str(meta.get("filename") or document.source),
                                fileSize=int(meta.get("filesize") or 0), chunkCount=document.chunks,
                                uploadedAt=document.created_at, status="completed", collection=collection,
                                metadata=meta, version=document.version)


def _safe_filename(name: str | None) -> str:
    base = _UNSAFE_NAME.sub("_", (name or "").replace("\\", "/").rsplit("/", 1)[-1]).strip(" .")
    return base[:200] or "upload"


def _form_metadata(metadata: str | None, tags: str | None, category: str | None,
                   description: str | None) -> dict[str, Any]:
    """The seed's ``metadata`` (a JSON object field) or the separate ``tags``/``category``/``description``."""
    out: dict[str, Any] = {}
    if metadata:
        try:
            given = json.loads(metadata)
        except json.JSONDecodeError as exc:
            raise Problem(422, "VALIDATION_ERROR", f"metadata: not valid JSON ({exc.msg})") from None
        if not isinstance(given, dict):
            raise Problem(422, "VALIDATION_ERROR", "metadata: must be a JSON object")
        for key in ("tags", "category", "description"):
            if key in given:
                out[key] = given[key]
    if tags:
        if tags.lstrip().startswith("["):
            try:
                out["tags"] = json.loads(tags)
            except json.JSONDecodeError:
                raise Problem(422, "VALIDATION_ERROR", "tags: a JSON list or comma-separated words") from None
        else:
            out["tags"] = [t.strip() for t in tags.split(",") if t.strip()]
    if category:
        out["category"] = category
    if description:
        out["description"] = description
    if "tags" in out and (not isinstance(out["tags"], list) or not all(isinstance(t, str) for t in out["tags"])):
        raise Problem(422, "VALIDATION_ERROR", "tags: must be a list of strings")
    for key in ("category", "description"):
        if key in out and not isinstance(out[key], str):
            raise Problem(422, "VALIDATION_ERROR", f"{key}: must be a string")
    where = unstorable_path(out)
    if where is not None:
        raise Problem(422, "VALIDATION_ERROR", f"{where}: {UNSTORABLE}",
                      extra={"field": where.split("[", 1)[0].split(".", 1)[0]})
    return out


@router.post("/documents/upload", status_code=202, response_model=schemas.UploadResponse,
             responses={**PROBLEM_RESPONSES, 413: PROBLEM_RESPONSES[422], 415: PROBLEM_RESPONSES[422],
                        200: {"model": schemas.UploadResponse,
                              "description": "``?wait=true``: the document was processed (status completed)"},
                        202: {"model": schemas.UploadResponse,
                              "description": "Queued for a worker, or ``?wait=true`` ran out of time (status "
                                             "processing); ``Location`` is the document to look at"}},
             summary="Upload a document; it is processed as a job")
async def upload_document(
    request: Request,
    response: Response,
    caller: CallerDep,
    file: Annotated[UploadFile, File(description="PDF, text, Markdown, HTML, JSON, Word or PowerPoint")],
    metadata: Annotated[str | None, Form(description='JSON: {"tags": [...], "category": "...", '
                                                     '"description": "..."}', max_length=100_000)] = None,
    tags: Annotated[str | None, Form(description="comma-separated, or a JSON list", max_length=10_000)] = None,
    category: Annotated[str | None, Form(max_length=1000)] = None,
    description: Annotated[str | None, Form(max_length=10_000)] = None,
    collection: Annotated[str, Form(pattern=schemas.NAME_PATTERN)] = "default",
    password: Annotated[str, Form(description="the password of an encrypted PDF; used once while the upload is "
                                              "received, never stored", max_length=1024,
                                  json_schema_extra={"format": "password"})] = "",
    wait: Annotated[bool, Query(description="answer when processing has ended: 200 with the result, the "
                                            "job's error as a problem (e.g. 422), or 202 when "
                                            "[server] upload_wait_seconds ran out first")] = False,
) -> schemas.UploadResponse:
    """Store the file, queue it for a worker, and answer ``processing`` (202) with the document id at once.

    The file name is the document's key in its collection: uploading a file with the same name
    again makes a new version of the same document (same id; unchanged content is not re-embedded).

    ``password`` opens an encrypted PDF: the API decrypts the upload with it before queueing it (a
    wrong password is refused at once, 422 ``ENCRYPTED_DOCUMENT``), so the password is never stored
    and never reaches a worker. An encrypted PDF uploaded without it fails with that code.

    With ``?wait=true`` the answer waits for the job, at most ``[server] upload_wait_seconds``: 200
    and the result when it completed, its error as a problem with the error's status when it failed
    (422 for a file that cannot be read, ...), and 202 as without waiting when the time ran out --
    also when no worker runs to take the job (``job_workers = 0`` and no ``bunko worker``).
    """
    state = _state(request)
    jobs = caller.scope.jobs
    extra = _form_metadata(metadata, tags, category, description)
    filename = _safe_filename(file.filename)
    job_id, previous = await _upload_target(jobs, caller, collection, filename)
    folder = jobs.staging()  # this request's own: another upload of the same document may arrive at once
    path = folder / filename
    size = await _spool(file, path, state.settings.max_upload_bytes)
    try:
        await asyncio.to_thread(jobs.check_upload, size)  # quotas: refused before the job is queued
        kind = await asyncio.to_thread(_kind, path, state.settings.max_upload_bytes)
        if password:
            if kind != "pdf":
                raise Problem(422, "VALIDATION_ERROR", "password: only encrypted PDF files take a password",
                              extra={"field": "password"})
            await asyncio.to_thread(unlock_pdf, path, password)
    except BaseException:
        await asyncio.to_thread(_remove, folder)
        raise
    # Waiting for a worker (no lease yet); bunko.server.worker claims it.
    job = Job(job_id, collection, filename, size, mime_type(kind), caller.user_id, metadata=extra,
              lease_until=0.0, max_attempts=state.settings.job_attempts)
    try:  # the job of the earlier version, if any, gives way to this one; 409 if another arrived first
        await asyncio.to_thread(partial(jobs.create, job, replace=previous is not None, staged=folder))
    except BaseException:
        await asyncio.to_thread(_remove, folder)
        raise
    if wait:
        job = await _wait_for_job(request, jobs, job, state.settings.upload_wait_seconds)
    error = schemas.DocumentError(code=job.error_code or "ERROR", message=job.error or "") if job.error else None
    if job.status == "failed":
        raise Problem(status_of_code(job.error_code), job.error_code or "ERROR", job.error or "processing failed",
                      extra={"documentId": job.id, "filename": job.filename})
    if job.status == "completed":
        response.status_code = 200
    else:
        response.headers["Location"] = f"{request.scope.get('root_path', '')}{router.prefix}/documents/{job.id}"
    return schemas.UploadResponse(documentId=job.id, filename=job.filename, status=job.status,
                                  chunkCount=job.chunk_count, processingTime=job.processing_time_ms, error=error,
                                  **_reuse(job))


async def _wait_for_job(request: Request, jobs: TenantJobs, job: Job, limit: float) -> Job:
    """The job once a worker has ended it, or as it is when ``limit`` seconds have passed (or the client left).

    Polls the store (every 0.2 s at first, then up to every second): the worker may be another
    process or machine. A job deleted meanwhile is 404.
    """
    deadline = time.monotonic() + limit
    pause = _WAIT_POLL_SECONDS
    timed_out = False
    while job.status == "processing":
        remaining = deadline - time.monotonic()
        timed_out = remaining <= 0
        if timed_out or await request.is_disconnected():
            break
        await asyncio.sleep(min(pause, remaining))
        pause = min(pause * 1.5, _WAIT_POLL_MAX_SECONDS)
        try:
            job = await asyncio.to_thread(jobs.get, job.id)
        except DocumentNotFoundError:
            raise Problem(404, "DOCUMENT_NOT_FOUND", f"document {job.id} was deleted while it was processed") from None
    if timed_out and job.attempts == 0:
        logger.warning("upload %s: no worker took it within %.0f s; are upload workers running "
                       "([server] job_workers, or bunko worker)?", job.id, limit)
    return job


async def _upload_target(jobs: TenantJobs, caller: Caller, collection: str, filename: str) -> tuple[str, Job | None]:
    """The id of the upload's document, and the job of its earlier version if there is one.

    A document stored under this file name in the collection keeps its id (a new version);
    otherwise the id is new. Refused: a file of that name still being processed (409), and a
    user key replacing another user's document (403, as for deleting it).
    """
    target = await asyncio.to_thread(jobs.upload_target, collection, filename)
    busy = target.busy
    if busy is not None:
        raise Problem(409, "UPLOAD_IN_PROGRESS", f"{filename!r} is still being processed in collection "
                      f"{collection!r} (document {busy.id}); upload the new version when it has finished")
    if target.document_id is None:
        return new_id(), None
    previous = target.previous
    if not caller.may_manage(previous.user_id if previous is not None else None):
        raise Problem(403, "FORBIDDEN", "this key may replace only the documents its user uploaded")
    return target.document_id, previous


async def _spool(file: UploadFile, path: Path, limit: int) -> int:
    """Copy the upload into the spool folder, refusing it once it passes ``limit`` bytes."""
    size = 0
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb") as out:
            while chunk := await file.read(1 << 20):
                size += len(chunk)
                if size > limit:
                    raise Problem(413, "PAYLOAD_TOO_LARGE", f"the file is larger than {limit // (1024 * 1024)} MiB")
                out.write(chunk)
    except OSError as exc:
        _remove(path.parent)
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise StorageFullError("the disk of the upload spool is full; nothing was queued, "
                                   "try again once the operator has freed space") from None
        raise
    except BaseException:
        _remove(path.parent)
        raise
    if size == 0:
        _remove(path.parent)
        raise Problem(422, "EMPTY_FILE", "the uploaded file is empty")
    return size


def _kind(path: Path, limit: int) -> str:
    """The file's kind, or 415 for a type bunko does not read (413 for an archive unpacking past ``limit``)."""
    try:
        kind = detect_kind(path)
        if kind in ("docx", "pptx"):  # the sizes a ZIP declares, at once; the job unpacks and counts again
            check_archive(path, limit, name=path.name, stream=False)
        return kind
    except ArchiveTooLargeError as exc:
        raise Problem(413, exc.code, exc.message) from None
    except LoaderError as exc:
        if sniff(path) is None and path.suffix.lower() not in supported_suffixes():
            raise Problem(415, "UNSUPPORTED_FORMAT", f"{path.name}: unsupported file type; supported: "
                          f"{', '.join(supported_suffixes())}") from None
        raise Problem(415 if exc.code == "UNSUPPORTED_FORMAT" else 422, exc.code,
                      exc.message.replace(str(path), path.name)) from None


def _remove(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


@router.get("/documents/{document_id}", response_model=schemas.DocumentInfo, responses=PROBLEM_RESPONSES,
            summary="A document and its processing status")
async def get_document(caller: CallerDep, document_id: IdParam) -> schemas.DocumentInfo:
    """``processing``, ``completed``, or ``failed`` with the reason."""
    scope = caller.scope
    try:
        return _job_info(await asyncio.to_thread(scope.jobs.get, document_id))
    except DocumentNotFoundError:
        pass
    document = await asyncio.to_thread(scope.document, document_id)  # raises 404 when missing
    collection = await _collection_of(scope, document_id)
    return _stored_info(document, collection)


async def _collection_of(scope: Tenant, document_id: str) -> str:
    for collection in await asyncio.to_thread(scope.collections):
        try:
            await asyncio.to_thread(scope.document, document_id, collection.name)
            return collection.name
        except DocumentNotFoundError:
            continue
    return ""


@router.get("/documents", response_model=schemas.DocumentList, responses=PROBLEM_RESPONSES,
            summary="This tenant's documents, newest first")
async def list_documents(
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    collection: Annotated[str | None, Query(pattern=schemas.NAME_PATTERN)] = None,
    status: Annotated[str | None, Query(pattern="^(processing|completed|failed)$")] = None,
) -> schemas.DocumentList:
    """Uploads (with their status) and documents ingested otherwise (CLI), with paging."""
    scope = caller.scope

    def gather() -> list[schemas.DocumentInfo]:
        items = [_job_info(j) for j in scope.jobs.list()]
        known = {item.id: item for item in items}
        for c in scope.collections():
            for document in scope.documents(c.name):
                if document.id in known:
                    known[document.id].version = document.version
                else:
                    items.append(_stored_info(document, c.name))
        return items

    items = await asyncio.to_thread(gather)
    if collection is not None:
        items = [d for d in items if d.collection == collection]
    if status is not None:
        items = [d for d in items if d.status == status]
    items.sort(key=lambda d: d.uploadedAt, reverse=True)
    return schemas.DocumentList(documents=items[offset : offset + limit], totalCount=len(items),
                                totalSize=sum(d.fileSize for d in items))


@router.delete("/documents/{document_id}", response_model=schemas.Deleted, responses=PROBLEM_RESPONSES,
               summary="Delete a document with its chunks and vectors")
async def delete_document(caller: CallerDep, document_id: IdParam) -> schemas.Deleted:
    """A user key deletes its own uploads; admin and tenant (user-less) keys delete any."""
    jobs = caller.scope.jobs
    owner: str | None = None
    try:
        owner = (await asyncio.to_thread(jobs.get, document_id)).user_id
    except DocumentNotFoundError:
        await asyncio.to_thread(caller.scope.document, document_id)  # 404 if it is nowhere
    if not caller.may_manage(owner):
        raise Problem(403, "FORBIDDEN", "this key may delete only the documents its user uploaded")
    await asyncio.to_thread(jobs.delete_documents, [document_id])  # its job first (see bunko.jobs)
    return schemas.Deleted(deleted=True, id=document_id)


# -- search -----------------------------------------------------------------------------------
def _result(hit: Any) -> schemas.SearchResult:
    meta = hit.metadata
    page = meta.get("page_number")
    section = meta.get("section")
    return schemas.SearchResult(id=hit.chunk_id, documentId=hit.document_id,
                                documentName=str(meta.get("filename") or hit.source), content=hit.content,
                                score=round(float(hit.score), 6), chunkIndex=hit.chunk_index,
                                section=section if isinstance(section, str) else None,
                                pageNumber=page if isinstance(page, int) and not isinstance(page, bool) else None,
                                metadata=meta)


async def _search(caller: Caller, body: schemas.SearchRequest, kind: str) -> schemas.SearchResponse:
    request = body.to_request(kind)
    started = time.perf_counter()
    try:
        hits = (await caller.scope.asearch(request)).results
    except CollectionNotFoundError:  # nothing uploaded yet: no matches
        hits = []
    return schemas.SearchResponse(results=[_result(h) for h in hits], totalMatches=len(hits),
                                  searchTime=round((time.perf_counter() - started) * 1000, 2),
                                  searchType=kind)


@router.post("/search/semantic", response_model=schemas.SearchResponse, responses=PROBLEM_RESPONSES,
             summary="Vector (cosine) search")
async def search_semantic(caller: CallerDep, body: schemas.SearchRequest) -> schemas.SearchResponse:
    """The best chunks by meaning."""
    return await _search(caller, body, "semantic")


@router.post("/search/keyword", response_model=schemas.SearchResponse, responses=PROBLEM_RESPONSES,
             summary="Keyword (BM25) search")
async def search_keyword(caller: CallerDep, body: schemas.SearchRequest) -> schemas.SearchResponse:
    """The best chunks by BM25 over analyzed terms (works on Japanese)."""
    return await _search(caller, body, "keyword")


@router.post("/search/hybrid", response_model=schemas.SearchResponse, responses=PROBLEM_RESPONSES,
             summary="Hybrid search (semantic and keyword results fused)")
async def search_hybrid(caller: CallerDep, body: schemas.SearchRequest) -> schemas.SearchResponse:
    """Vector and keyword results fused (by default reciprocal ranks, k = 15, vector 0.1 / keyword 0.9;
    see docs/ARCHITECTURE.md "Hybrid defaults")."""
    return await _search(caller, body, "hybrid")


@router.get("/search/logs", response_model=schemas.SearchLogResponse, responses=PROBLEM_RESPONSES,
            summary="Your latest searches, or the tenant's with an admin key (R33)")
async def search_logs(
    caller: CallerDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    anonymize: Annotated[bool, Query(description="leave the query text out")] = False,
) -> schemas.SearchLogResponse:
    """Query, result count, time and type of each search, newest first.

    A user key sees its own user's searches; a tenant admin key (or a tenant key without a user)
    sees the whole tenant's."""
    own = None if caller.key.admin or caller.user_id is None else caller.user_id
    rows = await asyncio.to_thread(partial(caller.scope.search_log, limit, user_id=own))  # just answered ones too
    return schemas.SearchLogResponse(logs=[
        schemas.SearchLogEntry(query=None if anonymize else r["query"], resultCount=r["result_count"],
                               searchTime=r["search_time_ms"], searchType=r["search_type"],
                               createdAt=str(r["created_at"])) for r in rows])


# -- chat ----------------------------------------------------------------------------------------
@router.post("/chat/rag", responses={**PROBLEM_RESPONSES, 200: {"content": {"text/event-stream": {}},
                                                                 "description": "Server-Sent Events (R27)"}},
             response_class=StreamingResponse, summary="A cited answer, streamed as Server-Sent Events")
async def chat_rag(caller: CallerDep, body: schemas.ChatRequest) -> StreamingResponse:
    """Events: ``search_start``, ``search_results``, ``generation_start``, ``token``, ``citation``, ``done``
    (with the full response and its sources); a failure midway ends the stream with an ``error`` event."""
    request = body.to_request()
    try:
        await asyncio.to_thread(caller.scope.collection, request.collection)
    except CollectionNotFoundError:
        raise Problem(404, "COLLECTION_NOT_FOUND", f"collection {request.collection!r} has no documents in this "
                      "tenant; upload some first") from None
    stream = caller.scope.astream_ask(request)

    async def events() -> AsyncIterator[bytes]:
        try:
            async for event in stream:
                yield _sse(event.to_dict())
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the status line is sent: the error becomes the last event
            yield _sse(problem_event(exc))
        finally:
            await stream.aclose()  # type: ignore[attr-defined]

    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def _sse(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False, default=str)}\n\n".encode()


@router.get("/conversations/{conversation_id}", response_model=schemas.ConversationResponse,
            responses=PROBLEM_RESPONSES, summary="The turns of one of your conversations")
async def get_conversation(
    caller: CallerDep, conversation_id: Annotated[str, PathParam(pattern=schemas.CONVERSATION_PATTERN)],
) -> schemas.ConversationResponse:
    """A user key sees its own conversations; tenant keys share theirs."""
    turns = await asyncio.to_thread(caller.scope.conversation, conversation_id)
    if not turns:
        raise Problem(404, "CONVERSATION_NOT_FOUND", f"conversation {conversation_id!r} does not exist")
    return schemas.ConversationResponse(conversationId=conversation_id, turns=[
        schemas.Turn(role=t.role, content=t.content, metadata=t.metadata, createdAt=t.created_at) for t in turns])


@router.delete("/conversations/{conversation_id}", response_model=schemas.Deleted, responses=PROBLEM_RESPONSES,
               summary="Delete one of your conversations")
async def delete_conversation(
    caller: CallerDep, conversation_id: Annotated[str, PathParam(pattern=schemas.CONVERSATION_PATTERN)],
) -> schemas.Deleted:
    """Remove the conversation's turns."""
    if not await asyncio.to_thread(caller.scope.delete_conversation, conversation_id):
        raise Problem(404, "CONVERSATION_NOT_FOUND", f"conversation {conversation_id!r} does not exist")
    return schemas.Deleted(deleted=True, id=conversation_id)


# -- collections, usage, erasure ---------------------------------------------------------------
@router.get("/collections", response_model=schemas.CollectionList, responses=PROBLEM_RESPONSES,
            summary="This tenant's collections")
async def list_collections(caller: CallerDep) -> schemas.CollectionList:
    """Name, description, counts and embedder of each collection."""
    collections = await asyncio.to_thread(caller.scope.collections)
    return schemas.CollectionList(collections=[
        schemas.CollectionInfo(name=c.name, description=c.description, documentCount=c.document_count,
                               chunkCount=c.chunk_count, createdAt=str(c.created_at),
                               embedding={"provider": c.embedding_provider, "model": c.embedding_model,
                                          "dimension": c.dimension}) for c in collections])


@router.delete("/collections/{name}", response_model=schemas.Deleted, responses=PROBLEM_RESPONSES,
               summary="Delete a collection with all its documents")
async def delete_collection(caller: CallerDep, name: NameParam) -> schemas.Deleted:
    """Admin and tenant (user-less) keys only. Its documents' upload jobs (and spooled files) go with it."""
    if not caller.may_manage(None):
        raise Problem(403, "FORBIDDEN", "only a tenant admin key or a tenant key may delete collections")
    await asyncio.to_thread(caller.scope.delete_collection, name)
    return schemas.Deleted(deleted=True, id=name)


@router.post("/collections/{name}/vectors", response_model=schemas.UpsertResponse, responses=PROBLEM_RESPONSES,
             summary="Upsert records with their own vectors, or content to embed (R14)")
async def upsert_vectors(caller: CallerDep, name: NameParam, body: schemas.UpsertRequest) -> schemas.UpsertResponse:
    """Insert or update records (ids are generated when missing; an existing id is updated).

    A record without a vector is embedded by the collection's embedder. A missing collection is
    created for the server's embedder; a vector of another dimension than the collection's is
    refused (409, DIMENSION_MISMATCH)."""
    ids = await caller.scope.aupsert(name, [r.to_record() for r in body.records])
    return schemas.UpsertResponse(collection=name, ids=ids, upserted=len(ids))


@router.post("/collections/{name}/query", response_model=schemas.QueryResponse, responses=PROBLEM_RESPONSES,
             summary="The nearest records to a vector or a text (R14)")
async def query_vectors(caller: CallerDep, name: NameParam, body: schemas.VectorQuery) -> schemas.QueryResponse:
    """Top-k by cosine similarity, inside ``filter`` and ``documentIds``, above ``threshold``."""
    request = body.to_request(name)
    started = time.perf_counter()
    hits = await caller.scope.aquery(request)
    return schemas.QueryResponse(
        results=[schemas.QueryResult(id=h.chunk_id, score=round(float(h.score), 6), documentId=h.document_id or None,
                                     content=h.content if request.include_content else None, metadata=h.metadata)
                 for h in hits],
        totalMatches=len(hits), searchTime=round((time.perf_counter() - started) * 1000, 2))


@router.get("/usage", response_model=schemas.UsageResponse, responses=PROBLEM_RESPONSES,
            summary="This tenant's usage (R13)")
async def usage(
    caller: CallerDep,
    since: Annotated[datetime | None, Query(description="ISO-8601 time; default: everything")] = None,
) -> schemas.UsageResponse:
    """Calls, tokens, items and latency per operation, provider and model; each quota beside its usage."""
    totals = await asyncio.to_thread(caller.scope.usage, since)
    quotas = await asyncio.to_thread(caller.scope.quota)
    return schemas.UsageResponse(tenant=caller.tenant, usage=[t.to_dict() for t in totals],
                                 quotas={name: schemas.QuotaFigure(**figures)
                                         for name, figures in quotas.to_dict().items()})


@router.delete("/users/{user_id}/data", response_model=schemas.Erasure, responses=PROBLEM_RESPONSES,
               summary="Erase a user's data (R34)")
async def erase_user(
    caller: CallerDep, user_id: Annotated[str, PathParam(pattern=schemas.USER_PATTERN)],
) -> schemas.Erasure:
    """The user's documents with their chunks and vectors, upload jobs, search logs, usage and conversations.

    A user key may erase its own data; a tenant admin key any user's."""
    if not (caller.key.admin or caller.user_id == user_id):
        raise Problem(403, "FORBIDDEN", "a key may erase only its own user's data (or use a tenant admin key)")
    erasure = await asyncio.to_thread(caller.scope.jobs.erase_user, user_id)  # with the user's spooled files
    return schemas.Erasure(deleted=erasure.to_dict())


@router.delete("/tenant/data", response_model=schemas.Erasure, responses=PROBLEM_RESPONSES,
               summary="Erase all of this tenant's data (R34; admin key)")
async def erase_tenant(caller: CallerDep) -> schemas.Erasure:
    """Every collection, document, chunk, job, log, usage record and conversation of the tenant. Keys stay."""
    if not caller.key.admin:
        raise Problem(403, "FORBIDDEN", "erasing a tenant needs its admin key (bunko admin keys create --admin)")
    erasure = await asyncio.to_thread(caller.scope.jobs.erase_tenant)  # with its spooled files
    return schemas.Erasure(deleted=erasure.to_dict())


__all__ = ["BunkoError", "router"]
