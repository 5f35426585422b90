"""Live instrumentation of the contract (an edge: the ``otel`` extra).

Provider side: ``instrument(app, service)`` turns on ``ProviderTelemetry`` (OpenTelemetry metrics
and spans) and serves ``GET /contract/metrics`` in the Prometheus format. Agent side: the fix
memory reports through the global meter provider by itself (``client.telemetry``); nothing to
call. docs/operators.md lists every metric.
"""

from __future__ import annotations

from .install import METRICS_PATH, Observability, instrument, metrics_router
from .journal import ChangeJournal, ChangeSet, RowDiff, TableMove
from .provider import ProviderTelemetry

__all__ = [
    "METRICS_PATH",
    "ChangeJournal",
    "ChangeSet",
    "Observability",
    "ProviderTelemetry",
    "RowDiff",
    "TableMove",
    "instrument",
    "metrics_router",
]
