"""Where a registry's history lives: one SQLite file or one PostgreSQL database, shared by workers.

``open_store(target)`` picks the store: a ``postgresql://`` URL is PostgreSQL (the ``postgres``
extra), anything else a SQLite path.
"""

from __future__ import annotations

from pathlib import Path

from ..._deprecation import moved_names
from .base import DEFAULT_LOG_CAPACITY, SQLRegistryStore
from .dialect import Connection, SQLLoader, StorageError
from .sqlite import SQLiteRegistryStore

__getattr__ = moved_names(
    __name__, {"RegistryStore": "invalidation_contracts.server.store.base:SQLRegistryStore"}
)

__all__ = [
    "Connection",
    "DEFAULT_LOG_CAPACITY",
    "SQLLoader",
    "SQLRegistryStore",
    "SQLiteRegistryStore",
    "StorageError",
    "is_postgres_url",
    "open_store",
]


def is_postgres_url(target: str | Path) -> bool:
    text = str(target)
    return text.startswith(("postgresql://", "postgres://", "postgresql+psycopg://"))


def open_store(target: str | Path, *, schema: str | None = None) -> SQLRegistryStore[Connection]:
    """The store at ``target``: a PostgreSQL URL, or a SQLite file path (created if absent)."""
    if is_postgres_url(target):
        from .postgres import DEFAULT_SCHEMA, PostgresRegistryStore

        url = str(target).replace("postgresql+psycopg://", "postgresql://", 1)
        return PostgresRegistryStore(url, schema=schema or DEFAULT_SCHEMA)
    text = str(target)
    if text.startswith("sqlite:///"):
        text = text[len("sqlite:///") :]
    return SQLiteRegistryStore(text)
