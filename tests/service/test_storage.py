"""The registry's history in a store (SQLite file or PostgreSQL): restart continuity, new epochs on
lost history, refusals, atomic writes, and several workers sharing one history."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import replace
from pathlib import Path

import pytest

from invalidation_contracts.protocol.problems import ProblemType, ProtocolError
from invalidation_contracts.server import Domain, Registry, Rule
from invalidation_contracts.server.store import SQLiteRegistryStore, StorageError, open_store
from invalidation_contracts.server.store.sqlite import APPLICATION_ID

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


class Target:
    """Where a test's registry lives, and raw SQL against it from outside the store."""

    def __init__(self, kind: str, where: str) -> None:
        self.kind = kind
        self.where = where

    def open(self) -> SQLiteRegistryStore:
        return open_store(self.where)  # type: ignore[return-value]

    def sql(self, statement: str) -> list[tuple[object, ...]]:
        if self.kind == "sqlite":
            with closing(sqlite3.connect(self.where)) as raw, raw:
                return raw.execute(statement).fetchall()
        import psycopg

        statement = re.sub(r"\bic_(\w+)", r"invalidation_contracts.\1", statement)
        with psycopg.connect(self.where, autocommit=True) as pg:
            cursor = pg.execute(statement.encode())
            return cursor.fetchall() if cursor.description else []


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    if request.param == "sqlite":
        yield Target("sqlite", str(tmp_path / "registry.db"))
    else:
        yield Target("postgres", request.getfixturevalue("postgres_url"))


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "registry.db"


def sql(db: Path, statement: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(db)) as raw, raw:
        return raw.execute(statement).fetchall()


def drift(registry: Registry) -> None:
    """Three changes of every kind: a row change, a patch that adds and deletes, a rule change."""
    registry.reload(
        "plans", {**registry.state.tables["plans"].plain_rows(), "basic": {"funding": "wire"}}
    )
    registry.patch(
        "funding_types", upsert={"crypto": {"label": "Crypto"}}, delete=["invoice"], version="3.0.0"
    )
    registry.set_rules([Rule("plans", "funding_types", "pays_with", via="funding")])


def test_a_new_store_starts_at_seq_0_with_the_domain_tables(domain: Domain, target: Target) -> None:
    with target.open() as store:
        registry = store.open_registry(domain)
        assert registry.state.seq == 0
        assert registry.state.versions() == {"funding_types": "2.0.0", "plans": "1.0.0"}


def test_the_file_is_in_wal_mode_and_marked_as_a_registry(domain: Domain, db: Path) -> None:
    with SQLiteRegistryStore(db) as store:
        store.open_registry(domain)
    assert sql(db, "PRAGMA journal_mode") == [("wal",)]
    assert sql(db, "PRAGMA application_id") == [(APPLICATION_ID,)]
    assert sql(db, "PRAGMA user_version") == [(2,)]


def test_a_reopened_store_continues_with_the_same_versions_seq_epoch_and_log(
    domain: Domain, target: Target
) -> None:
    with target.open() as store:
        registry = store.open_registry(domain)
        drift(registry)
        before = registry.state
        feed = registry.changes(0)
    with target.open() as store:
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


def test_a_lost_log_record_starts_a_new_epoch_after_the_old_seq(
    domain: Domain, target: Target
) -> None:
    with target.open() as store:
        registry = store.open_registry(domain)
        drift(registry)
        old = registry.state
    target.sql("DELETE FROM ic_log WHERE seq = 2")
    with target.open() as store:
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
        "DELETE FROM ic_meta WHERE name = 'log_floor'",
        "DELETE FROM ic_meta WHERE name = 'epoch'",
        "UPDATE ic_tables SET version = '9.9.9' WHERE name = 'plans'",
        "DELETE FROM ic_log",
    ],
)
def test_history_that_disagrees_with_the_tables_starts_a_new_epoch(
    domain: Domain, target: Target, tamper: str
) -> None:
    with target.open() as store:
        registry = store.open_registry(domain)
        drift(registry)
        old_epoch = registry.state.epoch
    target.sql(tamper)
    with target.open() as store:
        registry = store.open_registry(domain)
        assert registry.state.epoch != old_epoch
        with pytest.raises(ProtocolError) as caught:
            registry.changes(1)
        assert caught.value.kind is ProblemType.RESYNC_REQUIRED
        new = registry.state
    with target.open() as store:
        assert store.open_registry(domain).state.epoch == new.epoch, (
            "the new epoch is itself persisted"
        )


