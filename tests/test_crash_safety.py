"""SIGKILL during ingest, at named points, on both stores: nothing half-written survives.

``bunko ingest`` runs in a child process that announces each crash point it reaches and pauses at
the one under test (``bunko.crashpoints``); the test waits for that event -- no wall clock decides
when to kill -- then SIGKILLs it. Every point starts from a collection at version 1 and ingests
version 2 of every file (plus new files), so a kill lands before, inside or after the write
transaction, halfway through the swap of versions, or during the HNSW build (PostgreSQL). Then:

- every document is whole at its old version or whole at its new one (each chunk carries its
  version's marker, the chunk count is the document's);
- no chunk without its document, no keyword row without its chunk;
- the collection's counters equal the rows;
- ingesting again completes and leaves every document at version 2.

The default run tries the points before, inside and after the transaction, the version swap and the
HNSW build; the ``slow`` form adds the others and a run of several write batches killed between them.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from bunko import Bunko
from bunko.stores.sql.postings import unpack

from .conftest import ROOT

MARK = {1: "第一版", 2: "第二版"}


def _write_corpus(folder: Path, version: int, files: int) -> None:
    folder.mkdir(exist_ok=True)
    for i in range(files):
        body = "\n\n".join(f"{MARK[version]}：文書{i}の第{j}段落。地震への備えとして水と食料を備蓄します。"
                           f"Edition {version}, paragraph {j} of file {i}." for j in range(12))
        (folder / f"doc{i:03d}.md").write_text(f"# 文書 {i}（{MARK[version]}）\n\n{body}\n", encoding="utf-8")


def _rows(url: str) -> dict[str, Any]:
    """The stored state, read with plain SQL (the owner / the file itself, not through bunko)."""
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
            q = conn.execute
            # The chunks the keyword postings list: each segment's list of its chunks, less its deleted ones.
            listed: dict[str, set[int]] = {"": set(), " ": set()}
            for term, key, blob in q("SELECT term, segment, entries FROM keyword_postings WHERE term IN ('', ' ')"):
                listed[term].update(unpack(key, blob)[0].tolist())
            posted = listed[""] - listed[" "]
            ids = {r[0] for r in q("SELECT id FROM chunks")}
            return {
                "documents": q("SELECT id, source, version, chunk_count FROM documents").fetchall(),
                "chunks": q("SELECT document_id, content FROM chunks").fetchall(),
                "orphans": q("SELECT count(*) FROM chunks WHERE document_id IS NULL OR document_id NOT IN "
                             "(SELECT id FROM documents)").fetchone()[0],
                "keyword_rows": len(posted),
                "keyword_orphans": len(posted - ids),
                "keyword_tokens": q("SELECT c.keyword_tokens, (SELECT coalesce(sum(CASE WHEN k.terms = '' THEN 0 "
                                    "ELSE length(k.terms) - length(replace(k.terms, ' ', '')) + 1 END), 0) "
                                    "FROM chunks k WHERE k.collection_id = c.id) FROM collections c").fetchall(),
                "counters": q("SELECT document_count, chunk_count FROM collections").fetchall(),
            }
    import psycopg

    with psycopg.connect(url) as conn:
        q = conn.execute
        return {
            "documents": q("SELECT id, source, version, chunk_count FROM bunko.documents").fetchall(),
            "chunks": q("SELECT document_id, content FROM bunko.chunks").fetchall(),
            "orphans": q("SELECT count(*) FROM bunko.chunks c WHERE NOT EXISTS (SELECT 1 FROM bunko.documents d "
                         "WHERE d.tenant_id = c.tenant_id AND d.id = c.document_id)").fetchone()[0],
            "stale_versions": q("SELECT count(*) FROM bunko.chunks c JOIN bunko.documents d ON d.id = c.document_id "
                                "WHERE c.version_id IS DISTINCT FROM d.current_version_id").fetchone()[0],
            "keyword_tokens": q("SELECT c.keyword_tokens, (SELECT coalesce(sum(fts_length), 0) FROM bunko.chunks k "
                                "WHERE k.collection_id = c.id) FROM bunko.collections c").fetchall(),
            "counters": q("SELECT document_count, chunk_count FROM bunko.collections").fetchall(),
        }


def _check_consistent(url: str, files: int) -> dict[int, int]:
    """Assert the invariants; returns how many documents are at each version."""
    state = _rows(url)
    documents = state["documents"]
    assert len(documents) in range(files, files + 3), documents  # v1's files, plus any new ones written
    by_document: dict[int, list[str]] = {}
    for document_id, content in state["chunks"]:
        by_document.setdefault(document_id, []).append(content)
    versions: dict[int, int] = {}
    for pk, source, version, chunk_count in documents:
        chunks = by_document.get(pk, [])
        assert len(chunks) == chunk_count > 0, (source, version, len(chunks), chunk_count)  # whole
        edition = 2 if Path(source).name.startswith("new") else version  # new files exist only in edition 2
        assert all(MARK[edition] in c and MARK[3 - edition] not in c for c in chunks), (source, version)
        versions[edition] = versions.get(edition, 0) + 1
    assert state["orphans"] == 0
    assert state["counters"] == [(len(documents), len(state["chunks"]))]
    if url.startswith("sqlite"):
        assert state["keyword_rows"] == len(state["chunks"]) and state["keyword_orphans"] == 0
    else:
        assert state["stale_versions"] == 0
    assert all(kept == summed for kept, summed in state["keyword_tokens"]), state["keyword_tokens"]
    return versions


def _kill_at(url: str, folder: Path, point: str, tmp_path: Path, **env: str) -> None:
    """Run ``bunko ingest`` in a child, wait until it reaches ``point`` (it pauses there), SIGKILL it."""
    signals = tmp_path / f"points-{point}"
    signals.mkdir()
    child_env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "BUNKO_HOME": str(tmp_path / "home"),
                 "BUNKO_CRASHPOINT_DIR": str(signals), "BUNKO_CRASHPOINT_PAUSE": point, **env}
    proc = subprocess.Popen([sys.executable, "-m", "bunko", "--db", url, "ingest", str(folder), "-c", "c"],
                            env=child_env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    reached = signals / f"{point}.reached"
    deadline = time.monotonic() + 1800  # only catches a hang; the event is what the test waits for
    try:
        while not reached.exists():
            if proc.poll() is not None:
                raise AssertionError(f"the ingest ended without reaching {point}: "
                                     f"{proc.stderr.read().decode(errors='replace')[-3000:]}")  # type: ignore[union-attr]
            assert time.monotonic() < deadline, f"{point} never reached"
            time.sleep(0.02)
        assert proc.poll() is None  # paused at the point
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(60)
        proc.stderr.close()  # type: ignore[union-attr]


def _crash_and_recover(url: str, point: str, tmp_path: Path, embedder: Any, files: int = 6, **env: str) -> dict:
    folder = tmp_path / "docs"
    _write_corpus(folder, 1, files)
    with Bunko(url, embedder=embedder) as engine:
        first = engine.tenant("default").ingest([folder], "c")
        assert first.errors == [] and len(first.documents) == files
    _write_corpus(folder, 2, files)  # a new version of every file ...
    for extra in range(2):  # ... and two new files
        (folder / f"new{extra}.md").write_text(f"# 新規\n\n{MARK[2]}：追加の文書{extra}です。", encoding="utf-8")
    _kill_at(url, folder, point, tmp_path, **env)
    versions = _check_consistent(url, files)
    with Bunko(url, embedder=embedder) as engine:
        again = engine.tenant("default").ingest([folder], "c")
        assert again.errors == [] and len(again.documents) == files + 2
    assert _check_consistent(url, files) == {2: files + 2}
    return versions


def _url(request: pytest.FixtureRequest, store: str, tmp_path: Path) -> str:
    return request.getfixturevalue("pg_url") if store == "postgresql" else f"sqlite:///{tmp_path / 'k.db'}"


def _expect(point: str, versions: dict[int, int]) -> None:
    if point in ("store.write.committed", "store.hnsw.build"):  # the one batch committed: everything new
        assert versions == {2: 8}
    else:  # killed before the commit: everything still at version 1
        assert versions == {1: 6}


# The default run: inside the transaction halfway through the version swap on both stores, after the
# commit on SQLite, during the HNSW build on PostgreSQL. The slow run: every point on both stores.
DEFAULT_CASES = [("sqlite", "store.version.swap"), ("sqlite", "store.write.committed"),
                 ("postgresql", "store.version.swap"), ("postgresql", "store.hnsw.build")]
SLOW_CASES = [(store, point) for store in ("sqlite", "postgresql")
              for point in ("ingest.prepared", "store.write.begin", "store.write.chunks", "store.version.swap",
                            "store.write.committed") if (store, point) not in DEFAULT_CASES]


def _run_case(request: pytest.FixtureRequest, store: str, point: str, tmp_path: Path, embedder: Any) -> None:
    url = _url(request, store, tmp_path)
    env = {"BUNKO_PG_HNSW_MIN_ROWS": "1"} if point == "store.hnsw.build" else {}
    _expect(point, _crash_and_recover(url, point, tmp_path, embedder, **env))


@pytest.mark.parametrize(("store", "point"), DEFAULT_CASES)
def test_sigkill_at_a_point_leaves_whole_documents(request: pytest.FixtureRequest, store: str, point: str,
                                                   tmp_path: Path, embedder) -> None:
    _run_case(request, store, point, tmp_path, embedder)


@pytest.mark.slow
@pytest.mark.parametrize(("store", "point"), SLOW_CASES)
def test_sigkill_at_more_points(request: pytest.FixtureRequest, store: str, point: str, tmp_path: Path,
                                embedder) -> None:
    _run_case(request, store, point, tmp_path, embedder)


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "postgresql"])
def test_sigkill_between_write_batches(request: pytest.FixtureRequest, store: str, tmp_path: Path, embedder) -> None:
    """Several batches (64 documents each): killed after the first commit, some documents are new, the rest old."""
    versions = _crash_and_recover(_url(request, store, tmp_path), "store.write.committed", tmp_path, embedder,
                                  files=150)
    assert versions.get(2, 0) >= 64 and versions.get(1, 0) > 0, versions
