"""One memory call, end to end: a current replica, the work on an overlay, a conditional commit.

``CallRunner.run`` makes sure the origin's replica is current, runs the call's work on a
``Ledger`` over it, learns the fixes held back once nothing is outstanding, and writes the result
as one batch that holds only if the origin's generation has not moved. A call that lost the race
to another writer is computed again on what that writer committed. A call that changed nothing
but counters writes nothing: its counters wait for the next real write (``flush``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..protocol.position import valid_epoch, valid_seq
from . import telemetry
from .admission import Admission
from .confirmation import Confirmations
from .events import (
    FetchChanges,
    FetchFailed,
    MemoryEvent,
    MemorySetAside,
    Need,
    NotStored,
    Observation,
    PositionDropped,
    Refused,
    Unreadable,
)
from .invalidation import Invalidation
from .lesson import Lesson
from .shared import moves
from .shared.index import OriginIndex
from .shared.layout import (
    JOURNAL_KEEP,
    CommitPlan,
    commit_ops,
    generation_of,
    journal_ops,
    journalled,
    plan_commit,
)
from .shared.ledger import Ledger
from .shared.overlay import IndexOverlay
from .shared.rebase import MAX_REBASES, rebase
from .shared.replica import Replica, Replicas
from .shared.steps import Steps
from .shared.store import StoreConflict, StoreError
from .shared.turn import take as take_turn
from .state import OriginState
from .stats import OriginStats

logger = logging.getLogger("invalidation_contracts.client")
T = TypeVar("T")
#: How often a call is computed again after losing a race to another writer before it gives up.
MAX_CONFLICTS = 64
#: Lessons held per origin for an outstanding diff; past it the oldest are dropped (an event).
MAX_HELD_LESSONS = 256


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One committed call: its ledger, its result, and what it leaves outstanding."""

    tx: Ledger
    result: T
    needs: tuple[Need, ...]
    confirms: bool = False
    """Once committed, the origin counts as confirmed (``Confirmations.settle``)."""
    taken: tuple[Lesson, ...] = ()
    """The held lessons the call started from (``CallRunner._hold`` merges against them)."""

    @property
    def holds_back(self) -> bool:
        """Whether the call held back a new lesson for an outstanding diff. It then commits
        (on the generation it read) even with nothing else to write: if a diff was applied
        meanwhile the commit fails and the call is computed again, learning the lesson now."""
        taken = {id(lesson) for lesson in self.taken}
        return any(id(lesson) not in taken for lesson in self.tx.lessons)

    @property
    def observation(self) -> Observation:
        return Observation(tuple(self.tx.events), self.needs)


