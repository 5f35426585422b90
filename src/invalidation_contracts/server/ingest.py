"""Moved to ``server.capture.steps`` (issue 40): this module's names warn and still import until
0.3.0."""

from __future__ import annotations

from .._deprecation import moved_names

_HOME = "invalidation_contracts.server.capture.steps"
_MOVED = {n: _HOME for n in ("Progress", "SourceError", "consume", "ingest", "reconcile", "trim")}

__getattr__ = moved_names(__name__, _MOVED)
