"""Write planning: which documents of a batch are created, replaced or left unchanged.

Pure: it reads what is stored under the batch's sources and decides, so the rule lives in one
place and is tested without a database. Both backends apply the plan with their own statements.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from ...errors import VectorStoreError
from ..base import DocumentWrite

WriteStatus = Literal["created", "replaced", "unchanged"]


@dataclass(frozen=True, slots=True)
class StoredDocument:
    """What the store holds under one source: its row id, public id, content hash, chunks and version."""

    pk: int
    uid: str
    content_hash: str
    chunk_count: int
    version: int


@dataclass(frozen=True, slots=True)
class PlannedWrite:
    """The decision for one document of a batch, in batch order."""

    position: int
    status: WriteStatus
    uid: str  # the new document's id, or the stored one's (a new version keeps its id)
    version: int
    chunk_count: int  # the chunks the document has after the write
    pk: int | None = None  # the stored row (replaced, unchanged); None for a new document


def plan_writes(existing: Mapping[str, StoredDocument], documents: Sequence[DocumentWrite]) -> list[PlannedWrite]:
    """Decide, per document and by source, whether it is created, replaced or unchanged.

    * no stored document under the source: ``created``, at the document's ``version`` (1 unless an import
      carries another), with the document's own id;
    * one with the same non-empty content hash: ``unchanged`` (stored id, chunks and version);
    * otherwise: ``replaced``, a new version under the stored id.

    A source given twice in one batch is refused: which of the two would win is not defined.
    """
    seen: set[str] = set()
    plans: list[PlannedWrite] = []
    for position, document in enumerate(documents):
        if document.source in seen:
            raise VectorStoreError(f"write_documents got the source {document.source!r} twice in one call")
        seen.add(document.source)
        old = existing.get(document.source)
        if old is None:
            plans.append(PlannedWrite(position, "created", document.id, max(1, int(document.version)),
                                      len(document.chunks)))
        elif document.content_hash and old.content_hash == document.content_hash:
            plans.append(PlannedWrite(position, "unchanged", old.uid, old.version, old.chunk_count, old.pk))
        else:
            plans.append(PlannedWrite(position, "replaced", old.uid, old.version + 1, len(document.chunks), old.pk))
    return plans
