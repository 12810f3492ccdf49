"""Workflow blocks (seed 000, R30) on both stores: the seed's two flows end to end, every error code,
the seed's configs against the schemas, and tenant isolation whatever a workflow's config says."""

from __future__ import annotations

import copy
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bunko import Bunko
from bunko.blocks import SEED_BLOCK_NAMES, BlockError, describe_blocks, get_block, register_block, unregister_block
from bunko.blocks import registry as block_registry
from bunko.blocks.base import Block
from bunko.blocks.ctx import BlockContext

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / "examples" / "workflows"
FACT = "非常用の水は一人一日3リットルを目安に、最低3日分を備蓄します。"
OTHER_FACT = "避難所は地域の小学校の体育館で、ペットは同行避難できます。"
FILLER = "\n\n".join(f"第{i}項: 懐中電灯、携帯ラジオ、救急セットを点検し、家族の連絡方法を確認しておきます。"
                     for i in range(20))


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, embedder: Any) -> Iterator[Bunko]:
    """One engine per store for the whole module; each test works in tenants of its own."""
    server = request.getfixturevalue("pg_server") if request.param == "postgresql" else None
    url = server.new_database() if server else f"sqlite:///{tmp_path_factory.mktemp('blocks') / 'blocks.db'}"
    e = Bunko(url, embedder=embedder)
    yield e
    e.close()
    if server:
        server.drop_database(url)


def ingest(tenant: Any, text: str, collection: str = "bousai") -> dict[str, Any]:
    spec = json.loads(json.dumps(__import__("yaml").safe_load((WORKFLOWS / "ingest.yaml").read_text("utf-8"))))
    spec["steps"][-1]["config"]["collection"] = collection
    return tenant.run_workflow(spec, {"text": text}).to_dict()


def ask(tenant: Any, question: str, collection: str = "bousai", **config: Any) -> dict[str, Any]:
    return tenant.run_workflow({"name": "ask", "steps": [
        {"id": "answer", "block": "rag-query", "config": {"collection": collection, **config}}]},
        {"query": question}).to_dict()


def error_of(tenant: Any, spec: Any, input: Any = None) -> BlockError:
    with pytest.raises(BlockError) as caught:
        tenant.run_workflow(spec, input)
    return caught.value


# -- the seed's two flows ------------------------------------------------------------------------

def test_seed_ingest_flow_then_rag_query_answers_with_a_citation(engine: Bunko) -> None:
    acme = engine.tenant("flows")
    result = acme.run_workflow(WORKFLOWS / "ingest.yaml", {"text": FILLER + "\n\n" + FACT})
    data = result.to_dict()
    assert data["workflow"] == "ingest" and set(data) == {"workflow", "steps", "output"}
    assert [(s["id"], s["block"], s["status"]) for s in data["steps"]] == [
        ("load", "doc-loader", "completed"), ("split", "text-splitter", "completed"),
        ("embed", "embedding", "completed"), ("store", "vector-upsert", "completed")]
    assert all(isinstance(s["duration_ms"], float) and s["duration_ms"] >= 0 for s in data["steps"])
    split = result.outputs["split"]
    assert split["chunk_count"] > 1 and split["original_count"] == 1
    assert all(len(d["content"]) <= 500 for d in split["documents"])
    embedded = result.outputs["embed"]
    assert embedded["dimension"] == 512 and all(len(d["vector"]) == 512 for d in embedded["documents"])
    output = data["output"]
    assert output["collection"] == "bousai" and output["upserted_count"] == split["chunk_count"]
    assert acme.store.count("bousai") == split["chunk_count"]

    answer = acme.run_workflow(WORKFLOWS / "rag-query.json", {"query": "水は何日分備蓄すればいいですか？"}).to_dict()
    out = answer["output"]
    assert answer["steps"][0]["block"] == "rag-query" and answer["steps"][0]["status"] == "completed"
    assert "3日分" in out["answer"] and "[1]" in out["answer"], out["answer"]
    assert out["extractive"] is True and [s["index"] for s in out["sources"]] == list(range(1, len(out["sources"]) + 1))
    assert {s["id"] for s in out["sources"]} <= set(output["ids"])
    assert any("3日分" in s["content"] for s in out["sources"])
    # Metered in this tenant (R13): embedding calls, the upsert, the search.
    assert {u.operation for u in acme.usage()} >= {"embedding", "upsert", "search"}


