"""The web app's files as the server hands them out (no browser needed; see test_webapp_browser.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient

from bunko.server.app import create_app
from bunko.server.webapp import ASSETS, STATIC


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from bunko.config import Settings

    settings = Settings.resolve(home=str(tmp_path_factory.mktemp("home")))
    # Without entering the client, the lifespan (engine, embedder) does not run: static routes need neither.
    return TestClient(create_app(settings=settings))


def test_the_page_and_every_file_it_loads(client: Any) -> None:
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    referenced = set(re.findall(r'(?:src|href)="(/app/[^"]+)"', page.text))
    assert referenced == {"/app/app.js", "/app/app.css", "/app/icon.svg"}
    for path in referenced:
        response = client.get(path)
        assert response.status_code == 200, path
        assert response.headers["content-type"] == ASSETS[path.rsplit("/", 1)[1]]
        assert response.content == (STATIC / path.rsplit("/", 1)[1]).read_bytes()
    assert client.get("/favicon.ico").status_code == 200


def test_only_the_app_files_are_served(client: Any) -> None:
    for path in ["/app/index.html", "/app/..%2Fwebapp.py", "/app/%2e%2e%2fapp.py", "/app/nothing.js"]:
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.headers["content-type"].startswith("application/problem+json")
    assert client.get("/app/../server/app.py").status_code == 404


def test_every_test_id_of_the_issue_is_in_the_app() -> None:
    html, script = (STATIC / "index.html").read_text(), (STATIC / "app.js").read_text()
    for test_id in ["api-key-input", "sign-in", "collection-select", "upload-input", "upload-status", "document-row",
                    "chat-input", "chat-send", "answer", "citation", "source-panel", "search-input", "search-result"]:
        forms = [f'data-testid="{test_id}"' in html, f'"data-testid": "{test_id}"' in script,
                 f'dataset.testid = "{test_id}"' in script]
        assert any(forms), test_id


def test_english_and_japanese_have_the_same_strings() -> None:
    script = (STATIC / "app.js").read_text()
    en = script[script.index("  en: {"):script.index("  ja: {")]
    ja = script[script.index("  ja: {"):script.index("const LANG")]
    keys = re.compile(r'"?([\w.]+)"?: "')
    assert set(keys.findall(en)) == set(keys.findall(ja))


def test_the_file_picker_offers_what_the_loaders_read() -> None:
    from bunko.loaders import supported_suffixes

    offered = re.findall(r'accept="([^"]+)"', (STATIC / "index.html").read_text())
    assert len(offered) == 1
    assert sorted(offered[0].split(",")) == sorted(supported_suffixes())
