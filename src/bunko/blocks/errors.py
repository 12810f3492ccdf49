"""The errors of workflow blocks: the seed's codes, plus typed codes for what the seed leaves open.

Every error a workflow run raises is a :class:`BlockError` with a ``code``, the ``step`` and
``block`` it happened in and, for a bad config, the ``path`` of the bad field. ``to_dict()`` is the
``{"error": {"code", "step", "block", "message"}}`` body of the CLI's ``--json`` output and the HTTP
API's problem document. An engine error raised inside a step (``COLLECTION_NOT_FOUND``,
``BLOCKED_URL``, ``DIMENSION_MISMATCH``, ...) keeps its own code and becomes the ``__cause__``.

============== ==================================================================
code           meaning
============== ==================================================================
VECTOR_001     collection required (vector-upsert, vector-search, vector-delete)
VECTOR_002     documents required (vector-upsert)
VECTOR_003     vector or query required (vector-search)
VECTOR_004     ids required (vector-delete)
RAG_001        query required (rag-query)
RAG_002        collection required (rag-query)
CONFIG_001     a block's config does not match its schema (``path`` names the field)
TENANT_001     a config names a tenant; the tenant comes from the execution context only
INPUT_001      a step's input is not what the block reads (wrong type, nothing to work on)
LOADER_001     doc-loader has nothing to load (no URL, text or JSON given)
PROVIDER_001   an embedding or LLM provider failed, or is not configured (no API key)
WORKFLOW_001   the workflow spec is malformed (``path`` names the field)
WORKFLOW_002   a step names a block that is not registered
============== ==================================================================
"""

from __future__ import annotations

from typing import Any

from ..errors import BunkoError

SEED_CODES = ("VECTOR_001", "VECTOR_002", "VECTOR_003", "VECTOR_004", "RAG_001", "RAG_002")


class BlockError(BunkoError):
    """A workflow step failed; ``code`` says why, ``step`` and ``block`` say where."""

    code = "BLOCK_ERROR"

    def __init__(self, code: str, message: str, *, step: str | None = None, block: str | None = None,
                 path: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.step = step
        self.block = block
        self.path = path
        self.steps: list[dict[str, Any]] = []  # the run's step records, when raised by a workflow run

    def at(self, step: str, block: str) -> BlockError:
        """This error, placed at ``step`` (a block raising it does not know its step's name)."""
        if self.step is None:
            self.step = step
        if self.block is None:
            self.block = block
        return self

    @property
    def cause_code(self) -> str | None:
        """The code of the engine error this one wraps, if any."""
        return self.__cause__.code if isinstance(self.__cause__, BunkoError) else None

    def to_dict(self) -> dict[str, Any]:
        """``{"code", "step", "block", "message"}`` (and ``path`` for a bad field)."""
        data: dict[str, Any] = {"code": self.code, "step": self.step, "block": self.block, "message": self.message}
        if self.path is not None:
            data["path"] = self.path
        return data


class BlockInputError(BlockError):
    """A step's input lacks what its block needs (the seed's VECTOR_00x / RAG_00x, INPUT_001, LOADER_001)."""


class BlockConfigError(BlockError):
    """A block's config is invalid (CONFIG_001) or names a tenant (TENANT_001)."""


class BlockProviderError(BlockError):
    """An embedding or LLM provider failed or is not configured (PROVIDER_001)."""


class WorkflowError(BlockError):
    """The workflow spec is malformed (WORKFLOW_001) or names an unknown block (WORKFLOW_002)."""


class StepError(BlockError):
    """An engine error raised inside a step, with the step added; its code is the engine error's."""

    @classmethod
    def wrap(cls, exc: BunkoError, step: str, block: str) -> StepError:
        """``exc`` placed at ``step``; the original stays the ``__cause__``."""
        error = cls(exc.code, exc.message, step=step, block=block)
        error.__cause__ = exc
        return error


__all__ = ["SEED_CODES", "BlockConfigError", "BlockError", "BlockInputError", "BlockProviderError", "StepError",
           "WorkflowError"]