def test_the_block_answer_is_the_answer_of_ask(engine: Bunko) -> None:
    scope = engine.tenant("parity")
    ingest(scope, FACT + "\n\n" + OTHER_FACT)
    question = "ペットと避難できますか？"
    block = ask(scope, question)["output"]
    asked = scope.ask(question, collection="bousai")
    assert block["answer"] == asked.answer
    assert [s["id"] for s in block["sources"]] == [s.chunk_id for s in asked.sources]


def test_steps_take_input_from_any_earlier_step(engine: Bunko) -> None:
    scope = engine.tenant("refs")
    spec = {"name": "refs", "steps": [
        {"id": "load", "block": "doc-loader", "config": {"source_type": "text"}},
        {"id": "store", "block": "vector-upsert", "input": {"documents": "$load.documents",
                                                             "collection": "$input.collection"}},
        {"id": "find", "block": "vector-search", "input": {"query": "$input.text", "collection": "$input.collection"},
         "config": {"top_k": 1, "include_content": False}},
        {"id": "drop", "block": "vector-delete", "input": {"ids": "$store.ids", "collection": "$input.collection"}},
    ]}
    result = scope.run_workflow(spec, {"text": FACT, "collection": "notes"})
    found = result.outputs["find"]
    assert found["count"] == 1 and found["matches"][0]["id"] == result.outputs["store"]["ids"][0]
    assert "content" not in found["matches"][0]
    assert result.output == {"collection": "notes", "deleted_count": 1, "requested_ids": result.outputs["store"]["ids"]}
    assert scope.store.count("notes") == 0
    # Metered in the tenant, each record tagged with its workflow, step and block.
    assert {u.operation for u in scope.usage()} >= {"embedding", "upsert", "search", "delete"}
    store = scope.store
    with store.session() as (conn, tenant_pk):  # type: ignore[attr-defined]
        rows = store.run(conn, "SELECT operation, metadata FROM usage_records WHERE tenant_id = ?",  # type: ignore
                         (tenant_pk,)).fetchall()
    tags = {(op, (m if isinstance(m, dict) else json.loads(m)).get("step")) for op, m in rows}
    assert tags >= {("upsert", "store"), ("search", "find"), ("delete", "drop"), ("embedding", "store")}


# -- every error code ----------------------------------------------------------------------------

def _one(block: str, config: dict[str, Any] | None = None, step: str = "s1") -> dict[str, Any]:
    return {"name": "errors", "steps": [{"id": step, "block": block, **({"config": config} if config else {})}]}