class CallRunner:
    """Runs each memory call against one store's replicas, under one lock: its ``Ledger`` (the
    per-call transaction) computed on a current replica, then committed if nothing moved."""

    def __init__(
        self,
        replicas: Replicas,
        invalidation: Invalidation,
        admission: Admission,
        *,
        lock: threading.RLock,
        clock: Callable[[], float] = time.time,
        confirmations: Confirmations | None = None,
    ) -> None:
        self.replicas = replicas
        self.confirmations = (
            confirmations if confirmations is not None else Confirmations(active=False)
        )
        self.invalidation = invalidation
        self.admission = admission
        self.lock = lock
        self.clock = clock
        self.episodes: dict[str, int | None] = {}
        """The episode each origin is in, for calls that name none (this process's own)."""
        self._lessons: dict[str, list[Lesson]] = {}
        self._reported: dict[str, set[str]] = {}
        self.set_aside: tuple[str, str] | None = None
        """(where the damaged memory file went, the new file), told once to each origin."""
        """The unreadable entries each origin's calls have reported (once per process)."""

    def fresh(self, origin: str) -> Steps[Replica]:
        """The origin's replica, current with what is committed."""
        if not origin:
            raise ValueError("origin must be a non-empty string")
        replica = yield from self.replicas.fresh(origin)
        self.confirmations.first_sight(origin, len(replica.index) > 0)
        return replica

    def run(
        self,
        origin: str,
        episode: int | None,
        work: Callable[[Ledger], T],
        *,
        operation: str | None = None,
    ) -> Steps[Call[T]]:
        """Compute ``work`` on a current replica and commit it; again if another writer won —
        then holding the origin's turn (``shared.turn``), so it commits next: no starvation."""
        turn: dict[str, Any] | None = None
        rebases = 0
        for _ in range(MAX_CONFLICTS):
            replica = yield from self.fresh(origin)
            with self.lock:
                base = replica.generation
                start = replica.state
                call = self._compute(replica, origin, episode, operation or "", work)
                tx = call.tx
                if turn is None and not (
                    tx.written
                    or tx.removed
                    or tx.flush
                    or tx.state != replica.state
                    or call.holds_back
                ):
                    replica.unflushed.add(tx.stats)
                    self._hold(origin, call)
                    return self._returned(origin, call)
                # a large eviction keeps its state as computed, to be rebased (``shared.rebase``)
                mine = tx.state.copy() if len(tx.removed) >= moves.RECORD_MIN else None
                flushed, total, plan = self._plan(replica, tx, base)
            if plan.record is not None and turn is None:
                # a large eviction: announced in the turn before it commits (``client.shared.turn``)
                turn = yield from take_turn(origin, self.clock, None, plan.record)
            while True:
                try:
                    yield commit_ops(tx, base, total, turn, self.admission.limits, plan)
                except StoreConflict:
                    self.replicas.suspect(origin)
                    turn = yield from take_turn(origin, self.clock, turn)
                    if mine is None or plan.record is None or rebases >= MAX_REBASES:
                        break  # computed again, holding the turn
                    rebases += 1
                    moved = yield from self._rebase(origin, replica, call, work, base, start, mine)
                    if moved is None:
                        break
                    base, start = moved
                    with self.lock:
                        mine = tx.state.copy()
                        flushed, total, plan = self._plan(replica, tx, base)
                    continue
                self.replicas.committed(replica, tx, base, total, flushed, plan)
                with self.lock:
                    self._hold(origin, call)
                return self._returned(origin, call)
        raise StoreError(f"{origin}: gave up after {MAX_CONFLICTS} writes lost to other writers")

    def _plan(
        self, replica: Replica, tx: Ledger, base: int
    ) -> tuple[OriginStats, OriginStats, CommitPlan]:
        """The counters to write with ``tx`` at ``base`` and its commit plan (under the lock)."""
        flushed = replica.unflushed.copy()
        total = replica.stats.plus(flushed).plus(tx.stats)
        return flushed, total, plan_commit(tx, base, replica.records, self.admission.limits)

    def _rebase(
        self,
        origin: str,
        replica: Replica,
        call: Call[T],
        work: Callable[[Ledger], T],
        base: int,
        start: OriginState,
        mine: OriginState,
    ) -> Steps[tuple[int, OriginState] | None]:
        """Carry a computed large eviction over what was committed since ``base`` (this call
        holds the turn now, so nothing more commits): the generation and state it then commits
        on, or None when it must be computed again (``shared.rebase``).

        The commits in between are read from the journal. The call's work is run again on the
        entries they wrote, alone, from the state it was computed on: it must leave them as they
        are (a fix stored meanwhile on the moved table, or one derived from another, is not).
        """
        tx = call.tx
        now_replica = yield from self.fresh(origin)
        now = now_replica.generation
        if now_replica is not replica or replica.index is not tx.index.base:
            return None  # reloaded, or folded by a commit of this process: compute again
        if not base < now <= base + JOURNAL_KEEP:
            return None
        results = yield journal_ops(origin, base, now)
        changes = journalled(results[3:])
        if generation_of(results[0]) != now or changes is None or changes.records:
            return None
        touched = [*changes.written, *changes.removed]
        with self.lock:
            if replica.generation != now or any(i in replica.unreadable for i in touched):
                return None
            written = [replica.index.get(i) for i in changes.written]
            entries = [e for e in written if e is not None]
            if any(e.derived_from for e in entries):
                return None
            probe = Replica(
                OriginIndex(sorted(entries, key=lambda e: e.serial)),
                start,
                OriginStats(),
                base,
                None,
                announced=replica.announced,
            )
            again = self._compute(probe, origin, tx.episode, tx.operation, work, tx.now)
            if again.tx.written or again.tx.removed:
                return None
            if not rebase(tx, start, mine, replica.state, touched):
                return None
            return now, replica.state

    def _hold(self, origin: str, call: Call[Any]) -> None:
        """Merge what a returning call did to the origin's held lessons (under the lock): the
        ones it learned (taken, no longer held) go, the ones it held back are added, and the
        ones other calls added or learned meanwhile stay as they did — never overwritten
        (issue 38: a lesson held while another call committed was lost). Past
        ``MAX_HELD_LESSONS`` the oldest are dropped, each a ``NotStored`` event."""
        tx = call.tx
        taken = {id(lesson) for lesson in call.taken}
        after = {id(lesson) for lesson in tx.lessons}
        held = [
            lesson
            for lesson in self._lessons.get(origin, ())
            if id(lesson) not in taken or id(lesson) in after
        ]
        present = {id(lesson) for lesson in held}
        held += [lesson for lesson in tx.lessons if id(lesson) not in taken | present]
        dropped, held = held[:-MAX_HELD_LESSONS], held[-MAX_HELD_LESSONS:]
        for lesson in dropped:
            for suggestion in lesson.suggestions:
                tx.emit(
                    NotStored(
                        origin=origin,
                        episode=tx.episode,
                        suggestion_type=suggestion.type,
                        reason=f"more than {MAX_HELD_LESSONS} lessons held for a diff: dropped",
                    )
                )
        if held:
            self._lessons[origin] = held
        else:
            self._lessons.pop(origin, None)

    def _returned(self, origin: str, call: Call[T]) -> Call[T]:
        """A call is returning (its lessons held): settle its confirmations, report its events
        once, log them and count them; the call."""
        tx = call.tx
        self.confirmations.settle(origin, call.confirms, tx.state)
        self._done(tx)
        _log(tx.events)
        telemetry.record(origin, tx.stats, tx.events)
        return call

    def _done(self, tx: Ledger) -> None:
        """A call returned: the unreadable entries it reported are not reported again."""
        gone = {e.entry_id for e in tx.events if isinstance(e, Unreadable)}
        gone |= {"" for e in tx.events if isinstance(e, MemorySetAside)}
        if gone:
            with self.lock:
                self._reported.setdefault(tx.origin, set()).update(gone)

    def flush(self, origin: str) -> Steps[Call[None]]:
        """Write the origin's counters that are waiting for a write."""

        def work(tx: Ledger) -> None:
            tx.flush = True

        return (yield from self.run(origin, None, work))

    def unflushed(self) -> list[str]:
        """The origins with counters not written yet."""
        return [origin for origin, replica in self.replicas.items() if replica.unflushed]

    def settle(self, tx: Ledger) -> None:
        """Once nothing is outstanding, learn the fixes held back for it."""
        if tx.lessons and not self.invalidation.needs(tx):
            held, tx.lessons = tx.lessons, []
            for lesson in held:
                self.admission.learn(tx, lesson)

    def _compute(
        self,
        replica: Replica,
        origin: str,
        episode: int | None,
        operation: str,
        work: Callable[[Ledger], T],
        now: float | None = None,
    ) -> Call[T]:
        tx = Ledger(
            origin,
            IndexOverlay(replica.index),
            replica.state.copy(),
            episode=episode if episode is not None else self.episodes.get(origin),
            now=self.clock() if now is None else now,
            cascade=self.invalidation.strategy.cascades,
            operation=operation,
        )
        taken = tuple(self._lessons.get(origin, ()))
        tx.lessons = list(taken)
        tx.announced = replica.announced
        reported = self._reported.get(origin, set())
        if self.set_aside is not None and "" not in reported:
            aside, path = self.set_aside
            tx.emit(MemorySetAside(origin=origin, episode=tx.episode, aside=aside, path=path))
        for entry_id, why in sorted(replica.unreadable.items()):
            if entry_id not in reported:  # marked reported once this call returns (_done)
                event = Unreadable(origin=origin, episode=tx.episode, entry_id=entry_id, detail=why)
                tx.emit(event)
        detail = _invalid_position(tx)
        if detail is not None:
            tx.emit(PositionDropped(origin=tx.origin, episode=tx.episode, detail=detail))
            self.invalidation.resync(tx, detail)
        result = work(tx)
        self.settle(tx)
        needs = self.invalidation.needs(tx)
        if self.confirmations.pending(tx) and not any(
            isinstance(need, FetchChanges) for need in needs
        ):
            needs.insert(0, self.confirmations.need(tx))
        needs.extend(need for need in dict.fromkeys(tx.wanted) if need not in needs)
        confirms = tx.confirmed or not len(tx.index)
        return Call(tx, result, tuple(needs), confirms, taken)


