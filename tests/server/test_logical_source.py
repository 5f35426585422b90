"""PostgreSQL logical decoding as the change source: nothing on the writer's path, a slot that
advances only after the registry commit, a lost slot reconciled, a restart and a killed worker
survived, a value the contract cannot carry quarantined (the writer cannot be refused)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from tests.server.sqldb import ProviderDB
from tests.support.postgres import PostgresCluster, PostgresUnavailable

from invalidation_contracts.server import Domain, SQLTable
from invalidation_contracts.server.capture import SourceError
from invalidation_contracts.server.sql.logical import LogicalSource
from invalidation_contracts.server.worker.runtime import Runtime, ingest, open_runtime

pytestmark = [pytest.mark.postgres]

SCHEMA = (
    "CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT, n BIGINT)",
    "INSERT INTO plans VALUES ('basic', 'card', 1), ('pro', 'invoice', 2)",
)


def plans() -> Domain:
    return Domain("logical_plans", {"plans": SQLTable("plans")}, [], [])


@pytest.fixture
def pdb(postgres_url: str) -> ProviderDB:
    db = ProviderDB("postgres", postgres_url, postgres_url, logical=True)
    db.script(*SCHEMA)
    return db


@pytest.fixture
def worker(pdb: ProviderDB) -> Iterator[Runtime]:
    runtime = open_runtime(plans(), store=pdb.url, database=pdb.source(plans()))
    yield runtime
    runtime.close()


def source(runtime: Runtime) -> LogicalSource:
    found = runtime.sources[0]
    assert isinstance(found, LogicalSource)
    return found


def confirmed(pdb: ProviderDB, slot: str) -> int:
    rows = pdb.query(
        "SELECT (confirmed_flush_lsn - '0/0')::bigint FROM pg_replication_slots"
        " WHERE slot_name = ?",
        [slot],
    )
    return int(rows[0][0])


def funding(runtime: Runtime, key: str) -> object:
    return runtime.registry.state.tables["plans"].rows[key]["funding"]


def test_a_writer_meets_no_trigger_on_a_declared_table(pdb: ProviderDB, worker: Runtime) -> None:
    assert pdb.query("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'plans'::regclass") == [(0,)]
    pdb.script("UPDATE plans SET funding = 'wire' WHERE id = 'basic'")
    assert ingest(worker.registry, worker.sources[0]) is True
    assert funding(worker, "basic") == "wire"


def test_opening_over_a_trigger_capture_drops_its_triggers(pdb: ProviderDB) -> None:
    first = open_runtime(plans(), store=pdb.url, database=pdb.url)  # triggers installed
    first.close()
    assert pdb.query("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'plans'::regclass") != [(0,)]
    second = open_runtime(plans(), store=pdb.url, database=pdb.source(plans()))
    second.close()
    assert pdb.query("SELECT count(*) FROM pg_trigger WHERE tgrelid = 'plans'::regclass") == [(0,)]


def test_a_read_the_registry_did_not_commit_leaves_the_slot_where_it_was(
    pdb: ProviderDB, worker: Runtime
) -> None:
    logical = source(worker)
    before = confirmed(pdb, logical.slot)
    pdb.script("UPDATE plans SET funding = 'wire' WHERE id = 'basic'")
    batch = logical.read(worker.registry.position(logical.name))  # then the worker dies
    assert [r.key for r in batch.records] == ['["basic"]']
    assert confirmed(pdb, logical.slot) == before, "peeked, not consumed"
    again = open_runtime(plans(), store=pdb.url, database=pdb.source(plans()))
    try:
        ingest(again.registry, again.sources[0])  # (a worker's open may consume it already)
        assert funding(again, "basic") == "wire", "the change was still there"
        assert confirmed(pdb, logical.slot) > before, "advanced once the registry committed"
    finally:
        again.close()


def test_a_lost_slot_is_reconciled_by_a_survey_in_the_same_epoch_not_skipped(
    pdb: ProviderDB, worker: Runtime, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The rows no slot decoded are found by a survey outside the registry's lock (issue 41),
    which trusts no verified digest; the lock's read is only the new slot's changes."""
    from invalidation_contracts.server.capture.survey import Recheck
    from invalidation_contracts.server.sql import logical

    read_in_full: list[object] = []
    real_read_all = logical.read_all
    monkeypatch.setattr(logical, "read_all", lambda *a: read_in_full.append(a) or real_read_all(*a))
    old = worker.registry.state
    logical_source = source(worker)
    pdb.query(f"SELECT pg_drop_replication_slot('{logical_source.slot}')")
    pdb.script("UPDATE plans SET funding = 'lost' WHERE id = 'pro'")  # no slot saw it
    ingest(worker.registry, logical_source)
    assert read_in_full == [], "no table was read under the registry's lock"
    assert logical_source.reconcile_due(), "a survey is due at once"
    marks = {"plans": f"{old.epoch}/{old.tables['plans'].version}"}
    found = logical_source.survey(worker.registry.state.tables, marks)
    assert found.candidates == {"plans": frozenset({"pro"})}
    assert ingest(worker.registry, logical_source, recheck=Recheck(found.candidates)) is True
    state = worker.registry.state
    assert (state.epoch, state.seq) == (old.epoch, old.seq + 1)
    feed = worker.registry.changes(old.seq, epoch=old.epoch)
    assert [(r.key, r.op) for r in feed.rows] == [("pro", "changed")]
    assert [t.reconciled for t in feed.tables] == [True]
    pdb.script("UPDATE plans SET funding = 'next' WHERE id = 'pro'")
    assert ingest(worker.registry, worker.sources[0]) is True, "the new slot captures"
    assert worker.registry.changes(state.seq).tables[0].reconciled is None


