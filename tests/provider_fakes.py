"""Local HTTP servers that speak the hosted providers' wire formats, for tests (no internet).

Each fake is a real ``ThreadingHTTPServer`` on 127.0.0.1 in a background thread:

* it records every request (method, path, query, headers, JSON body) in ``requests``;
* it answers like the real API, in the shapes the providers document;
* ``fail(*replies)`` queues scripted answers (a 429 with ``Retry-After``, a 500, a slow
  answer for timeouts, malformed JSON, a dropped connection) that are served, in order,
  before normal answers resume;
* streaming answers are sent with chunked transfer encoding and flushed event by event.
  ``gate_after=n`` holds the stream after n events until the test calls ``release.set()``
  (``holding`` is set meanwhile), which proves the client saw the first events before the
  server had sent the rest.

Usage::

    with OpenAIFake(api_key="sk-test") as server:
        server.fail(Reply(429, json={...}, headers={"Retry-After": "0"}))
        llm = OpenAICompatibleChat("m", base_url=server.url + "/v1", api_key="sk-test")
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class Reply:
    """One scripted answer."""

    status: int = 200
    json: Any = None
    body: bytes | None = None  # raw bytes instead of JSON (malformed bodies)
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0  # seconds to wait before answering (timeouts)
    sse: list[str] | None = None  # SSE frames, each ending with a blank line
    gate_after: int | None = None  # hold the stream after this many frames until ``release`` is set
    frame_delay: float = 0.0
    drop: bool = False  # close the connection without any answer


@dataclass
class RecordedRequest:
    """What the server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]  # lower-cased names
    body: bytes

    @property
    def json(self) -> Any:
        """The body parsed as JSON."""
        return json.loads(self.body.decode("utf-8"))


Handler = Callable[[RecordedRequest], Reply]


def sse_frame(data: Any, event: str | None = None) -> str:
    """One Server-Sent Event: optional ``event:`` line, a ``data:`` line, a blank line."""
    payload = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return (f"event: {event}\n" if event else "") + f"data: {payload}\n\n"


def fake_vector(text: str, dimension: int) -> list[float]:
    """A deterministic unit vector for ``text`` (same text, same vector)."""
    seed = hashlib.sha256(text.encode("utf-8")).digest()
    values = [((seed[i % len(seed)] + 31 * i) % 97) / 97.0 - 0.5 for i in range(dimension)]
    norm = math.sqrt(sum(v * v for v in values)) or 1.0
    return [v / norm for v in values]


def count_tokens(text: str) -> int:
    """A stand-in token count: whitespace words, or characters for text without spaces (Japanese)."""
    words = text.split()
    return len(words) if len(words) > 1 else len(text)