def _invalid_position(tx: Ledger) -> str | None:
    """Why the stored position no longer validates (written by an older version, or by hand),
    else None. Sending it would make every request fail: the memory drops it and resyncs, as
    after a 410."""
    st = tx.state
    bad = [
        name
        for name, value, ok in (
            ("contract_epoch", st.epoch, valid_epoch),
            ("known_seq", st.known_seq, valid_seq),
            ("synced_seq", st.synced_seq, valid_seq),
        )
        if value is not None and not ok(value)
    ]
    if not bad:
        return None
    return f"the stored {' and '.join(bad)} no longer validates; the position is dropped"


def _log(events: Sequence[MemoryEvent]) -> None:
    """A log record for every bound violated and every fetch that failed."""
    for event in events:
        if isinstance(event, Refused):
            logger.warning(
                "%s: refused (%s): %s%s",
                event.origin,
                event.bound,
                event.detail,
                f" [{event.suggestion_type}]" if event.suggestion_type else "",
            )
        elif isinstance(event, PositionDropped):
            logger.warning("%s: %s", event.origin, event.detail)
        elif isinstance(event, Unreadable):
            logger.warning(
                "%s: stored entry %s cannot be read and is set aside (%s)",
                event.origin,
                event.entry_id,
                event.detail,
            )
        elif isinstance(event, FetchFailed):
            logger.warning(
                "%s: could not fetch %s (%s); %d entries withheld until it is",
                event.origin,
                event.path,
                event.detail,
                len(event.withheld),
            )
