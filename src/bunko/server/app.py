"""The ASGI app: ``create_app()`` builds it over the same engine and settings as the CLI.

Each worker process builds its own app (uvicorn ``--workers N`` imports the factory in every
process); everything shared — API keys, rate-limit windows, job states, data — is in the store.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .. import __version__
from ..engine import Bunko
from ..stores.base import VectorStore
from ..stores.service import ServiceRecords, service_records
from . import problems, schemas
from .jobs import JobRunner
from .problems import Problem
from .routes import router
from .settings import ServerSettings

logger = logging.getLogger(__name__)
UPLOAD_PATH = "/api/v1/documents/upload"
# Multipart framing and the small form fields around the file.
_FORM_OVERHEAD = 1024 * 1024


@dataclass(slots=True)
class ServerState:
    """What the routes share in one worker: the engine, the store's server records, the job runner."""

    engine: Bunko
    records: ServiceRecords
    settings: ServerSettings
    spool: Path
    jobs: JobRunner
    _stores: dict[str, VectorStore] = field(default_factory=dict)

    def store_for(self, tenant: str) -> VectorStore:
        """The tenant's store (cached: the PostgreSQL store remembers its tenant's row id)."""
        store = self._stores.get(tenant)
        if store is None:
            store = self._stores[tenant] = self.engine.backend.for_tenant(tenant)
        return store


class UploadLimit:
    """Refuse upload bodies over the limit with 413, before reading them (Content-Length) or while reading."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes + _FORM_OVERHEAD

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] != UPLOAD_PATH:
            await self.app(scope, receive, send)
            return
        limit = self.max_bytes
        for name, value in scope["headers"]:
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await Problem(413, "PAYLOAD_TOO_LARGE",
                              f"the upload is larger than {(limit - _FORM_OVERHEAD) // (1024 * 1024)} MiB"
                              ).response()(scope, receive, send)
                return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit:
                # An HTTPException: FastAPI turns other errors raised while parsing a body into a 400.
                raise HTTPException(413, f"the upload is larger than {(limit - _FORM_OVERHEAD) // (1024 * 1024)} MiB")
            return message

        await self.app(scope, counted, send)


def create_app(engine: Bunko | None = None, settings: ServerSettings | None = None) -> FastAPI:
    """The bunko API. Without arguments the engine comes from the environment and ``bunko.toml``."""
    settings = settings or ServerSettings.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own = engine is None
        _limit_blas_threads(settings.blas_threads)
        bunko = engine or await asyncio.to_thread(Bunko)
        spool = Path(bunko.settings.home) / "spool"
        spool.mkdir(parents=True, exist_ok=True)
        records = service_records(bunko.backend)
        warm_up = getattr(bunko.embedder, "warm_up", None)
        if warm_up is not None:
            await asyncio.to_thread(warm_up)
        state = ServerState(bunko, records, settings, spool,
                            JobRunner(records, spool, settings.job_concurrency, settings.max_upload_bytes))
        app.state.bunko = state
        logger.info("bunko API worker %d ready (store %s)", os.getpid(), _redact(bunko.backend.url))
        try:
            yield
        finally:
            await state.jobs.aclose()
            if own:
                await bunko.aclose()

    app = FastAPI(
        title="bunko",
        version=__version__,
        summary="Multi-tenant RAG: upload documents, search them, and chat with cited, streamed answers.",
        lifespan=lifespan,
        responses={500: {"model": schemas.ProblemDocument, "content": {"application/problem+json": {}}}},
    )
    problems.install(app)
    app.include_router(router)

    @app.get("/healthz", response_model=schemas.Health, tags=["health"], summary="The process is up")
    async def healthz() -> schemas.Health:
        return schemas.Health(status="ok")

    @app.get("/readyz", response_model=schemas.Health, tags=["health"], summary="The store answers",
             responses={503: {"model": schemas.ProblemDocument}})
    async def readyz(request: Request) -> schemas.Health:
        state: ServerState = request.app.state.bunko
        try:
            await asyncio.to_thread(state.records.tenant_exists, "readyz-probe")
        except Exception as exc:
            logger.warning("readiness check failed: %s", exc)
            raise Problem(503, "STORE_UNAVAILABLE", "the store does not answer") from None
        return schemas.Health(status="ready", store=getattr(state.engine.backend, "scheme", None))

    app.add_middleware(UploadLimit, max_bytes=settings.max_upload_bytes)  # type: ignore[arg-type]
    return app


def _limit_blas_threads(threads: int) -> None:
    """Cap the BLAS thread pool of this worker process (see ``ServerSettings``)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - part of the "server" extra
        logger.warning("threadpoolctl is not installed: BLAS threads are not limited")
        return
    threadpool_limits(limits=threads, user_api="blas")


def _redact(url: str) -> str:
    import re

    return re.sub(r"://[^@/]*@", "://***@", url)


def app_factory() -> Any:
    """The factory ``bunko serve`` hands to uvicorn (one call per worker process)."""
    return create_app()