DOCS = {"documents": [{"content": FACT}]}
ERRORS = [
    # (id, spec, input, code, step, block, path)
    ("VECTOR_001 from the block", _one("vector-upsert"), DOCS, "VECTOR_001", "s1", "vector-upsert", None),
    ("VECTOR_001 from the schema", _one("vector-upsert", {"collection": ""}), DOCS, "VECTOR_001", "s1",
     "vector-upsert", "config.collection"),
    ("VECTOR_001 search", _one("vector-search"), {"query": "x"}, "VECTOR_001", "s1", "vector-search", None),
    ("VECTOR_001 delete", _one("vector-delete"), {"ids": ["a"]}, "VECTOR_001", "s1", "vector-delete", None),
    ("VECTOR_002", _one("vector-upsert", {"collection": "c"}), {"documents": []}, "VECTOR_002", "s1",
     "vector-upsert", None),
    ("VECTOR_003", _one("vector-search", {"collection": "c"}), {}, "VECTOR_003", "s1", "vector-search", None),
    ("VECTOR_004", _one("vector-delete", {"collection": "c"}), {}, "VECTOR_004", "s1", "vector-delete", None),
    ("RAG_001", _one("rag-query", {"collection": "c"}), {}, "RAG_001", "s1", "rag-query", None),
    ("RAG_002 from the block", _one("rag-query"), {"query": "水"}, "RAG_002", "s1", "rag-query", None),
    ("RAG_002 from the schema", _one("rag-query", {"collection": ""}), {"query": "水"}, "RAG_002", "s1",
     "rag-query", "config.collection"),
    ("CONFIG_001 type", _one("text-splitter", {"chunk_size": "1000"}), {"text": "x"}, "CONFIG_001", "s1",
     "text-splitter", "config.chunk_size"),
    ("CONFIG_001 range", _one("text-splitter", {"chunk_size": 50}), {"text": "x"}, "CONFIG_001", "s1",
     "text-splitter", "config.chunk_size"),
    ("CONFIG_001 overlap", _one("text-splitter", {"chunk_size": 100, "chunk_overlap": 100}), {"text": "x"},
     "CONFIG_001", "s1", "text-splitter", "config.chunk_overlap"),
    ("CONFIG_001 unknown field", _one("vector-search", {"collection": "c", "topk": 3}), {"query": "x"},
     "CONFIG_001", "s1", "vector-search", "config.topk"),
    ("CONFIG_001 enum", _one("embedding", {"provider": "nonesuch"}), {"text": "x"}, "CONFIG_001", "s1", "embedding",
     "config.provider"),
    ("TENANT_001", _one("vector-search", {"collection": "c", "tenant": "acme"}), {"query": "x"}, "TENANT_001",
     "s1", "vector-search", "config.tenant"),
    ("TENANT_001 nested", _one("vector-search", {"collection": "c", "filter": {"$or": [{"tenant_id": "acme"}]}}),
     {"query": "x"}, "TENANT_001", "s1", "vector-search", "config.filter.$or[0].tenant_id"),
    ("TENANT_001 workflow", {"tenant": "acme", "steps": [{"block": "doc-loader"}]}, {}, "TENANT_001", None, None,
     "workflow.tenant"),
    ("INPUT_001", _one("embedding"), {}, "INPUT_001", "s1", "embedding", None),
    ("INPUT_001 documents", _one("text-splitter"), {"documents": "text"}, "INPUT_001", "s1", "text-splitter", None),
    ("LOADER_001", _one("doc-loader", {"source_type": "text"}), {}, "LOADER_001", "s1", "doc-loader", None),
    ("LOADER_001 url", _one("doc-loader"), {}, "LOADER_001", "s1", "doc-loader", None),
    ("PROVIDER_001", _one("embedding", {"provider": "openai", "model": "text-embedding-3-small"}), {"text": "x"},
     "PROVIDER_001", "s1", "embedding", None),
    ("WORKFLOW_001 no steps", {"name": "w"}, {}, "WORKFLOW_001", None, None, "workflow"),
    ("WORKFLOW_001 bad step", {"steps": [{"block": "doc-loader", "when": "always"}]}, {}, "WORKFLOW_001", None,
     None, "workflow.steps[0]"),
    ("WORKFLOW_001 forward reference", {"steps": [{"id": "a", "block": "doc-loader", "input": "b"},
                                                  {"id": "b", "block": "doc-loader"}]}, {}, "WORKFLOW_001", "a",
     "doc-loader", "workflow.steps[0].input"),
    ("WORKFLOW_002", _one("llm-chat"), {}, "WORKFLOW_002", "s1", "llm-chat", None),
    ("COLLECTION_NOT_FOUND", _one("rag-query", {"collection": "nowhere"}), {"query": "水"}, "COLLECTION_NOT_FOUND",
     "s1", "rag-query", None),
]


@pytest.mark.parametrize(("spec", "input", "code", "step", "block", "path"), [e[1:] for e in ERRORS],
                         ids=[e[0] for e in ERRORS])
