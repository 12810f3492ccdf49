"""The ingest runner: no LLM client is built, and a hosted embedder's requests really run concurrently."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bunko import Bunko, Document
from bunko.embedders import get_embedder
from bunko.errors import RAGPipelineError

from .conftest import EXAMPLES, ROOT
from .provider_fakes import OpenAIFake, RecordedRequest, Reply

KEY = "sk-test"


def test_ingest_with_an_llm_configured_and_no_key_succeeds(tmp_path: Path) -> None:
    """Ingest never builds the LLM client, so a missing LLM key cannot stop it."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENAI_API_KEY", "BUNKO_LLM_API_KEY", "BUNKO_LLM_BASE_URL", "BUNKO_CONFIG")}
    env.update(BUNKO_HOME=str(tmp_path / "home"), BUNKO_LLM="openai:gpt-4o-mini", PYTHONPATH=str(ROOT / "src"))
    db = f"sqlite:///{tmp_path / 'ingest.db'}"
    done = subprocess.run([sys.executable, "-m", "bunko", "--db", db, "ingest", str(EXAMPLES), "--json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["documents"] == len(list(EXAMPLES.iterdir())) and report["errors"] == []
    # The same settings do need the key to answer: the LLM is built for questions only.
    ask = subprocess.run([sys.executable, "-m", "bunko", "--db", db, "ask", "水は何日分？", "--json"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert ask.returncode != 0 and json.loads(ask.stdout)["error"]["type"] == "MissingAPIKeyError"


class GatedOpenAI(OpenAIFake):
    """The OpenAI fake, holding embedding requests until ``wanted`` are in flight at once.

    Records the peak number of requests inside the handler. If ``wanted`` never arrive
    together, the gate gives up after ``patience`` seconds (a hang guard, not a measurement)
    and lets everything through, so a client that sends one at a time fails the test instead
    of hanging it.
    """

    def __init__(self, wanted: int, patience: float = 20.0, **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self.wanted, self.patience = wanted, patience
        self.in_flight = self.peak = 0
        self.open = False
        self.gate = threading.Condition()
        self.routes = [(m, p, self._gated if p.pattern.endswith("/embeddings") else h) for m, p, h in self.routes]

    def _gated(self, request: RecordedRequest) -> Reply:
        with self.gate:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            if self.in_flight >= self.wanted:
                self.open = True
                self.gate.notify_all()
            if not self.gate.wait_for(lambda: self.open, timeout=self.patience):
                self.open = True  # never got there: stop holding
                self.gate.notify_all()
        try:
            return self._embeddings(request)
        finally:
            with self.gate:
                self.in_flight -= 1


@pytest.mark.parametrize("concurrency", [3])
def test_ingest_keeps_the_embedders_concurrency_in_flight(tmp_path: Path, concurrency: int) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(24):
        (folder / f"note{i:02d}.txt").write_text(f"メモ{i}: 非常用の水を{i + 1}本備えます。", encoding="utf-8")
    with GatedOpenAI(concurrency, api_key=KEY) as server:
        embedder = get_embedder("openai:text-embedding-3-small", base_url=server.url + "/v1", api_key=KEY,
                                dimensions=8, batch_size=2, concurrency=concurrency)
        with Bunko(f"sqlite:///{tmp_path / 'c.db'}", embedder=embedder) as engine:
            report = engine.tenant("acme").ingest([folder], "notes")
            hits = engine.tenant("acme").search("メモ5: 非常用の水を6本備えます。", "notes", top_k=1).results
        assert server.open and server.peak == concurrency, f"peak {server.peak} requests in flight"
        sizes = [len(r.json["input"]) for r in server.requests_to("/embeddings")]
    assert report.errors == [] and len(report.documents) == 24
    assert {d.status for d in report.documents} == {"created"}
    assert sum(sizes) == 24 + 1 and max(sizes) == 2  # 24 chunks in batches of 2, and the search's query
    assert hits and hits[0].source.endswith("note05.txt")


def test_add_document_reports_a_failure_as_a_pipeline_error(engine: Bunko) -> None:
    scope = engine.tenant("t")
    with pytest.raises(RAGPipelineError, match="api:empty"):
        scope.add_document(Document("   \n ", {"source": "api:empty"}), "notes")
    first = scope.add_document(Document("初版の本文です。", {"source": "api:doc"}), "notes")
    second = scope.add_document(Document("第二版の本文です。内容が変わりました。", {"source": "api:doc"}), "notes")
    assert (first.status, second.status, second.version) == ("created", "replaced", 2)
    assert second.document_id == first.document_id and len(scope.documents("notes")) == 1


def test_the_runner_goes_on_while_a_batch_is_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner writes a full batch in the background: while the first batch's transaction is held open,
    the next batch is loaded, embedded and started (its keyword analysis begun); every document goes in."""
    from bunko import crashpoints, ingest
    from bunko.stores.sql.store import SQLStore

    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(12):
        (folder / f"note{i:02d}.txt").write_text(f"メモ{i}: 非常用の水を{i + 1}本備えます。", encoding="utf-8")
    monkeypatch.setattr(ingest, "INGEST_BATCH_DOCUMENTS", 4)
    started: list[int] = []
    second = threading.Event()
    begin = SQLStore.begin_write

    def counting(self: SQLStore, collection: str, documents: list, **options: object) -> object:
        started.append(len(documents))
        if len(started) >= 2:
            second.set()
        return begin(self, collection, documents, **options)  # type: ignore[arg-type]

    seen_while_writing: list[bool] = []

    def hold_the_first_write() -> None:
        if not seen_while_writing:  # the first transaction: wait (a hang guard, not a measurement) for the next
            seen_while_writing.append(second.wait(timeout=120))

    monkeypatch.setattr(SQLStore, "begin_write", counting)
    crashpoints.on("store.write.begin", hold_the_first_write)
    try:
        with OpenAIFake(api_key=KEY) as server:
            embedder = get_embedder("openai:text-embedding-3-small", base_url=server.url + "/v1", api_key=KEY,
                                    dimensions=8, batch_size=2, concurrency=2)
            with Bunko(f"sqlite:///{tmp_path / 'c.db'}", embedder=embedder) as engine:
                report = engine.tenant("acme").ingest([folder], "notes")
                count = engine.backend.for_tenant("acme").count("notes")
    finally:
        crashpoints.on("store.write.begin", None)
    assert seen_while_writing == [True], "the next batch was not started while the first was written"
    assert report.errors == [] and len(report.documents) == 12 and count == 12
    assert started == [4, 4, 4]
