"""The OpenAPI page at ``/docs`` works with no internet: every script and style comes from the app itself.

A real ``bunko serve`` on a local port; the page and each file it references are fetched over HTTP.
With Debian's Chromium (the ``browser`` marker), the page is rendered with every request to another
origin refused, and the operations must show.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import httpx
import pytest

from tests.conftest import ROOT
from tests.test_server import LiveServer

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

SWAGGER = ROOT / "src" / "bunko" / "server" / "static" / "swagger-ui"


class References(HTMLParser):
    """The URLs a page loads: scripts, stylesheets, icons, images."""

    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self.others: list[str] = []
        self.inline_scripts = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        if tag == "script":
            if attributes.get("src"):
                self.scripts.append(str(attributes["src"]))
            else:
                self.inline_scripts += 1
        elif tag == "link" and attributes.get("href"):
            (self.styles if attributes.get("rel") == "stylesheet" else self.others).append(str(attributes["href"]))
        elif tag in ("img", "iframe") and attributes.get("src"):
            self.others.append(str(attributes["src"]))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    server = LiveServer(tmp_path_factory.mktemp("apidocs") / "home", BUNKO_JOB_WORKERS="0")
    yield server
    server.stop()


def test_docs_page_and_everything_it_loads_come_from_the_app(live: LiveServer) -> None:
    page = httpx.get(live.url + "/docs", timeout=60)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html"), page.text
    assert not re.search(r"(https?:)?//", page.text), "the page names another host"
    refs = References()
    refs.feed(page.text)
    assert refs.inline_scripts == 0  # the page's policy allows scripts from the origin only
    assert len(refs.scripts) == 2 and len(refs.styles) == 1, (refs.scripts, refs.styles)
    page_url = str(page.url)
    for ref in [*refs.scripts, *refs.styles, *refs.others]:
        url = urljoin(page_url, ref)
        assert urlsplit(url).netloc == urlsplit(live.url).netloc, url
        for encoding in ("gzip", "identity"):
            with httpx.Client(timeout=60) as client:
                response = client.get(url, headers={"Accept-Encoding": encoding})
            assert response.status_code == 200, (url, response.text[:200])
            expected = "text/javascript" if ref in refs.scripts else "text/css" if ref in refs.styles else ""
            assert response.headers["content-type"].startswith(expected), (url, response.headers)
            if ref.endswith("swagger-ui-bundle.js"):
                assert len(response.content) > 1_000_000 and b"SwaggerUIBundle" in response.content
                assert response.headers.get("content-encoding") == ("gzip" if encoding == "gzip" else None)
    # The page's own script loads the OpenAPI document from the same origin.
    init = httpx.get(urljoin(page_url, refs.scripts[-1]), timeout=60).text
    assert '"openapi.json"' in init and "validatorUrl: null" in init
    spec = httpx.get(urljoin(page_url, "openapi.json"), timeout=60)
    assert spec.status_code == 200 and "/api/v1/documents/upload" in spec.json()["paths"]
    # FastAPI's CDN pages are off; unknown files under /docs are refused.
    for path in ("/redoc", "/docs/oauth2-redirect", "/docs/index.html", "/docs/..%2Fapp.js"):
        assert httpx.get(live.url + path, timeout=60).status_code == 404, path


def test_vendored_swagger_files_are_the_upstream_ones() -> None:
    """The checksums in static/swagger-ui/README.md match the files the package serves (unmodified upstream)."""
    readme = (SWAGGER / "README.md").read_text(encoding="utf-8")
    sums = dict(re.findall(r"`([\w.-]+)`: `([0-9a-f]{64})`", readme))
    assert set(sums) == {"swagger-ui-bundle.js", "swagger-ui.css"}
    for name, digest in sums.items():
        assert hashlib.sha256(gzip.decompress((SWAGGER / f"{name}.gz").read_bytes())).hexdigest() == digest, name
    assert "Apache License" in (SWAGGER / "LICENSE").read_text(encoding="utf-8")


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"


@pytest.mark.browser
@pytest.mark.skipif(not Path(CHROMIUM).is_file(), reason=f"no Chromium at {CHROMIUM}")
def test_docs_page_renders_offline_in_a_browser(live: LiveServer) -> None:
    """Chromium with every request to another origin refused: the operations show, nothing else was asked for."""
    sync_api = pytest.importorskip("playwright.sync_api")
    outside: list[str] = []
    errors: list[str] = []
    origin = urlsplit(live.url).netloc

    def route(request_route: object) -> None:
        request = request_route.request  # type: ignore[attr-defined]
        if urlsplit(request.url).netloc != origin and not request.url.startswith("data:"):
            outside.append(request.url)
            request_route.abort()  # type: ignore[attr-defined]
        else:
            request_route.continue_()  # type: ignore[attr-defined]

    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                             args=["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                                   "--disable-background-networking", "--disable-component-update"])
        try:
            page = browser.new_page()
            page.set_default_timeout(120_000)
            page.route("**/*", route)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(live.url + "/docs")
            page.wait_for_selector('[data-path="/api/v1/documents/upload"]')
            assert page.locator(".opblock").count() > 20
            assert "bunko" in page.locator(".info .title").inner_text()
            if shot := os.environ.get("BUNKO_DOCS_SCREENSHOT"):
                page.screenshot(path=shot)
        finally:
            browser.close()
    assert outside == [] and errors == [], (outside, errors)
