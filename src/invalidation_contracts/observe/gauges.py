"""The worker's observed instruments: read from the service when the SDK collects, never on a
request's path.

``watch_worker`` registers the render cache's hits and misses and the worker's position,
availability, readiness, liveness and confirmation age; ``watch_scores`` the client figures summed
over clients (``ClientScores.totals``), the same figures per client for the ``top`` busiest clients
(label ``client``: a bounded set, which a flood of fresh keys, each less busy, does not enter),
how many clients are kept and how many were forgotten to make room. Each observation carries the
``worker`` attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from opentelemetry.metrics import CallbackOptions, Meter, Observation

if TYPE_CHECKING:
    from ..server.worker.contract import ContractWorker
    from .scoring import Scores

Callback = Callable[[CallbackOptions], Iterable[Observation]]

_CLIENT_FIGURES = (
    ("episodes", "{episode}", "Episodes opened by clients, from requests alone."),
    ("first_try", "{episode}", "Episodes whose opening request passed every policy."),
    ("retries", "{request}", "Requests that followed a 422 on the same route."),
    (
        "stale_values_sent",
        "{fix}",
        "Taught fixes a change made stale that opening requests carried (stale values sent; a "
        "stale fix shown to a model that ignored it never reaches the provider).",
    ),
)
_REQUESTS = ("requests", "{request}", "Requests checked against the policies.")


def watch_worker(meter: Meter, service: ContractWorker, worker: str) -> None:
    """Register the render-cache counters and the worker gauges of ``service`` on ``meter``."""
    where = {"worker": worker}

    def cache(hits: bool) -> Callback:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            rendered = service.provider.rendered
            yield Observation(rendered.hits if hits else rendered.misses, where)

        return observe

    def seq(_options: CallbackOptions) -> Iterable[Observation]:
        state = service.registry.state
        yield Observation(state.seq, {**where, "contract.epoch": state.epoch})

    def available(_options: CallbackOptions) -> Iterable[Observation]:
        yield Observation(1 if service.available else 0, where)

    def health(field: str) -> Callback:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            now = service.health()
            value = getattr(now, field)
            yield Observation(
                float(value) if not isinstance(value, bool) else int(value),
                {**where, "follower.state": str(now.state)},
            )

        return observe

    meter.create_observable_counter(
        "invalidation_contracts.render_cache.hits",
        callbacks=[cache(True)],
        unit="{document}",
        description="422 documents served from the render cache.",
    )
    meter.create_observable_counter(
        "invalidation_contracts.render_cache.misses",
        callbacks=[cache(False)],
        unit="{document}",
        description="422 documents rendered afresh.",
    )
    meter.create_observable_gauge(
        "invalidation_contracts.worker.seq",
        callbacks=[seq],
        unit="{change}",
        description="The contract_seq this worker serves, by worker and epoch.",
    )
    meter.create_observable_gauge(
        "invalidation_contracts.worker.available",
        callbacks=[available],
        description="1 while the worker can vouch for its state (its follower reaches the "
        "databases), 0 while it answers 503.",
    )
    meter.create_observable_gauge(
        "invalidation_contracts.worker.ready",
        callbacks=[health("ready")],
        description="1 while the worker is ready (confirmed current within max_lag_s; "
        "GET /contract/ready), else 0.",
    )
    meter.create_observable_gauge(
        "invalidation_contracts.worker.live",
        callbacks=[health("live")],
        description="1 while the worker's follower runs (GET /contract/live), else 0.",
    )
    meter.create_observable_gauge(
        "invalidation_contracts.worker.confirmation_age",
        callbacks=[health("lag_s")],
        unit="s",
        description="Seconds since the worker last confirmed it was at the shared head (the "
        "readiness lag of GET /contract/ready; 0: nothing else writes its registry). The "
        "commit-to-serve lag is the histogram invalidation_contracts.worker.lag.",
    )


TOP_CLIENTS = 20
"""Clients whose own figures each worker exports (its busiest; the operator page shows more)."""


def watch_scores(meter: Meter, scores: Scores, worker: str, *, top: int = TOP_CLIENTS) -> None:
    """Register ``invalidation_contracts.clients.*`` (``scores``' totals, kept and forgotten
    clients) and ``invalidation_contracts.client.*`` (the ``top`` busiest clients' own figures),
    read when collected. Figures shared by every worker (``scores.scope``) carry that scope as
    their ``worker`` label: each worker reports the same series, and a merged scrape keeps one."""
    worker = scores.scope or worker

    def total(name: str) -> Callback:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            yield Observation(getattr(scores.totals(), name), {"worker": worker})

        return observe

    def each(name: str) -> Callback:
        def observe(_options: CallbackOptions) -> Iterable[Observation]:
            for client, figures in scores.busiest(top):
                yield Observation(getattr(figures, name), {"worker": worker, "client": client})

        return observe

    for name, unit, description in (*_CLIENT_FIGURES, _REQUESTS):
        if name != "requests":
            meter.create_observable_counter(
                f"invalidation_contracts.clients.{name}",
                callbacks=[total(name)],
                unit=unit,
                description=description,
            )
        meter.create_observable_counter(
            f"invalidation_contracts.client.{name}",
            callbacks=[each(name)],
            unit=unit,
            description=f"{description} Per client, for this worker's {top} busiest clients.",
        )
    meter.create_observable_gauge(
        "invalidation_contracts.clients.kept",
        callbacks=[lambda _options: [Observation(len(scores), {"worker": worker})]],
        unit="{client}",
        description="Clients whose figures this worker keeps (at most max_clients).",
    )
    meter.create_observable_counter(
        "invalidation_contracts.clients.forgotten",
        callbacks=[lambda _options: [Observation(scores.forgotten, {"worker": worker})]],
        unit="{client}",
        description="Clients forgotten to make room for new ones (their figures stay in the "
        "totals); a fast rise is someone minting client keys.",
    )
