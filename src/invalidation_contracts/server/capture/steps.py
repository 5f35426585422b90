"""The capture's steps: consuming a source's captured changes into the registry, under its lock.

``ingest`` turns the records captured after the registry's position into change sets, exactly as
an admin reload would be recorded (version bump, row diff, feed records, downstream walk).
Reconciliation — at every worker start, every ``reconcile_interval_s``, and whenever the records
cannot be trusted to be complete (a gap, a reset capture) — compares each table with the database
(a per-table digest computed in the database first, then the rows where it differs) and turns any
difference into an ordinary change set labelled ``reconciled``: a write around the triggers is
caught without a new epoch, so every still-valid fix a client holds survives.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, Literal

from ...protocol.models import ReloadResult
from ...protocol.problems import ProtocolError
from ..origin import change_origin
from ..registry import Registry, RegistryTransaction
from ..tables import thaw
from ..transitions import TableChange
from .records import DELETE, UPSERT, change_sets, gap, key_text, merged, screen
from .source import surveyed
from .survey import Recheck, with_undeclared
from .survey import recheck as recheck_changes

if TYPE_CHECKING:
    from .records import CaptureBatch, Captured, CapturedTransaction, QuarantineEntry
    from .source import ChangeSource

logger = logging.getLogger(__name__)


class SourceError(RuntimeError):
    """The provider's database could not be read (or holds a row the contract cannot carry)."""


Progress = Callable[[int | None], None]
"""Told, after each committed batch of a backlog, how many records still wait (None: unknown)."""


def ingest(
    registry: Registry,
    source: ChangeSource,
    *,
    verify: bool = False,
    head: int | None = None,
    progress: Progress | None = None,
    recheck: Recheck | None = None,
) -> bool:
    """Consume ``source``'s captured changes; True when the registry moved.

    ``verify`` also reconciles: compares the tables with the database in the same snapshot (done
    when a worker opens the registry, and every ``source.reconcile_interval_s``); a difference the
    capture did not record becomes a change set labelled ``reconciled``. ``head``: the capture
    head the caller just read (saves reading it again). A backlog is consumed in batches, each
    its own registry transaction (committed, visible, ``progress`` told); the reconciliation
    waits for the last one. ``recheck``: a survey's candidates (``capture.survey``), read again
    with the last batch and reconciled (a surveyed source's periodic reconciliation: it is not
    due here, the follower surveys it beside the worker).
    """
    verify = verify or (source.reconcile_due() and surveyed(source) is None)
    moved = False
    while True:
        with change_origin("captured"), registry.transaction() as tx:
            after = tx.position(source.name)
            idle = after is not None and not verify and head == after and source.contiguous
            if idle and recheck is None:
                return moved
            before = tx.state
            more = _consume(tx, source, verify=verify, batched=True, recheck=recheck)[1]
            moved = moved or tx.state is not before
        trim(source, tx.positions.get(source.name))
        if more is False:
            return moved
        if progress is not None:
            progress(more)


def start(registry: Registry, source: ChangeSource) -> Recheck | None:
    """A worker's start on an opened registry: consume the backlog, then reconcile.

    A surveyed source is reconciled outside the registry's lock (``capture.survey``): each
    table's digest is computed in the database, a table verified at the registry's version is not
    read, the others are compared chunk by chunk beside the other workers, and only the rows
    that differ are read again, and applied, under the lock. Returns a recheck that a
    migration's lock postponed (the follower finishes it), else None. Any other source reads
    every table under the lock (``ingest(verify=True)``).
    """
    surveyed_source = surveyed(source)
    if surveyed_source is None:
        ingest(registry, source, verify=True)
        return None
    ingest(registry, source)  # the records captured while no worker ran, in batches
    state = registry.state
    marks = {name: f"{state.epoch}/{table.version}" for name, table in state.tables.items()}
    found = surveyed_source.survey(state.tables, marks)
    surveyed_source.mark_verified(found.verified)
    if not found.candidates:
        return None
    pending = Recheck(found.candidates)
    ingest(registry, source, recheck=pending)
    return None if pending.done else pending


