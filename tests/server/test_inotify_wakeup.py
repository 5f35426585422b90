"""A SQLite file's wake-up (``server/store/inotify.py``): an inotify descriptor on the database's
directory becomes readable when any process commits to the file, and ``drain`` says whether what
it read concerned the database — other files in the directory never count, an overflowed event
queue always does. Where inotify cannot be set up, there is no wake-up (the worker polls)."""

from __future__ import annotations

import os
import select
import sqlite3
import struct
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from tests.support.failing_libc import FailingLibc

from invalidation_contracts.server.store import inotify
from invalidation_contracts.server.store.inotify import (
    FileWakeup,
    capture_wakeup,
    concerns,
    file_wakeup,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's")


def commit_elsewhere(path: Path) -> None:
    """A commit by another process (plain python sqlite3)."""
    code = (
        "import sqlite3, sys\n"
        "with sqlite3.connect(sys.argv[1]) as db: db.execute('INSERT INTO t VALUES (1)')"
    )
    subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=60)


def readable(wakeup: FileWakeup, timeout_s: float = 0.0) -> bool:
    ready, _, _ = select.select([wakeup.fileno()], [], [], timeout_s)
    return bool(ready)


@pytest.fixture(params=["wal", "delete"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    path = tmp_path / "registry.sqlite"
    with closing(sqlite3.connect(path)) as db:
        db.execute(f"PRAGMA journal_mode = {request.param}")
        db.execute("CREATE TABLE t (a)")
    return path


@pytest.fixture
def wakeup(database: Path) -> Iterator[FileWakeup]:
    made = file_wakeup(database)
    assert made is not None
    made.drain()
    yield made
    made.close()


def test_a_commit_by_another_process_wakes_and_drains_as_a_change(
    database: Path, wakeup: FileWakeup
) -> None:
    commit_elsewhere(database)
    assert readable(wakeup, 10.0)
    assert wakeup.drain() is True
    assert not readable(wakeup), "drain consumed every queued event"
    assert wakeup.drain() is False, "nothing new: no change"


def test_writes_to_other_files_in_the_directory_do_not_count(
    database: Path, wakeup: FileWakeup
) -> None:
    other = database.parent / "other.sqlite"
    with closing(sqlite3.connect(other)) as db, db:
        db.execute("CREATE TABLE t (a)")
    commit_elsewhere(other)
    (database.parent / "registry.sqlite.bak").write_text("a copy")
    (database.parent / "registry.sqlite-shm-like").write_text("x")
    assert readable(wakeup), "the directory's events are queued"
    assert wakeup.drain() is False


def test_a_connection_that_only_reads_is_no_change(database: Path) -> None:
    """While the file is open (a worker holds its connections; the last one to close a WAL file
    checkpoints and deletes the ``-wal``, which does count), a reader's open and close does not."""
    with closing(sqlite3.connect(database)) as held:
        held.execute("SELECT count(*) FROM t").fetchone()
        wakeup = file_wakeup(database)
        assert wakeup is not None
        try:
            with closing(sqlite3.connect(database)) as db:  # read-write, as SQLite always opens
                assert db.execute("SELECT count(*) FROM t").fetchone() == (0,)
            assert wakeup.drain() is False
        finally:
            wakeup.close()


def test_an_overflowed_event_queue_counts_as_a_change(database: Path, wakeup: FileWakeup) -> None:
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 100_000:
        pytest.skip(f"max_queued_events is {limit}: too many writes to overflow it here")
    noise = [database.parent / "a.txt", database.parent / "b.txt"]
    handles = [path.open("wb", buffering=0) for path in noise]
    try:
        for i in range(limit + 10):  # alternating files: identical events are not merged
            handles[i % 2].write(b"x")
    finally:
        for handle in handles:
            handle.close()
    assert wakeup.drain() is True


def test_an_overflow_event_among_other_files_events_counts() -> None:
    names = frozenset({"registry.sqlite", "registry.sqlite-wal", "registry.sqlite-journal"})
    other = struct.pack("iIII", 1, inotify.IN_MODIFY, 0, 16) + b"other.db".ljust(16, b"\0")
    overflow = struct.pack("iIII", -1, inotify.IN_Q_OVERFLOW, 0, 0)
    assert concerns(other, names) is False
    assert concerns(other + overflow, names) is True


@pytest.mark.parametrize("suffix", ["", "-wal", "-journal"])
def test_an_event_on_the_file_or_its_journals_counts(suffix: str) -> None:
    names = frozenset(f"registry.sqlite{s}" for s in ("", "-wal", "-journal"))
    name = f"registry.sqlite{suffix}".encode().ljust(32, b"\0")
    assert concerns(struct.pack("iIII", 1, inotify.IN_MODIFY, 0, 32) + name, names) is True


@pytest.mark.parametrize("path", [None, "", ":memory:", "file:memdb?mode=memory&cache=shared"])
def test_an_in_memory_database_has_no_wakeup(path: str | None) -> None:
    assert file_wakeup(path) is None


def test_turned_off_by_the_environment_there_is_no_wakeup(
    database: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(inotify.ENV, "0")
    assert file_wakeup(database) is None


def test_where_inotify_cannot_be_set_up_there_is_no_wakeup_and_a_warning(
    database: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(inotify, "_libc", FailingLibc)
    assert file_wakeup(database) is None
    assert "polling it instead" in caplog.text


def test_a_closed_wakeup_closes_its_descriptor_once(database: Path) -> None:
    made = file_wakeup(database)
    assert made is not None
    fd = made.fileno()
    made.close()
    made.close()
    with pytest.raises(OSError):
        os.fstat(fd)


# -- a capture's lead ------------------------------------------------------------------------------


def test_one_worker_at_a_time_leads_a_capture_and_a_closed_leader_hands_it_on(
    database: Path,
) -> None:
    first, second = capture_wakeup(database), capture_wakeup(database)
    assert first is not None and second is not None
    try:
        assert first.try_lead() is True and first.leader
        assert second.try_lead() is False and not second.leader
        first.close()  # a worker that stops or dies: the kernel releases the flock
        assert second.try_lead() is True
    finally:
        first.close()
        second.close()


def test_only_the_leader_is_told_a_commit_moved_the_capture(database: Path) -> None:
    leader, follower = capture_wakeup(database), capture_wakeup(database)
    assert leader is not None and follower is not None
    try:
        leader.try_lead()
        follower.try_lead()
        commit_elsewhere(database)
        assert readable(leader, 10.0) and readable(follower, 10.0)
        assert leader.drain() is True
        assert follower.drain() is False, "the leader's registry commit wakes the others"
        assert not readable(follower), "its events were consumed all the same"
    finally:
        leader.close()
        follower.close()


def test_where_the_lock_file_cannot_be_made_every_worker_leads(database: Path) -> None:
    made = capture_wakeup(database)
    assert made is not None
    try:
        made.lock = database.parent / "missing" / "registry.sqlite-lead"
        assert made.try_lead() is True
    finally:
        made.close()
