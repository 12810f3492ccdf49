"""Hostile input outside the HTTP server: names, NUL characters, deep filters, bad redirects, secrets in URLs.

Regression tests of issue 13's findings 4 (NUL in filters, engine side), 7, 9, 12 and 13.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from bunko.cli import cli
from bunko.config import redact_url
from bunko.errors import ConfigError, FetchError, FilterError, InvalidFieldError, VectorStoreError
from bunko.filters import parse_filter
from bunko.stores import SQLiteBackend, StoreBackend
from bunko.stores.base import check_conversation_id
from bunko.stores.service import check_user_id
from bunko.testing.store_data import make_document
from bunko.types import EmbedderInfo, unstorable_path

from .conftest import EXAMPLES


# -- finding 13: a trailing newline is not part of a valid name ------------------------------------
def test_names_with_a_trailing_newline_are_refused(backend: SQLiteBackend) -> None:
    assert backend.for_tenant("acme").tenant == "acme"
    for bad in ("acme\n", "acme\r\n", "\nacme", "ac\nme"):
        with pytest.raises(VectorStoreError, match="invalid tenant name"):
            backend.for_tenant(bad)
        with pytest.raises(VectorStoreError, match="invalid collection name"):
            backend.for_tenant("acme").ensure_collection(bad, EmbedderInfo("test", "m", 3))
    for end in ("\n", "\r\n"):
        with pytest.raises(ConfigError):
            check_user_id("alice" + end)
        with pytest.raises(VectorStoreError):
            check_conversation_id("t:talk" + end)
    with pytest.raises(FilterError, match="invalid field name"):
        parse_filter({"year\n": 2020})
    # A date with a trailing newline is a plain string, never a date.
    assert parse_filter({"d": {"$gte": "2024-01-01\n"}}).root.operand.kind == "string"  # type: ignore[union-attr]


def test_the_http_name_patterns_refuse_a_trailing_newline() -> None:
    pytest.importorskip("fastapi")
    from pydantic import TypeAdapter, ValidationError

    from bunko.server import schemas

    body = TypeAdapter(schemas.SearchRequest)
    assert body.validate_python({"query": "q", "collection": "acme"}).collection == "acme"
    with pytest.raises(ValidationError):
        body.validate_python({"query": "q", "collection": "acme\n"})


# -- finding 4 (engine side): NUL characters ----------------------------------------------------
def test_nul_characters_are_found_with_their_path() -> None:
    assert unstorable_path({"a": ["x", "y\x00"]}) == "a[1]"
    assert unstorable_path({"author": {"name": "a\x00"}}, "metadata") == "metadata.author.name"
    assert unstorable_path({"k\x00": 1}) == "k\x00"
    assert unstorable_path({"a": "\\u0000", "b": [1, 2.5, None, True]}) is None  # the escape text is no NUL
    assert unstorable_path("x\x00") == "(value)"


def test_unpaired_surrogates_are_found_as_nul_characters_are() -> None:
    lone = json.loads('"a\\ud800b"')  # what an escape in a JSON body gives: no UTF-8 form
    assert unstorable_path({"a": ["x", lone]}) == "a[1]"
    assert unstorable_path({lone: 1}, "metadata") == f"metadata.{lone}"
    assert unstorable_path(json.loads('"\\ud83d\\ude00 水"')) is None  # a pair is one character
    assert unstorable_path({"a": "避難所 ✓", "b": "plain"}) is None


def test_a_document_no_store_can_keep_is_a_typed_error_naming_the_field(store_backend: StoreBackend) -> None:
    store = store_backend.for_tenant("acme")
    store.ensure_collection("c", EmbedderInfo("test", "unit-4", 4))
    lone = json.loads('"\\udc00"')
    cases = [("content", {"content": f"避難{lone}所"}), ("metadata.author", {"metadata": {"author": lone}}),
             ("source", {"source": f"a{lone}.txt"}), ("content", {"content": "NUL\x00"})]
    for field, change in cases:
        document = make_document(change.get("source", "a.txt"), [change.get("content", "備蓄")],
                                 np.eye(4, dtype=np.float32)[:1], metadata=change.get("metadata"))
        with pytest.raises(InvalidFieldError) as caught:
            store.write_documents("c", [make_document("ok.txt", ["水"], np.eye(4, dtype=np.float32)[1:2]), document])
        assert field in caught.value.field and "not allowed" in str(caught.value)
        assert store.list_documents("c") == []  # nothing of the batch was written


@pytest.mark.parametrize("spec", [{"tag": "a\x00"}, {"tag": {"$in": ["ok", "b\x00"]}},
                                  {"$or": [{"tag": {"$contains": "\x00"}}, {"x": 1}]},
                                  '{"tag": "a\\u0000"}'])
def test_a_filter_value_with_nul_is_a_filter_error_naming_the_field(spec: object) -> None:
    with pytest.raises(FilterError) as caught:
        parse_filter(spec)  # type: ignore[arg-type]
    [problem] = caught.value.problems
    assert "NUL" in problem.message and "tag" in problem.path


# -- finding 12: a filter nested 1,000 levels -------------------------------------------------------
@pytest.mark.parametrize("depth", [17, 1000, 100_000])
def test_a_deeply_nested_filter_is_a_clear_cli_error(tmp_path: Path, depth: int) -> None:
    deep = '{"$not": ' * depth + '{"a": 1}' + "}" * depth
    with pytest.raises(FilterError, match="nested deeper"):
        parse_filter(deep)
    result = CliRunner().invoke(cli, ["--db", f"sqlite:///{tmp_path / 'x.db'}", "search", "q", "--filter", deep,
                                      "--json"])
    assert result.exit_code == 1, result.output
    error = json.loads(result.stdout)["error"]
    assert error["type"] == "FilterError" and "nested deeper" in error["message"]


# -- finding 7: secrets in store URLs ---------------------------------------------------------------
@pytest.mark.parametrize(("url", "secret"), [
    ("postgresql://bunko:s3cretpw@db:5432/bunko", "s3cretpw"),
    ("postgresql://db/bunko?user=bunko&password=s3cretpw&sslmode=require", "s3cretpw"),
    ("postgresql://bunko@db/bunko?sslmode=require&PASSWORD=s3cretpw", "s3cretpw"),
    ("postgresql://bunko@db/bunko?sslpassword=s3cretpw", "s3cretpw"),
    ("postgresql://bunko@db/bunko?api_key=s3cretpw&application_name=x", "s3cretpw"),
    ("host=db user=bunko password=s3cretpw dbname=bunko", "s3cretpw"),
    ("host=db user=bunko password='s3c retpw' dbname=bunko", "retpw"),
])
def test_redaction_hides_every_secret_looking_part(url: str, secret: str) -> None:
    shown = redact_url(url)
    assert secret not in shown and "***" in shown
    assert "bunko" in shown and "db" in shown  # the rest stays readable


def test_redaction_leaves_plain_urls_alone() -> None:
    for url in ("sqlite:////var/lib/bunko/bunko.db", "postgresql://db:5432/bunko?sslmode=require&user=bunko"):
        assert redact_url(url) == url


def test_serve_does_not_print_a_password_query_parameter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("uvicorn")
    from bunko.server import app as server_app

    seen: dict[str, object] = {}
    monkeypatch.setattr(server_app, "serve", lambda settings, **kw: seen.update(kw))
    url = "postgresql://bunko@127.0.0.1:1/bunko?password=hunter2secret&sslmode=disable"
    result = CliRunner().invoke(cli, ["--db", url, "serve", "--port", "1"])
    assert result.exit_code == 0, result.output
    assert seen["port"] == 1
    assert "hunter2secret" not in result.output and "password=***" in result.output
    assert "hunter2secret" not in repr(server_app.redact_url(url))


# -- finding 9: a redirect whose Location httpx cannot parse ----------------------------------------
class _Pages(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path == "/bad":
            self.send_response(302)
            self.send_header("Location", "http:\\\\x/")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = ("<html><body><main><article><h1>備蓄</h1><p>" + "水と食料を三日分備えます。" * 20
                + "</p></article></main></body></html>")
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture()
def pages() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Pages)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_an_unparseable_redirect_is_a_fetch_error(pages: str) -> None:
    pytest.importorskip("trafilatura")
    from bunko.loaders import LoadOptions
    from bunko.loaders.url import FetchPolicy, load_url

    with pytest.raises(FetchError, match="InvalidURL"):
        load_url(pages + "/bad", LoadOptions(), policy=FetchPolicy(allow_hosts=frozenset({"127.0.0.1"})))


def test_ingest_goes_on_after_an_unparseable_redirect(pages: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("trafilatura")
    monkeypatch.setenv("BUNKO_FETCH_ALLOW_HOSTS", "127.0.0.1")
    result = CliRunner().invoke(cli, ["--db", f"sqlite:///{tmp_path / 'x.db'}", "ingest", pages + "/bad",
                                      pages + "/good", str(EXAMPLES / "bichiku.txt"), "--json"])
    assert result.exit_code == 1, result.output  # some inputs failed; never 70 ("a bug in bunko")
    data = json.loads(result.stdout)
    assert data["documents"] == 2
    assert [e["type"] for e in data["errors"]] == ["FetchError"]
    assert "/bad" in data["errors"][0]["message"]
