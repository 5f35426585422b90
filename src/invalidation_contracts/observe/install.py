"""``instrument``: turn a contract service's telemetry on, and serve its operator routes.

``instrument(app, service)`` attaches a ``ProviderTelemetry`` to the service's provider and
registry and adds ``GET {prefix}/contract/metrics`` (the Prometheus text format) and the operator
page (``GET {prefix}/contract/operator``), both behind the admin token, to ``app``. Works for
``create_app``'s app and for an existing app that includes the service's routers (pass the same
``prefix``). Without it, a provider records nothing at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Depends, FastAPI
from opentelemetry import metrics, trace
from starlette.responses import Response

from ..protocol.models import Problem
from ..server.http.auth import reader_dependency
from ..server.http.errors import problem_route_class
from ..server.http.openapi import AUTH_ERRORS, responses
from .clients import ClientKey, ClientKeyMiddleware, current_client
from .journal import ChangeJournal
from .observability import Observability
from .provider import ProviderTelemetry
from .scoring import ClientScores, Scores

if TYPE_CHECKING:
    from ..server.http.service import ContractService
    from .prometheus import PrometheusExposition

METRICS_PATH = "/contract/metrics"


def instrument(
    app: FastAPI | None,
    service: ContractService,
    *,
    prefix: str = "",
    prometheus: bool | PrometheusExposition = True,
    meter_provider: metrics.MeterProvider | None = None,
    tracer_provider: trace.TracerProvider | None = None,
    journal: ChangeJournal | None = None,
    client_key: ClientKey | None = None,
    scores: Scores | None = None,
    page: bool = True,
) -> Observability:
    """Instrument ``service`` (a ``ContractService``) and add its metrics route to ``app``.

    ``prometheus``: True builds a ``PrometheusExposition`` whose meter provider the telemetry
    uses and whose output ``GET {prefix}/contract/metrics`` serves; an exposition you built to
    share it; False for no route (``meter_provider``, else the global one, e.g. OTLP).
    ``client_key``: how a request names its client for the per-client scores (default: a keyed
    hash of the bearer token, else the address); ``scores``: the ``ClientScores`` to fold into
    (default: a new one, 5 attempts per episode), or a ``SharedScores`` every worker shares.
    ``page``: serve the operator page at ``GET {prefix}/contract/operator`` (admin token;
    ``observe.page``).
    """
    exposition = None
    if prometheus is True:
        from .prometheus import PrometheusExposition

        exposition = PrometheusExposition(service.domain.name)
    elif prometheus:
        exposition = prometheus
    if meter_provider is None and exposition is not None:
        meter_provider = exposition.meter_provider
    telemetry = ProviderTelemetry(
        service,
        meter_provider=meter_provider,
        tracer_provider=tracer_provider,
        journal=journal,
    )
    if exposition is not None:
        telemetry.zero_in(exposition)
    scores = scores if scores is not None else ClientScores()
    observed = Observability(telemetry, exposition, scores)
    observed._undo.append(scores.close)
    scores.attach(service.registry, service.domain.routes)
    telemetry.watch_scores(scores)
    telemetry.check_hooks.append(
        lambda route, request, state, refusal: scores.checked(
            current_client(),
            route,
            request,
            state,
            refusal.findings if refusal else (),
            refusal.content if refusal else None,
        )
    )
    service.provider.telemetry = telemetry
    observed._undo.append(lambda: setattr(service.provider, "telemetry", None))
    observed._undo.append(service.registry.subscribe(telemetry.moved))
    if app is not None and hasattr(app, "add_middleware"):
        from .tracing import IncomingTrace

        app.add_middleware(ClientKeyMiddleware, key=client_key)
        app.add_middleware(IncomingTrace)
    if exposition is not None and app is not None:
        if hasattr(app, "add_middleware"):
            from .latency import TimedRequests

            app.add_middleware(TimedRequests, durations=exposition.durations)
        app.include_router(metrics_router(service, exposition, prefix=prefix))
    if page and app is not None:
        from .page import operator_router

        app.include_router(operator_router(service, observed, prefix=prefix))
    app_state = getattr(app, "state", None)
    if app_state is not None:
        app_state.observability = observed
    return observed


def metrics_router(
    service: ContractService, exposition: PrometheusExposition, **options: Any
) -> APIRouter:
    """``GET /contract/metrics`` behind the admin or the metrics token; ``options`` go to
    ``APIRouter``."""
    router = APIRouter(route_class=problem_route_class(service), **options)

    @router.get(
        METRICS_PATH,
        dependencies=[Depends(reader_dependency(service))],
        tags=["operators"],
        summary="The provider's metrics in the Prometheus text format (admin or metrics token)",
        responses={
            **responses(Problem, "", *AUTH_ERRORS),
            200: {
                "description": "The Prometheus text exposition format 0.0.4.",
                "content": {"text/plain": {"schema": {"type": "string"}}},
            },
        },
    )
    async def metrics_route() -> Response:
        from .prometheus import CONTENT_TYPE

        return Response(exposition.render(), media_type=CONTENT_TYPE)

    return router
