"""Reading a registry from its store: the whole state (with the history checks), or what changed
after a worker's position. Every function runs inside one transaction (``Statements``)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from pydantic import ValidationError

from ...protocol.models import TableTransition
from ...protocol.problems import ProtocolError
from ..changelog import LogRecord, touched_rows
from ..graph import KnowledgeGraph
from ..history import Advance, Catchup, Restore, TableHead
from ..rules import Rule, RuleSet
from ..state import RegistryState
from ..tables import Snapshot
from .dialect import Connection, HistoryLost, Statements, StorageError
from .records import decode_record

#: Keys per ``IN (...)`` list when a worker refreshes the rows a change touched.
KEY_BATCH = 500


@dataclass(frozen=True, slots=True)
class Loaded:
    """A registry read from the store: its state, log and log floor."""

    state: RegistryState
    records: tuple[LogRecord, ...]
    floor: int


@dataclass(frozen=True, slots=True)
class StoredTables:
    """The reference tables a store holds, where each last changed, and the rules among them:
    what a stored history is checked against (``read_history``) or a new epoch starts from."""

    snapshots: Mapping[str, Snapshot]
    changed_at: Mapping[str, int]
    rules: RuleSet


def read_stored(s: Statements[Connection]) -> StoredTables:
    """The stored tables, then the rules checked against them."""
    snapshots, changed_at = read_tables(s)
    return StoredTables(snapshots, changed_at, read_rules(s, snapshots))


def read_tables(
    s: Statements[Connection],
) -> tuple[dict[str, Snapshot], dict[str, int]]:
    heads = list(s.run("SELECT name, version, changed_at FROM {tables} ORDER BY name"))
    rows: dict[str, dict[str, Any]] = {name: {} for name, _, _ in heads}
    for table, key, data in s.run(
        "SELECT table_name, key, data FROM {rows} ORDER BY table_name, key"
    ):
        if table not in rows:
            raise StorageError(f"{s.where}: row {key!r} belongs to no stored table ({table!r})")
        rows[table][key] = decode_row(s.where, table, key, data)
    snapshots: dict[str, Snapshot] = {}
    changed_at: dict[str, int] = {}
    for name, version, changed in heads:
        if not isinstance(version, str) or not isinstance(changed, int):
            raise StorageError(f"{s.where}: table {name!r} has a corrupt version or position")
        try:
            snapshots[name] = Snapshot.build(name, version, rows[name])
        except ProtocolError as exc:
            raise StorageError(f"{s.where}: table {name!r} is corrupt ({exc.detail})") from None
        changed_at[name] = changed
    return snapshots, changed_at


def decode_row(where: str, table: str, key: str, data: Any) -> Any:
    try:
        return json.loads(data)
    except (TypeError, ValueError):
        raise StorageError(f"{where}: row {key!r} of table {table!r} is not valid JSON") from None


def read_rules(s: Statements[Connection], snapshots: Iterable[str]) -> RuleSet:
    try:
        rules = RuleSet(
            Rule(a, b, r, v)
            for a, b, r, v in s.run("SELECT from_table, to_table, relation, via FROM {rules}")
        )
        rules.check_tables(snapshots)
    except ProtocolError as exc:
        raise StorageError(f"{s.where}: stored rules are invalid ({exc.detail})") from None
    return rules


def read_log(s: Statements[Connection], after: int) -> list[LogRecord]:
    records = []
    for position, text in s.run(
        "SELECT seq, record FROM {log} WHERE seq > ? ORDER BY seq", (after,)
    ):
        try:
            records.append(decode_record(position, text))
        except (KeyError, TypeError, ValueError, ValidationError):
            raise HistoryLost(f"log record {position} is unreadable") from None
    return records


def read_history(
    s: Statements[Connection], meta: Mapping[str, str], stored: StoredTables
) -> Loaded:
    """The registry the stored history describes; ``HistoryLost`` when the log, the position
    and the tables disagree."""
    try:
        seq, floor, epoch = int(meta["seq"]), int(meta["log_floor"]), meta["epoch"]
    except (KeyError, ValueError):
        raise HistoryLost("the history position is missing") from None
    if not epoch or not 0 <= floor <= seq:
        raise HistoryLost(f"position {seq} and log floor {floor} are inconsistent")
    records = read_log(s, -1)
    if [r.seq for r in records] != list(range(floor + 1, seq + 1)):
        raise HistoryLost(f"the log does not hold every change from {floor + 1} to {seq}")
    last: dict[str, TableTransition] = {}
    for record in records:
        for transition in record.transitions:
            last[transition.table] = transition
    changed_at = stored.changed_at
    for name, snapshot in stored.snapshots.items():
        moved = last.get(name)
        if moved is None and not 0 <= changed_at[name] <= floor:
            raise HistoryLost(
                f"table {name!r} moved at {changed_at[name]} but the log does not say so"
            )
        if moved is not None and (
            moved.seq != changed_at[name] or moved.new_version != snapshot.version
        ):
            raise HistoryLost(f"table {name!r} at {snapshot.version!r} disagrees with the log")
    tables = MappingProxyType(dict(stored.snapshots))
    state = RegistryState(
        tables=tables,
        rules=stored.rules,
        graph=KnowledgeGraph.build(tables, stored.rules),
        seq=seq,
        epoch=epoch,
        changed_at=MappingProxyType(dict(changed_at)),
        rules_changed_at=max([floor, *(r.seq for r in records if r.rule_change is not None)]),
    )
    return Loaded(state, tuple(records), floor)


def catch_up(
    s: Statements[Connection], state: RegistryState, meta: Mapping[str, str] | None = None
) -> Catchup | None:
    """What was committed after ``state`` (None: nothing); ``meta``: the head already read in
    this transaction (saves a round trip)."""
    if meta is None:
        meta = s.meta()
    try:
        epoch, seq, floor = meta["epoch"], int(meta["seq"]), int(meta["log_floor"])
    except (KeyError, ValueError):
        raise StorageError(f"{s.where}: the registry's position is unreadable") from None
    if epoch == state.epoch and seq == state.seq:
        return None
    if epoch != state.epoch or not floor <= state.seq < seq:
        return restore(s, meta)
    try:
        records = read_log(s, state.seq)
    except HistoryLost as lost:
        raise StorageError(f"{s.where}: {lost}") from None
    if [r.seq for r in records] != list(range(state.seq + 1, seq + 1)):
        raise StorageError(f"{s.where}: the log does not hold {state.seq + 1}..{seq}")
    heads: dict[str, TableHead | None] = {}
    for name, keys in touched_rows(records).items():
        head = s.run("SELECT version, changed_at FROM {tables} WHERE name = ?", (name,)).fetchone()
        if head is None:  # gone from the store: removed by ``db remove-table``
            heads[name] = None
        elif name in state.tables:
            heads[name] = TableHead(head[0], head[1], read_rows(s, name, keys))
        else:  # a table another version of the domain added (a rolling deploy): all of it
            heads[name] = TableHead(head[0], head[1], read_table(s, name))
    rules = None
    joined = heads.keys() - state.tables.keys()
    if joined or any(record.rule_change is not None for record in records):
        rules = read_rules(s, [*state.tables, *(n for n in joined if heads[n] is not None)])
    return Advance(tuple(records), heads, rules, floor)


def restore(s: Statements[Connection], meta: Mapping[str, str]) -> Restore:
    try:
        loaded = read_history(s, meta, read_stored(s))
    except HistoryLost as lost:
        raise StorageError(f"{s.where}: {lost}") from None
    return Restore(loaded.state, loaded.records, loaded.floor)


def read_rows(
    s: Statements[Connection], table: str, keys: set[str]
) -> dict[str, Mapping[str, Any] | None]:
    out: dict[str, Mapping[str, Any] | None] = dict.fromkeys(keys)
    ordered = sorted(keys)
    for start in range(0, len(ordered), KEY_BATCH):
        chunk = ordered[start : start + KEY_BATCH]
        marks = ", ".join("?" * len(chunk))
        for key, data in s.run(
            f"SELECT key, data FROM {{rows}} WHERE table_name = ? AND key IN ({marks})",
            (table, *chunk),
        ):
            out[key] = decode_row(s.where, table, key, data)
    return out


def read_table(s: Statements[Connection], table: str) -> dict[str, Mapping[str, Any] | None]:
    """Every stored row of ``table``."""
    return {
        key: decode_row(s.where, table, key, data)
        for key, data in s.run("SELECT key, data FROM {rows} WHERE table_name = ?", (table,))
    }
