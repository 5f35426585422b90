"""Memory entries: key, cached suggestion, dependency vector; and tombstones (SPEC §7, §9).

An entry is keyed by ``(origin, operation, type, canonical JSON of scope)``: the operation is the
method and route template (or the MCP tool name) the fix was learned on, so a fix never crosses
operations (``""`` is the unnamed operation of callers that name none). Its dependency vector
names, per table, the version it was validated against and the row keys the server's policy read.
A dependency without keys (an L1 suggestion that names only ``table``, or an L4 ``tables`` item
with ``keys`` absent) is held at *table granularity*: any row change in that table invalidates
it, and only a touch (a version bump that changed no row) leaves it valid.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from ..protocol.canonical import canonical_json
from ..protocol.models import RuleTriple, Suggestion


class EvictionReason(str, Enum):  # noqa: UP042 - keeps str() and f-string output as is
    """Why an entry left service. Every tombstone and ``Evicted`` event carries one."""

    ROW_CHANGED = "row-changed"
    """A row the fix read was added, removed or changed (row-level strategies)."""
    TABLE_CHANGED = "table-changed"
    """A table the fix depends on moved and the strategy cannot (or need not) look at rows."""
    DOWNSTREAM = "downstream"
    """A node the fix read is downstream of a changed row in the server's graph (A2DG)."""
    RULES = "rules"
    """A derivation rule the fix relied on changed (rules strategies)."""
    CONTRADICTED = "contradicted"
    """A request carrying the fix failed with a suggestion setting one of its fields otherwise."""
    CONSUMER = "consumer"
    """The fix was learned while an entry now evicted was injected (A2DC)."""
    RESYNC = "resync"
    """The server's change log no longer covers the memory's position, or its epoch changed."""
    MAX_AGE = "max-age"
    """The suggestion's freshness ceiling (``max_age_s``) passed without revalidation."""
    OPERATOR = "operator"
    """An operator evicted it (``invalidation-contracts memory evict``)."""
    SUPERSEDED = "superseded"
    """A newer fix with the same key replaced it, or (naive memory) the server taught another
    value for a field it set on a request it was injected into. A replacement, not an
    invalidation."""
    QUARANTINE = "quarantine"
    """Its patch wrote outside the origin's patchable paths; kept out of service for audit."""


#: Reasons whose eviction says the fix went stale, so fixes learned from it go too (A2DC).
STALENESS_REASONS = frozenset(
    {
        EvictionReason.ROW_CHANGED,
        EvictionReason.TABLE_CHANGED,
        EvictionReason.DOWNSTREAM,
        EvictionReason.RULES,
        EvictionReason.CONTRADICTED,
        EvictionReason.CONSUMER,
        EvictionReason.RESYNC,
        EvictionReason.MAX_AGE,
        EvictionReason.OPERATOR,
    }
)


def canonical_scope(scope: Mapping[str, Any] | None) -> str:
    """The canonical JSON text of a scope; ``None`` and ``{}`` are the same (empty) scope."""
    return canonical_json(dict(scope or {})).decode("utf-8")


@dataclass(frozen=True, slots=True)
class MemoryKey:
    """What identifies a fix: its origin, the operation it was learned on, its type and scope."""

    origin: str
    type: str
    scope: str
    """Canonical JSON of the scope dict."""
    operation: str = ""
    """Method and route template (``POST /v1/subscriptions``) or tool name; ``""``: unnamed."""
    _fields: tuple[tuple[str, Any], ...] = field(
        init=False, repr=False, compare=False, hash=False, default=()
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "_fields", tuple(json.loads(self.scope).items()))

    @classmethod
    def of(
        cls, origin: str, type: str, scope: Mapping[str, Any] | None, operation: str = ""
    ) -> MemoryKey:
        return cls(origin, type, canonical_scope(scope), operation)

    @property
    def scope_fields(self) -> dict[str, Any]:
        return dict(self._fields)

    @property
    def scope_items(self) -> tuple[tuple[str, Any], ...]:
        """The scope's ``(field, value)`` pairs, in canonical order (parsed once)."""
        return self._fields

    def to_dict(self) -> dict[str, Any]:
        return {
            "origin": self.origin,
            "operation": self.operation,
            "type": self.type,
            "scope": self.scope_fields,
        }


@dataclass(frozen=True, slots=True)
class Dependency:
    """One table of an entry's dependency vector: the version it holds and the rows it read."""

    table: str
    version: str
    keys: tuple[str, ...] | None = None
    """Sorted row keys the policy read; ``None`` means the whole table (table granularity)."""
    membership: bool = False
    """The policy read the table's key set: adding or removing a key invalidates (``keys`` then
    lists the rows whose contents it also read)."""

    @property
    def nodes(self) -> tuple[str, ...]:
        """The L5 graph nodes (``table:key``) this dependency reads; empty at table granularity."""
        return tuple(f"{self.table}:{key}" for key in self.keys or ())

    def stamped(self, version: str) -> Dependency:
        """The same dependency at another version."""
        return Dependency(self.table, version, self.keys, self.membership)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "table": self.table,
            "version": self.version,
            "keys": list(self.keys) if self.keys is not None else None,
        }
        if self.membership:
            data["membership"] = True
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Dependency:
        keys = data.get("keys")
        return cls(
            str(data["table"]),
            str(data["version"]),
            tuple(keys) if keys is not None else None,
            bool(data.get("membership", False)) and keys is not None,
        )