def test_a_store_of_another_domain_is_refused(domain: Domain, target: Target) -> None:
    with target.open() as store:
        store.open_registry(replace(domain, name="other_shop"))
    with target.open() as store, pytest.raises(StorageError, match="domain 'other_shop'"):
        store.open_registry(domain)


def test_a_table_the_domain_adds_joins_the_stored_history_in_the_same_epoch(
    domain: Domain, target: Target
) -> None:
    with target.open() as store:
        epoch = store.open_registry(domain).state.epoch
    grown = replace(domain, tables={**domain.tables, "regions": domain.tables["plans"]})
    with target.open() as store:
        state = store.open_registry(grown).state
    assert state.epoch == epoch
    assert state.tables["regions"].plain_rows() == state.tables["plans"].plain_rows()
    with target.open() as store:  # the shrunk domain leaves it (another version may serve it)
        assert "regions" in store.open_registry(domain).state.tables
    with target.open() as store:  # `db remove-table regions` removes it by a change set
        store.remove_tables(["regions"])
        shrunk = store.open_registry(domain)
        assert "regions" not in shrunk.state.tables and shrunk.state.epoch == epoch
        assert {r.table for r in shrunk.changes(0).rows} == {"regions"}


def test_a_file_that_is_not_a_registry_is_refused_untouched(domain: Domain, db: Path) -> None:
    sql(db, "CREATE TABLE customers (id INTEGER)")
    with SQLiteRegistryStore(db) as store, pytest.raises(StorageError, match="not a registry"):
        store.open_registry(domain)
    assert sql(db, "SELECT name FROM sqlite_master") == [("customers",)]


def test_a_file_that_is_not_sqlite_is_refused(domain: Domain, db: Path) -> None:
    db.write_bytes(b"this is not a database, just text" * 100)
    with pytest.raises(StorageError):
        SQLiteRegistryStore(db).open_registry(domain)


def test_corrupt_rows_are_refused(domain: Domain, target: Target) -> None:
    with target.open() as store:
        store.open_registry(domain)
    target.sql("UPDATE ic_rows SET data = '{broken' WHERE key = 'basic'")
    with target.open() as store, pytest.raises(StorageError, match="'basic'.*not valid JSON"):
        store.open_registry(domain)


def test_a_file_from_a_newer_schema_is_refused(domain: Domain, db: Path) -> None:
    with SQLiteRegistryStore(db) as store:
        store.open_registry(domain)
    sql(db, "PRAGMA user_version = 99")
    with SQLiteRegistryStore(db) as store, pytest.raises(StorageError, match="schema version 99"):
        store.open_registry(domain)


@pytest.mark.postgres
def test_a_postgres_schema_of_another_version_is_refused(domain: Domain, postgres_url: str) -> None:
    target = Target("postgres", postgres_url)
    with target.open() as store:
        store.open_registry(domain)
    target.sql("UPDATE ic_meta SET value = '99' WHERE name = 'schema_version'")
    with target.open() as store, pytest.raises(StorageError, match="schema version '99'"):
        store.open_registry(domain)


