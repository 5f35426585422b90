"""Pure state transitions of the registry: a change set, a rule change, a new epoch.

Each function takes one immutable ``RegistryState`` and returns the next one with the log record
that describes the move; nothing is mutated, so a refused change leaves the caller's state as it
was. ``Registry`` serializes writers and persists; this module only computes.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..protocol.models import (
    ReloadResult,
    RowChange,
    RuleChange,
    RulesResult,
    TableDiff,
    TableTransition,
)
from ..protocol.problems import ProblemType, ProtocolError
from .changelog import LogRecord
from .graph import KnowledgeGraph, node_id
from .rules import RuleSet
from .state import RegistryState
from .tables import Snapshot, diff
from .versions import check_version, fresh_version

_NO_ROWS: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class TableChange:
    """What one change set does to one table: rows set, keys deleted, or the whole table replaced.

    ``replace``: ``upsert`` holds every row the table keeps (a reload); otherwise the change is a
    patch. ``version``: the operator's new version (else the server bumps it when content moved).
    """

    upsert: Mapping[str, Any] = field(default_factory=lambda: _NO_ROWS)
    delete: frozenset[str] = frozenset()
    replace: bool = False
    version: str | None = None
    reconciled: bool = False
    """Found by comparing the table with its database, not by the capture (labelled in the feed)."""

    @classmethod
    def reload(cls, rows: Mapping[str, Any], version: str | None = None) -> TableChange:
        return cls(rows, replace=True, version=version)

    @classmethod
    def patch(
        cls,
        upsert: Mapping[str, Any] | None = None,
        delete: Iterable[str] = (),
        version: str | None = None,
    ) -> TableChange:
        upsert = upsert if upsert is not None else _NO_ROWS
        keys = list(delete)
        overlap = set(upsert) & set(keys)
        if overlap:
            raise ProtocolError(
                ProblemType.INVALID_REQUEST, f"keys both upserted and deleted: {sorted(overlap)}"
            )
        return cls(upsert, frozenset(keys), version=version)

    def candidate(self, old: Snapshot) -> tuple[Snapshot, TableDiff]:
        """The table after this change (still at ``old``'s version) and its diff against ``old``.

        Raises ``ProtocolError`` for rows that are not JSON objects or a key to delete that is
        not there; checks nothing about the version.
        """
        if self.replace:
            new = Snapshot.build(old.name, old.version, self.upsert, previous=old)
            return new, diff(old, new)
        if not self.delete and old.holds(self.upsert):  # a no-op: no copy of the table
            return old, TableDiff(added=[], removed=[], changed=[])
        new = old.with_changes(old.version, self.upsert, self.delete)
        return new, diff(old, new, [*self.upsert, *self.delete])


@dataclass(frozen=True, slots=True)
class Applied:
    """A change set's outcome: the next state, its log record (None: nothing moved), results."""

    state: RegistryState
    record: LogRecord | None
    results: Mapping[str, ReloadResult]


def apply_changes(
    state: RegistryState,
    changes: Mapping[str, TableChange],
    served: Callable[[str], Collection[str]] | None = None,
) -> Applied:
    """Apply one change set (one ``seq`` for every table it moves).

    Tables whose rows do not change and that name no version are left alone; if none moves, the
    state is returned as it was. ``affected_downstream`` is walked on the graph before the change.
    """
    moved: list[tuple[Snapshot, Snapshot, TableDiff, str]] = []
    noop: dict[str, ReloadResult] = {}
    for name in sorted(changes):
        change = changes[name]
        old = state.snapshot(name)
        candidate, delta = change.candidate(old)
        if not delta and change.version is None:  # a no-op: nothing else to look at
            noop[name] = _result(old, old.version, delta, [], state.seq, state.epoch)
            continue
        before = served(name) if served is not None else ()
        if change.version is not None:
            check_version(change.version, old.version, before, name)
        moved.append((old, candidate, delta, change.version or fresh_version(old.version, before)))
    if not moved:
        return Applied(state, None, noop)
    seq = state.seq + 1
    tables = dict(state.tables)
    changed_at = dict(state.changed_at)
    graph = state.graph
    transitions: list[TableTransition] = []
    rows: list[RowChange] = []
    results = dict(noop)
    for old, candidate, delta, new_version in moved:
        new = candidate.restamped(new_version)
        changed_nodes = [node_id(old.name, k) for k in (*delta.changed, *delta.removed)]
        downstream = state.graph.downstream(changed_nodes)
        tables[old.name] = new
        changed_at[old.name] = seq
        graph = graph.with_rows(new, state.rules, delta.keys)
        transitions.append(
            TableTransition(
                seq=seq,
                table=old.name,
                old_version=old.version,
                new_version=new_version,
                touch=not delta,
                affected_downstream=downstream,
                reconciled=True if changes[old.name].reconciled else None,
            )
        )
        rows.extend(
            RowChange(
                seq=seq,
                table=old.name,
                key=key,
                op=op,
                old_version=old.version,
                new_version=new_version,
            )
            for op, keys in (
                ("added", delta.added),
                ("removed", delta.removed),
                ("changed", delta.changed),
            )
            for key in keys
        )
        results[old.name] = _result(old, new_version, delta, downstream, seq, state.epoch)
    new_state = RegistryState(
        tables=MappingProxyType(tables),
        rules=state.rules,
        graph=graph,
        seq=seq,
        epoch=state.epoch,
        changed_at=MappingProxyType(changed_at),
        rules_changed_at=state.rules_changed_at,
    )
    record = LogRecord(seq=seq, transitions=tuple(transitions), rows=tuple(rows))
    return Applied(new_state, record, results)


def _result(
    old: Snapshot, new_version: str, delta: TableDiff, downstream: list[str], seq: int, epoch: str
) -> ReloadResult:
    return ReloadResult(
        table=old.name,
        old_version=old.version,
        new_version=new_version,
        diff=delta,
        affected_downstream=downstream,
        touch=new_version != old.version and not delta,
        contract_seq=seq,
        contract_epoch=epoch,
    )


def apply_rules(
    state: RegistryState, rules: RuleSet
) -> tuple[RegistryState, LogRecord | None, RulesResult]:
    """Replace the rule declarations; the graph is rebuilt and the change gets its own ``seq``."""
    rules.check_tables(state.tables)
    added = sorted(rules.triples - state.rules.triples)
    removed = sorted(state.rules.triples - rules.triples)
    if rules == state.rules:
        return (
            state,
            None,
            RulesResult(
                old_rules_version=state.rules.version,
                new_rules_version=rules.version,
                added=[],
                removed=[],
                contract_seq=state.seq,
                contract_epoch=state.epoch,
            ),
        )
    seq = state.seq + 1
    change = RuleChange(
        seq=seq,
        old_rules_version=state.rules.version,
        new_rules_version=rules.version,
        added=added,
        removed=removed,
    )
    new_state = RegistryState(
        tables=state.tables,
        rules=rules,
        graph=KnowledgeGraph.build(state.tables, rules),
        seq=seq,
        epoch=state.epoch,
        changed_at=state.changed_at,
        rules_changed_at=seq,
    )
    result = RulesResult(
        old_rules_version=change.old_rules_version,
        new_rules_version=change.new_rules_version,
        added=added,
        removed=removed,
        contract_seq=seq,
        contract_epoch=state.epoch,
    )
    return new_state, LogRecord(seq=seq, rule_change=change), result


def restart(
    state: RegistryState, epoch: str, tables: Mapping[str, Snapshot] | None = None
) -> RegistryState:
    """A new history: ``epoch`` at ``seq + 1``, every table counting as changed there.

    ``tables`` replaces the snapshots it names (their versions are kept). Every client position
    of the old history then answers resync-required; nothing is silently carried over.
    """
    snapshots = {**state.tables, **(tables or {})}
    return RegistryState.starting(snapshots, state.rules, state.seq + 1, epoch)
