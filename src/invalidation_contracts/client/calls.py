"""Every call of a fix memory, written once: a function of its ``MemoryCore`` returning ``Steps``.

``FixMemory`` runs each blocking (``run_sync``) and ``AsyncFixMemory`` awaits it (``run_async``),
so the sync and the async memory are the same calls over the same rooms; the docstrings here are
the documentation of both. ``READERS`` are the two that page through the store with its sync
reader (the async memory runs them in a worker thread).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..protocol.position import valid_epoch, valid_seq
from .core import MemoryCore
from .entries import EvictionReason, MemoryEntry, Tombstone
from .events import Need, Observation
from .policies import contractless_policy
from .serving import Lookup, PatchOutcome
from .shared.layout import load_tombstones, stored_origins
from .shared.ledger import Ledger
from .shared.steps import Steps
from .state import OriginState
from .stats import OriginStats
from .strategies import Strategy
from .values import Answer, Observed, Position


def begin_episode(core: MemoryCore, origin: str, episode: int) -> Steps[list[Need]]:
    """Mark the start of an episode; returns what must be fetched before memory is used.

    Under ``resync`` detection this asks for the changes feed since the last position; under any
    detection it repeats needs still outstanding.
    """
    return core.responses.begin_episode(origin, episode)


def needs(core: MemoryCore, origin: str) -> Steps[list[Need]]:
    """What must be fetched and answered before the memory serves all it holds of ``origin``.

    Under eager or resync detection this includes, until this process has confirmed the origin,
    one conditional read of what changed since the stored position (``client.confirmation``):
    adapters fulfil it when a connection opens.
    """
    call = yield from core.calls.run(origin, None, _nothing)
    return list(call.needs)


def lookup(
    core: MemoryCore,
    origin: str,
    draft: Mapping[str, Any] | None = None,
    *,
    operation: str | None = None,
    episode: int | None = None,
) -> Steps[Lookup]:
    """The entries of ``operation`` the memory serves for a draft call (every scope field equal).

    Counted as a hit or a miss. Expired entries (``max_age_s``) are evicted; entries awaiting a
    diff are withheld, and so are all of an origin's entries until this process has confirmed it
    (``Lookup.needs`` says what to fetch). Without a ``draft``: every fix of ``operation`` the
    memory would serve, whatever the draft (for a prompt written before the model has drafted a
    call; L2 lists each with its condition), not counted as a lookup.
    """
    if draft is None:
        return core.serving.fixes_for(origin, episode, operation or "")
    return core.serving.lookup(origin, draft, episode, operation)


def observe(
    core: MemoryCore,
    origin: str,
    observed: Observed,
    *,
    operation: str | None = None,
    episode: int | None = None,
) -> Steps[Observation]:
    """Feed one response from ``origin`` to the memory (``Observed`` says what it holds).

    ``operation``: the request's method and route template, or tool name (None: the unnamed
    operation); fixes are keyed by it.
    """
    return core.responses.observe(origin, observed, episode, operation)


def answer(
    core: MemoryCore, need: Need, answer: Answer, *, episode: int | None = None
) -> Steps[Observation]:
    """Feed the server's answer to a need, whatever it was: the one need feed.

    200 with a valid body (``Answer.changes``, ``Answer.rules``) → the changes feed or rule
    listing is applied, if the trust policy believes it; 410 (``Answer.resync``) → every entry of
    the origin is evicted (reason resync); anything else (another status, a body that does not
    parse, ``Answer.unusable()``) → the conservative fallback: without a feed, entries on moved
    tables are evicted at table granularity; without a listing, rule-dependent entries under the
    old stamp. Over ``limits.max_feed_bytes`` or ``limits.max_feed_items`` the answer is refused
    unread, and a changes feed is treated as lost history (a resync; with
    ``require_signatures``, as an unverified answer). To feed a read made without a need, name
    the need it answers (``FetchChanges(origin, since)``, ``FetchRules(origin)``).
    """
    return core.answers.answer(need, answer, episode)


def fetch_failed(
    core: MemoryCore, need: Need, detail: str, *, episode: int | None = None
) -> Steps[Observation]:
    """A need could not be fetched (a network error): report it, change nothing.

    The need stays outstanding and is asked again; the ``FetchFailed`` event lists the entries
    withheld until it is fulfilled, and a warning is logged.
    """
    return core.answers.fetch_failed(need, detail, episode)


def evict(
    core: MemoryCore,
    origin: str,
    *,
    entry_ids: Iterable[str] = (),
    table: str | None = None,
    everything: bool = False,
    reason: EvictionReason = EvictionReason.OPERATOR,
    detail: str = "evicted by an operator",
    episode: int | None = None,
) -> Steps[Observation]:
    """Evict entries by id, by table, or all of an origin's; ids not live are ignored."""
    targets = None if everything or table is not None else entry_ids
    by_table = None if everything else table
    return core.responses.evict(origin, targets, by_table, reason, detail, episode)


