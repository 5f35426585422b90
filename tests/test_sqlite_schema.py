"""The one schema-version scheme shared by every SQLite file the project writes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from invalidation_contracts.sqlite_schema import SchemaMismatch, SQLiteSchema

V1 = SQLiteSchema("widget store", 0x57494431, 1, ["CREATE TABLE w (k TEXT PRIMARY KEY)"])


def _db(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


def test_a_new_file_gets_the_schema_and_both_pragmas(tmp_path: Path) -> None:
    db = _db(tmp_path / "f.sqlite")
    assert V1.ensure(db, "f") is True
    assert db.execute("PRAGMA application_id").fetchone()[0] == V1.application_id
    assert db.execute("PRAGMA user_version").fetchone()[0] == 1


def test_reopening_a_file_at_this_version_changes_nothing(tmp_path: Path) -> None:
    db = _db(tmp_path / "f.sqlite")
    V1.ensure(db, "f")
    db.execute("INSERT INTO w VALUES ('a')")
    assert V1.ensure(db, "f") is False
    assert db.execute("SELECT k FROM w").fetchall() == [("a",)]


def test_a_file_of_another_application_is_refused_untouched(tmp_path: Path) -> None:
    db = _db(tmp_path / "f.sqlite")
    db.execute("CREATE TABLE theirs (x)")
    with pytest.raises(SchemaMismatch, match="not a widget store file"):
        V1.ensure(db, "f")
    assert db.execute("PRAGMA user_version").fetchone()[0] == 0


def test_a_newer_version_is_refused(tmp_path: Path) -> None:
    db = _db(tmp_path / "f.sqlite")
    SQLiteSchema("widget store", V1.application_id, 3, V1.statements).ensure(db, "f")
    with pytest.raises(SchemaMismatch, match="schema version 3"):
        V1.ensure(db, "f")


def test_an_older_version_is_migrated_step_by_step_in_one_transaction(tmp_path: Path) -> None:
    db = _db(tmp_path / "f.sqlite")
    V1.ensure(db, "f")
    v3 = SQLiteSchema(
        "widget store",
        V1.application_id,
        3,
        V1.statements,
        {
            1: lambda c: c.execute("ALTER TABLE w ADD COLUMN a INTEGER"),
            2: lambda c: c.execute("ALTER TABLE w ADD COLUMN b INTEGER"),
        },
    )
    assert v3.ensure(db, "f") is False
    columns = [row[1] for row in db.execute("PRAGMA table_info(w)")]
    assert columns == ["k", "a", "b"]
    assert db.execute("PRAGMA user_version").fetchone()[0] == 3


def test_a_failed_migration_leaves_the_file_at_its_old_version(tmp_path: Path) -> None:
    db = _db(tmp_path / "f.sqlite")
    V1.ensure(db, "f")

    def broken(c: sqlite3.Connection) -> None:
        c.execute("ALTER TABLE w ADD COLUMN a INTEGER")
        raise RuntimeError("disk on fire")

    with pytest.raises(RuntimeError):
        SQLiteSchema("widget store", V1.application_id, 2, V1.statements, {1: broken}).ensure(
            db, "f"
        )
    assert db.execute("PRAGMA user_version").fetchone()[0] == 1
    assert [row[1] for row in db.execute("PRAGMA table_info(w)")] == ["k"]


def test_a_missing_migration_step_is_refused(tmp_path: Path) -> None:
    db = _db(tmp_path / "f.sqlite")
    V1.ensure(db, "f")
    with pytest.raises(SchemaMismatch, match="cannot migrate"):
        SQLiteSchema("widget store", V1.application_id, 2, V1.statements).ensure(db, "f")
