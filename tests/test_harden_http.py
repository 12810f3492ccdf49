"""The HTTP API under attack (issue 13): bodies before keys, NUL characters, search logs between users.

A real uvicorn serves ``create_app`` in a thread of the test process over a real store (both stores),
so the test can count exactly how many body bytes the app ever read.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.served import Served, problem, serve

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

MIB = 1024 * 1024


@pytest.fixture(params=["sqlite", "postgresql"])
def served(request: pytest.FixtureRequest, tmp_path: Path, embedder: object) -> Iterator[Served]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else f"sqlite:///{tmp_path / 'h.db'}"
    with serve(url, embedder, max_upload_mb=1, max_json_mb=1, rate_limit=0) as live:
        yield live


def _raw(port: int, head: str, body: bytes) -> tuple[int, bytes]:
    """Send a request head and part of its body over a socket; return the status and the answer read."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        s.sendall(head.encode("latin-1"))
        try:
            s.sendall(body)
        except OSError:  # the server answered and closed first: fine
            pass
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
        if b"content-length:" in answer.lower():
            length = int(answer.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            while len(answer.split(b"\r\n\r\n", 1)[1]) < length:
                chunk = s.recv(65536)
                if not chunk:
                    break
                answer += chunk
    status = int(answer.split(b" ", 2)[1]) if answer else 0
    return status, answer


# -- finding 0: the key before the body, a small limit on every JSON body ---------------------------
@pytest.mark.parametrize("path", ["/api/v1/search/hybrid", "/api/v1/collections/c/vectors",
                                  "/api/v1/documents/upload"])
def test_a_huge_body_without_a_key_is_refused_before_it_is_read(served: Served, path: str) -> None:
    """300 MB announced, 256 KiB sent: the answer comes without the body, and the app read none of it."""
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {300 * MIB}\r\n\r\n")
    status, answer = _raw(served.port, head, b"{" + b" " * (256 * 1024))
    assert status == 401, answer[:300]
    assert b"application/problem+json" in answer and b"UNAUTHENTICATED" in answer
    bad_key = head.replace("Host: x\r\n", "Host: x\r\nAuthorization: Bearer bk_" + "x" * 43 + "\r\n")
    status, answer = _raw(served.port, bad_key, b"{" + b" " * (256 * 1024))
    assert status == 401 and b"INVALID_API_KEY" in answer
    chunked = head.replace(f"Content-Length: {300 * MIB}", "Transfer-Encoding: chunked")
    status, _ = _raw(served.port, chunked, b"40000\r\n" + b" " * 0x40000 + b"\r\n")
    assert status == 401
    assert served.counter.read == 0


def test_a_json_body_over_the_limit_is_413_for_a_valid_key(served: Served) -> None:
    key = served.key("acme")
    head = (f"POST /api/v1/search/hybrid HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {300 * MIB}\r\n\r\n")
    status, answer = _raw(served.port, head, b"{" + b" " * (256 * 1024))
    assert status == 413 and b"PAYLOAD_TOO_LARGE" in answer and b"application/problem+json" in answer
    assert served.counter.read == 0
    with served.client(key) as client:
        # No Content-Length: refused once the bytes read pass the limit (1 MiB here), not at the end.
        def chunks() -> Iterator[bytes]:
            yield b'{"query": "' + b"a" * (512 * 1024)
            for _ in range(8):
                yield b"a" * (512 * 1024)
            yield b'"}'

        problem(client.post("/api/v1/search/hybrid", content=chunks(),
                             headers={"content-type": "application/json"}), 413, "PAYLOAD_TOO_LARGE")
        assert served.counter.read <= 2 * MIB
        # Within the limit everything works as before.
        found = client.post("/api/v1/search/keyword", json={"query": "水"})
        assert found.status_code == 200 and found.json()["results"] == []
        upload = client.post("/api/v1/documents/upload?wait=true",
                             files={"file": ("a.txt", "非常食は三日分を目安に備蓄します。".encode())})
        assert upload.status_code == 200 and upload.json()["status"] == "completed", upload.text
        problem(client.post("/api/v1/documents/upload", files={"file": ("b.txt", b"x" * (3 * MIB))}), 413,
                 "PAYLOAD_TOO_LARGE")


# -- finding 4: NUL characters answered 422 with the field named, on both stores ---------------------
def test_nul_characters_are_422_naming_the_field(served: Served) -> None:
    with served.client(served.key("acme")) as client:
        for spec, where in ([{"tag": "a\x00b"}, "tag"], [{"tag": {"$in": ["x", "\x00"]}}, "tag"],
                            [{"$or": [{"a.b": {"$ne": "\x00"}}, {"c": 1}]}, "a.b"]):
            body = problem(client.post("/api/v1/search/hybrid", json={"query": "水", "filter": spec}), 422,
                            "INVALID_FILTER")
            assert any(where in p["path"] and "NUL" in p["message"] for p in body["problems"]), body
        for form, where in (({"tags": "ok,bad\x00tag"}, "tags"), ({"tags": '["a", "b\\u0000"]'}, "tags"),
                            ({"metadata": json.dumps({"description": "x\x00"})}, "description"),
                            ({"metadata": json.dumps({"tags": ["\x00"]})}, "tags"),
                            ({"description": "desc\x00"}, "description"), ({"category": "c\x00"}, "category")):
            body = problem(client.post("/api/v1/documents/upload", data=form,
                                        files={"file": ("n.txt", "備蓄の手引き".encode())}), 422, "VALIDATION_ERROR")
            assert where in body["detail"] and "NUL" in body["detail"], body
        body = problem(client.post("/api/v1/collections/c/vectors", json={
            "records": [{"content": "x", "metadata": {"k": ["ok", {"deep": "\x00"}]}}]}), 422, "VALIDATION_ERROR")
        assert "metadata.k[1].deep" in body["detail"], body
        # An unpaired surrogate (a JSON escape with no character behind it) is refused the same way.
        body = problem(client.post("/api/v1/collections/c/vectors", headers={"content-type": "application/json"},
                                   content=b'{"records": [{"content": "x", "metadata": {"k": "a\\udc00"}}]}'),
                       422, "VALIDATION_ERROR")
        assert "metadata.k" in body["detail"] and "surrogate" in body["detail"], body
        assert client.get("/api/v1/documents").json()["totalCount"] == 0  # nothing was stored


# -- finding 11: a user key sees its own search log; an admin key the tenant's -----------------------
def test_search_logs_are_per_user_for_user_keys(served: Served) -> None:
    alice, bob = served.client(served.key("acme", "alice")), served.client(served.key("acme", "bob"))
    admin, service = served.client(served.key("acme", "root", admin=True)), served.client(served.key("acme"))
    other = served.client(served.key("globex", "alice", admin=True))
    with alice, bob, admin, service, other:
        for client in (service, other):  # a collection to search in each tenant
            done = client.post("/api/v1/documents/upload?wait=true", files={"file": ("a.txt", "備蓄の手引き".encode())})
            assert done.status_code == 200 and done.json()["status"] == "completed", done.text
        assert alice.post("/api/v1/search/keyword", json={"query": "alice の秘密の質問"}).status_code == 200
        assert bob.post("/api/v1/search/keyword", json={"query": "bob の質問"}).status_code == 200
        assert other.post("/api/v1/search/keyword", json={"query": "globex の質問"}).status_code == 200

        def queries(client: httpx.Client) -> set[str]:
            response = client.get("/api/v1/search/logs")
            assert response.status_code == 200, response.text
            return {entry["query"] for entry in response.json()["logs"]}

        assert queries(alice) == {"alice の秘密の質問"}
        assert queries(bob) == {"bob の質問"}
        assert queries(admin) == queries(service) == {"alice の秘密の質問", "bob の質問"}
        assert queries(other) == {"globex の質問"}


# -- finding 2: a zip bomb upload is refused at once ------------------------------------------------
def test_a_docx_bomb_upload_is_413_before_any_job(served: Served, tmp_path: Path) -> None:
    from .test_harden_archives import make_docx

    bomb = make_docx(tmp_path / "report.docx", 200 * MIB)  # ~200 KB on the wire, under the 1 MiB upload limit
    with served.client(served.key("acme")) as client, bomb.open("rb") as f:
        body = problem(client.post("/api/v1/documents/upload", files={"file": (bomb.name, f)}), 413,
                        "ARCHIVE_TOO_LARGE")
        assert "report.docx" in body["detail"] and str(tmp_path) not in body["detail"]
        assert client.get("/api/v1/documents").json()["totalCount"] == 0
