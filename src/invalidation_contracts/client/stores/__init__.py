"""Where the fix memory lives: one store API (LangGraph ``BaseStore`` shape), three stores.

``InMemoryStore`` (one process), ``SQLiteStore`` (one file, shared by processes) and
``PostgresStore`` (a fleet; the ``postgres`` extra, imported on first use).
"""

from typing import TYPE_CHECKING

from ..._extras import lazy_exports
from .base import (
    UNREADABLE,
    CheckOp,
    GetOp,
    Item,
    ListNamespacesOp,
    Namespace,
    Op,
    PutOp,
    Result,
    SearchOp,
    Store,
    StoreConflict,
    StoreError,
)
from .inmemory import InMemoryStore
from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .postgres import PostgresStore

__all__ = [
    "CheckOp",
    "GetOp",
    "InMemoryStore",
    "Item",
    "ListNamespacesOp",
    "Namespace",
    "Op",
    "PostgresStore",
    "PutOp",
    "Result",
    "SQLiteStore",
    "SearchOp",
    "Store",
    "StoreConflict",
    "StoreError",
    "UNREADABLE",
]


__getattr__ = lazy_exports(__name__, {"PostgresStore": ".postgres"})
