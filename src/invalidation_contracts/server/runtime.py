"""One worker's registry at run time: opened from its store and the provider's database, then kept
at the head of the shared history by a background follower.

- ``open_runtime`` opens (or initialises) the registry: from a store shared by workers (SQLite
  file or PostgreSQL), or in memory; SQL-backed tables come from the provider's database, whose
  change capture it installs. Writes made while no worker ran are consumed at once, and the stored
  tables are checked against the database: a difference the capture does not explain starts a
  new epoch (410 for old positions), never a silent skip.
- ``ingest`` turns the captured records after the registry's position into change sets, under
  the registry's write lock, exactly as an admin reload would be recorded.
- ``Follower`` wakes on PostgreSQL ``NOTIFY`` (or polls SQLite), adopts what other workers
  committed and consumes new captures. While it cannot reach the databases the worker is
  *unavailable*: the HTTP layer answers 503 rather than stamps it cannot vouch for.
"""

from __future__ import annotations

import logging
import select
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..protocol.models import ReloadResult
from ..protocol.problems import ProblemType, ProtocolError
from .domain import Domain
from .registry import Registry, RegistryTransaction
from .tables import Snapshot, diff
from .transitions import TableChange
from .versions import check_forward, next_version

logger = logging.getLogger(__name__)

DEFAULT_POLL_INTERVAL_S = 0.02
"""How often a worker looks for changes where it cannot be woken (SQLite)."""
DEFAULT_HEARTBEAT_S = 1.0
"""How often a worker that is woken by NOTIFY checks the databases anyway."""
DEFAULT_STALE_AFTER_S = 10.0
"""A worker whose last successful check is older than this answers 503."""


class SourceError(RuntimeError):
    """The provider's database could not be read (or holds a row the contract cannot carry)."""


class Listener(Protocol):
    def fileno(self) -> int: ...

    def drain(self) -> bool: ...

    def close(self) -> None: ...


def _log_capacity_default() -> int:
    from .store.base import DEFAULT_LOG_CAPACITY

    return DEFAULT_LOG_CAPACITY


def ingest(
    registry: Registry, source: Any, *, verify: bool = False, head: int | None = None
) -> bool:
    """Consume ``source``'s captured changes; True when the registry moved.

    ``verify`` also compares the tables with the database in the same snapshot (done when a worker
    opens the registry): a difference the capture does not explain starts a new epoch. ``head``:
    the capture head the caller just read (saves reading it again).
    """
    with registry.transaction() as tx:
        after = tx.position(source.name)
        if after is not None and not verify and head == after:
            return False
        before = tx.state
        consume(tx, source, verify=verify)
        moved = tx.state is not before
    _trim(source, tx.positions[source.name])
    return moved


def consume(
    tx: RegistryTransaction, source: Any, *, verify: bool = False
) -> list[tuple[str | None, Mapping[str, ReloadResult]]]:
    """Apply the records captured after the registry's position, inside ``tx``.

    Returns each change set's transaction id and per-table results, in order.
    """
    from .sql.images import change_sets, gap

    after = tx.position(source.name)
    batch = source.read(after, full=verify or after is None)
    reason = "the capture position is unknown" if after is None else gap(after, batch)
    applied: list[tuple[str | None, Mapping[str, ReloadResult]]] = []
    if reason is None:
        sets = change_sets(batch.records, by_transaction=source.by_transaction)
        applied = _apply(tx, source, sets)
        if batch.contents is not None:
            reason = _differs(tx, source, batch.contents)
    if reason is not None:
        if batch.contents is None:
            batch = source.read(None, full=True)
        assert batch.contents is not None
        _restart(tx, source, batch.contents, reason)
        applied = []
    tx.set_position(source.name, batch.head)
    return applied


def _trim(source: Any, position: int) -> None:
    try:
        source.trim(position)
    except Exception as exc:  # the records are consumed; trimming again later is harmless
        logger.warning("could not trim the change capture: %s", exc)


