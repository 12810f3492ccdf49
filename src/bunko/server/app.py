"""The ASGI app: ``create_app()`` builds it over the same engine and settings as the CLI.

Each worker process builds its own app: ``serve`` hands uvicorn an ``AppFactory`` holding the
resolved settings tree, which travels to every spawned worker as pickled data (never through
environment variables); everything shared — API keys, rate-limit windows, job states, data — is
in the store.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request

from ..config import Settings, redact_url
from ..engine import Bunko, Tenant
from ..ratelimit import RateLimiter
from ..spool import spool_root
from ..stores.service import ServiceRecords, service_records
from ..version import __version__
from . import apidocs, observability, problems, schemas, webapp
from .admin_routes import router as admin_router
from .block_routes import router as blocks_router
from .guard import RequestGuard
from .memory_routes import router as memory_router
from .observability import RequestObserver
from .problems import Problem
from .routes import router
from .settings import ServerSettings
from .threads import limit_blas_threads
from .worker import WorkerProcesses

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class ServerState:
    """What the routes share in one API process: the engine, the server records (API keys and rate windows),
    the spool folder, the per-key rate limiter, and the tenant scopes built so far."""

    engine: Bunko
    records: ServiceRecords
    settings: ServerSettings
    spool: Path
    limiter: RateLimiter
    _tenants: dict[str, Tenant] = field(default_factory=dict)

    def tenant_for(self, tenant: str) -> Tenant:
        """The tenant's scope, over this server's spool (cached: the PostgreSQL store remembers its tenant's
        row id); a request works in ``tenant_for(key.tenant).for_user(key.user_id)``."""
        scope = self._tenants.get(tenant)
        if scope is None:
            scope = self._tenants[tenant] = Tenant(self.engine, self.engine.backend.for_tenant(tenant),
                                                   spool=self.spool)
        return scope


def create_app(engine: Bunko | None = None, settings: Settings | None = None) -> FastAPI:
    """The bunko API over ``engine`` (or one built from ``settings``), limited by ``settings.server``.

    ``settings`` defaults to the engine's, and without an engine to ``Settings.resolve()``
    (environment, then ``bunko.toml``).
    """
    tree = settings or (engine.settings if engine is not None else Settings.resolve())
    limits: ServerSettings = tree.server

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        own = engine is None
        limit_blas_threads(limits.blas_threads)
        bunko = engine if engine is not None else await asyncio.to_thread(_engine_from, tree)
        spool = spool_root(tree)
        spool.mkdir(parents=True, exist_ok=True)
        records = service_records(bunko.backend)
        # Uploads are processed by worker processes, never on this process's event loop.
        workers = WorkerProcesses(tree, limits.job_workers) if limits.job_workers else None
        if workers is not None:
            workers.start()
        warm_up = getattr(bunko.embedder, "warm_up", None)
        if warm_up is not None:
            await asyncio.to_thread(warm_up)
        state = ServerState(bunko, records, limits, spool, RateLimiter(records, limits.rate_limit_per_minute))
        app.state.bunko = state
        rate = f"{limits.rate_limit} requests/min per key" if limits.rate_limit else "no rate limit"
        logger.info("bunko API worker %d ready (store %s; uploads up to %d MiB; %s)",
                    os.getpid(), redact_url(bunko.backend.url), limits.max_upload_mb, rate)
        try:
            yield
        finally:
            if workers is not None:
                await asyncio.to_thread(workers.stop)
            if own:
                await bunko.aclose()

    app = FastAPI(
        title="bunko",
        version=__version__,
        summary="Multi-tenant RAG: upload documents, search them, and chat with cited, streamed answers.",
        lifespan=lifespan,
        # FastAPI's pages load Swagger UI and ReDoc from a CDN; bunko serves /docs from the package (apidocs).
        docs_url=None,
        redoc_url=None,
        swagger_ui_oauth2_redirect_url=None,
        responses={500: {"model": schemas.ProblemDocument, "content": {"application/problem+json": {}}}},
    )
    problems.install(app)
    app.include_router(router)
    app.include_router(webapp.router)  # the web app at / (static files inside the package)
    app.include_router(apidocs.router)  # the OpenAPI page at /docs (Swagger UI inside the package)
    app.include_router(blocks_router)  # blocks and workflows (R30)
    app.include_router(memory_router)  # agent memory (R31)
    app.include_router(admin_router)  # tenants and quotas, for an operator key
    app.include_router(observability.router)

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
        return schemas.Health(status="ready", store=state.engine.backend.scheme)

    app.add_middleware(RequestGuard, max_upload_bytes=limits.max_upload_bytes,
                       max_json_bytes=limits.max_json_bytes)
    app.add_middleware(RequestObserver)  # outermost: times and logs every answer
    return app


def _engine_from(settings: Settings) -> Bunko:
    """An engine over exactly these settings (arguments outrank the environment and the file)."""
    return Bunko(**settings.as_arguments(), config=settings.config_path)


def app_factory() -> Any:
    """An app over ``Settings.resolve()``, for ``uvicorn --factory bunko.server.app:app_factory``."""
    return create_app()


class AppFactory:
    """The app factory ``serve`` hands to uvicorn: the resolved settings, called once per worker.

    Picklable, so uvicorn's spawned workers receive the settings as data (secrets included,
    over the process pipe, not in the environment or on disk).
    """

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def __call__(self) -> FastAPI:
        """A new app over these settings (uvicorn calls it in each worker process)."""
        return create_app(settings=self.settings)


def serve(settings: Settings, *, host: str, port: int, workers: int = 1, log_level: str = "info",
          log_format: str = "json") -> None:
    """Run the API with uvicorn on ``host:port`` in ``workers`` processes, all over ``settings``.

    Metrics of all workers are kept in ``$BUNKO_HOME/metrics`` (prometheus-client's multiprocess
    mode), emptied here first; ``/metrics`` and ``bunko stats`` read them. Logs are JSON lines with
    the request id (``log_format="json"``) or plain text.
    """
    import uvicorn

    from .. import metrics

    metrics.prepare_multiprocess(settings.home)
    settings = settings.for_processes(workers)
    config = uvicorn.Config(AppFactory(settings), factory=True, host=host, port=port, workers=workers,
                            log_level=log_level, proxy_headers=True, timeout_graceful_shutdown=30,
                            log_config=observability.log_config(log_level, json_lines=log_format == "json"),
                            access_log=False)
    if workers == 1:
        server = uvicorn.Server(config)
        server.run()
        if not server.started:
            raise SystemExit(3)  # uvicorn's startup-failure code
        return
    # uvicorn.run() accepts only an import string with several workers, and an import string
    # cannot carry the settings; its own supervisor takes the factory as configured above.
    from uvicorn.supervisors import Multiprocess

    sock = config.bind_socket()
    extra: dict[str, Any] = {}
    if "target" in inspect.signature(Multiprocess).parameters:  # uvicorn before 0.5x
        extra["target"] = uvicorn.Server(config).run
    try:
        Multiprocess(config, sockets=[sock], **extra).run()
    except KeyboardInterrupt:
        pass
