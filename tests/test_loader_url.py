"""URL loader (R5): the SSRF guard, DNS pinning, limits and dispatch, against a real local server.

Every test talks only to an HTTP(S) server on 127.0.0.1 started here. Host names other
than that are answered by a fake ``socket.getaddrinfo``, and the guard tests install a
resolver that fails the test if it is ever called, so nothing reaches DNS or the internet.
"""

from __future__ import annotations

import datetime
import importlib.util
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("httpx")
pytest.importorskip("trafilatura")

from bunko.errors import BlockedURLError, CorruptDocumentError, FetchError, LoaderError
from bunko.loaders import LoadOptions
from bunko.loaders import url as url_module
from bunko.loaders.url import FetchPolicy, check_address, load_url, parse_host_address
from tests.conftest import FIXTURES

PDF = FIXTURES / "haru_to_shura_jo.pdf"  # 『春と修羅』序 (Miyazawa Kenji), vertical Japanese, in the repository

ARTICLE = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Pinned pages</title>
<script>var secret = "script text must not appear";</script><style>body{color:red}</style></head>
<body><nav><a href="/">Home</a> <a href="/about">About us</a> <a href="/shop">Shop navigation</a></nav>
<main><article><h1>Pinned pages</h1>
<p>A fetcher that checks an address and then resolves the name a second time can be tricked by a DNS
server that answers differently the second time. Connecting to the address that was checked closes that gap.</p>
<h2>Redirects</h2>
<p>Every redirect hop is a new URL with a new host, so the same checks run again before the fetcher connects
to it, and a redirect to a private address is refused before any packet is sent there.</p>
</article></main><footer>Footer boilerplate copyright notice</footer></body></html>"""

JA_PAGE = """<!DOCTYPE html><html><head><title>取得のテスト</title></head><body><main><article>
<h1>取得のテスト</h1>
<p>この文書はサーバーが HTTP ヘッダーだけで文字コードを伝える場合の確認に使います。
本文には日本語の文章が十分に含まれており、検出ではなく宣言された文字コードで正しく読めることを確かめます。</p>
<p>二つ目の段落です。<ruby>漢字<rp>(</rp><rt>かんじ</rt><rp>)</rp></ruby>の読み仮名は本文に入りません。文庫という名前の検索エンジンは日本語を第一に考えています。</p>
</article></main></body></html>"""


@dataclass
class Route:
    status: int = 200
    content_type: str | None = "text/html; charset=utf-8"
    body: bytes = b""
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # before the status line
    trickle: float = 0.0  # between body chunks
    length: bool = True  # send Content-Length


@dataclass
class Server:
    base: str
    port: int
    routes: dict[str, Route]
    seen: list[tuple[str, dict[str, str]]]

    def url(self, path: str, host: str = "127.0.0.1") -> str:
        return f"{self.base.split('://')[0]}://{host}:{self.port}{path}"


def _handler(routes: dict[str, Route], seen: list[tuple[str, dict[str, str]]]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            seen.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
            route = routes.get(self.path.split("?")[0], Route(404, "text/plain", b"not found"))
            try:
                if route.delay:
                    time.sleep(route.delay)
                self.send_response(route.status)
                if route.content_type:
                    self.send_header("Content-Type", route.content_type)
                for key, value in route.headers.items():
                    self.send_header(key, value)
                if route.length:
                    self.send_header("Content-Length", str(len(route.body)))
                self.end_headers()
                if route.trickle:
                    for i in range(0, len(route.body), 16):
                        self.wfile.write(route.body[i : i + 16])
                        self.wfile.flush()
                        time.sleep(route.trickle)
                else:
                    self.wfile.write(route.body)
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                pass

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

    return Handler


@pytest.fixture(autouse=True)
def _no_env_allow_list(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(url_module.ALLOW_HOSTS_ENV, raising=False)


def _serve(routes: dict[str, Route], tls: ssl.SSLContext | None = None) -> Iterator[Server]:
    seen: list[tuple[str, dict[str, str]]] = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(routes, seen))
    httpd.daemon_threads = True
    if tls is not None:
        httpd.socket = tls.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    port = httpd.server_address[1]
    try:
        yield Server(f"{'https' if tls else 'http'}://127.0.0.1:{port}", port, routes, seen)
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


@pytest.fixture()
def server() -> Iterator[Server]:
    routes = {
        "/page.html": Route(body=ARTICLE.encode()),
        "/ja.html": Route(content_type="text/html; charset=Shift_JIS", body=JA_PAGE.encode("cp932")),
        "/nav-only.html": Route(body=b"<html><body><nav><a href='/'>Home</a></nav><script>x()</script></body></html>"),
        "/redirect": Route(302, None, headers={"Location": "/page.html"}),
        "/to-private": Route(302, None, headers={"Location": "http://10.0.0.1/"}),
        "/to-metadata": Route(301, None, headers={"Location": "http://169.254.169.254/latest/meta-data"}),
        "/to-metadata-name": Route(307, None, headers={"Location": "http://metadata.google.internal/computeMetadata/v1/"}),
        "/to-file": Route(302, None, headers={"Location": "file:///etc/passwd"}),
        "/loop": Route(302, None, headers={"Location": "/loop"}),
        "/big": Route(content_type="text/plain", body=b"x" * 5000),
        "/big-unsized": Route(content_type="text/plain", body=b"y" * 5000, length=False),
        "/slow": Route(content_type="text/plain", body=b"late", delay=2.0),
        "/trickle": Route(content_type="text/plain", body=b"z" * 400, trickle=0.05),
        "/archive.zip": Route(content_type="application/zip", body=b"PK\x03\x04rest"),
        "/missing": Route(404, "text/plain", b"nothing here"),
        "/broken": Route(500, "text/plain", b"oops"),
        "/notes.txt": Route(content_type="text/plain; charset=utf-8", body="日本語のテキストです。".encode()),
        "/sjis.txt": Route(content_type="text/plain; charset=shift_jis", body="シフトJISの本文です。".encode("cp932")),
        "/doc.md": Route(content_type="text/markdown; charset=utf-8", body="# 見出し\n\n本文です。\n".encode()),
        "/data.json": Route(content_type="application/json", body=b'{"title": "t", "text": "hello"}'),
        "/bad.json": Route(content_type="application/json", body=b'{"title": '),
    }
    routes["/jo.pdf"] = Route(content_type="application/pdf", body=PDF.read_bytes())
    routes["/download"] = Route(content_type="application/octet-stream", body=PDF.read_bytes())
    yield from _serve(routes)


def _allow(*hosts: str, **kwargs: object) -> FetchPolicy:
    return FetchPolicy(allow_hosts=frozenset(hosts), **kwargs)  # type: ignore[arg-type]


def _fake_dns(monkeypatch: pytest.MonkeyPatch, table: dict[str, list[str] | Callable[[], list[str]]]) -> list[str]:
    """Answer ``table``'s names with fixed addresses; refuse any other non-numeric name. Returns the log."""
    real = socket.getaddrinfo
    calls: list[str] = []

    def fake(host, port, family=0, type=0, proto=0, flags=0):  # type: ignore[no-untyped-def]
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name in table:
            calls.append(name)
            answer = table[name]
            addresses = answer() if callable(answer) else answer
            return [
                (socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "",
                 (a, port, 0, 0) if ":" in a else (a, port))
                for a in addresses
            ]
        try:
            ipaddress.ip_address(name)
        except ValueError:
            calls.append(name)  # an unexpected lookup: recorded, and never sent to real DNS
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known") from None
        return real(host, port, family, type, proto, flags)

    monkeypatch.setattr(url_module.socket, "getaddrinfo", fake)
    return calls


