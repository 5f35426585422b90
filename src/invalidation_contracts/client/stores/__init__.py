"""Where the fix memory lives: one store API (LangGraph ``BaseStore`` shape), three stores.

``InMemoryStore`` (one process), ``SQLiteStore`` (one file, shared by processes) and
``PostgresStore`` (a fleet; the ``postgres`` extra): the adapters of the store interface the
memory's core defines (``client.shared.store``, re-exported here). ``SQLiteStore`` and
``PostgresStore`` are imported on first use, so importing this package loads no database driver.
"""

from typing import TYPE_CHECKING

from ..._extras import lazy_exports
from ..shared.store import (
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

if TYPE_CHECKING:
    from .postgres import PostgresStore
    from .sqlite import SQLiteStore

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


__getattr__ = lazy_exports(__name__, {"PostgresStore": ".postgres", "SQLiteStore": ".sqlite"})