class _Server(ThreadingHTTPServer):
    """A client that resets its connection (the fault tests' proxy does) is no error of the fake's: it
    would only print a traceback into the test run."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

class FakeServer:
    """A routed HTTP server with a fault queue and a request log."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self.routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self.faults: deque[Reply] = deque()
        self.release = threading.Event()
        self.holding = threading.Event()  # set while a stream is held at its gate
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- scripting -------------------------------------------------------------------------------

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        """Answer ``method`` requests whose path fully matches the regex ``pattern`` with ``handler``."""
        self.routes.append((method, re.compile(pattern), handler))

    def fail(self, *replies: Reply) -> None:
        """Serve these replies to the next requests, in order, before normal answers."""
        self.faults.extend(replies)

    def requests_to(self, path_part: str) -> list[RecordedRequest]:
        """The recorded requests whose path contains ``path_part``."""
        return [r for r in self.requests if path_part in r.path]

    # -- lifecycle -------------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` of the running server."""
        assert self._server is not None, "the server is not running"
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> FakeServer:
        """Start serving on a free port."""
        server = _Server(("127.0.0.1", 0), _make_handler(self))
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and free the port."""
        self.release.set()  # let held streams finish
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- dispatch --------------------------------------------------------------------------------

    def _answer(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self.faults:
                return self.faults.popleft()
        for method, pattern, handler in self.routes:
            if method == request.method and pattern.fullmatch(request.path):
                return handler(request)
        return Reply(404, json={"error": {"message": f"no route for {request.method} {request.path}"}})


def _make_handler(fake: FakeServer) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
            return

        def _handle(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            parts = urlsplit(self.path)
            request = RecordedRequest(self.command, parts.path, parse_qs(parts.query),
                                      {k.lower(): v for k, v in self.headers.items()}, body)
            reply = fake._answer(request)
            try:
                self._send(reply)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout tests)
                self.close_connection = True

        def _send(self, reply: Reply) -> None:
            if reply.delay:
                time.sleep(reply.delay)
            if reply.drop:
                self.close_connection = True
                self.connection.close()
                return
            self.send_response(reply.status)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if reply.sse is not None:
                self.send_header("content-type", "text/event-stream; charset=utf-8")
                self.send_header("transfer-encoding", "chunked")
                self.send_header("cache-control", "no-cache")
                self.end_headers()
                for position, frame in enumerate(reply.sse):
                    if reply.gate_after is not None and position == reply.gate_after:
                        fake.holding.set()
                        fake.release.wait(10)
                        fake.holding.clear()
                    if reply.frame_delay:
                        time.sleep(reply.frame_delay)
                    data = frame.encode("utf-8")
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
                return
            if reply.body is not None:
                data = reply.body
                content_type = reply.headers.get("content-type", "application/json")
            else:
                data = json.dumps(reply.json if reply.json is not None else {}, ensure_ascii=False).encode()
                content_type = "application/json"
            if "content-type" not in {k.lower() for k in reply.headers}:
                self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        do_POST = _handle
        do_GET = _handle

    return _Handler


def _bearer_ok(request: RecordedRequest, api_key: str | None) -> bool:
    return api_key is None or request.headers.get("authorization") == f"Bearer {api_key}"


# -- OpenAI and OpenAI-compatible ----------------------------------------------------------------


def openai_error(message: str, type_: str = "invalid_request_error", code: str | None = None) -> dict[str, Any]:
    """An OpenAI error body."""
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


class OpenAIFake(FakeServer):
    """``/v1/embeddings`` and ``/v1/chat/completions`` as OpenAI (and vLLM, Ollama, llama.cpp) answer them.

    ``dimension`` is the native embedding size (shortened by a ``dimensions`` parameter);
    ``reply_text`` is what the chat model says, streamed in ``stream_pieces``.
    """

    def __init__(self, *, api_key: str | None = None, dimension: int = 8, reply_text: str = "東京です[1]。",
                 stream_pieces: Iterable[str] | None = None, prefix: str = "/v1") -> None:
        super().__init__()
        self.api_key = api_key
        self.dimension = dimension
        self.reply_text = reply_text
        self.stream_pieces = list(stream_pieces) if stream_pieces is not None else None
        self.stream_gate_after: int | None = None  # hold streams after this many events until ``release``
        self.route("POST", f"{prefix}/embeddings", self._embeddings)
        self.route("POST", f"{prefix}/chat/completions", self._chat)

    def _unauthorized(self) -> Reply:
        return Reply(401, json=openai_error("Incorrect API key provided: sk-wr***ng. You can find your API key at "
                                            "https://platform.openai.com/account/api-keys.",
                                            code="invalid_api_key"))

    def _embeddings(self, request: RecordedRequest) -> Reply:
        if not _bearer_ok(request, self.api_key):
            return self._unauthorized()
        body = request.json
        inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
        dimension = int(body.get("dimensions") or self.dimension)
        data = [{"object": "embedding", "index": i, "embedding": fake_vector(text, dimension)}
                for i, text in enumerate(inputs)]
        data.reverse()  # the API does not promise order; clients must sort by index
        tokens = sum(count_tokens(t) for t in inputs)
        return Reply(json={"object": "list", "data": data, "model": body["model"],
                           "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    def _pieces(self) -> list[str]:
        if self.stream_pieces is not None:
            return self.stream_pieces
        text = self.reply_text
        return [text[i : i + 3] for i in range(0, len(text), 3)]

    def _chat(self, request: RecordedRequest) -> Reply:
        if not _bearer_ok(request, self.api_key):
            return self._unauthorized()
        body = request.json
        prompt_tokens = sum(count_tokens(m["content"]) for m in body["messages"])
        text = "".join(self._pieces())
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(self._pieces()),
                 "total_tokens": prompt_tokens + len(self._pieces())}
        if not body.get("stream"):
            return Reply(json={
                "id": "chatcmpl-123", "object": "chat.completion", "created": 1700000000, "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                             "logprobs": None, "finish_reason": "stop"}],
                "usage": usage,
            })
        base = {"id": "chatcmpl-123", "object": "chat.completion.chunk", "created": 1700000000,
                "model": body["model"], "system_fingerprint": "fp_test"}
        frames = [sse_frame({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                                   "finish_reason": None}]})]
        for piece in self._pieces():
            frames.append(sse_frame({**base, "choices": [{"index": 0, "delta": {"content": piece},
                                                           "finish_reason": None}]}))
        frames.append(sse_frame({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}))
        if (body.get("stream_options") or {}).get("include_usage"):
            frames.append(sse_frame({**base, "choices": [], "usage": usage}))
        frames.append(sse_frame("[DONE]"))
        return Reply(sse=frames, gate_after=self.stream_gate_after)


def _rerank_scores(query: str, documents: list[str]) -> list[tuple[int, float]]:
    """Scores by shared characters with the query (deterministic), best first."""
    wanted = set(query)
    scored = [(i, round(len(wanted & set(d)) / (len(wanted) or 1), 6)) for i, d in enumerate(documents)]
    return sorted(scored, key=lambda item: (-item[1], item[0]))


# -- Anthropic -----------------------------------------------------------------------------------


def anthropic_error(type_: str, message: str) -> dict[str, Any]:
    """An Anthropic error body."""
    return {"type": "error", "error": {"type": type_, "message": message}}


class AnthropicFake(FakeServer):
    """``POST /v1/messages`` as Anthropic answers it, streaming with named SSE events."""

    def __init__(self, *, api_key: str | None = None, reply_text: str = "東京です[1]。") -> None:
        super().__init__()
        self.api_key = api_key
        self.reply_text = reply_text
        self.route("POST", "/v1/messages", self._messages)

    def _messages(self, request: RecordedRequest) -> Reply:
        if self.api_key is not None and request.headers.get("x-api-key") != self.api_key:
            return Reply(401, json=anthropic_error("authentication_error", "invalid x-api-key"))
        if not request.headers.get("anthropic-version"):
            return Reply(400, json=anthropic_error("invalid_request_error", "anthropic-version header is required"))
        body = request.json
        roles = [m["role"] for m in body["messages"]]
        if roles[0] != "user" or any(a == b for a, b in itertools.pairwise(roles)) or "system" in roles:
            return Reply(400, json=anthropic_error("invalid_request_error", "messages: roles must alternate"))
        input_tokens = sum(count_tokens(m["content"]) for m in body["messages"]) + count_tokens(body.get("system", "x"))
        pieces = [self.reply_text[i : i + 4] for i in range(0, len(self.reply_text), 4)]
        message = {"id": "msg_01", "type": "message", "role": "assistant", "model": body["model"],
                   "stop_sequence": None}
        if not body.get("stream"):
            return Reply(json={**message, "content": [{"type": "text", "text": self.reply_text}],
                               "stop_reason": "end_turn",
                               "usage": {"input_tokens": input_tokens, "output_tokens": len(pieces)}})
        frames = [
            sse_frame({"type": "message_start", "message": {**message, "content": [], "stop_reason": None,
                                                            "usage": {"input_tokens": input_tokens,
                                                                      "output_tokens": 1}}}, "message_start"),
            sse_frame({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                      "content_block_start"),
            sse_frame({"type": "ping"}, "ping"),
        ]
        for piece in pieces:
            frames.append(sse_frame({"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "text_delta", "text": piece}}, "content_block_delta"))
        frames += [
            sse_frame({"type": "content_block_stop", "index": 0}, "content_block_stop"),
            sse_frame({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                       "usage": {"output_tokens": len(pieces)}}, "message_delta"),
            sse_frame({"type": "message_stop"}, "message_stop"),
        ]
        return Reply(sse=frames)


# -- Gemini --------------------------------------------------------------------------------------


def gemini_error(code: int, status: str, message: str) -> dict[str, Any]:
    """A Google API error body."""
    return {"error": {"code": code, "message": message, "status": status}}


class GeminiFake(FakeServer):
    """``/v1beta/models/{model}:batchEmbedContents``, ``:generateContent`` and ``:streamGenerateContent?alt=sse``."""

    def __init__(self, *, api_key: str | None = None, dimension: int = 3072, reply_text: str = "東京です[1]。") -> None:
        super().__init__()
        self.api_key = api_key
        self.dimension = dimension
        self.reply_text = reply_text
        self.route("POST", r"/v1beta/models/[^:/]+:batchEmbedContents", self._embed)
        self.route("POST", r"/v1beta/models/[^:/]+:generateContent", self._generate)
        self.route("POST", r"/v1beta/models/[^:/]+:streamGenerateContent", self._generate)

    def _denied(self, request: RecordedRequest) -> Reply | None:
        if self.api_key is not None and request.headers.get("x-goog-api-key") != self.api_key:
            return Reply(400, json=gemini_error(400, "INVALID_ARGUMENT",
                                                "API key not valid. Please pass a valid API key."))
        return None

    def _embed(self, request: RecordedRequest) -> Reply:
        denied = self._denied(request)
        if denied:
            return denied
        requests = request.json["requests"]
        if len(requests) > 100:
            return Reply(400, json=gemini_error(400, "INVALID_ARGUMENT", "at most 100 requests can be in one batch"))
        model = request.path.split("/")[-1].split(":")[0]
        embeddings = []
        for item in requests:
            if item["model"] != f"models/{model}":
                return Reply(400, json=gemini_error(400, "INVALID_ARGUMENT", "model mismatch in batch"))
            text = "".join(p["text"] for p in item["content"]["parts"])
            size = int(item.get("outputDimensionality") or self.dimension)
            # Like the real API, shortened vectors are not normalised (scaled by 3 to make that visible).
            embeddings.append({"values": [3 * v for v in fake_vector(item.get("taskType", "") + text, size)]})
        return Reply(json={"embeddings": embeddings})

    def _generate(self, request: RecordedRequest) -> Reply:
        denied = self._denied(request)
        if denied:
            return denied
        body = request.json
        prompt = sum(count_tokens(p["text"]) for c in body["contents"] for p in c["parts"])
        pieces = [self.reply_text[i : i + 4] for i in range(0, len(self.reply_text), 4)]

        def chunk(text: str, final: bool) -> dict[str, Any]:
            candidate: dict[str, Any] = {"content": {"parts": [{"text": text}], "role": "model"}, "index": 0}
            if final:
                candidate["finishReason"] = "STOP"
            usage = {"promptTokenCount": prompt, "candidatesTokenCount": len(pieces) if final else 1,
                     "totalTokenCount": prompt + len(pieces), "thoughtsTokenCount": 2}
            return {"candidates": [candidate], "usageMetadata": usage, "modelVersion": "gemini-2.5-flash-001",
                    "responseId": "r1"}

        if request.path.endswith(":generateContent"):
            return Reply(json=chunk(self.reply_text, True))
        if request.query.get("alt") != ["sse"]:
            return Reply(json=[chunk(self.reply_text, True)])  # without alt=sse the API sends a JSON array
        frames = [sse_frame(chunk(p, i == len(pieces) - 1)) for i, p in enumerate(pieces)]
        return Reply(sse=[f.replace("\n\n", "\r\n\r\n") for f in frames])  # Google ends events with CRLF


# -- Cohere, Voyage, Jina ------------------------------------------------------------------------


class CohereFake(FakeServer):
    """``POST /v2/embed`` and ``POST /v2/rerank`` as Cohere answers them."""

    def __init__(self, *, api_key: str | None = None, dimension: int = 1024) -> None:
        super().__init__()
        self.api_key = api_key
        self.dimension = dimension
        self.route("POST", "/v2/embed", self._embed)
        self.route("POST", "/v2/rerank", self._rerank)

    def _embed(self, request: RecordedRequest) -> Reply:
        if not _bearer_ok(request, self.api_key):
            return Reply(401, json={"message": "invalid api token"})
        body = request.json
        if body.get("input_type") not in ("search_document", "search_query", "classification", "clustering"):
            return Reply(400, json={"message": "invalid request: input_type is required for v3+ models"})
        if len(body["texts"]) > 96:
            return Reply(400, json={"message": "invalid request: total number of texts must be at most 96"})
        size = int(body.get("output_dimension") or self.dimension)
        vectors = [fake_vector(body["input_type"] + t, size) for t in body["texts"]]
        tokens = sum(count_tokens(t) for t in body["texts"])
        return Reply(json={"id": "e1", "embeddings": {"float": vectors}, "texts": body["texts"],
                           "meta": {"api_version": {"version": "2"}, "billed_units": {"input_tokens": tokens}},
                           "response_type": "embeddings_by_type"})

    def _rerank(self, request: RecordedRequest) -> Reply:
        if not _bearer_ok(request, self.api_key):
            return Reply(401, json={"message": "invalid api token"})
        body = request.json
        scores = _rerank_scores(body["query"], body["documents"])[: body.get("top_n") or None]
        return Reply(json={"id": "r1", "results": [{"index": i, "relevance_score": s} for i, s in scores],
                           "meta": {"api_version": {"version": "2"}, "billed_units": {"search_units": 1}}})


class VoyageFake(FakeServer):
    """``POST /v1/embeddings`` and ``POST /v1/rerank`` as Voyage AI answers them."""

    def __init__(self, *, api_key: str | None = None, dimension: int = 1024) -> None:
        super().__init__()
        self.api_key = api_key
        self.dimension = dimension
        self.route("POST", "/v1/embeddings", self._embed)
        self.route("POST", "/v1/rerank", self._rerank)

    def _embed(self, request: RecordedRequest) -> Reply:
        if not _bearer_ok(request, self.api_key):
            return Reply(401, json={"detail": "Provided API key is invalid."})
        body = request.json
        size = int(body.get("output_dimension") or self.dimension)
        data = [{"object": "embedding", "embedding": fake_vector(str(body.get("input_type")) + t, size), "index": i}
                for i, t in enumerate(body["input"])]
        tokens = sum(count_tokens(t) for t in body["input"])
        return Reply(json={"object": "list", "data": data, "model": body["model"], "usage": {"total_tokens": tokens}})

    def _rerank(self, request: RecordedRequest) -> Reply:
        if not _bearer_ok(request, self.api_key):
            return Reply(401, json={"detail": "Provided API key is invalid."})
        body = request.json
        scores = _rerank_scores(body["query"], body["documents"])[: body.get("top_k") or None]
        tokens = count_tokens(body["query"]) * len(body["documents"]) + sum(count_tokens(d) for d in body["documents"])
        return Reply(json={"object": "list", "data": [{"relevance_score": s, "index": i} for i, s in scores],
                           "model": body["model"], "usage": {"total_tokens": tokens}})


class JinaFake(FakeServer):
    """``POST /v1/rerank`` as Jina AI answers it."""

    def __init__(self, *, api_key: str | None = None) -> None:
        super().__init__()
        self.api_key = api_key
        self.route("POST", "/v1/rerank", self._rerank)

    def _rerank(self, request: RecordedRequest) -> Reply:
        if not _bearer_ok(request, self.api_key):
            return Reply(401, json={"detail": "Unauthorized"})
        body = request.json
        scores = _rerank_scores(body["query"], body["documents"])[: body.get("top_n") or None]
        results = [{"index": i, "relevance_score": s} for i, s in scores]
        if body.get("return_documents", True):
            for item in results:
                item["document"] = {"text": body["documents"][item["index"]]}
        tokens = sum(count_tokens(d) for d in body["documents"])
        return Reply(json={"model": body["model"], "usage": {"total_tokens": tokens}, "results": results})
