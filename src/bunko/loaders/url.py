"""URL loader (R5): fetch one http(s) URL safely and turn the response into documents.

Safety rules, checked on the first request and again on every redirect hop:

* only ``http`` and ``https``; no credentials in the URL;
* the host name is resolved here (``socket.getaddrinfo``) and **every** address it
  resolves to must be public: loopback, private (RFC 1918, ULA ``fc00::/7``), link-local
  (``169.254/16`` with the cloud metadata address, ``fe80::/10``), unspecified, multicast,
  broadcast, reserved, documentation/benchmark ranges, carrier-grade NAT ``100.64/10``,
  IETF ``192.0.0/24``, and IPv6 forms that embed such an IPv4 address (IPv4-mapped,
  IPv4-compatible, NAT64, 6to4, Teredo) are refused, as are metadata / local host names;
  numeric host spellings (``2130706433``, ``0x7f.1``, ``017700000001``) are parsed the
  way browsers parse them, so they are checked as the address they mean;
* hosts, IPs or networks in ``FetchPolicy.allow_hosts`` or ``BUNKO_FETCH_ALLOW_HOSTS``
  (comma-separated) are the operator's explicit exceptions;
* the connection goes to the address that was checked (DNS pinning, no second lookup):
  the request is sent to ``scheme://<checked IP>:<port>/path`` with the original
  ``Host`` header, and for https the original name as TLS SNI (httpx's ``sni_hostname``
  extension), so the certificate is still verified against the host name. A fresh client
  per hop keeps one host's TLS connection from being reused for another; environment
  proxies are ignored (a proxy would resolve the name again);
* redirects are followed by hand (at most ``max_redirects``), the body is streamed and
  cut off at ``max_bytes``, one deadline of ``timeout`` seconds covers the whole fetch,
  non-2xx statuses and content types outside ``allowed_content_types`` are errors.

Responses become documents by type: HTML through ``html_to_document``, PDF through the
file loaders (written to a temporary file), text / Markdown / JSON decoded directly.
"""

from __future__ import annotations

import ipaddress
import json
import re
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import parsedate_to_datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urljoin, urlsplit

from ..analysis import detect_language
from ..errors import BlockedURLError, CorruptDocumentError, EncodingDetectionError, FetchError, LoaderError
from ..types import Document
from . import LoadOptions

if TYPE_CHECKING:
    from ..config import Settings

__all__ = ["DEFAULT_CONTENT_TYPES", "FetchPolicy", "FetchedResponse", "check_address", "fetch", "load_url"]

ALLOW_HOSTS_ENV = "BUNKO_FETCH_ALLOW_HOSTS"
DEFAULT_CONTENT_TYPES = (
    "text/html",
    "application/xhtml+xml",
    "text/plain",
    "text/markdown",
    "application/pdf",
    "application/json",
)
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_UNTYPED = frozenset({"", "application/octet-stream", "binary/octet-stream", "application/unknown"})


def _default_user_agent() -> str:
    from ..version import __version__

    return f"bunko/{__version__}"


@dataclass(frozen=True, slots=True)
class FetchPolicy:
    """Limits and exceptions for fetching URLs.

    ``allow_hosts`` holds host names (exact, case-insensitive), IP addresses or CIDR
    networks that may be fetched even though they are not public. Without a policy, fetching
    uses :meth:`from_settings` (``BUNKO_FETCH_ALLOW_HOSTS``, ``[fetch] allow_hosts``); the engine
    passes one built from its own settings. ``verify`` is passed to httpx (``False`` or an
    ``ssl.SSLContext`` for a private CA).
    """

    max_bytes: int = 20 * 1024 * 1024
    timeout: float = 20.0
    max_redirects: int = 5
    allowed_content_types: tuple[str, ...] = DEFAULT_CONTENT_TYPES
    allow_hosts: frozenset[str] = frozenset()
    user_agent: str = field(default_factory=_default_user_agent)
    verify: bool | ssl.SSLContext = True

    @classmethod
    def from_settings(cls, settings: Settings | None = None) -> FetchPolicy:
        """The default policy with the ``[fetch] allow_hosts`` of ``settings`` (resolved now if None)."""
        from ..config import Settings

        resolved = settings if settings is not None else Settings.resolve()
        return cls(allow_hosts=frozenset(resolved.fetch.allow_hosts))


