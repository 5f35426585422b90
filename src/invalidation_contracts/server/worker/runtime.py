"""One worker's registry at run time: opened from its store and the provider's database, then kept
at the head of the shared history by a background follower (``follower``).

``open_runtime`` opens (or initialises) the registry: from a store shared by workers (SQLite file
or PostgreSQL), or in memory; SQL-backed tables come from the provider's database, whose change
capture it installs. Writes made while no worker ran are consumed at once, and the stored tables
are checked against the database: a difference the capture does not explain starts a new epoch
(410 for old positions), never a silent skip (``ingest``).
"""

from __future__ import annotations

from collections import ChainMap
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Unpack

from ...protocol.models import ReloadResult
from ...protocol.problems import ProblemType, ProtocolError
from ..capture.steps import SourceError, consume, ingest, trim
from ..capture.steps import start as start_source
from ..config import WorkerConfig, WorkerOptions
from ..domain import Domain
from ..origin import change_origin
from ..registry import Registry
from ..tables import Snapshot
from ..transitions import TableChange
from ..versions import check_version

if TYPE_CHECKING:
    from sqlalchemy.engine import URL, Engine

    from ..capture.records import QuarantineEntry
    from ..capture.source import ChangeSource
    from ..store.base import SQLRegistryStore
    from ..store.dialect import Connection
from .follower import Follower, FollowerState
from .timing import DEFAULT_HEARTBEAT_S, DEFAULT_MAX_LAG_S, DEFAULT_POLL_INTERVAL_S

__all__ = [
    "DEFAULT_HEARTBEAT_S",
    "DEFAULT_MAX_LAG_S",
    "DEFAULT_POLL_INTERVAL_S",
    "Follower",
    "Runtime",
    "WorkerHealth",
    "SourceError",
    "ingest",
    "open_runtime",
]


def _log_capacity_default() -> int:
    from ..store.base import DEFAULT_LOG_CAPACITY

    return DEFAULT_LOG_CAPACITY


@dataclass(frozen=True)
class WorkerHealth:
    """What a worker knows of itself (no I/O): the liveness and readiness probes' answer.

    ``ready``: it may stamp (confirmed current within ``max_lag_s``); ``live``: its follower runs
    (if not, only a restart helps); ``lag_s``: seconds since it last confirmed it was current (0
    for a registry nothing else writes); ``leads``: per SQL source, whether this worker consumes
    its capture.
    """

    live: bool
    ready: bool
    state: FollowerState | str
    epoch: str
    seq: int
    lag_s: float
    max_lag_s: float
    leads: Mapping[str, bool]
    reason: str | None
    backlog: Mapping[str, int | None] = field(default_factory=dict)
    """Per source this worker is catching up with: capture records still waiting (None:
    unknown)."""


@dataclass
class Runtime:
    """A worker's registry with what keeps it current; ``close`` releases what it opened."""

    registry: Registry
    store: SQLRegistryStore[Connection] | None = None
    sources: tuple[ChangeSource, ...] = ()
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

    @property
    def refused(self) -> Mapping[str, str]:
        """The tables this worker's routes refuse to read, and why (a live view: a declared
        column renamed, dropped or retyped; ``SQLSource.rebind``)."""
        return ChainMap(*(getattr(source, "broken", {}) for source in self.sources))

    def source_of(self, table: str) -> ChangeSource | None:
        """The SQL source a table is read from (None: an in-memory table)."""
        return next((s for s in self.sources if table in s.declared), None)

    def reload(
        self, table: str, rows: Mapping[str, Any], version: str | None = None
    ) -> ReloadResult:
        """``POST /admin/reload-table``: for a SQL table, written to the database and captured."""
        with change_origin("admin"):
            source = self.source_of(table)
            if source is None:
                return self.registry.reload(table, rows, version)
            return self._write_sql(source, table, TableChange.reload(rows, version))

    def patch(
        self,
        table: str,
        upsert: Mapping[str, Any] | None = None,
        delete: list[str] | tuple[str, ...] = (),
        version: str | None = None,
    ) -> ReloadResult:
        """``POST /admin/patch-table``: for a SQL table, written to the database and captured."""
        with change_origin("admin"):
            source = self.source_of(table)
            if source is None:
                return self.registry.patch(table, upsert, delete, version)
            return self._write_sql(source, table, TableChange.patch(upsert, delete, version))

    def change_set(self, changes: Mapping[str, TableChange]) -> Mapping[str, ReloadResult]:
        """``POST /admin/change-set``: several in-memory tables under one seq. A table read from
        the database changes with the database's own transactions (SPEC §8.3), so it is refused."""
        sql = sorted(t for t in changes if self.source_of(t) is not None)
        if sql:
            raise ProtocolError(
                ProblemType.INVALID_REQUEST,
                f"table {sql[0]!r} is read from the provider's database: change it in one "
                "database transaction, which is one change set (SPEC 8.3)",
            )
        with change_origin("admin"):
            return self.registry.apply(changes)

    def _write_sql(self, source: ChangeSource, table: str, change: TableChange) -> ReloadResult:
        with self.registry.transaction() as tx:
            consume(tx, source)  # judge the change against the database as it is now
            current = tx.state.snapshot(table)
            candidate, delta = change.candidate(current)
            if change.version is not None:
                # before the database write: a refusal after it would strand a committed write
                check_version(change.version, current.version, tx.served(table), table)
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
        trim(source, tx.positions.get(source.name))
        return result

    def quarantined(self) -> list[QuarantineEntry]:
        """Every SQL source's quarantined rows (``capture.records.QuarantineEntry``; reads the
        database)."""
        return [entry for source in self.sources for entry in source.quarantined()]

    @property
    def available(self) -> bool:
        return self.follower is None or self.follower.available

    @property
    def writable(self) -> bool:
        """Whether a write may go ahead: it catches up with the history (and the capture) under
        the write lock first, so a worker whose follower never started may write; a follower
        that fails says the databases do."""
        follower = self.follower
        return follower is None or follower.available or follower.never_started

    @property
    def unavailable_reason(self) -> str | None:
        return None if self.follower is None else self.follower.reason

    def health(self) -> WorkerHealth:
        """This worker's liveness and readiness, with its last confirmed position (no I/O)."""
        state = self.registry.state
        follower = self.follower
        if follower is None:
            return WorkerHealth(
                True, True, "standalone", state.epoch, state.seq, 0.0, 0.0, {}, None
            )
        return WorkerHealth(
            live=follower.live,
            ready=follower.available,
            state=follower.state,
            epoch=state.epoch,
            seq=state.seq,
            lag_s=round(follower.lag_s, 3),
            max_lag_s=follower.max_lag_s,
            leads=follower.leads(),
            reason=follower.reason,
            backlog=dict(follower.backlog),
        )


