"""Ingest as a job: batches, re-runs that embed nothing, and a SIGKILL that leaves no half document."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from bunko import Bunko


def _make_files(folder: Path, n: int) -> None:
    folder.mkdir()
    for i in range(n):
        body = "\n\n".join(
            f"文書{i}の第{j}段落です。地震への備えとして水と食料を備蓄します。Paragraph {j} of file {i}."
            for j in range(8)
        )
        (folder / f"doc{i:04d}.md").write_text(f"# 文書 {i}\n\n{body}\n", encoding="utf-8")


class CountingEmbedder:
    """Wraps the real embedder and counts the texts it is asked to embed."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.provider, self.model, self.dimension = inner.provider, inner.model, inner.dimension
        self.batch_size = inner.batch_size
        self.calls = 0
        self.texts = 0

    async def embed(self, text):
        self.calls += 1
        self.texts += 1
        return await self.inner.embed(text)

    async def embed_batch(self, texts):
        self.calls += 1
        self.texts += len(texts)
        return await self.inner.embed_batch(texts)

    async def close(self):
        return None


def test_rerun_embeds_nothing_and_a_changed_file_only_itself(tmp_path: Path, embedder) -> None:
    folder = tmp_path / "docs"
    _make_files(folder, 12)
    counting = CountingEmbedder(embedder)
    engine = Bunko(f"sqlite:///{tmp_path / 'jobs.db'}", embedder=counting)
    scope = engine.tenant("t")
    first = scope.ingest([folder], "c")
    assert len(first.documents) == 12 and first.errors == [] and counting.texts >= 12
    counting.calls = counting.texts = 0
    again = scope.ingest([folder], "c")
    assert {d.status for d in again.documents} == {"unchanged"}
    assert counting.texts == 0  # nothing embedded at all
    (folder / "doc0003.md").write_text("# 変更\n\n内容を変えました。新しい版です。", encoding="utf-8")
    third = scope.ingest([folder], "c")
    changed = [d for d in third.documents if d.status != "unchanged"]
    assert [(Path(d.source).name, d.status, d.version) for d in changed] == [("doc0003.md", "replaced", 2)]
    assert counting.texts == 1  # just the one chunk of the changed file
    engine.close()


def test_sigkill_mid_ingest_leaves_only_whole_documents(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    _make_files(folder, 400)
    db = tmp_path / "kill.db"
    env = {**os.environ, "BUNKO_HOME": str(tmp_path / "home")}
    cmd = [sys.executable, "-m", "bunko", "--db", f"sqlite:///{db}", "ingest", str(folder), "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 3600  # only catches a hang: a loaded machine takes minutes to the first commit
    stored = 0
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.05)
        if db.exists():
            try:
                with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
                    stored = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
            except sqlite3.OperationalError:
                continue
            if stored >= 1:
                break
    assert proc.poll() is None, "the ingest finished before it could be killed; make the job bigger"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)

    with sqlite3.connect(db) as conn:
        docs = conn.execute("SELECT id, chunk_count FROM documents").fetchall()
        assert 0 < len(docs) < 400
        for doc_pk, expected in docs:
            actual = conn.execute("SELECT count(*) FROM chunks WHERE document_id = ?", (doc_pk,)).fetchone()[0]
            assert actual == expected > 0  # every stored document is whole
        orphans = conn.execute("SELECT count(*) FROM chunks WHERE document_id NOT IN (SELECT id FROM documents)")
        assert orphans.fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM chunks_fts_1").fetchone()[0] == \
            conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        counters = conn.execute("SELECT document_count, chunk_count FROM collections").fetchone()
        assert counters == (len(docs), sum(c for _, c in docs))

    rerun = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    data = json.loads(rerun.stdout)
    assert data["documents"] == 400 and data["unchanged"] == len(docs) and data["errors"] == []


def test_ingest_urls_through_the_guard(tmp_path: Path, engine: Bunko, monkeypatch) -> None:
    import functools
    import http.server
    import threading

    from .conftest import EXAMPLES

    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(EXAMPLES))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/bichiku.txt"
        scope = engine.tenant("t")
        refused = scope.ingest([url], "web")
        assert [e.type for e in refused.errors] == ["BlockedURLError"] and refused.documents == []
        # The allow-list is a setting: an engine started with it may fetch the loopback address.
        monkeypatch.setenv("BUNKO_FETCH_ALLOW_HOSTS", "127.0.0.1")
        allowed = Bunko(engine.settings.database_url, embedder=engine.embedder)
        scope = allowed.tenant("t")
        report = scope.ingest([url], "web")
        assert report.errors == [] and report.documents[0].status == "created"
        doc = scope.documents("web")[0]
        assert doc.source == url and doc.metadata["source_type"] == "url"
        assert "3リットル" in scope.search("水の備蓄", "web", top_k=1).results[0].content
        allowed.close()
    finally:
        server.shutdown()


def test_a_failing_file_among_others_prints_no_traceback(tmp_path: Path) -> None:
    from .conftest import EXAMPLES, FIXTURES

    scanned = FIXTURES / "scanned.pdf"  # an image and no text layer
    env = {**os.environ, "BUNKO_HOME": str(tmp_path / "home")}
    run = subprocess.run(
        [sys.executable, "-m", "bunko", "ingest", str(EXAMPLES / "bichiku.txt"), str(scanned), str(EXAMPLES)],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert run.returncode == 1
    assert "Traceback" not in run.stderr and "never retrieved" not in run.stderr
    assert "NoTextError" in run.stderr and "OCR is not enabled" in run.stderr
    assert run.stdout.count("completed") == 6  # bichiku.txt once, even though the folder repeats it
