"""The server's records in the store (API keys, rate windows, jobs, erasure) on both backends, with isolation."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from bunko.errors import ConfigError, DocumentNotFoundError
from bunko.stores import ChunkWrite, DocumentWrite, StoreBackend, open_backend
from bunko.stores.service import Job, ServiceRecords, hash_key, service_records
from bunko.types import ConversationTurn, EmbedderInfo, UsageEvent

EMBEDDER = EmbedderInfo("test", "unit", 4)


@pytest.fixture(params=["sqlite", "postgresql"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreBackend]:
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else f"sqlite:///{tmp_path / 's.db'}"
    b = open_backend(url)
    yield b
    b.close()


@pytest.fixture()
def records(backend: StoreBackend) -> ServiceRecords:
    return service_records(backend)


def _document(doc_id: str, text: str) -> DocumentWrite:
    return DocumentWrite(doc_id, f"upload:{doc_id}/a.txt", "h-" + doc_id, {"filename": "a.txt"},
                         [ChunkWrite(doc_id + "-c0", text, 0, 0, len(text), 3)], np.ones((1, 4), dtype=np.float32))


def test_api_keys_are_hashed_scoped_and_revocable(backend: StoreBackend, records: ServiceRecords) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        records.create_api_key("acme")
    assert records.create_tenant("acme") is True and records.create_tenant("acme") is False
    records.create_tenant("globex")
    key, record = records.create_api_key("acme", "alice")
    other, _ = records.create_api_key("globex", admin=True)
    assert key.startswith("bk_") and len(key) > 40 and key != other
    found = records.authenticate(key)
    assert found is not None and (found.tenant, found.user_id, found.admin) == ("acme", "alice", False)
    assert records.authenticate(other).tenant == "globex"  # type: ignore[union-attr]
    assert records.authenticate(key + "x") is None and records.authenticate("") is None
    # Only the hash is stored.
    listed = records.list_api_keys("acme")
    assert [k.id for k in listed] == [record.id] and listed[0].prefix == key[:8]
    if backend.scheme == "sqlite":
        with closing(sqlite3.connect(backend.url.removeprefix("sqlite:///"))) as conn:
            stored = [r[0] for r in conn.execute("SELECT key_hash FROM api_keys")]
        assert hash_key(key) in stored and key not in stored
    assert records.revoke_api_key(record.id) is True and records.revoke_api_key(record.id) is False
    assert records.authenticate(key) is None and records.authenticate(other) is not None
    with pytest.raises(ConfigError, match="invalid user id"):
        records.create_api_key("acme", "no spaces")


def test_rate_windows_count_per_key_and_window(records: ServiceRecords) -> None:
    records.create_tenant("acme")
    _, a = records.create_api_key("acme")
    _, b = records.create_api_key("acme")
    assert [records.hit(a.id, 100) for _ in range(3)] == [1, 2, 3]
    assert records.hit(b.id, 100) == 1
    assert records.hit(a.id, 101) == 1 and records.hit(a.id, 101) == 2


def test_jobs_are_tenant_scoped_and_dead_workers_jobs_fail(backend: StoreBackend, records: ServiceRecords) -> None:
    acme, globex = backend.for_tenant("acme"), backend.for_tenant("globex")
    records.create_job(acme, Job("j1", "default", "a.pdf", 10, "application/pdf", "alice",
                                 lease_until=time.time() + 60, metadata={"tags": ["x"]}))
    # j2 may be claimed no more (max_attempts 0) and its lease ran out: its worker died for the last time.
    records.create_job(acme, Job("j2", "default", "b.pdf", 20, user_id=None, lease_until=time.time() - 1,
                                 max_attempts=0))
    records.create_job(globex, Job("j1", "default", "same-id.pdf", 5, lease_until=time.time() + 60))
    assert records.get_job(acme, "j1").filename == "a.pdf" and records.get_job(acme, "j1").metadata == {"tags": ["x"]}
    assert records.get_job(globex, "j1").filename == "same-id.pdf"
    with pytest.raises(DocumentNotFoundError):
        records.get_job(globex, "j2")
    with pytest.raises(DocumentNotFoundError):
        records.get_job(backend.for_tenant("nobody"), "j1")
    # j2's lease ran out (its worker died): a reader marks it failed, with the reason.
    dead = records.get_job(acme, "j2")
    assert dead.status == "failed" and dead.error_code == "JOB_ABANDONED" and "upload the file again" in dead.error
    assert [(j.id, j.status) for j in records.list_jobs(acme)] == [("j1", "processing"), ("j2", "failed")]
    assert [j.filename for j in records.list_jobs(globex)] == ["same-id.pdf"]
    records.renew_job(acme, "j1", time.time() + 120)
    assert records.finish_job(globex, "j1", "completed", chunk_count=3, processing_time_ms=5.0) is True
    assert records.get_job(acme, "j1").status == "processing"  # the other tenant's j1 is untouched
    assert records.finish_job(acme, "j1", "failed", error_code="NO_TEXT", error="no text") is True
    assert (records.get_job(acme, "j1").status, records.get_job(acme, "j1").error) == ("failed", "no text")
    assert records.delete_jobs(globex, ["j2"]) == 0
    assert records.delete_jobs(acme, ["j1", "j2"]) == 2 and records.list_jobs(acme) == []
    assert records.finish_job(acme, "j1", "completed") is False  # erased while processing: the runner is told
    assert records.get_job(globex, "j1").chunk_count == 3


def test_erasure_is_confined_to_the_user_and_the_tenant(backend: StoreBackend, records: ServiceRecords) -> None:
    acme, globex = backend.for_tenant("acme"), backend.for_tenant("globex")
    for store, user, doc in ((acme, "alice", "d-alice"), (acme, "bob", "d-bob"), (globex, "alice", "d-g")):
        store.ensure_collection("default", EMBEDDER)
        store.write_documents("default", [_document(doc, f"text of {doc}")])
        records.create_job(store, Job(doc, "default", "a.txt", 9, user_id=user, status="completed"))
        store.usage.record((), [(f"{user} query", 1, 2.0, "vector")], user_id=user)
        store.usage.record([UsageEvent("search", "sqlite", items=1)], user_id=user)
        prefix = f"u.{user}:"
        store.conversations.append(prefix + "talk", [ConversationTurn("user", "hi"),
                                                  ConversationTurn("assistant", "hello")])
    acme.conversations.append("u.alicia:talk", [ConversationTurn("user", "not alice's")])  # a longer name, same start

    erased = records.erase_user(acme, "alice")
    assert (erased.documents, erased.jobs, erased.search_logs, erased.usage_records, erased.conversation_turns) == (
        1, 1, 1, 1, 2)
    with pytest.raises(DocumentNotFoundError):
        acme.get_document("d-alice")
    assert acme.get_document("d-bob").chunks == 1 and globex.get_document("d-g").chunks == 1
    assert [r["query"] for r in acme.usage.searches()] == ["bob query"]
    assert [r["query"] for r in globex.usage.searches()] == ["alice query"]
    assert acme.conversations.turns("u.alice:talk") == [] and len(acme.conversations.turns("u.alicia:talk")) == 1
    assert len(globex.conversations.turns("u.alice:talk")) == 2
    assert [j.id for j in records.list_jobs(acme)] == ["d-bob"]

    everything = records.erase_tenant(acme)
    assert everything.documents == 1 and everything.collections == 1 and everything.jobs == 1
    assert acme.list_collections() == [] and acme.usage.searches() == [] and acme.usage.summary() == []
    assert acme.conversations.turns("u.alicia:talk") == []
    assert globex.get_document("d-g").chunks == 1 and len(globex.usage.searches()) == 1
    assert len(records.list_jobs(globex)) == 1
