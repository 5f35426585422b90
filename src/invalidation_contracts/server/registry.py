"""The versioned registry: tables, rules and graph behind one atomically swapped state.

Writers serialize on a lock and build a complete new state; readers take ``registry.state`` (one
reference read) and never see a half-applied reload. A journal, when set, must accept each change
before it becomes visible: if it raises, the registry stays as it was.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from ..protocol.models import (
    ChangesFeed,
    ReloadResult,
    RowChange,
    RuleChange,
    RulesResult,
    TableDiff,
    TableTransition,
)
from ..protocol.problems import ProblemType, ProtocolError
from .changelog import ChangeLog, LogRecord
from .graph import KnowledgeGraph, node_id
from .rules import Rule, RuleSet
from .state import RegistryState
from .tables import Snapshot, diff
from .versions import INITIAL_VERSION, check_forward, next_version


@dataclass(frozen=True, slots=True)
class Commit:
    """A change about to become visible: the new state and its log record."""

    state: RegistryState
    record: LogRecord


Journal = Callable[[Commit], None]


def new_epoch() -> str:
    return secrets.token_hex(8)


def _check_table_name(name: Any) -> str:
    if not isinstance(name, str) or not name or ":" in name:
        raise ProtocolError(
            ProblemType.INVALID_REQUEST,
            f"table name {name!r} must be a non-empty string without ':'",
        )
    return name


class Registry:
    """Reference tables with atomic reloads, rules, the knowledge graph and a bounded change log."""

    def __init__(
        self,
        tables: Mapping[str, Mapping[str, Any]] | Iterable[Snapshot],
        rules: Iterable[Rule] = (),
        *,
        versions: Mapping[str, str] | None = None,
        epoch: str | None = None,
        log_capacity: int = 10_000,
    ) -> None:
        """Load the initial tables (name → rows, or snapshots) at seq 0 under a new epoch."""
        if isinstance(tables, Mapping):
            versions = versions or {}
            snapshots = [
                Snapshot.build(_check_table_name(name), versions.get(name, INITIAL_VERSION), rows)
                for name, rows in tables.items()
            ]
        else:
            snapshots = list(tables)
        by_name = {_check_table_name(s.name): s for s in snapshots}
        ruleset = RuleSet(rules)
        ruleset.check_tables(by_name)
        state = RegistryState(
            tables=MappingProxyType(by_name),
            rules=ruleset,
            graph=KnowledgeGraph.build(by_name, ruleset),
            seq=0,
            epoch=epoch or new_epoch(),
            changed_at=MappingProxyType({name: 0 for name in by_name}),
        )
        self._lock = threading.Lock()
        self._state = state
        self._log = ChangeLog(log_capacity)
        self._journal: Journal | None = None

    @classmethod
    def restore(
        cls,
        state: RegistryState,
        records: Iterable[LogRecord],
        *,
        floor: int,
        log_capacity: int = 10_000,
    ) -> Registry:
        """Rebuild a registry from persisted state and log (the storage adapter's entry point)."""
        registry = cls.__new__(cls)
        registry._lock = threading.Lock()
        registry._state = state
        registry._log = ChangeLog(log_capacity, records, floor=floor)
        registry._journal = None
        return registry

    def set_journal(self, journal: Journal | None) -> None:
        """Install the callable that must persist each commit before it is applied."""
        self._journal = journal

    @property
    def state(self) -> RegistryState:
        return self._state

    @property
    def log(self) -> ChangeLog:
        return self._log

    def reload(
        self, table: str, rows: Mapping[str, Any], version: str | None = None
    ) -> ReloadResult:
        """Replace ``table``'s rows. Identical rows with a new version is a touch; with none, a no-op."""
        with self._lock:
            old = self._state.snapshot(table)
            candidate = Snapshot.build(table, old.version, rows)
            return self._apply(old, candidate, diff(old, candidate), version)

    def patch(
        self,
        table: str,
        upsert: Mapping[str, Any] | None = None,
        delete: Iterable[str] = (),
        version: str | None = None,
    ) -> ReloadResult:
        """Upsert and delete rows of ``table``; the diff costs in proportion to the patch."""
        upsert = upsert or {}
        delete = list(delete)
        overlap = set(upsert) & set(delete)
        if overlap:
            raise ProtocolError(
                ProblemType.INVALID_REQUEST, f"keys both upserted and deleted: {sorted(overlap)}"
            )
        with self._lock:
            old = self._state.snapshot(table)
            candidate = old.with_changes(old.version, upsert, delete)
            return self._apply(old, candidate, diff(old, candidate, [*upsert, *delete]), version)

    def set_rules(self, rules: Iterable[Rule]) -> RulesResult:
        """Replace the rule declarations; the graph is rebuilt and the change logged."""
        ruleset = RuleSet(rules)
        with self._lock:
            state = self._state
            ruleset.check_tables(state.tables)
            added = sorted(ruleset.triples - state.rules.triples)
            removed = sorted(state.rules.triples - ruleset.triples)
            if ruleset == state.rules:
                return RulesResult(
                    old_rules_version=state.rules.version,
                    new_rules_version=ruleset.version,
                    added=[],
                    removed=[],
                    contract_seq=state.seq,
                    contract_epoch=state.epoch,
                )
            seq = state.seq + 1
            change = RuleChange(
                seq=seq,
                old_rules_version=state.rules.version,
                new_rules_version=ruleset.version,
                added=added,
                removed=removed,
            )
            new_state = RegistryState(
                tables=state.tables,
                rules=ruleset,
                graph=KnowledgeGraph.build(state.tables, ruleset),
                seq=seq,
                epoch=state.epoch,
                changed_at=state.changed_at,
                rules_changed_at=seq,
            )
            self._commit(new_state, LogRecord(seq=seq, rule_change=change))
            return RulesResult(
                old_rules_version=change.old_rules_version,
                new_rules_version=change.new_rules_version,
                added=added,
                removed=removed,
                contract_seq=seq,
                contract_epoch=state.epoch,
            )

    def changes(
        self, since: int, tables: Iterable[str] | None = None, epoch: str | None = None
    ) -> ChangesFeed:
        """Every change after ``since``; raises resync-required when the log cannot say."""
        state = self._state
        if tables is not None:
            tables = list(tables)
            for name in tables:
                state.snapshot(name)
        return self._log.since(since, state.seq, state.epoch, tables=tables, client_epoch=epoch)

    def _apply(
        self, old: Snapshot, candidate: Snapshot, delta: TableDiff, version: str | None
    ) -> ReloadResult:
        state = self._state
        if version is not None:
            check_forward(version, old.version, old.name)
        if not delta and version is None:
            return ReloadResult(
                table=old.name,
                old_version=old.version,
                new_version=old.version,
                diff=delta,
                affected_downstream=[],
                touch=False,
                contract_seq=state.seq,
                contract_epoch=state.epoch,
            )
        new_version = version or next_version(old.version)
        new = candidate.restamped(new_version)
        changed_nodes = [node_id(old.name, k) for k in (*delta.changed, *delta.removed)]
        downstream = state.graph.downstream(changed_nodes)
        seq = state.seq + 1
        tables = dict(state.tables)
        tables[old.name] = new
        changed_at = dict(state.changed_at)
        changed_at[old.name] = seq
        new_state = RegistryState(
            tables=MappingProxyType(tables),
            rules=state.rules,
            graph=state.graph.with_rows(new, state.rules, delta.keys),
            seq=seq,
            epoch=state.epoch,
            changed_at=MappingProxyType(changed_at),
            rules_changed_at=state.rules_changed_at,
        )
        touch = not delta
        transition = TableTransition(
            seq=seq,
            table=old.name,
            old_version=old.version,
            new_version=new_version,
            touch=touch,
            affected_downstream=downstream,
        )
        rows = tuple(
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
        self._commit(new_state, LogRecord(seq=seq, transition=transition, rows=rows))
        return ReloadResult(
            table=old.name,
            old_version=old.version,
            new_version=new_version,
            diff=delta,
            affected_downstream=downstream,
            touch=touch,
            contract_seq=seq,
            contract_epoch=state.epoch,
        )

    def _commit(self, state: RegistryState, record: LogRecord) -> None:
        if self._journal is not None:
            self._journal(Commit(state, record))
        self._log.append(record)
        self._state = state