def test_every_error_code_names_its_step(engine: Bunko, monkeypatch: pytest.MonkeyPatch, spec: Any, input: Any,
                                         code: str, step: str | None, block: str | None, path: str | None) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    error = error_of(engine.tenant("errors"), copy.deepcopy(spec), input)
    assert (error.code, error.step, error.block) == (code, step, block), error.to_dict()
    if path is not None:
        assert error.path == path and path in error.message, error.to_dict()
    body = error.to_dict()
    assert set(body) >= {"code", "step", "block", "message"} and body["message"]


def test_a_bad_config_fails_before_any_step_runs(engine: Bunko) -> None:
    scope = engine.tenant("early")
    spec = {"steps": [{"block": "doc-loader", "config": {"source_type": "text"}},
                      {"block": "vector-upsert", "config": {"collection": "early"}},
                      {"block": "vector-search", "config": {"collection": "early", "top_k": "3"}}]}
    error = error_of(scope, spec, {"text": FACT})
    assert (error.code, error.step, error.path) == ("CONFIG_001", "vector-search", "config.top_k")
    assert scope.collections() == []  # the upsert before it never ran


def test_a_failing_step_reports_the_steps_so_far(engine: Bunko) -> None:
    spec = {"steps": [{"id": "load", "block": "doc-loader", "config": {"source_type": "text"}},
                      {"id": "store", "block": "vector-upsert"}, {"id": "find", "block": "vector-search"}]}
    error = error_of(engine.tenant("partial"), spec, {"text": FACT})
    assert error.code == "VECTOR_001" and error.step == "store"
    assert [(s["id"], s["status"]) for s in error.steps] == [("load", "completed"), ("store", "failed"),
                                                             ("find", "skipped")]


# -- the seed's configs against the schemas -------------------------------------------------------

# Seed 000 §5's config schemas, as written there.
SEED_SCHEMAS: dict[str, dict[str, Any]] = {
    "doc-loader": {"source_type": {"type": "string", "enum": ["url", "text", "json"], "default": "url"},
                   "url": {"type": "string"}, "content": {"type": "string"},
                   "strip_html": {"type": "boolean", "default": True}},
    "text-splitter": {"chunk_size": {"type": "integer", "default": 1000, "minimum": 100, "maximum": 8000},
                      "chunk_overlap": {"type": "integer", "default": 200, "minimum": 0},
                      "separator": {"type": "string", "default": "\n\n"}},
    "embedding": {"provider": {"type": "string", "enum": ["openai", "cohere", "voyage"], "default": "openai"},
                  "model": {"type": "string", "default": "text-embedding-3-small"}},
    "vector-upsert": {"collection": {"type": "string"},
                      "embedding_provider": {"type": "string", "enum": ["openai", "cohere"], "default": "openai"},
                      "embedding_model": {"type": "string", "default": "text-embedding-3-small"}},
    "vector-search": {"collection": {"type": "string"},
                      "top_k": {"type": "integer", "default": 5, "minimum": 1, "maximum": 100},
                      "threshold": {"type": "number", "minimum": 0, "maximum": 1},
                      "include_content": {"type": "boolean", "default": True},
                      "embedding_provider": {"type": "string", "default": "openai"},
                      "embedding_model": {"type": "string", "default": "text-embedding-3-small"}},
    "vector-delete": {},
    "rag-query": {"collection": {"type": "string"}, "top_k": {"type": "integer", "default": 5},
                  "embedding_provider": {"type": "string", "enum": ["openai", "cohere"], "default": "openai"},
                  "embedding_model": {"type": "string", "default": "text-embedding-3-small"},
                  "llm_provider": {"type": "string", "enum": ["openai", "anthropic"], "default": "openai"},
                  "llm_model": {"type": "string", "default": "gpt-4"},
                  "system_prompt": {"type": "string"},
                  "temperature": {"type": "number", "default": 0.3, "minimum": 0, "maximum": 2},
                  "max_tokens": {"type": "integer", "default": 2000}},
}
# Configs as the seed's blocks are used: every field the seed's schema has, at its default or a typical value.
SEED_EXAMPLES: dict[str, list[dict[str, Any]]] = {
    "doc-loader": [{"source_type": "url", "url": "https://example.com/guide.html", "strip_html": True},
                   {"source_type": "text", "content": "本文", "strip_html": False}, {"source_type": "json"}],
    "text-splitter": [{"chunk_size": 1000, "chunk_overlap": 200, "separator": "\n\n"}],
    "embedding": [{"provider": "openai", "model": "text-embedding-3-small"}, {"provider": "voyage", "model": "v"}],
    "vector-upsert": [{"collection": "my-docs", "embedding_provider": "openai",
                       "embedding_model": "text-embedding-3-small"}],
    "vector-search": [{"collection": "my-docs", "top_k": 5, "threshold": 0.7, "include_content": True,
                       "embedding_provider": "openai", "embedding_model": "text-embedding-3-small"}],
    "vector-delete": [{"collection": "my-docs"}],
    "rag-query": [{"collection": "my-docs", "top_k": 5, "embedding_provider": "openai",
                   "embedding_model": "text-embedding-3-small", "llm_provider": "openai", "llm_model": "gpt-4",
                   "system_prompt": "You are a helpful assistant.", "temperature": 0.3, "max_tokens": 2000}],
}
WRONG_TYPES = {"doc-loader": ("strip_html", "yes"), "text-splitter": ("chunk_overlap", 1.5),
               "embedding": ("model", 3), "vector-upsert": ("collection", ["a"]), "vector-search": ("top_k", "5"),
               "vector-delete": ("collection", 7), "rag-query": ("temperature", "warm")}


