"""Provider instrumentation: the contract's life as OpenTelemetry metrics and spans.

``ProviderTelemetry`` is what a ``Provider`` and its registry tell (``Provider.telemetry``, a
registry listener): change sets per table and origin, rows changed, changes adopted from other
workers, answers by route and status, 422 suggestions by type and route, contract bytes per
response, render-cache hits, and the worker's position, availability and time since it last
checked the shared head. A span around each policy evaluation and each change carries the
position (``contract.epoch``, ``contract.seq``).

The answers are counted by ``observe.answers`` (one addition per 422 on the request path), the
gauges and client totals are read when the SDK collects (``observe.gauges``).

It reads the global meter and tracer providers unless given its own, so with no SDK configured
every instrument is the API's no-op. It never raises into a request: a failure inside it is
counted (``invalidation_contracts.telemetry.dropped``) and logged once.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

from opentelemetry import metrics, trace

from .. import __version__
from ..protocol.models import ChangesFeed
from ..protocol.problems import ProtocolError
from ..server.domain import Route
from ..server.origin import current_origin
from ..server.provider import Outcome
from ..server.state import RegistryState
from .answers import AnswerCounters
from .gauges import watch_scores, watch_worker
from .journal import ChangeJournal, ChangeSet, change_set
from .totals import Labels, TotalCounter

LAG_BUCKETS_S = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""The commit-to-serve lag histogram's bucket bounds (seconds)."""
ORIGINS = ("captured", "admin", "reconciled", "direct")
"""Where a change set comes from (``contract.changes``' ``origin``); each is exported at 0."""

if TYPE_CHECKING:
    from ..server.worker.contract import ContractWorker
    from .latency import UntilRecorded
    from .prometheus import PrometheusExposition
    from .scoring import Scores

logger = logging.getLogger(__name__)

SCOPE = "invalidation_contracts.server"
LAG_DESCRIPTION = (
    "Seconds from a change set's commit to the shared history until this worker serves it (each "
    "change set, on every worker; the writer's own is its commit time)."
)
ANSWERED = (200, 422)
"""The statuses a domain route answers a valid request with: reported at 0 from the start."""
"""The instrumentation scope of every provider instrument."""
_TRACER_RECHECK_S = 1.0
"""How often the global tracer provider is looked up again while it is the API's proxy."""
_NO_TRACING = frozenset({"ProxyTracerProvider", "NoOpTracerProvider"})
_NO_SPAN = nullcontext()


ChangeHook = Callable[[ChangeSet, RegistryState, RegistryState], None]
CheckHook = Callable[[Route[Any], Mapping[str, Any], RegistryState, Outcome | None], None]


