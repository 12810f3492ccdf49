"""User scoping is typed: ``Tenant.for_user`` carries the user, and nothing proxies the store.

A scope for a user writes its usage records and search logs with the user's id and keeps its
conversations in the user's namespace; the tenant keys' scope (``for_user(None)``) shares one
namespace; the plain tenant (library, CLI) keeps conversation ids as given. The store under a user's
scope is the tenant's own store class acting for the user (``VectorStore.for_user``: its transactions carry
the user, which PostgreSQL's row-level security checks), not a wrapper, so a store method added later cannot
pass through one unscoped. The upload jobs a scope hands out follow the deletion rule: jobs first, then the data, then
the spooled files.
"""

from __future__ import annotations

from pathlib import Path

from bunko import Bunko, Tenant
from bunko.stores.service import Job

TEXT = "避難所には最低3日分の水を備えておきます。非常食も用意します。"


def test_a_user_scope_carries_its_user_into_usage_logs_and_conversations(engine: Bunko) -> None:
    tenant = engine.tenant("acme")
    alice = tenant.for_user("alice")
    assert isinstance(alice, Tenant) and alice.name == "acme"
    # The tenant's own store class acting for the user (no proxy in between): its transactions carry the user.
    assert type(alice.store) is type(tenant.store) and alice.store.served_by(engine.backend)
    assert (alice.store.tenant, alice.store.user, tenant.store.user) == ("acme", "alice", None)
    assert tenant.for_user(None).store is tenant.store  # a tenant key acts for the whole tenant ...
    assert tenant.for_user("alice", admin=True).store.user is None  # ... and so does an admin key
    assert alice.meter.user_id == "alice" and tenant.meter.user_id is None

    alice.upsert("docs", [{"content": TEXT}])
    alice.search("水は何日分", "docs")
    alice.ask("水は何日分？", "docs", conversation_id="c1")
    tenant.for_user(None).ask("水は何日分？", "docs", conversation_id="c1")
    tenant.ask("水は何日分？", "docs", conversation_id="c1")
    engine.flush_usage()

    store = tenant.store
    assert sorted(store.conversations.ids()) == ["c1", "t:c1", "u.alice:c1"]
    assert [t.role for t in alice.conversation("c1")] == ["user", "assistant"]
    assert alice.conversation("c1") != [] and tenant.for_user("bob").conversation("c1") == []
    assert len(tenant.search_log(user_id="alice")) == 2  # the search and the ask's search
    assert tenant.search_log(user_id="bob") == []

    erasure = alice.jobs.erase_user("alice")
    assert erasure.usage_records > 0 and erasure.search_logs == 2 and erasure.conversation_turns == 2
    assert sorted(store.conversations.ids()) == ["c1", "t:c1"]


def test_the_stores_of_a_tenants_users_learn_its_row_id_once(engine: Bunko) -> None:
    """A request's scope is a new store acting for its user: it must not look the tenant up again each time."""
    from bunko.testing.hooks import counting

    tenant = engine.tenant("acme")
    alice = tenant.for_user("alice")  # made before anyone knew the tenant's row
    alice.upsert("docs", [{"content": TEXT}])
    engine.flush_usage()
    with counting(engine.backend) as counts:
        tenant.for_user("bob").search("水は何日分", "docs")
        tenant.for_user("alice").conversations().append("c1", [])
        tenant.search("水は何日分", "docs")
        engine.flush_usage()
    assert counts.delta.get("tenant_lookups", 0) == 0 and counts.delta["read_transactions"] > 0


def test_jobs_go_first_then_the_data_then_the_spooled_files(engine: Bunko, tmp_path: Path) -> None:
    spool = tmp_path / "spool"
    tenant = Tenant(engine, engine.backend.for_tenant("acme"), spool=spool)
    engine.backend.service_records().create_tenant("acme")
    tenant.upsert("docs", [{"content": TEXT}])
    jobs = tenant.jobs
    assert jobs.spool == spool and jobs.folder("d1") == spool / "acme" / "d1"
    jobs.folder("d1").mkdir(parents=True)
    (jobs.folder("d1") / "upload.txt").write_text(TEXT)
    jobs.create(Job("d1", "docs", "upload.txt", user_id="alice", lease_until=0.0))
    assert [j.id for j in jobs.list()] == ["d1"]

    # A document uploaded again under the same name once its job has ended: the earlier version's job gives way.
    engine.backend.service_records().finish_job(engine.backend.for_tenant("acme"), "d1", "completed")
    jobs.create(Job("d1", "docs", "upload.txt", user_id="alice", lease_until=0.0), replace=True)
    assert [j.id for j in jobs.list()] == ["d1"]

    assert tenant.delete_collection("docs").name == "docs"
    assert jobs.list() == [] and not jobs.folder("d1").exists()
    assert tenant.collections() == []