def dependencies_of(
    suggestion: Suggestion, version_of: Callable[[str], str]
) -> tuple[Dependency, ...]:
    """The dependency vector of a suggestion: ``tables`` when present (L4), else ``table`` (L1).

    ``version_of`` supplies the version of an L1 ``table`` (from the response's ``table_versions``).
    Repeated tables merge: their keys are united, a key-set read (``membership``) is kept, and a
    keyless item widens the table to all rows. ``membership`` takes precedence over ``keys``.
    """
    if suggestion.tables:
        merged: dict[str, tuple[str, set[str] | None, bool]] = {}
        for item in suggestion.tables:
            key_set = item.membership is not None
            if item.membership is not None:
                keys: set[str] | None = set(item.membership.keys)
            else:
                keys = set(item.keys) if item.keys is not None else None
            if item.table in merged:
                _, known, known_set = merged[item.table]
                keys = None if known is None or keys is None else known | keys
                key_set = key_set or known_set
            merged[item.table] = (item.version, keys, key_set and keys is not None)
        return tuple(
            Dependency(table, version, tuple(sorted(keys)) if keys is not None else None, key_set)
            for table, (version, keys, key_set) in sorted(merged.items())
        )
    if suggestion.table:
        return (Dependency(suggestion.table, version_of(suggestion.table), None),)
    return ()


def rule_vector(rules: Iterable[Iterable[str]] | None) -> tuple[RuleTriple, ...]:
    """A sorted, duplicate-free tuple of rule triples."""
    triples = {tuple(str(part) for part in rule) for rule in rules or ()}
    return tuple(sorted(triples))  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Provenance:
    """Where an entry was learned."""

    episode: int | None
    response_id: str | None
    stored_at: float


