"""A process killed with SIGKILL at any step of a registry write costs no epoch (issue 21).

A real process holding a store is killed — ``kill -9``, by itself, at the exact step the test
names (``server/store/crashpoints.py``): with the write's rows in the transaction and COMMIT not
run (``before-commit``), right after COMMIT with the high-water mark not yet raised
(``after-commit``), or with the new mark written but not renamed into place (``mark-renaming``).
Whoever looks next — a worker that reopens the file, or one that was following it and runs its
next check — finds the same epoch and exactly the committed prefix of the writes (the oracle: the
same writes applied to an in-memory registry), and a write after it lands at the next seq of that
epoch. A restore is still found when the opener that found it dies, and the new epoch it
committed is kept, not replaced by another.

PostgreSQL passes the same two transaction steps (``before-commit``, ``after-commit``: the write
path is ``server/store/base.py`` for both dialects, and a captured change reaches the registry
through that path too, in the leading worker's ``ingest``); it keeps no mark file, so a write
there never reaches ``mark-renaming`` (its restore check is the commit identity, written in the
same transaction as the position). The same checks run on a PostgreSQL registry.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.service.test_restored_history_postgres import copy_rows, put_rows_back
from tests.support.postgres import PostgresCluster
from tests.support.sqlite_files import backup, restore

from invalidation_contracts.domains import get_domain
from invalidation_contracts.server import Registry
from invalidation_contracts.server.store import open_store
from invalidation_contracts.server.store.crashpoints import CRASH_ENV, STEPS
from invalidation_contracts.server.store.highwater import Mark, read_mark
from invalidation_contracts.server.store.postgres import DEFAULT_SCHEMA

DOMAIN = get_domain("acme_billing")
TABLE = "active_csm_codes"
KEYS = ("plan_partner_growth", "crash_a", "crash_b", "crash_c")
TRANSACTION_STEPS = ("before-commit", "after-commit")  # the steps a PostgreSQL write passes

# One write: upsert one row (its code is new, so every write is a change), delete some others.
Write = tuple[dict[str, dict[str, str]], list[str]]

# The process that dies: it opens the registry (a SQLite path or a PostgreSQL URL), arms the
# crash, then makes the writes, each acknowledged on stdout once ``patch`` returned (committed
# and served by this process).
CHILD = """
import json, sys
from invalidation_contracts.domains import get_domain
from invalidation_contracts.server.store import open_store
from invalidation_contracts.server.store.crashpoints import arm
where, crash, writes = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
registry = open_store(where).open_registry(get_domain("acme_billing"))
arm(crash)
for upsert, delete in writes:
    registry.patch("active_csm_codes", upsert, delete)
    print(json.dumps([registry.state.epoch, registry.state.seq]), flush=True)
