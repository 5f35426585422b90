"""One provider worker's configuration, as one frozen value (issue 21).

``create_app``, ``ContractService.open`` and ``open_runtime`` take a ``WorkerConfig`` (or the same
names as keyword options, which override it: ``WorkerOptions``, so a type checker refuses a
misspelt or mistyped one), so an option is spelled out here. Build one, pass it around, derive
variants with ``replace``:

    config = WorkerConfig(store="postgresql://api@db/api", database="postgresql://api@db/api")
    app = create_app(domain, config)
    canary = create_app(domain, config.replace(max_lag_s=5.0))
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack

from ..protocol.levels import Level
from .trust import TrustOptions
from .worker.timing import (
    DEFAULT_HEARTBEAT_S,
    DEFAULT_MAX_LAG_S,
    DEFAULT_POLL_INTERVAL_S,
    check_timing,
    stall_bound,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import URL, Engine

    from .capture.source import ChangeSource
    from .store.base import SQLRegistryStore
    from .store.dialect import Connection

DEFAULT_MAX_BODY_BYTES = 1 << 20
"""The largest request body a worker reads (1 MiB)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerConfig:
    """Everything a provider worker is opened with, except its domain (and an in-memory registry).

    ``store``: the shared history (SQLite path, ``postgresql://`` URL or an open store; many
    workers point at one) in ``store_schema`` (PostgreSQL); ``database``: the provider's database
    holding the domain's ``SQLTable``\\ s (a URL or an engine: a ``SQLSource``, triggers), or any
    ``ChangeSource`` (``LogicalSource``, a provider's own); ``admin_token``: defaults to
    ``$INVALIDATION_CONTRACTS_ADMIN_TOKEN`` (with neither, admin routes answer 401);
    ``metrics_token``: a read-only token for the metrics scrape and the operator page, refused
    (403) by every other admin route (default ``$INVALIDATION_CONTRACTS_METRICS_TOKEN``);
    ``protect_graph``: ``/contract/graph`` needs the admin token; ``max_body_bytes``: the request
    body cap; ``log_capacity``: changes the registry keeps for ``/contract/changes`` (None: the
    store's default); ``trust``: signed freshness and opaque names; ``poll_interval_s``,
    ``heartbeat_s``: how often a worker confirms it is current (SQLite; PostgreSQL);
    ``max_lag_s``: past this without a confirmation a worker answers 503 (SPEC §8.2);
    ``stall_timeout_s``: a follower call waiting this long on a database (a link gone silent) has
    its connections broken and reconnects (None: 20 s, or twice ``max_lag_s`` if longer).
    """

    level: Level | int | str = Level.RULES_FINGERPRINT
    store: str | Path | SQLRegistryStore[Connection] | None = None
    store_schema: str | None = None
    database: str | URL | Engine | ChangeSource | None = None
    admin_token: str | None = None
    metrics_token: str | None = None
    protect_graph: bool = False
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    log_capacity: int | None = None
    trust: TrustOptions | None = None
    poll_interval_s: float = DEFAULT_POLL_INTERVAL_S
    heartbeat_s: float = DEFAULT_HEARTBEAT_S
    max_lag_s: float = DEFAULT_MAX_LAG_S
    stall_timeout_s: float | None = None

    def __post_init__(self) -> None:
        check_timing(self.poll_interval_s, self.heartbeat_s, self.max_lag_s)
        stall_bound(self.stall_timeout_s, self.max_lag_s)
        Level.parse(self.level)  # an unknown level is refused here, not at the first request
        if self.max_body_bytes <= 0:
            raise ValueError(f"max_body_bytes must be positive, not {self.max_body_bytes}")

    def replace(self, **changes: Unpack[WorkerOptions]) -> WorkerConfig:
        """A copy with ``changes`` (``TypeError`` naming an unknown option)."""
        if not changes:
            return self
        unknown = sorted(set(changes) - OPTION_NAMES)
        if unknown:
            raise TypeError(
                f"unknown worker option(s) {', '.join(unknown)}; "
                f"WorkerConfig has {', '.join(sorted(OPTION_NAMES))}"
            )
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, config: WorkerConfig | None, options: WorkerOptions) -> WorkerConfig:
        """``config`` (default: all defaults) with the keyword ``options`` applied over it."""
        return (config if config is not None else cls()).replace(**options)


class WorkerOptions(TypedDict, total=False):
    """``WorkerConfig``'s fields as keyword options (``**options: Unpack[WorkerOptions]``), each
    optional: what the entry points accept over a config. The same names and types as
    ``WorkerConfig`` (a test holds them equal)."""

    level: Level | int | str
    store: str | Path | SQLRegistryStore[Connection] | None
    store_schema: str | None
    database: str | URL | Engine | ChangeSource | None
    admin_token: str | None
    metrics_token: str | None
    protect_graph: bool
    max_body_bytes: int
    log_capacity: int | None
    trust: TrustOptions | None
    poll_interval_s: float
    heartbeat_s: float
    max_lag_s: float
    stall_timeout_s: float | None


OPTION_NAMES = frozenset(field.name for field in dataclasses.fields(WorkerConfig))
