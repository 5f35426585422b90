"""Reconciliation catches what the triggers miss: a write around them (a disabled trigger, a
table swapped by drop-and-recreate, SQLite writes with the trigger dropped) becomes, at the next
periodic reconciliation or worker start, an ordinary change set labelled ``reconciled`` with the
exact row diff — in the same epoch, so a client's position (and every fix still valid) survives.
The bypassing writers are plain ``psycopg`` / ``sqlite3``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.server.sqldb import PG_SOURCES, SOURCES, ProviderDB, provider_db

from invalidation_contracts.server import Domain, Rule, SQLTable
from invalidation_contracts.server.capture.survey import Recheck, Survey
from invalidation_contracts.server.worker.runtime import Runtime, ingest, open_runtime

SCHEMA = (
    "CREATE TABLE zones (country TEXT PRIMARY KEY, zone TEXT, surcharge INTEGER)",
    "CREATE TABLE carriers (code TEXT PRIMARY KEY, successor TEXT)",
    "INSERT INTO zones VALUES ('NO', 'nordic', 1500), ('SE', 'nordic', 900), ('DE', 'eu', 0)",
    "INSERT INTO carriers VALUES ('tnt', 'dhl'), ('dhl', NULL)",
)


def shipping() -> Domain:
    return Domain(
        "shipping",
        {"zones": SQLTable("zones"), "carriers": SQLTable("carriers")},
        [Rule("carriers", "carriers", "succeeded_by", via="successor")],
        [],
    )


@pytest.fixture(params=SOURCES)
def pdb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProviderDB]:
    yield from provider_db(request, tmp_path)


@pytest.fixture(params=PG_SOURCES)
def pg(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProviderDB]:
    yield from provider_db(request, tmp_path)


class Worker:
    def __init__(self, pdb: ProviderDB, store: str, interval: float | None) -> None:
        self.source = pdb.source(shipping(), reconcile_interval_s=interval)
        self.runtime: Runtime = open_runtime(shipping(), store=store, database=self.source)

    @property
    def state(self):  # type: ignore[no-untyped-def]
        return self.runtime.registry.state

    def close(self) -> None:
        self.runtime.close()


@pytest.fixture
def worker(pdb: ProviderDB, tmp_path: Path) -> Iterator[Worker]:
    pdb.script(*SCHEMA)
    store = str(tmp_path / "registry.sqlite") if pdb.kind == "sqlite" else pdb.url
    w = Worker(pdb, store, interval=None)
    yield w
    w.close()


def reconcile(worker: Worker) -> bool:
    return ingest(worker.runtime.registry, worker.source, verify=True)


def assert_reconciled(worker: Worker, since: int, epoch: str, rows: list[tuple[str, str]]) -> None:
    """The change is one reconciled change set after ``since`` in the same history."""
    state = worker.state
    assert state.epoch == epoch and state.seq == since + 1
    feed = worker.runtime.registry.changes(since, epoch=epoch)  # no 410: positions survive
    assert sorted((r.key, r.op) for r in feed.rows) == sorted(rows)
    assert [t.reconciled for t in feed.tables] == [True] * len(feed.tables)


@pytest.mark.postgres
def test_a_write_with_the_trigger_disabled_is_reconciled_with_the_exact_row_diff(
    pg: ProviderDB,
) -> None:
    pdb = pg
    pdb.script(*SCHEMA)
    worker = Worker(pdb, pdb.url, interval=None)
    try:
        before = worker.state
        stop, restart = pdb.bypass("zones")
        pdb.script(stop)
        pdb.script("UPDATE zones SET surcharge = 1999 WHERE country = 'NO'")
        pdb.script(restart)
        assert ingest(worker.runtime.registry, worker.source) is False, "the capture missed it"
        assert reconcile(worker) is True
        assert_reconciled(worker, before.seq, before.epoch, [("NO", "changed")])
        assert worker.state.tables["zones"].rows["NO"]["surcharge"] == 1999
        assert worker.state.tables["zones"].rows["SE"] == before.tables["zones"].rows["SE"]
    finally:
        worker.close()


def test_a_write_under_session_replication_role_replica_is_captured(pg: ProviderDB) -> None:
    pdb = pg
    pdb.script(*SCHEMA)
    worker = Worker(pdb, pdb.url, interval=None)
    try:
        before = worker.state
        pdb.script(
            "SET session_replication_role = replica",
            "UPDATE zones SET surcharge = 901 WHERE country = 'SE'",
        )
        assert ingest(worker.runtime.registry, worker.source) is True, "ENABLE ALWAYS triggers"
        feed = worker.runtime.registry.changes(before.seq, epoch=before.epoch)
        assert [(r.key, r.op) for r in feed.rows] == [("SE", "changed")]
    finally:
        worker.close()


def test_a_drop_and_recreate_table_swap_is_reconciled_and_the_capture_reinstalled(
    pg: ProviderDB,
) -> None:
    pdb = pg
    pdb.script(*SCHEMA)
    worker = Worker(pdb, pdb.url, interval=None)
    try:
        before = worker.state
        pdb.script(
            "CREATE TABLE zones_new (LIKE zones INCLUDING ALL)",
            "INSERT INTO zones_new SELECT * FROM zones WHERE country <> 'DE'",
            "INSERT INTO zones_new VALUES ('NL', 'eu', 100)",
            "DROP TABLE zones",
            "ALTER TABLE zones_new RENAME TO zones",
        )
        assert reconcile(worker) is True
        assert_reconciled(worker, before.seq, before.epoch, [("DE", "removed"), ("NL", "added")])
        pdb.script("UPDATE zones SET surcharge = 5 WHERE country = 'NL'")
        assert ingest(worker.runtime.registry, worker.source) is True, "the triggers are back"
        assert worker.state.tables["zones"].rows["NL"]["surcharge"] == 5
    finally:
        worker.close()


def test_sqlite_writes_with_the_trigger_dropped_are_reconciled(tmp_path: Path) -> None:
    pdb = ProviderDB("sqlite", f"sqlite:///{tmp_path / 'p.db'}", str(tmp_path / "p.db"))
    pdb.script(*SCHEMA)
    worker = Worker(pdb, str(tmp_path / "registry.sqlite"), interval=None)
    try:
        before = worker.state
        pdb.script(
            "DROP TRIGGER ic_capture_carriers_update",
            "UPDATE carriers SET successor = 'ups' WHERE code = 'tnt'",
        )
        assert reconcile(worker) is True
        assert_reconciled(worker, before.seq, before.epoch, [("tnt", "changed")])
        transition = worker.runtime.registry.changes(before.seq).tables[0]
        assert transition.affected_downstream == ["carriers:dhl"], "walked on the graph before"
    finally:
        worker.close()


def test_a_sqlite_worker_start_reconciles_a_bypass_without_reading_a_table_under_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SQLite start is a survey too (issue 41): every row compared beside the registry's
    lock, only the differing rows read again, and applied, under it."""
    from invalidation_contracts.server.sql import source as source_module

    pdb = ProviderDB("sqlite", f"sqlite:///{tmp_path / 'p.db'}", str(tmp_path / "p.db"))
    pdb.script(*SCHEMA)
    store = str(tmp_path / "registry.sqlite")
    first = Worker(pdb, store, interval=None)
    before = first.state
    first.close()
    pdb.script(
        "DROP TRIGGER ic_capture_carriers_update",
        "UPDATE carriers SET successor = 'ups' WHERE code = 'tnt'",
    )
    read_in_full: list[object] = []
    real = source_module.read_tables
    monkeypatch.setattr(source_module, "read_tables", lambda *a: read_in_full.append(a) or real(*a))
    second = Worker(pdb, store, interval=None)
    try:
        assert read_in_full == [], "no table was read in full under the registry's lock"
        assert_reconciled(second, before.seq, before.epoch, [("tnt", "changed")])
    finally:
        second.close()


