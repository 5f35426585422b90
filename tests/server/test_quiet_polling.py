"""A polling follower reads its SQLite files only when someone committed (``server/quiet.py``):
``PRAGMA data_version`` on a connection of its own moves on every commit by any other connection;
a full read still happens at least once a heartbeat, and whenever a reconciliation is due."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from invalidation_contracts.server.quiet import QuietCheck
from invalidation_contracts.server.store.sqlite import (
    DataVersion,
    SQLiteRegistryStore,
    data_version,
)

HEARTBEAT_S = 1.0


@dataclass
class File:
    """A SQLite database file that another connection writes, offering the follower's probe."""

    path: Path

    def change_probe(self) -> DataVersion | None:
        return data_version(self.path)

    def commit(self) -> None:
        with closing(sqlite3.connect(self.path)) as db, db:
            db.execute("INSERT INTO t VALUES (1)")


@dataclass
class Source:
    due: bool = False

    def reconcile_due(self) -> bool:
        return self.due


@pytest.fixture
def files(tmp_path: Path) -> Iterator[list[File]]:
    made = []
    for name in ("registry.sqlite", "provider.db"):
        path = tmp_path / name
        with closing(sqlite3.connect(path)) as db:
            db.execute("CREATE TABLE t (a)")
        made.append(File(path))
    yield made


@pytest.fixture
def quiet(files: list[File]) -> Iterator[QuietCheck]:
    check = QuietCheck(files, HEARTBEAT_S)
    yield check
    check.reset()


def test_the_first_round_reads_everything(quiet: QuietCheck) -> None:
    assert quiet.unchanged(0.0, []) is False


def test_a_round_after_a_full_one_with_no_commit_reads_nothing(quiet: QuietCheck) -> None:
    quiet.unchanged(0.0, [])
    assert quiet.unchanged(0.02, []) is True
    assert quiet.unchanged(0.04, []) is True


@pytest.mark.parametrize("which", [0, 1])
def test_a_commit_to_any_file_makes_the_next_round_read(
    quiet: QuietCheck, files: list[File], which: int
) -> None:
    quiet.unchanged(0.0, [])
    files[which].commit()
    assert quiet.unchanged(0.02, []) is False
    assert quiet.unchanged(0.04, []) is True, "read once, then quiet again"


def test_a_commit_during_the_full_round_is_read_by_the_next(
    quiet: QuietCheck, files: list[File]
) -> None:
    assert quiet.unchanged(0.0, []) is False  # the probes are read before the round reads
    files[1].commit()  # lands while that round reads
    assert quiet.unchanged(0.02, []) is False


def test_the_heartbeat_reads_everything_even_when_nothing_changed(quiet: QuietCheck) -> None:
    quiet.unchanged(0.0, [])
    assert quiet.unchanged(HEARTBEAT_S - 0.01, []) is True
    assert quiet.unchanged(HEARTBEAT_S, []) is False


def test_a_due_reconciliation_reads_everything(quiet: QuietCheck) -> None:
    quiet.unchanged(0.0, [])
    assert quiet.unchanged(0.02, [Source(due=True)]) is False


def test_after_a_reset_the_next_round_reads_everything(quiet: QuietCheck) -> None:
    quiet.unchanged(0.0, [])
    quiet.reset()
    assert quiet.unchanged(0.02, []) is False


def test_a_database_without_a_probe_means_every_round_reads(files: list[File]) -> None:
    class Elsewhere:  # e.g. PostgreSQL, which wakes the worker instead
        def change_probe(self) -> Any:
            return None

    check = QuietCheck([files[0], Elsewhere()], HEARTBEAT_S)
    assert [check.unchanged(t, []) for t in (0.0, 0.02, 0.04)] == [False, False, False]


def test_the_registry_store_offers_a_probe_that_moves_on_its_commits(tmp_path: Path) -> None:
    with SQLiteRegistryStore(tmp_path / "registry.sqlite") as store:
        probe = store.change_probe()
        assert probe is not None
        try:
            before = probe.read()
            with closing(sqlite3.connect(tmp_path / "registry.sqlite")) as db, db:
                db.execute("CREATE TABLE other (a)")
            assert probe.read() != before
        finally:
            probe.close()


def test_an_in_memory_database_has_no_probe() -> None:
    assert data_version(":memory:") is None
    assert data_version(None) is None


def test_the_probe_never_creates_a_missing_file(tmp_path: Path) -> None:
    probe = DataVersion(tmp_path / "absent.db")
    with pytest.raises(sqlite3.OperationalError):
        probe.read()
    assert not (tmp_path / "absent.db").exists()
