"""Writing a registry's history: the first state, a move to a new head, a new epoch."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from ..changelog import LogRecord, touched_rows
from ..domain import Domain
from ..registry import initial_state, new_epoch
from ..rules import RuleSet
from ..state import RegistryState
from .dialect import Connection, HistoryLost, SQLLoader, Statements, StorageError
from .evolve import evolve
from .reader import Loaded, StoredTables, read_history, read_rules, read_stored, read_tables
from .records import encode_record, encode_row

logger = logging.getLogger(__name__)


def initialise(s: Statements[Connection], domain: Domain, load_sql: SQLLoader | None) -> Loaded:
    memory = domain.initial_snapshots()
    sql, positions = load_sql() if load_sql is not None else ({}, {})
    state = initial_state([*memory, *sql.values()], domain.rules)
    write_all(s, state)
    s.set_meta(domain=domain.name, epoch=state.epoch, seq=0, log_floor=0)
    write_positions(s, positions)
    return Loaded(state, (), 0)


def restart_epoch(s: Statements[Connection], meta: Mapping[str, str], reason: str) -> Loaded:
    """A new epoch over the stored tables and rules (``start_epoch``), read here: for a running
    worker that finds its store restored under it."""
    return start_epoch(s, meta, read_stored(s), reason)


def start_epoch(
    s: Statements[Connection], meta: Mapping[str, str], stored: StoredTables, reason: str
) -> Loaded:
    """A new epoch over ``stored`` at one past any seq the store has seen, with an empty log and
    every table counting as changed there (``reason``: why, for the operator's log)."""
    known = [int(meta["seq"])] if meta.get("seq", "").isdigit() else []
    (last_logged,) = s.run("SELECT MAX(seq) FROM {log}").fetchone()
    seq = max([0, *known, *stored.changed_at.values(), last_logged or 0]) + 1
    epoch = new_epoch()
    s.run("DELETE FROM {log}")
    s.run("UPDATE {tables} SET changed_at = ?", (seq,))
    s.set_meta(seq=seq, log_floor=seq, epoch=epoch)
    logger.warning("%s: %s; starting a new history epoch %s at seq %d", s.where, reason, epoch, seq)
    state = RegistryState.starting(stored.snapshots, stored.rules, seq, epoch)
    return Loaded(state, (), seq)


def write_all(s: Statements[Connection], state: RegistryState) -> None:
    for name in ("rows", "tables", "rules", "log"):
        s.run(f"DELETE FROM {{{name}}}")
    s.run_many(
        "INSERT INTO {tables} (name, version, changed_at) VALUES (?, ?, ?)",
        [(s.name, s.version, state.changed_at[s.name]) for s in state.tables.values()],
    )
    s.run_many(
        "INSERT INTO {rows} (table_name, key, data) VALUES (?, ?, ?)",
        [
            (s.name, key, encode_row(row))
            for s in state.tables.values()
            for key, row in s.rows.items()
        ],
    )
    write_rules(s, state.rules)


def write_rules(s: Statements[Connection], rules: RuleSet) -> None:
    s.run_many(
        "INSERT INTO {rules} (from_table, to_table, relation, via) VALUES (?, ?, ?, ?)",
        [(r.from_table, r.to_table, r.relation, r.via) for r in rules],
    )


def write_positions(s: Statements[Connection], positions: Mapping[str, int]) -> None:
    s.run_many(
        "INSERT INTO {positions} (source, position) VALUES (?, ?)"
        " ON CONFLICT (source) DO UPDATE SET position = excluded.position",
        sorted(positions.items()),
    )


def save(
    s: Statements[Connection],
    before: RegistryState,
    after: RegistryState,
    records: Sequence[LogRecord],
    positions: Mapping[str, int],
    capacity: int,
) -> None:
    """Write the move from ``before`` (the head) to ``after``: a new epoch rewrites everything,
    records write only what they touched; the log keeps its last ``capacity`` records."""
    floor = int(s.meta().get("log_floor", "0"))
    with s.batch():
        if after.epoch != before.epoch:
            write_all(s, after)
            s.set_meta(epoch=after.epoch, seq=after.seq, log_floor=after.seq)
        elif records:
            save_records(s, after, records, floor, capacity)
        write_positions(s, positions)


def save_records(
    s: Statements[Connection],
    after: RegistryState,
    records: Sequence[LogRecord],
    floor: int,
    capacity: int,
) -> None:
    s.run_many(
        "INSERT INTO {log} (seq, record) VALUES (?, ?)",
        [(record.seq, encode_record(record)) for record in records],
    )
    for name, keys in touched_rows(records).items():
        snapshot = after.tables[name]
        s.run(
            "UPDATE {tables} SET version = ?, changed_at = ? WHERE name = ?",
            (snapshot.version, after.changed_at[name], name),
        )
        s.run_many(
            "DELETE FROM {rows} WHERE table_name = ? AND key = ?",
            [(name, key) for key in sorted(keys) if key not in snapshot.rows],
        )
        s.run_many(
            "INSERT INTO {rows} (table_name, key, data) VALUES (?, ?, ?)"
            " ON CONFLICT (table_name, key) DO UPDATE SET data = excluded.data",
            [
                (name, key, encode_row(snapshot.rows[key]))
                for key in sorted(keys)
                if key in snapshot.rows
            ],
        )
    if any(record.rule_change is not None for record in records):
        s.run("DELETE FROM {rules}")
        write_rules(s, after.rules)
    floor = max(floor, after.seq - capacity)
    s.run("DELETE FROM {log} WHERE seq <= ?", (floor,))
    s.set_meta(seq=after.seq, log_floor=floor)


def load_stored(
    s: Statements[Connection], domain: Domain, meta: Mapping[str, str]
) -> Loaded | None:
    """The stored registry of ``domain`` as it stands, read only; None when opening it needs a
    write (a table added, lost or inconsistent history: ``load_or_repair`` under the lock)."""
    snapshots, changed_at = read_tables(s)
    if set(domain.tables) - set(snapshots):
        return None
    stored = StoredTables(snapshots, changed_at, read_rules(s, snapshots))
    try:
        return read_history(s, meta, stored)
    except HistoryLost:
        return None


def load_or_repair(
    s: Statements[Connection], domain: Domain, meta: Mapping[str, str], restored: str | None = None
) -> Loaded:
    """The stored registry of ``domain``; lost or inconsistent history starts a new epoch, and
    so does a history that is not a clean continuation of what was served (``restored``)."""
    if meta.get("domain") != domain.name:
        raise StorageError(
            f"{s.where} holds the registry of domain {meta.get('domain')!r}, not {domain.name!r}"
        )
    snapshots, changed_at = read_tables(s)
    if set(domain.tables) - set(snapshots):
        evolve(s, domain, snapshots)  # tables added: a change set; none removed (db remove-table)
        meta = s.meta()
        snapshots, changed_at = read_tables(s)
    stored = StoredTables(snapshots, changed_at, read_rules(s, snapshots))
    if restored is not None:
        return start_epoch(s, meta, stored, restored)
    try:
        return read_history(s, meta, stored)
    except HistoryLost as lost:
        return start_epoch(s, meta, stored, str(lost))