def test_a_running_worker_reconciles_periodically_by_itself(
    pdb: ProviderDB, tmp_path: Path
) -> None:
    pdb.script(*SCHEMA)
    store = str(tmp_path / "registry.sqlite") if pdb.kind == "sqlite" else pdb.url
    worker = Worker(pdb, store, interval=0.2)
    worker.runtime.start()
    try:
        before = worker.state
        drop = (
            "DROP TRIGGER ic_capture_zones_delete"
            if pdb.kind == "sqlite"
            else pdb.bypass("zones")[0]
        )
        pdb.script(drop)
        pdb.script("DELETE FROM zones WHERE country = 'DE'")
        deadline = time.monotonic() + 30
        while worker.state.seq == before.seq and time.monotonic() < deadline:
            time.sleep(0.05)
        assert_reconciled(worker, before.seq, before.epoch, [("DE", "removed")])
    finally:
        worker.close()


def test_a_running_sqlite_worker_surveys_a_capture_gap_by_itself_with_no_interval(
    tmp_path: Path,
) -> None:
    """A gap (records someone deleted) makes a survey due at once, beside the lock, even with no
    periodic reconciliation: the row the gap hid is reconciled by the follower (issue 41)."""
    pdb = ProviderDB("sqlite", f"sqlite:///{tmp_path / 'p.db'}", str(tmp_path / "p.db"))
    pdb.script(*SCHEMA)
    worker = Worker(pdb, str(tmp_path / "registry.sqlite"), interval=None)
    worker.runtime.start()
    try:
        before = worker.state
        pdb.script(
            "UPDATE zones SET surcharge = 1 WHERE country = 'SE'",
            "UPDATE zones SET surcharge = 2 WHERE country = 'NO'",
            "DELETE FROM ic_capture WHERE key LIKE '%SE%'",  # lost: a gap before NO's record
        )
        deadline = time.monotonic() + 10
        while worker.state.tables["zones"].rows["SE"]["surcharge"] != 1:
            assert time.monotonic() < deadline, "the gap's rows were never surveyed"
            time.sleep(0.05)
        feed = worker.runtime.registry.changes(before.seq, epoch=before.epoch)
        assert [t.reconciled for t in feed.tables] == [None, True], "NO captured, SE surveyed"
        assert [(r.key, r.op) for r in feed.rows] == [("NO", "changed"), ("SE", "changed")]
    finally:
        worker.close()


