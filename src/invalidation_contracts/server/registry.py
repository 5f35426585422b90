"""The versioned registry: tables, rules and graph behind one atomically swapped state.

Writers serialize on a lock and build a complete new state (``transitions``); readers take
``registry.state`` (one reference read) and never see a half-applied change. With a history
attached (a store shared by several workers, ``server.store``), a writer first catches up with the
store under its write lock and the store must accept each change before it becomes visible: if it
raises, the registry stays as it was. ``sync`` adopts what other workers committed.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from ..protocol.models import ChangesFeed, ReloadResult, RulesResult
from ..protocol.problems import ProblemType, ProtocolError
from .changelog import ChangeLog, LogRecord, stamped
from .history import Advance, Catchup, History, HistoryWrite, Restore, advance
from .origin import change_origin
from .rules import Rule, RuleSet
from .state import RegistryState
from .tables import Snapshot
from .transitions import TableChange, apply_changes, apply_rules, restart
from .versions import INITIAL_VERSION

logger = logging.getLogger(__name__)

StateListener = Callable[[RegistryState, RegistryState], None]
"""Told ``(before, after)`` each time the state a registry serves moves (``Registry.subscribe``)."""


def new_epoch() -> str:
    return secrets.token_hex(8)


def _check_table_name(name: object) -> str:
    if not isinstance(name, str) or not name or ":" in name:
        raise ProtocolError(
            ProblemType.INVALID_REQUEST,
            f"table name {name!r} must be a non-empty string without ':'",
        )
    return name


def initial_state(
    snapshots: Iterable[Snapshot], rules: Iterable[Rule] = (), *, epoch: str | None = None
) -> RegistryState:
    """The state of a new history: ``snapshots`` and ``rules`` at seq 0."""
    by_name = {_check_table_name(s.name): s for s in snapshots}
    ruleset = rules if isinstance(rules, RuleSet) else RuleSet(rules)
    ruleset.check_tables(by_name)
    return RegistryState.starting(by_name, ruleset, 0, epoch or new_epoch())


class TableVerbs:
    """``reload`` and ``patch``: each a change set of one table, made by the class's ``apply``."""

    def apply(self, changes: Mapping[str, TableChange]) -> Mapping[str, ReloadResult]:
        raise NotImplementedError

    def reload(
        self, table: str, rows: Mapping[str, Any], version: str | None = None
    ) -> ReloadResult:
        """Replace ``table``'s rows. The same rows with a new version: a touch; with none: no-op."""
        return self.apply({table: TableChange.reload(rows, version)})[table]

    def patch(
        self,
        table: str,
        upsert: Mapping[str, Any] | None = None,
        delete: Iterable[str] = (),
        version: str | None = None,
    ) -> ReloadResult:
        """Upsert and delete rows of ``table``; the diff costs in proportion to the patch."""
        return self.apply({table: TableChange.patch(upsert, delete, version)})[table]


