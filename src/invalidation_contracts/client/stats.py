"""Per-origin counters of what the memory did, and the contract's share of the bytes it saw."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from ..protocol.wirecost import wire_cost
from .events import (
    Evicted,
    Ignored,
    MemoryEvent,
    NotStored,
    Quarantined,
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
    quarantines: int = 0
    version_moves: int = 0
    rules_alerts: int = 0
    ignored: int = 0
    """Contract data left unused: malformed fields, or (with a trust policy) unverified stamps."""
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

    def copy(self) -> OriginStats:
        return OriginStats.from_dict(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["evictions"] = dict(sorted(self.evictions.items()))
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OriginStats:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        known["evictions"] = dict(known.get("evictions", {}))
        return cls(**known)


def contract_bytes(body: Mapping[str, Any]) -> int:
    """Bytes the contract adds to a JSON response body (``protocol.wirecost``'s definition)."""
    return wire_cost(body).contract
