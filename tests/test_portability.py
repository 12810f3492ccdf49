"""Moving a tenant: export to files, import into another store, copy between stores (R34).

The export of a tenant on the embedded store is imported into a fresh PostgreSQL and must answer
the same questions with the same sources; damaged exports and conflicting targets are refused
before anything is written; no other tenant's data travels or is touched.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from bunko import Bunko, VectorRecord
from bunko.errors import ArchiveError, CollectionNotFoundError
from bunko.portability import FILES, MANIFEST, copy_tenant, export_tenant, import_tenant, read_manifest
from bunko.stores.base import DocumentWrite
from bunko.types import ConversationTurn, EmbedderInfo

from .conftest import EXAMPLES, FIXTURES

QUESTIONS = ["水は何日分備蓄すればいいですか？", "地震が起きたらまず何をしますか", "家族との連絡方法"]


def _unit(seed: int) -> list[float]:
    vector = np.random.default_rng(seed).standard_normal(512)
    return (vector / np.linalg.norm(vector)).tolist()


@pytest.fixture(scope="module")
def source_db(tmp_path_factory: pytest.TempPathFactory, embedder: object) -> Iterator[str]:
    """An embedded store where tenant acme has documents (one at version 2), loose records and a
    conversation, and tenant other has documents of its own."""
    folder = tmp_path_factory.mktemp("portability")
    url = f"sqlite:///{folder / 'source.db'}"
    with Bunko(url, embedder=embedder) as engine:
        acme = engine.tenant("acme")
        acme.ingest(sorted(EXAMPLES.iterdir()), "docs")
        changed = folder / "notes.md"
        changed.write_text("# メモ\n\n集合場所は公民館です。", encoding="utf-8")
        acme.ingest([changed], "docs")
        changed.write_text("# メモ\n\n集合場所は北公園の時計台の前です。", encoding="utf-8")
        assert acme.ingest([changed], "docs").documents[0].version == 2
        acme.upsert("notes", [VectorRecord("a record that brings its own vector", {"kind": "given"}, id="given-1",
                                           vector=_unit(1)),
                              {"content": "非常用の水は一人一日3リットルを目安に備蓄します。", "id": "water"}])
        acme.store.conversations.append("chat-1", [ConversationTurn("user", "水は何日分？", {"lang": "ja"}),
                                           ConversationTurn("assistant", "最低3日分です [1]。")])
        acme.memory.add([{"content": "繰り上がりの足し算が苦手", "memory_type": "weakness", "subject": "math"}],
                        user_id="child-a", session_id="s1")
        acme.memory.add(["九九の七の段を言えた"], user_id="child-b", session_id="s2")
        engine.tenant("other").memory.add(["other tenant's memory"], user_id="child-a", session_id="s9")
        engine.tenant("other").ingest([FIXTURES / "guide_ja.md"], "docs")
        engine.tenant("other").store.conversations.append("secret-chat", [ConversationTurn("user", "other's question")])
        # A file that fails to load is remembered (documents list --failed) and travels with its tenant.
        broken = folder / "broken.pdf"
        broken.write_bytes(b"%PDF-1.4 not really a PDF")
        assert acme.ingest([broken], "docs").errors
        other_broken = folder / "other-secret.pdf"
        other_broken.write_bytes(b"%PDF-1.4 not really a PDF either")
        assert engine.tenant("other").ingest([other_broken], "docs").errors
    yield url


def _answers(engine: Bunko, tenant: str) -> dict[str, object]:
    t = engine.tenant(tenant)
    found: dict[str, object] = {}
    for question in QUESTIONS:
        hits = t.search(question, "docs", top_k=5, mode="vector").results
        found[f"vector:{question}"] = [(h.chunk_id, h.document_id, h.source) for h in hits]
        # Keyword statistics are the store's own (an embedded store shared with other tenants ranks
        # its tail differently), so the other modes are compared by their best source.
        for mode in ("keyword", "hybrid"):
            found[f"{mode}:{question}"] = t.search(question, "docs", top_k=5, mode=mode).results[0].source
        found[f"ask:{question}"] = [(s.source, s.chunk_id) for s in t.ask(question, "docs", mode="vector").sources]
    found["query"] = [h.chunk_id for h in t.query("notes", vector=_unit(1), top_k=2)]
    return found


def test_an_export_imported_into_a_fresh_postgresql_answers_the_same(
        source_db: str, pg_url: str, embedder: object, tmp_path: Path) -> None:
    with Bunko(source_db, embedder=embedder) as engine:
        before = _answers(engine, "acme")
        summary = export_tenant(engine.backend.for_tenant("acme"), tmp_path / "acme")
        versions = {d.source: d.version for d in engine.tenant("acme").documents("docs")}
    assert summary.counts == {"collections": 2, "documents": 7, "chunks": 2, "conversations": 1, "memory_stores": 1,
                              "memories": 2, "ingest_failures": 1}
    manifest = read_manifest(tmp_path / "acme")
    assert manifest["tenant"] == "acme" and manifest["digest"] == summary.digest
    assert sorted(p.name for p in (tmp_path / "acme").iterdir()) == sorted([MANIFEST, *FILES.values()])
    exported = "".join((tmp_path / "acme" / name).read_text(encoding="utf-8") for name in FILES.values())
    assert "other's question" not in exported and "guide_ja" not in exported  # nothing of another tenant
    assert "other tenant's memory" not in exported and "other-secret" not in exported

    with Bunko(pg_url, embedder=embedder) as target:
        target.tenant("bystander").ingest([FIXTURES / "notes.md"], "docs")
        imported = import_tenant(target.backend.for_tenant("acme"), tmp_path / "acme")
        assert imported.verified and imported.digest == summary.digest
        assert imported.counts == summary.counts
        assert _answers(target, "acme") == before
        assert {d.source: d.version for d in target.tenant("acme").documents("docs")} == versions
        found = target.tenant("acme").memory.search_memory("繰り上がりの足し算", user_id="child-a")
        assert [m["content"] for m in found["memories"]][:1] == ["繰り上がりの足し算が苦手"]
        assert found["memories"][0]["metadata"]["memory_type"] == "weakness"
        assert all(m["metadata"]["user_id"] == "child-a" for m in found["memories"])
        turns = [t.content for t in target.tenant("acme").conversation("chat-1")]
        assert turns == ["水は何日分？", "最低3日分です [1]。"]
        failed = target.tenant("acme").ingest_failures()
        assert [(f.collection, Path(f.source).name, f.error_type) for f in failed] == [
            ("docs", "broken.pdf", "CorruptDocumentError")]
        assert target.tenant("bystander").ingest_failures() == []
        # The bystander tenant of the target is untouched, and sees nothing of acme.
        bystander = target.tenant("bystander")
        assert [d.source for d in bystander.documents("docs")] == [str(FIXTURES / "notes.md")]
        assert all(h.source == str(FIXTURES / "notes.md") for h in bystander.search("水 備蓄", "docs").results)
        # Importing again changes nothing and still verifies.
        counts = [(c.name, c.document_count, c.chunk_count) for c in target.tenant("acme").collections()]
        again = import_tenant(target.backend.for_tenant("acme"), tmp_path / "acme")
        assert again.verified and again.skipped_conversations == 1
        assert [(c.name, c.document_count, c.chunk_count) for c in target.tenant("acme").collections()] == counts
        assert len(target.tenant("acme").conversation("chat-1")) == 2


def test_a_damaged_export_is_refused_before_anything_is_written(
        source_db: str, embedder: object, tmp_path: Path) -> None:
    with Bunko(source_db, embedder=embedder) as engine:
        export_tenant(engine.backend.for_tenant("acme"), tmp_path / "acme")
    documents = tmp_path / "acme" / FILES["documents"]
    data = bytearray(documents.read_bytes())
    data[100] = ord("x") if data[100] != ord("x") else ord("y")
    documents.write_bytes(bytes(data))
    with Bunko(f"sqlite:///{tmp_path / 'target.db'}", embedder=embedder) as target:
        store = target.backend.for_tenant("acme")
        with pytest.raises(ArchiveError, match="checksum"):
            import_tenant(store, tmp_path / "acme")
        assert store.list_collections() == []
        (tmp_path / "acme" / MANIFEST).unlink()
        with pytest.raises(ArchiveError, match=r"no manifest\.json"):
            import_tenant(store, tmp_path / "acme")
    with pytest.raises(ArchiveError, match="not an empty folder"):
        export_tenant(Bunko(source_db, embedder=embedder).backend.for_tenant("acme"), tmp_path / "acme")


def test_a_conflicting_target_is_refused_before_anything_is_written(
        source_db: str, embedder: object, tmp_path: Path) -> None:
    with Bunko(source_db, embedder=embedder) as engine:
        export_tenant(engine.backend.for_tenant("acme"), tmp_path / "acme")
    with Bunko(f"sqlite:///{tmp_path / 'target.db'}", embedder=embedder) as target:
        store = target.backend.for_tenant("acme")
        store.ensure_collection("notes", EmbedderInfo("openai", "text-embedding-3-small", 1536))
        with pytest.raises(ArchiveError, match="exists in tenant 'acme' with the embedder openai"):
            import_tenant(store, tmp_path / "acme")
        with pytest.raises(CollectionNotFoundError):
            store.get_collection("docs")
        other = target.backend.for_tenant("acme2")
        other.conversations.append("chat-1", [ConversationTurn("user", "a different conversation")])
        with pytest.raises(ArchiveError, match="conversation 'chat-1' exists"):
            import_tenant(other, tmp_path / "acme")
        assert other.list_collections() == []


def test_copy_between_stores_and_into_another_tenant(source_db: str, pg_url: str, embedder: object) -> None:
    with Bunko(source_db, embedder=embedder) as engine, Bunko(pg_url, embedder=embedder) as target:
        source = engine.backend.for_tenant("acme")
        summary = copy_tenant(source, target.backend.for_tenant("acme-copy"), collections=["notes"])
        assert summary.verified and summary.counts["chunks"] == 2 and summary.counts["collections"] == 1
        copied = target.tenant("acme-copy")
        assert [c.name for c in copied.collections()] == ["notes"]
        assert copied.query("notes", vector=_unit(1), top_k=1)[0].chunk_id == "given-1"
        assert target.tenant("acme").collections() == []  # the source tenant's name was not used
        with pytest.raises(CollectionNotFoundError):
            copy_tenant(source, target.backend.for_tenant("x"), collections=["missing"])


def test_an_imported_version_is_kept_and_a_new_one_follows_it(tmp_path: Path, embedder: object) -> None:
    with Bunko(f"sqlite:///{tmp_path / 'v.db'}", embedder=embedder) as engine:
        store = engine.backend.for_tenant("acme")
        store.ensure_collection("docs", EmbedderInfo("use", "x", 2))
        write = DocumentWrite("doc-1", "a.txt", "h1", {}, [], np.zeros((0, 2), dtype=np.float32), version=5)
        assert store.write_document("docs", write).version == 5
        assert store.get_document("doc-1").version == 5
        again = DocumentWrite("doc-1", "a.txt", "h2", {}, [], np.zeros((0, 2), dtype=np.float32))
        assert store.write_document("docs", again).version == 6
        assert store.get_document("doc-1").version == 6


def test_memories_come_back_bit_for_bit(tmp_path: Path, embedder: object) -> None:
    """Imported memories keep their exact vectors: normalising unit vectors again moved their last bits,
    and about one import in four failed its digest check."""
    with Bunko(f"sqlite:///{tmp_path / 'm.db'}", embedder=embedder) as engine:
        records = engine.backend.service_records()
        memory = engine.tenant("acme").memory
        for trial in range(8):
            memory.add([f"メモ {trial}-{i}: 水は三日分" for i in range(20)], user_id="u1")
            before = sorted((m["metadata"]["memory_id"], m["content"]) for m in memory.list("u1", limit=None))
            folder = tmp_path / f"export-{trial}"
            export_tenant(engine.backend.for_tenant("acme"), folder)
            records.erase_tenant(engine.backend.for_tenant("acme"))
            import_tenant(engine.backend.for_tenant("acme"), folder)  # checks the digest
            assert sorted((m["metadata"]["memory_id"], m["content"]) for m in memory.list("u1", limit=None)) == before


def test_the_cli_exports_imports_and_copies(source_db: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}

    def bunko(*args: str) -> dict[str, object]:
        done = subprocess.run([sys.executable, "-m", "bunko", *args, "--json"], capture_output=True, text=True,
                              env=env, timeout=600)
        assert done.returncode == 0, done.stderr + done.stdout
        return json.loads(done.stdout)

    exported = bunko("--db", source_db, "export", "--tenant", "acme", "--output", str(tmp_path / "out"))
    assert exported["counts"]["documents"] == 7 and exported["verified"]
    target = f"sqlite:///{tmp_path / 'target.db'}"
    imported = bunko("--db", target, "import", str(tmp_path / "out"), "--tenant", "acme-imported")
    assert imported["tenant"] == "acme-imported" and imported["verified"] and imported["digest"] == exported["digest"]
    copied = bunko("--db", source_db, "copy", "--tenant", "acme", "--to", target)
    assert copied["verified"] and copied["digest"] == exported["digest"]

    broken = subprocess.run([sys.executable, "-m", "bunko", "--db", target, "import", str(tmp_path / "nowhere"),
                             "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert broken.returncode == 1
    assert json.loads(broken.stdout)["error"]["code"] == "ARCHIVE_ERROR"


def test_the_export_reads_are_tenant_bound(source_db: str, pg_url: str, embedder: object) -> None:
    """document_chunks, loose_chunks and conversation_ids see only the bound tenant, on both stores."""
    with Bunko(pg_url, embedder=embedder) as target, Bunko(source_db, embedder=embedder) as engine:
        copy_tenant(engine.backend.for_tenant("acme"), target.backend.for_tenant("acme"))
        copy_tenant(engine.backend.for_tenant("other"), target.backend.for_tenant("other"))
        for backend in (engine.backend, target.backend):
            acme, other = backend.for_tenant("acme"), backend.for_tenant("other")
            acme_ids = [d.id for d in acme.list_documents("docs")]
            assert sum(len(c) for c in acme.document_chunks("docs", acme_ids).values()) > 0
            assert all(chunks == [] for chunks in other.document_chunks("docs", acme_ids).values())
            assert acme.conversations.ids() == ["chat-1"] and other.conversations.ids() == ["secret-chat"]
            assert {c.chunk.id for c in acme.loose_chunks("notes", 10)} == {"given-1", "water"}
            with pytest.raises(CollectionNotFoundError):
                other.loose_chunks("notes", 10)
            assert backend.for_tenant("nobody").conversations.ids() == []


def test_an_export_made_before_failure_records_existed_still_imports(embedder: object, tmp_path: Path) -> None:
    """Exports written before ``ingest_failures.jsonl`` existed list no such file: read as none."""
    with Bunko(f"sqlite:///{tmp_path / 'old.db'}", embedder=embedder) as engine:
        engine.tenant("acme").ingest([FIXTURES / "notes.md"], "docs")
        summary = export_tenant(engine.backend.for_tenant("acme"), tmp_path / "export")
    folder = tmp_path / "export"
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    del manifest["files"][FILES["ingest_failures"]]
    (folder / FILES["ingest_failures"]).unlink()
    (folder / MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    with Bunko(f"sqlite:///{tmp_path / 'new.db'}", embedder=embedder) as target:
        imported = import_tenant(target.backend.for_tenant("acme"), folder)
        assert imported.verified and imported.digest == summary.digest and imported.counts["documents"] == 1
        assert target.tenant("acme").ingest_failures() == []