class ProviderTelemetry:
    """The instruments of one worker's contract (see the module docstring)."""

    def __init__(
        self,
        service: ContractWorker,
        *,
        meter_provider: metrics.MeterProvider | None = None,
        tracer_provider: trace.TracerProvider | None = None,
        journal: ChangeJournal | None = None,
        worker: str | None = None,
    ) -> None:
        self.service = service
        self.worker = worker if worker is not None else str(os.getpid())
        self.journal = journal if journal is not None else ChangeJournal()
        self.change_hooks: list[ChangeHook] = []
        self.check_hooks: list[CheckHook] = []
        meter = (meter_provider or metrics.get_meter_provider()).get_meter(SCOPE, __version__)
        self.meter = meter
        self._tracer_provider = tracer_provider
        self._tracer: tuple[Any, trace.Tracer | None, bool, float] | None = None

        tables = sorted(service.registry.state.tables)
        per_table = [(("table", t), ("origin", o)) for t in tables for o in ORIGINS]
        this_worker = [(("worker", self.worker),)]

        def counter(
            name: str, *, unit: str, description: str, zero: Sequence[Labels] = ()
        ) -> TotalCounter:
            return TotalCounter(meter, name, unit=unit, description=description, zero=zero)

        self.changes = counter(
            "invalidation_contracts.contract.changes",
            unit="{change}",
            description="Change sets that moved a table, by table and origin "
            "(captured, admin, reconciled, direct); counted by the worker that made them.",
            zero=per_table,
        )
        self.rows_changed = counter(
            "invalidation_contracts.contract.rows_changed",
            unit="{row}",
            description="Rows added, removed or changed, by table and origin.",
            zero=per_table,
        )
        self.adopted = counter(
            "invalidation_contracts.worker.adopted_changes",
            unit="{change}",
            description="Change sets this worker adopted from the shared history.",
            zero=this_worker,
        )
        self.dropped = counter(
            "invalidation_contracts.telemetry.dropped",
            unit="{event}",
            description="Telemetry this worker could not record (an error inside it).",
            zero=this_worker,
        )
        self.lag = meter.create_histogram(
            "invalidation_contracts.worker.lag",
            unit="s",
            description=LAG_DESCRIPTION,
            explicit_bucket_boundaries_advisory=LAG_BUCKETS_S,
        )
        self._lag_zero: UntilRecorded | None = None
        self.answers = AnswerCounters(meter)
        """Responses, refusals and contract bytes (``observe.answers``)."""
        self.answers.zero(self.paths, ANSWERED)
        watch_worker(meter, service, self.worker)
        self._warned = False

    @property
    def paths(self) -> list[str]:
        """The domain's route templates (none for a worker without a domain: a bare runtime)."""
        domain = getattr(self.service, "domain", None)
        return [] if domain is None else [route.path for route in domain.routes]

    def zero_in(self, exposition: PrometheusExposition) -> None:
        """Report at 0 in ``exposition`` what the SDK exports only from its first record: the
        lag histogram (until this worker serves its first change set) and the request
        durations of the domain's routes."""
        from .latency import UntilRecorded

        exposition.durations.zero(self.paths, ANSWERED)
        self._lag_zero = UntilRecorded(
            "invalidation_contracts_worker_lag_seconds",
            LAG_DESCRIPTION,
            LAG_BUCKETS_S,
            {
                "otel_scope_name": SCOPE,
                "otel_scope_schema_url": "",
                "otel_scope_version": __version__,
                "worker": self.worker,
            },
        )
        exposition.registry.register(self._lag_zero)

    # -- what a Provider tells (server.provider.Telemetry) ---------------------------------------

    @property
    def tracer(self) -> trace.Tracer | None:
        """The tracer of the tracer provider (None while it is the API's no-op or proxy provider:
        then no span is even started). The global provider is looked up at most once a second
        until a real one is set, which can never be replaced (the API refuses to), so a request
        pays one clock read, not the API's lookup."""
        cached = self._tracer
        if cached is not None and (cached[2] or time.monotonic() < cached[3]):
            return cached[1]
        provider = self._tracer_provider or trace.get_tracer_provider()
        real = type(provider).__name__ not in _NO_TRACING
        tracer = provider.get_tracer(SCOPE, __version__) if real else None
        final = real or self._tracer_provider is not None
        self._tracer = (provider, tracer, final, time.monotonic() + _TRACER_RECHECK_S)
        return tracer

    def evaluating(
        self, route: Route[Any], state: RegistryState
    ) -> AbstractContextManager[Any] | None:
        tracer = self.tracer
        if tracer is None:
            return None
        return tracer.start_as_current_span(
            "invalidation_contracts.policy_evaluation",
            attributes={
                "http.route": route.path,
                "contract.epoch": state.epoch,
                "contract.seq": state.seq,
            },
        )

    def checked(
        self,
        route: Route[Any],
        request: Mapping[str, Any],
        state: RegistryState,
        refusal: Outcome | None,
    ) -> None:
        try:
            if refusal is not None:
                self.answers.refused(route, refusal)
            for hook in self.check_hooks:
                hook(route, request, state, refusal)
        except Exception:
            self._failed("a policy check")

    def answered(self, route: Route[Any], outcome: Outcome) -> None:
        try:
            self.answers.answered(route, outcome.status, outcome.content)
        except Exception:
            self._failed("an answer")

    def stamped(self, route: Route[Any], status: int, content: bytes) -> None:
        try:
            self.answers.answered(route, status, content)
        except Exception:
            self._failed("an answer")

    # -- what the registry tells (Registry.subscribe) -------------------------------------------

    def moved(self, before: RegistryState, after: RegistryState) -> None:
        """A registry listener: count the change sets, journal the move, tell the change hooks.

        Each change set is counted once, by the worker that made it: the registry announces
        what a worker adopted from the shared history apart (origin ``adopted``), and a move
        that holds several change sets (a backlog consumed in one transaction) counts each one
        from the change log, a reconciled one as ``reconciled``."""
        try:
            origin = current_origin()
            worker = (("worker", self.worker),)
            feed = self._feed(before, after)
            if origin == "adopted":
                same = after.epoch == before.epoch
                self.adopted.add(after.seq - before.seq if same else 1, worker)
            elif after.epoch != before.epoch:
                origin = "reconciled"
            origin = origin or "direct"
            tracer = self.tracer
            span = (
                _NO_SPAN
                if tracer is None
                else tracer.start_as_current_span(
                    "invalidation_contracts.change",
                    attributes={
                        "contract.epoch": after.epoch,
                        "contract.seq": after.seq,
                        "contract.origin": origin,
                    },
                )
            )
            with span:
                change = change_set(
                    before,
                    after,
                    origin,
                    keys=None if feed is None else _keys(feed),
                    max_rows=self.journal.max_rows,
                )
            if origin != "adopted":
                self._count(change, feed, origin)
            self._served(before, after)
            self.journal.add(change)
            for hook in self.change_hooks:
                hook(change, before, after)
        except Exception:
            self._failed("a registry change")

    def _count(self, change: ChangeSet, feed: ChangesFeed | None, origin: str) -> None:
        """Add the change sets of one move to ``contract.changes`` and ``rows_changed``: one per
        table transition in the log (its own origin when reconciled); without the log (a new
        epoch), one per table the move changed."""
        if feed is None:
            for move in change.tables:
                labels = (("table", move.table), ("origin", origin))
                self.changes.add(1, labels)
                self.rows_changed.add(move.changed_rows, labels)
            return
        origins: dict[tuple[int, str], str] = {}
        for transition in feed.tables:
            own = "reconciled" if transition.reconciled else origin
            origins[(transition.seq, transition.table)] = own
            self.changes.add(1, (("table", transition.table), ("origin", own)))
        rows: dict[tuple[str, str], int] = {}
        for row in feed.rows:
            where = (row.table, origins.get((row.seq, row.table), origin))
            rows[where] = rows.get(where, 0) + 1
        for (table, own), count in rows.items():
            self.rows_changed.add(count, (("table", table), ("origin", own)))

    def _served(self, before: RegistryState, after: RegistryState) -> None:
        """Observe the commit-to-serve lag of each change set this worker now serves (those
        whose commit time the history kept; none across a new epoch)."""
        if before.epoch != after.epoch:
            return
        now = time.time()
        worker = {"worker": self.worker}
        for record in self.service.registry.log.between(before.seq, after.seq):
            if record.committed_at is not None:
                self.lag.record(max(0.0, now - record.committed_at), worker)
                if self._lag_zero is not None:
                    self._lag_zero.recorded = True

    def _feed(self, before: RegistryState, after: RegistryState) -> ChangesFeed | None:
        """The change log between the two states (None: another epoch, or beyond the log)."""
        if before.epoch != after.epoch:
            return None
        try:
            return self.service.registry.log.since(before.seq, after.seq, after.epoch)
        except ProtocolError:
            return None

    def watch_scores(self, scores: Scores) -> None:
        """Export the per-client figures summed over clients (``observe.gauges.watch_scores``)."""
        watch_scores(self.meter, scores, self.worker)

    def _failed(self, what: str) -> None:
        try:
            self.dropped.add(1, (("worker", self.worker),))
        except Exception:  # noqa: S110 - the telemetry must never fail the request
            pass
        if not self._warned:
            self._warned = True
            logger.exception("telemetry could not record %s; the request is unaffected", what)


def _keys(feed: ChangesFeed) -> dict[str, list[str]]:
    """The row keys each table's change records name."""
    keys: dict[str, list[str]] = {t.table: [] for t in feed.tables}
    for row in feed.rows:
        keys.setdefault(row.table, []).append(row.key)
    return keys
