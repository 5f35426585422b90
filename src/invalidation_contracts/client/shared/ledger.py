"""The record of one memory call on one origin: strategies evict and restamp through it.

A ``Ledger`` works on an ``IndexOverlay`` over the committed index and on a copy of the origin's
state, and remembers what it changed, so the memory can write it to the store as one atomic batch
(and only then make it visible) and return the events it produced. ``stats`` holds the counters of
this call alone.
"""

from __future__ import annotations

from collections import deque

from ..entries import STALENESS_REASONS, EvictionReason, MemoryEntry, Tombstone
from ..events import (
    Evicted,
    MemoryEvent,
    Need,
    Quarantined,
    Restamped,
    RulesAlert,
    Stored,
    VersionMoved,
)
from ..lesson import Lesson
from ..state import OriginState
from ..stats import OriginStats
from .overlay import IndexOverlay


class Ledger:
    """One call's changes: the live index, the origin's state and counters, and what it emitted."""

    def __init__(
        self,
        origin: str,
        index: IndexOverlay,
        state: OriginState,
        *,
        episode: int | None,
        now: float,
        cascade: bool,
        operation: str = "",
    ) -> None:
        self.origin = origin
        self.index = index
        self.state = state
        self.stats = OriginStats()
        self.episode = episode
        self.operation = operation
        """The operation of the request being observed or looked up (``""``: unnamed)."""
        self.now = now
        self.seq: int | None = None
        """The ``contract_seq`` of the response being observed, when there is one."""
        self.cascade = cascade
        """Whether evicting a stale entry also evicts the entries derived from it (A2DC)."""
        self.events: list[MemoryEvent] = []
        self.written: dict[str, MemoryEntry] = {}
        self.removed: dict[str, Tombstone] = {}
        self.flush = False
        """Write this call even if it changed nothing (to flush counters)."""
        self.confirmed = False
        """This call read what moved since the stored position (``confirmation``)."""
        self._shared_moves: dict[tuple[tuple[str, str, str], ...], dict[str, tuple[str, str]]] = {}
        self.lessons: list[Lesson] = []
        """Failures' fixes held back until the needs they wait on are fulfilled (process-local)."""
        self.cites: dict[tuple[str, str], tuple[str, ...]] = {}
        """The resources each suggestion of the observed response cites, by fix type and scope
        (``cite_key``): what a ``verify`` origin revalidates its fix against."""
        self.wanted: list[Need] = []
        """Needs a policy asked for in this call (a validator to fetch or check)."""
        self.announced: frozenset[str] = frozenset()
        """Ids a writer announced it is evicting (``client.shared.turn``): not served meanwhile."""

    def emit(self, event: MemoryEvent) -> None:
        self.events.append(event)
        self.stats.count(event)

    def add(self, entry: MemoryEntry, *, replaced: str | None = None) -> None:
        self.index.add(entry)
        self.written[entry.id] = entry
        self.emit(
            Stored(
                origin=self.origin,
                episode=self.episode,
                entry_id=entry.id,
                key=entry.key,
                tables=entry.tables,
                derived_from=entry.derived_from,
                replaced=replaced,
            )
        )

    def evict(self, entry_id: str, reason: EvictionReason, detail: str = "") -> bool:
        """Take a live entry and, under cascade, its consumers out of service; False if not live."""
        if entry_id not in self.index:
            return False
        queue = deque([(entry_id, reason, detail)])
        while queue:
            eid, why, text = queue.popleft()
            if eid not in self.index:
                continue
            cascades = self.cascade and why in STALENESS_REASONS
            entry, consumers = self.index.remove(eid, consumers=cascades)
            self._bury(entry, why, text)
            self.emit(
                Evicted(
                    origin=self.origin,
                    episode=self.episode,
                    entry_id=eid,
                    key=entry.key,
                    reason=why,
                    detail=text,
                )
            )
            if cascades:
                queue.extend(
                    (c.id, EvictionReason.CONSUMER, f"derived from {eid}") for c in consumers
                )
        return True

    def quarantine(self, entry_id: str, detail: str) -> bool:
        """Take a live entry out of service because its patch is not allowed; False if not live."""
        if entry_id not in self.index:
            return False
        entry, _ = self.index.remove(entry_id, consumers=False)
        self._bury(entry, EvictionReason.QUARANTINE, detail)
        self.emit(
            Quarantined(
                origin=self.origin,
                episode=self.episode,
                entry_id=entry_id,
                key=entry.key,
                detail=detail,
            )
        )
        return True

    def restamp(
        self,
        entry_id: str,
        *,
        versions: dict[str, str] | None = None,
        rules_version: str | None = None,
        validated_seq: int | None = None,
    ) -> bool:
        """Stamp a live entry with new versions; emits ``Restamped`` only if a stamp changed."""
        entry = self.index.get(entry_id)
        if entry is None:
            return False
        moved = self._moves(
            tuple(
                (dep.table, dep.version, versions[dep.table])
                for dep in entry.dependencies
                if versions and dep.table in versions and versions[dep.table] != dep.version
            )
        )
        rules = (
            (entry.rules_version, rules_version)
            if rules_version is not None and rules_version != entry.rules_version
            else None
        )
        seq = entry.validated_seq
        if validated_seq is not None and (seq is None or validated_seq > seq):
            seq = validated_seq
        if not moved and rules is None:
            if seq != entry.validated_seq:
                self._write(entry.revalidated(validated_seq=seq))
            return False
        self._write(
            entry.restamped(
                versions={table: new for table, (_, new) in moved.items()},
                rules_version=rules_version,
                validated_seq=seq,
                validated_at=self.now,
            )
        )
        self.emit(
            Restamped(
                origin=self.origin,
                episode=self.episode,
                entry_id=entry_id,
                key=entry.key,
                versions=moved,
                rules_version=rules,
            )
        )
        return True

    def _moves(self, moves: tuple[tuple[str, str, str], ...]) -> dict[str, tuple[str, str]]:
        """``{table: (old, new)}``, one shared (read-only) dict per distinct set of moves: a
        restamp of 10⁵ entries on one table makes one, not 10⁵."""
        shared = self._shared_moves.get(moves)
        if shared is None:
            shared = {table: (old, new) for table, old, new in moves}
            self._shared_moves[moves] = shared
        return shared

    def version_moved(self, table: str, old: str, new: str | None) -> None:
        self.emit(
            VersionMoved(
                origin=self.origin,
                episode=self.episode,
                table=table,
                old_version=old,
                new_version=new,
            )
        )

    def rules_alert(self, old: str, new: str) -> None:
        self.emit(
            RulesAlert(
                origin=self.origin,
                episode=self.episode,
                old_rules_version=old,
                new_rules_version=new,
            )
        )

    def _write(self, entry: MemoryEntry) -> None:
        self.index.replace(entry)
        self.written[entry.id] = entry

    def _bury(self, entry: MemoryEntry, reason: EvictionReason, detail: str) -> None:
        self.written.pop(entry.id, None)
        sequence = self.state.next_tombstone
        self.state.next_tombstone += 1
        self.removed[entry.id] = Tombstone(entry, reason, detail, self.episode, self.now, sequence)
