"""Shared memory under contention (issue 22, item 8): a version move that evicts many entries
commits while other processes keep writing small fixes, some of them killed with SIGKILL —
0 give-ups, 0 stale serves after the move committed, and nothing of the move left live.

Real processes on one SQLite file and on one PostgreSQL database; every call journalled with one
host-wide monotonic clock (``contention_model``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from tests.client.contention_model import (
    ORIGIN,
    memory,
    moved,
    mover,
    reader,
    records,
    seed,
    stalled_mover,
    start,
    writer,
)

from invalidation_contracts.client.shared.layout import namespace
from invalidation_contracts.client.shared.turn import TURN_KEY, TURN_TTL_S, free, new_turn
from invalidation_contracts.client.stores import CheckOp, PutOp
from invalidation_contracts.client.values import Observed

ENTRIES = 2000
DEADLINE_S = 60.0


def _stop(process) -> None:
    if process.is_alive():
        os.kill(process.pid, signal.SIGKILL)
    process.join(10)


def contend(where: str, work: Path, *, kills: int) -> list[dict]:
    """Seed, start 3 writers and a reader, move once, SIGKILL-and-restart writers meanwhile."""
    seed(where, ENTRIES)
    journal = work / "journal.jsonl"
    writers = [start(writer, where, str(n), journal) for n in range(3)]
    readers = [start(reader, where, journal)]
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not _warm(records(journal)):
            assert time.monotonic() < deadline, "the writers never wrote, or the reader never read"
            time.sleep(0.05)
        move = start(mover, where, journal)
        victim = 0
        while move.is_alive():
            assert time.monotonic() < deadline, "the move did not commit"
            if kills:
                kills -= 1
                _stop(writers[victim])
                writers[victim] = start(writer, where, f"r{kills}", journal)
                victim = (victim + 1) % len(writers)
            time.sleep(0.1)
        move.join(10)
        while not _after_the_move(records(journal)):  # writes and lookups after the move
            assert time.monotonic() < deadline + DEADLINE_S, "nothing ran after the move"
            time.sleep(0.05)
    finally:
        for process in (*writers, *readers):
            _stop(process)
    return records(journal)


def _after_the_move(journal: list[dict]) -> bool:
    moves = [r for r in journal if r["kind"] == "move"]
    if not moves:
        return True  # the move failed: the assertions say how
    (move,) = moves
    return any(r["kind"] == "write" and r["start"] > move["start"] for r in journal) and any(
        r["kind"] == "lookup" and r["start"] > move["end"] for r in journal
    )


def _warm(journal: list[dict]) -> bool:
    """Writers writing, and the reader serving the fixes the move will evict."""
    writes = sum(r["kind"] == "write" for r in journal)
    return writes >= 6 and any(r["kind"] == "lookup" and r["t0"] for r in journal)


def assert_contract_held(journal: list[dict], where: str) -> None:
    (move,) = [r for r in journal if r["kind"] == "move"]
    assert move["error"] is None, move["error"]
    errors = [r["error"] for r in journal if r["error"] is not None]
    assert errors == []  # no give-up, anywhere
    after = [r for r in journal if r["kind"] == "lookup" and r["start"] > move["end"]]
    assert after, "no lookup ran after the move"
    assert [r for r in after if r["t0"]] == []  # 0 stale serves
    before = [r for r in journal if r["kind"] == "lookup" and r["end"] < move["start"]]
    assert any(r["t0"] for r in before), "the reader served the fixes before the move"
    assert sum(r["kind"] == "write" and r["start"] > move["start"] for r in journal) > 0
    with memory(where) as m:
        live = [e.suggestion.type for e in m.entries(ORIGIN)]
        assert not [name for name in live if name.startswith("F")]
        assert [name for name in live if name.startswith("W")]  # the writers' fixes are kept


@pytest.mark.workers
def test_a_large_move_commits_beside_writers_killed_with_sigkill_on_sqlite(tmp_path):
    where = str(tmp_path / "memory.sqlite")
    assert_contract_held(contend(where, tmp_path, kills=6), where)


@pytest.mark.postgres
def test_a_large_move_commits_beside_writers_killed_with_sigkill_on_postgresql(
    postgres_url, tmp_path
):
    assert_contract_held(contend(postgres_url, tmp_path, kills=6), postgres_url)


def kill_mid_move(where: str, work: Path) -> tuple[list[dict], float]:
    """Seed, start 3 writers and a reader; a mover announces its move and is killed with SIGKILL
    before it commits; then the server's new version reaches the writers, which move instead.
    Returns the journal and when the announcement was seen."""
    seed(where, ENTRIES)
    journal, flag = work / "journal.jsonl", work / "announced"
    writers = [start(writer, where, str(n), journal) for n in range(3)]
    readers = [start(reader, where, journal)]
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not _warm(records(journal)):
            assert time.monotonic() < deadline, "the writers never wrote, or the reader never read"
            time.sleep(0.05)
        victim = start(stalled_mover, where, journal, flag)
        while not flag.exists() or not flag.read_text():
            assert time.monotonic() < deadline, "the mover never announced its move"
            time.sleep(0.01)
        announced_at = float(flag.read_text())
        time.sleep(0.3)  # lookups while the announced move is not committed
        _stop(victim)
        moved(journal).touch()  # the new version reaches the writers: one of them moves
        while not _moved_by_a_writer(where):
            assert time.monotonic() < deadline, "no writer committed the move"
            time.sleep(0.05)
        time.sleep(0.5)  # lookups after the move
    finally:
        for process in (*writers, *readers):
            _stop(process)
    return records(journal), announced_at


def _moved_by_a_writer(where: str) -> bool:
    with memory(where) as m:
        return not [e for e in m.entries(ORIGIN) if e.suggestion.type.startswith("F")]


def assert_no_stale_serve_after_the_announcement(journal: list[dict], announced_at: float, where):
    assert [r["error"] for r in journal if r["error"] is not None] == []  # no give-up
    assert not [r for r in journal if r["kind"] == "move"]  # the mover died before committing
    before = [r for r in journal if r["kind"] == "lookup" and r["end"] < announced_at]
    assert any(r["t0"] for r in before), "the reader served the fixes before the move"
    after = [r for r in journal if r["kind"] == "lookup" and r["start"] > announced_at]
    assert after, "no lookup ran after the announcement"
    assert [r for r in after if r["t0"]] == []  # 0 stale serves, committed or not
    written = {r["fix"] for r in journal if r["kind"] == "write" and r["error"] is None}
    with memory(where) as m:
        live = {e.suggestion.type for e in m.entries(ORIGIN)}
    assert not [name for name in live if name.startswith("F")]
    assert written - live == set()  # nothing the writers stored is lost


@pytest.mark.workers
def test_a_mover_killed_between_announcing_and_committing_serves_nothing_stale_on_sqlite(
    tmp_path,
):
    where = str(tmp_path / "memory.sqlite")
    journal, announced_at = kill_mid_move(where, tmp_path)
    assert_no_stale_serve_after_the_announcement(journal, announced_at, where)


@pytest.mark.postgres
def test_a_mover_killed_between_announcing_and_committing_serves_nothing_stale_on_postgresql(
    postgres_url, tmp_path
):
    journal, announced_at = kill_mid_move(postgres_url, tmp_path)
    assert_no_stale_serve_after_the_announcement(journal, announced_at, postgres_url)


def test_a_turn_left_by_a_killed_process_is_taken_over_at_once(tmp_path):
    """A holder killed between taking the turn and committing: the next writer does not wait
    for the turn to expire."""
    where = str(tmp_path / "memory.sqlite")
    seed(where, 3)
    with memory(where) as m:
        dead = start(time.sleep, 0)
        dead.join(10)
        turn = {"holder": "gone", "host": os.uname().nodename, "pid": dead.pid, "until": 4e9}
        meta = namespace(ORIGIN, "meta")
        m.store.batch([CheckOp(meta, TURN_KEY, None), PutOp(meta, TURN_KEY, turn)])
        started = time.monotonic()
        m.observe(ORIGIN, Observed(None, 200, {"success": True, **_contract("2.0.0")}))
        assert time.monotonic() - started < 20
        assert m.store.get(meta, TURN_KEY) is None
        assert [e for e in m.entries(ORIGIN)] == []


def _contract(version: str) -> dict:
    from tests.client.contention_model import contract

    return contract(version)


def _zombie() -> subprocess.Popen[bytes]:
    """A child killed with SIGKILL and not reaped: a zombie until ``wait()``."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    os.kill(child.pid, signal.SIGKILL)
    for _ in range(500):  # bounded: the kernel makes it a zombie within milliseconds
        if Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            break
        time.sleep(0.01)
    return child


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")
def test_a_turn_held_by_a_killed_and_unreaped_process_is_taken_over_at_once(tmp_path):
    """Issue 38, item 4: a zombie holder (``kill(pid, 0)`` succeeds on it) does not stall the
    next writer for the turn's TTL: ``/proc/PID/stat`` says ``Z``."""
    where = str(tmp_path / "memory.sqlite")
    seed(where, 3)
    zombie = _zombie()
    try:
        with memory(where) as m:
            meta = namespace(ORIGIN, "meta")
            turn = {**new_turn(time.time()), "pid": zombie.pid}
            turn.pop("started", None)  # the zombie's own start time is not this process's
            m.store.batch([CheckOp(meta, TURN_KEY, None), PutOp(meta, TURN_KEY, turn)])
            assert free(turn, time.time())
            done = threading.Event()
            runner = threading.Thread(
                target=lambda: (
                    m.observe(ORIGIN, Observed(None, 200, {"success": True, **_contract("2.0.0")})),
                    done.set(),
                ),
                daemon=True,
            )
            runner.start()
            runner.join(TURN_TTL_S / 2)  # a bound, not a timing: it waited the TTL before
            assert done.is_set() and m.store.get(meta, TURN_KEY) is None
    finally:
        zombie.wait(10)


def test_a_turn_naming_a_live_process_is_not_free_until_it_expires():
    """The control: a running holder of this namespace keeps its turn."""
    assert not free(new_turn(time.time()), time.time())
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert not free({**new_turn(time.time()), "pid": sleeper.pid, "started": None}, time.time())
    finally:
        sleeper.kill()
        sleeper.wait(10)


@pytest.mark.skipif(not Path("/proc/self/ns/pid").exists(), reason="needs /proc (Linux)")
def test_a_turn_whose_pid_was_reused_or_lives_in_another_pid_namespace_is_free():
    """A pid reused by a later process (another start time), or one in another PID namespace
    on this hostname, names no holder here: taken over at once."""
    now = time.time()
    reused = {**new_turn(now), "started": new_turn(now)["started"] + 1}
    foreign = {**new_turn(now), "pidns": "pid:[1]"}
    assert free(reused, now) and free(foreign, now)