@dataclass(frozen=True, slots=True)
class MemoryEntry:
    """A cached fix, with what it depends on and where it came from."""

    id: str
    serial: int
    key: MemoryKey
    suggestion: Suggestion
    dependencies: tuple[Dependency, ...]
    rules: tuple[RuleTriple, ...]
    """The rule triples the server's policy relied on (L4 ``rules``)."""
    rules_version: str | None
    """The rules fingerprint the entry is stamped with (stored under, or last restamped to)."""
    contract_seq: int | None
    """The ``contract_seq`` it was stored under."""
    contract_epoch: str | None
    validated_seq: int | None
    """The seq up to which its rows are known unchanged; row changes after it are checked."""
    validated_at: float
    """When it was stored or last restamped (its ``max_age_s`` is counted from here)."""
    provenance: Provenance
    derived_from: tuple[str, ...] = ()
    """Ids of the entries injected into the request whose response taught this fix."""
    restamps: int = 0
    wire: Mapping[str, Any] | None = field(default=None, repr=False, compare=False)
    """The suggestion as stored (``to_wire``), kept so a restamp does not serialize it again."""

    @property
    def origin(self) -> str:
        return self.key.origin

    @property
    def operation(self) -> str:
        return self.key.operation

    @property
    def type(self) -> str:
        return self.key.type

    @property
    def scope(self) -> dict[str, Any]:
        return self.key.scope_fields

    @property
    def tables(self) -> tuple[str, ...]:
        return tuple(dep.table for dep in self.dependencies)

    @property
    def row_keys(self) -> int:
        """How many row keys its dependencies name (``Limits.max_keys_per_entry``)."""
        return sum(len(dep.keys or ()) for dep in self.dependencies)

    def dependency(self, table: str) -> Dependency | None:
        for dep in self.dependencies:
            if dep.table == table:
                return dep
        return None

    def matches(self, draft: Mapping[str, Any]) -> bool:
        """Relevance: every scope field is present in ``draft`` with an equal (JSON) value."""
        return scope_matches(self.key.scope_items, draft)

    def restamped(
        self,
        *,
        versions: Mapping[str, str] | None = None,
        rules_version: str | None = None,
        validated_seq: int | None = None,
        validated_at: float | None = None,
    ) -> MemoryEntry:
        """A copy stamped with new table versions and/or rules version, revalidated."""
        deps = self.dependencies
        if versions:
            deps = tuple(
                dep.stamped(versions[dep.table]) if dep.table in versions else dep for dep in deps
            )
        return self.revalidated(
            dependencies=deps,
            rules_version=rules_version if rules_version is not None else self.rules_version,
            validated_seq=later(self.validated_seq, validated_seq),
            validated_at=validated_at if validated_at is not None else self.validated_at,
            restamps=self.restamps + 1,
        )

    def revalidated(
        self,
        *,
        dependencies: tuple[Dependency, ...] | None = None,
        rules_version: str | None = None,
        validated_seq: int | None = None,
        validated_at: float | None = None,
        restamps: int | None = None,
    ) -> MemoryEntry:
        """A copy with new stamps (a direct constructor call: restamps run by the thousand)."""
        return MemoryEntry(
            self.id,
            self.serial,
            self.key,
            self.suggestion,
            self.dependencies if dependencies is None else dependencies,
            self.rules,
            self.rules_version if rules_version is None else rules_version,
            self.contract_seq,
            self.contract_epoch,
            self.validated_seq if validated_seq is None else validated_seq,
            self.validated_at if validated_at is None else validated_at,
            self.provenance,
            self.derived_from,
            self.restamps if restamps is None else restamps,
            self.wire,
        )

    def suggestion_wire(self) -> Mapping[str, Any]:
        """The suggestion as stored; computed once per entry."""
        if self.wire is None:
            object.__setattr__(self, "wire", self.suggestion.to_wire())
        assert self.wire is not None
        return self.wire

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "serial": self.serial,
            "origin": self.key.origin,
            "operation": self.key.operation,
            "type": self.key.type,
            "scope": self.scope,
            "suggestion": self.suggestion_wire(),
            "dependencies": [dep.to_dict() for dep in self.dependencies],
            "rules": [list(rule) for rule in self.rules],
            "rules_version": self.rules_version,
            "contract_seq": self.contract_seq,
            "contract_epoch": self.contract_epoch,
            "validated_seq": self.validated_seq,
            "validated_at": self.validated_at,
            "provenance": {
                "episode": self.provenance.episode,
                "response_id": self.provenance.response_id,
                "stored_at": self.provenance.stored_at,
            },
            "derived_from": list(self.derived_from),
            "restamps": self.restamps,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> MemoryEntry:
        prov = data["provenance"]
        return cls(
            id=str(data["id"]),
            serial=int(data["serial"]),
            key=MemoryKey.of(
                str(data["origin"]),
                str(data["type"]),
                data.get("scope"),
                str(data.get("operation") or ""),
            ),
            suggestion=Suggestion.model_validate(data["suggestion"]),
            dependencies=tuple(Dependency.from_dict(dep) for dep in data["dependencies"]),
            rules=rule_vector(data.get("rules")),
            rules_version=data.get("rules_version"),
            contract_seq=data.get("contract_seq"),
            contract_epoch=data.get("contract_epoch"),
            validated_seq=data.get("validated_seq"),
            validated_at=float(data["validated_at"]),
            provenance=Provenance(
                prov.get("episode"), prov.get("response_id"), float(prov["stored_at"])
            ),
            derived_from=tuple(data.get("derived_from", ())),
            restamps=int(data.get("restamps", 0)),
            wire=data["suggestion"],
        )


@dataclass(frozen=True, slots=True)
class Tombstone:
    """An entry out of service, kept for audit and metrics; never served."""

    entry: MemoryEntry
    reason: EvictionReason
    detail: str
    episode: int | None
    evicted_at: float
    sequence: int = field(default=0)
    """Order of eviction within the origin."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "entry": self.entry.to_dict(),
            "reason": self.reason.value,
            "detail": self.detail,
            "episode": self.episode,
            "evicted_at": self.evicted_at,
            "sequence": self.sequence,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Tombstone:
        return cls(
            entry=MemoryEntry.from_dict(data["entry"]),
            reason=EvictionReason(data["reason"]),
            detail=str(data.get("detail", "")),
            episode=data.get("episode"),
            evicted_at=float(data["evicted_at"]),
            sequence=int(data.get("sequence", 0)),
        )


def scope_matches(scope: Iterable[tuple[str, Any]], request: Mapping[str, Any]) -> bool:
    """Whether every ``(field, value)`` of a scope is in ``request`` with an equal (JSON) value."""
    for name, value in scope:
        if name not in request or not _json_equal(request[name], value):
            return False
    return True


def serial_of(entry_id: str) -> int | None:
    """The serial in an entry id (``e12`` → 12), or None for an id the memory never issues."""
    if entry_id[:1] == "e" and entry_id[1:].isdigit() and entry_id[1:].isascii():
        return int(entry_id[1:])
    return None


def _json_equal(left: object, right: object) -> bool:
    try:
        return canonical_json(left) == canonical_json(right)
    except (TypeError, ValueError):
        return bool(left == right)


def later(current: int | None, new: int | None) -> int | None:
    """The later of two optional positions (None: unknown)."""
    if new is None:
        return current
    if current is None:
        return new
    return max(current, new)