def test_an_unchanged_table_is_reconciled_without_a_change(worker: Worker) -> None:
    before = worker.state
    assert reconcile(worker) is False
    assert reconcile(worker) is False, "a second pass (digests verified) finds nothing either"
    assert worker.state is before or worker.state.seq == before.seq


def test_a_verified_digest_spares_reading_a_table_and_a_bypass_still_shows(pg: ProviderDB) -> None:
    pdb = pg
    pdb.script(*SCHEMA)
    worker = Worker(pdb, pdb.url, interval=None)
    try:
        reconcile(worker)  # digests verified at the registry's versions
        marks = {n: f"{worker.state.epoch}/{t.version}" for n, t in worker.state.tables.items()}
        batch = worker.source.read(worker.runtime.registry.position("sql"), full=True, marks=marks)
        assert batch.skipped == {"zones", "carriers"}
        pdb.script(pdb.bypass("carriers")[0])
        pdb.script("UPDATE carriers SET successor = 'ups' WHERE code = 'dhl'")
        batch = worker.source.read(worker.runtime.registry.position("sql"), full=True, marks=marks)
        assert batch.skipped == {"zones"}, "the bypassed table's digest moved: its rows are read"
    finally:
        worker.close()


# -- the survey: a reconciliation outside the registry's lock (issue 41) ------------------------


