"""The embedded default store: one SQLite file, WAL journal, every batch one transaction.

Several processes (and threads) may share one file: a batch with writes takes SQLite's write lock
(``BEGIN IMMEDIATE``), a read batch sees one committed snapshot, and ``version()`` reads
``PRAGMA data_version`` — which moves when another connection commits — from shared memory, so a
reader learns that nothing changed without touching the disk.

Durability: ``synchronous=FULL`` by default, so a batch that returned is on disk even if the
machine loses power right after. (``NORMAL`` is enough to survive a killed *process* in WAL mode,
but may drop the last commits on power loss; pass ``synchronous="NORMAL"`` to trade that for speed.)
The file follows the project's one schema-version scheme (``sqlite_schema``): marked as a fix
memory with ``PRAGMA application_id``, versioned with ``PRAGMA user_version``, migrated step by
step; a file of another application or a newer version is refused.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Hashable, Iterable
from datetime import UTC, datetime
from os import PathLike
from pathlib import Path

from ...sqlite_schema import SchemaMismatch, SQLiteSchema
from ..shared.store import (
    SEPARATOR,
    Op,
    Prepared,
    Result,
    Store,
    StoreError,
    Write,
    encode,
    prepare,
)
from .sql_items import SQLItems

SCHEMA_VERSION = 3
APPLICATION_ID = 0x49434D31  # "ICM1"

_ITEMS = """
CREATE TABLE items (
    namespace  TEXT NOT NULL,
    key        TEXT NOT NULL,
    value      TEXT NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (namespace, key)
) WITHOUT ROWID
"""


def _keyed_by_operation(db: sqlite3.Connection) -> None:
    """Version 1 → 2: entries are keyed by operation; those learned before get the unnamed one.

    (Version 2 also adds each origin's ``meta/generation`` and ``journal`` items, which a memory
    creates on its first write; an absent generation reads as 0.)
    """
    memory = "invalidation-contracts" + SEPARATOR + "%" + SEPARATOR
    db.execute(
        "UPDATE items SET value = json_set(value, '$.operation', '') "
        "WHERE namespace LIKE ? AND json_extract(value, '$.operation') IS NULL",
        (memory + "entries",),
    )
    db.execute(
        "UPDATE items SET value = json_set(value, '$.entry.operation', '') "
        "WHERE namespace LIKE ? AND json_extract(value, '$.entry.operation') IS NULL",
        (memory + "tombstones",),
    )


def _eviction_records(db: sqlite3.Connection) -> None:
    """Version 2 → 3: nothing to rewrite. Version 3 may hold eviction records
    (``records/<generation>``, ``client.shared.moves``) whose entries' rows stay stored, dead; a
    library that reads version 2 would serve them, so it must refuse a version 3 file."""


SCHEMA = SQLiteSchema(
    kind="fix memory",
    application_id=APPLICATION_ID,
    version=SCHEMA_VERSION,
    statements=(_ITEMS,),
    migrations={1: _keyed_by_operation, 2: _eviction_records},
)


class DamagedFile(StoreError):
    """The file is no SQLite database SQLite can open (truncated, a zeroed header, a text
    file): nothing in it can be read."""


def open_or_set_aside(path: str | PathLike[str]) -> tuple[SQLiteStore, Path | None]:
    """The store at ``path``; a file SQLite cannot open (``DamagedFile``) is renamed to
    ``<path>.damaged-<UTC time>`` (with its ``-wal`` and ``-shm``) and a new one is made in its
    place: the agent starts with an empty memory instead of not at all (issue 38). Returns the
    store and where the damaged file went (None when it opened)."""
    try:
        return SQLiteStore(path), None
    except DamagedFile:
        original = Path(path)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
        aside = original.with_name(f"{original.name}.damaged-{stamp}")
        original.rename(aside)
        for suffix in ("-wal", "-shm"):
            companion = original.with_name(original.name + suffix)
            with contextlib.suppress(FileNotFoundError):
                companion.rename(aside.with_name(aside.name + suffix))
        return SQLiteStore(path), aside


class SQLiteStore(Store):
    """A store in one SQLite file, shared safely by threads and by processes."""

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
        if not create and self.path.stat().st_size == 0:  # opening would make it a fix memory
            raise StoreError(f"{self.path} is an empty file, not a memory database")
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
            SCHEMA.ensure(self._db, str(self.path))
        except sqlite3.DatabaseError as exc:
            self._db.close()
            raise DamagedFile(f"{self.path} is not a fix-memory database: {exc}") from exc
        except SchemaMismatch as exc:
            self._db.close()
            raise StoreError(str(exc)) from exc
        except StoreError:
            self._db.close()
            raise
        self._closed = False
        self._writes = 0
        self._probe = self._db.cursor()
        """A cursor kept for ``version()``, the one call every read makes."""
        self._items = SQLItems("items", "?", self._db.execute)

    @property
    def journal_mode(self) -> str:
        return str(self._db.execute("PRAGMA journal_mode").fetchone()[0])

    @property
    def synchronous(self) -> int:
        """SQLite's numeric setting: 1 NORMAL, 2 FULL, 3 EXTRA."""
        return int(self._db.execute("PRAGMA synchronous").fetchone()[0])

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        prepared = [prepare(op) for op in ops]
        writes = any(isinstance(op, Write) for op in prepared)
        with self._lock:
            if self._closed:
                raise StoreError(f"{self.path}: the store is closed")
            try:
                self._db.execute("BEGIN IMMEDIATE" if writes else "BEGIN")
                try:
                    results = [self._run(op) for op in prepared]
                    self._db.execute("COMMIT")
                except BaseException:
                    _rollback(self._db)
                    raise
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path}: {exc}") from exc
            if writes:
                self._writes += 1
        return results

    def version(self) -> Hashable:
        """``PRAGMA data_version`` (moves on another connection's commit) and this store's own
        write count: read from SQLite's shared memory, not from the disk."""
        with self._lock:
            if self._closed:
                raise StoreError(f"{self.path}: the store is closed")
            try:
                self._probe.execute("PRAGMA data_version")
                (data_version,) = self._probe.fetchone()
            except sqlite3.DatabaseError as exc:
                raise StoreError(f"{self.path}: {exc}") from exc
            return (int(data_version), self._writes)

    def _run(self, op: Prepared) -> Result:
        if not isinstance(op, Write):
            return self._items.read(op)
        ns = encode(op.namespace)
        if op.text is None:
            self._db.execute("DELETE FROM items WHERE namespace = ? AND key = ?", (ns, op.key))
            return None
        now = datetime.now(UTC).timestamp()
        self._db.execute(
            "INSERT INTO items (namespace, key, value, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (namespace, key) "
            "DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
            (ns, op.key, op.text, now, now),
        )
        return None

    def close(self) -> None:
        with self._lock:
            if not self._closed:
                self._closed = True
                self._db.close()

    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` answer (``"ok"`` when the file is sound)."""
        with self._lock:
            return str(self._db.execute("PRAGMA integrity_check").fetchone()[0])


def _rollback(db: sqlite3.Connection) -> None:
    """Roll back what a failed batch began, keeping the error that failed it: after
    ``SQLITE_FULL`` or an I/O error SQLite has already rolled back, and an explicit ``ROLLBACK``
    would raise "cannot rollback - no transaction is active" over "database or disk is full"."""
    if db.in_transaction:
        with contextlib.suppress(sqlite3.DatabaseError):
            db.execute("ROLLBACK")
