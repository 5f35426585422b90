"""``ContractWorker``: one worker's contract, framework free, and what every transport shares.

It holds the provider (domain, level, registry), the run-time that keeps the registry at the
shared head (``worker.runtime``), the admin auth and the limits. The transports — the HTTP routers
and app (``server.http.ContractService`` adds them), the MCP server — are thin users of it.

Which state a request is answered from: the worker's current one, except that a client ahead of
the worker (its ``Contract-Since`` past the worker's seq, or another epoch) makes the worker catch
up first, so a client alternating between workers never sees its history go back, nor gets a 410
for a position another worker gave it. A worker that cannot read its databases answers 503.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any, Self, Unpack

from anyio import to_thread

from ...protocol.levels import Level
from ...protocol.models import (
    ChangeSetRequest,
    ChangeSetResult,
    ContractFields,
    QuarantinedRow,
    QuarantineListing,
    ReloadResult,
    RulesResult,
)
from ...protocol.problems import ProblemType, ProtocolError
from ..asked import PLAIN, Asked
from ..auth import ADMIN_TOKEN_ENV, METRICS_TOKEN_ENV, BearerAuth
from ..capture.steps import SourceError
from ..config import DEFAULT_MAX_BODY_BYTES, WorkerConfig, WorkerOptions
from ..domain import Domain, Route
from ..provider import Outcome, Provider
from ..registry import Registry
from ..rules import Rule
from ..state import RegistryState
from ..store import StorageError
from ..transitions import TableChange
from ..trust import TrustOptions
from .runtime import Runtime, WorkerHealth, open_runtime

RETRY_AFTER_S = 1


class ContractWorker:
    """The contract of one domain in one worker process, framework free: what every transport
    (the HTTP routers, the MCP server) answers from."""

    def __init__(
        self,
        provider: Provider,
        runtime: Runtime,
        *,
        auth: BearerAuth,
        protect_graph: bool = False,
        max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
        trust: TrustOptions | None = None,
    ) -> None:
        self.provider = provider
        self.runtime = runtime
        self.auth = auth
        self.protect_graph = protect_graph
        self.max_body_bytes = max_body_bytes
        self.trust = trust if trust is not None else TrustOptions()
        self.signer = self.trust.signer()
        self._started = False

    @classmethod
    def open(
        cls,
        domain: Domain,
        config: WorkerConfig | None = None,
        *,
        registry: Registry | None = None,
        **options: Unpack[WorkerOptions],
    ) -> Self:
        """Open the registry of ``domain`` and build the worker around it, as ``config`` (with
        keyword ``options`` over it: ``WorkerConfig`` names, e.g. ``store=``, ``database=``,
        ``admin_token=``, ``max_lag_s=``) says; ``registry``: an existing in-memory registry.
        """
        config = WorkerConfig.of(config, options)
        trust = config.trust if config.trust is not None else TrustOptions()
        runtime = open_runtime(domain, config, registry=registry)
        token = config.admin_token
        token = token if token is not None else os.environ.get(ADMIN_TOKEN_ENV)
        provider = Provider(
            domain, runtime.registry, Level.parse(config.level), opaque=trust.opaque()
        )
        provider.refused = runtime.refused
        reader = config.metrics_token
        reader = reader if reader is not None else os.environ.get(METRICS_TOKEN_ENV)
        return cls(
            provider,
            runtime,
            auth=BearerAuth(token, reader),
            protect_graph=config.protect_graph,
            max_body_bytes=config.max_body_bytes,
            trust=trust,
        )

    # -- what the routes read ------------------------------------------------------------------

    @property
    def domain(self) -> Domain:
        return self.provider.domain

    @property
    def registry(self) -> Registry:
        return self.provider.registry

    @property
    def level(self) -> Level:
        return self.provider.level

    @property
    def available(self) -> bool:
        return self.runtime.available

    def health(self) -> WorkerHealth:
        """This worker's liveness, readiness and last confirmed position (no I/O): for an app's
        own health check, or the ``/contract/live`` and ``/contract/ready`` routes."""
        return self.runtime.health()

    def contract(
        self, state: RegistryState, since: int | None = None, epoch: str | None = None
    ) -> ContractFields:
        """The response-level fields of ``state`` at the server's level."""
        return self.provider.contract(state, since, epoch)

    def require_level(self, level: Level, what: str) -> None:
        if self.level < level:
            raise ProtocolError(
                ProblemType.LEVEL_TOO_LOW,
                f"{what} is served from level {int(level)}; this server runs {int(self.level)}",
            )

    def behind(self, since: int | None, epoch: str | None) -> bool:
        """Whether the client knows a position this worker has not reached (no I/O)."""
        if self.runtime.follower is None:
            return False
        state = self.registry.state
        return (since is not None and since > state.seq) or (
            epoch is not None and epoch != state.epoch
        )

    def state(self, since: int | None = None, epoch: str | None = None) -> RegistryState:
        """The state to answer a client at ``since``/``epoch`` from (catches up when behind).

        May read the store: call it from a worker thread (``state_for`` does). Raises 503
        ``registry-unavailable`` when the worker cannot vouch for its state.
        """
        if self.behind(since, epoch):
            # A worker that cannot vouch for its state answers 503 at once: catching up would
            # wait on the databases (or on its stuck follower) for as long as the outage lasts.
            if not self.runtime.available:
                raise unavailable(self.runtime.unavailable_reason)
            follower = self.runtime.follower
            try:
                self.registry.sync(timeout=follower.max_lag_s if follower is not None else None)
            except StorageError as exc:
                raise unavailable(str(exc)) from None
            except TimeoutError as exc:
                raise unavailable(f"cannot catch up with the client's position: {exc}") from None
        return self.vouched()

    async def state_for(self, since: int | None = None, epoch: str | None = None) -> RegistryState:
        """``state`` from an event loop: a catch-up runs in a worker thread."""
        if (since is not None or epoch is not None) and self.behind(since, epoch):
            return await to_thread.run_sync(functools.partial(self.state, since, epoch))
        return self.vouched()  # not behind: what ``state`` returns, without asking again

    def vouched(self) -> RegistryState:
        """The current state without catching up (no I/O: for a request that names no
        position), or 503 ``registry-unavailable`` when this worker cannot vouch for it."""
        if not self.runtime.available:
            raise unavailable(self.runtime.unavailable_reason)
        return self.registry.state

    def handle(self, route: Route[Any], payload: object, asked: Asked = PLAIN) -> Outcome:
        """A standalone domain route: policies, then the route's success handler (may do I/O)."""
        state = self.state(asked.since, asked.epoch)
        return self.provider.handle(route, payload, asked, state=state)

    # -- writes ----------------------------------------------------------------------------------

    def reload(
        self, table: str, rows: Mapping[str, Any], version: str | None = None
    ) -> ReloadResult:
        self._writable()
        return self.runtime.reload(table, rows, version)

    def patch(
        self,
        table: str,
        upsert: Mapping[str, Any],
        delete: list[str],
        version: str | None = None,
    ) -> ReloadResult:
        self._writable()
        return self.runtime.patch(table, upsert, delete, version)

    def change_set(self, request: ChangeSetRequest) -> ChangeSetResult:
        """``POST /admin/change-set``: every table of ``request`` under one seq."""
        self._writable()
        changes = {
            item.table: (
                TableChange.reload(item.rows, item.version)
                if item.rows is not None
                else TableChange.patch(item.upsert, item.delete, item.version)
            )
            for item in request.tables
        }
        results = self.runtime.change_set(changes)
        state = self.registry.state
        return ChangeSetResult(
            results=[results[item.table] for item in request.tables],
            contract_seq=state.seq,
            contract_epoch=state.epoch,
        )

    def quarantined(self) -> QuarantineListing:
        """``GET /admin/quarantine``: the rows the contract could not carry (reads the database)."""
        try:
            entries = self.runtime.quarantined()
        except (StorageError, SourceError) as exc:
            raise unavailable(str(exc)) from None
        return QuarantineListing(
            quarantined=[
                QuarantinedRow(detail=e.reason, table=e.table, key=e.key, capture_id=e.capture_id)
                for e in entries
            ]
        )

    def set_rules(self, rules: list[Rule]) -> RulesResult:
        self._writable()
        return self.registry.set_rules(rules)

    def _writable(self) -> None:
        if not self.runtime.writable:
            raise unavailable(self.runtime.unavailable_reason)

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> None:
        """Start following the shared history (idempotent)."""
        if not self._started:
            self.runtime.start()
            self._started = True

    def close(self) -> None:
        """Stop following and release what ``open`` opened."""
        self.runtime.close()
        self._started = False


def unavailable(reason: str | None) -> ProtocolError:
    detail = "this worker cannot read the registry, so it answers nothing it cannot vouch for"
    return ProtocolError(
        ProblemType.REGISTRY_UNAVAILABLE,
        f"{detail}: {reason}" if reason else detail,
        headers={"Retry-After": str(RETRY_AFTER_S)},
    )