@dataclass(slots=True)
class FetchedResponse:
    """A fetched body and what the server said about it."""

    url: str  # the final URL, after redirects
    requested_url: str
    status: int
    mime_type: str
    charset: str | None
    headers: dict[str, str]
    body: bytes
    fetched_at: str


def load_url(url: str, options: LoadOptions | None = None, *, policy: FetchPolicy | None = None) -> list[Document]:
    """Fetch ``url`` under ``policy`` and load the response as documents."""
    options = options or LoadOptions()
    response = fetch(url, policy, max_bytes=options.max_bytes)
    metadata = _url_metadata(response)
    mime = response.mime_type
    if mime in ("text/html", "application/xhtml+xml"):
        from .html import html_to_document

        document = html_to_document(
            response.body, source=response.url, base_metadata=metadata, charset=response.charset, url=response.url
        )
        document.metadata["kind"] = "html"
        return [document]
    if mime == "application/pdf":
        return _load_pdf(response, metadata, options)
    if mime.startswith("text/") or mime == "application/json" or mime.endswith("+json"):
        return [_text_document(response, metadata)]
    raise FetchError(f"{response.url}: no loader for content type {mime}")


# --- fetching -----------------------------------------------------------------------------------


def fetch(url: str, policy: FetchPolicy | None = None, *, max_bytes: int | None = None) -> FetchedResponse:
    """GET ``url`` following the safety rules above; returns the final response's body."""
    import httpx

    policy = policy or FetchPolicy.from_settings()
    names, networks = _allow_rules(policy.allow_hosts)
    limit = min(policy.max_bytes, max_bytes) if max_bytes else policy.max_bytes
    deadline = time.monotonic() + policy.timeout
    current = url.strip()
    for hop in range(policy.max_redirects + 1):
        target = _Target.parse(current)
        addresses = _checked_addresses(target, names, networks, deadline, policy.timeout)
        client, response = _send(target, addresses, policy, deadline)
        try:
            status = response.status_code
            if status in _REDIRECTS:
                location = response.headers.get("location")
                if not location:
                    raise FetchError(f"{current}: HTTP {status} redirect without a Location header")
                if hop >= policy.max_redirects:
                    raise FetchError(f"{url}: too many redirects (more than {policy.max_redirects})")
                current = urljoin(target.url, location.strip()).split("#", 1)[0]
                continue
            if not 200 <= status < 300:
                reason = response.reason_phrase or ""
                raise FetchError(f"{current}: HTTP {status} {reason}".rstrip())
            mime, charset = _content_type(response.headers.get("content-type", ""))
            allowed = {t.lower() for t in policy.allowed_content_types}
            if mime not in _UNTYPED and mime not in allowed:
                raise FetchError(
                    f"{current}: content type {mime} is not allowed "
                    f"(allowed: {', '.join(policy.allowed_content_types)})"
                )
            body = _read_body(response, current, limit, deadline, policy.timeout)
        except httpx.TimeoutException as exc:
            raise FetchError(f"{current}: timed out after {policy.timeout:g} s") from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise FetchError(f"{current}: {type(exc).__name__}: {exc}") from exc
        finally:
            response.close()
            client.close()
        if mime in _UNTYPED:
            mime = _sniff(body)
            if mime not in allowed:
                raise FetchError(f"{current}: the server did not say what the content is, and it is not a known type")
        return FetchedResponse(
            url=target.url,
            requested_url=url,
            status=status,
            mime_type=mime,
            charset=charset,
            headers={k.lower(): v for k, v in response.headers.items()},
            body=body,
            fetched_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        )
    raise FetchError(f"{url}: too many redirects (more than {policy.max_redirects})")  # pragma: no cover