@pytest.fixture()
def connections(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int]]:
    """Every TCP connection attempt (address, port) made while the test runs."""
    attempts: list[tuple[str, int]] = []
    real = socket.create_connection

    def spy(address, *args, **kwargs):  # type: ignore[no-untyped-def]
        attempts.append((str(address[0]), int(address[1])))
        if str(address[0]) not in ("127.0.0.1", "::1"):
            pytest.fail(f"the fetcher tried to connect to {address}")
        return real(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", spy)
    return attempts


# --- the guard ------------------------------------------------------------------------------------


def test_loopback_url_is_refused_by_default(server: Server, connections: list[tuple[str, int]]) -> None:
    with pytest.raises(BlockedURLError, match="loopback"):
        load_url(server.url("/page.html"), LoadOptions())
    assert server.seen == []
    assert connections == []


def test_allowed_loopback_host_loads_html(server: Server) -> None:
    [document] = load_url(server.url("/page.html"), LoadOptions(), policy=_allow("127.0.0.1"))
    text = document.content
    assert "Connecting to the address that was checked closes that gap." in text
    assert "## Redirects" in text
    assert "script text must not appear" not in text
    assert "Shop navigation" not in text and "Footer boilerplate" not in text
    meta = document.metadata
    assert meta["source"] == meta["requested_url"] == server.url("/page.html")
    assert meta["source_type"] == "url"
    assert meta["mime_type"] == "text/html"
    assert meta["filesize"] == len(ARTICLE.encode())
    assert meta["title"] == "Pinned pages"
    assert meta["language"] == "en"
    assert meta["kind"] == "html"
    assert meta["filename"] == "page.html"
    assert datetime.datetime.strptime(meta["fetched_at"], "%Y-%m-%dT%H:%M:%SZ")
    assert [p.metadata.get("section") for p in document.parts or []] == ["Pinned pages", "Redirects"]
    path, headers = server.seen[-1]
    assert path == "/page.html"
    assert headers["host"] == f"127.0.0.1:{server.port}"
    assert headers["user-agent"].startswith("bunko/")


def test_allow_list_from_environment(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(url_module.ALLOW_HOSTS_ENV, "example.org, 127.0.0.1")
    [document] = load_url(server.url("/page.html"), LoadOptions())
    assert "Pinned pages" in document.content


def test_allow_list_by_network(server: Server) -> None:
    [document] = load_url(server.url("/page.html"), LoadOptions(), policy=_allow("127.0.0.0/8"))
    assert "Redirects" in document.content


def test_localhost_by_name_refused_then_allowed(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    # ::1 first: nothing listens there, so this also checks falling back to the next checked address.
    calls = _fake_dns(monkeypatch, {"localhost": ["::1", "127.0.0.1"]})
    with pytest.raises(BlockedURLError, match="local"):
        load_url(server.url("/page.html", host="localhost"), LoadOptions())
    assert calls == []  # refused by name, before any lookup
    [document] = load_url(server.url("/page.html", host="localhost"), LoadOptions(), policy=_allow("localhost"))
    assert "Pinned pages" in document.content
    assert server.seen[-1][1]["host"] == f"localhost:{server.port}"


def test_redirect_within_allowed_host_is_followed(server: Server) -> None:
    [document] = load_url(server.url("/redirect"), LoadOptions(), policy=_allow("127.0.0.1"))
    assert "Pinned pages" in document.content
    assert document.metadata["source"] == server.url("/page.html")
    assert document.metadata["requested_url"] == server.url("/redirect")


@pytest.mark.parametrize(
    ("path", "match"),
    [
        ("/to-private", r"10\.0\.0\.1 is a private"),
        ("/to-metadata", r"169\.254\.169\.254 is a link-local"),
        ("/to-metadata-name", "metadata"),
        ("/to-file", "only http and https"),
    ],
)
def test_redirect_to_disallowed_target_is_refused_before_connecting(
    server: Server, connections: list[tuple[str, int]], monkeypatch: pytest.MonkeyPatch, path: str, match: str
) -> None:
    calls = _fake_dns(monkeypatch, {})
    with pytest.raises(BlockedURLError, match=match):
        load_url(server.url(path), LoadOptions(), policy=_allow("127.0.0.1"))
    assert [p for p, _ in server.seen] == [path]
    assert connections == [("127.0.0.1", server.port)]  # only the allowed first hop
    assert calls == []


def test_too_many_redirects(server: Server) -> None:
    with pytest.raises(FetchError, match="too many redirects"):
        load_url(server.url("/loop"), LoadOptions(), policy=_allow("127.0.0.1", max_redirects=3))
    assert len(server.seen) == 4


def test_hostname_resolving_to_private_address_is_refused(
    monkeypatch: pytest.MonkeyPatch, connections: list[tuple[str, int]]
) -> None:
    calls = _fake_dns(monkeypatch, {"internal.example": ["10.1.2.3"], "mixed.example": ["93.184.216.34", "10.9.8.7"],
                                    "ula.example": ["fd12:3456::1"]})
    with pytest.raises(BlockedURLError, match=r"internal\.example resolves to 10\.1\.2\.3"):
        load_url("http://internal.example/secret", LoadOptions())
    with pytest.raises(BlockedURLError, match=r"10\.9\.8\.7"):  # one bad address is enough
        load_url("https://mixed.example/", LoadOptions())
    with pytest.raises(BlockedURLError, match="unique local"):
        load_url("http://ula.example/", LoadOptions())
    assert calls == ["internal.example", "mixed.example", "ula.example"]
    assert connections == []


def test_the_checked_address_is_the_one_connected_to(server: Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """DNS rebinding: the name answers 127.0.0.1 (allowed here) once, then a private address."""
    answers = iter([["127.0.0.1"]])

    def rebinding() -> list[str]:
        return next(answers, ["10.66.66.66"])

    calls = _fake_dns(monkeypatch, {"rebind.test": rebinding})
    [document] = load_url(server.url("/page.html", host="rebind.test"), LoadOptions(), policy=_allow("127.0.0.1"))
    assert "Pinned pages" in document.content
    assert calls == ["rebind.test"]  # resolved once, by the guard; the connection used that answer
    assert server.seen[-1][1]["host"] == f"rebind.test:{server.port}"
    assert document.metadata["source"] == server.url("/page.html", host="rebind.test")


@pytest.mark.parametrize(
    "url",
    [
        "file:///etc/passwd",
        "ftp://127.0.0.1/file",
        "gopher://127.0.0.1:70/_x",
        "data:text/html,<p>hi</p>",
        "javascript:alert(1)",
        "http://user:pass@example.com/",
        "http://127.0.0.1/",
        "http://[::1]/",
        "http://[::1]:8080/admin",
        "http://[::ffff:127.0.0.1]/",
        "http://[::ffff:a9fe:a9fe]/",
        "http://[::127.0.0.1]/",
        "http://[64:ff9b::7f00:1]/",
        "http://[2002:c0a8:101::1]/",
        "http://2130706433/",
        "http://0x7f.1/",
        "http://0x7f000001/",
        "http://0177.0.0.1/",
        "http://017700000001/",
        "http://127.1/",
        "http://１２７.０.０.１/",
        "http://127。0。0。1/",
        "http://0/",
        "http://0.0.0.0:8000/",
        "http://[::]/",
        "http://10.0.0.1/",
        "http://172.16.5.4/",
        "http://192.168.1.1/",
        "http://100.64.0.1/",
        "http://100.100.100.200/latest/meta-data",
        "http://169.254.169.254/latest/meta-data",
        "http://2852039166/latest/meta-data",
        "http://[fe80::1]/",
        "http://[fd00:ec2::254]/latest/meta-data",
        "http://192.0.0.192/",
        "http://224.0.0.1/",
        "http://[ff02::1]/",
        "http://255.255.255.255/",
        "http://240.0.0.1/",
        "http://localhost/",
        "http://LOCALHOST./",
        "http://app.localhost/",
        "http://metadata.google.internal/computeMetadata/v1/",
        "http://metadata/",
        "http://anything.internal/",
    ],
)
def test_blocked_urls(url: str, monkeypatch: pytest.MonkeyPatch, connections: list[tuple[str, int]]) -> None:
    calls = _fake_dns(monkeypatch, {})
    with pytest.raises(BlockedURLError):
        load_url(url, LoadOptions())
    assert calls == [] and connections == []


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("2130706433", "127.0.0.1"),
        ("0x7f.1", "127.0.0.1"),
        ("0177.0.0.1", "127.0.0.1"),
        ("127.1", "127.0.0.1"),
        ("10.1", "10.0.0.1"),
        ("192.168.257", "192.168.1.1"),
        ("0", "0.0.0.0"),
        ("8.8.8.8.", "8.8.8.8"),
        ("example.com", None),
        ("1.example", None),
        ("::1", "::1"),
    ],
)
def test_numeric_host_parsing(host: str, expected: str | None) -> None:
    address = parse_host_address(host)
    assert (str(address) if address else None) == expected


@pytest.mark.parametrize("host", ["256.0.0.1.1", "1.2.3.4.5", "08.1.1.1", "example.256", "1.2.3.0x1g"])
def test_invalid_hosts_are_errors(host: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_dns(monkeypatch, {})
    with pytest.raises(FetchError):
        load_url(f"http://{host}/", LoadOptions())
    assert calls in ([], [host])  # a name that is not a number may be looked up (and fails here)


def test_unresolvable_name_is_a_fetch_error(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_dns(monkeypatch, {})
    with pytest.raises(FetchError, match="cannot resolve") as info:
        load_url("http://no-such-host.example/", LoadOptions())
    assert not isinstance(info.value, BlockedURLError)
    assert calls == ["no-such-host.example"]


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "2002:808:808::1"])
def test_public_addresses_pass(address: str) -> None:
    assert check_address(ipaddress.ip_address(address)) is None


# --- limits and errors ----------------------------------------------------------------------------


def test_oversize_body_is_refused(server: Server) -> None:
    policy = _allow("127.0.0.1", max_bytes=1000)
    with pytest.raises(FetchError, match="response larger than 1000 bytes"):
        load_url(server.url("/big"), LoadOptions(), policy=policy)
    with pytest.raises(FetchError, match="response larger than 1000 bytes"):  # no Content-Length: counted
        load_url(server.url("/big-unsized"), LoadOptions(), policy=policy)
    with pytest.raises(FetchError, match="response larger than 1000 bytes"):  # LoadOptions.max_bytes too
        load_url(server.url("/big"), LoadOptions(max_bytes=1000), policy=_allow("127.0.0.1"))


def test_slow_server_times_out(server: Server) -> None:
    # The answer comes 2 s after the request: without the 0.3 s timeout the load would succeed.
    with pytest.raises(FetchError, match="timed out"):
        load_url(server.url("/slow"), LoadOptions(), policy=_allow("127.0.0.1", timeout=0.3))


def test_trickling_body_hits_the_overall_deadline(server: Server) -> None:
    # Each byte arrives well inside the timeout, but the whole body takes 20 s: only the overall
    # deadline can stop it, and without it the load would succeed.
    with pytest.raises(FetchError, match="timed out"):
        load_url(server.url("/trickle"), LoadOptions(), policy=_allow("127.0.0.1", timeout=0.4))


def test_disallowed_content_type_is_refused(server: Server) -> None:
    with pytest.raises(FetchError, match="content type application/zip is not allowed"):
        load_url(server.url("/archive.zip"), LoadOptions(), policy=_allow("127.0.0.1"))


def test_error_statuses_are_named(server: Server) -> None:
    with pytest.raises(FetchError, match="404") as info:
        load_url(server.url("/missing"), LoadOptions(), policy=_allow("127.0.0.1"))
    assert not isinstance(info.value, BlockedURLError)
    with pytest.raises(FetchError, match="HTTP 500"):
        load_url(server.url("/broken"), LoadOptions(), policy=_allow("127.0.0.1"))


def test_connection_refused_is_a_fetch_error(server: Server) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(FetchError, match="cannot connect"):
        load_url(f"http://127.0.0.1:{port}/", LoadOptions(), policy=_allow("127.0.0.1", timeout=2))


# --- content types --------------------------------------------------------------------------------


def test_html_charset_from_http_header(server: Server) -> None:
    [document] = load_url(server.url("/ja.html"), LoadOptions(), policy=_allow("127.0.0.1"))
    assert "宣言された文字コードで正しく読める" in "".join(document.content.split())
    assert "漢字の読み仮名" in document.content and "かんじ" not in document.content
    assert document.metadata["language"] == "ja"
    assert document.metadata["encoding"] == "cp932"


def test_page_without_main_content(server: Server) -> None:
    with pytest.raises(LoaderError, match="no main content"):
        load_url(server.url("/nav-only.html"), LoadOptions(), policy=_allow("127.0.0.1"))


def test_text_markdown_and_json(server: Server) -> None:
    policy = _allow("127.0.0.1")
    [text] = load_url(server.url("/notes.txt"), LoadOptions(), policy=policy)
    assert text.content == "日本語のテキストです。"
    assert text.metadata["mime_type"] == "text/plain" and text.metadata["language"] == "ja"
    [sjis] = load_url(server.url("/sjis.txt"), LoadOptions(), policy=policy)
    assert sjis.content == "シフトJISの本文です。"
    [markdown] = load_url(server.url("/doc.md"), LoadOptions(), policy=policy)
    assert markdown.metadata["title"] == "見出し" and markdown.metadata["kind"] == "markdown"
    [data] = load_url(server.url("/data.json"), LoadOptions(), policy=policy)
    assert '"hello"' in data.content and data.metadata["mime_type"] == "application/json"
    with pytest.raises(CorruptDocumentError, match="not valid JSON"):
        load_url(server.url("/bad.json"), LoadOptions(), policy=policy)


@pytest.mark.skipif(importlib.util.find_spec("pypdfium2") is None, reason="the PDF extra is not installed")
@pytest.mark.parametrize("path", ["/jo.pdf", "/download"])
def test_pdf_goes_through_the_pdf_loader(server: Server, path: str) -> None:
    documents = load_url(server.url(path), LoadOptions(), policy=_allow("127.0.0.1"))
    text = "".join("".join(d.content for d in documents).split())
    assert "宮澤賢治" in text
    meta = documents[0].metadata
    assert meta["source"] == server.url(path)
    assert meta["source_type"] == "url"
    assert meta["mime_type"] == "application/pdf"
    assert meta["kind"] == "pdf"
    assert meta["filesize"] == PDF.stat().st_size
    assert "/tmp" not in str(meta.get("filename", ""))


# --- HTTPS: SNI and certificate checked against the host name while connecting to the pinned IP ----


def _certificate(tmp_path: Path, name: str) -> tuple[Path, Path]:
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / f"{name}.crt", tmp_path / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.fixture()
def tls_server(tmp_path: Path) -> Iterator[tuple[Server, Path]]:
    cert, key = _certificate(tmp_path, "pinned.test")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    yield from ((s, cert) for s in _serve({"/page.html": Route(body=ARTICLE.encode())}, tls=context))


def test_https_sends_sni_and_verifies_the_host_name(
    tls_server: tuple[Server, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    server, cert = tls_server
    sni: list[str | None] = []
    real_wrap = ssl.SSLContext.wrap_socket

    def wrap(self, sock, *args, **kwargs):  # type: ignore[no-untyped-def]
        if not kwargs.get("server_side"):
            sni.append(kwargs.get("server_hostname"))
        return real_wrap(self, sock, *args, **kwargs)

    monkeypatch.setattr(ssl.SSLContext, "wrap_socket", wrap)
    calls = _fake_dns(monkeypatch, {"pinned.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    trust = ssl.create_default_context(cafile=str(cert))
    policy = _allow("127.0.0.1", verify=trust)
    [document] = load_url(server.url("/page.html", host="pinned.test"), LoadOptions(), policy=policy)
    assert "Pinned pages" in document.content
    assert sni == ["pinned.test"]
    assert server.seen[-1][1]["host"] == f"pinned.test:{server.port}"
    # The same address under a name the certificate does not cover: verification must fail.
    with pytest.raises(FetchError):
        load_url(server.url("/page.html", host="other.test"), LoadOptions(), policy=policy)
    assert calls == ["pinned.test", "other.test"]
