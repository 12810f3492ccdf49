"""Monitoring (R35): Prometheus metrics, request ids, JSON logs and ``bunko stats``.

In-process: the helpers and the provider counter (a 429 counted) against the OpenAI fake.
End to end: ``bunko serve --workers 2`` on the embedded store; every scrape of ``/metrics``, whichever
worker answers it, shows the figures of both workers, and ``bunko stats --json`` shows the same.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import ROOT
from tests.provider_fakes import OpenAIFake, Reply, openai_error

prometheus_client = pytest.importorskip("prometheus_client")
pytest.importorskip("uvicorn")


def _value(text: str, name: str, **labels: str) -> float:
    """The value of one sample in Prometheus text format (0 if absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split("}", 1)[0])) if "{" in line else {}
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def test_the_helpers_record_into_the_exposition() -> None:
    from bunko import metrics

    before, _ = metrics.exposition()
    metrics.observe_search("hybrid", "sqlite", 0.02)
    metrics.count_job("completed")
    metrics.count_cache("hit")
    metrics.count_cache("miss")
    metrics.observe_http("/api/v1/search/hybrid", 200, 0.03)
    after, content_type = metrics.exposition()
    text0, text = before.decode(), after.decode()
    assert content_type.startswith("text/plain")
    for name, labels in (("bunko_search_duration_seconds_count", {"mode": "hybrid", "store": "sqlite"}),
                         ("bunko_jobs_total", {"outcome": "completed"}),
                         ("bunko_cache_requests_total", {"cache": "search_results", "result": "hit"}),
                         ("bunko_http_request_duration_seconds_count",
                          {"route": "/api/v1/search/hybrid", "status": "200"})):
        assert _value(text, name, **labels) == _value(text0, name, **labels) + 1, name


def test_provider_answers_are_counted_by_status_429_included() -> None:
    from bunko import metrics
    from bunko.providers import OpenAIEmbedder
    from bunko.providers._http import RetryPolicy

    def counted(status: str) -> float:
        return _value(metrics.exposition()[0].decode(), "bunko_provider_requests_total", provider="openai",
                      status=status)

    before = {s: counted(s) for s in ("200", "429", "500")}
    with OpenAIFake(api_key="k", dimension=8) as server:
        embedder = OpenAIEmbedder("m", base_url=server.url + "/v1", api_key="k", dimensions=8,
                                  retry=RetryPolicy(backoff_base=0.001, backoff_max=0.01))
        server.fail(Reply(429, json=openai_error("Rate limit", "requests"), headers={"Retry-After": "0"}),
                    Reply(429, json=openai_error("Rate limit", "requests"), headers={"Retry-After": "0"}),
                    Reply(500, json=openai_error("oops", "server_error")))
        assert len(asyncio.run(embedder.embed("東京"))) == 8
    assert counted("429") == before["429"] + 2
    assert counted("500") == before["500"] + 1
    assert counted("200") == before["200"] + 1


def test_json_log_lines_carry_the_request_id() -> None:
    import logging

    from bunko.server.observability import JSONFormatter, request_id

    record = logging.LogRecord("bunko.access", logging.INFO, __file__, 1, "GET %s %d", ("/x", 200), None)
    record.route = "/x"
    token = request_id.set("abc123")
    try:
        line = json.loads(JSONFormatter().format(record))
    finally:
        request_id.reset(token)
    assert line["request_id"] == "abc123" and line["message"] == "GET /x 200" and line["route"] == "/x"
    assert line["level"] == "info" and line["logger"] == "bunko.access" and line["time"].endswith("Z")


# -- end to end: two worker processes -----------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _cli(env: dict[str, str], *args: str) -> Any:
    done = subprocess.run([sys.executable, "-m", "bunko", *args, "--json"], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_two_workers_share_their_metrics_and_bunko_stats_shows_them(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "BUNKO_HOME": str(home), "BUNKO_RATE_LIMIT": "0"}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    _cli(env, "admin", "tenants", "create", "acme")
    key = _cli(env, "admin", "keys", "create", "--tenant", "acme")["api_key"]
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "server.log").open("wb")
    server = subprocess.Popen([sys.executable, "-m", "bunko", "serve", "--port", str(port), "--workers", "2"],
                              env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        ready = 0
        deadline = time.monotonic() + 240  # only catches a hang
        while ready < 10:  # both workers have started once several readiness checks pass in a row
            try:
                ready = ready + 1 if httpx.get(url + "/readyz", timeout=5).status_code == 200 else 0
            except httpx.HTTPError:
                ready = 0
            assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "server.log").read_text()
            time.sleep(0.2)
        headers = {"Authorization": f"Bearer {key}", "X-Request-ID": "probe-1"}
        done = httpx.post(url + "/api/v1/documents/upload?wait=true", headers=headers, timeout=240,
                          files={"file": ("a.txt", "非常食は三日分を目安に備蓄します。".encode())})
        assert done.status_code == 200 and done.json()["status"] == "completed", done.text
        assert done.headers["x-request-id"] == "probe-1"
        for mode in ("semantic", "keyword", "hybrid"):
            assert httpx.post(f"{url}/api/v1/search/{mode}", json={"query": "備蓄"}, headers=headers,
                              timeout=120).status_code == 200
        assert httpx.get(url + "/api/v1/documents", timeout=60).status_code == 401
        assert len(httpx.get(url + "/healthz", timeout=60).headers["x-request-id"]) == 32
        # New connections until both workers have answered some (each writes its own files).
        folder = home / "metrics"
        health = 1
        while len({re.sub(r"\D", "", p.name) for p in folder.glob("*.db")}) < 2:
            assert httpx.get(url + "/healthz", timeout=60).status_code == 200
            health += 1
            assert health < 2000, "one worker answered every request"
        expected_health = health + 10
        for _ in range(10):
            assert httpx.get(url + "/healthz", timeout=60).status_code == 200
        for _ in range(6):  # whichever worker answers, it reports both workers' figures
            text = httpx.get(url + "/metrics", timeout=60).text
            assert _value(text, "bunko_http_request_duration_seconds_count", route="/healthz",
                          status="200") == expected_health
            assert _value(text, "bunko_http_request_duration_seconds_count", route="/api/v1/documents",
                          status="401") == 1
            for mode in ("vector", "keyword", "hybrid"):
                assert _value(text, "bunko_search_duration_seconds_count", mode=mode, store="sqlite") == 1, mode
    finally:
        server.terminate()
        server.wait(60)
        log.close()
    figures = _cli(env, "stats")["metrics"]
    http = {(r["labels"]["route"], r["labels"]["status"]): r["count"]
            for r in figures["bunko_http_request_duration_seconds"]}
    assert http[("/healthz", "200")] == expected_health and http[("/api/v1/documents", "401")] == 1
    searches = {r["labels"]["mode"]: r["count"] for r in figures["bunko_search_duration_seconds"]}
    assert searches == {"vector": 1, "keyword": 1, "hybrid": 1}
    lines = [json.loads(line) for line in (tmp_path / "server.log").read_text().splitlines() if line.startswith("{")]
    access = [line for line in lines if line.get("logger") == "bunko.access" and line.get("request_id") == "probe-1"]
    assert access and access[0]["route"] == "/api/v1/documents/upload" and access[0]["status"] == 200  # waited
