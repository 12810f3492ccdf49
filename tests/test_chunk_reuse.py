"""Chunk-level reuse: a new version of a document embeds only the chunks whose text changed; the others
take the vector of the identical chunk of the version they replace, on both stores."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

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
    return chunk_texts_of(engine.tenant("t").store, source)


def chunk_texts_of(store: Any, source: str) -> list[str]:
    info = store.find_by_source("default", source)
    assert info is not None
    return [c.chunk.content for c in store.document_chunks("default", [info.id])[info.id]]


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


def test_a_text_the_collection_holds_in_another_document_is_not_embedded_again(tmp_path: Path,
                                                                               store_url: str) -> None:
    """Reuse across documents: a copy of a stored document under another name embeds nothing, and a new
    document that shares sections with stored ones embeds only its own texts; another collection of the
    same tenant, and a record upserted without a document, lend nothing."""
    original, copy, extended = tmp_path / "rule1.md", tmp_path / "copy.md", tmp_path / "extended.md"
    original.write_text(handbook(1), encoding="utf-8")
    copy.write_text(handbook(1), encoding="utf-8")
    extended.write_text(handbook(1) + "\n## 付則\n\n" + "この規程は令和八年四月一日から施行する。" * 6 + "\n",
                        encoding="utf-8")
    embedder = RecordingEmbedder()
    engine = Bunko(store_url, embedder=embedder)
    try:
        tenant = engine.tenant("t")
        first = tenant.ingest([original])
        assert first.embedded == first.chunks > 3 and first.reused == 0
        stored = set(chunk_texts(engine, str(original)))

        embedder.texts.clear()
        again = tenant.ingest([copy])
        assert again.documents[0].status == "created"
        assert (again.embedded, again.reused) == (0, again.chunks) and embedder.texts == []
        assert chunk_texts(engine, str(copy)) == chunk_texts(engine, str(original))
        hit = tenant.search("第1章 第3節", top_k=5, mode="vector").results
        assert {h.source for h in hit} == {str(original), str(copy)}

        embedder.texts.clear()  # the question was embedded too
        more = tenant.ingest([extended])
        new = [t for t in chunk_texts(engine, str(extended)) if t not in stored]
        assert 0 < len(new) < more.chunks
        assert sorted(embedder.texts) == sorted(new)
        assert (more.embedded, more.reused) == (len(new), more.chunks - len(new))

        # Another collection holds nothing yet: all of the same text is embedded there.
        embedder.texts.clear()
        elsewhere = tenant.ingest([copy], collection="other")
        assert (elsewhere.embedded, elsewhere.reused) == (elsewhere.chunks, 0) == (len(embedder.texts), 0)

        # Two copies ingested together into a new collection: each text goes to the embedder once.
        twin = tmp_path / "twin.md"
        twin.write_text(handbook(1), encoding="utf-8")
        embedder.texts.clear()
        twins = tenant.ingest([copy, twin], collection="twins")
        assert sorted(embedder.texts) == sorted(set(stored)) and twins.chunks == 2 * len(stored)
        assert (twins.embedded, twins.reused) == (len(stored), len(stored))

        # A record upserted without a document carries the caller's vector: it is not lent to a document.
        loose = "付録。この記録は文書に属さない。" * 4
        tenant.upsert("records", [{"content": loose, "vector": [1.0] + [0.0] * 511}])
        (tmp_path / "loose.md").write_text(loose, encoding="utf-8")
        embedder.texts.clear()
        took = tenant.ingest([tmp_path / "loose.md"], collection="records")
        assert (took.embedded, took.reused) == (1, 0) and embedder.texts == [loose]
    finally:
        engine.close()


def test_upgrading_keys_the_stored_chunks_for_reuse_sqlite(tmp_path: Path) -> None:
    """A SQLite store of schema 17 (no chunk text keys): migration 18 keys every document chunk (the loose
    records stay unkeyed), and the chunks stored before the upgrade lend their vectors to a new document."""
    import sqlite3

    from bunko.stores.sqlite.migrations import MIGRATIONS, apply_migrations
    from bunko.stores.sqlite.schema import text_key

    path = tmp_path / "old.db"
    source = tmp_path / "rule2.md"
    source.write_text(handbook(2), encoding="utf-8")
    engine = Bunko(f"sqlite:///{path}", embedder=RecordingEmbedder())
    try:
        engine.tenant("t").ingest([source])
        engine.tenant("t").upsert("default", [{"content": "記録のみ", "vector": [0.0, 1.0] + [0.0] * 510}])
    finally:
        engine.close()
    with sqlite3.connect(path) as conn:
        keyed = conn.execute("SELECT id, content, text_key FROM chunks ORDER BY id").fetchall()
        assert [k for _, c, k in keyed] == [None if c == "記録のみ" else text_key(c) for _, c, _ in keyed]
        conn.execute("DROP INDEX chunks_text")
        conn.execute("ALTER TABLE chunks DROP COLUMN text_key")
        conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) - 1}")
        apply_migrations(conn, MIGRATIONS)
        assert conn.execute("SELECT id, content, text_key FROM chunks ORDER BY id").fetchall() == keyed

    copy = tmp_path / "copy.md"
    copy.write_text(handbook(2), encoding="utf-8")
    embedder = RecordingEmbedder()
    engine = Bunko(f"sqlite:///{path}", embedder=embedder)
    try:
        done = engine.tenant("t").ingest([copy])
        assert (done.embedded, done.reused) == (0, done.chunks) and embedder.texts == []
    finally:
        engine.close()


def test_upgrading_indexes_the_stored_chunks_for_reuse_postgres(tmp_path: Path, pg_url: str) -> None:
    """A PostgreSQL database without m025: the upgrade indexes the stored chunks' texts, the lookup uses the
    index under row-level security (as the tenant's role), and the chunks stored before lend their vectors
    to a new document."""
    from bunko.stores.postgres import PostgresBackend, migrate_database

    from .pg import psycopg

    source = tmp_path / "rule3.md"
    source.write_text(handbook(3), encoding="utf-8")
    engine = Bunko(pg_url, embedder=RecordingEmbedder())
    try:
        engine.tenant("t").ingest([source])
    finally:
        engine.close()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("DROP INDEX bunko.chunks_text")
        conn.execute("DELETE FROM bunko.schema_migrations WHERE name = 'm025_chunk_texts'")
    assert migrate_database(pg_url) == ["m025_chunk_texts"]

    backend = PostgresBackend(pg_url)
    try:
        store = backend.for_tenant("t")
        texts = chunk_texts_of(store, str(source))
        with store.session() as (conn, tenant_pk):
            conn.execute("SET LOCAL enable_seqscan = off")  # a small table: show that the index may serve
            plan = "\n".join(r[0] for r in conn.execute(
                "EXPLAIN SELECT c.content FROM bunko.chunks c WHERE c.tenant_id = %s AND c.document_id IS NOT NULL "
                "AND c.content = ANY(%s)", (tenant_pk, texts[:2])).fetchall())
        assert "chunks_text" in plan, plan
    finally:
        backend.close()

    copy = tmp_path / "copy.md"
    copy.write_text(handbook(3), encoding="utf-8")
    embedder = RecordingEmbedder()
    engine = Bunko(pg_url, embedder=embedder)
    try:
        done = engine.tenant("t").ingest([copy])
        assert (done.embedded, done.reused) == (0, done.chunks) and embedder.texts == []
    finally:
        engine.close()