"""


def writes(plan: Sequence[tuple[str, Sequence[str]]]) -> list[Write]:
    """One write per ``(key, deletes)``: upsert ``key`` with a new code, delete those of
    ``deletes`` present at that point (deleting an absent row is refused, not a change)."""
    present = set(DOMAIN.registry().state.tables[TABLE].rows)
    made: list[Write] = []
    for i, (key, delete) in enumerate(plan):
        gone = sorted({k for k in delete if k != key and k in present})
        made.append(({key: {"code": f"C{i}", "csm": "csm_crash"}}, gone))
        present = (present | {key}) - set(gone)
    return made


WRITES = writes([(KEYS[i % len(KEYS)], [KEYS[(i + 3) % len(KEYS)]]) for i in range(4)])


def run_writer(where: Path | str, crash: str, writes: Sequence[Write]) -> tuple[int, list[Any]]:
    """Run the child armed at ``crash``; its exit status and what it acknowledged."""
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(where), crash, json.dumps(writes)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode in (0, -signal.SIGKILL), child.stderr
    return child.returncode, [json.loads(line) for line in child.stdout.splitlines()]


def run_until_killed(where: Path | str, crash: str, writes: Sequence[Write]) -> list[list[Any]]:
    """Run the child until it dies at ``crash``; what it acknowledged before."""
    status, acknowledged = run_writer(where, crash, writes)
    assert status == -signal.SIGKILL, "the writer never reached its crash step"
    return acknowledged


def oracle(writes: Sequence[Write]) -> Registry:
    """The writes applied in order to an in-memory registry: what a store must hold after them."""
    registry = DOMAIN.registry()
    for upsert, delete in writes:
        registry.patch(TABLE, upsert, delete)
    return registry


def committed_count(crash: str, acknowledged: int) -> int:
    """The writes committed: the acknowledged ones, and the one that died after its COMMIT."""
    step = crash.split(":")[0]
    return acknowledged + (0 if step == "before-commit" else 1)


def assert_holds(registry: Registry, expected: Registry, epoch: str) -> None:
    state = registry.state
    assert (state.epoch, state.seq) == (epoch, expected.state.seq)
    for name, snapshot in expected.state.tables.items():
        assert state.tables[name].plain_rows() == snapshot.plain_rows(), name


@contextmanager
def follower(db: Path | str) -> Iterator[Registry]:
    """A worker following the registry (its own store), as a running process would."""
    with open_store(db) as store:
        yield store.open_registry(DOMAIN)


def reopened(db: Path | str) -> Registry:
    with open_store(db) as store:
        registry = store.open_registry(DOMAIN)
    return registry


def check_after_crash(
    db: Path | str, crash: str, writes: Sequence[Write], reopen_first: bool
) -> None:
    """Kill a writer at ``crash`` while a follower runs; both ways of looking next keep the epoch
    and hold exactly the committed writes; the next write continues the epoch (and, on a SQLite
    file, its mark is raised to it)."""
    with follower(db) as running:
        epoch = running.state.epoch
        acknowledged = run_until_killed(db, crash, writes)
        committed = committed_count(crash, len(acknowledged))
        expected = oracle(writes[:committed])
        assert [seq for _, seq in acknowledged] == list(range(1, len(acknowledged) + 1))

        if reopen_first:
            assert_holds(reopened(db), expected, epoch)
        running.sync()  # the follower's next check: it serves exactly what was committed
        assert_holds(running, expected, epoch)
        if not reopen_first:
            assert_holds(reopened(db), expected, epoch)

        running.patch(TABLE, {"after": {"code": "AFTER", "csm": "csm_crash"}})
        assert (running.state.epoch, running.state.seq) == (epoch, expected.state.seq + 1)
    if isinstance(db, Path):
        assert read_mark(Path(f"{db}-history")) == Mark(epoch, expected.state.seq + 1)
    assert reopened(db).state.epoch == epoch


@pytest.mark.parametrize("reopen_first", [True, False], ids=["reopened", "followed"])
@pytest.mark.parametrize("step", STEPS)
def test_a_writer_killed_at_any_step_costs_no_epoch_and_loses_no_commit(
    step: str, reopen_first: bool, tmp_path: Path
) -> None:
    check_after_crash(tmp_path / "registry.db", f"{step}:3", WRITES, reopen_first)


@pytest.mark.postgres
@pytest.mark.parametrize("reopen_first", [True, False], ids=["reopened", "followed"])
@pytest.mark.parametrize("step", TRANSACTION_STEPS)
def test_a_postgresql_writer_killed_at_any_step_costs_no_epoch_and_loses_no_commit(
    step: str, reopen_first: bool, postgres_url: str
) -> None:
    check_after_crash(postgres_url, f"{step}:3", WRITES, reopen_first)


@pytest.mark.postgres
def test_a_postgresql_write_has_no_mark_step_to_die_at(postgres_url: str) -> None:
    """Armed at ``mark-renaming``, a PostgreSQL writer makes every write and exits: the step is
    a SQLite file's, and PostgreSQL's restore check costs no step outside the transaction."""
    status, acknowledged = run_writer(postgres_url, "mark-renaming:1", WRITES)
    assert status == 0
    assert [seq for _, seq in acknowledged] == list(range(1, len(WRITES) + 1))
    assert_holds(reopened(postgres_url), oracle(WRITES), acknowledged[0][0])


@st.composite
def crashes(draw: st.DrawFn, steps: Sequence[str] = STEPS) -> tuple[list[Write], str, bool]:
    keys, deletes = st.sampled_from(KEYS), st.lists(st.sampled_from(KEYS), max_size=2)
    plan = draw(st.lists(st.tuples(keys, deletes), min_size=1, max_size=5))
    crash = f"{draw(st.sampled_from(steps))}:{draw(st.integers(1, len(plan)))}"
    return writes(plan), crash, draw(st.booleans())


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(crashes())
def test_a_crash_at_a_random_step_of_random_writes_leaves_the_committed_prefix(
    case: tuple[list[Write], str, bool],
) -> None:
    writes, crash, reopen_first = case
    with tempfile.TemporaryDirectory() as tmp:
        check_after_crash(Path(tmp) / "registry.db", crash, writes, reopen_first)


@pytest.mark.postgres
@settings(
    max_examples=6,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(crashes(TRANSACTION_STEPS))
def test_a_postgresql_crash_at_a_random_step_of_random_writes_leaves_the_committed_prefix(
    postgres_cluster: PostgresCluster, case: tuple[list[Write], str, bool]
) -> None:
    writes, crash, reopen_first = case
    url = postgres_cluster.database()  # a fresh registry per example
    try:
        check_after_crash(url, crash, writes, reopen_first)
    finally:
        postgres_cluster.drop(url)


def test_what_a_follower_served_after_its_writer_died_is_marked_before_it_is_served(
    tmp_path: Path,
) -> None:
    """The writer dies between its COMMIT and its mark; a follower adopts that commit and serves
    it. Its seq is then vouched for: a backup from before it, copied back, opens under a new
    epoch instead of serving that seq again with other rows."""
    db, copy = tmp_path / "registry.db", tmp_path / "backup.db"
    made = writes([("crash_a", ()), ("crash_b", ()), ("crash_c", ())])
    with follower(db) as running:
        for upsert, delete in made[:2]:
            running.patch(TABLE, upsert, delete)
        backup(db, copy)
        run_until_killed(db, "after-commit:1", made[2:])
        running.sync()
        served = (running.state.epoch, running.state.seq)
        assert served[1] == 3
    restore(copy, db)

    state = reopened(db).state

    assert state.epoch != served[0]


# -- an epoch change: the opener that finds a restored file dies while starting the new epoch ---


def stored_epoch(db: Path | str) -> str:
    """The epoch the registry holds, read by hand (no store, so no check runs)."""
    if isinstance(db, str):
        with psycopg.connect(db) as pg:
            row = pg.execute(
                f"SELECT value FROM {DEFAULT_SCHEMA}.meta WHERE name = 'epoch'"
            ).fetchone()
    else:
        with closing(sqlite3.connect(db)) as conn:
            row = conn.execute("SELECT value FROM ic_meta WHERE name = 'epoch'").fetchone()
    assert row is not None
    return str(row[0])


def restored_file(db: Path, copy: Path) -> str:
    """A registry served up to seq 5, then its seq-2 backup copied back; the epoch served."""
    return restored(db, lambda: backup(db, copy), lambda: restore(copy, db))


def restored_database(url: str) -> str:
    """The same on PostgreSQL: the registry's rows at seq 2 copied back by hand."""
    saved: dict[str, Any] = {}
    return restored(url, lambda: saved.update(copy_rows(url)), lambda: put_rows_back(url, saved))


