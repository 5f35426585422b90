"""A worker on SQLite files sleeps until someone commits (Linux inotify, ``store/inotify.py``):
a commit by another process wakes it at once, long before any poll or heartbeat would; where
inotify cannot be set up, the worker polls as before and serves every change all the same."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support.acme_sqlite import acme_on_sqlite
from tests.support.failing_libc import FailingLibc

from invalidation_contracts.server.store import inotify
from invalidation_contracts.server.store.inotify import CaptureWakeup, FileWakeup
from invalidation_contracts.server.worker.follower import Follower

pytestmark = [
    pytest.mark.workers,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify is Linux's"),
]

KEY = "plan_partner_growth"
SLOW = {"poll_interval_s": 60.0, "heartbeat_s": 60.0, "max_lag_s": 120.0}
"""Intervals no test outlives: a change served within the test was woken for, not polled."""


def commit(database: Path, code: str) -> None:
    """Rotate a code from another process with plain python sqlite3."""
    script = (
        "import sqlite3, sys\n"
        "with sqlite3.connect(sys.argv[1]) as db:\n"
        "    db.execute('UPDATE active_csm_codes SET code = ? WHERE key = ?', sys.argv[2:])"
    )
    subprocess.run([sys.executable, "-c", script, str(database), code, KEY], check=True, timeout=60)


def seq(url: str) -> int:
    return int(httpx.get(url + "/contract/versions", timeout=10).json()["contract_seq"])


def served_within(url: str, above: int, seconds: float) -> int:
    """The seq the worker serves once it moves past ``above`` (bounded wait), else ``above``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        now = seq(url)
        if now > above:
            return now
        time.sleep(0.01)
    return above


def follower_of(app: Any) -> Follower:
    follower = app.state.service.runtime.follower
    assert isinstance(follower, Follower)
    return follower


def test_a_commit_by_another_process_wakes_a_sqlite_worker_at_once(
    tmp_path: Path, serve: Callable[..., Any]
) -> None:
    app, acme = acme_on_sqlite(tmp_path, **SLOW)
    with serve(app) as url:
        before = seq(url)
        commit(acme, "WOKEN1")
        first = served_within(url, before, 20.0)
        assert first > before, "no poll or heartbeat comes within a minute: inotify woke it"
        commit(acme, "WOKEN2")
        assert served_within(url, first, 20.0) > first
        follower = follower_of(app)
        assert not follower.wakeups.polling()
        ready = httpx.get(url + "/contract/ready").json()
        assert ready["ready"] is True and ready["capture_leader"] == {"sql": True}


def test_a_sqlite_worker_listens_to_the_registry_and_the_provider_database(
    tmp_path: Path, serve: Callable[..., Any]
) -> None:
    app, _ = acme_on_sqlite(tmp_path)
    with serve(app) as url:
        assert seq(url) == 0
        listeners = follower_of(app).wakeups.listeners or {}
        assert set(listeners) == {"", "sql"}
        assert all(isinstance(x, FileWakeup) for x in listeners.values())
        assert isinstance(listeners["sql"], CaptureWakeup), "the capture's lead"


def test_a_sqlite_worker_that_cannot_watch_its_files_polls_and_serves_every_change(
    tmp_path: Path, serve: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inotify, "_libc", FailingLibc)
    app, acme = acme_on_sqlite(tmp_path)
    with serve(app) as url:
        follower = follower_of(app)
        before = seq(url)
        for i in range(3):
            commit(acme, f"POLLED{i}")
            now = served_within(url, before, 20.0)
            assert now > before
            before = now
        assert follower.wakeups.listeners == {} and follower.wakeups.polling()
        assert httpx.get(url + "/contract/ready").json()["ready"] is True


def test_a_sqlite_worker_turned_off_inotify_by_the_environment_polls(
    tmp_path: Path, serve: Callable[..., Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(inotify.ENV, "0")
    app, acme = acme_on_sqlite(tmp_path)
    with serve(app) as url:
        before = seq(url)
        commit(acme, "POLLED")
        assert served_within(url, before, 20.0) > before
        assert follower_of(app).wakeups.listeners == {}


def test_commits_of_a_writer_that_keeps_its_connection_open_wake_the_worker(
    tmp_path: Path, serve: Callable[..., Any]
) -> None:
    """A WAL commit becomes visible after its last write to the file (the index is in shared
    memory, which inotify does not see): the worker woken by the write looks again until it
    sees it, well before a heartbeat."""
    app, acme = acme_on_sqlite(tmp_path, poll_interval_s=0.5, heartbeat_s=60.0, max_lag_s=120.0)
    with serve(app) as url, closing(sqlite3.connect(acme, isolation_level=None)) as writer:
        writer.execute("PRAGMA journal_mode = WAL")
        before = seq(url)
        for i in range(5):
            writer.execute("UPDATE active_csm_codes SET code = ? WHERE key = ?", (f"HELD{i}", KEY))
            now = served_within(url, before, 20.0)
            assert now > before, f"commit {i} was not seen within 20 s (heartbeat 60 s)"
            before = now
