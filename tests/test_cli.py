"""The CLI: JSON shapes, exit codes, one-line errors, and tenant isolation from the command line."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bunko.cli import cli

from .conftest import EXAMPLES


@pytest.fixture()
def db(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'cli.db'}"


def run(db: str, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--db", db, *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def run_json(db: str, *args: str) -> tuple[int, dict]:
    code, out, _ = run(db, *args, "--json")
    return code, json.loads(out)


def test_ingest_search_ask_json_shapes(db: str) -> None:
    code, data = run_json(db, "ingest", str(EXAMPLES), "--collection", "bousai")
    assert code == 0
    assert data["documents"] == 6 and data["chunks"] > 6 and data["errors"] == []

    code, data = run_json(db, "search", "非常用持ち出し袋", "-c", "bousai", "--top-k", "3")
    assert code == 0 and len(data["results"]) == 3 and isinstance(data["search_time_ms"], float)
    assert set(data["results"][0]) == {"chunk_id", "document_id", "source", "content", "score", "metadata"}

    code, data = run_json(db, "ask", "水は何日分備蓄すればいいですか？", "-c", "bousai")
    assert code == 0
    assert {"answer", "sources", "model", "usage"} <= set(data)
    cited = [int(n) for n in dict.fromkeys(re.findall(r"\[(\d+)\]", data["answer"]))]
    assert cited and [s["index"] for s in data["sources"]] == cited
    for source in data["sources"]:
        assert {"index", "document_id", "source", "chunk_id", "score", "excerpt", "metadata"} <= set(source)
        assert Path(source["source"]).parent == EXAMPLES

    code, data = run_json(db, "documents", "list", "-c", "bousai")
    assert code == 0 and len(data["documents"]) == 6
    assert set(data["documents"][0]) == {"id", "source", "chunks", "metadata", "name", "version"}

    code, data = run_json(db, "collections")
    assert code == 0 and [c["name"] for c in data["collections"]] == ["bousai"]
    assert data["collections"][0]["dimension"] == 512


def test_search_restricted_by_document_id(db: str) -> None:
    run(db, "ingest", str(EXAMPLES))
    _, docs = run_json(db, "documents", "list")
    ids = {Path(d["source"]).name: d["id"] for d in docs["documents"]}
    wanted = [ids["hinan.md"], ids["bichiku.txt"]]
    args = ["search", "earthquake", "-k", "10"]
    for doc_id in wanted:
        args += ["--document-id", doc_id]
    code, data = run_json(db, *args)
    assert code == 0 and len(data["results"]) == 10
    assert {r["document_id"] for r in data["results"]} <= set(wanted)


def test_errors_are_one_line_and_typed(db: str, tmp_path: Path) -> None:
    code, out, err = run(db, "search", "x", "--collection", "missing")
    assert code == 1 and out == ""
    assert err.strip().count("\n") == 0 and "missing" in err and "Traceback" not in err
    code, data = run_json(db, "search", "x", "--collection", "missing")
    assert code == 1 and data["error"]["type"] == "CollectionNotFoundError"

    bad = tmp_path / "binary.txt"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00" + bytes(range(256)))
    code, data = run_json(db, "ingest", str(bad), str(EXAMPLES / "bichiku.txt"))
    assert code == 1
    assert data["documents"] == 1  # the good file still goes in
    assert [e["type"] for e in data["errors"]] == ["EncodingDetectionError"]
    assert "binary" in data["errors"][0]["message"]

    code, data = run_json(db, "ingest", str(tmp_path / "nope.md"))
    assert code == 1 and data["error"]["type"] == "LoaderError"

    code, _, err = run(db, "search", "x", "--top-k", "0")
    assert code == 2  # usage error from the option's range
    code, data = run_json(db, "documents", "delete", "no-such-id")
    assert code == 1 and data == {"deleted": 0, "missing": 1}


def test_folder_walk_reports_skipped_files(db: str, tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "a.md").write_text("# A\n\n本文です。", encoding="utf-8")
    (folder / "b.bin").write_bytes(b"\x00\x01 binary")
    (folder / ".hidden.md").write_text("secret", encoding="utf-8")
    code, data = run_json(db, "ingest", str(folder))
    assert code == 0 and data["documents"] == 1
    assert [Path(s["path"]).name for s in data["skipped"]] == ["b.bin"]


def test_tenants_are_isolated_from_the_cli(db: str) -> None:
    run(db, "ingest", str(EXAMPLES / "bichiku.txt"), "--tenant", "alpha", "-c", "shared")
    run(db, "ingest", str(EXAMPLES / "emergency-kit.md"), "--tenant", "beta", "-c", "shared")
    _, alpha_docs = run_json(db, "documents", "list", "--tenant", "alpha", "-c", "shared")
    alpha_id = alpha_docs["documents"][0]["id"]

    _, beta_docs = run_json(db, "documents", "list", "--tenant", "beta", "-c", "shared")
    assert [Path(d["source"]).name for d in beta_docs["documents"]] == ["emergency-kit.md"]
    _, hits = run_json(db, "search", "水の備蓄", "--tenant", "beta", "-c", "shared", "-k", "20")
    assert all(Path(h["source"]).name == "emergency-kit.md" for h in hits["results"])
    _, hits = run_json(db, "search", "水", "--tenant", "beta", "-c", "shared", "--document-id", alpha_id)
    assert hits["results"] == []
    _, answer = run_json(db, "ask", "水は何日分備蓄すればいいですか？", "--tenant", "beta", "-c", "shared")
    assert all(Path(s["source"]).name == "emergency-kit.md" for s in answer["sources"])
    code, data = run_json(db, "documents", "delete", alpha_id, "--tenant", "beta")
    assert code == 1 and data["deleted"] == 0
    _, still = run_json(db, "documents", "list", "--tenant", "alpha", "-c", "shared")
    assert [d["id"] for d in still["documents"]] == [alpha_id]
    _, gamma = run_json(db, "collections", "--tenant", "gamma")
    assert gamma == {"collections": []}


def test_console_script_runs_in_a_fresh_process(tmp_path: Path) -> None:
    env = {**os.environ, "BUNKO_HOME": str(tmp_path / "home")}
    ingest = subprocess.run([sys.executable, "-m", "bunko", "ingest", str(EXAMPLES), "--json"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert ingest.returncode == 0, ingest.stderr
    assert (tmp_path / "home" / "bunko.db").exists()  # the default store lives under BUNKO_HOME
    ask = subprocess.run([sys.executable, "-m", "bunko", "ask", "What should I pack in a go-bag?"],
                         capture_output=True, text=True, env=env, timeout=300)
    assert ask.returncode == 0, ask.stderr
    assert "extractive answer" in ask.stdout and re.search(r"\[1\]", ask.stdout)
    assert "Sources" in ask.stdout


def test_the_analyzer_is_chosen_at_ingest_and_fixed(db: str) -> None:
    code, data = run_json(db, "ingest", str(EXAMPLES / "bichiku.txt"), "-c", "kw", "--analyzer", "sudachi")
    assert code == 0 and data["errors"] == []
    code, data = run_json(db, "collections")
    assert [(c["name"], c["analyzer"]) for c in data["collections"]] == [("kw", "sudachi")]
    code, data = run_json(db, "search", "備蓄", "-c", "kw", "--mode", "keyword")
    assert code == 0 and data["results"]

    code, out, err = run(db, "ingest", str(EXAMPLES), "-c", "kw", "--analyzer", "bigram")
    assert code == 1 and out == "" and "Traceback" not in err
    assert "'sudachi' analyzer" in err and "'bigram'" in err
    code, data = run_json(db, "ingest", str(EXAMPLES), "-c", "kw", "--analyzer", "bigram")
    assert code == 1 and data["error"]["type"] == "AnalyzerMismatchError"
    code, data = run_json(db, "ingest", str(EXAMPLES), "-c", "other", "--analyzer", "kuromoji")
    assert code == 1 and data["error"]["type"] == "ConfigError" and "unknown analyzer" in data["error"]["message"]
    code, data = run_json(db, "documents", "list", "-c", "kw")
    assert code == 0 and len(data["documents"]) == 1  # the refused ingests wrote nothing
