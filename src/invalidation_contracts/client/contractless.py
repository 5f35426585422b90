"""Memory policies for origins that speak no contract: ``ttl`` (A1T), ``verify`` (A1V) and
``learned`` (A1L).

Such a server sends suggestions but no ``cache_hint``, no stamps and no changes feed, so nothing
tells the memory a fix went stale. Each policy keeps the fixes (a suggestion without a
``cache_hint`` is kept; one marked ``no-store`` or ``recompute`` is not) and decides from what it
observes when not to trust one blind. Supersession on refutation (naive memory's channel) applies
to all: a fix the server rejects with another value for the same key is replaced, and the learner
(``client.learner``) records the change.

- ``ttl``: a fixed lifetime since the server last taught the fix; then it is evicted (max-age).
- ``verify``: a fix whose confidence dropped (older than its lifetime since last known good, or
  its type refuted since) is not injected blind: the next request goes without it once (a probe,
  ``Probing``), and the answer keeps it (the same fix taught again) or supersedes it.
- ``learned``: as ``verify``, with the doubt learned online: a change seen for its type or a
  co-drifting type, a periodic change predicted due, or an age past the learned lifetime.

Times are ticks: the episode number when the caller gives one (``begin_episode``), else seconds.
"""

from __future__ import annotations

from typing import ClassVar

from .entries import EvictionReason, MemoryEntry
from .events import PolicyStateReset, Probing
from .learner import Learner, fresh
from .revalidation import Citations, cite_key
from .shared.ledger import Ledger
from .strategy_base import NaiveMemory

#: Default lifetimes: in episodes when ticks are episodes, else in seconds (28 days, as GitHub
#: Copilot's memory expires).
LIFETIME_EPISODES = 10.0
LIFETIME_SECONDS = 28 * 86400.0


def tick(tx: Ledger) -> float:
    """The call's time: its episode when known, else the clock."""
    return float(tx.episode) if tx.episode is not None else tx.now


def learned_at(tx: Ledger, entry: MemoryEntry) -> float:
    """When the entry was learned, in the call's ticks."""
    if tx.episode is not None and entry.provenance.episode is not None:
        return float(entry.provenance.episode)
    return entry.provenance.stored_at


def learner(tx: Ledger) -> Learner:
    """The origin's learner; persisted state that could not be read is reset with an event."""
    why = tx.state.learner.get("unreadable")
    if why is not None:
        tx.state.learner = fresh()
        tx.emit(
            PolicyStateReset(
                origin=tx.origin, episode=tx.episode, detail=f"unreadable learner state: {why}"
            )
        )
    return Learner(tx.state)


class ContractlessPolicy(NaiveMemory):
    """Base of the contract-less policies: naive memory that keeps unhinted fixes and learns
    from every refutation and confirmation it observes."""

    reads_unhinted = True
    confirms_on_accept: ClassVar[bool] = True
    """Whether a request carrying the fix that the server accepted counts as known good."""

    def __init__(self, lifetime: float | None = None) -> None:
        self.lifetime = lifetime
        """Ticks a fix is trusted blind (None: the defaults, by tick kind)."""

    def lifetime_for(self, tx: Ledger) -> float:
        if self.lifetime is not None:
            return self.lifetime
        return LIFETIME_EPISODES if tx.episode is not None else LIFETIME_SECONDS

    def on_refuted(self, tx: Ledger, entry: MemoryEntry) -> None:
        mind = learner(tx)
        born = learned_at(tx, entry)
        mind.refuted(entry.key.type, mind.last_good(entry.id, born), tick(tx), born)

    def on_confirmed(self, tx: Ledger, entry: MemoryEntry) -> None:
        learner(tx).checked(entry.id, tick(tx))

    def on_accepted(self, tx: Ledger, entry: MemoryEntry) -> None:
        if self.confirms_on_accept:
            learner(tx).checked(entry.id, tick(tx))

    def on_stored(self, tx: Ledger, entry: MemoryEntry) -> None:
        learner(tx).prune(len(tx.index), lambda: (e.id for e in tx.index))

    def doubt(self, tx: Ledger, entry: MemoryEntry, mind: Learner, good_at: float) -> str | None:
        """Why the entry is no longer trusted blind, or None."""
        return None

    def serves(self, tx: Ledger, entry: MemoryEntry) -> bool:
        mind = learner(tx)
        good_at = mind.last_good(entry.id, learned_at(tx, entry))
        why = self.doubt(tx, entry, mind, good_at)
        if why is None:
            return True
        return not self.withhold(tx, entry, mind, why)

    def withhold(self, tx: Ledger, entry: MemoryEntry, mind: Learner, why: str) -> bool:
        """Probe: hold the entry back from this request, once per tick (then serve it)."""
        if not mind.probe(entry.id, tick(tx)):
            return False
        tx.stats.probes += 1
        tx.emit(
            Probing(
                origin=tx.origin, episode=tx.episode, entry_id=entry.id, key=entry.key, detail=why
            )
        )
        return True


