"""Two code versions declaring different columns of one table (issue 41, versions side by side).

Version 1 declares ``plans`` with the column ``funding``; version 2 (shipped with a migration that
adds ``tier``) declares ``funding`` and ``tier``. Both run at once during a rolling or canary
deploy, over one history and one shared capture. Neither may rewrite the other's rows: a table
nobody writes keeps its seq through any number of reconciliations (no flip-flop between the two
column sets), and each worker serves its own columns.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import psycopg
import pytest

from invalidation_contracts.server import Domain, SQLTable
from invalidation_contracts.server.sql import SQLSource
from invalidation_contracts.server.worker.runtime import Runtime, open_runtime

pytestmark = pytest.mark.postgres

V1 = Domain("shop", {"plans": SQLTable("plans", columns=["funding"])}, [], [])
V2 = Domain("shop", {"plans": SQLTable("plans", columns=["funding", "tier"])}, [], [])
INTERVAL_S = 0.2
QUIET_S = 1.0


@pytest.fixture
def database(postgres_url: str) -> str:
    with psycopg.connect(postgres_url, autocommit=True) as pg:
        pg.execute("CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT, tier TEXT)")
        pg.execute("INSERT INTO plans VALUES ('basic', 'card', 'gold'), ('pro', 'wire', NULL)")
    return postgres_url


@pytest.fixture
def workers(database: str) -> Iterator[Callable[[Domain], Runtime]]:
    """Start a worker of a version reconciling every ``INTERVAL_S``; all stopped at the end."""
    with ExitStack() as stack:

        def start(domain: Domain) -> Runtime:
            source = SQLSource(database, domain.sql_tables, reconcile_interval_s=INTERVAL_S)
            runtime = open_runtime(domain, store=database, database=source)
            stack.callback(runtime.close)
            runtime.start()
            return runtime

        yield start


def eventually(predicate: Callable[[], bool], bound_s: float = 10.0) -> None:
    deadline = time.monotonic() + bound_s
    while not predicate():
        assert time.monotonic() < deadline, "not within the bound"
        time.sleep(0.02)


def write(database: str, statement: str) -> None:
    with psycopg.connect(database, autocommit=True) as pg:
        pg.execute(statement)


def test_an_unchanged_table_keeps_its_seq_while_two_versions_reconcile_it(
    database: str, workers: Callable[[Domain], Runtime]
) -> None:
    old = workers(V1)
    new = workers(V2)
    write(database, "UPDATE plans SET funding = 'debit' WHERE id = 'pro'")
    eventually(
        lambda: all(
            w.registry.state.tables["plans"].plain_rows()["pro"]["funding"] == "debit"
            for w in (old, new)
        )
    )
    seq = new.registry.state.seq
    time.sleep(QUIET_S)  # 5 reconciliation intervals, nothing written
    assert new.registry.state.seq == seq, "rows flipped between the two versions' columns"
    assert old.registry.state.seq == seq
    assert new.registry.state.tables["plans"].plain_rows() == {
        "basic": {"funding": "card", "tier": "gold"},
        "pro": {"funding": "debit", "tier": None},
    }


def test_a_bypass_reconciled_by_either_version_keeps_the_other_versions_column(
    database: str, workers: Callable[[Domain], Runtime]
) -> None:
    old = workers(V1)
    new = workers(V2)
    with psycopg.connect(database) as pg:  # a write around the capture
        pg.execute("ALTER TABLE plans DISABLE TRIGGER ic_capture")
        pg.execute("UPDATE plans SET funding = 'cash' WHERE id = 'basic'")
        pg.execute("ALTER TABLE plans ENABLE ALWAYS TRIGGER ic_capture")
    wanted = {"funding": "cash", "tier": "gold"}
    eventually(lambda: new.registry.state.tables["plans"].plain_rows()["basic"] == wanted)
    seq = new.registry.state.seq
    time.sleep(QUIET_S)
    assert new.registry.state.seq == old.registry.state.seq == seq


def test_a_column_dropped_from_the_table_leaves_the_rows_at_the_next_reconciliation(
    database: str, workers: Callable[[Domain], Runtime]
) -> None:
    """Only the table's existing columns are kept: a column no version can declare any more
    (dropped, after the new version rolled back) is not served on for ever."""
    old = workers(V1)
    workers(V2).close()  # the canary, rolled back
    assert old.registry.state.tables["plans"].plain_rows()["basic"]["tier"] == "gold"
    write(database, "ALTER TABLE plans DROP COLUMN tier")
    eventually(lambda: "tier" not in old.registry.state.tables["plans"].plain_rows()["basic"])
