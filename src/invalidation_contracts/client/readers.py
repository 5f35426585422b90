"""Suggestion readers: failures in other shapes than ``recovery_feedback``, read as suggestions.

A reader turns a failure body (and the request that drew it) into suggestions in the contract's
wire shape, which then pass every check a contract suggestion passes; what it cannot make
deterministic (one value for one field, scoped by what the request sent) it reports with a
reason and the memory stores nothing for it (``NotStored``). ``ProblemErrorsReader`` is the
shipped example: an RFC 9457 problem with an ``errors`` list (one member per field, as many APIs
extend it), or a plain ``detail``, which it never stores.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..protocol.models import Action


@dataclass(frozen=True, slots=True)
class Reading:
    """What a reader made of one failure: suggestions (wire form) and why the rest were left."""

    suggestions: list[dict[str, Any]] = field(default_factory=list)
    unread: list[tuple[str | None, str]] = field(default_factory=list)
    """``(suggestion type or None, reason)`` for each error that is not stored."""


class SuggestionReader(Protocol):
    """Reads suggestions from a failure body that carries no ``recovery_feedback``."""

    def read(self, body: Mapping[str, Any], request: Mapping[str, Any] | None) -> Reading: ...


#: The members of an ``errors`` item naming the one value the field must take.
VALUE_MEMBERS = ("expected", "allowed", "enum")


class ProblemErrorsReader:
    """An RFC 9457 problem with ``errors: [{pointer, detail, expected | allowed | enum}]``.

    An item becomes a suggestion when its ``pointer`` names one top-level request field and it
    gives exactly one value for it; the fix is scoped by every other top-level scalar field of
    the request (the fix is kept for that request shape only). Anything else, a plain
    ``detail`` included, is reported unread.
    """

    def read(self, body: Mapping[str, Any], request: Mapping[str, Any] | None) -> Reading:
        found = body.get("type")
        problem_type = found if isinstance(found, str) else "about:blank"
        errors = body.get("errors")
        if not isinstance(errors, list):
            if isinstance(body.get("detail"), str):
                return Reading(unread=[(None, "a plain detail: no field and value to read")])
            return Reading(unread=[(None, "an unknown error shape: no errors list or detail")])
        out = Reading()
        for item in errors:
            fix, why = self._item(problem_type, item, request)
            if fix is None:
                out.unread.append((None, why))
            else:
                out.suggestions.append(fix)
        return out

    def _item(
        self, problem_type: str, item: object, request: Mapping[str, Any] | None
    ) -> tuple[dict[str, Any] | None, str]:
        if not isinstance(item, Mapping):
            return None, "an errors item that is not an object"
        name = _field(item.get("pointer"))
        if name is None:
            return None, "an errors item without a pointer to one top-level field"
        values = [item[m] for m in VALUE_MEMBERS if m in item]
        value = values[0] if len(values) == 1 else None
        if isinstance(value, list):
            value = value[0] if len(value) == 1 else None
        if value is None:
            return None, f"{name}: not exactly one value to use"
        if request is None:
            return None, f"{name}: no request to scope the fix by"
        scope = {
            k: v
            for k, v in request.items()
            if k != name and (isinstance(v, (str, int, float, bool)) or v is None)
        }
        if not scope:
            return None, f"{name}: the request has no other field to scope the fix by"
        return {
            "type": f"{problem_type}#{name}",
            "message": item.get("detail") if isinstance(item.get("detail"), str) else None,
            "parameters": {name: value},
            "action": (Action.REWRITE_VALUE if name in request else Action.ADD_FIELD).value,
            "scope": scope,
        }, ""


def _field(pointer: object) -> str | None:
    """The top-level field a JSON Pointer (``/funding_type`` or ``#/funding_type``) names."""
    if not isinstance(pointer, str):
        return None
    path = pointer[1:] if pointer.startswith("#") else pointer
    parts = path.split("/")
    if len(parts) != 2 or parts[0] or not parts[1]:
        return None
    return parts[1].replace("~1", "/").replace("~0", "~")
