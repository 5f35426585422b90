"""Moved to ``server.capture.source`` (issue 40): this module's names warn and still import until
0.3.0."""

from __future__ import annotations

from .._deprecation import moved_names

_HOME = "invalidation_contracts.server.capture.source"
_MOVED = {n: _HOME for n in ("ChangeSource", "CommitProbe", "LeadWakeup", "Wakeup")}

__getattr__ = moved_names(__name__, _MOVED)
