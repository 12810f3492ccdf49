"""The SQL core shared by the SQLite and PostgreSQL backends (see :mod:`bunko.stores.sql.store`)."""

from .dialect import Dialect, iso_text, json_value
from .plan import PlannedWrite, StoredDocument, plan_writes
from .reader import DOCUMENT_JOIN, CompiledRestriction, SQLReader, hit_columns, hit_join
from .service import SQLServiceRecords
from .store import (
    MAX_TOP_K,
    ChunkRow,
    SQLBackend,
    SQLStore,
    StoreCounters,
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
    "CompiledRestriction",
    "Dialect",
    "PlannedWrite",
    "SQLBackend",
    "SQLReader",
    "SQLServiceRecords",
    "SQLStore",
    "StoreCounters",
    "StoredDocument",
    "check_dimension",
    "check_name",
    "check_top_k",
    "checked_vectors",
    "hit_columns",
    "hit_join",
    "iso_text",
    "json_value",
    "plan_writes",
    "same_analyzer",
]
