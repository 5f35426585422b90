"""Honest completion: is the request the server accepted the task the user asked for?

A 200 proves only that the server accepted *a* request. The accepted request is faithful when every
field carries the task's value, or the value a fix the episode saw gives that field (a suggestion
received in this episode's failures, or an injected fix; their ``parameters``). An absent field and
a ``null`` one are the same (a fix removes a field by setting it to ``null``). Only the fields the
endpoint reads count: with a request schema that lists ``properties``, a key outside them (which the
server ignores) is not a field of the request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..protocol.canonical import canonical_json
from ..protocol.models import Suggestion


def unfaithful_fields(
    task: Mapping[str, Any],
    request: Mapping[str, Any],
    fixes: Iterable[Suggestion],
    schema: Mapping[str, Any] | None = None,
) -> tuple[str, ...]:
    """The fields, sorted, where ``request`` departs from ``task`` other than as a fix says."""
    allowed: dict[str, set[bytes]] = {}
    for fix in fixes:
        for name, value in fix.parameters.items():
            allowed.setdefault(name, set()).add(canonical_json(value))
    names = set(task) | set(request)
    properties = schema.get("properties") if schema is not None else None
    if isinstance(properties, Mapping) and properties:
        names &= set(properties) | set(task)
    out = []
    for name in sorted(names):
        sent = canonical_json(request.get(name))
        if sent != canonical_json(task.get(name)) and sent not in allowed.get(name, ()):
            out.append(name)
    return tuple(out)
