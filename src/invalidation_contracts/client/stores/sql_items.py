"""The reads of a SQL store, written once for SQLite and PostgreSQL.

Both keep items in one table of ``(namespace, key, value, created_at, updated_at)`` rows, the
namespace encoded as one string (``base.encode``), so a get, a check, a search and a namespace
listing are the same statements; only the driver's parameter mark differs (``?`` for
``sqlite3``, ``%s`` for psycopg). Writes stay with each store: how it batches them is its own.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Protocol

from ..shared.store import (
    CheckOp,
    GetOp,
    Item,
    ListNamespacesOp,
    Namespace,
    Result,
    SearchOp,
    check,
    decode,
    decode_value,
    encode,
    matches_filter,
    namespaces_under,
    prefix_bounds,
)

COLUMNS = "namespace, key, value, created_at, updated_at"

Read = GetOp | CheckOp | SearchOp | ListNamespacesOp


class Rows(Protocol):
    """What a driver's ``execute`` returns (a DB-API cursor)."""

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


Execute = Callable[[str, tuple[Any, ...]], Rows]


class SQLItems:
    """The reads of one items table, through a connection's ``execute`` and parameter ``mark``."""

    def __init__(self, table: str, mark: str, execute: Execute) -> None:
        self.table = table
        self._execute = execute
        self._get = f"SELECT {COLUMNS} FROM {table} WHERE namespace = {mark} AND key = {mark}"
        self._under = f" WHERE (namespace = {mark} OR (namespace >= {mark} AND namespace < {mark}))"
        self._page = f" LIMIT {mark} OFFSET {mark}"

    def read(self, op: Read) -> Result:
        """Run one read of a batch, inside the transaction the store opened for it."""
        if isinstance(op, GetOp | CheckOp):
            row = self._execute(self._get, (encode(op.namespace), op.key)).fetchone()
            item = _item(row) if row else None
            if isinstance(op, GetOp):
                return item
            check(op, item.value if item else None)
            return None
        if isinstance(op, SearchOp):
            where, params = self._where(op.namespace_prefix)
            sql = f"SELECT {COLUMNS} FROM {self.table}{where} ORDER BY namespace, key"
            if not op.filter:
                sql += self._page
                params += (op.limit, op.offset)
            items = [_item(row) for row in self._execute(sql, params).fetchall()]
            if op.filter:
                items = [item for item in items if matches_filter(item.value, op.filter)]
                items = items[op.offset : op.offset + op.limit]
            return items
        where, params = self._where(op.prefix or ())
        rows = self._execute(f"SELECT DISTINCT namespace FROM {self.table}{where}", params)
        found = namespaces_under((decode(r[0]) for r in rows.fetchall()), op.prefix, op.max_depth)
        return found[op.offset : op.offset + op.limit]

    def _where(self, prefix: Namespace) -> tuple[str, tuple[Any, ...]]:
        """A WHERE clause selecting ``prefix`` and every namespace below it, as a key-range
        scan."""
        if not prefix:
            return "", ()
        return self._under, prefix_bounds(prefix)


def _item(row: tuple[Any, ...]) -> Item:
    """An item from its row; psycopg reads ``jsonb`` as a dict, SQLite keeps the JSON text."""
    namespace, key, value, created, updated = row
    return Item(
        decode(namespace),
        key,
        value if isinstance(value, dict) else decode_value(value),
        datetime.fromtimestamp(created, UTC),
        datetime.fromtimestamp(updated, UTC),
    )
