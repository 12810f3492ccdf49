"""Chunk-level reuse: a new version of a document embeds only the chunks whose text changed; the others
take the vector of the identical chunk of the version they replace, on both stores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from bunko import Bunko
from bunko.embedders import UniversalSentenceEncoderEmbedder

from .conftest import ROOT


class RecordingEmbedder(UniversalSentenceEncoderEmbedder):
    """The bundled embedder, keeping the texts it was asked to embed."""

    def __init__(self) -> None:
        super().__init__()
        self.texts: list[str] = []

    def _encode(self, texts: list[str]) -> np.ndarray:
        self.texts.extend(texts)
        return super()._encode(texts)


def handbook(number: int, edited: int | None = None) -> str:
    """A document of 12 sections of about 300 characters; section ``edited`` says something new."""
    sections = []
    for s in range(12):
        body = (f"第{number}章 第{s}節。社内規程{number}の{s}番目の項目では、申請の手順と承認の流れを定める。"
                "申請者は所定の様式に必要事項を記入し、所属長の承認を得たうえで総務部に提出する。" * 2)
        if s == edited:
            body += f"（改訂）この節は令和七年に改められ、提出期限は{number + 10}日以内となった。"
        sections.append(f"## 第{s}節\n\n{body}")
    return f"# 規程 {number}\n\n" + "\n\n".join(sections) + "\n"


def chunk_texts(engine: Bunko, source: str) -> list[str]:
    tenant = engine.tenant("t")
    info = tenant.store.find_by_source("default", source)
    assert info is not None
    return [c.chunk.content for c in tenant.store.document_chunks("default", [info.id])[info.id]]


def test_a_new_version_embeds_only_its_changed_chunks(tmp_path: Path, store_url: str) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    for n in range(6):
        (folder / f"rule{n}.md").write_text(handbook(n), encoding="utf-8")
    embedder = RecordingEmbedder()
    engine = Bunko(store_url, embedder=embedder)
    try:
        tenant = engine.tenant("t")
        first = tenant.ingest([folder])
        assert not first.errors and first.reused == 0
        assert first.embedded == first.chunks == len(embedder.texts) > 6 * 3
        before = {n: chunk_texts(engine, str(folder / f"rule{n}.md")) for n in (1, 4)}

        for n in (1, 4):
            (folder / f"rule{n}.md").write_text(handbook(n, edited=5), encoding="utf-8")
        embedder.texts.clear()
        second = tenant.ingest([folder])
        assert not second.errors
        statuses = sorted(d.status for d in second.documents)
        assert statuses == ["replaced"] * 2 + ["unchanged"] * 4
        changed: list[str] = []
        for n in (1, 4):
            after = chunk_texts(engine, str(folder / f"rule{n}.md"))
            changed.extend(t for t in after if t not in before[n])
        # Exactly the chunks whose text is new were embedded; every other chunk of the two versions was reused.
        assert 0 < len(changed) < 6
        assert sorted(embedder.texts) == sorted(changed)
        assert second.embedded == len(changed)
        assert second.reused == second.chunks - len(changed) > 0
        for result in second.documents:
            assert result.embedded + result.reused == (result.chunks if result.status == "replaced" else 0)

        # The reused vectors are the stored ones, and the new version is searchable through them.
        info = tenant.store.find_by_source("default", str(folder / "rule1.md"))
        assert info is not None and info.version == 2
        stored = tenant.store.document_chunks("default", [info.id])[info.id]
        fresh = np.asarray(UniversalSentenceEncoderEmbedder()._encode([c.chunk.content for c in stored]))
        assert np.allclose(np.stack([c.vector for c in stored]), fresh, atol=1e-4)
        hit = tenant.search("提出期限は11日以内", top_k=1).results[0]
        assert "提出期限は11日以内" in hit.content
    finally:
        engine.close()


def test_reuse_stays_inside_the_tenant(tmp_path: Path, store_url: str) -> None:
    """Tenant B's first version of a source that tenant A holds embeds everything: vectors are never taken
    from another tenant's chunks, even for the same text under the same name."""
    path = tmp_path / "shared.md"
    path.write_text(handbook(7), encoding="utf-8")
    embedder = RecordingEmbedder()
    engine = Bunko(store_url, embedder=embedder)
    try:
        a = engine.tenant("a")
        b = engine.tenant("b")
        first = a.ingest([path])
        path.write_text(handbook(7, edited=2), encoding="utf-8")
        embedder.texts.clear()
        other = b.ingest([path])
        assert other.documents[0].status == "created"
        assert other.reused == 0 and other.embedded == other.chunks == len(embedder.texts)
        again = a.ingest([path])
        assert again.documents[0].status == "replaced" and again.reused > 0
        assert again.reused + again.embedded == again.chunks and first.embedded == first.chunks
    finally:
        engine.close()


def test_cli_json_reports_embedded_and_reused(tmp_path: Path) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "a.md").write_text(handbook(2), encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'cli.db'}"
    env = {"BUNKO_HOME": str(tmp_path / "home"), "PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"}

    def ingest() -> dict[str, object]:
        done = subprocess.run([sys.executable, "-m", "bunko", "--db", db, "ingest", str(folder), "--json"],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr
        return dict(json.loads(done.stdout))

    first = ingest()
    assert first["embedded"] == first["chunks"] and first["reused"] == 0
    (folder / "a.md").write_text(handbook(2, edited=8), encoding="utf-8")
    second = ingest()
    assert isinstance(second["embedded"], int) and isinstance(second["reused"], int)
    assert 0 < second["embedded"] < second["reused"]
    assert second["embedded"] + second["reused"] == second["chunks"]


def test_an_unchanged_document_reports_nothing_embedded(tmp_path: Path) -> None:
    path = tmp_path / "same.md"
    path.write_text(handbook(3), encoding="utf-8")
    engine = Bunko(f"sqlite:///{tmp_path / 's.db'}", embedder=RecordingEmbedder())
    try:
        engine.tenant("t").ingest([path])
        again = engine.tenant("t").ingest([path])
        assert [(d.status, d.embedded, d.reused) for d in again.documents] == [("unchanged", 0, 0)]
    finally:
        engine.close()
