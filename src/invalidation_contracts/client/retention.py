"""Bounded history: which tombstones a commit drops, by count and by age (sans-IO).

Every eviction leaves a tombstone (for operators, ``memory list --tombstones``, and the harness's
oracle). Without a bound a server re-sending fixes within every cap grows the memory without end
(reliability audit 2, N7). Tombstones are stored under their sequence number, so the oldest are
known without reading them: a commit keeps at most ``Limits.max_tombstones_per_origin`` (each new
one past it drops the oldest), and drops every tombstone of a day older than
``Limits.tombstone_max_age_s`` (the state remembers the first sequence written each day). Both
cost one delete per dropped tombstone, in the commit that causes it; nothing else is read.
"""

from __future__ import annotations

from .limits import Limits
from .state import OriginState

DAY_S = 86_400


def tombstone_key(sequence: int) -> str:
    """The store key of a tombstone: its sequence, zero-padded, so keys sort by eviction."""
    return f"{sequence:020d}"


def dropped(state: OriginState, now: float, limits: Limits, first_written: int | None) -> range:
    """The tombstone sequences a commit drops, moving ``state.tombstone_floor`` past them.

    ``first_written``: the lowest sequence among the tombstones the commit writes (None: none);
    the first of a day is recorded for age-based pruning.
    """
    day = int(now // DAY_S)
    if first_written is not None:
        state.tombstone_days.setdefault(str(day), first_written)
    floor = max(state.tombstone_floor, state.next_tombstone - limits.max_tombstones_per_origin)
    oldest_kept_day = day - limits.tombstone_max_age_s // DAY_S
    for d in sorted((d for d in state.tombstone_days if int(d) < oldest_kept_day), key=int):
        floor = max(floor, _next_day_start(state, int(d)))
        del state.tombstone_days[d]
    old = state.tombstone_floor
    state.tombstone_floor = max(floor, old)
    return range(old, state.tombstone_floor)


def _next_day_start(state: OriginState, day: int) -> int:
    later = [first for d, first in state.tombstone_days.items() if int(d) > day]
    return min(later) if later else state.next_tombstone