def test_a_value_the_contract_cannot_carry_is_quarantined_and_the_rest_served(
    pdb: ProviderDB, worker: Runtime
) -> None:
    pdb.script("UPDATE plans SET n = 9007199254740993 WHERE id = 'basic'")  # not refused
    pdb.script("UPDATE plans SET funding = 'wire' WHERE id = 'pro'")
    ingest(worker.registry, worker.sources[0])
    assert funding(worker, "pro") == "wire"
    assert worker.registry.state.tables["plans"].rows["basic"]["n"] == 1, "its last carried image"
    assert [(q.table, q.key) for q in worker.quarantined()] == [("plans", "basic")]
    pdb.script("UPDATE plans SET n = 3 WHERE id = 'basic'")
    ingest(worker.registry, worker.sources[0])
    assert worker.quarantined() == [], "a carriable write clears it"


def test_a_column_added_to_a_declared_table_is_carried(pdb: ProviderDB, worker: Runtime) -> None:
    pdb.script("ALTER TABLE plans ADD COLUMN note TEXT", "UPDATE plans SET note = 'x'")
    pdb.script("UPDATE plans SET funding = 'wire' WHERE id = 'basic'")
    assert ingest(worker.registry, worker.sources[0]) is True
    assert funding(worker, "basic") == "wire"


@contextmanager
def commits_held(cluster: PostgresCluster) -> Iterator[None]:
    """Synchronous replication to a standby that never connects, for sessions that ask for it
    (``synchronous_commit = on``; every other session's default is ``local``): such a commit is
    flushed, so decoded, and stays invisible until its wait is cancelled."""
    admin = ProviderDB("postgres", cluster.url, cluster.url)
    admin.query("ALTER SYSTEM SET synchronous_commit = 'local'")
    admin.query("ALTER SYSTEM SET synchronous_standby_names = 'ic_no_standby'")
    admin.query("SELECT pg_reload_conf()")
    try:
        yield
    finally:  # no standby named: every waiting commit is released
        admin.query("ALTER SYSTEM RESET synchronous_standby_names")
        admin.query("ALTER SYSTEM RESET synchronous_commit")
        admin.query("SELECT pg_reload_conf()")


def held_write(url: str, statement: str) -> tuple[int, threading.Thread]:
    """Commit ``statement`` in a thread whose COMMIT waits for the standby (bounded: retried
    until the server applies the reloaded setting); the backend's pid and the thread."""
    import psycopg

    for _ in range(50):
        db = psycopg.connect(url, autocommit=True)
        db.execute("SET synchronous_commit = on")
        row = db.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        thread = threading.Thread(target=lambda d=db: (d.execute(statement), d.close()))
        thread.start()
        deadline = time.monotonic() + 2
        while thread.is_alive() and time.monotonic() < deadline:
            waits = ProviderDB("postgres", url, url).query(
                "SELECT count(*) FROM pg_stat_activity WHERE pid = ? AND wait_event = 'SyncRep'",
                [row[0]],
            )
            if waits == [(1,)]:
                return int(row[0]), thread
            time.sleep(0.02)
        thread.join(30)
    raise AssertionError("no commit waited for the standby")


def test_a_commit_flushed_before_it_is_visible_is_consumed_once_visible_never_skipped(
    pdb: ProviderDB, worker: Runtime, postgres_cluster: PostgresCluster
) -> None:
    # The newest transaction, flushed and not yet visible, is at the snapshot's xmax: a read
    # that took it for visible stepped past it (its row read as before), and the change was
    # lost until a reconciliation (issue 40: the unverified stamp after the leader's SIGKILL).
    with commits_held(postgres_cluster):
        pid, writer = held_write(pdb.url, "UPDATE plans SET funding = 'held' WHERE id = 'basic'")
        release = threading.Timer(0.5, pdb.query, ["SELECT pg_cancel_backend(?)", [pid]])
        release.start()
        try:
            ingest(worker.registry, worker.sources[0])  # waits for it to become visible
        finally:
            release.join(30)
            writer.join(30)
    assert funding(worker, "basic") == "held"
    feed = worker.registry.changes(0)
    assert all(t.reconciled is None for t in feed.tables), "captured, not reconciled"


