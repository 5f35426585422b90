"""Provider instrumentation: the contract's life as OpenTelemetry metrics and spans.

``ProviderTelemetry`` is what a ``Provider`` and its registry tell (``Provider.telemetry``, a
registry listener): change sets per table and origin, rows changed, changes adopted from other
workers, answers by route and status, 422 suggestions by type and route, contract bytes per
response, render-cache hits, and the worker's position, availability and time since it last
checked the shared head. A span around each policy evaluation and each change carries the
position (``contract.epoch``, ``contract.seq``).

It reads the global meter and tracer providers unless given its own, so with no SDK configured
every instrument is the API's no-op. It never raises into a request: a failure inside it is
counted (``invalidation_contracts.telemetry.dropped``) and logged once.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any

from .._extras import require_extra

require_extra("otel", "opentelemetry")

from opentelemetry import metrics, trace  # noqa: E402
from opentelemetry.metrics import CallbackOptions, Observation  # noqa: E402

from .. import __version__  # noqa: E402
from ..client.stats import contract_bytes  # noqa: E402
from ..protocol.problems import ProtocolError  # noqa: E402
from ..server.domain import Route  # noqa: E402
from ..server.origin import current_origin  # noqa: E402
from ..server.provider import Outcome  # noqa: E402
from ..server.state import RegistryState  # noqa: E402
from .journal import ChangeJournal, ChangeSet, change_set  # noqa: E402
from .totals import Labels, TotalCounter  # noqa: E402

logger = logging.getLogger(__name__)

SCOPE = "invalidation_contracts.server"
"""The instrumentation scope of every provider instrument."""
_BYTES_CACHE = 512
"""Contract-byte counts remembered per encoded answer (a cached 422 is the same bytes object)."""

_CLIENT_UNITS = {
    "episodes": "{episode}",
    "first_try": "{episode}",
    "retries": "{request}",
    "stale_values_sent": "{fix}",
}
_TRACER_RECHECK_S = 1.0
"""How often the global tracer provider is looked up again while it is the API's proxy."""
_NO_TRACING = frozenset({"ProxyTracerProvider", "NoOpTracerProvider"})
_NO_SPAN = nullcontext()


@dataclass(frozen=True, slots=True)
class _Refusal:
    """What the counters record for one 422 document on one route."""

    content: bytes
    route: str
    refusals: tuple[Labels, ...]
    labels: Labels
    size: int


ChangeHook = Callable[[ChangeSet, RegistryState, RegistryState], None]
CheckHook = Callable[[Route[Any], Mapping[str, Any], RegistryState, Outcome | None], None]