def _send(target: _Target, addresses: list[IPAddress], policy: FetchPolicy, deadline: float) -> tuple[Any, Any]:
    """Send the GET to the checked addresses in turn (pinned); returns the client and streaming response."""
    import httpx

    last: Exception | None = None
    for address in addresses:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        request_url, headers, extensions = target.pinned(address)
        headers["User-Agent"] = policy.user_agent
        headers["Accept"] = ", ".join(policy.allowed_content_types) + ", */*;q=0.1"
        client = httpx.Client(
            trust_env=False,  # no proxies from the environment: they would resolve the name again
            follow_redirects=False,
            verify=policy.verify,
            timeout=httpx.Timeout(remaining),
        )
        try:
            request = client.build_request("GET", request_url, headers=headers, extensions=extensions)
            response = client.send(request, stream=True)
        except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
            client.close()
            last = exc
            continue
        except httpx.TimeoutException as exc:
            client.close()
            raise FetchError(f"{target.url}: timed out after {policy.timeout:g} s") from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # InvalidURL: a Location httpx cannot parse
            client.close()
            raise FetchError(f"{target.url}: {type(exc).__name__}: {exc}") from exc
        return client, response
    if last is None:
        raise FetchError(f"{target.url}: timed out after {policy.timeout:g} s")
    if isinstance(last, httpx.ConnectTimeout):
        raise FetchError(f"{target.url}: timed out connecting after {policy.timeout:g} s") from last
    raise FetchError(f"{target.url}: cannot connect ({last})") from last


def _read_body(response: Any, url: str, limit: int, deadline: float, timeout: float) -> bytes:
    declared = response.headers.get("content-length", "")
    if declared.strip().isdigit() and int(declared) > limit:
        raise FetchError(f"{url}: response larger than {limit} bytes (Content-Length: {int(declared)})")
    body = bytearray()
    for chunk in response.iter_bytes():
        body += chunk
        if len(body) > limit:
            raise FetchError(f"{url}: response larger than {limit} bytes")
        if time.monotonic() > deadline:
            raise FetchError(f"{url}: timed out after {timeout:g} s (the body was still arriving)")
    return bytes(body)


def _content_type(value: str) -> tuple[str, str | None]:
    media, _, params = value.partition(";")
    charset = None
    for param in params.split(";"):
        key, _, val = param.partition("=")
        if key.strip().lower() == "charset" and val.strip():
            charset = val.strip().strip("\"'")
    return media.strip().lower(), charset


def _sniff(body: bytes) -> str:
    head = body[:1024].lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if body[:1024].lstrip().startswith(b"%PDF-"):
        return "application/pdf"
    if head.startswith((b"<!doctype html", b"<html")) or b"<body" in head:
        return "text/html"
    return "application/octet-stream"


# --- the SSRF guard ----------------------------------------------------------------------------

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_V4_RULES = [
    ("0.0.0.0/8", "an unspecified ('this network') address"),
    ("10.0.0.0/8", "a private (RFC 1918) address"),
    ("100.64.0.0/10", "a carrier-grade NAT (RFC 6598) address"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address (where cloud metadata services live)"),
    ("172.16.0.0/12", "a private (RFC 1918) address"),
    ("192.0.0.0/24", "an IETF protocol-assignment address"),
    ("192.0.2.0/24", "a documentation address"),
    ("192.88.99.0/24", "a 6to4 relay anycast address"),
    ("192.168.0.0/16", "a private (RFC 1918) address"),
    ("198.18.0.0/15", "a benchmarking address"),
    ("198.51.100.0/24", "a documentation address"),
    ("203.0.113.0/24", "a documentation address"),
    ("224.0.0.0/4", "a multicast address"),
    ("255.255.255.255/32", "the broadcast address"),
    ("240.0.0.0/4", "a reserved address"),
]
_V6_RULES = [
    ("::/128", "the unspecified address"),
    ("::1/128", "a loopback address"),
    ("::/96", "an IPv4-compatible (deprecated) address"),
    ("100::/64", "a discard-only address"),
    ("2001:db8::/32", "a documentation address"),
    ("fc00::/7", "a private (unique local) address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
]
_V4_NETS = [(ipaddress.IPv4Network(net), why) for net, why in _V4_RULES]
_V6_NETS = [(ipaddress.IPv6Network(net), why) for net, why in _V6_RULES]
_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))
# Names that reach the machine itself or a cloud metadata service whatever DNS says.
_BLOCKED_NAMES = frozenset({
    "localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback",
    "metadata", "metadata.google.internal", "metadata.goog", "instance-data", "instance-data.ec2.internal",
})
_BLOCKED_SUFFIXES = (".localhost", ".internal")


