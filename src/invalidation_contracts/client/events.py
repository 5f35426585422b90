"""What the memory reports: typed events (what it did) and needs (what it wants fetched).

The memory core performs no I/O. Each call returns an ``Observation``: the events it caused, for
logging and metrics, and the needs an adapter must fulfil (fetch ``/contract/changes`` or
``/contract/rules`` and feed what came back, a 410 included, through ``FixMemory.answer``).
``to_dict`` gives one JSON line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from enum import Enum
from typing import Any, ClassVar

from .entries import EvictionReason, MemoryKey


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryEvent:
    """Base of every event: the origin it concerns and the episode it happened in."""

    kind: ClassVar[str] = "event"
    origin: str
    episode: int | None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict with an ``event`` discriminator, for JSONL logs."""
        out: dict[str, Any] = {"event": self.kind}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, MemoryKey):
                out["operation"] = value.operation
                out["type"] = value.type
                out["scope"] = value.scope_fields
            else:
                out[f.name] = _plain(value)
        return out


@dataclass(frozen=True, slots=True, kw_only=True)
class EntryEvent(MemoryEvent):
    """An event about one entry."""

    entry_id: str
    key: MemoryKey


@dataclass(frozen=True, slots=True, kw_only=True)
class Served(EntryEvent):
    """A lookup returned the entry for injection (a hit)."""

    kind: ClassVar[str] = "served"


@dataclass(frozen=True, slots=True, kw_only=True)
class Stored(EntryEvent):
    """A cacheable suggestion became an entry."""

    kind: ClassVar[str] = "stored"
    tables: tuple[str, ...] = ()
    derived_from: tuple[str, ...] = ()
    replaced: str | None = None
    """The id of the entry with the same key it superseded, if any."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Evicted(EntryEvent):
    """An entry left service and became a tombstone."""

    kind: ClassVar[str] = "evicted"
    reason: EvictionReason
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Restamped(EntryEvent):
    """An entry was found still valid and stamped with the new versions."""

    kind: ClassVar[str] = "restamped"
    versions: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    """``{table: (old_version, new_version)}``."""
    rules_version: tuple[str | None, str] | None = None
    """``(old, new)`` when the rules stamp moved."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PatchSkipped(EntryEvent):
    """Client apply mode left a relevant fix unpatched (no patch, or no patchable field for
    it); it is shown to the model instead and not recorded as injected."""

    kind: ClassVar[str] = "patch-skipped"
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Quarantined(EntryEvent):
    """An entry's patch wrote outside the patchable paths; it is out of service."""

    kind: ClassVar[str] = "quarantined"
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Unreadable(MemoryEvent):
    """A stored entry that could not be read (a damaged row): left out, never served; the rest
    of the origin is served as usual. Reported once per process."""

    kind: ClassVar[str] = "unreadable"
    entry_id: str
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class MemorySetAside(MemoryEvent):
    """The memory file could not be opened (not a database SQLite can read): it was renamed to
    ``aside`` and a new, empty one made at ``path``. Told with each origin's first call."""

    kind: ClassVar[str] = "memory-set-aside"
    aside: str
    path: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Coarsened(MemoryEvent):
    """A fix whose dependency vector named more row keys than a bound allows: stored at table
    granularity (any change to its tables evicts it), so a server cannot grow the memory by
    naming keys. ``bound``: the ``Limits`` field; ``actual``: the keys it would have made."""

    kind: ClassVar[str] = "coarsened"
    suggestion_type: str
    bound: str
    cap: int
    actual: int
    tables: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Probing(EntryEvent):
    """A contract-less policy (``verify``, ``learned``) held an entry back from one request whose
    confidence dropped: the request goes without it, and the answer keeps or supersedes it."""

    kind: ClassVar[str] = "probing"
    detail: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class Revalidated(MemoryEvent):
    """A conditional read of a resource fixes cite was answered (``verify``): ``outcome`` is
    ``not-modified`` (they are kept), ``changed`` or ``gone`` (they are evicted), ``learned``
    (its first validator) or ``unavailable`` (no validator: the policy's probe stands in)."""

    kind: ClassVar[str] = "revalidated"
    path: str
    outcome: str
    entries: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyChosen(MemoryEvent):
    """A contract-less policy now governs the origin (explicitly, automatically, or because it is
    the memory's strategy)."""

    kind: ClassVar[str] = "policy-chosen"
    policy: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyStateReset(MemoryEvent):
    """The drift policy's persisted state could not be read; it starts afresh (never a crash)."""

    kind: ClassVar[str] = "policy-state-reset"
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class NotStored(MemoryEvent):
    """A suggestion in a failure response that the memory did not keep."""

    kind: ClassVar[str] = "not-stored"
    suggestion_type: str | None
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class VersionMoved(MemoryEvent):
    """The memory saw a table's version move (``new_version`` None: the table is gone)."""

    kind: ClassVar[str] = "version-moved"
    table: str
    old_version: str
    new_version: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RulesAlert(MemoryEvent):
    """A rules strategy saw the ``rules_version`` stamp move."""

    kind: ClassVar[str] = "rules-alert"
    old_rules_version: str
    new_rules_version: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Ignored(MemoryEvent):
    """Contract data the memory could not use (malformed fields); nothing was changed."""

    kind: ClassVar[str] = "ignored"
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class PositionDropped(MemoryEvent):
    """The stored contract position no longer validates (an epoch or seq out of the rules of
    ``protocol.position``): it was forgotten, as after a resync, and is never sent."""

    kind: ClassVar[str] = "position-dropped"
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryFailed(MemoryEvent):
    """A memory call failed (the store could not be read or written: disk full, locked). The
    transport reports it and still hands the agent the server's answer; nothing was learned."""

    kind: ClassVar[str] = "memory-failed"
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Refused(MemoryEvent):
    """Input a server controls broke a client-side bound; none of it was stored or acted on.

    ``bound`` names the bound: a ``Limits`` field (``max_suggestions``, ``max_parameter_bytes``,
    ``max_suggestion_bytes``, ``max_entries_per_origin``, ``max_body_bytes``, ``max_feed_bytes``,
    ``max_feed_items``), ``scope`` (a fix keyed on values the request that drew it did not
    have), ``unscoped`` (an empty scope the server did not mark ``origin_wide``) or ``patch`` (a
    patch that copies, moves, or writes other than what its parameters show).
    """

    kind: ClassVar[str] = "refused"
    bound: str
    detail: str
    suggestion_type: str | None = None
    cap: int | None = None
    actual: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class FetchFailed(MemoryEvent):
    """A need could not be fetched (a network error). It stays outstanding and is asked again;
    ``withheld`` lists the entries kept out of service until it is fulfilled."""

    kind: ClassVar[str] = "fetch-failed"
    path: str
    detail: str
    withheld: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchOpened(MemoryEvent):
    """A watch stream on the origin is open: changes are pushed before the next request."""

    kind: ClassVar[str] = "watch-opened"
    since: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WatchLost(MemoryEvent):
    """The watch stream on the origin could not be kept; until it is again, the memory detects
    changes from responses only (response-time detection). ``permanent``: no more attempts
    (the server has no watch stream); else one after ``retry_in_s`` seconds."""

    kind: ClassVar[str] = "watch-lost"
    detail: str
    permanent: bool = False
    retry_in_s: float | None = None


