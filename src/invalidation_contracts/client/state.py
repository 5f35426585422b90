"""What the memory knows about one origin's contract: its stamps, its position, what is pending."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .learner import copy_learner, readable_learner


@dataclass(slots=True)
class OriginState:
    """The contract as last seen from one origin, plus the memory's bookkeeping for it."""

    known: dict[str, str] = field(default_factory=dict)
    """``{table: version}`` as of ``known_seq`` (merged from full and delta ``table_versions``)."""
    known_seq: int | None = None
    """The ``contract_seq`` at which ``known`` is accurate: the ``Contract-Since`` to send."""
    synced_seq: int | None = None
    """Every change up to this seq has been applied to the entries: the ``since`` to fetch."""
    epoch: str | None = None
    rules_version: str | None = None
    pending: dict[str, int | None] = field(default_factory=dict)
    """Tables whose version moved, awaiting the row diff: ``{table: seq the move was seen at}``."""
    graph_pending: bool = False
    """A2DG: a version moved, so the downstream walk in the changes feed must be read."""
    rules_pending: bool = False
    """A2DO: the rules stamp moved, so the rule declarations must be read."""
    declared: list[list[str | None]] | None = None
    """The rule declarations last read, ``[from, to, relation, via]`` each, under
    ``declared_version``: what a rule's ``via`` was (the stamps and vectors carry triples only)."""
    declared_version: str | None = None
    patchable: list[str] | None = None
    """The request paths (JSON Pointers) the origin publishes as patchable by the client."""
    contract_location: str | None = None
    """Where the origin's contract routes live (its ``Link``: ``https://api.example/api/contract``),
    so a new process fetches them there before any response has named the location again."""
    revalidating: dict[str, int | None] = field(default_factory=dict)
    """Trust bound: moved tables held for the changes feed instead of evicted on the stamp alone."""
    stamp_evictions: dict[str, list[float]] = field(default_factory=dict)
    """Trust bound: when each table's recent stamp-driven evictions happened."""
    next_serial: int = 1
    """The serial of the next entry stored for the origin (ids are ``e<serial>``)."""
    next_tombstone: int = 1
    tombstone_floor: int = 1
    """Tombstones below this sequence have been dropped (``retention``)."""
    tombstone_days: dict[str, int] = field(default_factory=dict)
    """``{day number: first tombstone sequence written that day}``, for age-based pruning."""
    policy: str | None = None
    """The contract-less policy governing the origin (``client.policies``); None: the memory's
    strategy."""
    learner: dict[str, Any] = field(default_factory=dict)
    """A contract-less policy's learned drift (``client.learner``), JSON, persisted with the
    rest."""

    def reset_contract(self) -> None:
        """Forget the contract position (after a resync); bookkeeping counters stay."""
        self.known = {}
        self.known_seq = None
        self.synced_seq = None
        self.epoch = None
        self.rules_version = None
        self.pending = {}
        self.graph_pending = False
        self.rules_pending = False
        self.revalidating = {}

    def copy(self) -> OriginState:
        """An independent copy (a memory call works on one and commits it or throws it away)."""
        return OriginState(
            known=dict(self.known),
            known_seq=self.known_seq,
            synced_seq=self.synced_seq,
            epoch=self.epoch,
            rules_version=self.rules_version,
            pending=dict(self.pending),
            graph_pending=self.graph_pending,
            rules_pending=self.rules_pending,
            declared=[list(d) for d in self.declared] if self.declared is not None else None,
            declared_version=self.declared_version,
            patchable=list(self.patchable) if self.patchable is not None else None,
            contract_location=self.contract_location,
            revalidating=dict(self.revalidating),
            stamp_evictions={table: list(times) for table, times in self.stamp_evictions.items()},
            next_serial=self.next_serial,
            next_tombstone=self.next_tombstone,
            tombstone_floor=self.tombstone_floor,
            tombstone_days=dict(self.tombstone_days),
            policy=self.policy,
            learner=copy_learner(self.learner),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OriginState:
        known = {name: data[name] for name in cls.__dataclass_fields__ if name in data}
        if "learner" in known:
            known["learner"] = readable_learner(known["learner"])
        return cls(**known)