def check_address(address: IPAddress) -> str | None:
    """Why ``address`` must not be fetched (a phrase like "a loopback address"), or None if public."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped
        if embedded is None and any(address in net for net in _NAT64):
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is None and address.sixtofour is not None:
            embedded = address.sixtofour
        if embedded is None and address.teredo is not None:
            embedded = address.teredo[1]
        if embedded is not None:
            why = check_address(embedded)
            return f"an IPv6 address embedding {embedded}, {why}" if why else None
        for net6, why in _V6_NETS:
            if address in net6:
                return why
    else:
        for net4, why in _V4_NETS:
            if address in net4:
                return why
    if address.is_loopback:
        return "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_unspecified:
        return "the unspecified address"
    if address.is_private or address.is_reserved or not address.is_global:
        return "a private or reserved address"
    return None


_V4_PART = re.compile(r"0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*")
_NUMERIC_PART = re.compile(r"[0-9]+|0[xX][0-9a-fA-F]*")


def parse_host_address(host: str) -> IPAddress | None:
    """The IP address a URL host denotes, parsing IPv4 the way browsers do (WHATWG URL).

    ``2130706433``, ``0x7f.1``, ``0177.0.0.1`` and ``127.1`` all mean 127.0.0.1. Returns
    None for a host name; raises ``FetchError`` for a host that ends in a number but is
    not a valid IPv4 address.
    """
    if ":" in host:
        try:
            return ipaddress.IPv6Address(unquote(host))
        except ValueError as exc:
            raise FetchError(f"invalid IPv6 address in URL: {host!r}") from exc
    parts = host.split(".")
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    if not _NUMERIC_PART.fullmatch(parts[-1]):
        return None
    if len(parts) > 4 or not all(_V4_PART.fullmatch(p) for p in parts):
        raise FetchError(f"invalid IPv4 address in URL: {host!r}")
    numbers = []
    for part in parts:
        if part[:2].lower() == "0x":
            numbers.append(int(part[2:] or "0", 16))
        elif len(part) > 1 and part[0] == "0":
            numbers.append(int(part[1:], 8))
        else:
            numbers.append(int(part))
    if any(n > 255 for n in numbers[:-1]) or numbers[-1] >= 256 ** (5 - len(numbers)):
        raise FetchError(f"invalid IPv4 address in URL: {host!r}")
    value = numbers[-1]
    for i, n in enumerate(numbers[:-1]):
        value += n << (8 * (3 - i))
    return ipaddress.IPv4Address(value)


def _normalize_name(name: str) -> str:
    name = name.strip().lower().rstrip(".")
    if not name.isascii():
        try:
            name = name.encode("idna").decode("ascii")
        except UnicodeError as exc:
            raise FetchError(f"invalid host name {name!r}") from exc
    return name


def _allow_rules(entries: Iterable[str]) -> tuple[frozenset[str], tuple[Any, ...]]:
    """Allowed host names and networks from a policy's ``allow_hosts``."""
    names: set[str] = set()
    networks: list[Any] = []
    for entry in entries:
        entry = entry.strip().strip("[]")
        if not entry:
            continue
        try:
            if "/" in entry:
                networks.append(ipaddress.ip_network(entry, strict=False))
                continue
            address = parse_host_address(_normalize_name(entry))
        except (ValueError, FetchError):
            address = None
        if address is not None:
            networks.append(ipaddress.ip_network(address))
        else:
            try:
                names.add(_normalize_name(entry))
            except FetchError:
                continue
    return frozenset(names), tuple(networks)


