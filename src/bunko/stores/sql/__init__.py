"""The SQL core shared by the SQLite and PostgreSQL backends (see :mod:`bunko.stores.sql.store`)."""

from .dialect import Dialect, iso_text, json_value
from .plan import PlannedWrite, StoredDocument, plan_writes
from .service import SQLServiceRecords
from .store import (
    DOCUMENT_JOIN,
    MAX_TOP_K,
    ChunkRow,
    SQLBackend,
    SQLStore,
    check_dimension,
    check_name,
    check_top_k,
    checked_vectors,
    same_analyzer,
)

__all__ = [
    "DOCUMENT_JOIN",
    "MAX_TOP_K",
    "ChunkRow",
    "Dialect",
    "PlannedWrite",
    "SQLBackend",
    "SQLServiceRecords",
    "SQLStore",
    "StoredDocument",
    "check_dimension",
    "check_name",
    "check_top_k",
    "checked_vectors",
    "iso_text",
    "json_value",
    "plan_writes",
    "same_analyzer",
]
