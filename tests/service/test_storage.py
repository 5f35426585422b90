"""SQLite persistence: restart continuity, new epochs on lost history, refusals, atomic journal."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import replace

import pytest

from invalidation_contracts.protocol.problems import ProblemType, ProtocolError
from invalidation_contracts.server import Rule
from invalidation_contracts.server.storage import SQLiteRegistryStore, StorageError


@pytest.fixture
def db(tmp_path):
    return tmp_path / "registry.db"


def sql(db, statement):
    """Run one statement on the file from outside the store (the store must be closed)."""
    with closing(sqlite3.connect(db)) as raw, raw:
        return raw.execute(statement).fetchall()


def drift(registry):
    """Three changes of every kind: a row change, a patch that adds and deletes, a rule change."""
    registry.reload(
        "plans", {**registry.state.tables["plans"].plain_rows(), "basic": {"funding": "wire"}}
    )
    registry.patch(
        "funding_types", upsert={"crypto": {"label": "Crypto"}}, delete=["invoice"], version="3.0.0"
    )
    registry.set_rules([Rule("plans", "funding_types", "pays_with", via="funding")])


def test_a_new_file_starts_at_seq_0_with_the_domain_tables(domain, db):
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        assert registry.state.seq == 0
        assert registry.state.versions() == {"funding_types": "2.0.0", "plans": "1.0.0"}


def test_the_file_is_in_wal_mode(domain, db):
    with SQLiteRegistryStore(db) as store:
        store.open_registry(domain)
    assert sql(db, "PRAGMA journal_mode") == [("wal",)]


def test_a_reopened_file_continues_with_the_same_versions_seq_epoch_and_log(domain, db):
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        drift(registry)
        before = registry.state
        feed = registry.changes(0)
    with SQLiteRegistryStore(db) as store:
        again = store.open_registry(domain)
        state = again.state
        assert (state.seq, state.epoch) == (3, before.epoch)
        assert state.versions() == before.versions()
        assert dict(state.changed_at) == dict(before.changed_at)
        assert state.rules == before.rules
        assert state.graph_listing() == before.graph_listing()
        assert {name: s.plain_rows() for name, s in state.tables.items()} == {
            name: s.plain_rows() for name, s in before.tables.items()
        }
        assert again.changes(0) == feed
        assert again.reload("plans", {"basic": {"funding": "card"}}).contract_seq == 4


def test_a_lost_log_record_starts_a_new_epoch_after_the_old_seq(domain, db):
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        drift(registry)
        old = registry.state
    sql(db, "DELETE FROM ic_log WHERE seq = 2")
    with SQLiteRegistryStore(db) as store:
        state = store.open_registry(domain).state
    assert state.epoch != old.epoch
    assert state.seq == 4
    assert state.versions() == old.versions()
    assert state.versions(since=3) == old.versions(), (
        "every table counts as changed in the new epoch"
    )


@pytest.mark.parametrize(
    "tamper",
    [
        "UPDATE ic_log SET record = 'not json' WHERE seq = 1",
        "UPDATE ic_meta SET value = 'x' WHERE name = 'seq'",
        "DELETE FROM ic_meta WHERE name = 'epoch'",
        "UPDATE ic_tables SET version = '9.9.9' WHERE name = 'plans'",
        "DELETE FROM ic_log",
    ],
)
def test_history_that_disagrees_with_the_tables_starts_a_new_epoch(domain, db, tamper):
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        drift(registry)
        old_epoch = registry.state.epoch
    sql(db, tamper)
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        assert registry.state.epoch != old_epoch
        with pytest.raises(ProtocolError) as caught:
            registry.changes(1)
        assert caught.value.kind is ProblemType.RESYNC_REQUIRED
        new = registry.state
    with SQLiteRegistryStore(db) as store:
        assert store.open_registry(domain).state.epoch == new.epoch, (
            "the new epoch is itself persisted"
        )


def test_a_file_of_another_domain_is_refused(domain, db):
    with SQLiteRegistryStore(db) as store:
        store.open_registry(replace(domain, name="other_shop"))
    with SQLiteRegistryStore(db) as store, pytest.raises(StorageError, match="domain 'other_shop'"):
        store.open_registry(domain)


def test_a_file_whose_tables_the_domain_does_not_declare_is_refused(domain, db):
    with SQLiteRegistryStore(db) as store:
        store.open_registry(domain)
    grown = replace(domain, tables={**domain.tables, "regions": domain.tables["plans"]})
    with (
        SQLiteRegistryStore(db) as store,
        pytest.raises(StorageError, match="differ from the tables"),
    ):
        store.open_registry(grown)


def test_a_file_that_is_not_a_registry_is_refused(domain, db):
    sql(db, "CREATE TABLE customers (id INTEGER)")
    with (
        SQLiteRegistryStore(db) as store,
        pytest.raises(StorageError, match="not an invalidation-contracts"),
    ):
        store.open_registry(domain)


def test_a_file_that_is_not_sqlite_is_refused(domain, db):
    db.write_bytes(b"this is not a database, just text" * 100)
    with pytest.raises(StorageError):
        SQLiteRegistryStore(db).open_registry(domain)


def test_corrupt_rows_are_refused(domain, db):
    with SQLiteRegistryStore(db) as store:
        store.open_registry(domain)
    sql(db, "UPDATE ic_rows SET data = '{broken' WHERE key = 'basic'")
    with (
        SQLiteRegistryStore(db) as store,
        pytest.raises(StorageError, match="'basic'.*not valid JSON"),
    ):
        store.open_registry(domain)


def test_a_file_from_a_newer_schema_is_refused(domain, db):
    with SQLiteRegistryStore(db) as store:
        store.open_registry(domain)
    sql(db, "UPDATE ic_meta SET value = '99' WHERE name = 'schema_version'")
    with SQLiteRegistryStore(db) as store, pytest.raises(StorageError, match="schema version '99'"):
        store.open_registry(domain)


def test_a_second_server_cannot_open_a_file_in_use(domain, db):
    with SQLiteRegistryStore(db) as store:
        store.open_registry(domain)
        with pytest.raises(StorageError, match="another server"):
            SQLiteRegistryStore(db).open_registry(domain)


def test_a_failed_journal_write_leaves_registry_and_file_unchanged(domain, db):
    with SQLiteRegistryStore(db) as store:
        store.open_registry(domain)
    sql(
        db,
        "CREATE TRIGGER fail BEFORE INSERT ON ic_log BEGIN SELECT RAISE(ABORT, 'disk full'); END",
    )
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        before = registry.state
        with pytest.raises(StorageError, match="not persisted"):
            registry.reload("plans", {"basic": {"funding": "wire"}})
        with pytest.raises(StorageError):
            registry.set_rules([])
        assert registry.state is before
        assert registry.changes(0).last_seq == 0
    sql(db, "DROP TRIGGER fail")
    with SQLiteRegistryStore(db) as store:
        state = store.open_registry(domain).state
        assert state.seq == 0 and state.epoch == before.epoch
        assert set(state.tables["plans"].rows) == {"basic", "enterprise", "starter"}
        assert len(state.rules) == 1


def test_a_closed_store_refuses_commits_and_the_registry_stays(domain, db):
    store = SQLiteRegistryStore(db)
    registry = store.open_registry(domain)
    store.close()
    with pytest.raises(StorageError, match="closed"):
        registry.reload("plans", {})
    assert registry.state.seq == 0


def writes_for_one_row_patch(domain, db, table_size):
    big = {f"plan{i}": {"funding": "card"} for i in range(table_size)}
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        registry.reload("plans", big)
        connection = store._db
        before = connection.total_changes
        registry.patch("plans", upsert={"plan0": {"funding": "wire"}})
        return connection.total_changes - before


def test_a_patch_writes_only_the_rows_it_changes(domain, tmp_path):
    small = writes_for_one_row_patch(domain, tmp_path / "small.db", 10)
    large = writes_for_one_row_patch(domain, tmp_path / "large.db", 5_000)
    assert small == large <= 6


def test_log_trimming_is_persisted(domain, db):
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain, log_capacity=2)
        for i in range(5):
            registry.patch("plans", upsert={"basic": {"funding": "card", "n": i}})
    assert sql(db, "SELECT seq FROM ic_log ORDER BY seq") == [(4,), (5,)]
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain, log_capacity=2)
        assert registry.state.seq == 5
        assert registry.changes(3).last_seq == 5
        with pytest.raises(ProtocolError):
            registry.changes(2)