@dataclass(frozen=True, slots=True)
class FetchChanges:
    """Need: ``GET {origin}/contract/changes?since={since}[&epoch={epoch}]``, then ``answer``.

    ``epoch`` is the history ``since`` belongs to; a server of another history answers 410.
    """

    origin: str
    since: int
    epoch: str | None = None

    @property
    def path(self) -> str:
        return "/contract/changes"


@dataclass(frozen=True, slots=True)
class FetchRules:
    """Need: ``GET {origin}/contract/rules``, then ``answer``."""

    origin: str

    @property
    def path(self) -> str:
        return "/contract/rules"


@dataclass(frozen=True, slots=True)
class ReadResource:
    """Need: ``GET {origin}{path}`` of a resource a fix cites (a 422's ``Link``), then
    ``answer``. With ``etag`` it is a conditional read (``If-None-Match``): 304 keeps the fixes
    citing it, another tag moves them (``check``) or is learned as the validator (not
    ``check``)."""

    origin: str
    path: str
    etag: str | None = None
    check: bool = False


Need = FetchChanges | FetchRules | ReadResource


@dataclass(frozen=True, slots=True)
class Observation:
    """The outcome of one memory call: what happened, and what the adapter must fetch next."""

    events: tuple[MemoryEvent, ...] = ()
    needs: tuple[Need, ...] = ()

    def of(self, event_type: type[MemoryEvent]) -> list[Any]:
        """The events of one type, in order."""
        return [event for event in self.events if isinstance(event, event_type)]


def _plain(value: object) -> Any:
    if isinstance(value, Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value