def set_policy(
    core: MemoryCore, origin: str, policy: str | Strategy, *, episode: int | None = None
) -> Steps[Observation]:
    """Govern ``origin`` by a contract-less policy (``ttl``, ``verify``, ``learned`` or their arm
    codes) from now on, whatever the memory's strategy; announced by a ``PolicyChosen`` event and
    kept with the origin's state. ``ValueError`` for a strategy that is not contract-less."""
    contractless_policy(policy)

    def work(tx: Ledger) -> None:
        core.policies.choose(tx, policy, "explicit")

    call = yield from core.calls.run(origin, episode, work)
    return call.observation


def set_contract_location(core: MemoryCore, origin: str, base: str) -> Steps[None]:
    """Keep where ``origin``'s contract routes live (the base its ``Link`` names), so a later
    process fetches them there from its first read."""
    return core.serving.set_contract_location(origin, base)


def set_patchable(core: MemoryCore, origin: str, paths: Iterable[str]) -> Steps[None]:
    """Record the request paths ``origin`` lets the client patch (client apply mode).

    Each is a JSON Pointer (``/metadata/note``) or a top-level field name (``promo_code``).
    """
    return core.serving.set_patchable(origin, paths)


def apply_patches(
    core: MemoryCore,
    origin: str,
    request: Mapping[str, Any],
    entries: Sequence[MemoryEntry],
    *,
    operation: str | None = None,
    episode: int | None = None,
) -> Steps[PatchOutcome]:
    """Apply each entry's cached patch, in order, to a copy of the planned request.

    Each patch is preceded by a ``test`` of every scope field, so an entry applies only to a
    request its scope matches (one selected on the task's draft may not fit what the planner
    planned); an entry of another ``operation``, or no longer live, is skipped. A patch that
    copies, moves or writes outside the origin's patchable paths is refused and its entry
    quarantined. Raises ``ValueError`` if the origin has no published patchable paths.
    """
    return core.serving.apply_patches(origin, request, entries, episode, operation)


def entries(core: MemoryCore, origin: str) -> Steps[list[MemoryEntry]]:
    """The origin's live entries, in the order they were stored."""
    replica = yield from core.calls.fresh(origin)
    with core.calls.lock:
        return list(replica.index)


def unreadable(core: MemoryCore, origin: str) -> Steps[dict[str, str]]:
    """The origin's stored entries that could not be read (``{id: why}``): set aside, never
    served (issue 38; ``memory stats`` counts them)."""
    replica = yield from core.calls.fresh(origin)
    with core.calls.lock:
        return dict(replica.unreadable)


def stats(core: MemoryCore, origin: str) -> Steps[OriginStats]:
    """A copy of the origin's counters: as committed, plus this process's unwritten ones."""
    replica = yield from core.calls.fresh(origin)
    with core.calls.lock:
        return replica.counters


def state(core: MemoryCore, origin: str) -> Steps[OriginState]:
    """A copy of what the memory knows of the origin's contract."""
    replica = yield from core.calls.fresh(origin)
    with core.calls.lock:
        return replica.state.copy()


def position(core: MemoryCore, origin: str) -> Steps[Position]:
    """The position to send with the next request: the seq the memory's known versions are
    accurate at, and their epoch (the server then answers only what moved after it).

    Empty (``Position()``) until the memory knows one, under a strategy that keeps none, and when
    the stored position does not validate (the next memory call drops it).
    """
    if not core.strategy.invalidates:
        return Position()
    known = yield from state(core, origin)
    seq, epoch = known.known_seq, known.epoch
    if seq is None or not valid_seq(seq) or (epoch is not None and not valid_epoch(epoch)):
        return Position()
    return Position(seq, epoch or None)


def close(core: MemoryCore) -> Steps[None]:
    """Write the counters not yet written, then close the store if this memory opened it."""
    try:
        for origin in core.calls.unflushed():
            yield from core.calls.flush(origin)
    finally:
        if core.owns_store:
            core.store.close()


def tombstones(core: MemoryCore, origin: str) -> list[Tombstone]:
    """The origin's evicted entries, in the order they were evicted (read from the store)."""
    return load_tombstones(core.store, origin)


def origins(core: MemoryCore) -> list[str]:
    """Every origin the store holds a memory of."""
    return stored_origins(core.store)


def _nothing(tx: Ledger) -> None:
    """A call that changes nothing: it only brings the replica current and reports the needs."""