def consume(
    tx: RegistryTransaction, source: ChangeSource, *, verify: bool = False
) -> list[tuple[str | None, Mapping[str, ReloadResult]]]:
    """Apply every record captured after the registry's position, inside ``tx``; with
    ``verify`` (or when the records cannot be trusted to be complete), reconcile the tables too.

    Returns each change set's transaction id and per-table results, in order.
    """
    return _consume(tx, source, verify=verify, batched=False)[0]


def _consume(
    tx: RegistryTransaction,
    source: ChangeSource,
    *,
    verify: bool,
    batched: bool,
    recheck: Recheck | None = None,
) -> tuple[list[tuple[str | None, Mapping[str, ReloadResult]]], int | None | Literal[False]]:
    """``consume``; ``batched``: stop after about one batch of records (sources that batch).
    Also returns whether records still wait: False, else how many (None: unknown)."""
    after = tx.position(source.name)
    full = verify or after is None
    marks = _marks(tx) if full else None
    limit = getattr(source, "batch_records", None) if batched else None
    surveyed_source = surveyed(source)
    if recheck is not None and not full and surveyed_source is not None:
        batch = surveyed_source.read(after, limit=limit, recheck=recheck.candidates)
    else:
        batch = source.read(after, full=full, marks=marks, limit=limit)
    committed = getattr(source, "committed", None)
    if committed is not None:
        tx.committed.append(committed)
    reason = "the capture position is unknown" if after is None else batch.lost
    if reason is None and after is not None and source.contiguous:
        reason = gap(after, batch)
    if reason is not None and not full and surveyed_source is not None:
        # A gap: the records read are applied, and what they miss is found by a survey beside
        # the worker (due at once), not by reading every table under the registry's lock.
        surveyed_source.survey_soon(reason)
        reason = None
    applied: list[tuple[str | None, Mapping[str, ReloadResult]]] = []
    if reason is None:
        # Records of a table this worker does not declare (a newer version's, installed by
        # `db upgrade` or a newer worker) are not its to serve: skipped, never a failed round.
        good, bad = screen(r for r in batch.records if r.table in tx.state.tables)
        sets = change_sets(good, by_transaction=source.by_transaction)
        applied = _apply(tx, source, sets)
        source.set_aside(bad)
        # after the registry commit (its NOTIFY wakes the other workers first); not at all if
        # the transaction fails (its records are read again, and released then)
        tx.committed.append(partial(_release, source, _written(good, bad)))
        if recheck is not None and batch.rechecked is not None:
            _recheck(tx, source, recheck, batch)
    elif batch.contents is None or batch.skipped:
        batch = source.read(None, full=True)
    if batch.contents is not None:
        contents = _carried(tx, batch.contents, batch.unreadable)
        reconcile(tx, source, contents, reason, batch.undeclared)
        source.set_aside(batch.unreadable, replace=tuple(batch.contents))
        source.mark_verified(
            {name: (batch.digests[name], _mark(tx, name)) for name in batch.digests}
        )
    if batch.head != after or batch.records or batch.contents is not None:
        # a read that consumed nothing and stayed put writes (and commits) nothing
        tx.set_position(source.name, batch.head)
    return applied, batch.backlog if batch.more else False


def _marks(tx: RegistryTransaction) -> dict[str, str]:
    return {name: _mark(tx, name) for name in tx.state.tables}


def _mark(tx: RegistryTransaction, name: str) -> str:
    """What a verified digest holds for: this history's epoch and the table's version."""
    return f"{tx.state.epoch}/{tx.state.tables[name].version}"


def reconcile(
    tx: RegistryTransaction,
    source: ChangeSource,
    contents: Mapping[str, Any],
    reason: str | None,
    undeclared: Mapping[str, frozenset[str]] | None = None,
) -> None:
    """Move every table that differs from ``contents`` (the database) to it: one change set,
    the exact row diff, labelled ``reconciled``. Nothing differs: nothing happens.
    ``undeclared``: per table, the columns whose registry values are kept (another version's)."""
    changes: dict[str, TableChange] = {}
    for name, read in contents.items():
        current = tx.state.tables[name]
        kept = (undeclared or {}).get(name, frozenset())
        rows = {key: with_undeclared(row, current.rows.get(key), kept) for key, row in read.items()}
        if not source.snapshot(name, current.version, rows).same_content(current):
            changes[name] = TableChange(rows, replace=True, reconciled=True)
    if not changes:
        return
    with change_origin("reconciled"):
        tx.apply(changes)
    logger.warning(
        "%s: %s differ%s from the database beyond what the capture recorded%s;"
        " reconciled as the change set at seq %d",
        source.name,
        ", ".join(repr(name) for name in sorted(changes)),
        "s" if len(changes) == 1 else "",
        f" ({reason})" if reason else "",
        tx.state.seq,
    )


