"""Everyday commands on both stores: progress on any output, failed ingests remembered (and isolated),
collections and tenants deleted, one document shown, JSON Lines records told apart, --log-level, and
--help in plain words.

CLI tests run the real ``bunko`` command group (and, for progress on a pipe, the real ``python -m
bunko`` process) against SQLite and, where storage is touched, PostgreSQL.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import numpy as np
import pytest
from click.testing import CliRunner
from rich.console import Console

from bunko.cli import cli
from bunko.errors import CollectionNotFoundError, NotFoundError
from bunko.progress import Reporter
from bunko.stores import ChunkWrite, DocumentWrite, StoreBackend, open_backend
from bunko.stores.service import Job, service_records
from bunko.types import ConversationTurn, EmbedderInfo, IngestFailure, UsageEvent

from .conftest import EXAMPLES, FIXTURES

EMBEDDER = EmbedderInfo("test", "unit", 4)


@pytest.fixture()
def url(store_url: str) -> str:
    return store_url


@pytest.fixture()
def backend(store_backend: StoreBackend) -> StoreBackend:
    return store_backend  # both stores (the conftest's plain ``backend`` is SQLite only)


def run(url: str, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--db", url, *args], catch_exceptions=False, env=env)
    return result.exit_code, result.stdout, result.stderr


def run_json(url: str, *args: str) -> tuple[int, dict]:
    code, out, err = run(url, *args, "--json")
    assert out, err
    return code, json.loads(out)


def _failure(collection: str, source: str, message: str = "broken") -> IngestFailure:
    return IngestFailure(collection, source, "CorruptDocumentError", "CORRUPT_DOCUMENT", message)


def _document(doc_id: str, text: str) -> DocumentWrite:
    return DocumentWrite(doc_id, f"{doc_id}.txt", "h-" + doc_id, {"filename": f"{doc_id}.txt"},
                         [ChunkWrite(doc_id + "-c0", text, 0, 0, len(text), 3)], np.ones((1, 4), dtype=np.float32))


# -- progress ------------------------------------------------------------------------------------------
def test_progress_writes_lines_when_not_a_terminal_and_nothing_when_quiet() -> None:
    out = io.StringIO()
    console = Console(file=out, width=200)
    assert not console.is_terminal
    with Reporter(console, interval=0) as progress:
        progress.note("Loading the embedder")  # no count: plain output stays silent
        progress.start("ingest", unit="files")
        progress.set_total(4)
        for i in range(4):
            progress.advance(failed=i == 2)
    lines = out.getvalue().splitlines()
    assert lines[:4] == [line for line in lines[:4] if line.startswith("ingest: ")]
    assert lines[0].startswith("ingest: 1/4 files (25%), ") and "elapsed" in lines[0]
    assert lines[2].startswith("ingest: 3/4 files (75%), 1 failed, ")
    assert re.fullmatch(r"ingest: 4/4 files, 1 failed, [\d.]+ files/s, done in \d+ s", lines[-1]), lines[-1]
    assert len(lines) == 5

    quiet = io.StringIO()
    with Reporter(Console(file=quiet), quiet=True, interval=0) as progress:
        progress.start("ingest", 3, unit="files")
        progress.advance(3)
    assert quiet.getvalue() == ""

    # On a terminal: a live bar, removed at the end, and no plain lines.
    screen = io.StringIO()
    with Reporter(Console(file=screen, force_terminal=True, width=100), interval=0) as progress:
        progress.note("Loading the embedder")
        progress.start("ingest", 2, unit="files")
        progress.describe("a.txt")
        progress.advance(2)
    assert "ingest" in screen.getvalue() and "ingest: " not in screen.getvalue() and progress.lines_written == 0

    # A long interval: a short run writes no progress at all (scripts see only their results).
    short = io.StringIO()
    with Reporter(Console(file=short), interval=3600) as progress:
        progress.start("export", unit="records")
        progress.update(10)
    assert short.getvalue() == ""


def test_progress_lines_keep_coming_while_nothing_finishes() -> None:
    """One large file holds the work up: the timer still writes lines, naming the file."""
    import time

    out = io.StringIO()
    with Reporter(Console(file=out, width=200), interval=0.05) as progress:
        progress.start("ingest", 5, unit="files")
        progress.describe("big.pdf")
        waited = 0.0
        while out.getvalue().count("\n") < 2 and waited < 600:  # no completion, no advance: only the timer
            time.sleep(0.05)
            waited += 0.05
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3, lines
    assert all(line.startswith("ingest: 0/5 files (0%), ") and line.endswith(", at big.pdf") for line in lines[:2])
    assert lines[-1].startswith("ingest: 0/5 files, done in")


def test_ingest_progress_reaches_a_pipe_and_quiet_silences_it(tmp_path: Path) -> None:
    """The real command with stderr piped (not a terminal): periodic progress lines, none with --quiet."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1] / "src"), "BUNKO_PROGRESS_SECONDS": "0"}
    env.pop("BUNKO_DEBUG", None)
    db = f"sqlite:///{tmp_path / 'pipe.db'}"
    command = [sys.executable, "-m", "bunko", "--db", db, "ingest", str(EXAMPLES), "-c", "piped"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("ingest: ")]
    files = len([p for p in EXAMPLES.iterdir() if p.suffix in (".md", ".txt")])
    assert len(lines) == files + 1, done.stderr  # one per file at interval 0, and the last one
    assert lines[0].startswith(f"ingest: 1/{files} files")
    assert lines[-1].startswith(f"ingest: {files}/{files} files, ") and "done in" in lines[-1]
    assert "\r" not in done.stderr and "\x1b[" not in done.stderr  # plain lines, no terminal codes

    again = subprocess.run([*command, "--quiet"], capture_output=True, text=True, env=env, timeout=600)
    assert again.returncode == 0, again.stderr
    assert "ingest: " not in again.stderr and f"{files} unchanged" in again.stderr
    # Unchanged files: the per-file word is the summary's word.
    assert again.stdout.count("unchanged ") == files and "skipped" not in again.stdout


