"""The budget on dependency keys (issue 38, H2): how many row keys a server may make the memory
keep, per entry (its suggestion's ``tables[].keys`` together) and per origin (every live entry).

Each key costs index memory and disk, and a response within every byte cap could name 64,000 of
them. A fix past a budget is not refused: it is kept at table granularity — its dependency names
whole tables, so any change to them evicts it (more evictions, never a stale serve) — and the
stored suggestion drops its key lists. A ``Coarsened`` event says so. A list over the per-entry
budget may already have been dropped as the body was parsed (``Suggestion.unread_keys``); it counts
as the keys it named. Pure logic.
"""

from __future__ import annotations

from ..protocol.models import Suggestion
from .entries import Dependency
from .events import Coarsened
from .limits import Limits
from .shared.ledger import Ledger


def budgeted(
    tx: Ledger, suggestion: Suggestion, deps: tuple[Dependency, ...], limits: Limits
) -> tuple[Suggestion, tuple[Dependency, ...]]:
    """``suggestion`` and ``deps`` as stored: unchanged within the budgets, else at table
    granularity (with a ``Coarsened`` event)."""
    unread = suggestion.unread_keys
    keys = sum(len(dep.keys or ()) for dep in deps) + sum(unread.values())
    if not keys:
        return suggestion, deps
    if keys > limits.max_keys_per_entry:
        bound, cap, actual = "max_keys_per_entry", limits.max_keys_per_entry, keys
    elif tx.index.row_keys + keys > limits.max_keys_per_origin:
        bound, cap, actual = (
            "max_keys_per_origin",
            limits.max_keys_per_origin,
            tx.index.row_keys + keys,
        )
    else:
        return suggestion, deps
    tx.emit(
        Coarsened(
            origin=tx.origin,
            episode=tx.episode,
            suggestion_type=suggestion.type,
            bound=bound,
            cap=cap,
            actual=actual,
            tables=tuple(dep.table for dep in deps if dep.keys or dep.table in unread),
        )
    )
    return coarse(suggestion), tuple(Dependency(d.table, d.version) for d in deps)


def coarse(suggestion: Suggestion) -> Suggestion:
    """``suggestion`` with every table dependency widened to the whole table (and no keys left
    unread: none is wanted)."""
    if not suggestion.tables:
        return suggestion.with_unread_keys({}) if suggestion.unread_keys else suggestion
    tables = [t.model_copy(update={"keys": None, "membership": None}) for t in suggestion.tables]
    return suggestion.model_copy(update={"tables": tables}).with_unread_keys({})
