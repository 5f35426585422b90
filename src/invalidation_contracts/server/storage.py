"""Registry persistence (kept for existing imports): see ``server.store``."""

from __future__ import annotations

from .store import (
    DEFAULT_LOG_CAPACITY,
    RegistryStore,
    SQLiteRegistryStore,
    StorageError,
    open_store,
)

__all__ = [
    "DEFAULT_LOG_CAPACITY",
    "RegistryStore",
    "SQLiteRegistryStore",
    "StorageError",
    "open_store",
]
