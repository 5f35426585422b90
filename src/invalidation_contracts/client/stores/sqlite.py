"""The embedded default store: one SQLite file, WAL journal, every batch one transaction.

Durability: ``synchronous=FULL`` by default, so a batch that returned is on disk even if the
machine loses power right after. (``NORMAL`` is enough to survive a killed *process* in WAL mode,
but may drop the last commits on power loss; pass ``synchronous="NORMAL"`` to trade that for speed.)
The schema is versioned with ``PRAGMA user_version`` and the file is marked as ours with
``PRAGMA application_id``; a file of another schema or another application is refused.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterable
from datetime import UTC, datetime
from os import PathLike
from pathlib import Path
from typing import Any

from .base import (
    GetOp,
    Item,
    Namespace,
    Op,
    PutOp,
    Result,
    SearchOp,
    Store,
    StoreError,
    matches_filter,
    namespaces_under,
    prepare,
)

SCHEMA_VERSION = 1
APPLICATION_ID = 0x49434D31  # "ICM1"
_SEP = "\x1f"

_SCHEMA = """
CREATE TABLE items (
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID;
"""


class SQLiteStore(Store):
    """A store in one SQLite file. Safe to share between threads of one process."""

    def __init__(
        self,
        path: str | PathLike[str],
        *,
        create: bool = True,
        synchronous: str = "FULL",
        timeout: float = 10.0,
    ) -> None:
        self.path = Path(path)
        if synchronous.upper() not in ("FULL", "NORMAL", "EXTRA"):
            raise ValueError(f"synchronous must be FULL, NORMAL or EXTRA, not {synchronous!r}")
        if not create and not self.path.is_file():
            raise StoreError(f"no memory database at {self.path}")
        self._lock = threading.Lock()
        try:
            self._db = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open {self.path}: {exc}") from exc
        try:
            self._db.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
            mode = self._db.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreError(f"{self.path}: cannot switch the journal to WAL (got {mode})")
            self._db.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            self._migrate()
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise StoreError(f"{self.path} is not a fix-memory database: {exc}") from exc
        except StoreError:
            self._db.close()
            raise
        self._closed = False

    def _migrate(self) -> None:
        app_id = self._db.execute("PRAGMA application_id").fetchone()[0]
        version = self._db.execute("PRAGMA user_version").fetchone()[0]
        tables = self._db.execute(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
        ).fetchone()[0]
        if app_id == 0 and version == 0 and tables == 0:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(_SCHEMA)
                self._db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                self._db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return
        if app_id != APPLICATION_ID:
            raise StoreError(f"{self.path} is an SQLite database of another application")
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has fix-memory schema version {version}; "
                f"this version reads {SCHEMA_VERSION}"
            )

    @property
    def journal_mode(self) -> str:
        return str(self._db.execute("PRAGMA journal_mode").fetchone()[0])

    @property
    def synchronous(self) -> int:
        """SQLite's numeric setting: 1 NORMAL, 2 FULL, 3 EXTRA."""
        return int(self._db.execute("PRAGMA synchronous").fetchone()[0])

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        prepared = [prepare(op) for op in ops]
        writes = any(isinstance(op, PutOp) for op in prepared)
        with self._lock:
            if self._closed:
                raise StoreError(f"{self.path}: the store is closed")
            try:
                self._db.execute("BEGIN IMMEDIATE" if writes else "BEGIN")
                try:
                    results = [self._run(op) for op in prepared]
                    self._db.execute("COMMIT")
                except BaseException:
                    self._db.execute("ROLLBACK")
                    raise
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path}: {exc}") from exc
        return results

    def _run(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            row = self._db.execute(
                "SELECT namespace, key, value, created_at, updated_at FROM items "
                "WHERE namespace = ? AND key = ?",
                (_encode(op.namespace), op.key),
            ).fetchone()
            return _item(row) if row else None
        if isinstance(op, PutOp):
            ns = _encode(op.namespace)
            if op.value is None:
                self._db.execute("DELETE FROM items WHERE namespace = ? AND key = ?", (ns, op.key))
                return None
            now = datetime.now(UTC).timestamp()
            self._db.execute(
                "INSERT INTO items (namespace, key, value, created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (namespace, key) "
                "DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                (
                    ns,
                    op.key,
                    json.dumps(op.value, allow_nan=False, separators=(",", ":")),
                    now,
                    now,
                ),
            )
            return None
        if isinstance(op, SearchOp):
            where, params = _under(op.namespace_prefix)
            sql = (
                "SELECT namespace, key, value, created_at, updated_at FROM items"
                f"{where} ORDER BY namespace, key"
            )
            if not op.filter:
                sql += " LIMIT ? OFFSET ?"
                params += (op.limit, op.offset)
            items = [_item(row) for row in self._db.execute(sql, params)]
            if op.filter:
                items = [item for item in items if matches_filter(item.value, op.filter)]
                items = items[op.offset : op.offset + op.limit]
            return items
        where, params = _under(op.prefix or ())
        rows = self._db.execute(f"SELECT DISTINCT namespace FROM items{where}", params)
        found = namespaces_under((_decode(row[0]) for row in rows), op.prefix, op.max_depth)
        return found[op.offset : op.offset + op.limit]

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` answer (``"ok"`` when the file is sound)."""
        with self._lock:
            return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])


def _encode(namespace: Namespace) -> str:
    return _SEP.join(namespace)


def _decode(text: str) -> Namespace:
    return tuple(text.split(_SEP))


def _under(prefix: Namespace) -> tuple[str, tuple[Any, ...]]:
    """A WHERE clause selecting ``prefix`` and every namespace below it, as a key-range scan."""
    if not prefix:
        return "", ()
    ns = _encode(prefix)
    # Labels never contain \x1f, and \x20 is the next character: [ns\x1f, ns\x20) is "below ns".
    return " WHERE (namespace = ? OR (namespace >= ? AND namespace < ?))", (
        ns,
        ns + _SEP,
        ns + "\x20",
    )


def _item(row: tuple[str, str, str, float, float]) -> Item:
    namespace, key, value, created, updated = row
    return Item(
        _decode(namespace),
        key,
        json.loads(value),
        datetime.fromtimestamp(created, UTC),
        datetime.fromtimestamp(updated, UTC),
    )
