"""This process's copies of origins as committed in a shared store, kept current cheaply.

A memory reads its ``Replica`` of an origin, never the store. Before each call it makes sure the
replica is current: if the store's ``version()`` token has not moved, nothing was committed
anywhere and no I/O happens at all; otherwise it reads the origin's generation, and if that moved,
reads only what the journal says changed (or the whole origin, when the journal no longer reaches
back) — eviction records included: a large eviction another process recorded once
(``shared.moves``) is applied to the replica before anything is served from it, and so is the
turn, which may announce one about to commit (``shared.turn``). A call's batch is written on the
condition that the generation is still the one it was computed at, and folded into the replica
only once it is committed.

Counters (lookups, hits, responses, ...) are kept as ``unflushed`` increments and written with the
next real write or on close: a crash may lose increments, never an entry, eviction or restamp.

The I/O is expressed as ``Steps`` (generators of store batches), so one implementation serves the
sync and the async memory.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable
from dataclasses import dataclass, field

from ..entries import MemoryEntry
from ..state import OriginState
from ..stats import OriginStats
from .index import OriginIndex
from .layout import (
    JOURNAL_KEEP,
    CommitPlan,
    CommittedOrigin,
    announced,
    entries_of,
    entry_ops,
    generation_of,
    generation_ops,
    journal_ops,
    journalled,
    load_ops,
    loaded,
    meta_of,
    record_ops,
    record_read,
)
from .ledger import Ledger
from .moves import EvictionRecord, apply
from .steps import Steps
from .store import Store

#: How many times a reader chases a generation that keeps moving before it reloads the origin.
_CATCH_UP_ROUNDS = 8
#: Journal records a catch-up reads past the generation it set out for, at least.
_SLACK = 8


@dataclass(slots=True)
class Replica:
    """One origin as committed at ``generation``, plus this process's unwritten counters."""

    index: OriginIndex
    state: OriginState
    stats: OriginStats
    """Counters as committed."""
    generation: int
    token: Hashable | None
    """The store's ``version()`` read before this replica was last found current."""
    unflushed: OriginStats = field(default_factory=OriginStats)
    """Counter increments not written yet."""
    records: dict[int, EvictionRecord] = field(default_factory=dict)
    """The origin's eviction records as committed (their entries are out of ``index``)."""
    announced: frozenset[str] = frozenset()
    """Ids a writer announced it is evicting, as last read (withheld: ``client.shared.turn``)."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """Entry rows of the origin that could not be read (``{id: why}``), left out of ``index``."""

    @property
    def counters(self) -> OriginStats:
        return self.stats.plus(self.unflushed)


class Replicas:
    """The replicas of one memory, over one store, guarded by the memory's lock."""

    def __init__(self, store: Store, lock: threading.RLock) -> None:
        self.store = store
        self.lock = lock
        self._by_origin: dict[str, Replica] = {}

    def get(self, origin: str) -> Replica | None:
        return self._by_origin.get(origin)

    def items(self) -> list[tuple[str, Replica]]:
        with self.lock:
            return list(self._by_origin.items())

    def suspect(self, origin: str) -> None:
        """Something was written behind the replica: check the generation on the next read."""
        with self.lock:
            replica = self._by_origin.get(origin)
            if replica is not None:
                replica.token = None

    # ------------------------------------------------------------------ keeping current

    def fresh(self, origin: str) -> Steps[Replica]:
        """The origin's replica, brought up to what is committed now."""
        for _ in range(_CATCH_UP_ROUNDS):
            token = self.store.version()
            replica = self._by_origin.get(origin)
            if replica is None:
                return (yield from self._reload(origin, token))
            if token is not None and token == replica.token:
                return replica
            at = replica.generation
            result, turn = yield generation_ops(origin)
            now, evicting = generation_of(result), announced(turn)
            with self.lock:
                if self._by_origin.get(origin) is not replica or replica.generation != at:
                    continue  # another thread moved it meanwhile: look again
                if now == at:
                    replica.token, replica.announced = token, evicting
                    return replica
            if now < at or now - at > JOURNAL_KEEP:  # a replaced store, or a long absence
                return (yield from self._reload(origin, token, force=now < at))
            caught = yield from self._catch_up(origin, replica, at, now, token)
            if caught is not None:
                with self.lock:
                    caught.announced = evicting
                return caught
        return (yield from self._reload(origin, self.store.version()))

    def _catch_up(
        self, origin: str, replica: Replica, at: int, now: int, token: Hashable | None
    ) -> Steps[Replica | None]:
        """Read what the journal says changed since ``at`` (``now`` or later); None if the
        generation ran further than the read reached.

        Writers may commit faster than a reader reads the journal, so the read does not insist
        on a generation that holds still: the first batch reads the journal past ``now`` (as
        far again as ``now`` was ahead), and the replica is brought to the generation that
        batch saw, with its meta items. The entries it names are read next; one evicted by a
        later commit is left out (the next catch-up reads that eviction anyway), and one
        rewritten since is taken as it is now — never older than that generation.
        """
        results = yield journal_ops(origin, at, now + max(_SLACK, now - at))
        seen = generation_of(results[0])
        if seen < now or seen - at > JOURNAL_KEEP:
            return None  # replaced meanwhile, or ran past what the read reached
        if 3 + seen - at > len(results):
            return None
        changes = journalled(results[3 : 3 + seen - at])
        if changes is None:
            return (yield from self._reload(origin, token))
        state, stats = meta_of(origin, results[1], results[2])
        touched = sorted(changes.records)
        got = yield entry_ops(origin, changes.written) + record_ops(origin, touched)
        later = generation_of(got[0])
        split = 1 + len(changes.written)
        entries, unreadable = entries_of(origin, got[1:split])
        records = {g: record_read(origin, r) for g, r in zip(touched, got[split:], strict=True)}
        if (later == seen and len(entries) + len(unreadable) != len(changes.written)) or any(
            g > at and record is None for g, record in records.items()
        ):  # a row gone with nothing to say why, or a record swept meanwhile: read anew
            return (yield from self._reload(origin, token))
        with self.lock:
            if self._by_origin.get(origin) is not replica or replica.generation != at:
                return None
            for entry_id in changes.removed:
                replica.unreadable.pop(entry_id, None)
                if entry_id in replica.index:
                    replica.index.remove(entry_id)
            for entry in sorted(entries, key=lambda e: e.serial):
                replica.unreadable.pop(entry.id, None)
                _put(replica.index, entry)
            for entry_id in unreadable:
                if entry_id in replica.index:
                    replica.index.remove(entry_id)
            replica.unreadable.update(unreadable)
            for generation, record in records.items():  # after the entries: never re-added
                if record is None:
                    replica.records.pop(generation, None)
                    continue
                if generation > at and generation not in replica.records:
                    replica.index = apply(replica.index, record)
                replica.records[generation] = record
            replica.state, replica.stats = state, stats
            replica.generation, replica.token = seen, token
            return replica

    def _reload(
        self, origin: str, token: Hashable | None, *, force: bool = False
    ) -> Steps[Replica]:
        results = yield load_ops(origin)
        return self._install(origin, loaded(origin, results), token, force=force)

    def _install(
        self, origin: str, snapshot: CommittedOrigin, token: Hashable | None, *, force: bool = False
    ) -> Replica:
        with self.lock:
            current = self._by_origin.get(origin)
            if current is not None and current.generation >= snapshot.generation and not force:
                return current
            replica = Replica(
                snapshot.index,
                snapshot.state,
                snapshot.stats,
                snapshot.generation,
                token,
                current.unflushed if current is not None else OriginStats(),
                dict(snapshot.records),
                snapshot.announced,
                dict(snapshot.unreadable),
            )
            self._by_origin[origin] = replica
            return replica

    # ------------------------------------------------------------------ after a commit

    def committed(
        self,
        replica: Replica,
        tx: Ledger,
        generation: int,
        stats: OriginStats,
        flushed: OriginStats,
        plan: CommitPlan | None = None,
    ) -> None:
        """Fold a call committed at ``generation`` into its replica (if nobody moved it since)."""
        with self.lock:
            current = self._by_origin.get(tx.origin)
            if current is replica and replica.generation == generation:
                replica.index = tx.index.fold_into(replica.index)
                if plan is not None:
                    if plan.record is not None:
                        replica.records[plan.record.generation] = plan.record
                    for record in plan.sweep.updated:
                        replica.records[record.generation] = record
                    for gone in plan.sweep.dropped:
                        replica.records.pop(gone, None)
                replica.state = tx.state
                replica.stats = stats
                replica.generation = generation + 1
            if current is not None:
                current.unflushed.add(flushed, -1)


def _put(index: OriginIndex, entry: MemoryEntry) -> None:
    """Add an entry read from the store, or swap in its new stamps where it is already held."""
    held = index.get(entry.id)
    if held is None:
        index.add(entry)
    elif held.key == entry.key and _shape(held) == _shape(entry):
        index.replace(entry)
    else:
        index.remove(entry.id)
        index.add(entry)


def _shape(entry: MemoryEntry) -> tuple[object, ...]:
    return (tuple((d.table, d.keys) for d in entry.dependencies), entry.rules, entry.derived_from)
