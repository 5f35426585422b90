"""One schema-version scheme for every SQLite file the project writes.

A file is marked as ours with ``PRAGMA application_id`` (one id per kind of file: the fix memory,
the provider's registry) and versioned with ``PRAGMA user_version``. Opening a file:

- new or empty: the schema is created, then both pragmas are set, in one transaction;
- ours, at this version: used as is;
- ours, at an older version with a migration registered: migrated step by step in one transaction;
- anything else (another application, a newer or unknown version, a database with foreign
  tables): refused with ``SchemaMismatch``, and nothing is written.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["SchemaMismatch", "SQLiteSchema"]

Migration = Callable[[sqlite3.Connection], None]


class SchemaMismatch(Exception):
    """The file is not one of ours at a version this library can read."""


@dataclass(frozen=True, slots=True)
class SQLiteSchema:
    """A kind of file: its application id, current version, DDL and migrations from older ones."""

    kind: str
    """What the file holds, for messages ("fix memory", "registry")."""
    application_id: int
    version: int
    statements: Sequence[str]
    migrations: Mapping[int, Migration] = field(default_factory=dict)
    """``from_version`` → a step that brings a file at that version to ``from_version + 1``."""

    def ensure(self, db: sqlite3.Connection, where: str) -> bool:
        """Create, check or migrate the schema of ``db``; True when it was created just now.

        ``db`` must be in autocommit mode (``isolation_level=None``); ``where`` names the file.
        """
        db.execute("BEGIN IMMEDIATE")
        try:
            created = self._ensure(db, where)
            db.execute("COMMIT")
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return created

    def _ensure(self, db: sqlite3.Connection, where: str) -> bool:
        app_id = db.execute("PRAGMA application_id").fetchone()[0]
        version = db.execute("PRAGMA user_version").fetchone()[0]
        (tables,) = db.execute("SELECT count(*) FROM sqlite_master WHERE type = 'table'").fetchone()
        if app_id == 0 and version == 0 and tables == 0:
            for statement in self.statements:
                db.execute(statement)
            self._stamp(db, self.version)
            return True
        if app_id != self.application_id:
            raise SchemaMismatch(f"{where} is not a {self.kind} file (another application's)")
        if version > self.version:
            raise SchemaMismatch(
                f"{where} is a {self.kind} file of schema version {version}; "
                f"this library reads up to {self.version}"
            )
        while version < self.version:
            step = self.migrations.get(version)
            if step is None:
                raise SchemaMismatch(
                    f"{where} is a {self.kind} file of schema version {version}, "
                    f"which this library cannot migrate to {self.version}"
                )
            step(db)
            version += 1
            self._stamp(db, version)
        return False

    def _stamp(self, db: sqlite3.Connection, version: int) -> None:
        db.execute(f"PRAGMA application_id = {int(self.application_id)}")
        db.execute(f"PRAGMA user_version = {int(version)}")
