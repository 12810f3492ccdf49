"""The block registry: the seed's BLOCK_REGISTRY on :class:`bunko.registry.Registry`.

The seven seed blocks are the built-ins; third-party blocks join through the ``bunko.blocks``
entry-point group (``my-block = "my_package.blocks:MyBlock"``, a factory called with no
arguments) or :func:`register_block`. ``describe_blocks()`` lists every block with its name,
category, description and config schema; blocks that are not the seed's are marked
``"addition": true``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import UnknownProviderError
from ..registry import Registry
from .base import describe

SEED_BLOCK_NAMES = ("doc-loader", "text-splitter", "embedding", "vector-upsert", "vector-search", "vector-delete",
                    "rag-query")
_CLASSES = {"doc-loader": "DocLoader", "text-splitter": "TextSplitter", "embedding": "Embedding",
            "vector-upsert": "VectorUpsert", "vector-search": "VectorSearch", "vector-delete": "VectorDelete",
            "rag-query": "RagQuery"}
_REGISTRY: Registry[Any] = Registry(
    "block", "bunko.blocks", {name: f"bunko.blocks.builtin:{cls}" for name, cls in _CLASSES.items()},
    unknown=UnknownProviderError)

BlockFactory = Callable[[], Any]


def register_block(name: str, factory: BlockFactory) -> None:
    """Register (or replace) a block: ``factory()`` returns an object with ``name``, ``category``,
    ``description``, ``config_schema`` and ``async run(ctx, input, config)``."""
    _REGISTRY.register(name, factory)


def unregister_block(name: str) -> None:
    """Remove a block added with :func:`register_block`."""
    _REGISTRY.unregister(name)


def available_blocks() -> list[str]:
    """Every block name: the seed's seven first (in the seed's order), then additions, sorted."""
    names = _REGISTRY.names()
    return [n for n in SEED_BLOCK_NAMES if n in names] + [n for n in names if n not in SEED_BLOCK_NAMES]


def get_block(name: str) -> Any:
    """A block instance by name; ``UnknownProviderError`` naming the blocks there are, if none."""
    block = _REGISTRY.create(name)
    if not getattr(block, "name", None):
        block.name = name
    return block


def describe_blocks() -> list[dict[str, Any]]:
    """The registry as data: ``[{name, category, description, config_schema, addition}]``."""
    out = []
    for name in available_blocks():
        entry = describe(get_block(name))
        entry["name"] = name
        entry["addition"] = name not in SEED_BLOCK_NAMES
        out.append(entry)
    return out


__all__ = ["SEED_BLOCK_NAMES", "available_blocks", "describe_blocks", "get_block", "register_block",
           "unregister_block"]