@dataclass(slots=True, frozen=True)
class _Target:
    """One URL, parsed once: what is checked is exactly what is connected to."""

    url: str
    scheme: str
    host: str  # lower-case ASCII name, or the canonical IP address
    address: IPAddress | None  # set when the URL names an IP address
    port: int
    path: str  # path and query

    @classmethod
    def parse(cls, url: str) -> _Target:
        try:
            parts = urlsplit(url)
            port = parts.port
        except ValueError as exc:
            raise FetchError(f"{url}: invalid URL ({exc})") from exc
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https"):
            raise BlockedURLError(f"{url}: only http and https URLs can be fetched, not {scheme or 'a bare path'}")
        if parts.username is not None or parts.password is not None:
            raise BlockedURLError(f"{url}: URLs with user names or passwords are not fetched")
        raw_host = parts.hostname
        if not raw_host:
            raise FetchError(f"{url}: the URL has no host")
        address = parse_host_address(raw_host)
        if address is None and not raw_host.isascii():
            # full-width digits and ideographic full stops normalise to an IPv4 address under IDNA
            address = parse_host_address(_normalize_name(raw_host))
        if address is not None:
            host = str(address)
        else:
            host = _normalize_name(raw_host)
            if not re.fullmatch(r"[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?(\.[a-z0-9_]([a-z0-9_-]*[a-z0-9_])?)*", host):
                raise FetchError(f"{url}: invalid host name {raw_host!r}")
        if port is None:
            port = 443 if scheme == "https" else 80
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        netloc = f"[{host}]" if isinstance(address, ipaddress.IPv6Address) else host
        default = (scheme, port) in (("http", 80), ("https", 443))
        normalized = f"{scheme}://{netloc}{'' if default else f':{port}'}{path}"
        return cls(normalized, scheme, host, address, port, path)

    def pinned(self, address: IPAddress) -> tuple[str, dict[str, str], dict[str, Any]]:
        """The request URL aimed at ``address``, with the ``Host`` header and SNI of the real host."""
        ip = f"[{address}]" if isinstance(address, ipaddress.IPv6Address) else str(address)
        netloc = f"[{self.host}]" if isinstance(self.address, ipaddress.IPv6Address) else self.host
        default = (self.scheme, self.port) in (("http", 80), ("https", 443))
        headers = {"Host": netloc if default else f"{netloc}:{self.port}"}
        extensions: dict[str, Any] = {}
        if self.scheme == "https" and self.address is None:
            extensions["sni_hostname"] = self.host  # TLS name and certificate check use the host name
        return f"{self.scheme}://{ip}:{self.port}{self.path}", headers, extensions


def _checked_addresses(
    target: _Target, names: frozenset[str], networks: tuple[Any, ...], deadline: float, timeout: float
) -> list[IPAddress]:
    """The target's addresses, all checked; raises ``BlockedURLError`` if any is not allowed."""
    allowed_by_name = target.address is None and target.host in names
    if target.address is not None:
        addresses = [target.address]
    else:
        if not allowed_by_name and (target.host in _BLOCKED_NAMES or target.host.endswith(_BLOCKED_SUFFIXES)):
            raise BlockedURLError(
                f"{target.url}: refused: {target.host} is a local or cloud-metadata host name "
                f"(allow it with allow_hosts or {ALLOW_HOSTS_ENV})"
            )
        addresses = _resolve(target, deadline, timeout)
    if allowed_by_name:
        return addresses
    for address in addresses:
        if any(address.version == net.version and address in net for net in networks):
            continue
        why = check_address(address)
        if why:
            what = str(address) if target.address is not None else f"{target.host} resolves to {address}, which"
            raise BlockedURLError(
                f"{target.url}: refused: {what} is {why} (allow it with allow_hosts or {ALLOW_HOSTS_ENV})"
            )
    return addresses


def _resolve(target: _Target, deadline: float, timeout: float) -> list[IPAddress]:
    """Resolve the host once, within the deadline (getaddrinfo itself has no timeout)."""
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["infos"] = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
        except BaseException as exc:  # handed to the calling thread
            result["error"] = exc

    worker = threading.Thread(target=run, name="bunko-resolve", daemon=True)
    worker.start()
    worker.join(max(0.0, deadline - time.monotonic()))
    if worker.is_alive():
        raise FetchError(f"{target.url}: timed out resolving {target.host} after {timeout:g} s")
    error = result.get("error")
    if isinstance(error, (OSError, UnicodeError)):
        raise FetchError(f"{target.url}: cannot resolve {target.host} ({error})") from error
    if error is not None:
        raise error
    addresses: list[IPAddress] = []
    for family, _, _, _, sockaddr in result.get("infos", []):
        if family not in (socket.AF_INET, socket.AF_INET6):
            continue
        try:
            address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        except ValueError:
            continue
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise FetchError(f"{target.url}: {target.host} has no IP address")
    return addresses


