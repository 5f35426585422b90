"""The registry's history in one SQLite file (WAL, synchronous FULL), shared by worker processes.

Writers serialize on SQLite's write lock (``BEGIN IMMEDIATE``, waiting up to ``busy_timeout_s``);
readers run on WAL snapshots and never block them. The file follows the project's one
schema-version scheme (``sqlite_schema``): application id "ICR1", ``user_version`` 2. A file of
schema 1 (the ``ic_meta`` ``schema_version`` row, one process per file) is migrated in place: its
tables are kept, the capture-position table is added.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ...sqlite_schema import SchemaMismatch, SQLiteSchema
from .base import SQLRegistryStore
from .dialect import Dialect, StorageError
from .highwater import mark_path
from .inotify import FileWakeup, file_wakeup

APPLICATION_ID = 0x49435231  # "ICR1"
DEFAULT_BUSY_TIMEOUT_S = 30.0

_V1 = (
    "CREATE TABLE ic_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    (
        "CREATE TABLE ic_tables (name TEXT PRIMARY KEY, version TEXT NOT NULL,"
        " changed_at INTEGER NOT NULL) WITHOUT ROWID"
    ),
    (
        "CREATE TABLE ic_rows (table_name TEXT NOT NULL REFERENCES ic_tables (name),"
        " key TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (table_name, key)) WITHOUT ROWID"
    ),
    (
        "CREATE TABLE ic_rules (from_table TEXT NOT NULL, to_table TEXT NOT NULL,"
        " relation TEXT NOT NULL, via TEXT, PRIMARY KEY (from_table, to_table, relation))"
        " WITHOUT ROWID"
    ),
    "CREATE TABLE ic_log (seq INTEGER PRIMARY KEY, record TEXT NOT NULL)",
)
_POSITIONS = (
    "CREATE TABLE ic_positions (source TEXT PRIMARY KEY, position INTEGER NOT NULL) WITHOUT ROWID"
)


def _to_v2(db: sqlite3.Connection) -> None:
    """Schema 1 → 2: capture positions; the version moves from ``ic_meta`` to the pragmas."""
    db.execute(_POSITIONS)
    db.execute("DELETE FROM ic_meta WHERE name = 'schema_version'")


SCHEMA = SQLiteSchema("registry", APPLICATION_ID, 2, (*_V1, _POSITIONS), {1: _to_v2})


class SQLiteDialect(Dialect[sqlite3.Connection]):
    """SQLite through the standard library's ``sqlite3``."""

    errors = (sqlite3.Error,)

    def __init__(self, path: str | Path, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
        self.path = str(path)
        self.where = self.path
        self.busy_timeout_s = busy_timeout_s

    def connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=False, timeout=self.busy_timeout_s
        )
        try:
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = FULL")
            db.execute("PRAGMA foreign_keys = ON")
        except sqlite3.Error:
            db.close()
            raise
        return db

    def prepare(self, db: sqlite3.Connection) -> None:
        _stamp_schema_1(db, self.where)
        try:
            SCHEMA.ensure(db, self.where)
        except SchemaMismatch as exc:
            raise StorageError(str(exc)) from None

    def mark_path(self) -> Path | None:
        return mark_path(self.path)

    def begin_write(self, db: sqlite3.Connection) -> None:
        db.execute("BEGIN IMMEDIATE")

    def begin_read(self, db: sqlite3.Connection) -> None:
        db.execute("BEGIN")

    def table(self, name: str) -> str:
        return f"ic_{name}"

    def reason(self, exc: Exception) -> str:
        text = super().reason(exc)
        if "locked" in text:
            return f"{text}; another process holds the registry's write lock"
        return text


def _stamp_schema_1(db: sqlite3.Connection, where: str) -> None:
    """Mark a file written before the pragma scheme (``ic_meta`` schema_version 1) as version 1."""
    db.execute("BEGIN IMMEDIATE")
    try:
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        names = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if app_id == 0 and "ic_meta" in names:
            row = db.execute("SELECT value FROM ic_meta WHERE name = 'schema_version'").fetchone()
            if row is None or row[0] != "1":
                raise StorageError(
                    f"{where}: a registry file of schema version {row[0] if row else None!r}; "
                    "this library reads versions 1 and 2"
                )
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            db.execute("PRAGMA user_version = 1")
        db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            db.execute("ROLLBACK")
        raise


class SQLiteRegistryStore(SQLRegistryStore[sqlite3.Connection]):
    """A registry's history in the SQLite file at ``path``; any number of processes may open it."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
        self.path = str(path)
        super().__init__(SQLiteDialect(path, busy_timeout_s))

    def change_probe(self) -> DataVersion | None:
        """A cheap look at whether the file changed (the follower's polling, ``DataVersion``)."""
        return data_version(self.path)

    def listener(self) -> FileWakeup | None:
        """A wake-up on commits to the file by any process (Linux inotify, ``FileWakeup``), or
        None: the worker polls it (``change_probe``)."""
        return file_wakeup(self.path)


class DataVersion:
    """Whether anyone committed to a SQLite file since the last look: ``PRAGMA data_version`` on
    a read-only connection of its own (a few µs, no table read), so a polling worker reads the
    file only when it changed. The value moves on every commit by any other connection."""

    def __init__(self, path: str | Path, busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S) -> None:
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self._db: sqlite3.Connection | None = None

    def read(self) -> int:
        """The file's current data version (opens the connection on first use)."""
        if self._db is None:
            uri = self.path.resolve().as_uri() + "?mode=ro"
            self._db = sqlite3.connect(
                uri,
                uri=True,
                isolation_level=None,
                check_same_thread=False,
                timeout=self.busy_timeout_s,
            )
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def close(self) -> None:
        db, self._db = self._db, None
        if db is not None:
            db.close()


def data_version(path: str | Path | None) -> DataVersion | None:
    """A ``DataVersion`` for a SQLite file, or None for an in-memory database."""
    if path is None or str(path) in ("", ":memory:") or str(path).startswith("file:"):
        return None
    return DataVersion(path)