def test_a_server_without_wal_level_logical_is_refused_at_open_naming_it() -> None:
    try:
        cluster = PostgresCluster.start()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    try:
        if not cluster.restartable:
            pytest.skip("an external server cannot be reconfigured from here")
        url = cluster.database()
        ProviderDB("postgres", url, url).script(*SCHEMA)
        ProviderDB("postgres", cluster.url, cluster.url).query(
            "ALTER SYSTEM SET wal_level = replica"
        )
        cluster.halt()
        cluster.resume()
        with pytest.raises(SourceError, match="wal_level is 'replica'.*wal_level = logical"):
            LogicalSource(url, plans().sql_tables).open()
    finally:
        cluster.stop()


def test_changes_committed_across_a_postgresql_restart_are_consumed_once(
    tmp_path: Path,
) -> None:
    try:
        cluster = PostgresCluster.start()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    try:
        if not cluster.restartable:
            pytest.skip("an external server cannot be restarted from here")
        url = cluster.database()
        pdb = ProviderDB("postgres", url, url, logical=True)
        pdb.script(*SCHEMA)
        runtime = open_runtime(plans(), store=url, database=pdb.source(plans()))
        try:
            pdb.script("UPDATE plans SET funding = 'before' WHERE id = 'basic'")
            cluster.halt()
            cluster.resume()
            pdb.script("UPDATE plans SET funding = 'after' WHERE id = 'pro'")
            deadline = time.monotonic() + 30
            while True:  # the pooled connections were cut: the first reads may fail
                try:
                    ingest(runtime.registry, runtime.sources[0])
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
            assert (funding(runtime, "basic"), funding(runtime, "pro")) == ("before", "after")
            assert runtime.registry.state.seq == 2, "two change sets, each once"
        finally:
            runtime.close()
    finally:
        cluster.stop()


CONSUMER = """
import sys, time
from invalidation_contracts.server import Domain, SQLTable
from invalidation_contracts.server.sql.logical import LogicalSource
from invalidation_contracts.server.worker.runtime import ingest, open_runtime
url = sys.argv[1]
domain = Domain("logical_plans", {"plans": SQLTable("plans")}, [], [])
runtime = open_runtime(domain, store=url, database=LogicalSource(url, domain.sql_tables))
print("ready", flush=True)
while True:
    ingest(runtime.registry, runtime.sources[0])
"""


def test_a_consumer_killed_with_sigkill_under_writes_loses_no_change(pdb: ProviderDB) -> None:
    script = textwrap.dedent(CONSUMER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(
        [sys.executable, "-c", script, pdb.url], stdout=subprocess.PIPE, env=env
    )
    try:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == b"ready"
        for n in range(40):
            pdb.script(f"UPDATE plans SET n = {n} WHERE id = 'basic'")
            if n == 20:
                os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        pdb.script("UPDATE plans SET funding = 'last' WHERE id = 'pro'")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=30)
    survivor = open_runtime(plans(), store=pdb.url, database=pdb.source(plans()))
    try:
        ingest(survivor.registry, survivor.sources[0])
        rows = survivor.registry.state.tables["plans"].plain_rows()
        assert (rows["basic"]["n"], rows["pro"]["funding"]) == (39, "last")
        feed = survivor.registry.changes(0)
        assert all(t.reconciled is None for t in feed.tables), "captured, nothing reconciled"
    finally:
        survivor.close()


def test_a_slot_that_waits_for_a_transaction_elsewhere_names_it_and_is_made_once_it_ends(
    postgres_cluster: PostgresCluster, postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    import psycopg

    from invalidation_contracts.server.sql.engine import make_engine
    from invalidation_contracts.server.sql.slot import ReplicationSlot

    elsewhere = postgres_cluster.database()
    slot = ReplicationSlot(make_engine(postgres_url), f"ic_wait_{os.getpid()}")
    made: list[bool] = []
    with psycopg.connect(elsewhere) as held:
        pid = held.execute("SELECT pg_backend_pid(), pg_current_xact_id()").fetchone()[0]
        creating = threading.Thread(target=lambda: made.append(slot.ensure(report_every_s=0.3)))
        creating.start()
        deadline = time.monotonic() + 30
        while f"pid {pid} in database" not in caplog.text:
            assert time.monotonic() < deadline, "the wait was never reported"
            assert creating.is_alive(), "the slot was made while a transaction it waits for ran"
            time.sleep(0.05)
        held.rollback()  # the transaction ends: the creation goes through
        creating.join(30)
    assert made == [True]
    assert "idle in transaction" in caplog.text
    try:
        assert not slot.ensure()  # it exists (made once, nothing left of the cancelled tries)
    finally:
        slot.drop()
        postgres_cluster.drop(elsewhere)