# --- documents -----------------------------------------------------------------------------------


def _url_metadata(response: FetchedResponse) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "source": response.url,
        "requested_url": response.requested_url,
        "source_type": "url",
    }
    name = unquote(urlsplit(response.url).path.rstrip("/").rsplit("/", 1)[-1])
    if name:
        metadata["filename"] = name
    metadata["filesize"] = len(response.body)
    metadata["mime_type"] = response.mime_type
    metadata["fetched_at"] = response.fetched_at
    metadata["created_at"] = _http_date(response.headers.get("last-modified")) or response.fetched_at
    metadata["language"] = _header_language(response.headers.get("content-language")) or "und"
    return metadata


def _http_date(value: str | None) -> str | None:
    if not value:
        return None
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _header_language(value: str | None) -> str | None:
    tag = (value or "").split(",")[0].strip()
    if re.match(r"^[A-Za-z]{2,3}(?:$|[-_])", tag):
        return re.split(r"[-_]", tag)[0].lower()
    return None


def _decode_text(response: FetchedResponse) -> str:
    from .html import codec_for

    raw = response.body
    if raw.startswith(b"\xef\xbb\xbf"):
        return raw[3:].decode("utf-8", errors="replace")
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return raw.decode("utf-16", errors="replace")
    declared = codec_for(response.charset)
    if declared:
        try:
            return raw.decode(declared)
        except UnicodeDecodeError:
            pass
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        pass
    from charset_normalizer import from_bytes

    best = from_bytes(raw[:200_000]).best()
    if best is not None and best.encoding:
        try:
            return raw.decode(codec_for(best.encoding) or best.encoding)
        except (UnicodeDecodeError, LookupError):
            pass
    if declared:
        return raw.decode(declared, errors="replace")
    raise EncodingDetectionError(f"{response.url}: cannot tell the text encoding of the response")


_MD_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _text_document(response: FetchedResponse, metadata: dict[str, Any]) -> Document:
    if b"\x00" in response.body[:8192] and not response.body.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise LoaderError(f"{response.url}: looks like binary data, not {response.mime_type}")
    text = _decode_text(response)
    mime = response.mime_type
    if mime == "application/json" or mime.endswith("+json"):
        try:
            json.loads(text)
        except ValueError as exc:
            raise CorruptDocumentError(f"{response.url}: not valid JSON ({exc})") from exc
        metadata["kind"] = "json"
    elif mime in ("text/markdown", "text/x-markdown"):
        metadata["kind"] = "markdown"
        heading = _MD_HEADING.search(text)
        if heading:
            metadata["title"] = heading.group(1)
    else:
        metadata["kind"] = "text"
    if not text.strip():
        raise LoaderError(f"{response.url}: the response is empty")
    if metadata.get("language") in (None, "", "und"):
        metadata["language"] = detect_language(text)
    return Document(content=text, metadata=metadata)


def _load_pdf(response: FetchedResponse, metadata: dict[str, Any], options: LoadOptions) -> list[Document]:
    from . import load_path

    with tempfile.TemporaryDirectory(prefix="bunko-url-") as folder:
        path = Path(folder) / "download.pdf"
        path.write_bytes(response.body)
        try:
            documents = load_path(path, options)
        except ImportError as exc:
            raise LoaderError(f"{response.url}: PDF loading is not available ({exc})") from exc
        except LoaderError as exc:  # name the URL, not the temporary file
            message = exc.message.replace(str(path.resolve()), response.url).replace(str(path), response.url)
            raise type(exc)(message) from exc
    for document in documents:
        for key in ("filename", "created_at"):
            document.metadata.pop(key, None)
        language = document.metadata.get("language")
        document.metadata.update(metadata)
        if language and language != "und":
            document.metadata["language"] = language
        document.metadata["kind"] = "pdf"
    return documents