@pytest.mark.parametrize("name", SEED_BLOCK_NAMES)
def test_seed_configs_validate_and_wrong_types_name_the_field(name: str) -> None:
    from jsonschema import Draft202012Validator

    block = get_block(name)
    schema = block.config_schema
    Draft202012Validator.check_schema(schema)
    ours = schema["properties"]
    seed = SEED_SCHEMAS[name]
    for field, spec in seed.items():  # every seed field is there, with the seed's type, enum values and bounds
        assert ours[field]["type"] == spec["type"], field
        assert set(spec.get("enum", [])) <= set(ours[field].get("enum", spec.get("enum", []))), field
        for bound in ("minimum", "maximum"):
            if bound in spec and bound in ours[field]:
                assert ours[field][bound] == spec[bound], (field, bound)
    seed_defaults = {field: spec["default"] for field, spec in seed.items() if "default" in spec}
    configs = [seed_defaults, *SEED_EXAMPLES[name]]
    if "collection" in ours:
        configs = [{**c, "collection": c.get("collection", "my-docs")} for c in configs]
    for config in configs:
        checked = block.check_config(config)
        assert {k: checked[k] for k in config} == config
    field, bad = WRONG_TYPES[name]
    good = {"collection": "my-docs"} if "collection" in ours and field != "collection" else {}
    with pytest.raises(BlockError) as caught:
        block.check_config({**good, field: bad})
    expected = "VECTOR_001" if field == "collection" else "CONFIG_001"
    assert caught.value.code == expected and caught.value.path == f"config.{field}"
    if expected == "CONFIG_001":
        assert caught.value.message.startswith(f"config.{field}: ")


def test_the_registry_lists_exactly_the_seed_blocks() -> None:
    entries = describe_blocks()
    assert [e["name"] for e in entries] == list(SEED_BLOCK_NAMES)
    assert all(not e["addition"] and e["category"] in ("data", "ai") and e["description"] and
               e["config_schema"]["type"] == "object" for e in entries)


# -- tenant isolation ------------------------------------------------------------------------------