# -- failed ingests: stored per tenant, cleared by a later success ------------------------------------
def test_failure_records_are_per_tenant_and_cleared_by_success(backend: StoreBackend) -> None:
    a, b = backend.for_tenant("fail-a"), backend.for_tenant("fail-b")
    a.failures.record("docs", [_failure("docs", "/data/x.pdf"), _failure("docs", "/data/y.pdf")])
    a.failures.record("other", [_failure("other", "/data/x.pdf")])
    assert {(f.collection, f.source) for f in a.failures.list()} == {
        ("docs", "/data/x.pdf"), ("docs", "/data/y.pdf"), ("other", "/data/x.pdf")}
    assert [f.source for f in a.failures.list("other")] == ["/data/x.pdf"]
    # Tenant B never sees tenant A's failures, and its success with the same source clears none of them.
    assert b.failures.list() == [] and b.failures.list("docs") == []
    b.failures.record("docs", [], ["/data/x.pdf", "/data/y.pdf"])
    assert len(a.failures.list()) == 3
    b.failures.record("docs", [_failure("docs", "/data/x.pdf", "b's reason")])
    assert [f.message for f in b.failures.list()] == ["b's reason"]
    assert all(f.message == "broken" for f in a.failures.list())
    # Failing again counts an attempt and keeps the latest reason; a success removes the record.
    a.failures.record("docs", [_failure("docs", "/data/x.pdf", "still broken")])
    again = {f.source: f for f in a.failures.list("docs")}["/data/x.pdf"]
    assert (again.attempts, again.message) == (2, "still broken") and again.first_failed_at <= again.failed_at
    a.failures.record("docs", [], ["/data/x.pdf"])
    assert [f.source for f in a.failures.list("docs")] == ["/data/y.pdf"]
    assert [f.source for f in a.failures.list("other")] == ["/data/x.pdf"]  # another collection's stays
    # Deleting a collection forgets its failures; erasing a tenant forgets all of them.
    a.ensure_collection("docs", EMBEDDER)
    a.delete_collection("docs")
    assert [(f.collection, f.source) for f in a.failures.list()] == [("other", "/data/x.pdf")]
    erasure = service_records(backend).erase_tenant(a)
    assert erasure.ingest_failures == 1 and a.failures.list() == []
    assert [f.message for f in b.failures.list()] == ["b's reason"]