def _recheck(
    tx: RegistryTransaction, source: ChangeSource, recheck: Recheck, batch: CaptureBatch
) -> None:
    """A survey's candidates, read again in the consumer's snapshot after its records applied:
    what still differs is reconciled (one change set, the exact row diff)."""
    assert batch.rechecked is not None
    aside = [(entry.table, entry.key) for entry in batch.recheck_unreadable]
    changes = recheck_changes(
        tx.state.tables, recheck.candidates, batch.rechecked, aside, batch.undeclared
    )
    recheck.done = True
    if batch.recheck_unreadable:
        source.set_aside(batch.recheck_unreadable)
    if not changes:
        return
    with change_origin("reconciled"):
        tx.apply(changes)
    logger.warning(
        "%s: %s differ%s from the database beyond what the capture recorded (a survey);"
        " reconciled as the change set at seq %d",
        source.name,
        ", ".join(repr(name) for name in sorted(changes)),
        "s" if len(changes) == 1 else "",
        tx.state.seq,
    )


def trim(source: ChangeSource, position: int | None) -> None:
    """Delete the records consumed up to ``position``; a failure is logged, not raised."""
    if position is None:
        return
    try:
        source.trim(position)
    except Exception as exc:  # the records are consumed; trimming again later is harmless
        logger.warning("could not trim the change capture: %s", exc)


def _apply(
    tx: RegistryTransaction, source: ChangeSource, sets: list[CapturedTransaction]
) -> list[tuple[str | None, Mapping[str, ReloadResult]]]:
    start, records = tx.state, list(tx.records)
    try:
        return [(cs.tx, tx.apply(cs.changes(tx.state.tables, tx.served))) for cs in sets]
    except ProtocolError:
        # A change set the contract cannot carry (say an integer beyond 2^53) may be repaired by a
        # later write; every pending change as one set is the state to serve if it is valid.
        tx.state, tx.records = start, records
        whole = merged(sets)
        try:
            return [(whole.tx, tx.apply(whole.changes(tx.state.tables, tx.served)))]
        except ProtocolError as exc:
            raise SourceError(
                f"{source.name}: a captured change cannot be served: {exc.detail}"
            ) from None


def _release(source: ChangeSource, pairs: list[tuple[str, str]]) -> None:
    """Clear the quarantine of rows a committed change set replaced; a failure is logged (the
    registry has committed: the entry stays listed until the row's next write or a full read)."""
    if not pairs:
        return
    try:
        source.release(pairs)
    except Exception as exc:
        logger.warning("could not release quarantined rows %s: %s", pairs, exc)


def _written(good: list[Captured], bad: list[QuarantineEntry]) -> list[tuple[str, str]]:
    """The rows whose last record is carriable (their quarantine entries are cleared)."""
    last_bad = {(q.table, q.key): q.capture_id for q in bad}
    last_good: dict[tuple[str, str], int] = {}
    for r in good:
        if r.op in (UPSERT, DELETE) and r.key is not None:
            last_good[(r.table, key_text(r.key))] = r.id
    return sorted(p for p, i in last_good.items() if i > (last_bad.get(p) or -1))


def _carried(
    tx: RegistryTransaction,
    read: Mapping[str, Mapping[str, Any]],
    unreadable: Iterable[QuarantineEntry],
) -> dict[str, dict[str, Any]]:
    """A full read's tables, with each unreadable row at its last carried image (or absent)."""
    contents = {name: dict(rows) for name, rows in read.items()}
    for entry in unreadable:
        if entry.table not in contents:
            continue
        current = tx.state.tables[entry.table]
        if entry.key in current.rows:
            contents[entry.table][entry.key] = thaw(current.rows[entry.key])
    return contents
