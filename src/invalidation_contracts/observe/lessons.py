"""What a refusal teaches a client, built once per refusal document (sans-IO).

``Taught`` is one fix the provider answered (type, scope, parameters, the policy that found it),
with the structures the client scoring matches requests against precomputed: the fields a request
must carry (``wanted``), the slot, the key, and the anchor field by which a request that may carry
it is found with one dict lookup. ``RefusalLesson`` is every fix of one 422 document; a provider
answers the same document again and again from its render cache, so ``Lessons`` keeps the lesson
per document and the request path only checks that the findings came from the same policies.

``value_key`` is the hashable form of a JSON value used for those lookups: exact about JSON types
(``1``, ``1.0`` and ``true`` differ), cheap for scalars.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..server.policies import Finding

_SCALARS = (str, int, float, bool, type(None))
ValueKey = tuple[type, Any]


def freeze(value: object) -> str:
    """A JSON value as a string key (sorted members; equal JSON values, equal keys)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def value_key(value: object) -> ValueKey:
    """A JSON value as a hashable key, exact about JSON types: a scalar as (its type, itself),
    anything else (and NaN, never equal to itself) as ``(object, freeze(value))``."""
    kind = type(value)
    if kind in _SCALARS and value == value:
        return (kind, value)
    return (object, freeze(value))


def same(a: object, b: object) -> bool:
    """Equal as JSON values, types included (``1`` is not ``1.0``, ``[1]`` is not ``[1.0]``)."""
    kind, other = type(a), type(b)
    scalar = kind in _SCALARS
    if scalar and other in _SCALARS:
        return kind is other and (a == b or a != a and b != b)
    return scalar is (other in _SCALARS) and freeze(a) == freeze(b)


def same_object(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Two JSON objects equal member by member, types included."""
    return len(a) == len(b) and all(k in b and same(v, b[k]) for k, v in a.items())


@dataclass(frozen=True, slots=True)
class Taught:
    """A fix the provider answered a client with, and what a request is matched by."""

    type: str
    scope: Mapping[str, Any]
    parameters: Mapping[str, Any]
    policy: str
    """The policy that found it (the only one run again to judge it)."""
    slot: tuple[str, str]
    """Type and scope: the memory's key for the fix (one judgement per slot and request)."""
    key: tuple[str, str, str]
    """Type, scope and parameters: one taught fix."""
    anchor: tuple[str, ValueKey] | None
    """A parameter field and its value's ``value_key``; None for a fix that sets nothing."""
    wanted: tuple[tuple[str, Any], ...]
    """Every field a request carrying the fix holds: its parameters, and its scope elsewhere."""

    @classmethod
    def of(cls, finding: Finding) -> Taught:
        v = finding.violation
        return cls.build(v.type, v.scope, v.parameters, finding.policy)

    @classmethod
    def build(
        cls, type: str, scope: Mapping[str, Any], parameters: Mapping[str, Any], policy: str
    ) -> Taught:
        """The fix of ``type`` over ``scope`` setting ``parameters``, found by ``policy``."""
        scope, parameters = dict(scope), dict(parameters)
        slot = (type, freeze(scope))
        first = min(parameters, default=None)
        anchor = None if first is None else (first, value_key(parameters[first]))
        key = (*slot, freeze(parameters))
        wanted = tuple({**scope, **parameters}.items())
        return cls(type, scope, parameters, policy, slot, key, anchor, wanted)

    def carried_by(self, request: Mapping[str, Any]) -> bool:
        """The request carries every parameter of the fix and matches its scope elsewhere (a
        scope field the fix rewrites held the scope's value before the fix, not after)."""
        for name, value in self.wanted:
            if name not in request or not same(request[name], value):
                return False
        return True

    def draft(self, request: Mapping[str, Any]) -> dict[str, Any]:
        """The request as it was before the fix: its parameters undone (back to the scope's
        value, or left out)."""
        out = {k: v for k, v in request.items() if k not in self.parameters}
        out.update({k: v for k, v in self.scope.items() if k in self.parameters})
        return out


@dataclass(frozen=True, slots=True)
class RefusalLesson:
    """Every fix one refusal taught, and the slots it refused."""

    policies: tuple[str, ...]
    """The policy of each finding, in order (the render cache's key leaves them out)."""
    fixes: tuple[Taught, ...]
    """The fixes that set something (a request can carry them), in the findings' order."""
    refused: frozenset[tuple[str, str]]

    @classmethod
    def of(cls, findings: Sequence[Finding]) -> RefusalLesson:
        taught = [Taught.of(f) for f in findings]
        return cls(
            tuple(f.policy for f in findings),
            tuple(t for t in taught if t.anchor is not None),
            frozenset(t.slot for t in taught),
        )

    def fits(self, findings: Sequence[Finding]) -> bool:
        """Whether ``findings`` were found by the same policies, in the same order."""
        policies = self.policies
        if len(findings) != len(policies):
            return False
        for finding, policy in zip(findings, policies, strict=True):
            if finding.policy != policy:
                return False
        return True


class Lessons:
    """The lesson of each refusal document, by the document's bytes object.

    A 422 served from the render cache is the very bytes object of its cache entry, and an entry
    is keyed by its findings exactly (``render_cache.finding_key``: type, message, scope and
    parameters as JSON, types included, and what the policy read), so the same object means the
    same fixes; only the policy names, which the key leaves out, are compared. A document rendered
    afresh is a new object and gets a lesson of its own. At most ``capacity`` are kept (all are
    dropped when full: the next requests rebuild what they use).
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._by_document: dict[int, tuple[bytes, RefusalLesson]] = {}

    def of(self, findings: Sequence[Finding], document: bytes | None) -> RefusalLesson:
        """The lesson of ``findings``, answered as ``document`` (None: not kept)."""
        if document is None:
            return RefusalLesson.of(findings)
        found = self._by_document.get(id(document))
        if found is not None and found[0] is document and found[1].fits(findings):
            return found[1]
        lesson = RefusalLesson.of(findings)
        if len(self._by_document) >= self.capacity:
            self._by_document.clear()
        self._by_document[id(document)] = (document, lesson)  # held: its id stays unique
        return lesson