SCHEMA_1 = (
    "CREATE TABLE ic_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
    "CREATE TABLE ic_tables (name TEXT PRIMARY KEY, version TEXT NOT NULL,"
    " changed_at INTEGER NOT NULL) WITHOUT ROWID",
    "CREATE TABLE ic_rows (table_name TEXT NOT NULL REFERENCES ic_tables (name),"
    " key TEXT NOT NULL, data TEXT NOT NULL, PRIMARY KEY (table_name, key)) WITHOUT ROWID",
    "CREATE TABLE ic_rules (from_table TEXT NOT NULL, to_table TEXT NOT NULL,"
    " relation TEXT NOT NULL, via TEXT, PRIMARY KEY (from_table, to_table, relation))"
    " WITHOUT ROWID",
    "CREATE TABLE ic_log (seq INTEGER PRIMARY KEY, record TEXT NOT NULL)",
    "INSERT INTO ic_meta VALUES ('schema_version', '1'), ('domain', 'test_shop'),"
    " ('epoch', 'e1e1e1e1e1e1e1e1'), ('seq', '1'), ('log_floor', '0')",
    "INSERT INTO ic_tables VALUES ('plans', '1.1.0', 1), ('funding_types', '2.0.0', 0)",
    "INSERT INTO ic_rows VALUES ('plans', 'basic', '{\"funding\":\"wire\"}'),"
    " ('funding_types', 'wire', '{\"label\":\"Wire\"}')",
    "INSERT INTO ic_rules VALUES ('plans', 'funding_types', 'requires_funding', 'funding')",
    'INSERT INTO ic_log VALUES (1, \'{"seq":1,"transition":{"seq":1,"table":"plans",'
    '"old_version":"1.0.0","new_version":"1.1.0","touch":false,'
    '"affected_downstream":[]},"rows":[["changed","basic"]]}\')',
)


def test_a_file_of_schema_1_is_migrated_with_its_history(domain: Domain, db: Path) -> None:
    with closing(sqlite3.connect(db)) as raw, raw:
        for statement in SCHEMA_1:
            raw.execute(statement)
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        assert (registry.state.epoch, registry.state.seq) == ("e1e1e1e1e1e1e1e1", 1)
        [row] = registry.changes(0).rows
        assert (row.table, row.key, row.op) == ("plans", "basic", "changed")
        registry.patch("plans", upsert={"gold": {"funding": "card"}})
    assert sql(db, "PRAGMA user_version") == [(2,)]
    assert sql(db, "SELECT value FROM ic_meta WHERE name = 'schema_version'") == []
    with SQLiteRegistryStore(db) as store:
        assert store.open_registry(domain).changes(0).last_seq == 2


def test_two_workers_on_one_store_share_epoch_seq_and_every_change(
    domain: Domain, target: Target
) -> None:
    with target.open() as first, target.open() as second:
        a = first.open_registry(domain)
        b = second.open_registry(domain)
        assert a.state.epoch == b.state.epoch
        a.patch("plans", upsert={"gold": {"funding": "wire"}})
        assert b.state.seq == 0, "a worker moves only when it syncs"
        assert b.sync() is True
        assert b.state.seq == 1 and b.state.tables["plans"].rows["gold"]["funding"] == "wire"
        assert b.changes(0) == a.changes(0)
        b.set_rules([])
        a.sync()
        assert a.state.rules_listing() == b.state.rules_listing()
        assert a.state.graph_listing() == b.state.graph_listing()
        assert b.sync() is False


def test_a_writer_behind_the_store_catches_up_before_its_change(
    domain: Domain, target: Target
) -> None:
    with target.open() as first, target.open() as second:
        a = first.open_registry(domain)
        b = second.open_registry(domain)
        a.patch("plans", upsert={"gold": {"funding": "wire"}})
        result = b.patch("plans", upsert={"silver": {"funding": "card"}})
        assert result.contract_seq == 2 and result.old_version == "1.1.0"
        assert {"gold", "silver"} <= set(b.state.tables["plans"].rows)
        a.sync()
        assert [t.seq for t in a.changes(0).tables] == [1, 2]


