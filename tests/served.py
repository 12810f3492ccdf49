"""The HTTP app served in the test process: a real uvicorn over ``create_app`` in a thread, on a real store.

Tests reach the app's state (its rate limiter, say) and count the body bytes it read; tenants and keys
are made through the store's own server records.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx

from bunko import Bunko
from bunko.config import Settings


class ByteCounter:
    """An ASGI wrapper that counts the request body bytes the app under it has read."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.read = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        async def counted() -> Any:
            message = await receive()
            self.read += len(message.get("body", b""))
            return message

        await self.app(scope, counted, send)


@dataclass
class Served:
    url: str
    port: int
    engine: Bunko
    counter: ByteCounter
    keys: dict[str, str] = field(default_factory=dict)

    @property
    def state(self) -> Any:
        """The app's ``ServerState`` (the lifespan has run)."""
        return self.counter.app.state.bunko

    def key(self, tenant: str, user: str | None = None, *, admin: bool = False) -> str:
        records = self.engine.backend.service_records()
        records.create_tenant(tenant)
        key, _ = records.create_api_key(tenant, user, admin=admin)
        return key

    def client(self, key: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        return httpx.Client(base_url=self.url, headers=headers, timeout=120)


@contextmanager
def serve(url: str, embedder: object, **settings: Any) -> Iterator[Served]:
    """``create_app`` over a new engine on ``url`` with these server settings, served until the block ends."""
    import uvicorn

    from bunko.server.app import create_app

    engine = Bunko(url, embedder=embedder)
    counter = ByteCounter(create_app(engine, Settings.resolve(url, **settings)))
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(counter, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120  # only catches a hang
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.05)
    try:
        yield Served(f"http://127.0.0.1:{port}", port, engine, counter)
    finally:
        server.should_exit = True
        thread.join(60)
        engine.close()


def problem(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    """The problem document of ``response``, which must have ``status`` and ``code``."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    body = response.json()
    assert body["type"] == f"urn:bunko:problem:{code}", body
    return body
