"""The settings tree: precedence, secrets, typed errors, the URL loader's allow-list, and `bunko serve` workers."""

from __future__ import annotations

import json
import os
import pickle
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from bunko.config import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_TEMPERATURE,
    SETTINGS,
    PostgresSettings,
    ServerSettings,
    Settings,
)
from bunko.errors import BlockedURLError, ConfigError
from tests.conftest import ROOT


@pytest.fixture(autouse=True)
def _clean(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No BUNKO_* variable from outside, and a working directory of our own (for ./bunko.toml)."""
    for setting in SETTINGS.values():
        monkeypatch.delenv(setting.env, raising=False)
    monkeypatch.delenv("BUNKO_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _toml(text: str, path: Path | None = None) -> Path:
    path = path or Path.cwd() / "bunko.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_defaults_are_the_documented_ones(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    settings = Settings.resolve()
    assert settings.config_path is None and settings.home == tmp_path / "xdg" / "bunko"
    assert (settings.llm.spec, settings.llm.temperature, settings.llm.max_tokens) == (None, 0.1, 1000)
    assert (DEFAULT_TEMPERATURE, DEFAULT_MAX_TOKENS) == (0.1, 1000)
    assert settings.embedder == "use" and settings.embedder_options() == {}
    assert (settings.server.max_upload_bytes, settings.server.rate_limit_per_minute) == (50 * 1024 * 1024, 600)
    assert (settings.server.job_concurrency, settings.server.blas_threads) == (2, 1)
    assert settings.postgres == PostgresSettings() and settings.postgres.ef_search == 400
    assert settings.rerank.base_url is None and settings.fetch.allow_hosts == ()


def test_default_store_is_a_sqlite_file_under_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BUNKO_HOME", str(tmp_path / "data"))
    settings = Settings.resolve()
    assert settings.home == tmp_path / "data"
    assert settings.database_url == f"sqlite:///{tmp_path / 'data' / 'bunko.db'}"
    # A home from a flag moves the default store with it.
    assert Settings.resolve(home=tmp_path / "other").database_url == f"sqlite:///{tmp_path / 'other' / 'bunko.db'}"


@pytest.mark.parametrize(
    ("argument", "env", "table", "key", "values"),
    [
        ("temperature", "BUNKO_TEMPERATURE", "llm", "temperature", (0.7, 0.5, 0.3, DEFAULT_TEMPERATURE)),
        ("max_tokens", "BUNKO_MAX_TOKENS", "llm", "max_tokens", (300, 200, 100, DEFAULT_MAX_TOKENS)),
        ("rate_limit", "BUNKO_RATE_LIMIT", "server", "rate_limit", (30, 20, 10, 600)),
        ("max_upload_mb", "BUNKO_MAX_UPLOAD_MB", "server", "max_upload_mb", (3, 2, 1, 50)),
        ("pg_ef_search", "BUNKO_PG_EF_SEARCH", "postgres", "ef_search", (300, 250, 150, 400)),
        ("rerank_base_url", "BUNKO_RERANK_BASE_URL", "rerank", "base_url",
         ("http://flag", "http://env", "http://file", None)),
        ("embedder_dimensions", "BUNKO_EMBEDDER_DIMENSIONS", "embedder", "dimensions", (64, 32, 16, None)),
    ],
)
def test_flags_beat_environment_beat_file_beat_defaults(
    monkeypatch: pytest.MonkeyPatch, argument: str, env: str, table: str, key: str, values: tuple[object, ...]
) -> None:
    flag, from_env, from_file, default = values
    section = "embedding" if table == "embedder" else table

    def current(**arguments: object) -> object:
        return getattr(getattr(Settings.resolve(**arguments), section), key)

    assert current() == default
    _toml(f"[{table}]\n{key} = {json.dumps(from_file)}\n")
    assert current() == from_file
    monkeypatch.setenv(env, str(from_env))
    assert current() == from_env
    assert current(**{argument: flag}) == flag
    monkeypatch.setenv(env, "")  # blank counts as not set: the file's value shows again
    assert current() == from_file


def test_config_file_from_argument_and_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _toml("[server]\nrate_limit = 1\n")  # ./bunko.toml: used only when no other file is named
    named = _toml("[server]\nrate_limit = 2\n", tmp_path / "named.toml")
    by_env = _toml("[server]\nrate_limit = 3\n", tmp_path / "by-env.toml")
    assert Settings.resolve().server.rate_limit == 1
    monkeypatch.setenv("BUNKO_CONFIG", str(by_env))
    assert (Settings.resolve().server.rate_limit, Settings.resolve().config_path) == (3, by_env)
    resolved = Settings.resolve(config=named)
    assert (resolved.server.rate_limit, resolved.config_path) == (2, named)


def test_server_and_postgres_sections_read_the_tree(monkeypatch: pytest.MonkeyPatch) -> None:
    _toml("[server]\nmax_upload_mb = 5\njob_concurrency = 4\n[postgres]\nef_search = 40\niterative_scan = false\n")
    monkeypatch.setenv("BUNKO_JOB_CONCURRENCY", "3")
    server = ServerSettings.from_env()
    assert (server.max_upload_bytes, server.job_concurrency) == (5 * 1024 * 1024, 3)
    postgres = PostgresSettings.from_env()
    assert (postgres.ef_search, postgres.iterative_scan, postgres.hnsw_m) == (40, False, 16)


def test_secrets_never_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    _toml('[embedder]\nmodel = "openai:text-embedding-3-small"\napi_key = "sk-emb-FILE-SECRET"\n')
    monkeypatch.setenv("BUNKO_LLM_API_KEY", "sk-llm-ENV-SECRET")
    monkeypatch.setenv("BUNKO_DATABASE_URL", "postgresql://bunko:pw-DB-SECRET@db.example/bunko")
    settings = Settings.resolve(llm="openai:gpt-4o-mini")
    shown = [repr(settings), str(settings), settings.model_dump_json(), json.dumps(settings.model_dump(mode="json")),
             repr(settings.llm), str(settings.embedding), repr(settings.store)]
    for text in shown:
        assert "SECRET" not in text
    # ...but the providers and the store get the real values.
    assert settings.llm.client_options() == {"api_key": "sk-llm-ENV-SECRET"}
    assert settings.embedder_options() == {"api_key": "sk-emb-FILE-SECRET"}
    assert settings.database_url == "postgresql://bunko:pw-DB-SECRET@db.example/bunko"
    # A bad key is reported without its value.
    monkeypatch.delenv("BUNKO_LLM_API_KEY")
    _toml("[llm]\napi_key = 12345678\n")
    with pytest.raises(ConfigError) as info:
        Settings.resolve()
    assert "[llm] api_key = (hidden): expected text" in info.value.message and "12345678" not in info.value.message


@pytest.mark.parametrize(
    ("env", "raw", "expected"),
    [
        ("BUNKO_RATE_LIMIT", "-1", "BUNKO_RATE_LIMIT = '-1': must be at least 0"),
        ("BUNKO_MAX_UPLOAD_MB", "big", "BUNKO_MAX_UPLOAD_MB = 'big': expected a whole number"),
        ("BUNKO_TEMPERATURE", "3", "BUNKO_TEMPERATURE = '3': must be from 0 to 2"),
        ("BUNKO_ANONYMIZE_SEARCH_LOGS", "maybe", "BUNKO_ANONYMIZE_SEARCH_LOGS = 'maybe': expected true or false"),
        ("BUNKO_PG_EF_SEARCH", "2000", "BUNKO_PG_EF_SEARCH = '2000': must be from 1 to 1000"),
        ("BUNKO_PG_ITERATIVE_SCAN", "sometimes", "BUNKO_PG_ITERATIVE_SCAN = 'sometimes': expected true or false"),
    ],
)
def test_bad_environment_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, env: str, raw: str, expected: str
) -> None:
    monkeypatch.setenv(env, raw)
    with pytest.raises(ConfigError) as info:
        Settings.resolve()
    assert expected in info.value.message


def test_bad_file_values_and_keys_name_the_key() -> None:
    path = _toml('[server]\nmax_upload_mb = "lots"\n')
    with pytest.raises(ConfigError, match=r"bunko\.toml \[server\] max_upload_mb = 'lots': expected a whole number"):
        Settings.resolve()
    _toml("[store]\nhome = 5\n", path)
    with pytest.raises(ConfigError) as info:
        Settings.resolve()
    assert info.value.message == f"{path} [store] home = 5: expected a path"  # one problem, not its consequences
    _toml("[server]\nmax_uplaod_mb = 3\n", path)
    with pytest.raises(ConfigError, match=r"unknown setting \[server\] max_uplaod_mb; known in \[server\]"):
        Settings.resolve()
    _toml("[servers]\nrate_limit = 3\n", path)
    with pytest.raises(ConfigError, match=r"'servers' is not a settings table"):
        Settings.resolve()
    _toml("[postgres]\nhnsw_m = 24\nhnsw_ef_construction = 40\n", path)
    with pytest.raises(ConfigError, match=r"hnsw_ef_construction must be at least 2 \* hnsw_m \(48\)"):
        Settings.resolve()
    path.unlink()
    with pytest.raises(ConfigError, match=r"--job-concurrency = 0: must be from 1 to 1000"):
        Settings.resolve(job_concurrency=0)
    with pytest.raises(ConfigError, match="unknown setting"):
        Settings.resolve(temprature=0.2)
    with pytest.raises(ConfigError, match="PostgresSettings: ef_search = 0: must be from 1 to 1000"):
        PostgresSettings(ef_search=0)


def test_the_tree_travels_as_data() -> None:
    """What `bunko serve` hands its workers: a pickled tree that keeps its secrets, and arguments that rebuild it."""
    _toml("[fetch]\nallow_hosts = ['10.0.0.0/8', 'intranet.example']\n[llm]\napi_key = 'sk-file'\n")
    settings = Settings.resolve(rate_limit=7, embedder_api_key="sk-arg", rerank_base_url="http://rerank")
    copy = pickle.loads(pickle.dumps(settings))
    assert copy == settings and copy.llm.client_options() == {"api_key": "sk-file"}
    assert copy.embedder_options() == {"api_key": "sk-arg"} and copy.server.rate_limit == 7
    Path("bunko.toml").unlink()  # rebuilt from arguments alone, the file no longer matters
    assert Settings.resolve(**settings.as_arguments()) == settings.model_copy(update={"config_path": None})


# -- the URL loader ---------------------------------------------------------------------------------------------
@pytest.fixture()
def page_url() -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = "設定ファイルで許可されたページです。".encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}/page.txt"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def test_url_loader_allow_list_from_config_file(page_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from bunko.loaders import LoadOptions
    from bunko.loaders.url import load_url

    with pytest.raises(BlockedURLError):
        load_url(page_url, LoadOptions())
    _toml('[fetch]\nallow_hosts = ["192.0.2.1", "127.0.0.0/8"]\n')
    [document] = load_url(page_url, LoadOptions())
    assert "許可されたページ" in document.content
    monkeypatch.setenv("BUNKO_FETCH_ALLOW_HOSTS", "192.0.2.1")  # the variable outranks the file
    with pytest.raises(BlockedURLError):
        load_url(page_url, LoadOptions())


# -- bunko serve --workers 2 ------------------------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _descendants(pid: int) -> list[int]:
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(entry.name))
    return found + [p for child in found for p in _descendants(child)]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/environ").exists(), reason="reads worker environments from /proc")
def test_serve_workers_get_flag_settings_without_environment(tmp_path: Path) -> None:
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    home = tmp_path / "flag-home"
    env = {k: v for k, v in os.environ.items() if not k.startswith("BUNKO_")}
    env.update(PYTHONPATH=str(ROOT / "src"), XDG_DATA_HOME=str(tmp_path / "xdg"))  # never the real default home
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    log = (tmp_path / "serve.log").open("wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "bunko", "--home", str(home), "serve", "--port", str(port), "--workers", "2",
         "--max-upload-mb", "1", "--rate-limit", "2", "--log-level", "warning"],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path,
    )
    try:
        deadline = time.monotonic() + 180  # catches a hang, not a slow machine
        while True:
            try:
                if httpx.get(url + "/readyz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "serve.log").read_text()
            time.sleep(0.3)

        # The workers were told nothing through their environment.
        workers = [p for p in _descendants(proc.pid) if b"bunko" in Path(f"/proc/{p}/cmdline").read_bytes()
                   or b"multiprocessing" in Path(f"/proc/{p}/cmdline").read_bytes()]
        assert len(workers) >= 2
        for pid in workers:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert not [v for v in environ if v.startswith(b"BUNKO_")], pid

        def cli(*args: str) -> dict[str, object]:
            done = subprocess.run([sys.executable, "-m", "bunko", "--home", str(home), *args, "--json"], env=env,
                                  capture_output=True, text=True, timeout=120, cwd=tmp_path)
            assert done.returncode == 0, done.stdout + done.stderr
            return json.loads(done.stdout)

        cli("admin", "tenants", "create", "acme")
        key = cli("admin", "keys", "create", "--tenant", "acme")["api_key"]
        headers = {"Authorization": f"Bearer {key}"}

        # --max-upload-mb 1: a 3 MiB upload is refused, whichever worker takes it (each refusal counts
        # against the key's rate limit too: the key is checked before the body is read).
        for _ in range(2):
            with httpx.Client(base_url=url, headers=headers, timeout=60) as client:  # a new connection each time
                big = client.post("/api/v1/documents/upload", files={"file": ("big.txt", b"x" * (3 * 1024 * 1024))})
            assert big.status_code == 413, big.text

        # --rate-limit 2: the store counts for both workers; a worker without the flag would let more through.
        headers = {"Authorization": f"Bearer {cli('admin', 'keys', 'create', '--tenant', 'acme')['api_key']}"}
        statuses = []
        for _ in range(8):
            with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
                response = client.get("/api/v1/collections")
            statuses.append(response.status_code)
            if response.status_code == 429:
                assert "more than 2 requests" in response.json()["detail"], response.text
        assert statuses.count(200) == 2 and statuses.count(429) == 6, statuses
        assert (home / "bunko.db").exists()  # the store under the --home flag
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def test_serve_refuses_bad_limits_before_starting(tmp_path: Path) -> None:
    pytest.importorskip("uvicorn")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "BUNKO_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, "-m", "bunko", "serve", "--port", str(_free_port()), "--max-upload-mb", "0"],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 1 and "--max-upload-mb = 0: must be from 1 to 1000000" in done.stderr, done.stderr
    env["BUNKO_RATE_LIMIT"] = "fast"
    done = subprocess.run([sys.executable, "-m", "bunko", "serve", "--port", str(_free_port())],
                          env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 1 and "BUNKO_RATE_LIMIT = 'fast': expected a whole number" in done.stderr, done.stderr
