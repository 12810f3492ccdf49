"""R14 at the tenant level: upsert records with or without their own vectors, query by vector or by text."""

from __future__ import annotations

import numpy as np
import pytest

from bunko import Bunko, CollectionNotFoundError, DimensionMismatchError, VectorRecord, VectorStoreError
from bunko.errors import EmbedderMismatchError, FilterError
from bunko.requests import QueryRequest


def _unit(seed: int, dimension: int = 512) -> list[float]:
    vector = np.random.default_rng(seed).standard_normal(dimension)
    return (vector / np.linalg.norm(vector)).tolist()


def test_upsert_with_and_without_vectors_and_query_by_vector_and_text(engine: Bunko) -> None:
    acme = engine.tenant("acme")
    ids = acme.upsert("notes", [
        VectorRecord("a record that brings its own vector", {"kind": "given"}, id="given-1", vector=_unit(1)),
        {"content": "非常用の水は一人一日3リットルを目安に備蓄します。", "metadata": {"kind": "embedded"}},
        {"content": "The evacuation shelter is the elementary school gym.", "metadata": {"kind": "embedded"}},
    ])
    assert ids[0] == "given-1" and len(ids) == 3 and len(set(ids)) == 3
    collection = acme.store.get_collection("notes")  # created on first upsert, for the engine's embedder
    assert (collection.embedding_provider, collection.dimension) == ("use", 512)
    assert acme.store.count("notes") == 3

    by_vector = acme.query("notes", vector=_unit(1), top_k=2)
    assert by_vector[0].chunk_id == "given-1" and by_vector[0].score == pytest.approx(1.0, abs=1e-4)
    by_text = acme.query("notes", text="水の備蓄は一日何リットル？", top_k=1)
    assert by_text[0].chunk_id == ids[1] and "3リットル" in by_text[0].content
    filtered = acme.query("notes", text="水の備蓄", top_k=3, filter={"kind": "given"}, include_content=False)
    assert [h.chunk_id for h in filtered] == ["given-1"] and filtered[0].content == ""
    assert acme.query(QueryRequest(collection="notes", vector=_unit(1), threshold=0.99))[0].chunk_id == "given-1"

    # Update on conflict: the same id with new content and no vector is re-embedded in place.
    acme.upsert("notes", [{"id": "given-1", "content": "避難所は小学校の体育館です。"}])
    assert acme.store.count("notes") == 3
    assert acme.query("notes", text="避難所はどこ？", top_k=1)[0].chunk_id == "given-1"
    assert {u.operation for u in acme.usage()} >= {"upsert", "search", "embedding"}


def test_wrong_dimensions_and_bad_records_are_typed_errors(engine: Bunko) -> None:
    acme = engine.tenant("acme")
    with pytest.raises(DimensionMismatchError, match="record 0"):
        acme.upsert("notes", [VectorRecord("short", vector=[0.1, 0.2, 0.3])])
    acme.upsert("notes", [VectorRecord("ok", vector=_unit(2))])
    with pytest.raises(DimensionMismatchError, match="3 dimensions"):
        acme.query("notes", vector=[0.1, 0.2, 0.3])
    with pytest.raises(VectorStoreError, match="finite"):
        acme.upsert("notes", [VectorRecord("nan", vector=[float("nan")] * 512)])
    with pytest.raises(VectorStoreError, match="content to embed"):
        acme.upsert("notes", [{"content": "  "}])
    with pytest.raises(VectorStoreError, match="unknown field"):
        acme.upsert("notes", [{"content": "x", "vectors": [1.0]}])
    with pytest.raises(VectorStoreError, match="exactly one"):
        acme.query("notes", vector=_unit(2), text="both")
    with pytest.raises(VectorStoreError, match="exactly one"):
        acme.query("notes")
    with pytest.raises(FilterError):
        acme.query("notes", text="x", filter={"year": {"$gt": []}})
    assert acme.store.count("notes") == 1  # nothing of the refused calls was stored


def test_a_collection_of_another_embedder_refuses_records_to_embed(engine: Bunko, tmp_path) -> None:
    from .test_pipeline import _TinyEmbedder

    engine.tenant("acme").upsert("notes", [{"content": "built with the bundled embedder"}])
    other = Bunko(engine.settings.database_url, embedder=_TinyEmbedder())
    try:
        scope = other.tenant("acme")
        with pytest.raises(EmbedderMismatchError):
            scope.upsert("notes", [{"content": "would be embedded by another model"}])
        with pytest.raises(EmbedderMismatchError):
            scope.query("notes", text="query with another model")
        scope.upsert("notes", [VectorRecord("a 512-d vector fits", vector=_unit(3))])  # vectors given: fine
        assert scope.store.count("notes") == 2
    finally:
        other.close()


def test_vector_records_stay_in_their_tenant(engine: Bunko) -> None:
    acme, globex = engine.tenant("acme"), engine.tenant("globex")
    acme.upsert("shared-name", [{"id": "secret", "content": "acme の社外秘の計画です。"}])
    with pytest.raises(CollectionNotFoundError):
        globex.query("shared-name", text="社外秘の計画")
    globex.upsert("shared-name", [{"id": "secret", "content": "globex の公開資料です。"}])  # same id, own tenant
    theirs = globex.query("shared-name", text="社外秘の計画", top_k=5)
    assert [h.content for h in theirs] == ["globex の公開資料です。"]
    assert [h.content for h in acme.query("shared-name", text="社外秘の計画", top_k=5)] == ["acme の社外秘の計画です。"]
