"""Store internals of search at scale, on both stores: per-tenant keyword statistics, analyzers,
fast filtered vector search."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from bunko.engine import Bunko
from bunko.stores import open_backend
from bunko.stores.base import StoreBackend
from bunko.testing.store_suite import INFO, make_document, unit_vectors
from bunko.types import Document

QUERY = "水の備蓄 emergency water storage"
B_TEXTS = [
    "災害に備えて水の備蓄を進めましょう。Emergency water storage needs three litres a day.",
    "非常食と飲料水を家族の人数分用意します。",
    "Store water in clean containers and rotate the storage every six months.",
    "地震のときは家具の転倒に注意してください。",
]


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'stores.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture()
def store_backend(db_url: str) -> Iterator[StoreBackend]:
    backend = open_backend(db_url)
    yield backend
    backend.close()


def _results(engine: Bunko, tenant: str) -> dict[str, list[tuple[str, float]]]:
    scope = engine.tenant(tenant)
    return {mode: [(h.chunk_id, h.score) for h in scope.search(QUERY, "docs", mode=mode, top_k=4).results]
            for mode in ("keyword", "hybrid")}


def test_a_tenants_results_do_not_move_when_another_tenant_ingests(db_url: str, embedder) -> None:
    """Tenant B's keyword and hybrid ids and scores are identical before and after tenant A loads
    thousands of chunks full of the query's terms (keyword statistics are per collection)."""
    with Bunko(db_url, embedder=embedder) as engine:
        b = engine.tenant("tenant-b")
        for i, text in enumerate(B_TEXTS):
            b.add_document(Document(text, {"source": f"b{i}.txt"}), "docs")
        before = _results(engine, "tenant-b")
        assert before["keyword"] and before["hybrid"]

        a = engine.backend.for_tenant("tenant-a")
        a.ensure_collection("docs", INFO)
        flood = "水の備蓄 水の備蓄 emergency water water storage 備蓄 水"
        for batch in range(6):
            a.write_documents("docs", [
                make_document(f"a{batch}-{d}.txt", [f"{flood} {batch} {d} {i}" for i in range(50)],
                              unit_vectors(50, seed=batch * 100 + d))
                for d in range(10)])
        assert a.count("docs") == 3000
        assert engine.tenant("tenant-a").store.keyword_search("docs", QUERY, 3)  # A's flood is searchable

        after = _results(engine, "tenant-b")
    assert after == before
