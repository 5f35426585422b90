"""The versions a table has had in an epoch (SPEC §7) are kept incrementally: a change set costs
the same at any log length, and a no-op change set does not look at them at all.

Property: for any sequence of change sets (automatic bumps, operator versions, touches, no-ops)
over a bounded log, the registry picks and refuses exactly the versions a brute-force oracle
(every version the retained log records name, scanned afresh each time) picks and refuses."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.protocol.problems import ProtocolError
from invalidation_contracts.server import Registry
from invalidation_contracts.server.changelog import ChangeLog, LogRecord
from invalidation_contracts.server.state import RegistryState
from invalidation_contracts.server.transitions import TableChange, apply_changes

TABLES = ("a", "b")
VERSIONS = ("1.0.1", "1.1.0", "1.2.0", "2.0.0", "2.1.0", "3.0.0")

change = st.tuples(
    st.sampled_from(TABLES),
    st.integers(0, 2),  # the value of row "k" (the same value again: no content change)
    st.one_of(st.none(), st.sampled_from(VERSIONS)),
)


def brute_served(state: RegistryState, records: list[LogRecord], table: str) -> set[str]:
    """The definition: the table's version at the transaction's start, and every version the
    retained records' transitions name (old and new)."""
    versions = {state.tables[table].version}
    for record in records:
        for move in record.transitions:
            if move.table == table:
                versions.update((move.old_version, move.new_version or ""))
    return versions


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 5), st.lists(st.lists(change, min_size=1, max_size=3), max_size=25))
def test_the_registry_picks_and_refuses_the_versions_a_brute_force_scan_would(
    capacity: int, batches: list[list[tuple[str, int, str | None]]]
) -> None:
    registry = Registry({name: {"k": {"v": 0}} for name in TABLES}, log_capacity=capacity)
    oracle_state = registry.state
    oracle_log: list[LogRecord] = []
    for batch in batches:
        outcome: Any
        expected: Any
        try:
            with registry.transaction() as tx:
                for table, value, version in batch:
                    tx.apply({table: TableChange.patch({"k": {"v": value}}, version=version)})
            outcome = registry.state.versions(), registry.state.seq
        except ProtocolError as exc:
            outcome = exc.kind
        state, mine = oracle_state, []
        try:
            for table, value, version in batch:
                retained = [*oracle_log, *mine]
                applied = apply_changes(
                    state,
                    {table: TableChange.patch({"k": {"v": value}}, version=version)},
                    lambda name, b=oracle_state, r=retained: brute_served(b, r, name),
                )
                if applied.record is not None:
                    state = applied.state
                    mine.append(applied.record)
            oracle_state = state
            oracle_log = [*oracle_log, *mine][-capacity:]
            expected = state.versions(), state.seq
        except ProtocolError as exc:
            expected = exc.kind
        assert outcome == expected


def test_a_no_op_change_set_does_not_look_at_the_versions_served() -> None:
    state = Registry({"a": {"k": {"v": 0}}}).state
    asked: list[str] = []

    def served(table: str) -> Collection[str]:
        asked.append(table)
        return ()

    applied = apply_changes(state, {"a": TableChange.patch({"k": {"v": 0}})}, served)
    assert applied.record is None and asked == []


def test_the_log_forgets_a_version_once_no_retained_record_names_it() -> None:
    registry = Registry({"a": {"k": {"v": 0}}}, log_capacity=2)
    for value in (1, 2, 3):
        registry.patch("a", {"k": {"v": value}})
    # 1.0.0 -> 1.1.0 fell out of the log; 1.1.0 -> 1.2.0 and 1.2.0 -> 1.3.0 are retained
    assert set(registry.log.served("a")) == {"1.1.0", "1.2.0", "1.3.0"}


def test_a_transactions_own_changes_count_as_served_before_it_commits() -> None:
    registry = Registry({"a": {"k": {"v": 0}}}, log_capacity=1)
    with registry.transaction() as tx:
        tx.patch("a", {"k": {"v": 1}})
        tx.patch("a", {"k": {"v": 2}})
        assert {"1.0.0", "1.1.0", "1.2.0"} <= set(tx.served("a"))


def test_a_restored_log_indexes_the_records_it_is_given() -> None:
    registry = Registry({"a": {"k": {"v": 0}}})
    registry.patch("a", {"k": {"v": 1}})
    log = ChangeLog(5, registry.log.records())
    assert set(log.served("a")) == {"1.0.0", "1.1.0"}
    assert set(log.served("absent")) == set()
