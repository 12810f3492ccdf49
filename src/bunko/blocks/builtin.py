"""Seed 000's seven RAG blocks (§5): their inputs, outputs, defaults, config schemas and error codes.

The schemas are the seed's, extended where they conflict with running offline or with themselves
(each change is listed in docs/BLOCKS.md):

* provider names default to ``"default"`` (the engine's configured embedder / LLM, bundled and
  offline) instead of ``openai`` / ``gpt-4``; the seed's names stay in the enums, next to every
  registered provider, and work when their API key is configured;
* ``collection`` is not ``required`` in the schema, because the seed's code also reads it from the
  input; it has ``minLength: 1``, and a missing or empty collection reports ``VECTOR_001``
  (``RAG_002`` for rag-query) whether the schema or the block catches it;
* additions: ``doc-loader.content_path`` and ``metadata`` (read by the seed's code but not in its
  schema), ``vector-search.filter`` / ``mode`` and ``rag-query.filter`` / ``mode``, a schema for
  ``vector-delete`` (the seed has none), ``additionalProperties: false`` everywhere.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from typing_extensions import override

from ..embedders import available_embedders
from ..llm import available_llms
from ..requests import MAX_TOP_K, MODES
from ..splitters import DEFAULT_SEPARATORS, RecursiveCharacterSplitter
from .base import Block
from .ctx import DEFAULT, BlockContext
from .errors import BlockConfigError, BlockInputError

_FILTER = {"type": "object", "title": "メタデータフィルタ",
           "description": "bunko's metadata filter ($eq $ne $gt $gte $lt $lte $in $nin $and $or $not $exists "
                          "$contains); see docs/FILTERS.md"}
_COLLECTION = {"type": "string", "minLength": 1, "title": "コレクション名",
               "description": "Read from the config, else from the input's collection"}


def _providers(seed: list[str], names: list[str]) -> list[str]:
    return list(dict.fromkeys([DEFAULT, *seed, *names]))


def _embedding_provider(seed: list[str], title: str = "Embeddingプロバイダー") -> dict[str, Any]:
    return {"type": "string", "enum": _providers(seed, available_embedders()), "default": DEFAULT, "title": title,
            "description": "default: the engine's configured embedder (bundled, offline)"}


def _embedding_model() -> dict[str, Any]:
    return {"type": "string", "title": "Embeddingモデル",
            "description": "The provider's model; left out: the engine's (or the provider's default) model"}


def _documents(input: dict[str, Any], block: str) -> list[dict[str, Any]]:
    """``input.documents``, or one document from ``input.content`` / ``input.text`` (the seed's fallback)."""
    documents = input.get("documents")
    if documents is None:
        text = input.get("content", input.get("text"))
        if not isinstance(text, str) or not text.strip():
            raise BlockInputError("INPUT_001", f"{block} needs input.documents, or input.content / input.text")
        return [{"content": text, "metadata": {}}]
    if not isinstance(documents, list) or not all(isinstance(d, dict) for d in documents):
        raise BlockInputError("INPUT_001", "input.documents must be a list of {content, metadata} objects")
    for position, document in enumerate(documents):
        if not isinstance(document.get("content"), str):
            raise BlockInputError("INPUT_001", f"input.documents[{position}].content must be text")
        if not isinstance(document.get("metadata", {}), dict):
            raise BlockInputError("INPUT_001", f"input.documents[{position}].metadata must be an object")
    return documents


def _collection(block: Block, config: dict[str, Any], input: dict[str, Any]) -> str:
    """The collection the config names, else the input; the block's ``collection_code`` when neither does."""
    collection = config.get("collection") or input.get("collection")
    if not collection:
        code = block.collection_code or "VECTOR_001"
        raise BlockInputError(code, "collection is required (in the config or the input)")
    if not isinstance(collection, str):
        raise BlockInputError("INPUT_001", "input.collection must be a string")
    return collection


def _path(data: Any, path: str) -> Any:
    """The value at a dotted path (``data.items.0.body``), None when absent."""
    for part in path.split("."):
        if isinstance(data, dict):
            data = data.get(part)
        elif isinstance(data, list) and part.isdigit() and int(part) < len(data):
            data = data[int(part)]
        else:
            return None
    return data


_SCRIPT = re.compile(r"<script[^>]*>[\s\S]*?</script>", re.IGNORECASE)
_STYLE = re.compile(r"<style[^>]*>[\s\S]*?</style>", re.IGNORECASE)
_TAG = re.compile(r"<[^>]+>")
_SPACE = re.compile(r"\s+")


def strip_html(text: str) -> str:
    """The seed's HTML stripping of a text: scripts, styles and tags out, whitespace collapsed."""
    return _SPACE.sub(" ", _TAG.sub(" ", _STYLE.sub("", _SCRIPT.sub("", text)))).strip()


def _document(content: str, metadata: dict[str, Any]) -> dict[str, Any]:
    return {"content": content, "metadata": metadata, "char_count": len(content)}


class DocLoader(Block):
    """doc-loader: one document from a URL, a text or JSON."""

    name = "doc-loader"
    category = "data"
    description = "URL、テキスト、APIからドキュメントを読み込み (load a document from a URL, a text or JSON)"

    @override
    def config_properties(self) -> dict[str, Any]:
        return {
            "source_type": {"type": "string", "enum": ["url", "text", "json"], "default": "url",
                            "title": "ソースタイプ"},
            "url": {"type": "string", "title": "URL", "description": "source_type=url の場合に使用"},
            "content": {"type": "string", "title": "テキストコンテンツ",
                        "description": "source_type=text の場合に使用"},
            "strip_html": {"type": "boolean", "default": True, "title": "HTMLタグを除去"},
            "content_path": {"type": "string", "title": "JSONの本文パス",
                             "description": "source_type=json: dotted path of the text (data.body)"},
            "metadata": {"type": "object", "title": "メタデータ", "description": "Added to the document's metadata"},
        }

    @override
    async def run(self, ctx: BlockContext, input: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        source_type = config["source_type"]
        extra = dict(config.get("metadata") or {})
        documents: list[dict[str, Any]] = []
        if source_type == "url":
            url = config.get("url") or input.get("url")
            if not isinstance(url, str) or not url.strip():
                raise BlockInputError("LOADER_001", "source_type url needs config.url or input.url")
            if config["strip_html"]:
                # The URL loader: HTML main text, PDF pages, text and JSON, each with its metadata.
                for loaded in await ctx.http.load(url):
                    meta = {**loaded.metadata, "source": loaded.metadata.get("source", url), "source_type": "url",
                            "content_type": loaded.metadata.get("mime_type"), **extra}
                    documents.append(_document(loaded.content, meta))
            else:
                response = await ctx.http.get(url)
                data = response["data"]
                content = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
                documents.append(_document(content, {"source": response["url"], "source_type": "url",
                                                     "content_type": response["content_type"],
                                                     "fetched_at": response["fetched_at"], **extra}))
        elif source_type == "text":
            given = config.get("content") or input.get("content") or input.get("text")
            if not isinstance(given, str) or not given.strip():
                raise BlockInputError("LOADER_001", "source_type text needs config.content, or input.content / "
                                                    "input.text")
            content = strip_html(given) if config["strip_html"] and "<" in given else given
            documents.append(_document(content, {"source_type": "text", **extra}))
        else:
            data = input.get("data", input)
            if not data:
                raise BlockInputError("LOADER_001", "source_type json needs input.data (or a non-empty input)")
            path = config.get("content_path")
            value = _path(data, path) if path else data
            if value is None:
                raise BlockInputError("LOADER_001", f"config.content_path {path!r} is not in the input")
            content = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
            documents.append(_document(content, {"source_type": "json", **extra}))
        for document in documents:
            document["metadata"].setdefault("loaded_at", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            if not document["content"].strip():
                raise BlockInputError("LOADER_001", f"{document['metadata'].get('source', source_type)}: no text")
        return {"documents": documents}


class TextSplitter(Block):
    """text-splitter: chunks of ``chunk_size`` characters with ``chunk_overlap``, cut at ``separator`` first."""

    name = "text-splitter"
    category = "data"
    description = "テキストを指定サイズのチャンクに分割 (split documents into overlapping chunks)"

    @override
    def config_properties(self) -> dict[str, Any]:
        return {
            "chunk_size": {"type": "integer", "default": 1000, "minimum": 100, "maximum": 8000,
                           "title": "チャンクサイズ（文字数）"},
            "chunk_overlap": {"type": "integer", "default": 200, "minimum": 0, "title": "オーバーラップ（文字数）"},
            "separator": {"type": "string", "default": "\n\n", "title": "区切り文字"},
        }

    @override
    async def run(self, ctx: BlockContext, input: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        size, overlap = config["chunk_size"], config["chunk_overlap"]
        if overlap >= size:
            raise BlockConfigError("CONFIG_001", f"config.chunk_overlap: {overlap} must be smaller than chunk_size "
                                                 f"({size})", path="config.chunk_overlap")
        separators = list(dict.fromkeys([config["separator"], *DEFAULT_SEPARATORS]))
        # bunko's recursive splitter: cuts at the separator first, then lines, 。 and sentences, never
        # over chunk_size, with the overlap taken at a clean boundary (Japanese text has no spaces).
        splitter = RecursiveCharacterSplitter(size, overlap, separators)
        documents = _documents(input, self.name)
        result = []
        for document in documents:
            chunks = splitter.split(document["content"])
            for chunk in chunks:
                meta = {**document.get("metadata", {}), "chunk_index": chunk.index, "chunk_total": len(chunks),
                        "start": chunk.start, "end": chunk.end}
                result.append(_document(chunk.content, meta))
        return {"documents": result, "chunk_count": len(result), "original_count": len(documents)}


class Embedding(Block):
    """embedding: a vector on every document."""

    name = "embedding"
    category = "ai"
    description = "テキストをベクトル埋め込みに変換 (embed documents)"

    @override
    def config_properties(self) -> dict[str, Any]:
        return {
            "provider": _embedding_provider(["openai", "cohere", "voyage"]),
            "model": {**_embedding_model(), "title": "モデル"},
        }

    @override
    async def run(self, ctx: BlockContext, input: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        documents = _documents(input, self.name)
        result = await ctx.embedding.embed(config["provider"], config.get("model"),
                                           [d["content"] for d in documents])
        with_vectors = [{**d, "vector": v} for d, v in zip(documents, result["vectors"], strict=True)]
        return {"documents": with_vectors, "model": result["model"], "dimension": result["dimension"],
                "usage": result["usage"]}


class VectorUpsert(Block):
    """vector-upsert: store documents (with their vectors, or embedded now) in a collection."""

    name = "vector-upsert"
    category = "data"
    description = "ドキュメントをベクトルDBに保存 (store documents in a collection)"
    collection_code = "VECTOR_001"

    @override
    def config_properties(self) -> dict[str, Any]:
        return {
            "collection": {**_COLLECTION, "description": "ベクトルを保存するコレクション (config, else input)"},
            "embedding_provider": {**_embedding_provider(["openai", "cohere"]),
                                   "description": "ベクトルが未設定の場合に使用; default: the collection's embedder"},
            "embedding_model": _embedding_model(),
        }

    @override
    async def run(self, ctx: BlockContext, input: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        collection = _collection(self, config, input)
        documents = input.get("documents")
        if not documents:
            raise BlockInputError("VECTOR_002", "documents array is required")
        if not isinstance(documents, list):
            raise BlockInputError("INPUT_001", "input.documents must be a list")
        result = await ctx.vector.upsert(collection, documents, {
            "embedding_provider": config["embedding_provider"], "embedding_model": config.get("embedding_model")})
        return {"collection": collection, "upserted_count": result["upserted_count"], "ids": result["ids"]}


class VectorSearch(Block):
    """vector-search: the records nearest to a vector or a query text."""

    name = "vector-search"
    category = "data"
    description = "ベクトル類似検索を実行 (search a collection by vector or text)"
    collection_code = "VECTOR_001"

    @override
    def config_properties(self) -> dict[str, Any]:
        return {
            "collection": _COLLECTION,
            "top_k": {"type": "integer", "default": 5, "minimum": 1, "maximum": MAX_TOP_K, "title": "取得件数"},
            "threshold": {"type": "number", "minimum": 0, "maximum": 1, "title": "類似度閾値",
                          "description": "この値以上のスコアのみ返却"},
            "include_content": {"type": "boolean", "default": True, "title": "コンテンツを含める"},
            "embedding_provider": {**_embedding_provider([]), "description": "queryテキストのベクトル化に使用; "
                                   "default: the collection's embedder"},
            "embedding_model": _embedding_model(),
            "filter": _FILTER,
            "mode": {"type": "string", "enum": list(MODES), "default": "vector", "title": "検索モード",
                     "description": "vector (the seed's), keyword (BM25) or hybrid; a query text only"},
        }

    @override
    async def run(self, ctx: BlockContext, input: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        collection = _collection(self, config, input)
        vectors = input.get("vectors")
        vector = input.get("vector") or (vectors[0] if isinstance(vectors, list) and vectors else None)
        query = input.get("query")
        target: Any = vector if vector is not None else (query if isinstance(query, str) and query.strip() else None)
        if target is None:
            raise BlockInputError("VECTOR_003", "vector or query is required")
        mode = config["mode"]
        options = {"top_k": config["top_k"], "threshold": config.get("threshold"), "filter": config.get("filter"),
                   "include_content": config["include_content"]}
        if isinstance(target, str):
            # Embedded as a search query by the collection's embedder: the engine's, or the one named.
            options.update(mode=mode, embedding_provider=config["embedding_provider"],
                           embedding_model=config.get("embedding_model"))
        elif mode != "vector":
            raise BlockConfigError("CONFIG_001", f"config.mode: {mode} needs a query text, not a vector",
                                   path="config.mode")
        result = await ctx.vector.query(collection, target, options)
        return {"matches": result["matches"], "count": len(result["matches"]), "collection": collection}


class VectorDelete(Block):
    """vector-delete: delete records of a collection by id."""

    name = "vector-delete"
    category = "data"
    description = "ベクトルDBからドキュメントを削除 (delete records by id)"
    collection_code = "VECTOR_001"

    @override
    def config_properties(self) -> dict[str, Any]:
        return {"collection": _COLLECTION}

    @override
    async def run(self, ctx: BlockContext, input: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        collection = _collection(self, config, input)
        ids = input.get("ids") or ([input["id"]] if input.get("id") else None)
        if not ids:
            raise BlockInputError("VECTOR_004", "ids array is required")
        if not isinstance(ids, list):
            raise BlockInputError("INPUT_001", "input.ids must be a list of ids")
        result = await ctx.vector.delete(collection, ids)
        return {"collection": collection, "deleted_count": result["deleted_count"], "requested_ids": ids}


class RagQuery(Block):
    """rag-query: search a collection and answer from the hits with ``[N]`` citations."""

    name = "rag-query"
    category = "ai"
    description = "RAGパイプライン（検索→コンテキスト構築→LLM回答） (answer a question from a collection)"
    collection_code = "RAG_002"

    @override
    def config_properties(self) -> dict[str, Any]:
        return {
            "collection": _COLLECTION,
            "top_k": {"type": "integer", "default": 5, "minimum": 1, "maximum": MAX_TOP_K, "title": "検索件数"},
            "embedding_provider": _embedding_provider(["openai", "cohere"]),
            "embedding_model": _embedding_model(),
            "llm_provider": {"type": "string", "enum": _providers(["openai", "anthropic"], available_llms()),
                             "default": DEFAULT,
                             "description": "default: the engine's configured LLM; none: an extractive answer"},
            "llm_model": {"type": "string", "description": "The provider's model (the seed's default was gpt-4)"},
            "system_prompt": {"type": "string", "title": "システムプロンプト",
                              "description": "カスタムシステムプロンプト"},
            "temperature": {"type": "number", "default": 0.3, "minimum": 0, "maximum": 2},
            "max_tokens": {"type": "integer", "default": 2000, "minimum": 1},
            "filter": _FILTER,
            "mode": {"type": "string", "enum": list(MODES), "title": "検索モード",
                     "description": "vector, keyword or hybrid; left out: the engine's default, as ask uses"},
        }

    @override
    async def run(self, ctx: BlockContext, input: dict[str, Any], config: dict[str, Any]) -> dict[str, Any]:
        query = input.get("query") or input.get("question")
        if not isinstance(query, str) or not query.strip():
            raise BlockInputError("RAG_001", "query is required")
        collection = _collection(self, config, input)
        options: dict[str, Any] = {"top_k": config["top_k"], "filter": config.get("filter"),
                                   "embedding_provider": config["embedding_provider"],
                                   "embedding_model": config.get("embedding_model")}
        if config.get("mode"):
            options["mode"] = config["mode"]
        mark = ctx.usage_mark()
        hits = await ctx.vector.search_hits(collection, query, options)
        embedding_usage = {"total_tokens": ctx.tokens_since(mark, "embedding")}
        result = await ctx.llm.answer(query, hits, {
            "llm_provider": config["llm_provider"], "llm_model": config.get("llm_model"),
            "system_prompt": config.get("system_prompt"), "temperature": config["temperature"],
            "max_tokens": config["max_tokens"]})
        sources = [{"index": s.index, "id": s.chunk_id, "document_id": s.document_id or None,
                    "score": round(s.score, 6), "content": s.excerpt, "metadata": s.metadata}
                   for s in result.sources]
        return {"answer": result.answer, "sources": sources, "model": result.model, "extractive": result.extractive,
                "usage": {"embedding": embedding_usage, "llm": dict(result.usage), "retrieved_chunks": len(hits)}}


SEED_BLOCKS: dict[str, type[Block]] = {block.name: block for block in (
    DocLoader, TextSplitter, Embedding, VectorUpsert, VectorSearch, VectorDelete, RagQuery)}

__all__ = ["SEED_BLOCKS", "DocLoader", "Embedding", "RagQuery", "TextSplitter", "VectorDelete", "VectorSearch",
           "VectorUpsert", "strip_html"]
