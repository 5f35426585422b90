"""The registry's shared history, as the sans-IO core sees it: what a store must offer, and how a
worker moves its in-memory state to the store's head.

Several workers (processes) serve one registry. Its history — epoch, seq, table versions, rows,
rules and the change log — lives in a store (``server.store``); each worker holds an immutable
``RegistryState`` and follows the store. A writer takes the store's write lock, catches up, computes
its change on the head state and saves it before anyone sees it; a reader catches up by reading
what was committed beyond its position. This module has no I/O: stores implement the protocols,
and :func:`advance` turns what a store read into the next state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Protocol

from .changelog import LogRecord
from .graph import KnowledgeGraph
from .rules import RuleSet
from .state import RegistryState
from .tables import Snapshot


@dataclass(frozen=True, slots=True)
class TableHead:
    """One table at the store's head: its version, when it moved, the rows a worker must refresh.

    ``rows`` holds only the keys the records in between touched; ``None`` means the key is absent.
    """

    version: str
    changed_at: int
    rows: Mapping[str, Mapping[str, Any] | None]


@dataclass(frozen=True, slots=True)
class Advance:
    """What changed in the store after a worker's position, in the same epoch."""

    records: tuple[LogRecord, ...]
    tables: Mapping[str, TableHead | None]
    """The touched tables' heads; ``None`` for a table removed from the store; every row of a
    table the worker did not hold yet (another version of the domain added it)."""
    rules: RuleSet | None
    """The rule declarations at the head, when a record in between changed them."""
    floor: int


@dataclass(frozen=True, slots=True)
class Restore:
    """The whole head state: the store started a new epoch, or its log no longer reaches back."""

    state: RegistryState
    records: tuple[LogRecord, ...]
    floor: int


Catchup = Advance | Restore


class HistoryWrite(Protocol):
    """A store's write transaction, holding the lock every writer of the registry takes."""

    def catch_up(self, state: RegistryState) -> Catchup | None:
        """What was committed after ``state`` (None: ``state`` is the head)."""

    def position(self, source: str) -> int | None:
        """How far the change capture of ``source`` has been consumed (None: never)."""

    def save(
        self,
        before: RegistryState,
        after: RegistryState,
        records: Sequence[LogRecord],
        positions: Mapping[str, int],
    ) -> None:
        """Write the move from ``before`` (the head) to ``after``; committed when the block ends."""


class History(Protocol):
    """A store that holds a registry's history for every worker that serves it."""

    def writing(self) -> AbstractContextManager[HistoryWrite]:
        """Take the writers' lock; commit on a clean exit, roll back on an exception."""

    def catch_up(self, state: RegistryState) -> Catchup | None:
        """Read what was committed after ``state`` in one consistent snapshot (None: up to date)."""


def advance(state: RegistryState, step: Advance) -> RegistryState:
    """The state after ``step``: ``state`` with the head's versions and touched rows."""
    if not step.records:
        return state
    seq = step.records[-1].seq
    tables = dict(state.tables)
    changed_at = dict(state.changed_at)
    rules = step.rules if step.rules is not None else state.rules
    graph = state.graph
    removed = [name for name, head in step.tables.items() if head is None]
    for name in removed:  # ``db remove-table``: the table and the rules naming it leave
        tables.pop(name, None)
        changed_at.pop(name, None)
    if removed:
        rules = RuleSet(r for r in rules if r.from_table in tables and r.to_table in tables)
    for name, head in step.tables.items():
        if head is None:
            continue
        # A table another version of the domain added (a rolling deploy's new workers) joins
        # with every row (``Advance.tables``): this worker's routes never read it, and the
        # captured changes it consumes for that version are carried, not dropped.
        old = state.tables.get(name) or Snapshot.build(name, head.version, {})
        upsert = {key: row for key, row in head.rows.items() if row is not None}
        delete = [key for key, row in head.rows.items() if row is None and key in old.rows]
        new = old.with_changes(head.version, upsert, delete)
        tables[name] = new
        changed_at[name] = head.changed_at
        if step.rules is None and not removed:
            graph = graph.with_rows(new, rules, head.rows)
    frozen = MappingProxyType(tables)
    if step.rules is not None or removed:
        graph = KnowledgeGraph.build(frozen, rules)
    rules_moved = [record.seq for record in step.records if record.rule_change is not None]
    return RegistryState(
        tables=frozen,
        rules=rules,
        graph=graph,
        seq=seq,
        epoch=state.epoch,
        changed_at=MappingProxyType(changed_at),
        rules_changed_at=rules_moved[-1] if rules_moved else state.rules_changed_at,
    )