class ProviderTelemetry:
    """The instruments of one worker's contract (see the module docstring)."""

    def __init__(
        self,
        service: Any,
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

        self._counting = threading.Lock()
        """Shared by the request path's counters: a refusal takes it once for all of them."""

        def counter(name: str, *, unit: str, description: str) -> TotalCounter:
            return TotalCounter(
                meter, name, unit=unit, description=description, lock=self._counting
            )

        self.changes = counter(
            "invalidation_contracts.contract.changes",
            unit="{change}",
            description="Change sets that moved a table, by table and origin "
            "(captured, admin, reconciled, direct); counted by the worker that made them.",
        )
        self.rows_changed = counter(
            "invalidation_contracts.contract.rows_changed",
            unit="{row}",
            description="Rows added, removed or changed, by table and origin.",
        )
        self.adopted = counter(
            "invalidation_contracts.worker.adopted_changes",
            unit="{change}",
            description="Change sets this worker adopted from the shared history.",
        )
        self.responses = counter(
            "invalidation_contracts.http.responses",
            unit="{response}",
            description="Answers of the domain's routes, by route and status.",
        )
        self.refusals = counter(
            "invalidation_contracts.http.refusals",
            unit="{suggestion}",
            description="Violations answered 422, by route and suggestion type.",
        )
        self.contract_bytes = counter(
            "invalidation_contracts.http.contract_bytes",
            unit="By",
            description="Bytes of the answers that are contract (protocol.wirecost), by route "
            "and status; over http.responses, the mean per answer.",
        )
        self.dropped = counter(
            "invalidation_contracts.telemetry.dropped",
            unit="{event}",
            description="Telemetry this worker could not record (an error inside it).",
        )
        meter.create_observable_counter(
            "invalidation_contracts.render_cache.hits",
            callbacks=[self._cache(hits=True)],
            unit="{document}",
            description="422 documents served from the render cache.",
        )
        meter.create_observable_counter(
            "invalidation_contracts.render_cache.misses",
            callbacks=[self._cache(hits=False)],
            unit="{document}",
            description="422 documents rendered afresh.",
        )
        meter.create_observable_gauge(
            "invalidation_contracts.worker.seq",
            callbacks=[self._seq],
            unit="{change}",
            description="The contract_seq this worker serves, by worker and epoch.",
        )
        meter.create_observable_gauge(
            "invalidation_contracts.worker.available",
            callbacks=[self._available],
            description="1 while the worker can vouch for its state (its follower reaches the "
            "databases), 0 while it answers 503.",
        )
        meter.create_observable_gauge(
            "invalidation_contracts.worker.ready",
            callbacks=[self._health("ready")],
            description="1 while the worker is ready (confirmed current within max_lag_s; "
            "GET /contract/ready), else 0.",
        )
        meter.create_observable_gauge(
            "invalidation_contracts.worker.live",
            callbacks=[self._health("live")],
            description="1 while the worker's follower runs (GET /contract/live), else 0.",
        )
        meter.create_observable_gauge(
            "invalidation_contracts.worker.lag",
            callbacks=[self._health("lag_s")],
            unit="s",
            description="Seconds since the worker last confirmed it was at the shared head: how "
            "long a captured change can wait before this worker serves it (0: nothing else "
            "writes its registry).",
        )
        self._bytes: dict[bytes, int] = {}
        self._refusals: dict[int, _Refusal] = {}
        self._warned = False

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

    def evaluating(self, route: Route[Any], state: RegistryState) -> AbstractContextManager[Any]:
        tracer = self.tracer
        if tracer is None:
            return _NO_SPAN
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
                answer = self._refusal(route, refusal)
                with self._counting:
                    for labels in answer.refusals:
                        self.refusals.add_locked(1, labels)
                    self.responses.add_locked(1, answer.labels)
                    self.contract_bytes.add_locked(answer.size, answer.labels)
            for hook in self.check_hooks:
                hook(route, request, state, refusal)
        except Exception:
            self._failed("a policy check")

    def answered(self, route: Route[Any], outcome: Outcome) -> None:
        try:
            labels = (("http.route", route.path), ("http.status_code", outcome.status))
            self.responses.add(1, labels)
            self.contract_bytes.add(self._contract_bytes(outcome.content), labels)
        except Exception:
            self._failed("an answer")

    def stamped(self, route: Route[Any], status: int, content: bytes) -> None:
        try:
            labels = (("http.route", route.path), ("http.status_code", status))
            self.responses.add(1, labels)
            if isinstance(content, bytes) and content:
                self.contract_bytes.add(self._contract_bytes(content), labels)
        except Exception:
            self._failed("an answer")

    # -- what the registry tells (Registry.subscribe) -------------------------------------------

    def moved(self, before: RegistryState, after: RegistryState) -> None:
        """A registry listener: count the change set, journal it, tell the change hooks."""
        try:
            origin = current_origin()
            worker = (("worker", self.worker),)
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
                    keys=self._keys(before, after),
                    max_rows=self.journal.max_rows,
                )
            if origin != "adopted":
                for move in change.tables:
                    labels = (("table", move.table), ("origin", origin))
                    self.changes.add(1, labels)
                    self.rows_changed.add(move.changed_rows, labels)
            self.journal.add(change)
            for hook in self.change_hooks:
                hook(change, before, after)
        except Exception:
            self._failed("a registry change")

    def _keys(self, before: RegistryState, after: RegistryState) -> dict[str, list[str]] | None:
        """The row keys each table's change records name (None: compare whole tables)."""
        if before.epoch != after.epoch:
            return None
        try:
            feed = self.service.registry.log.since(before.seq, after.seq, after.epoch)
        except ProtocolError:
            return None
        keys: dict[str, list[str]] = {t.table: [] for t in feed.tables}
        for row in feed.rows:
            keys.setdefault(row.table, []).append(row.key)
        return keys

    def watch_scores(self, scores: Any) -> None:
        """Export the per-client figures summed over clients (``ClientScores.totals``); the
        per-client ones stay on the operator page (a label per client would be unbounded)."""
        for name, description in (
            ("episodes", "Episodes opened by clients, from requests alone."),
            ("first_try", "Episodes whose opening request passed every policy."),
            ("retries", "Requests that followed a 422 on the same route."),
            (
                "stale_values_sent",
                "Taught fixes a change made stale that opening requests carried (stale values "
                "sent; a stale fix shown to a model that ignored it never reaches the provider).",
            ),
        ):
            self.meter.create_observable_counter(
                f"invalidation_contracts.clients.{name}",
                callbacks=[self._total(scores, name)],
                unit=_CLIENT_UNITS[name],
                description=description,
            )

    def _total(self, scores: Any, name: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            yield Observation(getattr(scores.totals(), name), {"worker": self.worker})

        return observe

    # -- observable instruments -----------------------------------------------------------------

    def _cache(self, *, hits: bool) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            cache = self.service.provider.rendered
            yield Observation(cache.hits if hits else cache.misses, {"worker": self.worker})

        return observe

    def _seq(self, _options: CallbackOptions) -> Iterable[Observation]:
        state = self.service.registry.state
        yield Observation(state.seq, {"worker": self.worker, "contract.epoch": state.epoch})

    def _available(self, _options: CallbackOptions) -> Iterable[Observation]:
        yield Observation(1 if self.service.available else 0, {"worker": self.worker})

    def _health(self, field: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            health = self.service.health()
            state = str(health.state)
            value = getattr(health, field)
            yield Observation(
                float(value) if not isinstance(value, bool) else int(value),
                {"worker": self.worker, "follower.state": state},
            )

        return observe

    # -- helpers --------------------------------------------------------------------------------

    def _refusal(self, route: Route[Any], refusal: Outcome) -> _Refusal:
        """The labels and contract bytes of a 422, kept per document: a render-cache hit is the
        very bytes object of its entry, keyed by its findings (their types included)."""
        content = refusal.content
        found = self._refusals.get(id(content))
        if found is not None and found.content is content and found.route == route.path:
            return found
        path = route.path
        answer = _Refusal(
            content,
            path,
            tuple(
                (("http.route", path), ("suggestion.type", f.violation.type))
                for f in refusal.findings
            ),
            (("http.route", path), ("http.status_code", refusal.status)),
            self._contract_bytes(content),
        )
        if len(self._refusals) >= _BYTES_CACHE:
            self._refusals.clear()
        self._refusals[id(content)] = answer  # holds the bytes: the id stays unique
        return answer

    def _contract_bytes(self, content: bytes) -> int:
        """The contract's bytes in an answer, remembered by the answer's bytes (a bounded
        cache: equal bytes, equal count)."""
        found = self._bytes.get(content)
        if found is None:
            try:
                document = json.loads(content)
            except ValueError:
                return 0
            found = contract_bytes(document) if isinstance(document, dict) else 0
            if len(self._bytes) >= _BYTES_CACHE:
                self._bytes.clear()
            self._bytes[content] = found
        return found

    def _failed(self, what: str) -> None:
        try:
            self.dropped.add(1, (("worker", self.worker),))
        except Exception:  # noqa: S110 - the telemetry must never fail the request
            pass
        if not self._warned:
            self._warned = True
            logger.exception("telemetry could not record %s; the request is unaffected", what)
