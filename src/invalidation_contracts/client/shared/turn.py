"""A fair turn for a writer that keeps losing races on a shared origin (no starvation, no give-up).

Writers of one origin commit optimistically: a batch holds only if the origin's generation has
not moved since it was computed (``layout.commit_ops``). That is cheap while writes are small, but
a call that evicts thousands of entries (a version move, a resync) takes far longer to compute
than a small fix takes to store, so writers that keep storing small fixes win every race and the
large call never commits — while its entries, which the server declared stale, stay live.

So a call that lost a race takes the origin's **turn**: a small item (``meta/turn``) naming it,
written only when absent or expired. Every commit checks the turn in the same batch — absent, or
its own — so while a turn is held no other writer commits on that origin: they wait (polling,
with jitter) and recompute after, on what the holder committed. The holder's commit releases the
turn. A turn expires after ``TURN_TTL_S``; one held by a process on this host that no longer
runs is taken over at once: gone (``kill -9``), a zombie its parent has not reaped yet (state
``Z`` or ``X`` in ``/proc/PID/stat``), a later process that reused its pid (another start time),
or one in another PID namespace (its pid names nothing here; issue 38, item 4). Taking over a
live holder's turn costs fairness only: that holder's commit then fails its turn check and
recomputes. Readers never wait: lookups read the replica.

A call that evicts many entries (a version move, a resync: ``client.shared.moves``) takes the turn
*before* it commits, and the turn then **announces** the eviction (``evicting``: the record it is
about to commit). Every reader reads the turn with the generation, before it serves, and withholds
the entries an announced eviction names — so from the announcement until the commit (or, if the
mover dies, until another writer commits the move) no entry the move covers is served: a turn
taken over keeps the announcement it replaces, and a commit that leaves announced entries live
leaves the announcement behind it, in a free turn (``layout.commit_ops``).
"""

from __future__ import annotations

import os
import random
import secrets
import socket
from collections.abc import Callable
from typing import Any

from .layout import TURN_KEY, namespace
from .moves import EvictionRecord
from .steps import Steps, Wait
from .store import CheckOp, GetOp, Item, PutOp, StoreConflict

__all__ = ["TURN_KEY", "TURN_POLL_S", "TURN_TTL_S", "free", "new_turn", "take"]

#: Seconds a turn is held at most (a holder that died on another host is waited for this long).
TURN_TTL_S = 30.0
#: Seconds between two looks at a turn another writer holds (with ±50 % jitter).
TURN_POLL_S = 0.005
_HOST = socket.gethostname()
_PROC = "/proc"


def _pid_namespace() -> str | None:
    """This process's PID namespace (``pid:[4026531836]``), where ``/proc`` says; else None."""
    try:
        return os.readlink(f"{_PROC}/self/ns/pid")
    except OSError:
        return None


def _stat(pid: int | str) -> tuple[str, int] | None:
    """A process's state letter and start time (clock ticks after boot), from ``/proc``; None
    when it has no entry there."""
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as stat:
            text = stat.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # after "pid (comm) ": state is field 3
    try:
        return fields[0], int(fields[19])  # starttime is field 22
    except (IndexError, ValueError):
        return None


_NAMESPACE = _pid_namespace()


def new_turn(now: float, announce: EvictionRecord | None = None) -> dict[str, Any]:
    """A turn for this process, valid until ``now + TURN_TTL_S``; ``announce``: the eviction
    it is about to commit, withheld by every reader meanwhile."""
    turn: dict[str, Any] = {
        "holder": secrets.token_hex(8),
        "host": _HOST,
        "pid": os.getpid(),
        "until": now + TURN_TTL_S,
    }
    mine = _stat("self")
    if _NAMESPACE is not None and mine is not None:
        turn["pidns"], turn["started"] = _NAMESPACE, mine[1]
    if announce is not None:
        turn["evicting"] = announce.to_dict()
    return turn


def free(turn: dict[str, Any] | None, now: float) -> bool:
    """Whether ``turn`` (as read) may be taken: absent, expired, or its holder is gone."""
    if turn is None:
        return True
    until = turn.get("until")
    if not isinstance(until, int | float) or until <= now:
        return True
    if turn.get("host") != _HOST:
        return False  # another host: its processes cannot be seen from here, wait for `until`
    if "pidns" in turn and turn["pidns"] != _NAMESPACE:
        return True  # another PID namespace on this hostname: its pid says nothing here
    return not _alive(turn.get("pid"), turn.get("started"))


def take(
    origin: str,
    clock: Callable[[], float],
    mine: dict[str, Any] | None = None,
    announce: EvictionRecord | None = None,
) -> Steps[dict[str, Any]]:
    """Wait for the origin's turn and take it; returns the turn held (release it by committing
    with it: ``commit_ops(..., turn=...)``). ``mine``: a turn this call took before, kept if it
    still holds. ``announce``: the eviction the call is about to commit (``new_turn``)."""
    meta = namespace(origin, "meta")
    while True:
        (current,) = yield [GetOp(meta, TURN_KEY)]
        held = current.value if isinstance(current, Item) else None
        now = clock()
        if held is not None and mine is not None and held == mine:
            return mine
        if free(held, now):
            mine = new_turn(now, announce)
            if announce is None and held is not None and "evicting" in held:
                mine["evicting"] = held["evicting"]  # a dead holder's move: still announced
            try:
                yield [CheckOp(meta, TURN_KEY, held), PutOp(meta, TURN_KEY, mine)]
            except StoreConflict:
                continue  # another writer took it first: look again
            return mine
        yield Wait(TURN_POLL_S * random.uniform(0.5, 1.5))


def _alive(pid: object, started: object = None) -> bool:
    """Whether ``pid`` is a running process of this namespace (and the one that started at
    ``started``, when the turn says): a zombie is not; without ``/proc``, ``kill(pid, 0)``."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    stat = _stat(pid) if _NAMESPACE is not None else None
    if stat is not None:
        state, start = stat
        return state not in ("Z", "X", "x") and (not isinstance(started, int) or start == started)
    if pid == os.getpid():
        return True
    try:  # no /proc, or its entry hidden (hidepid): kill(pid, 0) sees past neither
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