class TtlMemory(ContractlessPolicy):
    """A1T: a fixed lifetime since the server last taught the fix; then it is evicted."""

    name, arm = "ttl", "A1T"
    confirms_on_accept = False

    def withhold(self, tx: Ledger, entry: MemoryEntry, mind: Learner, why: str) -> bool:
        tx.evict(entry.id, EvictionReason.MAX_AGE, why)
        return True

    def doubt(self, tx: Ledger, entry: MemoryEntry, mind: Learner, good_at: float) -> str | None:
        life = self.lifetime_for(tx)
        age = tick(tx) - good_at
        return f"{age:g} ticks since taught, lifetime {life:g}" if age >= life else None


class VerifyMemory(ContractlessPolicy):
    """A1V: a fix whose 422 cited resources with validators is revalidated by a conditional read
    of each before it is injected in a later tick (``client.revalidation``: 304 serves it, a
    changed resource evicts it); any other fix older than its lifetime since last known good, or
    whose type the server has refuted since, is probed (sent without it once) before it is
    injected again."""

    name, arm = "verify", "A1V"

    def on_stored(self, tx: Ledger, entry: MemoryEntry) -> None:
        super().on_stored(tx, entry)
        self._cite(tx, entry)

    def on_confirmed(self, tx: Ledger, entry: MemoryEntry) -> None:
        super().on_confirmed(tx, entry)
        self._cite(tx, entry)

    @staticmethod
    def _cite(tx: Ledger, entry: MemoryEntry) -> None:
        """Keep the resources the response cites for the entry's fix; fetch their validators."""
        paths = tx.cites.get(cite_key(entry.key.type, entry.suggestion.scope))
        if paths:
            Citations(tx).cite(entry.id, paths, tick(tx))

    def serves(self, tx: Ledger, entry: MemoryEntry) -> bool:
        due = Citations(tx).due(entry.id, tick(tx))
        if due is None:
            return super().serves(tx, entry)
        tx.wanted.extend(due)
        return not due

    def doubt(self, tx: Ledger, entry: MemoryEntry, mind: Learner, good_at: float) -> str | None:
        now = tick(tx)
        changes = mind.changes(entry.key.type)
        if changes and good_at < changes[-1][1] <= now:
            return f"its type was refuted at {changes[-1][1]:g}"
        life = self.lifetime_for(tx)
        if now - good_at >= life:
            return f"{now - good_at:g} ticks since known good, lifetime {life:g}"
        return None


class LearnedMemory(ContractlessPolicy):
    """A1L: doubt learned online per fix type (changes seen, co-drift, a periodic change due,
    the learned lifetime); a doubted fix is probed before it is injected again."""

    name, arm = "learned", "A1L"

    def doubt(self, tx: Ledger, entry: MemoryEntry, mind: Learner, good_at: float) -> str | None:
        return mind.suspect(entry.key.type, good_at, tick(tx))


#: The contract-less policies, in the order reports list them.
CONTRACTLESS_CLASSES: tuple[type[ContractlessPolicy], ...] = (
    TtlMemory,
    VerifyMemory,
    LearnedMemory,
)