def _apply(
    tx: RegistryTransaction, source: Any, sets: list[Any]
) -> list[tuple[str | None, Mapping[str, ReloadResult]]]:
    from .sql.images import merged

    start, records = tx.state, list(tx.records)
    try:
        return [(cs.tx, tx.apply(cs.changes(tx.state.tables))) for cs in sets]
    except ProtocolError:
        # A change set the contract cannot carry (say an integer beyond 2^53) may be repaired by a
        # later write; every pending change as one set is the state to serve if it is valid.
        tx.state, tx.records = start, records
        whole = merged(sets)
        try:
            return [(whole.tx, tx.apply(whole.changes(tx.state.tables)))]
        except ProtocolError as exc:
            raise SourceError(
                f"{source.name}: a captured change cannot be served: {exc.detail}"
            ) from None


def _differs(tx: RegistryTransaction, source: Any, contents: Mapping[str, Any]) -> str | None:
    for name, rows in contents.items():
        current = tx.state.tables[name]
        if not source.snapshot(name, current.version, rows).same_content(current):
            return f"table {name!r} differs from the database beyond what the capture recorded"
    return None


def _restart(
    tx: RegistryTransaction, source: Any, contents: Mapping[str, Any], reason: str
) -> None:
    tables: dict[str, Snapshot] = {}
    for name, rows in contents.items():
        current = tx.state.tables[name]
        candidate = source.snapshot(name, current.version, rows)
        if not candidate.same_content(current):
            try:
                candidate = candidate.restamped(next_version(current.version))
            except ProtocolError:
                pass  # not dotted-numeric: the new epoch alone tells clients to revalidate
        tables[name] = candidate
    tx.restart(tables)
    logger.warning(
        "%s: %s; starting a new history epoch %s at seq %d",
        source.name,
        reason,
        tx.state.epoch,
        tx.state.seq,
    )


@dataclass
class Health:
    """Whether this worker can vouch for its state, and why not."""

    available: bool = True
    reason: str | None = None
    last_ok: float = field(default_factory=time.monotonic)


