"""The fix memory's calls as earlier versions spelt them, kept until 0.3.0 (each warns).

``relevant(origin, draft)`` and ``fixes_for(origin, operation)`` are ``lookup``;
``observe(origin, request, status, body, **fields)`` is ``observe(origin, Observed(...))``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from . import calls
from .core import MemoryCore
from .entries import MemoryEntry
from .shared.steps import Steps
from .values import Observed

__all__ = ["OBSERVE", "Spelling", "fixes_for", "observe_arguments", "relevant"]

#: The keywords ``observe`` takes beside its two positional arguments.
_OBSERVE_KEYWORDS = frozenset({"operation", "episode"})
#: The fields an ``Observed`` holds beside request, status and body (earlier: ``observe`` keywords).
_OBSERVED_FIELDS = (
    "injected",
    "delta_since",
    "response_bytes",
    "contract_bytes",
    "response_id",
    "signature",
    "refused",
)


def relevant(
    core: MemoryCore,
    origin: str,
    draft: Mapping[str, Any],
    *,
    episode: int | None = None,
    operation: str | None = None,
) -> Steps[list[MemoryEntry]]:
    """Deprecated: ``lookup(origin, draft, ...).entries`` as a list."""
    found = yield from calls.lookup(core, origin, draft, operation=operation, episode=episode)
    return list(found.entries)


def fixes_for(
    core: MemoryCore, origin: str, operation: str, *, episode: int | None = None
) -> Steps[list[MemoryEntry]]:
    """Deprecated: ``lookup(origin, operation=operation).entries`` (no draft) as a list."""
    found = yield from calls.lookup(core, origin, operation=operation, episode=episode)
    return list(found.entries)


def observe_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]] | None:
    """``observe``'s arguments in today's form when they are in the earlier one
    (``origin, request, status, body`` and the ``Observed`` fields as keywords); else None."""
    if len(args) == 2 and _OBSERVE_KEYWORDS.issuperset(kwargs):
        return None
    if "observed" in kwargs or (len(args) > 1 and isinstance(args[1], Observed)):
        return None  # today's form with a keyword spelt out, or a wrong one: let it fail as such
    fields = dict(kwargs)
    named = ("origin", "request", "status", "body")
    for name, value in zip(named, args, strict=False):
        if name in fields:
            raise TypeError(f"observe() got multiple values for argument {name!r}")
        fields[name] = value
    if len(args) > len(named):
        raise TypeError(f"observe() takes at most {len(named)} positional arguments in this form")
    missing = [name for name in named if name not in fields]
    if missing:
        raise TypeError(f"observe() missing required argument {missing[0]!r}")
    extra = {name: fields.pop(name) for name in _OBSERVED_FIELDS if name in fields}
    if "injected" in extra:
        extra["injected"] = tuple(extra["injected"])
    origin = fields.pop("origin")
    observed = Observed(fields.pop("request"), fields.pop("status"), fields.pop("body"), **extra)
    unknown = set(fields) - _OBSERVE_KEYWORDS
    if unknown:
        raise TypeError(f"observe() got an unexpected keyword argument {min(unknown)!r}")
    return (origin, observed), fields


@dataclass(frozen=True, slots=True)
class Spelling:
    """An earlier spelling of a call's arguments: ``translate`` gives today's (None when they are
    today's already); ``spellings``, the earlier and today's, for the warning."""

    translate: Callable[
        [tuple[Any, ...], dict[str, Any]], tuple[tuple[Any, ...], dict[str, Any]] | None
    ]
    spellings: tuple[str, str]


OBSERVE = Spelling(
    observe_arguments,
    (
        "observe(origin, request, status, body, ...)",
        "observe(origin, Observed(request, status, body, ...))",
    ),
)