class RegistryTransaction(TableVerbs):
    """Changes made under the writers' lock; they become visible together when it ends.

    Each change set gets the next ``seq``; a refused change raises and the transaction (with every
    change made in it) is abandoned.
    """

    def __init__(
        self,
        state: RegistryState,
        store: HistoryWrite | None,
        positions: Mapping[str, int],
        log: ChangeLog | None = None,
    ) -> None:
        self.base = state
        self.state = state
        self._records: list[LogRecord] = []
        self._mine = ChangeLog(1 << 62)  # this transaction's records, indexed like the log's
        self.positions: dict[str, int] = {}
        self.committed: list[Callable[[], None]] = []
        """Called once the transaction's changes are committed and visible (under the lock)."""
        self._store = store
        self._known_positions = positions
        self._stored: dict[str, int | None] = {}  # read once: the transaction holds the lock
        self._log = log

    @property
    def records(self) -> list[LogRecord]:
        """The records of the changes made in this transaction, in order."""
        return self._records

    @records.setter
    def records(self, records: list[LogRecord]) -> None:
        self._records = records
        self._mine = ChangeLog(1 << 62, records)

    def served(self, table: str) -> Collection[str]:
        """Every version ``table`` has had in this epoch as far as the log reaches (SPEC §7: a
        version is never served twice within an epoch), this transaction's changes included.

        A view over the log's and this transaction's indexes: its cost does not grow with the
        log's length."""
        base = {self.base.tables[table].version} if table in self.base.tables else set()
        logged = self._log.served(table) if self._log is not None else ()
        return ServedVersions((base, logged, self._mine.served(table)))

    def apply(self, changes: Mapping[str, TableChange]) -> Mapping[str, ReloadResult]:
        """One change set over one or more tables (one ``seq``); a result per table named."""
        applied = apply_changes(self.state, changes, self.served)
        self._moved(applied.state, applied.record)
        return applied.results

    def set_rules(self, rules: Iterable[Rule]) -> RulesResult:
        state, record, result = apply_rules(self.state, RuleSet(rules))
        self._moved(state, record)
        return result

    def restart(self, tables: Mapping[str, Snapshot] | None = None) -> None:
        """Start a new epoch (with ``tables`` replaced): every old client position gets 410."""
        self.state = restart(self.state, new_epoch(), tables)
        self.records = []

    def position(self, source: str) -> int | None:
        """How far the change capture of ``source`` has been consumed."""
        if source in self.positions:
            return self.positions[source]
        if self._store is not None:
            if source not in self._stored:
                self._stored[source] = self._store.position(source)
            return self._stored[source]
        return self._known_positions.get(source)

    def set_position(self, source: str, position: int) -> None:
        self.positions[source] = position

    @property
    def changed(self) -> bool:
        return self.state is not self.base or bool(self.positions)

    def _moved(self, state: RegistryState, record: LogRecord | None) -> None:
        if record is not None:
            self.state = state
            self._records.append(record)
            self._mine.append(record)


class ServedVersions(Collection[str]):
    """The union of a few version collections, read in place (membership, iteration; ``len``
    counts a version once per part, an upper bound: what ``fresh_version`` needs)."""

    def __init__(self, parts: tuple[Collection[str], ...]) -> None:
        self._parts = parts

    def __contains__(self, version: object) -> bool:
        return any(version in part for part in self._parts)

    def __iter__(self) -> Iterator[str]:
        seen: set[str] = set()
        for part in self._parts:
            for version in part:
                if version not in seen:
                    seen.add(version)
                    yield version

    def __len__(self) -> int:
        return sum(len(part) for part in self._parts)


#: How many change records a registry keeps by default (a client further behind resyncs).
LOG_CAPACITY = 10_000


