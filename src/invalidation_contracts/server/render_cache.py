"""Rendered responses, once per registry state (the provider's failure path).

A response's contract fields depend only on the registry state and the client's ``Contract-Since``
and ``Contract-Epoch``; a suggestion only on its finding and the state; a policy-violation document
only on its findings, those headers and the route. Each is therefore built, validated and encoded
once per state and then served from here, byte for byte what rendering it again would produce.

Sans-IO and bounded: every cache holds at most ``capacity`` entries and starts empty for a new
registry state, so nothing a client sends (a ``Contract-Since``, a request value a fix echoes)
grows it past the bound, and nothing outlives the state it was rendered from. A finding holding
anything but plain JSON values is rendered every time (and fails exactly as it would uncached).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic_core import to_json

from ..protocol.levels import Level
from ..protocol.models import Action, ContractFields, Problem, Suggestion
from . import feedback
from .asked import PLAIN, Asked
from .policies import Finding
from .state import RegistryState

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")
C = TypeVar("C", bound=ContractFields)

DEFAULT_CAPACITY = 1024
"""Entries per cache and state: distinct suggestions, problem documents, contract variants."""

MAX_KEY_DEPTH = 64
"""Nesting past this in a fix's values is rendered every time instead of keyed."""


@dataclass(frozen=True, slots=True)
class Rendered:
    """A response body and its wire encoding (compact UTF-8 JSON), produced together."""

    body: Problem
    content: bytes


class BoundedCache(Generic[K, V]):
    """A dict with at most ``capacity`` entries; the oldest goes first. Lookups take no lock."""

    __slots__ = ("_capacity", "_entries", "_lock")

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("a cache holds at least one entry")
        self._capacity = capacity
        self._entries: dict[K, V] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        return self._entries.get(key)

    def put(self, key: K, value: V) -> V:
        """Store ``value`` (the one already stored wins a race) and return what is stored."""
        with self._lock:
            stored = self._entries.setdefault(key, value)
            while len(self._entries) > self._capacity:
                del self._entries[next(iter(self._entries))]
        return stored

    def get_or_put(self, key: K, make: Callable[[], V]) -> V:
        """The value stored under ``key``; if none, ``make()`` stored and returned (``put``)."""
        found = self._entries.get(key)
        return self.put(key, make()) if found is None else found

    def __len__(self) -> int:
        return len(self._entries)


class _Generation:
    """The caches of one registry state."""

    __slots__ = ("contracts", "failures", "presented", "state", "suggestions")

    def __init__(self, state: RegistryState | None, capacity: int) -> None:
        self.state = state
        self.contracts: BoundedCache[tuple[int | None, str | None], ContractFields] = BoundedCache(
            capacity
        )
        self.presented: BoundedCache[tuple[int | None, str | None], ContractFields] = BoundedCache(
            capacity
        )
        self.suggestions: BoundedCache[Hashable, Suggestion] = BoundedCache(capacity)
        self.failures: BoundedCache[Hashable, Rendered] = BoundedCache(capacity)


