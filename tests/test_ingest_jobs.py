"""Ingest as a job: batches and re-runs that embed nothing (SIGKILL safety: tests/test_crash_safety.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
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
    # a blank scan: OCR finds nothing (or cannot run: OCRUnavailableError names what to install)
    assert re.search(r"(NoTextError|OCRUnavailableError): .*scanned\.pdf: no extractable text", run.stderr), run.stderr
    assert re.findall(r"^new ", run.stdout, re.M) == ["new "] * 6  # bichiku.txt once, though the folder repeats it