class ListCollections(Block):
    """A third-party block: the collections its ctx can see."""

    name = "list-collections"
    category = "data"
    description = "the tenant's collections"

    async def run(self, ctx: BlockContext, input: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        return {"collections": await ctx.vector.list_collections()}


def test_a_workflow_of_tenant_b_never_reads_updates_or_deletes_tenant_a_data(engine: Bunko) -> None:
    a, b = engine.tenant("iso-a"), engine.tenant("iso-b")
    a_ids = ingest(a, FACT, "shared")["output"]["ids"]
    ingest(a, OTHER_FACT, "a-only")
    usage_a = [u.to_dict() for u in a.usage()]

    # B has no collection "shared": B's blocks cannot see A's, whatever the name.
    assert error_of(b, _one("rag-query", {"collection": "shared"}), {"query": "水は何日分？"}).code == \
        "COLLECTION_NOT_FOUND"
    assert error_of(b, _one("vector-delete", {"collection": "shared"}), {"ids": a_ids}).code == "COLLECTION_NOT_FOUND"
    # A config or a workflow that names A's tenant is refused; an input that does is only data.
    assert error_of(b, _one("rag-query", {"collection": "shared", "tenant": "iso-a"}),
                    {"query": "水"}).code == "TENANT_001"
    assert error_of(b, {**_one("rag-query", {"collection": "shared"}), "tenant_id": "iso-a"},
                    {"query": "水"}).code == "TENANT_001"

    # B builds its own "shared"; searching, answering, deleting and overwriting by A's ids touch B's only.
    b_ids = ingest(b, OTHER_FACT, "shared")["output"]["ids"]
    found = b.run_workflow(_one("vector-search", {"collection": "shared", "top_k": 10}),
                           {"query": FACT, "tenant": "iso-a"}).output
    assert {m["id"] for m in found["matches"]} == set(b_ids) and FACT not in json.dumps(found, ensure_ascii=False)
    answer = ask(b, "水は何日分備蓄すればいいですか？", "shared")["output"]
    assert {s["id"] for s in answer["sources"]} <= set(b_ids) and "3日分" not in answer["answer"]
    deleted = b.run_workflow(_one("vector-delete", {"collection": "shared"}), {"ids": a_ids}).output
    assert deleted["deleted_count"] == 0
    overwrite = [{"id": i, "content": "上書きされた内容"} for i in a_ids]
    b.run_workflow(_one("vector-upsert", {"collection": "shared"}), {"documents": overwrite})
    assert b.store.count("shared") == len(b_ids) + len(a_ids)

    # A's data and usage are as they were.
    assert [u.to_dict() for u in a.usage()] == usage_a
    assert a.store.count("shared") == len(a_ids)
    hits = a.query("shared", text=FACT, top_k=5)
    assert {h.chunk_id for h in hits} == set(a_ids) and all("上書き" not in h.content for h in hits)
    assert ask(a, "水は何日分備蓄すればいいですか？", "shared")["output"]["sources"][0]["id"] in a_ids

    # A third-party block sees only its tenant's collections through ctx.vector.
    register_block("list-collections", ListCollections)
    try:
        assert describe_blocks()[-1] == {**describe_blocks()[-1], "name": "list-collections", "addition": True}
        seen_b = b.run_workflow(_one("list-collections"), {}).output["collections"]
        seen_a = a.run_workflow(_one("list-collections"), {}).output["collections"]
    finally:
        unregister_block("list-collections")
    assert [c["name"] for c in seen_b] == ["shared"]
    assert sorted(c["name"] for c in seen_a) == ["a-only", "shared"]


# -- third-party blocks by entry point --------------------------------------------------------------

def test_a_block_joins_by_entry_point(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    info = site / "bunko_block_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bunko-block-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[bunko.blocks]\nlist-collections = {__name__}:ListCollections\n")
    monkeypatch.syspath_prepend(str(site))
    block_registry._REGISTRY.reload()
    try:
        entries = {e["name"]: e for e in describe_blocks()}
        assert entries["list-collections"]["addition"] is True and entries["rag-query"]["addition"] is False
        assert list(entries)[:7] == list(SEED_BLOCK_NAMES)
    finally:
        sys.path.remove(str(site))
        block_registry._REGISTRY.reload()
    assert "list-collections" not in {e["name"] for e in describe_blocks()}