def test_a_worker_that_missed_a_new_epoch_restores_the_whole_state(
    domain: Domain, target: Target
) -> None:
    with target.open() as first:
        a = first.open_registry(domain)
        drift(a)
    target.sql("DELETE FROM ic_log WHERE seq = 2")
    with target.open() as second:
        b = second.open_registry(domain)  # repairs the history: a new epoch
        with target.open() as third:
            c = third.open_registry(domain)
            b.patch("plans", upsert={"gold": {"funding": "wire"}})
            assert c.sync() and c.state.epoch == b.state.epoch and c.state.seq == b.state.seq


def failing_log_trigger(target: Target) -> Callable[[], object]:
    if target.kind == "sqlite":
        target.sql(
            "CREATE TRIGGER fail BEFORE INSERT ON ic_log"
            " BEGIN SELECT RAISE(ABORT, 'disk full'); END"
        )
        return lambda: target.sql("DROP TRIGGER fail")
    target.sql(
        "CREATE FUNCTION ic_fail() RETURNS trigger LANGUAGE plpgsql AS"
        " $$ BEGIN RAISE EXCEPTION 'disk full'; END $$"
    )
    target.sql(
        "CREATE TRIGGER fail BEFORE INSERT ON ic_log FOR EACH ROW EXECUTE FUNCTION ic_fail()"
    )
    return lambda: target.sql("DROP TRIGGER fail ON ic_log")


def test_a_failed_write_leaves_registry_and_store_unchanged(domain: Domain, target: Target) -> None:
    with target.open() as store:
        store.open_registry(domain)
    repair = failing_log_trigger(target)
    with target.open() as store:
        registry = store.open_registry(domain)
        before = registry.state
        with pytest.raises(StorageError, match="not persisted"):
            registry.reload("plans", {"basic": {"funding": "wire"}})
        with pytest.raises(StorageError):
            registry.set_rules([])
        assert registry.state is before
        assert registry.changes(0).last_seq == 0
    repair()
    with target.open() as store:
        state = store.open_registry(domain).state
        assert state.seq == 0 and state.epoch == before.epoch
        assert set(state.tables["plans"].rows) == {"basic", "enterprise", "starter"}
        assert len(state.rules) == 1


def test_a_closed_store_refuses_commits_and_the_registry_stays(domain: Domain, db: Path) -> None:
    store = SQLiteRegistryStore(db)
    registry = store.open_registry(domain)
    store.close()
    with pytest.raises(StorageError, match="closed"):
        registry.reload("plans", {})
    assert registry.state.seq == 0


def writes_for_one_row_patch(domain: Domain, db: Path, table_size: int) -> int:
    big = {f"plan{i}": {"funding": "card"} for i in range(table_size)}
    with SQLiteRegistryStore(db) as store:
        registry = store.open_registry(domain)
        registry.reload("plans", big)
        connection: sqlite3.Connection = store._db
        before = connection.total_changes
        registry.patch("plans", upsert={"plan0": {"funding": "wire"}})
        return connection.total_changes - before


def test_a_patch_writes_only_the_rows_it_changes(domain: Domain, tmp_path: Path) -> None:
    small = writes_for_one_row_patch(domain, tmp_path / "small.db", 10)
    large = writes_for_one_row_patch(domain, tmp_path / "large.db", 5_000)
    assert small == large <= 6


def test_log_trimming_is_persisted(domain: Domain, target: Target) -> None:
    with target.open() as store:
        registry = store.open_registry(domain, log_capacity=2)
        for i in range(5):
            registry.patch("plans", upsert={"basic": {"funding": "card", "n": i}})
    assert target.sql("SELECT seq FROM ic_log ORDER BY seq") == [(4,), (5,)]
    with target.open() as store:
        registry = store.open_registry(domain, log_capacity=2)
        assert registry.state.seq == 5
        assert registry.changes(3).last_seq == 5
        with pytest.raises(ProtocolError):
            registry.changes(2)