@pytest.fixture(params=PG_SOURCES)
def triggers(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Worker]:
    """A worker over a surveyed source (PostgreSQL's triggers or logical decoding)."""
    for pdb in provider_db(request, tmp_path):
        pdb.script(*SCHEMA)
        w = Worker(pdb, pdb.url, interval=None)
        w.pdb = pdb  # type: ignore[attr-defined]
        yield w
        w.close()


def survey(worker: Worker) -> Survey:
    state = worker.state
    marks = {name: f"{state.epoch}/{t.version}" for name, t in state.tables.items()}
    return worker.source.survey(state.tables, marks)  # type: ignore[attr-defined]


def test_a_survey_finds_a_bypassed_row_and_the_recheck_reconciles_exactly_that_row(
    triggers: Worker,
) -> None:
    worker, pdb = triggers, triggers.pdb  # type: ignore[attr-defined]
    before = worker.state
    stop, restart = pdb.bypass("zones")
    pdb.script(stop, "UPDATE zones SET surcharge = 1999 WHERE country = 'NO'", restart)
    pdb.script(stop, "DELETE FROM zones WHERE country = 'DE'", restart)
    found = survey(worker)
    assert found.candidates == {"zones": frozenset({"NO", "DE"})}
    assert found.read == 2, "carriers' digest was verified at open: only zones is read"
    assert worker.state is before, "a survey changes nothing"
    recheck = Recheck(found.candidates)
    assert ingest(worker.runtime.registry, worker.source, recheck=recheck) is True
    assert recheck.done
    assert_reconciled(worker, before.seq, before.epoch, [("NO", "changed"), ("DE", "removed")])


def test_a_candidate_a_captured_write_explains_is_not_reconciled(triggers: Worker) -> None:
    worker, pdb = triggers, triggers.pdb  # type: ignore[attr-defined]
    before = worker.state
    pdb.script("UPDATE zones SET surcharge = 1234 WHERE country = 'SE'")  # captured, not consumed
    found = survey(worker)
    assert found.candidates == {"zones": frozenset({"SE"})}
    assert ingest(worker.runtime.registry, worker.source, recheck=Recheck(found.candidates))
    feed = worker.runtime.registry.changes(before.seq, epoch=before.epoch)
    assert [(r.key, r.op) for r in feed.rows] == [("SE", "changed")]
    assert not any(t.reconciled for t in feed.tables), "the capture's change, not a repair"


def test_a_table_a_survey_finds_equal_is_verified_and_not_read_again(triggers: Worker) -> None:
    worker, pdb = triggers, triggers.pdb  # type: ignore[attr-defined]
    assert survey(worker).read == 0, "both digests verified at open"
    stop, restart = pdb.bypass("carriers")
    pdb.script(stop, "UPDATE carriers SET successor = 'ups' WHERE code = 'dhl'", restart)
    found = survey(worker)
    assert (found.read, found.candidates) == (2, {"carriers": frozenset({"dhl"})})
    assert ingest(worker.runtime.registry, worker.source, recheck=Recheck(found.candidates))
    again = survey(worker)  # the repaired table, read once more, is found equal: verified
    assert (again.read, again.candidates, set(again.verified)) == (2, {}, {"carriers"})
    worker.source.mark_verified(again.verified)
    assert survey(worker).read == 0


def test_a_recheck_waits_out_no_migration_lock_it_is_postponed(triggers: Worker) -> None:
    import psycopg

    worker, pdb = triggers, triggers.pdb  # type: ignore[attr-defined]
    stop, restart = pdb.bypass("zones")
    pdb.script(stop, "UPDATE zones SET surcharge = 7 WHERE country = 'NO'", restart)
    recheck = Recheck(survey(worker).candidates)
    with psycopg.connect(pdb.url) as migration:
        migration.execute("LOCK TABLE zones IN ACCESS EXCLUSIVE MODE")
        pdb.script("UPDATE carriers SET successor = 'ups' WHERE code = 'dhl'")  # another table
        started = time.monotonic()
        assert ingest(worker.runtime.registry, worker.source, recheck=recheck) is True
        assert time.monotonic() - started < 5.0
        assert not recheck.done, "postponed: the migration holds the table"
        assert worker.state.tables["carriers"].rows["dhl"]["successor"] == "ups"
    assert ingest(worker.runtime.registry, worker.source, recheck=recheck) is True
    assert recheck.done and worker.state.tables["zones"].rows["NO"]["surcharge"] == 7


