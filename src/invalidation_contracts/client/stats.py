"""Per-origin counters of what the memory did, and the contract's share of the bytes it saw."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..protocol.wirecost import ENVELOPE_FIELDS, SUGGESTION_FIELDS, compact, compact_size
from .events import (
    Evicted,
    FetchFailed,
    Ignored,
    MemoryEvent,
    NotStored,
    Quarantined,
    Refused,
    Restamped,
    RulesAlert,
    Served,
    Stored,
    VersionMoved,
)


@dataclass(slots=True)
class OriginStats:
    """Counters for one origin. Lookups are hits (served at least one entry) or misses."""

    lookups: int = 0
    hits: int = 0
    misses: int = 0
    served: int = 0
    stores: int = 0
    not_stored: int = 0
    evictions: dict[str, int] = field(default_factory=dict)
    restamps: int = 0
    probes: int = 0
    """Probe calls: requests a contract-less policy sent without a doubted entry, and reads of a
    resource an entry cites (its validator, then conditional reads: ``client.revalidation``)."""
    quarantines: int = 0
    version_moves: int = 0
    rules_alerts: int = 0
    ignored: int = 0
    """Contract data left unused: malformed fields, or (with a trust policy) unverified stamps."""
    refused: dict[str, int] = field(default_factory=dict)
    """Input refused by a client-side bound, by bound (``Refused.bound``)."""
    fetch_failures: int = 0
    responses: int = 0
    contract_bytes: int = 0
    response_bytes: int = 0

    @property
    def evicted(self) -> int:
        """Evictions of every reason, supersessions included."""
        return sum(self.evictions.values())

    def count(self, event: MemoryEvent) -> None:
        """Fold one event into the counters."""
        if isinstance(event, Served):
            self.served += 1
        elif isinstance(event, Stored):
            self.stores += 1
        elif isinstance(event, NotStored):
            self.not_stored += 1
        elif isinstance(event, Evicted):
            reason = event.reason.value
            self.evictions[reason] = self.evictions.get(reason, 0) + 1
        elif isinstance(event, Restamped):
            self.restamps += 1
        elif isinstance(event, Quarantined):
            self.quarantines += 1
        elif isinstance(event, VersionMoved):
            self.version_moves += 1
        elif isinstance(event, RulesAlert):
            self.rules_alerts += 1
        elif isinstance(event, Ignored):
            self.ignored += 1
        elif isinstance(event, Refused):
            self.refused[event.bound] = self.refused.get(event.bound, 0) + 1
        elif isinstance(event, FetchFailed):
            self.fetch_failures += 1

    def copy(self) -> OriginStats:
        out = OriginStats(**{name: getattr(self, name) for name in _COUNTERS})
        for name in _TALLIES:
            setattr(out, name, dict(getattr(self, name)))
        return out

    def __bool__(self) -> bool:
        """Whether any counter is non-zero (an increment is waiting to be written)."""
        return any(getattr(self, name) for name in _FIELDS)

    def add(self, other: OriginStats, sign: int = 1) -> None:
        """Add ``other``'s counters to these, in place (``sign=-1``: subtract them)."""
        for name in _COUNTERS:
            value = getattr(other, name)
            if value:
                setattr(self, name, getattr(self, name) + sign * value)
        for name in _TALLIES:
            mine = getattr(self, name)
            for key, value in getattr(other, name).items():
                total = mine.get(key, 0) + sign * value
                if total:
                    mine[key] = total
                else:
                    mine.pop(key, None)

    def plus(self, other: OriginStats, sign: int = 1) -> OriginStats:
        """A copy of these counters with ``other``'s added (``sign=-1``: subtracted)."""
        out = self.copy()
        out.add(other, sign)
        return out

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for name in _TALLIES:
            data[name] = dict(sorted(getattr(self, name).items()))
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OriginStats:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        for name in _TALLIES:
            known[name] = dict(known.get(name, {}))
        return cls(**known)


#: Counters that are tallies by a key (eviction reason, refused bound).
_TALLIES = ("evictions", "refused")
_FIELDS = tuple(OriginStats.__dataclass_fields__)
_COUNTERS = tuple(name for name in _FIELDS if name not in _TALLIES)


def contract_bytes(body: Mapping[str, Any]) -> int:
    """Bytes the contract adds to a JSON response body (``protocol.wirecost``'s definition).

    Counted member by member — only the contract's members are serialized — so it costs the
    contract's size, not the body's. A key list dropped as the body was parsed counts as the
    bytes it took (``compact_size``).
    """
    size = _members(body, ENVELOPE_FIELDS)
    feedback = body.get("recovery_feedback")
    suggestions = feedback.get("suggestions") if isinstance(feedback, Mapping) else None
    for suggestion in suggestions if isinstance(suggestions, list) else ():
        if isinstance(suggestion, Mapping):
            size += _members(suggestion, SUGGESTION_FIELDS)
    return size


def _members(obj: Mapping[str, Any], names: tuple[str, ...]) -> int:
    """Compact-JSON bytes the ``names`` members take in ``obj``, separating commas included."""
    found = [name for name in obj if name in names]
    if not found:
        return 0
    size = sum(len(compact(name)) + compact_size(obj[name]) + 2 for name in found)
    return size - 1 if len(found) == len(obj) else size  # a lone object's last comma never was