def _tenant_rows(url: str, backend: StoreBackend, tenant_pk: int) -> dict[str, int]:
    """Rows per table that carry this tenant id, read past row security (SQLite file, PostgreSQL superuser)."""
    if backend.scheme == "sqlite":
        import sqlite3
        from contextlib import closing

        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
                      if "tenant_id" in {c[1] for c in conn.execute(f"PRAGMA table_info({r[0]})")}]
            counts = {t: conn.execute(f"SELECT count(*) FROM {t} WHERE tenant_id = ?", (tenant_pk,)).fetchone()[0]
                      for t in tables}
            counts["tenants"] = conn.execute("SELECT count(*) FROM tenants WHERE id = ?", (tenant_pk,)).fetchone()[0]
        return counts
    import psycopg

    with psycopg.connect(url) as conn:
        tables = [r[0] for r in conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = 'bunko' "
            "AND column_name = 'tenant_id'")]
        counts = {t: conn.execute(f"SELECT count(*) FROM bunko.{t} WHERE tenant_id = %s",  # type: ignore[call-overload]
                                  (tenant_pk,)).fetchone()[0] for t in tables}
        counts["tenants"] = conn.execute("SELECT count(*) FROM bunko.tenants WHERE id = %s", (tenant_pk,)).fetchone()[0]
    return counts


def _fill(backend: StoreBackend, tenant: str) -> int:
    """Data of every kind in ``tenant``; returns its row id."""
    records = service_records(backend)
    records.create_tenant(tenant)
    store = backend.for_tenant(tenant)
    store.ensure_collection("docs", EMBEDDER)
    store.write_documents("docs", [_document(f"{tenant}-d1", "one"), _document(f"{tenant}-d2", "two")])
    store.usage.record([UsageEvent("embedding", "test", "unit", 3, 0, 1.0)], [("q", 1, 1.0, "hybrid")],
                       user_id="alice")
    store.conversations.append("t:chat", [ConversationTurn("user", "hello")])
    records.create_job(store, Job(f"{tenant}-job", "docs", "a.txt", user_id="alice"))
    store.failures.record("docs", [_failure("docs", "/data/bad.pdf")])
    memories = store.memories()  # type: ignore[attr-defined]
    from bunko.stores.sql.memory import MemoryWrite

    memories.ensure_store("default", EMBEDDER, "bigram")
    memories.add("default", [MemoryWrite(f"{tenant}-m1", "alice", "s1", "fact", None, "2026-01-01T00:00:00Z",
                                         "likes tea", {})], np.ones((1, 4), dtype=np.float32))
    records.create_api_key(tenant, "alice")
    with store.session() as (_, tenant_pk):  # type: ignore[attr-defined]
        return int(tenant_pk)


def test_deleting_a_tenant_erases_every_row_of_it_and_nothing_else(url: str, backend: StoreBackend) -> None:
    gone, kept = _fill(backend, "gone"), _fill(backend, "kept")
    before = _tenant_rows(url, backend, gone)
    assert before["ingest_failures"] == 1 and before["documents"] == 2 and before["memories"] == 1
    assert sum(before.values()) >= 12
    kept_before = _tenant_rows(url, backend, kept)
    records = service_records(backend)
    listed = {t.name: t for t in records.list_tenants()}
    assert (listed["gone"].collections, listed["gone"].documents, listed["gone"].api_keys) == (1, 2, 1)

    erasure = records.delete_tenant("gone")
    assert (erasure.documents, erasure.collections, erasure.jobs, erasure.api_keys, erasure.ingest_failures,
            erasure.memories) == (2, 1, 1, 1, 1, 1)
    assert all(count == 0 for count in _tenant_rows(url, backend, gone).values()), _tenant_rows(url, backend, gone)
    assert _tenant_rows(url, backend, kept) == kept_before
    assert records.list_api_keys("gone") == [] and len(records.list_api_keys("kept")) == 1
    assert [t.name for t in records.list_tenants()] == ["kept"]
    assert not records.tenant_exists("gone")
    with pytest.raises(NotFoundError, match="'gone' does not exist"):
        records.delete_tenant("gone")


