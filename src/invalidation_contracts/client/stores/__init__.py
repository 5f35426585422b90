"""Where the fix memory lives: one store API (LangGraph ``BaseStore`` shape), two stores."""

from .base import (
    GetOp,
    Item,
    ListNamespacesOp,
    Namespace,
    PutOp,
    SearchOp,
    Store,
    StoreError,
)
from .inmemory import InMemoryStore
from .sqlite import SQLiteStore

__all__ = [
    "GetOp",
    "InMemoryStore",
    "Item",
    "ListNamespacesOp",
    "Namespace",
    "PutOp",
    "SQLiteStore",
    "SearchOp",
    "Store",
    "StoreError",
]
