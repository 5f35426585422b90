"""The schema evolves without losing history: a table added to the domain, a table removed
explicitly (``db remove-table``; opening a worker never removes one), a column added to or dropped
from a declared table, each becomes a change set in the same epoch (old positions stay
answerable), not a refusal to start."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.server.sqldb import PG_SOURCES, SOURCES, ProviderDB, provider_db

from invalidation_contracts.server import Domain, Rule, SQLTable
from invalidation_contracts.server.store import open_store
from invalidation_contracts.server.worker.runtime import Runtime, open_runtime

SCHEMA = (
    "CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT, promo TEXT)",
    "CREATE TABLE funding_types (id TEXT PRIMARY KEY, label TEXT)",
    "INSERT INTO plans VALUES ('basic', 'card', NULL), ('enterprise', 'invoice', 'ENT10')",
    "INSERT INTO funding_types VALUES ('card', 'Card'), ('invoice', 'Invoice')",
)


def plans_only() -> Domain:
    return Domain("evolving", {"plans": SQLTable("plans")}, [], [])


def with_funding() -> Domain:
    return Domain(
        "evolving",
        {"plans": SQLTable("plans"), "funding_types": SQLTable("funding_types")},
        [Rule("plans", "funding_types", "requires_funding", via="funding")],
        [],
    )


@pytest.fixture(params=SOURCES)
def pdb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProviderDB]:
    db = next(provider_db(request, tmp_path))
    db.script(*SCHEMA)
    yield db


@pytest.fixture(params=PG_SOURCES)
def pg(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProviderDB]:
    db = next(provider_db(request, tmp_path))
    db.script(*SCHEMA)
    yield db


def store_of(pdb: ProviderDB, tmp_path: Path) -> str:
    return str(tmp_path / "registry.sqlite") if pdb.kind == "sqlite" else pdb.url


def opened(pdb: ProviderDB, tmp_path: Path, domain: Domain) -> Runtime:
    return open_runtime(domain, store=store_of(pdb, tmp_path), database=pdb.source(domain))


def reopen(pdb: ProviderDB, tmp_path: Path, first: Domain, then: Domain) -> tuple[object, Runtime]:
    runtime = opened(pdb, tmp_path, first)
    before = runtime.registry.state
    runtime.close()
    return before, opened(pdb, tmp_path, then)


def test_a_table_added_to_the_domain_is_a_change_set_of_added_rows(
    pdb: ProviderDB, tmp_path: Path
) -> None:
    before, runtime = reopen(pdb, tmp_path, plans_only(), with_funding())
    try:
        state = runtime.registry.state
        assert state.epoch == before.epoch and state.seq == before.seq + 1  # type: ignore[attr-defined]
        feed = runtime.registry.changes(before.seq, epoch=before.epoch)  # type: ignore[attr-defined]
        assert sorted((r.table, r.key, r.op) for r in feed.rows) == [
            ("funding_types", "card", "added"),
            ("funding_types", "invoice", "added"),
        ]
        assert state.tables["plans"] == before.tables["plans"]  # type: ignore[attr-defined]
        assert [r.relation for r in state.rules] == ["requires_funding"]
    finally:
        runtime.close()


def test_a_table_the_domain_no_longer_declares_stays_until_removed_by_a_change_set(
    pdb: ProviderDB, tmp_path: Path
) -> None:
    before, runtime = reopen(pdb, tmp_path, with_funding(), plans_only())
    try:  # opening never removes: another version of the domain may still serve it
        state = runtime.registry.state
        assert (state.epoch, state.seq) == (before.epoch, before.seq)  # type: ignore[attr-defined]
        assert set(state.tables) == {"plans", "funding_types"}
    finally:
        runtime.close()
    with open_store(store_of(pdb, tmp_path)) as store:  # `db remove-table funding_types`
        assert store.remove_tables(["funding_types"]) == before.seq + 1  # type: ignore[attr-defined]
    again = opened(pdb, tmp_path, plans_only())  # and the evolved store opens cleanly
    try:
        state = again.registry.state
        assert state.epoch == before.epoch and state.seq == before.seq + 1  # type: ignore[attr-defined]
        assert set(state.tables) == {"plans"}
        feed = again.registry.changes(before.seq, epoch=before.epoch)  # type: ignore[attr-defined]
        assert sorted((r.table, r.key, r.op) for r in feed.rows) == [
            ("funding_types", "card", "removed"),
            ("funding_types", "invoice", "removed"),
        ]
        assert list(state.rules) == []
    finally:
        again.close()


def test_a_column_added_to_a_declared_table_is_a_change_set_of_changed_rows(
    pdb: ProviderDB, tmp_path: Path
) -> None:
    runtime = opened(pdb, tmp_path, plans_only())
    before = runtime.registry.state
    runtime.close()
    pdb.script("ALTER TABLE plans ADD COLUMN tier TEXT DEFAULT 'gold'")
    runtime = opened(pdb, tmp_path, plans_only())
    try:
        state = runtime.registry.state
        assert (state.epoch, state.seq) == (before.epoch, before.seq + 1)
        feed = runtime.registry.changes(before.seq, epoch=before.epoch)
        assert sorted((r.key, r.op) for r in feed.rows) == [
            ("basic", "changed"),
            ("enterprise", "changed"),
        ]
        assert state.tables["plans"].rows["basic"]["tier"] == "gold"
        pdb.script("UPDATE plans SET tier = 'silver' WHERE id = 'basic'")  # and it is captured
        from invalidation_contracts.server.worker.runtime import ingest

        assert ingest(runtime.registry, runtime.sources[0]) is True
        assert runtime.registry.state.tables["plans"].rows["basic"]["tier"] == "silver"
    finally:
        runtime.close()


def test_a_column_dropped_from_a_declared_table_is_a_change_set_on_postgresql(
    pg: ProviderDB, tmp_path: Path
) -> None:
    pdb = pg
    runtime = opened(pdb, tmp_path, plans_only())
    before = runtime.registry.state
    runtime.close()
    pdb.script("ALTER TABLE plans DROP COLUMN promo")
    runtime = opened(pdb, tmp_path, plans_only())
    try:
        state = runtime.registry.state
        assert (state.epoch, state.seq) == (before.epoch, before.seq + 1)
        assert "promo" not in state.tables["plans"].rows["enterprise"]
    finally:
        runtime.close()
