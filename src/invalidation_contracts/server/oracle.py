"""Ground truth for evaluators: is a cached fix still the fix the server would give now?

Never consulted by a client strategy; the harness uses it to label evictions and injections.
A fix is identified as the client's memory identifies it: by its type and its scope, so a
request that draws several fixes of one type (one per ingredient slot, say) is judged per fix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..protocol.canonical import canonical_json
from ..protocol.models import Suggestion
from .domain import Route
from .provider import findings
from .state import RegistryState


def current_fix(
    route: Route[Any],
    draft: Mapping[str, Any],
    fix_type: str,
    scope: Mapping[str, Any] | None,
    state: RegistryState,
) -> dict[str, Any] | None:
    """The parameters the server would suggest now for ``(fix_type, scope)`` on ``draft``, or
    None."""
    wanted = canonical_json(dict(scope or {}))
    for finding in findings(route, draft, state):
        v = finding.violation
        if v.type == fix_type and canonical_json(dict(v.scope)) == wanted:
            return dict(v.parameters)
    return None


def is_fix_current(
    route: Route[Any], draft: Mapping[str, Any], fix: Suggestion, state: RegistryState
) -> bool:
    """True when re-running the policies on ``draft`` against ``state`` yields the same fix."""
    current = current_fix(route, draft, fix.type, fix.scope, state)
    return current is not None and canonical_json(current) == canonical_json(dict(fix.parameters))
