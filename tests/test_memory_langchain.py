"""LangChain's standard ``VectorStoreIntegrationTests`` for ``BunkoVectorStore``, on both stores."""

from __future__ import annotations

import itertools
from collections.abc import Generator, Iterator
from pathlib import Path

import pytest

pytest.importorskip("langchain_core")
pytest.importorskip("langchain_tests")

from langchain_core.documents import Document
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.vectorstores import VectorStore
from langchain_tests.integration_tests.vectorstores import VectorStoreIntegrationTests

from bunko.integrations.langchain import BunkoVectorStore

_collections = itertools.count()


class TestBunkoVectorStoreSQLite(VectorStoreIntegrationTests):
    """Every standard test, sync and async, on the embedded store (a fresh file per test)."""

    @pytest.fixture()
    def vectorstore(self, tmp_path: Path) -> Generator[VectorStore, None, None]:  # type: ignore[override]
        store = BunkoVectorStore(self.get_embeddings(), database_url=f"sqlite:///{tmp_path / 'lc.db'}")
        try:
            yield store
        finally:
            store.delete()
            store.close()


@pytest.fixture(scope="module")
def pg_database(request: pytest.FixtureRequest) -> Iterator[str]:
    server = request.getfixturevalue("pg_server")
    url = server.new_database()
    yield url
    server.drop_database(url)


class TestBunkoVectorStorePostgres(VectorStoreIntegrationTests):
    """Every standard test on PostgreSQL: one database for the module, an empty collection per test."""

    @pytest.fixture()
    def vectorstore(self, pg_database: str) -> Generator[VectorStore, None, None]:  # type: ignore[override]
        store = BunkoVectorStore(self.get_embeddings(), collection=f"lc-{next(_collections)}", tenant="lc",
                                 database_url=pg_database)
        try:
            yield store
        finally:
            store.delete()
            store.close()


def test_tenants_are_isolated_and_filters_and_retriever_work(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'lc.db'}"
    embeddings = DeterministicFakeEmbedding(size=16)
    acme = BunkoVectorStore.from_texts(["有給休暇は20日", "経費精算は月末"], embeddings,
                                       [{"year": 2024}, {"year": 2020}], tenant="acme", database_url=url)
    other = BunkoVectorStore(embeddings, tenant="other", database_url=url)
    try:
        assert other.similarity_search("有給休暇は20日", k=2) == []
        assert other.get_by_ids([d.id for d in acme.similarity_search("x", k=2)]) == []
        hits = acme.similarity_search("有給休暇は20日", k=2, filter={"year": {"$gte": 2021}})
        assert [d.page_content for d in hits] == ["有給休暇は20日"] and hits[0].metadata == {"year": 2024}
        retrieved = acme.as_retriever(search_kwargs={"k": 1}).invoke("経費精算は月末")
        assert retrieved == [Document(id=retrieved[0].id, page_content="経費精算は月末", metadata={"year": 2020})]
        scored = acme.similarity_search_with_relevance_scores("経費精算は月末", k=1)
        assert scored[0][1] == pytest.approx(1.0, abs=1e-5)
    finally:
        acme.close()
        other.close()
