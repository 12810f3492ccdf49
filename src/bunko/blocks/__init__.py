"""Workflow blocks (seed 000, R30): RAG composed from blocks, each bound to the tenant of its run.

* :mod:`.ctx` — the ``ctx`` API a block works through (``ctx.embedding``, ``ctx.vector``,
  ``ctx.llm``, ``ctx.http``), taking the tenant from the execution context only;
* :mod:`.builtin` — the seed's seven blocks: ``doc-loader``, ``text-splitter``, ``embedding``,
  ``vector-upsert``, ``vector-search``, ``vector-delete``, ``rag-query``;
* :mod:`.registry` — the block registry (entry-point group ``bunko.blocks`` for third-party blocks);
* :mod:`.workflow` — workflows of named steps, run with ``Tenant.run_workflow(spec, input)``,
  ``bunko workflow run FILE`` or ``POST /api/v1/workflows/run``;
* :mod:`.errors` — the seed's error codes (``VECTOR_001`` …) and bunko's own for what it leaves open.

Importing this package is cheap: jsonschema and the blocks load on first use.
"""

from __future__ import annotations

from .errors import BlockError
from .registry import SEED_BLOCK_NAMES, available_blocks, describe_blocks, get_block, register_block, unregister_block

__all__ = ["SEED_BLOCK_NAMES", "BlockError", "available_blocks", "describe_blocks", "get_block", "register_block",
           "unregister_block"]