class RenderCache:
    """A provider's rendered contract fields, suggestions and policy-violation documents.

    ``present`` is applied to every document before it is encoded (the opaque-names tagging, or
    the identity); it must be a pure function of its input.
    """

    def __init__(
        self,
        level: Level,
        present: Callable[[Any], Any] | None = None,
        capacity: int = DEFAULT_CAPACITY,
    ) -> None:
        self.level = level
        self._present: Callable[[Any], Any] = present if present is not None else _identity
        self._capacity = capacity
        self._generation = _Generation(None, capacity)
        self.hits = 0
        """Policy-violation documents served from the cache (read by the telemetry)."""
        self.misses = 0
        """Policy-violation documents rendered (not cached yet, or not cacheable)."""

    def contract(
        self, state: RegistryState, since: int | None = None, epoch: str | None = None
    ) -> ContractFields:
        """The response-level fields of ``state`` at this level, as the client sees them."""
        return self._of(state).presented.get_or_put(
            (since, epoch), lambda: self._present(self.raw_contract(state, since, epoch))
        )

    def raw_contract(
        self, state: RegistryState, since: int | None = None, epoch: str | None = None
    ) -> ContractFields:
        """The response-level fields before presentation (real table names)."""
        return self._of(state).contracts.get_or_put(
            (since, epoch), lambda: feedback.contract_fields(state, self.level, since, epoch)
        )

    def failure(
        self,
        findings: Sequence[Finding],
        state: RegistryState,
        asked: Asked = PLAIN,
        patchable: Collection[str] | None = None,
    ) -> Rendered:
        """The 422 policy-violation document for ``findings``, presented and encoded
        (``feedback.failure``, served from the cache)."""
        generation = self._of(state)
        keys = [finding_key(f) for f in findings]
        since, epoch, instance = asked.since, asked.epoch, asked.instance_uri()
        key: Hashable | None = None
        if None not in keys:
            key = (tuple(keys), since, epoch, patchable, instance)
            try:
                found = generation.failures.get(key)
            except TypeError:  # an unhashable patchable collection
                key = None
            else:
                if found is not None:
                    self.hits += 1
                    return found
        self.misses += 1
        if self.level.suggests:
            conditional = since is not None
            document = feedback.failure_document(
                findings,
                self.level,
                contract=self.raw_contract(state, since, epoch),
                suggestions=[
                    self._suggestion(generation, f, k, patchable, conditional)
                    for f, k in zip(findings, keys, strict=True)
                ],
                instance=instance,
            )
        else:
            document = feedback.failure_document(findings, self.level, instance=instance)
        body = self._present(document)
        rendered = Rendered(body, body.to_json())
        return rendered if key is None else generation.failures.put(key, rendered)

    def _suggestion(
        self,
        generation: _Generation,
        finding: Finding,
        key: Hashable | None,
        patchable: Collection[str] | None,
        conditional: bool,
    ) -> Suggestion:
        state = generation.state
        assert state is not None
        full = None if key is None else (key, patchable, conditional)
        found = None
        if full is not None:
            try:
                found = generation.suggestions.get(full)
            except TypeError:  # an unhashable patchable collection
                full = None
        if found is None:
            found = feedback.suggestion(
                finding, state, self.level, patchable, conditional=conditional
            )
            if full is not None:
                found = generation.suggestions.put(full, found)
        return found

    def _of(self, state: RegistryState) -> _Generation:
        generation = self._generation
        if generation.state is not state:
            generation = self._generation = _Generation(state, self._capacity)
        return generation


def finding_key(finding: Finding) -> Hashable | None:
    """Everything a finding's suggestion is rendered from, hashable and exact about JSON types
    (``1``, ``1.0`` and ``true`` differ); None when it holds anything but plain JSON values."""
    v = finding.violation
    if not (
        type(v.type) is str
        and type(v.message) is str
        and type(v.action) is Action
        and (v.table is None or type(v.table) is str)
        and type(v.no_store) is bool
        and (v.max_age_s is None or type(v.max_age_s) is int)
        and type(v.origin_wide) is bool
    ):
        return None
    parameters, scope, precondition = v.parameters, v.scope, v.precondition
    if not (_plain_object(parameters) and _plain_object(scope) and _plain_object(precondition)):
        return None
    try:
        values = (
            v.type,
            v.message,
            _ACTION_VALUES[v.action],
            v.table,
            v.no_store,
            v.max_age_s,
            v.origin_wide,
        )
        objects = (
            parameters if type(parameters) is dict else dict(parameters),
            scope if type(scope) is dict else dict(scope),
            precondition if type(precondition) is dict else dict(precondition),
        )
        key = (
            to_json(values + objects, inf_nan_mode="constants"),
            tuple(finding.reads.items()),
            finding.tables_in_read_order,
            finding.rules,
            finding.absent_rules,
            finding.key_sets,
        )
        hash(key)
    except (TypeError, ValueError):
        return None
    return key


_SCALARS = frozenset({str, int, float, bool, type(None)})
_ACTION_VALUES = {action: action.value for action in Action}


def _plain_object(mapping: object, depth: int = 0) -> bool:
    """Whether ``mapping`` is a mapping of str to plain JSON values (dict, list, str, int,
    float, bool, None: exactly those types), nested at most ``MAX_KEY_DEPTH`` deep."""
    if type(mapping) is not dict and not isinstance(mapping, Mapping):
        return False
    for name, value in mapping.items():
        if type(name) is not str:
            return False
        if type(value) not in _SCALARS and not _plain_container(value, depth + 1):
            return False
    return True


def _plain_container(value: object, depth: int) -> bool:
    if depth > MAX_KEY_DEPTH:
        return False
    if type(value) is dict:
        return _plain_object(value, depth)
    if type(value) is list:
        return all(type(v) in _SCALARS or _plain_container(v, depth + 1) for v in value)
    return False


def _identity(body: object) -> object:
    return body
