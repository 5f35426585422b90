"""Ground truth for evaluators: is a cached fix still the fix the server would give now?

Never consulted by a client strategy; the harness uses it to label evictions and injections.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..protocol.models import Suggestion
from .domain import Route
from .policies import evaluate
from .provider import Provider
from .state import RegistryState


def current_fix(
    provider: Provider, route: Route, draft: Mapping[str, Any], fix_type: str, state: RegistryState | None = None
) -> dict[str, Any] | None:
    """The parameters the server would suggest now for ``fix_type`` on ``draft``, or None if none."""
    state = state if state is not None else provider.registry.state
    request = route.request_model.model_validate(dict(draft)).model_dump(mode="json")
    for finding in evaluate(route.policies, request, state.tables, state.rules):
        if finding.violation.type == fix_type:
            return dict(finding.violation.parameters)
    return None


def is_fix_current(
    provider: Provider, route: Route, draft: Mapping[str, Any], fix: Suggestion, state: RegistryState | None = None
) -> bool:
    """True when re-running the policies on ``draft`` against ``state`` yields the same fix."""
    return current_fix(provider, route, draft, fix.type, state) == dict(fix.parameters)