class Registry(TableVerbs):
    """Reference tables with atomic reloads, rules, the knowledge graph and a bounded change log."""

    def __init__(
        self,
        tables: Mapping[str, Mapping[str, Any]] | Iterable[Snapshot],
        rules: Iterable[Rule] = (),
        *,
        versions: Mapping[str, str] | None = None,
        epoch: str | None = None,
        log_capacity: int = LOG_CAPACITY,
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
        self._setup(initial_state(snapshots, rules, epoch=epoch), ChangeLog(log_capacity))

    @classmethod
    def restore(
        cls,
        state: RegistryState,
        records: Iterable[LogRecord],
        *,
        floor: int,
        log_capacity: int = LOG_CAPACITY,
    ) -> Registry:
        """Rebuild a registry from persisted state and log (the storage adapter's entry point)."""
        registry = cls.__new__(cls)
        registry._setup(state, ChangeLog(log_capacity, records, floor=floor))
        return registry

    def _setup(self, state: RegistryState, log: ChangeLog) -> None:
        self._lock = threading.RLock()
        self._state = state
        self._log = log
        self._history: History | None = None
        self._positions: dict[str, int] = {}
        self._listeners: dict[object, StateListener] = {}

    def attach(self, history: History | None) -> None:
        """Write every later change through ``history`` (a store shared with other workers)."""
        with self._lock:
            self._history = history

    @property
    def history(self) -> History | None:
        return self._history

    @property
    def state(self) -> RegistryState:
        return self._state

    @property
    def log(self) -> ChangeLog:
        return self._log

    def subscribe(self, listener: StateListener) -> Callable[[], None]:
        """Call ``listener(before, after)`` after every move of the served state: a write here,
        or changes another worker committed and this one adopted (``sync``). Returns the
        unsubscribe callable (idempotent).

        It runs in the writer's thread, under the registry's lock, after the change is visible:
        it must return quickly and must not write to the registry. An exception it raises is
        logged and never fails the write.
        """
        token = object()
        self._listeners[token] = listener

        def unsubscribe() -> None:
            self._listeners.pop(token, None)

        return unsubscribe

    def position(self, source: str) -> int | None:
        """How far this worker knows the change capture of ``source`` consumed (None: never)."""
        return self._positions.get(source)

    @contextmanager
    def transaction(self) -> Iterator[RegistryTransaction]:
        """Hold the writers' lock (and the history's) at the head; commit the changes on exit.

        What the catch-up at the head adopts (other workers' changes) is announced apart, as
        ``adopted``, before this transaction's own changes: a listener counts each once."""
        with self._lock:
            before = adopted = self._state
            history = self._history
            if history is None:
                tx = RegistryTransaction(self._state, None, self._positions, self._log)
                yield tx
            else:
                try:
                    with history.writing() as store:
                        self._adopt(store.catch_up(self._state))
                        adopted = self._state
                        tx = RegistryTransaction(self._state, store, {}, self._log)
                        yield tx
                        if tx.changed:
                            tx.records = stamped(tx.records, time.time())  # commit-to-serve lag
                            store.save(tx.base, tx.state, tx.records, tx.positions)
                except BaseException:
                    # what the catch-up adopted is served: its watchers are told even though
                    # this transaction failed (else they wait for their stream's heartbeat)
                    if adopted is not before:
                        with change_origin("adopted"):
                            self._announce(before, adopted)
                    raise
            self._publish(tx)
            for callback in tx.committed:
                callback()
            if adopted is not before:
                with change_origin("adopted"):
                    self._announce(before, adopted)
            self._announce(adopted)

    def apply(self, changes: Mapping[str, TableChange]) -> Mapping[str, ReloadResult]:
        """One change set over several tables, under one ``seq``."""
        with self.transaction() as tx:
            return tx.apply(changes)

    def set_rules(self, rules: Iterable[Rule]) -> RulesResult:
        """Replace the rule declarations; the graph is rebuilt and the change logged."""
        with self.transaction() as tx:
            return tx.set_rules(rules)

    def sync(self, timeout: float | None = None) -> bool:
        """Adopt what other workers committed to the history; True when the state moved.

        ``timeout``: how long to wait for the writers' lock (a writer stuck on a silent link
        holds it); past it, ``TimeoutError``."""
        history = self._history
        if history is None:
            return False
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            raise TimeoutError("the registry is busy with a change that has not finished")
        try:
            with change_origin("adopted"):
                before = self._state
                self._adopt(history.catch_up(before))
                self._announce(before)
                return self._state is not before
        finally:
            self._lock.release()

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

    def _adopt(self, caught: Catchup | None) -> None:
        if isinstance(caught, Restore):
            self._log = ChangeLog(self._log.capacity, caught.records, floor=caught.floor)
            self._state = caught.state
        elif isinstance(caught, Advance) and caught.records:
            state = advance(self._state, caught)
            for record in caught.records:
                self._log.append(record)
            self._state = state

    def _announce(self, before: RegistryState, after: RegistryState | None = None) -> None:
        """Tell every listener the state moved from ``before`` to ``after`` (default: now)."""
        after = self._state if after is None else after
        if after is before:
            return
        for listener in list(self._listeners.values()):
            try:
                listener(before, after)
            except Exception:  # a listener must never fail a committed write
                logger.exception("registry state listener raised; the change stands")

    def _publish(self, tx: RegistryTransaction) -> None:
        if tx.state.epoch != tx.base.epoch:
            self._log = ChangeLog(self._log.capacity, floor=tx.state.seq)
        else:
            for record in tx.records:
                self._log.append(record)
        self._positions.update(tx.positions)
        self._state = tx.state
