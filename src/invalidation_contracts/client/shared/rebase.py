"""A computed large eviction carried over the small commits made while it waited for its turn.

A version move computes thousands of evictions outside the origin's turn, then takes the turn to
commit them; writers storing small fixes in between make that commit fail. Computing it again
while holding the turn makes every writer wait for the whole computation (issue 38). Instead the
computed call is **rebased** (optimistic concurrency): the journal says which entries the
commits in between touched; if the call touched none of them, the writers changed only the
state's bookkeeping (``THEIRS_MAY_MOVE``), and the call's work, run again on those entries alone,
does nothing to them (``CallRunner`` checks that), then the call's result on the other entries is
what it would have been after those commits — so it commits as computed, with its tombstones
renumbered after the writers' and the state merged field by field. Anything else: ``None``, and
the caller computes the call again (holding the turn).

Pure logic: the journal read and the re-check are the caller's.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import fields, replace

from ..state import OriginState
from .ledger import Ledger

#: State fields commits in between may have moved without changing what a call decides:
#: serials issued, tombstones numbered and pruned. Any other field moved: no rebase.
THEIRS_MAY_MOVE = frozenset({"next_serial", "next_tombstone", "tombstone_floor", "tombstone_days"})
#: How many times a computed large eviction is rebased before it is computed again.
MAX_REBASES = 3


def merge_state(base: OriginState, mine: OriginState, theirs: OriginState) -> OriginState | None:
    """``mine`` (computed from ``base``) over ``theirs`` (committed since ``base``): each field as
    whichever side changed it; None when both changed one (``next_tombstone`` excepted: mine's
    tombstones follow theirs) or ``theirs`` changed one outside ``THEIRS_MAY_MOVE``."""
    merged = mine.copy()
    for name in (f.name for f in fields(OriginState)):
        if name == "next_tombstone":
            continue
        was, ours, new = getattr(base, name), getattr(mine, name), getattr(theirs, name)
        if new == was:
            continue
        if name not in THEIRS_MAY_MOVE or ours != was:
            return None
        setattr(merged, name, getattr(theirs.copy(), name))
    merged.next_tombstone = theirs.next_tombstone + (mine.next_tombstone - base.next_tombstone)
    return merged


def rebase(
    tx: Ledger,
    base: OriginState,
    mine: OriginState,
    theirs: OriginState,
    touched: Collection[str],
) -> bool:
    """Carry ``tx`` (computed on ``base``; ``mine``: its state before its commit was planned) over
    commits that touched the ids ``touched`` and left ``theirs``: its state merged, its
    tombstones renumbered after theirs. False, changing nothing, when it cannot be."""
    if any(entry_id in tx.written or entry_id in tx.removed for entry_id in touched):
        return False
    merged = merge_state(base, mine, theirs)
    if merged is None:
        return False
    shift = theirs.next_tombstone - base.next_tombstone
    if shift:
        tx.removed = {
            entry_id: replace(tomb, sequence=tomb.sequence + shift)
            for entry_id, tomb in tx.removed.items()
        }
    tx.state = merged
    return True
