"""Drift captured at the source: every committed write to a declared table, by any writer, becomes
what an admin reload is (version bump, exact row diff, feed entries, downstream walk)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.server.sqldb import BACKENDS, SOURCES, ProviderDB, provider_db

from invalidation_contracts.protocol.problems import ProblemType, ProtocolError
from invalidation_contracts.server import Domain, Rule, SQLTable
from invalidation_contracts.server.capture.survey import Recheck
from invalidation_contracts.server.worker.runtime import Runtime, ingest, open_runtime

SCHEMA = (
    "CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT, promo TEXT)",
    "CREATE TABLE funding_types (id TEXT PRIMARY KEY, label TEXT)",
    "INSERT INTO plans VALUES ('basic', 'card', NULL), ('enterprise', 'invoice', 'ENT10')",
    "INSERT INTO funding_types VALUES ('card', 'Card'), ('invoice', 'Invoice'), ('wire', 'Wire')",
)


def shop() -> Domain:
    return Domain(
        "sql_shop",
        {"plans": SQLTable("plans"), "funding_types": SQLTable("funding_types", version="2.0.0")},
        [Rule("plans", "funding_types", "requires_funding", via="funding")],
        [],
    )


#: The trigger capture's own behaviours (the writer's path, its records and their trim): the
#: logical decoding source has none of these; test_logical_source covers its counterparts.
TRIGGERS_ONLY = pytest.mark.parametrize("pdb", BACKENDS, indirect=True)


@pytest.fixture(params=SOURCES)
def pdb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProviderDB]:
    yield from provider_db(request, tmp_path)


class World:
    """The provider's database, the registry store, and one worker's run-time over both."""

    def __init__(self, pdb: ProviderDB, store: str) -> None:
        self.pdb = pdb
        self.store = store
        self.runtime: Runtime | None = None

    def open(self) -> Runtime:
        self.close()
        self.runtime = open_runtime(shop(), store=self.store, database=self.pdb.source(shop()))
        return self.runtime

    def ingest(self) -> bool:
        assert self.runtime is not None
        return ingest(self.runtime.registry, self.runtime.sources[0])

    def close(self) -> None:
        if self.runtime is not None:
            self.runtime.close()
            self.runtime = None


@pytest.fixture
def world(pdb: ProviderDB, tmp_path: Path) -> Iterator[World]:
    pdb.script(*SCHEMA)
    store = str(tmp_path / "registry.sqlite") if pdb.kind == "sqlite" else pdb.url
    w = World(pdb, store)
    w.open()
    yield w
    w.close()


def registry(world: World) -> Any:
    assert world.runtime is not None
    return world.runtime.registry


def test_the_tables_load_from_the_database_at_their_declared_versions(world: World) -> None:
    state = registry(world).state
    assert state.versions() == {"funding_types": "2.0.0", "plans": "1.0.0"}
    assert state.tables["plans"].plain_rows()["enterprise"] == {
        "funding": "invoice",
        "promo": "ENT10",
    }


def test_an_update_by_another_writer_is_a_version_bump_a_row_diff_and_a_feed_entry(
    world: World,
) -> None:
    world.pdb.script("UPDATE plans SET funding = 'wire' WHERE id = 'enterprise'")
    assert world.ingest() is True
    reg = registry(world)
    assert reg.state.versions()["plans"] == "1.1.0"
    assert reg.state.tables["plans"].rows["enterprise"]["funding"] == "wire"
    feed = reg.changes(0)
    assert [(r.table, r.key, r.op, r.old_version, r.new_version) for r in feed.rows] == [
        ("plans", "enterprise", "changed", "1.0.0", "1.1.0")
    ]
    [transition] = feed.tables
    assert transition.seq == feed.last_seq == 1
    assert transition.affected_downstream == ["funding_types:invoice"], "the graph before"


def test_inserts_and_deletes_are_added_and_removed_rows(world: World) -> None:
    world.pdb.script("INSERT INTO plans VALUES ('gold', 'wire', NULL)")
    world.ingest()
    world.pdb.script("DELETE FROM plans WHERE id = 'basic'")
    world.ingest()
    feed = registry(world).changes(0)
    assert [(r.seq, r.key, r.op) for r in feed.rows] == [
        (1, "gold", "added"),
        (2, "basic", "removed"),
    ]
    assert set(registry(world).state.tables["plans"].rows) == {"enterprise", "gold"}


def test_a_transaction_over_several_tables_is_one_change_set(world: World) -> None:
    world.pdb.script(
        "UPDATE plans SET funding = 'wire' WHERE id = 'basic'",
        "UPDATE funding_types SET label = 'Bank card' WHERE id = 'card'",
        "INSERT INTO funding_types VALUES ('crypto', 'Crypto')",
    )
    world.ingest()
    feed = registry(world).changes(0)
    assert feed.last_seq == 1
    assert {(t.seq, t.table) for t in feed.tables} == {(1, "plans"), (1, "funding_types")}
    assert sorted((r.table, r.key, r.op) for r in feed.rows) == [
        ("funding_types", "card", "changed"),
        ("funding_types", "crypto", "added"),
        ("plans", "basic", "changed"),
    ]
    plans = next(t for t in feed.tables if t.table == "plans")
    assert plans.affected_downstream == ["funding_types:card"], "walked before the change set"


def test_a_rolled_back_transaction_leaves_nothing_to_capture(world: World) -> None:
    import contextlib

    with contextlib.suppress(Exception):
        world.pdb.script(
            "UPDATE plans SET funding = 'wire' WHERE id = 'basic'",
            "INSERT INTO plans VALUES ('basic', 'duplicate', NULL)",  # fails: all rolls back
        )
    assert world.ingest() is False
    assert registry(world).state.seq == 0


def test_an_update_that_changes_no_declared_value_moves_nothing(world: World) -> None:
    world.pdb.script("UPDATE plans SET funding = funding")
    world.ingest()
    assert registry(world).state.seq == 0


def test_changing_a_key_is_a_removal_and_an_addition(world: World) -> None:
    world.pdb.script("UPDATE plans SET id = 'starter' WHERE id = 'basic'")
    world.ingest()
    rows = registry(world).changes(0).rows
    assert sorted((r.key, r.op) for r in rows) == [("basic", "removed"), ("starter", "added")]


@pytest.mark.postgres
def test_truncate_removes_every_row(postgres_url: str, tmp_path: Path) -> None:
    pdb = ProviderDB("postgres", postgres_url, postgres_url)
    pdb.script(*SCHEMA)
    w = World(pdb, postgres_url)
    w.open()
    try:
        pdb.script("TRUNCATE plans", "INSERT INTO plans VALUES ('solo', 'card', NULL)")
        w.ingest()
        assert registry(w).state.tables["plans"].plain_rows() == {
            "solo": {"funding": "card", "promo": None}
        }
        [transition] = registry(w).changes(0).tables
        assert transition.seq == 1
    finally:
        w.close()


@TRIGGERS_ONLY
def test_a_write_the_capture_cannot_record_fails_the_writers_transaction(world: World) -> None:
    # triggers only: logical decoding puts nothing on the writer's path
    if world.pdb.kind == "sqlite":
        world.pdb.script("DROP TABLE ic_capture")
    else:
        world.pdb.script("DROP SEQUENCE invalidation_contracts.capture_seq")
    with pytest.raises(Exception, match="capture"):
        world.pdb.script("UPDATE plans SET funding = 'wire' WHERE id = 'basic'")
    assert world.pdb.query("SELECT funding FROM plans WHERE id = 'basic'") == [("card",)]


@TRIGGERS_ONLY
def test_a_gap_in_the_capture_is_reconciled_with_the_tables_in_the_same_epoch(
    world: World,
) -> None:
    # triggers only: a lost slot: test_logical_source
    world.pdb.script("UPDATE plans SET funding = 'wire' WHERE id = 'basic'")
    world.ingest()
    old = registry(world).state
    world.pdb.script("UPDATE plans SET funding = 'card' WHERE id = 'enterprise'")
    world.pdb.script(f"DELETE FROM {world.pdb.capture}")  # someone lost a record
    world.ingest()  # SQLite: the ids show the gap at once
    assert world.runtime is not None
    source = world.runtime.sources[0]
    if world.pdb.kind == "postgres":  # sequence ids show no gap: the reconciliation finds it
        ingest(world.runtime.registry, source, verify=True)
    else:  # a survey beside the lock is due at once (issue 41); its recheck reconciles
        assert registry(world).state.seq == old.seq, "no table read under the lock"
        assert source.reconcile_due()  # type: ignore[attr-defined]
        state = registry(world).state
        marks = {name: f"{state.epoch}/{t.version}" for name, t in state.tables.items()}
        found = source.survey(state.tables, marks)  # type: ignore[attr-defined]
        ingest(world.runtime.registry, source, recheck=Recheck(found.candidates))
    state = registry(world).state
    assert (state.epoch, state.seq) == (old.epoch, old.seq + 1), "no new history"
    assert state.tables["plans"].rows["enterprise"]["funding"] == "card", "the database wins"
    feed = registry(world).changes(old.seq, epoch=old.epoch)
    assert [(r.key, r.op) for r in feed.rows] == [("enterprise", "changed")]
    assert [t.reconciled for t in feed.tables] == [True]


def test_writes_made_while_no_worker_ran_are_consumed_when_one_opens(world: World) -> None:
    epoch = registry(world).state.epoch
    world.close()
    world.pdb.script("UPDATE plans SET promo = 'BASIC5' WHERE id = 'basic'")
    world.open()
    state = registry(world).state
    assert (state.epoch, state.seq) == (epoch, 1)
    assert state.tables["plans"].rows["basic"]["promo"] == "BASIC5"


@TRIGGERS_ONLY
def test_a_write_nothing_captured_is_a_reconciled_change_when_a_worker_opens(
    world: World,
) -> None:
    # triggers only: a table out of the publication: test_reconcile
    epoch = registry(world).state.epoch
    world.close()
    if world.pdb.kind == "sqlite":
        world.pdb.script("DROP TRIGGER ic_capture_plans_update")
    else:
        world.pdb.script("DROP TRIGGER ic_capture ON plans")
    world.pdb.script("UPDATE plans SET promo = 'SNEAKY' WHERE id = 'basic'")
    world.open()
    state = registry(world).state
    assert (state.epoch, state.seq) == (epoch, 1), "the same history, one change set"
    assert state.tables["plans"].rows["basic"]["promo"] == "SNEAKY"
    feed = registry(world).changes(0, epoch=epoch)
    assert [(r.key, r.op) for r in feed.rows] == [("basic", "changed")]
    assert feed.tables[0].reconciled is True
    world.pdb.script("UPDATE plans SET promo = 'AGAIN' WHERE id = 'basic'")
    assert world.ingest() is True, "the triggers are installed again"
    assert registry(world).changes(1).tables[0].reconciled is None, "captured, not reconciled"


@TRIGGERS_ONLY
def test_consumed_capture_records_are_trimmed(world: World) -> None:
    # triggers only: the slot's advance: test_logical_source
    world.pdb.script("UPDATE plans SET funding = 'wire' WHERE id = 'basic'")
    world.ingest()
    assert world.pdb.query(f"SELECT count(*) FROM {world.pdb.capture}") == [(0,)]


def test_two_workers_consume_each_change_once(world: World) -> None:
    first = world.runtime
    assert first is not None
    second = open_runtime(shop(), store=world.store, database=world.pdb.source(shop()))
    try:
        world.pdb.script("UPDATE plans SET funding = 'wire' WHERE id = 'basic'")
        ingest(second.registry, second.sources[0])
        assert ingest(first.registry, first.sources[0]) is False
        first.registry.sync()
        assert first.registry.state.seq == second.registry.state.seq == 1
        assert first.registry.changes(0) == second.registry.changes(0)
    finally:
        second.close()


def test_an_admin_reload_of_a_sql_table_writes_the_database_and_answers_the_diff(
    world: World,
) -> None:
    assert world.runtime is not None
    result = world.runtime.reload(
        "plans",
        {
            "basic": {"funding": "wire", "promo": None},
            "enterprise": {"funding": "invoice", "promo": "ENT10"},
            "gold": {"funding": "card", "promo": None},
        },
    )
    assert (result.old_version, result.new_version, result.contract_seq) == ("1.0.0", "1.1.0", 1)
    assert (result.diff.added, result.diff.changed, result.diff.removed) == (
        ["gold"],
        ["basic"],
        [],
    )
    assert result.affected_downstream == ["funding_types:card"]
    assert sorted(world.pdb.query("SELECT id, funding FROM plans")) == [
        ("basic", "wire"),
        ("enterprise", "invoice"),
        ("gold", "card"),
    ]
    assert registry(world).changes(0).last_seq == 1


def test_an_admin_touch_of_a_sql_table_moves_only_the_version(world: World) -> None:
    assert world.runtime is not None
    result = world.runtime.patch("funding_types", {}, [], version="2.1.0")
    assert result.touch and result.new_version == "2.1.0"
    assert registry(world).state.versions()["funding_types"] == "2.1.0"


def test_an_admin_row_with_an_undeclared_column_is_refused_and_nothing_written(
    world: World,
) -> None:
    assert world.runtime is not None
    with pytest.raises(ProtocolError) as caught:
        world.runtime.patch("plans", {"basic": {"funding": "card", "colour": "red"}}, [])
    assert caught.value.kind is ProblemType.INVALID_REQUEST and "colour" in caught.value.detail
    assert registry(world).state.seq == 0


def test_an_in_memory_registry_follows_the_database_too(pdb: ProviderDB) -> None:
    pdb.script(*SCHEMA)
    runtime = open_runtime(shop(), database=pdb.source(shop()))
    try:
        pdb.script("DELETE FROM funding_types WHERE id = 'wire'")
        ingest(runtime.registry, runtime.sources[0])
        assert "wire" not in runtime.registry.state.tables["funding_types"].rows
    finally:
        runtime.close()


# -- reliability audit 2, N10 on the SQL write path: one version check for every path ---------


def test_an_admin_version_already_served_on_a_sql_table_is_refused_before_the_database_write(
    world: World,
) -> None:
    assert world.runtime is not None
    world.runtime.patch("funding_types", {"wire": {"label": "Wire transfer"}}, [], "opaque")
    with pytest.raises(ProtocolError) as caught:
        world.runtime.patch("funding_types", {"wire": {"label": "Telegraph"}}, [], "2.0.0")
    assert caught.value.kind is ProblemType.VERSION_CONFLICT
    assert "already served" in caught.value.detail
    assert ("wire", "Wire transfer") in world.pdb.query("SELECT id, label FROM funding_types")
    assert registry(world).state.versions()["funding_types"] == "opaque"


def test_a_captured_write_naming_a_served_version_is_bumped_not_refused(world: World) -> None:
    assert world.runtime is not None
    world.runtime.patch("funding_types", {"wire": {"label": "Wire transfer"}}, [], "opaque")
    world.runtime.patch("funding_types", {"wire": {"label": "Wire"}}, [], "5.0.0")
    source = world.runtime.sources[0]
    source.write("funding_types", {"wire": {"label": "Telegraph"}}, [], "opaque")  # another writer
    world.ingest()
    state = registry(world).state
    assert state.tables["funding_types"].plain_rows()["wire"]["label"] == "Telegraph"
    assert state.versions()["funding_types"] == "5.1.0"


# -- issue 26: the server's own bump of a version that is not a dotted number --------------------


@pytest.mark.parametrize("opaque", ["x", "2024-rates"])
def test_a_captured_write_naming_a_served_version_over_an_opaque_one_gets_a_fresh_version(
    world: World, opaque: str
) -> None:
    assert world.runtime is not None
    world.runtime.patch("funding_types", {"wire": {"label": "Wire transfer"}}, [], opaque)
    source = world.runtime.sources[0]
    source.write("funding_types", {"wire": {"label": "Telegraph"}}, [], "2.0.0")  # served before

    world.ingest()

    state = registry(world).state
    assert state.tables["funding_types"].plain_rows()["wire"]["label"] == "Telegraph"
    assert state.versions()["funding_types"] == f"{opaque}+1"


def test_an_outside_write_to_a_table_at_an_opaque_version_gets_a_fresh_version(
    world: World,
) -> None:
    assert world.runtime is not None
    world.runtime.patch("funding_types", {"wire": {"label": "Wire transfer"}}, [], "2024-rates")
    world.pdb.script("UPDATE funding_types SET label = 'Telegraph' WHERE id = 'wire'")
    world.ingest()
    world.pdb.script("UPDATE funding_types SET label = 'Semaphore' WHERE id = 'wire'")

    world.ingest()

    state = registry(world).state
    assert state.tables["funding_types"].plain_rows()["wire"]["label"] == "Semaphore"
    assert state.versions()["funding_types"] == "2024-rates+2"
    moves = [(t.old_version, t.new_version) for t in registry(world).changes(0).tables]
    assert moves[-2:] == [("2024-rates", "2024-rates+1"), ("2024-rates+1", "2024-rates+2")]
