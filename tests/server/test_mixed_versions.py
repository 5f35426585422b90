"""Two code versions of one domain over one history (issue 41, fault and change suite: deploy,
rollback, redeploy with mixed workers), on PostgreSQL with running followers.

Version 1 reads ``plans``; version 2 adds ``funding_types``. A rolling deploy runs both at once:
the old worker must keep serving (a write to the new table is skipped by it, not a 503), the new
one serves the new table, and the epoch holds through deploy, rollback and redeploy so an agent's
fixes survive. A worker of version 1 opened after version 2 (a rollback, or an old worker
respawned mid-deploy) leaves the table version 2 serves: removal is the explicit
``invalidation-contracts db remove-table``, which running workers follow in the same epoch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import psycopg
import pytest

from invalidation_contracts.cli import main
from invalidation_contracts.server import Domain, Rule, SQLTable
from invalidation_contracts.server.worker.follower import DEFAULT_MAX_LAG_S
from invalidation_contracts.server.worker.runtime import Runtime, ingest, open_runtime

pytestmark = pytest.mark.postgres

V1 = Domain("shop", {"plans": SQLTable("plans")}, [], [])
V2 = Domain(
    "shop",
    {"plans": SQLTable("plans"), "funding_types": SQLTable("funding_types")},
    [Rule("plans", "funding_types", "requires_funding", via="funding")],
    [],
)


@pytest.fixture
def database(postgres_url: str) -> str:
    with psycopg.connect(postgres_url, autocommit=True) as pg:
        pg.execute("CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT)")
        pg.execute("CREATE TABLE funding_types (id TEXT PRIMARY KEY, label TEXT)")
        pg.execute("INSERT INTO plans VALUES ('basic', 'card')")
        pg.execute("INSERT INTO funding_types VALUES ('card', 'Card')")
    return postgres_url


@pytest.fixture
def workers(database: str) -> Iterator[Callable[[Domain], Runtime]]:
    """Start a worker of a version (its follower running); all stopped at the end."""
    with ExitStack() as stack:

        def start(domain: Domain) -> Runtime:
            runtime = open_runtime(domain, store=database, database=database)
            stack.callback(runtime.close)
            runtime.start()
            return runtime

        yield start


def write(database: str, statement: str) -> None:
    with psycopg.connect(database, autocommit=True) as pg:
        pg.execute(statement)


def eventually(predicate: Callable[[], bool], bound_s: float = DEFAULT_MAX_LAG_S) -> None:
    deadline = time.monotonic() + bound_s
    while not predicate():
        assert time.monotonic() < deadline, "not within the lag bound"
        time.sleep(0.02)


def ready(runtime: Runtime) -> bool:
    follower = runtime.follower
    return follower is not None and follower.health.available


def test_mid_deploy_an_old_worker_serves_on_while_the_new_one_serves_the_new_table(
    database: str, workers: Callable[[Domain], Runtime]
) -> None:
    old = workers(V1)
    epoch = old.registry.state.epoch
    new = workers(V2)  # the deploy: the new version adds funding_types in the same epoch
    assert new.registry.state.epoch == epoch
    write(database, "UPDATE funding_types SET label = 'Debit card' WHERE id = 'card'")
    write(database, "UPDATE plans SET funding = 'wire' WHERE id = 'basic'")
    seq = new.registry.state.seq

    def both_read_the_plan() -> bool:
        plans = [w.registry.state.tables["plans"].plain_rows()["basic"] for w in (old, new)]
        return all(p["funding"] == "wire" for p in plans)

    eventually(both_read_the_plan)
    assert ready(old) and ready(new), "the old worker skips the new table's records"
    funding = new.registry.state.tables["funding_types"].plain_rows()
    assert funding["card"]["label"] == "Debit card"
    assert old.registry.state.epoch == new.registry.state.epoch == epoch
    assert new.registry.state.seq >= seq


def test_an_old_worker_consuming_the_capture_carries_the_new_tables_writes(
    database: str,
) -> None:
    """The capture is shared: whichever worker consumes a write to the new table, the new
    version serves it at once (it was skipped and lost until the next reconciliation)."""
    old = open_runtime(V1, store=database, database=database)
    new = open_runtime(V2, store=database, database=database)
    try:
        write(database, "UPDATE funding_types SET label = 'Debit card' WHERE id = 'card'")
        assert ingest(old.registry, old.sources[0])  # the old worker leads the capture
        assert not ingest(new.registry, new.sources[0])  # nothing left for the new one
        new.registry.sync()
        funding = new.registry.state.tables["funding_types"].plain_rows()
        assert funding["card"]["label"] == "Debit card"
        assert old.registry.state.seq == new.registry.state.seq
    finally:
        new.close()
        old.close()


def test_a_respawned_old_worker_never_removes_the_table_the_new_version_serves(
    database: str, workers: Callable[[Domain], Runtime]
) -> None:
    workers(V1)
    new = workers(V2)
    workers(V1)  # an old worker respawned mid-deploy, or a rollback
    time.sleep(DEFAULT_MAX_LAG_S)
    assert "funding_types" in new.registry.state.tables
    assert ready(new)


def test_deploy_rollback_redeploy_keeps_the_epoch_and_the_readded_tables_rows(
    database: str, workers: Callable[[Domain], Runtime]
) -> None:
    epochs = []
    for domain in (V1, V2, V1, V2):  # each version's worker opens after the last one's
        runtime = workers(domain)
        epochs.append(runtime.registry.state.epoch)
        runtime.close()
    assert len(set(epochs)) == 1, "an agent's fixes survive the whole sequence"
    final = workers(V2)
    assert final.registry.state.tables["funding_types"].plain_rows() == {"card": {"label": "Card"}}


def test_db_remove_table_removes_it_in_the_same_history_and_running_workers_follow(
    database: str, workers: Callable[[Domain], Runtime], capsys: pytest.CaptureFixture[str]
) -> None:
    workers(V2)
    old = workers(V1)  # the deploy that drops funding_types has rolled out
    epoch, seq = old.registry.state.epoch, old.registry.state.seq
    assert "funding_types" in old.registry.state.tables, "opening never removes a table"
    assert main(["db", "remove-table", "funding_types", "--db", database]) == 0
    assert "removed funding_types" in capsys.readouterr().out
    eventually(lambda: "funding_types" not in old.registry.state.tables)
    state = old.registry.state
    assert state.epoch == epoch and state.seq == seq + 1
    assert not state.rules.tables & {"funding_types"}
    assert ready(old)
    reopened = workers(V1)
    assert reopened.registry.state.epoch == epoch
    assert "funding_types" not in reopened.registry.state.tables
    assert main(["db", "remove-table", "funding_types", "--db", database]) != 0  # gone: refused
    assert "no table named 'funding_types'" in capsys.readouterr().err