class Follower:
    """Keeps a worker's registry at the shared head; a daemon thread started with the app."""

    def __init__(
        self,
        registry: Registry,
        sources: tuple[Any, ...] = (),
        *,
        store: Any = None,
        poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
        heartbeat_s: float = DEFAULT_HEARTBEAT_S,
        stale_after_s: float = DEFAULT_STALE_AFTER_S,
    ) -> None:
        self.registry = registry
        self.sources = sources
        self.store = store
        self.poll_interval_s = poll_interval_s
        self.heartbeat_s = heartbeat_s
        self.stale_after_s = stale_after_s
        self.health = Health()
        self._seen: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listeners: dict[str, Listener] | None = None

    def start(self) -> None:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(
                target=self._run, name="invalidation-contracts-follower", daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None
        self._close_listeners()

    @property
    def available(self) -> bool:
        health = self.health
        fresh = time.monotonic() - health.last_ok < self.stale_after_s
        return health.available and (fresh or self._thread is None)

    @property
    def reason(self) -> str | None:
        if self.health.reason is not None:
            return self.health.reason
        return None if self.available else "the registry has not been checked recently"

    def check(self, *, everything: bool = True, notified: frozenset[str] = frozenset()) -> None:
        """One round: consume new captures (as the leader, or ``everything``), else catch up.

        Raises when a database fails. ``notified``: sources whose capture just signalled a change
        (no need to read their head first).
        """
        ingested = False
        for source in self.sources:
            if source.name in notified:
                ingest(self.registry, source)  # catches up under the write lock
                self._seen[source.name] = self.registry.position(source.name) or 0
                ingested = True
                continue
            if not (everything or self._leads(source)):
                continue
            head = source.head()
            if head != self._seen.get(source.name):
                ingest(self.registry, source, head=head)
                self._seen[source.name] = head
                ingested = True
        if not ingested:
            self.registry.sync()

    def _leads(self, source: Any) -> bool:
        listener = (self._listeners or {}).get(source.name)
        return listener is None or bool(getattr(listener, "leader", True))

    def _run(self) -> None:
        everything, notified = True, frozenset[str]()
        while not self._stop.is_set():
            try:
                if self._listeners is None:
                    self._listeners = self._open_listeners()
                self.check(everything=everything, notified=notified)
            except Exception as exc:  # a worker must keep trying, and say why it cannot serve
                self._failed(exc)
                self._close_listeners()
                self._stop.wait(min(1.0, 10 * self.poll_interval_s))
                everything, notified = True, frozenset()
                continue
            self._ok()
            everything, notified = self._wait()

    def _wait(self) -> tuple[bool, frozenset[str]]:
        """Wait for a change: whether the next round looks at everything (a timeout, or polling),
        and which sources' captures signalled."""
        listeners = self._listeners or {}
        if any(listeners.get(name) is None for name, _ in self._owners()):
            self._stop.wait(self.poll_interval_s)
            for listener in listeners.values():
                listener.drain()
            return True, frozenset()
        ready, _, _ = select.select(
            [x.fileno() for x in listeners.values()], [], [], self.heartbeat_s
        )
        fired = frozenset(
            name
            for name, listener in listeners.items()
            if listener.fileno() in ready and listener.drain()
        )
        if not ready:
            for listener in listeners.values():
                lead = getattr(listener, "try_lead", None)
                if lead is not None:
                    lead()
        return not ready, fired - {""}

    def _open_listeners(self) -> dict[str, Listener]:
        """One per database that can wake this worker: "" for the store, else the source's name."""
        listeners: dict[str, Listener] = {}
        for name, owner in self._owners():
            make = getattr(owner, "listener", None)
            listener = make() if make is not None else None
            if listener is not None:
                listeners[name] = listener
        return listeners

    def _owners(self) -> list[tuple[str, Any]]:
        owners = [("", self.store)] if self.store is not None else []
        return owners + [(source.name, source) for source in self.sources]

    def _close_listeners(self) -> None:
        for listener in (self._listeners or {}).values():
            try:
                listener.close()
            except Exception:  # noqa: S110 - a broken connection closes as best it can
                pass
        self._listeners = None

    def _ok(self) -> None:
        if not self.health.available:
            logger.warning("registry reachable again; serving")
        self.health = Health(True, None, time.monotonic())

    def _failed(self, exc: Exception) -> None:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if self.health.available:
            logger.error("registry unavailable, answering 503: %s", reason)
        self.health = Health(False, reason, self.health.last_ok)


@dataclass
class Runtime:
    """A worker's registry with what keeps it current; ``close`` releases what it opened."""

    registry: Registry
    store: Any = None
    sources: tuple[Any, ...] = ()
    follower: Follower | None = None
    owned_store: bool = False

    def start(self) -> None:
        if self.follower is not None:
            self.follower.start()

    def close(self) -> None:
        if self.follower is not None:
            self.follower.stop()
        for source in self.sources:
            source.close()
        if self.owned_store and self.store is not None:
            self.store.close()

    def source_of(self, table: str) -> Any:
        """The SQL source a table is read from (None: an in-memory table)."""
        return next((s for s in self.sources if table in s.declared), None)

    def reload(
        self, table: str, rows: Mapping[str, Any], version: str | None = None
    ) -> ReloadResult:
        """``POST /admin/reload-table``: for a SQL table, written to the database and captured."""
        if self.source_of(table) is None:
            return self.registry.reload(table, rows, version)
        return self._write_sql(table, TableChange.reload(rows, version))

    def patch(
        self,
        table: str,
        upsert: Mapping[str, Any] | None = None,
        delete: list[str] | tuple[str, ...] = (),
        version: str | None = None,
    ) -> ReloadResult:
        """``POST /admin/patch-table``: for a SQL table, written to the database and captured."""
        if self.source_of(table) is None:
            return self.registry.patch(table, upsert, delete, version)
        return self._write_sql(table, TableChange.patch(upsert, delete, version))

    def _write_sql(self, table: str, change: TableChange) -> ReloadResult:
        source = self.source_of(table)
        with self.registry.transaction() as tx:
            consume(tx, source)  # judge the change against the database as it is now
            current = tx.state.snapshot(table)
            if change.replace:
                candidate = Snapshot.build(table, current.version, change.upsert)
                delta = diff(current, candidate)
            else:
                candidate = current.with_changes(current.version, change.upsert, change.delete)
                delta = diff(current, candidate, [*change.upsert, *change.delete])
            if change.version is not None:
                check_forward(change.version, current.version, table)
            if not delta and change.version is None:
                return tx.apply({table: TableChange()})[table]
            upsert = {k: candidate.plain_rows()[k] for k in (*delta.added, *delta.changed)}
            txid = source.write(table, upsert, delta.removed, change.version)
            applied = consume(tx, source)
            mine = [results for tid, results in applied if tid == txid and table in results]
            if not mine:  # SQLite names no transactions: the last change set holds this write
                mine = [results for _, results in applied if table in results]
            if not mine:
                raise ProtocolError(
                    ProblemType.INTERNAL, f"the write to {table!r} was not captured"
                )
            result = mine[-1][table]
        _trim(source, tx.positions[source.name])
        return result

    @property
    def available(self) -> bool:
        return self.follower is None or self.follower.available

    @property
    def unavailable_reason(self) -> str | None:
        return None if self.follower is None else self.follower.reason


def open_runtime(
    domain: Domain,
    *,
    registry: Registry | None = None,
    store: str | Path | Any = None,
    database: Any = None,
    log_capacity: int | None = None,
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S,
    heartbeat_s: float = DEFAULT_HEARTBEAT_S,
    store_schema: str | None = None,
) -> Runtime:
    """Open the registry ``domain`` is served from.

    ``store``: where the shared history lives — a SQLite path, a ``postgresql://`` URL, or an open
    store (the caller closes it); ``database``: the provider's database holding the domain's
    ``SQLTable``\\ s (a URL, an engine or a ``SQLSource``); ``registry``: serve an existing
    in-memory registry instead (no store, no SQL tables). With neither store nor registry, a
    fresh in-memory registry.
    """
    capacity = log_capacity if log_capacity is not None else _log_capacity_default()
    if registry is not None and (store is not None or database is not None):
        raise ValueError("pass either a registry or a store/database, not both")
    if domain.sql_tables and database is None and registry is None:
        raise ValueError(
            f"domain {domain.name!r} reads tables {sorted(domain.sql_tables)} from SQL; "
            "pass the database they live in"
        )
    if registry is not None:
        return Runtime(registry)
    source = _source(domain, database) if domain.sql_tables else None
    sources = (source,) if source is not None else ()
    owned = False
    opened = None
    try:
        if source is not None:
            source.open()
        if store is None:
            registry = _in_memory(domain, source, capacity)
        else:
            from .store import SQLRegistryStore, open_store

            if isinstance(store, SQLRegistryStore):
                opened = store
            else:
                opened = open_store(store, schema=store_schema)
                owned = True
            registry = opened.open_registry(
                domain, log_capacity=capacity, load_sql=_loader(source) if source else None
            )
            if source is not None:
                ingest(registry, source, verify=True)
    except BaseException:
        if owned and opened is not None:
            opened.close()
        if source is not None:
            source.close()
        raise
    follower = None
    if opened is not None or source is not None:
        follower = Follower(
            registry,
            sources,
            store=opened,
            poll_interval_s=poll_interval_s,
            heartbeat_s=heartbeat_s,
        )
    return Runtime(registry, opened, sources, follower, owned)


def _loader(source: Any) -> Any:
    def load() -> tuple[Mapping[str, Snapshot], Mapping[str, int]]:
        snapshots, head = source.load()
        return snapshots, {source.name: head}

    return load


def _source(domain: Domain, database: Any) -> Any:
    from .sql.source import SQLSource

    if isinstance(database, SQLSource):
        return database
    return SQLSource(database, domain.sql_tables)


def _in_memory(domain: Domain, source: Any, capacity: int) -> Registry:
    snapshots = [
        Snapshot.build(name, spec.version, spec.rows) for name, spec in domain.memory_tables.items()
    ]
    head = None
    if source is not None:
        sql, head = source.load()
        snapshots.extend(sql.values())
    registry = Registry(snapshots, domain.rules, log_capacity=capacity)
    if source is not None and head is not None:
        with registry.transaction() as tx:
            tx.set_position(source.name, head)
    return registry