def open_runtime(
    domain: Domain,
    config: WorkerConfig | None = None,
    *,
    registry: Registry | None = None,
    **options: Unpack[WorkerOptions],
) -> Runtime:
    """Open the registry ``domain`` is served from, as ``config`` (with keyword ``options``
    over it, ``WorkerConfig`` names) says.

    ``config.store``: where the shared history lives — a SQLite path, a ``postgresql://`` URL, or
    an open store (the caller closes it); ``config.database``: the provider's database holding the
    domain's ``SQLTable``\\ s (a URL, an engine, or any ``ChangeSource``); ``registry``: serve an
    existing in-memory registry instead (no store, no SQL tables). With neither store nor
    registry, a fresh in-memory registry.
    """
    config = WorkerConfig.of(config, options)
    store, database, store_schema = config.store, config.database, config.store_schema
    log_capacity = config.log_capacity
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
    source = (
        _source(domain, database, store_schema)
        if domain.sql_tables and database is not None
        else None
    )
    sources = (source,) if source is not None else ()
    owned = False
    opened = None
    postponed = None
    try:
        if source is not None:
            source.open()
        if store is None:
            registry = _in_memory(domain, source, capacity)
        else:
            from ..store import SQLRegistryStore, open_store

            if isinstance(store, SQLRegistryStore):
                opened = store
            else:
                opened = open_store(store, schema=store_schema)
                owned = True
            registry = opened.open_registry(
                domain, log_capacity=capacity, load_sql=_loader(source) if source else None
            )
            if source is not None:
                mark_loaded = getattr(source, "mark_loaded", None)
                if mark_loaded is not None:  # this worker initialised the registry: verified
                    mark_loaded(registry.state)
                postponed = start_source(registry, source)
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
            poll_interval_s=config.poll_interval_s,
            heartbeat_s=config.heartbeat_s,
            max_lag_s=config.max_lag_s,
            stall_timeout_s=config.stall_timeout_s,
        )
        if source is not None and postponed is not None:
            follower.reconciler.adopt(source.name, postponed)
    return Runtime(registry, opened, sources, follower, owned)


def _loader(source: ChangeSource) -> Callable[[], tuple[Mapping[str, Snapshot], Mapping[str, int]]]:
    def load() -> tuple[Mapping[str, Snapshot], Mapping[str, int]]:
        snapshots, head = source.load()
        return snapshots, {source.name: head}

    return load


def _source(
    domain: Domain, database: str | URL | Engine | ChangeSource, store_schema: str | None
) -> ChangeSource:
    """``database`` itself when it is a ``ChangeSource`` (any: triggers, logical decoding, a
    provider's own), else the trigger capture over that URL or engine. That capture lives in the
    registry's schema (the default one for a SQLite registry): two providers with registries of
    their own on one database capture apart (their own lead, consumer and trim)."""
    from ..capture.source import ChangeSource

    if isinstance(database, ChangeSource):
        return database
    from ..sql.capture import DEFAULT_CAPTURE_SCHEMA
    from ..sql.source import SQLSource

    return SQLSource(
        database, domain.sql_tables, capture_schema=store_schema or DEFAULT_CAPTURE_SCHEMA
    )


def _in_memory(domain: Domain, source: ChangeSource | None, capacity: int) -> Registry:
    snapshots = domain.initial_snapshots()
    head = None
    if source is not None:
        sql, head = source.load()
        snapshots.extend(sql.values())
    registry = Registry(snapshots, domain.rules, log_capacity=capacity)
    if source is not None and head is not None:
        with registry.transaction() as tx:
            tx.set_position(source.name, head)
    return registry
