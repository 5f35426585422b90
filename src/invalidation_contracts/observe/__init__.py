"""Live instrumentation of the contract (an edge: the ``otel`` extra).

Provider side: ``instrument(app, service)`` turns on ``ProviderTelemetry`` (OpenTelemetry metrics
and spans) and serves ``GET /contract/metrics`` in the Prometheus format; ``ClientScores`` folds
each client's requests (an opaque ``ClientKey``) into stale-injection and first-try figures.
Agent side: the fix memory reports through the global meter provider by itself
(``client.telemetry``); nothing to call. docs/operators.md lists every metric.
"""

from __future__ import annotations

from importlib import import_module

from .._extras import missing

# The package's one guard (its modules import OpenTelemetry and FastAPI freely after it); the
# Prometheus exposition (``prometheus``, ``workers``), loaded on demand, guards its own imports.
try:
    import_module("opentelemetry")
    import_module("fastapi")
except ModuleNotFoundError as exc:
    raise missing(exc, "otel", fastapi="server", starlette="server") from exc

from .clients import ClientKey, ClientKeyMiddleware, current_client
from .install import METRICS_PATH, instrument, metrics_router
from .journal import ChangeJournal, ChangeSet, RowDiff, TableMove
from .observability import Observability
from .provider import ProviderTelemetry
from .scoring import ClientFigures, ClientScores

__all__ = [
    "ChangeJournal",
    "ChangeSet",
    "ClientFigures",
    "ClientKey",
    "ClientKeyMiddleware",
    "ClientScores",
    "METRICS_PATH",
    "Observability",
    "ProviderTelemetry",
    "RowDiff",
    "TableMove",
    "current_client",
    "instrument",
    "metrics_router",
]
