"""Moved to ``server.capture.records`` (issue 40): this module's names warn and still import until
0.3.0."""

from __future__ import annotations

from ..._deprecation import moved_names

_HOME = "invalidation_contracts.server.capture.records"
_NAMES = (
    "DELETE TRUNCATE UPSERT VERSION CaptureBatch Captured CapturedTransaction Frontier"
    " QuarantineEntry change_sets fold gap key_text merged row_value screen"
)
_MOVED = {n: _HOME for n in _NAMES.split()}

__getattr__ = moved_names(__name__, _MOVED)
