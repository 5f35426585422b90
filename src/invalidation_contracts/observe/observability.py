"""What ``instrument`` set up on a service (telemetry, metrics exposition, client scores), apart
from ``instrument`` itself so the operator page and view can read it without importing the edge
that installs it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .prometheus import PrometheusExposition
    from .provider import ProviderTelemetry
    from .scoring import Scores


@dataclass
class Observability:
    """What ``instrument`` set up; ``close`` detaches it from the service."""

    telemetry: ProviderTelemetry
    prometheus: PrometheusExposition | None = None
    """The ``PrometheusExposition`` the metrics route reads (None: no route)."""
    scores: Scores | None = None
    """The per-client figures folded from the requests (paper §6.5)."""
    _undo: list[Callable[[], None]] = field(default_factory=list)

    def on_close(self, undo: Callable[[], None]) -> None:
        """Call ``undo`` at ``close`` (first, before what ``instrument`` set up is undone)."""
        self._undo.append(undo)

    def close(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        if self.prometheus is not None:
            self.prometheus.shutdown()