# -- the commands, on both stores ------------------------------------------------------------------------
def test_failed_ingests_are_listed_until_the_file_goes_in(url: str, tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    shutil.copy(FIXTURES / "guide_ja.md", folder / "guide_ja.md")
    (folder / "report.pdf").write_bytes(b"%PDF-1.4 cut off in the middle")
    code, out, err = run(url, "ingest", str(folder), "-c", "docs", "-t", "acme")
    assert code == 1 and "1 new, 0 updated, 0 unchanged, 1 failed" in err and "documents list --failed" in err

    code, data = run_json(url, "documents", "list", "--failed", "-t", "acme")
    assert code == 0 and len(data["failed"]) == 1
    failure = data["failed"][0]
    assert (failure["collection"], Path(failure["source"]).name, failure["error_type"], failure["attempts"]) == (
        "docs", "report.pdf", "CorruptDocumentError", 1)
    code, out, _ = run(url, "documents", "list", "--failed", "-t", "acme")
    assert code == 0 and "report.pdf" in out and "CorruptDocumentError" in out
    # Another tenant, and another collection, see none of it.
    assert run_json(url, "documents", "list", "--failed", "-t", "other")[1] == {"failed": []}
    assert run_json(url, "documents", "list", "--failed", "-t", "acme", "-c", "elsewhere")[1] == {"failed": []}

    run(url, "ingest", str(folder), "-c", "docs", "-t", "acme")  # fails again: one more attempt
    assert run_json(url, "documents", "list", "--failed", "-t", "acme")[1]["failed"][0]["attempts"] == 2
    shutil.copy(FIXTURES / "bousai_ja.pdf", folder / "report.pdf")  # fixed
    code, out, err = run(url, "ingest", str(folder), "-c", "docs", "-t", "acme")
    assert code == 0, err
    assert "1 new, 0 updated, 1 unchanged, 0 failed" in err
    assert re.search(r"^unchanged guide_ja\.md", out, re.M) and re.search(r"^new +report\.pdf", out, re.M)
    assert run_json(url, "documents", "list", "--failed", "-t", "acme")[1] == {"failed": []}

    # A broken file removed from a folder that is ingested again is forgotten; one elsewhere is kept.
    (folder / "gone.pdf").write_bytes(b"%PDF-1.4 broken")
    elsewhere = tmp_path / "elsewhere.pdf"
    elsewhere.write_bytes(b"%PDF-1.4 broken too")
    assert run(url, "ingest", str(folder), str(elsewhere), "-c", "docs", "-t", "acme")[0] == 1
    assert {Path(f["source"]).name for f in run_json(url, "documents", "list", "--failed", "-t", "acme")[1][
        "failed"]} == {"gone.pdf", "elsewhere.pdf"}
    (folder / "gone.pdf").unlink()
    elsewhere.unlink()
    assert run(url, "ingest", str(folder), "-c", "docs", "-t", "acme")[0] == 0
    assert [Path(f["source"]).name for f in run_json(url, "documents", "list", "--failed", "-t", "acme")[1][
        "failed"]] == ["elsewhere.pdf"]


def test_documents_show_and_json_lines_records_told_apart(url: str, tmp_path: Path) -> None:
    manifest = tmp_path / "faq.jsonl"
    rows = [{"title": "Water", "text": "Store three litres of water per person per day."},
            {"title": "Exits", "text": "Know two ways out of every room."},
            {"id": "q-17", "text": "Keep a whistle in the emergency bag."},
            {"text": "Check the batteries of the torch twice a year."}]
    manifest.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    code, _, err = run(url, "ingest", str(manifest), "-c", "faq")
    assert code == 0, err
    code, out, _ = run(url, "documents", "list", "-c", "faq")
    lines = out.splitlines()
    assert len(lines) == 4 and len(set(line.split("  ", 1)[1] for line in lines)) == 4
    assert "faq.jsonl#0 (title Water)" in out and "faq.jsonl#2 (id q-17)" in out and "faq.jsonl#3  (" in out
    _, data = run_json(url, "documents", "list", "-c", "faq")
    assert [d["name"] for d in data["documents"]] == ["faq.jsonl#0 (title Water)", "faq.jsonl#1 (title Exits)",
                                                       "faq.jsonl#2 (id q-17)", "faq.jsonl#3"]
    doc_id = data["documents"][1]["id"]

    code, shown = run_json(url, "documents", "show", doc_id)
    assert code == 0
    assert (shown["id"], shown["collection"], shown["name"], shown["version"], shown["chunks"]) == (
        doc_id, "faq", "faq.jsonl#1 (title Exits)", 1, 1)
    assert shown["source"].endswith("faq.jsonl#1") and shown["metadata"]["title"] == "Exits"
    assert shown["created_at"] and shown["updated_at"] and len(shown["content_hash"]) == 64
    code, out, _ = run(url, "documents", "show", doc_id)
    assert code == 0 and re.search(r"^collection: +faq$", out, re.M) and "  title: Exits" in out
    # Another tenant cannot see it; a wrong collection does not hold it.
    code, data = run_json(url, "documents", "show", doc_id, "-t", "intruder")
    assert code == 1 and data["error"]["type"] == "DocumentNotFoundError"
    code, data = run_json(url, "documents", "show", "no-such-id")
    assert code == 1 and data["error"]["type"] == "DocumentNotFoundError"


def test_collections_delete_asks_and_tenants_list_and_delete(url: str) -> None:
    assert run(url, "ingest", str(FIXTURES / "guide_ja.md"), "-c", "keep", "-t", "acme")[0] == 0
    assert run(url, "ingest", str(FIXTURES / "notes.md"), "-c", "drop", "-t", "acme")[0] == 0
    assert run(url, "ingest", str(FIXTURES / "notes.md"), "-c", "drop", "-t", "globex")[0] == 0

    # Without a terminal and without --yes nothing is deleted.
    code, out, err = run(url, "collections", "delete", "drop", "-t", "acme")
    assert code == 1 and "add --yes" in err and out == ""
    assert [c["name"] for c in run_json(url, "collections", "-t", "acme")[1]["collections"]] == ["drop", "keep"]
    code, data = run_json(url, "collections", "delete", "drop", "-t", "acme", "--yes")
    assert code == 0 and data == {"deleted": True, "collection": "drop", "tenant": "acme", "documents": 1,
                                  "chunks": data["chunks"]} and data["chunks"] > 0
    assert [c["name"] for c in run_json(url, "collections", "list", "-t", "acme")[1]["collections"]] == ["keep"]
    assert [c["name"] for c in run_json(url, "collections", "-t", "globex")[1]["collections"]] == ["drop"]
    code, data = run_json(url, "collections", "delete", "drop", "-t", "acme", "--yes")
    assert code == 1 and data["error"]["type"] == "CollectionNotFoundError"
    # Options given to the group count for the subcommand: this deletes acme's collection, as JSON.
    assert run(url, "ingest", str(FIXTURES / "notes.md"), "-c", "extra", "-t", "acme")[0] == 0
    code, out, _ = run(url, "collections", "-t", "acme", "--json", "delete", "extra", "--yes")
    assert code == 0 and json.loads(out)["tenant"] == "acme"
    assert [c["name"] for c in run_json(url, "collections", "-t", "acme")[1]["collections"]] == ["keep"]

    assert run(url, "admin", "tenants", "create", "empty")[0] == 0
    code, data = run_json(url, "admin", "tenants", "list")
    tenants = {t["name"]: t for t in data["tenants"]}
    assert code == 0 and {"acme", "globex", "empty"} <= set(tenants)
    assert (tenants["acme"]["collections"], tenants["acme"]["documents"]) == (1, 1)
    code, out, err = run(url, "admin", "tenants", "delete", "globex")
    assert code == 1 and "add --yes" in err
    code, data = run_json(url, "admin", "tenants", "delete", "globex", "--yes")
    assert code == 0 and data["deleted"] and data["removed"]["documents"] == 1 and data["removed"]["collections"] == 1
    assert "globex" not in {t["name"] for t in run_json(url, "admin", "tenants", "list")[1]["tenants"]}
    assert run_json(url, "collections", "-t", "globex")[1] == {"collections": []}
    assert [c["name"] for c in run_json(url, "collections", "-t", "acme")[1]["collections"]] == ["keep"]
    code, data = run_json(url, "admin", "tenants", "delete", "globex", "--yes")
    assert code == 1 and data["error"]["type"] == "NotFoundError"


def test_tenant_commands_need_the_owner_login_on_postgresql(pg_url: str) -> None:
    """The application login sees one tenant at a time: listing or deleting tenants is refused, changing nothing."""
    import psycopg

    backend = open_backend(pg_url)
    try:
        _fill(backend, "acme")
    finally:
        backend.close()
    app = f"bunko_api_everyday_{os.getpid()}"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute(f"DROP ROLE IF EXISTS {app}")
        conn.execute(f"CREATE ROLE {app} LOGIN NOSUPERUSER NOBYPASSRLS IN ROLE bunko_app")
    try:
        app_url = re.sub(r"^(postgres(?:ql)?://)[^@/]*@", rf"\g<1>{app}@", pg_url)
        assert app_url != pg_url and app_url.startswith("postgresql://")
        code, data = run_json(app_url, "admin", "tenants", "list")
        assert code == 1 and "owner login" in data["error"]["message"]
        code, data = run_json(app_url, "admin", "tenants", "delete", "acme", "--yes")
        assert code == 1 and "owner login" in data["error"]["message"]
        assert [t["name"] for t in run_json(pg_url, "admin", "tenants", "list")[1]["tenants"]] == ["acme"]
        assert len(run_json(pg_url, "documents", "list", "-c", "docs", "-t", "acme")[1]["documents"]) == 2
    finally:
        with psycopg.connect(pg_url, autocommit=True) as conn:
            conn.execute(f"DROP ROLE IF EXISTS {app}")


# -- options and help ----------------------------------------------------------------------------------
def test_log_level_shows_bunko_logs_on_stderr(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path / 'log.db'}"
    code, _, err = run(db, "ingest", str(FIXTURES / "notes.md"))
    assert code == 0 and "INFO" not in err
    code, _, err = run(db, "--log-level", "info", "ingest", str(FIXTURES / "notes.md"))
    assert code == 0 and re.search(r"^INFO bunko\.ingest: ingest into collection 'default'", err, re.M), err
    code, _, err = run(db, "ingest", str(FIXTURES / "notes.md"), env={"BUNKO_LOG_LEVEL": "info"})
    assert code == 0 and "INFO bunko.ingest" in err
    code, _, err = run(db, "--log-level", "chatty", "collections")
    assert code == 2 and "chatty" in err
    run(db, "--log-level", "warning", "collections")  # leave the process as it was


def _all_help(command: click.Command, path: list[str]) -> Iterator[tuple[str, str]]:
    yield " ".join(path), command.get_help(click.Context(command, info_name=" ".join(path)))
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _all_help(sub, [*path, name])


def test_help_is_in_plain_words() -> None:
    codes = re.compile(r"\bR\d{1,2}\b|\bseed\b|\bseed 0\d\d\b", re.IGNORECASE)
    found = [(where, line.strip()) for where, text in _all_help(cli, ["bunko"]) for line in text.splitlines()
             if codes.search(line)]
    assert found == []
    search_help = dict(_all_help(cli, ["bunko"]))["bunko search"]
    # The README says search is hybrid by default; so does --help.
    assert "are *hybrid* by default" in (Path(__file__).parents[1] / "README.md").read_text(encoding="utf-8")
    assert re.search(r"--mode \[hybrid\|vector\|keyword\]", search_help) and "[default: hybrid]" in search_help


def test_collection_not_found_is_a_typed_error_from_python(tmp_path: Path, embedder: object) -> None:
    from bunko import Bunko

    with Bunko(f"sqlite:///{tmp_path / 'py.db'}", embedder=embedder) as engine:
        acme = engine.tenant("acme")
        acme.ingest([FIXTURES / "notes.md"], "notes")
        deleted = acme.delete_collection("notes")
        assert deleted.name == "notes" and deleted.document_count == 1
        assert acme.collections() == []
        with pytest.raises(CollectionNotFoundError):
            acme.delete_collection("notes")