def test_a_worker_start_reconciles_a_bypass_beside_the_other_workers_not_under_the_lock(
    triggers: Worker,
) -> None:
    """A start reads the tables outside the registry's lock: another worker commits meanwhile,
    and only the bypassed row becomes a reconciled change set (issue 41)."""
    import threading

    first, pdb = triggers, triggers.pdb  # type: ignore[attr-defined]
    before = first.state
    stop, restart = pdb.bypass("zones")
    pdb.script(stop, "UPDATE zones SET surcharge = 1999 WHERE country = 'NO'", restart)
    source = pdb.source(shipping(), reconcile_interval_s=None)
    surveyed: list[Survey] = []
    committed_s: list[float] = []
    real = source.survey  # type: ignore[attr-defined]

    def survey_while_another_worker_commits(tables, marks):  # type: ignore[no-untyped-def]
        pdb.script("UPDATE carriers SET successor = 'ups' WHERE code = 'dhl'")  # captured
        started = time.monotonic()
        other = threading.Thread(target=ingest, args=(first.runtime.registry, first.source))
        other.start()
        other.join(10)
        committed_s.append(time.monotonic() - started)
        surveyed.append(real(tables, marks))
        return surveyed[-1]

    source.survey = survey_while_another_worker_commits  # type: ignore[attr-defined]
    second = open_runtime(shipping(), store=pdb.url, database=source)
    try:
        assert surveyed, "the start surveyed the tables"
        assert committed_s[0] < 5.0, "the other worker committed while the start read"
        assert first.state.tables["carriers"].rows["dhl"]["successor"] == "ups"
        state = second.registry.state
        assert state.tables["zones"].rows["NO"]["surcharge"] == 1999
        feed = second.registry.changes(before.seq, epoch=before.epoch)
        assert sorted((r.table, r.key) for r in feed.rows) == [("carriers", "dhl"), ("zones", "NO")]
        assert [t.reconciled for t in feed.tables if t.table == "zones"] == [True]
        assert [t.reconciled for t in feed.tables if t.table == "carriers"] == [None]
    finally:
        second.close()


def test_a_second_worker_start_reads_no_row_of_an_unchanged_database(triggers: Worker) -> None:
    """The first start's load marks its digests verified: a later start reads no table."""
    pdb = triggers.pdb  # type: ignore[attr-defined]
    source = pdb.source(shipping(), reconcile_interval_s=None)
    surveyed: list[Survey] = []
    real = source.survey  # type: ignore[attr-defined]
    source.survey = lambda t, m: surveyed.append(real(t, m)) or surveyed[-1]  # type: ignore[attr-defined]
    second = open_runtime(shipping(), store=pdb.url, database=source)
    try:
        assert [s.read for s in surveyed] == [0]
    finally:
        second.close()


def test_a_stored_registry_opens_while_another_worker_holds_the_writers_lock(
    triggers: Worker,
) -> None:
    """Opening a stored registry needs no write: it does not wait for the writers' lock."""
    import threading

    from invalidation_contracts.server.store import open_store

    first, pdb = triggers, triggers.pdb  # type: ignore[attr-defined]
    assert first.runtime.store is not None
    opened: list[int] = []
    with open_store(pdb.url) as store:

        def open_registry() -> None:
            opened.append(store.open_registry(shipping(), load_sql=lambda: ({}, {})).state.seq)

        with first.runtime.store.writing():  # another worker mid-commit, the lock held
            other = threading.Thread(target=open_registry, daemon=True)
            other.start()
            other.join(5.0)
            assert opened == [first.state.seq], "the open waited for the writers' lock"