def restored(db: Path | str, save: Callable[[], None], put_back: Callable[[], None]) -> str:
    with open_store(db) as store:
        registry = store.open_registry(DOMAIN)
        made = writes([("crash_a", ())] * 5)
        for upsert, delete in made[:2]:
            registry.patch(TABLE, upsert, delete)
        save()
        for upsert, delete in made[2:]:
            registry.patch(TABLE, upsert, delete)
        served = registry.state.epoch
    put_back()
    return served


OPEN = (
    "from invalidation_contracts.domains import get_domain\n"
    "from invalidation_contracts.server.store import open_store\n"
    "import sys\n"
    "open_store(sys.argv[1]).open_registry(get_domain('acme_billing'))\n"
)


def check_opener_killed(db: Path | str, served: str, crash: str, committed: bool) -> None:
    """Open the restored registry in a process that dies at ``crash``; whoever opens it next
    neither hides the restore nor replaces a new epoch the dead opener committed."""
    child = subprocess.run(
        [sys.executable, "-c", OPEN, str(db)],
        env={**os.environ, CRASH_ENV: crash},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    left = stored_epoch(db)
    assert (left != served) == committed

    state = reopened(db).state

    assert state.epoch != served  # the restore is never hidden
    if committed:
        assert state.epoch == left  # the new epoch the dead opener committed stands
    assert state.tables[TABLE].plain_rows()["crash_a"]["code"] == "C1"  # the backup's rows


@pytest.mark.parametrize(
    ("crash", "committed"),
    [
        ("before-commit:1", False),
        ("mark-renaming:1", False),  # the intent naming the new epoch, not yet in place
        ("after-commit:1", True),
        ("mark-renaming:2", True),  # the mark raised to the new epoch, not yet in place
    ],
)
def test_an_opener_killed_while_starting_the_epoch_of_a_restore_neither_hides_nor_repeats_it(
    crash: str, committed: bool, tmp_path: Path
) -> None:
    db = tmp_path / "registry.db"
    served = restored_file(db, tmp_path / "backup.db")
    check_opener_killed(db, served, crash, committed)


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("crash", "committed"), [("before-commit:1", False), ("after-commit:1", True)]
)
def test_a_postgresql_opener_killed_starting_the_epoch_of_a_restore_neither_hides_nor_repeats_it(
    crash: str, committed: bool, postgres_url: str
) -> None:
    served = restored_database(postgres_url)
    check_opener_killed(postgres_url, served, crash, committed)


def test_a_crash_step_that_is_not_known_is_refused_with_the_steps_named() -> None:
    from invalidation_contracts.server.store.crashpoints import parse

    with pytest.raises(ValueError, match="before-commit, after-commit, mark-renaming"):
        parse("during-lunch:1")
    with pytest.raises(ValueError, match="N >= 1"):
        parse("after-commit:0")
