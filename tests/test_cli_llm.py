"""``bunko ask`` with an LLM, streaming, provider errors, ``bunko usage`` and settings precedence.

The LLM is the real OpenAI-compatible client talking to a local fake server on a real socket.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from bunko.cli import cli
from bunko.config import Settings
from bunko.errors import ConfigError

from .conftest import EXAMPLES, ROOT
from .provider_fakes import OpenAIFake, Reply

REPLY = "水は最低3日分、できれば1週間分を備えます[1]。"


@pytest.fixture()
def fake() -> Iterator[OpenAIFake]:
    with OpenAIFake(reply_text=REPLY) as server:
        yield server


@pytest.fixture(scope="module")
def ingested(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A store with the sample documents, built once; tests copy it."""
    folder = tmp_path_factory.mktemp("cli-llm")
    db = f"sqlite:///{folder / 'base.db'}"
    result = CliRunner().invoke(cli, ["--db", db, "ingest", str(EXAMPLES), "-c", "bousai", "--json"],
                                env={"BUNKO_HOME": str(folder / "home")}, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return str(folder / "base.db")


@pytest.fixture()
def db(ingested: str, tmp_path: Path) -> str:
    import shutil

    target = tmp_path / "cli.db"
    shutil.copy(ingested, target)
    return f"sqlite:///{target}"


def run(db: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--db", db, *args], env=env, catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def llm_args(server: OpenAIFake) -> list[str]:
    return ["--llm", "openai-compatible:test-model", "--base-url", server.url + "/v1"]


def test_ask_with_an_llm_returns_its_answer_sources_and_usage(db: str, fake: OpenAIFake) -> None:
    code, out, err = run(db, "ask", "水は何日分備蓄すればいいですか？", "-c", "bousai", *llm_args(fake),
                         "--temperature", "0.5", "--max-tokens", "77", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["answer"] == REPLY and data["model"] == "test-model" and not data["extractive"]
    assert [s["index"] for s in data["sources"]] == [1]
    assert data["sources"][0]["metadata"]["filename"] and data["sources"][0]["excerpt"]
    assert data["usage"]["input_tokens"] > 0 and data["usage"]["output_tokens"] > 0
    body = fake.requests_to("/chat/completions")[0].json
    assert (body["model"], body["temperature"], body["max_tokens"]) == ("test-model", 0.5, 77)
    assert "[1] (" in body["messages"][-1]["content"]

    code, out, _ = run(db, "usage", "--json")
    rows = {(r["operation"], r["provider"]): r for r in json.loads(out)["usage"]}
    assert code == 0 and rows[("llm", "openai-compatible")]["input_tokens"] == data["usage"]["input_tokens"]
    assert rows[("search", "sqlite")]["calls"] == 1 and rows[("embedding", "use")]["items"] >= 1
    code, out, _ = run(db, "usage", "--tenant", "someone-else", "--json")
    assert code == 0 and json.loads(out)["usage"] == []
    code, out, _ = run(db, "usage", "--since", "1h")
    lines = out.splitlines()
    assert code == 0 and lines[0].startswith("usage of tenant 'default' since ")
    assert {"llm", "search", "upsert"} <= set(out.split())
    code, _, err = run(db, "usage", "--since", "yesterday-ish")
    assert code == 2 and "7d, 24h" in err


def test_system_prompt_flag_and_plain_output(db: str, fake: OpenAIFake) -> None:
    code, out, err = run(db, "ask", "水は？", "-c", "bousai", *llm_args(fake), "--system-prompt", "Be brief. Cite [N].")
    assert code == 0, err
    assert out.startswith(REPLY) and "Sources" in out and "[1]" in out
    assert fake.requests_to("/chat/completions")[0].json["messages"][0]["content"] == "Be brief. Cite [N]."


def test_stream_json_prints_one_event_per_line(db: str, fake: OpenAIFake) -> None:
    code, out, err = run(db, "ask", "水は何日分？", "-c", "bousai", *llm_args(fake), "--stream", "--json")
    assert code == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[:3] == ["search_start", "search_results", "generation_start"] and kinds[-1] == "done"
    assert kinds.count("citation") == 1 and kinds.count("token") > 3
    assert "".join(e["content"] for e in events if e["type"] == "token") == REPLY
    assert events[-1]["response"]["answer"] == REPLY


def test_stream_prints_tokens_before_the_stream_ends(db: str, fake: OpenAIFake, tmp_path: Path) -> None:
    fake.stream_pieces = ["水は最低", "3日分", "を備えます", "[1]。"]
    fake.stream_gate_after = 3  # the role frame and two pieces, then the server waits
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "BUNKO_HOME": str(tmp_path / "home")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "bunko", "--db", db, "ask", "水は？", "-c", "bousai", *llm_args(fake), "--stream"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
    )
    seen = b""
    try:
        deadline = time.monotonic() + 90
        while "3日分".encode() not in seen and time.monotonic() < deadline and proc.poll() is None:
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                seen += os.read(proc.stdout.fileno(), 4096)
        # The first tokens are on the terminal while the server still holds the rest of the answer.
        assert seen.decode() == "水は最低3日分", proc.stderr.read().decode() if proc.poll() is not None else seen
        assert fake.holding.wait(5) and proc.poll() is None
    finally:
        fake.release.set()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    text = (seen + out).decode()
    assert text.startswith("水は最低3日分を備えます[1]。\n") and "Sources" in text


def test_extractive_stays_the_default(db: str, fake: OpenAIFake) -> None:
    code, out, _ = run(db, "ask", "水は何日分備蓄すればいいですか？", "-c", "bousai", "--json")
    data = json.loads(out)
    assert code == 0 and data["extractive"] and data["model"] == "extractive" and data["sources"]
    code, out, _ = run(db, "ask", "水は何日分備蓄すればいいですか？", "-c", "bousai", "--stream")
    assert code == 0 and "抽出型の回答" in out and "Sources" in out
    assert fake.requests == []


@pytest.mark.parametrize(
    ("replies", "env", "expected"),
    [
        ([Reply(429, json={"error": {"message": "Rate limit reached for requests"}},
                headers={"Retry-After": "0"})] * 5, {}, "HTTP 429"),
        ([Reply(500, json={"error": {"message": "The server had an error"}})], {"BUNKO_LLM_MAX_RETRIES": "0"},
         "HTTP 500"),
        ([Reply(delay=2.0, json={})], {"BUNKO_LLM_MAX_RETRIES": "0", "BUNKO_LLM_TIMEOUT": "0.5"},
         "no answer within 0.5s"),
    ],
    ids=["429-exhausted", "500", "timeout"],
)
def test_provider_errors_are_one_clear_line(db: str, fake: OpenAIFake, replies: list[Reply], env: dict[str, str],
                                            expected: str) -> None:
    for stream in ([], ["--stream"]):
        fake.fail(*replies)
        code, out, err = run(db, "ask", "水は？", "-c", "bousai", *llm_args(fake), *stream, env=env)
        assert code == 1
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], err
        assert "Traceback" not in err + out
    fake.fail(*replies)
    code, out, _ = run(db, "ask", "水は？", "-c", "bousai", *llm_args(fake), "--stream", "--json", env=env)
    last = json.loads(out.splitlines()[-1])
    assert code == 1 and last["type"] == "error" and expected in last["error"]["message"]
    assert last["error"]["type"].startswith("LLM")


def test_a_collection_keeps_its_embedder(db: str, fake: OpenAIFake) -> None:
    code, out, err = run(db, "ask", "水は？", "-c", "bousai", "--embedder", "openai-compatible:emb-1",
                         env={"BUNKO_EMBEDDER_BASE_URL": fake.url + "/v1"})
    assert code == 1 and err.count("\n") == 1
    assert "EmbedderMismatch" not in err and "built with use:" in err and "openai-compatible:emb-1" in err
    code, out, _ = run(db, "search", "水", "-c", "bousai", "--json", "--embedder", "openai-compatible:emb-1",
                       env={"BUNKO_EMBEDDER_BASE_URL": fake.url + "/v1"})
    assert code == 1 and json.loads(out)["error"]["type"] == "EmbedderMismatchError"
    # Refused before the query is embedded (the provider may probe its dimension; that is all).
    assert all("水" not in r.body.decode() for r in fake.requests)


# -- settings: flags > env > file > defaults --------------------------------------------------------
def test_config_file_env_and_flags_in_order(db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with OpenAIFake(api_key="sk-from-the-file", reply_text=REPLY) as server:
        monkeypatch.chdir(tmp_path)
        (tmp_path / "bunko.toml").write_text(
            f'[llm]\nmodel = "openai-compatible:file-model"\nbase_url = "{server.url}/v1"\n'
            'api_key = "sk-from-the-file"\ntemperature = 0.7\nmax_tokens = 300\n', encoding="utf-8")
        code, out, err = run(db, "ask", "水は？", "-c", "bousai", "--json")
        assert code == 0, err
        body = server.requests_to("/chat/completions")[-1].json
        assert (body["model"], body["temperature"], body["max_tokens"]) == ("file-model", 0.7, 300)
        assert server.requests[-1].headers["authorization"] == "Bearer sk-from-the-file"

        code, _, _ = run(db, "ask", "水は？", "-c", "bousai", env={"BUNKO_TEMPERATURE": "0.9"})
        assert code == 0 and server.requests_to("/chat/completions")[-1].json["temperature"] == 0.9
        code, out, err = run(db, "ask", "水は？", "-c", "bousai", "--temperature", "0.2",
                             env={"BUNKO_TEMPERATURE": "0.9", "BUNKO_LLM": "openai-compatible:env-model"})
        body = server.requests_to("/chat/completions")[-1].json
        assert code == 0 and (body["model"], body["temperature"]) == ("env-model", 0.2)
        assert "sk-from-the-file" not in out + err

        other = tmp_path / "other.toml"
        other.write_text("[llm]\ntemperature = 5\n", encoding="utf-8")
        code, out, err = run(db, "--config", str(other), "ask", "水は？", "-c", "bousai")
        assert code == 1 and "other.toml [llm] temperature = 5: must be from 0 to 2" in err


def test_settings_resolve_and_hide_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert Settings.resolve().llm.spec is None  # no file, no env: extractive
    config = tmp_path / "bunko.toml"
    config.write_text('[embedder]\nmodel = "openai:text-embedding-3-small"\napi_key = "sk-emb-secret"\n'
                      '[llm]\nmodel = "openai-compatible:m"\ncontext_tokens = 2000\nhistory_turns = 0\n',
                      encoding="utf-8")
    monkeypatch.setenv("BUNKO_LLM_API_KEY", "sk-llm-secret")
    settings = Settings.resolve()
    assert settings.config_path == config and settings.embedder == "openai:text-embedding-3-small"
    assert (settings.llm.context_tokens, settings.llm.history_turns) == (2000, 0)
    assert settings.llm.client_options() == {"api_key": "sk-llm-secret"}
    assert "secret" not in repr(settings)
    assert Settings.resolve(embedder="use").embedder == "use"
    config.write_text("[llm]\nmodle = 'x'\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"unknown setting \[llm\] modle"):
        Settings.resolve()
    config.write_text("[llm\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid TOML"):
        Settings.resolve()
    with pytest.raises(ConfigError, match="does not exist"):
        Settings.resolve(config=tmp_path / "missing.toml")
    config.unlink()
    monkeypatch.setenv("BUNKO_MAX_TOKENS", "lots")
    with pytest.raises(ConfigError, match="BUNKO_MAX_TOKENS = 'lots'"):
        Settings.resolve()
