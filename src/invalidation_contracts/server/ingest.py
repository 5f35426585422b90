"""Consuming the change capture of the provider's database into the registry, under its lock.

``ingest`` turns the records captured after the registry's position into change sets, exactly as
an admin reload would be recorded (version bump, row diff, feed records, downstream walk); a gap
in the records, or tables that differ from what they explain, start a new epoch instead.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..protocol.models import ReloadResult
from ..protocol.problems import ProtocolError
from .origin import change_origin
from .registry import Registry, RegistryTransaction
from .tables import Snapshot, thaw
from .versions import next_version

logger = logging.getLogger(__name__)


class SourceError(RuntimeError):
    """The provider's database could not be read (or holds a row the contract cannot carry)."""


def ingest(
    registry: Registry, source: Any, *, verify: bool = False, head: int | None = None
) -> bool:
    """Consume ``source``'s captured changes; True when the registry moved.

    ``verify`` also compares the tables with the database in the same snapshot (done when a worker
    opens the registry): a difference the capture does not explain starts a new epoch. ``head``:
    the capture head the caller just read (saves reading it again).
    """
    with change_origin("captured"), registry.transaction() as tx:
        after = tx.position(source.name)
        if after is not None and not verify and head == after:
            return False
        before = tx.state
        consume(tx, source, verify=verify)
        moved = tx.state is not before
    trim(source, tx.positions[source.name])
    return moved


def consume(
    tx: RegistryTransaction, source: Any, *, verify: bool = False
) -> list[tuple[str | None, Mapping[str, ReloadResult]]]:
    """Apply the records captured after the registry's position, inside ``tx``.

    Returns each change set's transaction id and per-table results, in order.
    """
    from .sql.images import change_sets, gap, screen

    after = tx.position(source.name)
    batch = source.read(after, full=verify or after is None)
    reason = "the capture position is unknown" if after is None else gap(after, batch)
    good, bad = screen(batch.records)
    applied: list[tuple[str | None, Mapping[str, ReloadResult]]] = []
    if reason is None:
        sets = change_sets(good, by_transaction=source.by_transaction)
        applied = _apply(tx, source, sets)
        source.set_aside(bad)
        source.release(_written(good, bad))
        if batch.contents is not None:
            reason = _differs(tx, source, _carried(tx, batch))
    if reason is not None:
        if batch.contents is None:
            batch = source.read(None, full=True)
        assert batch.contents is not None
        _restart(tx, source, _carried(tx, batch), reason)
        applied = []
    if batch.contents is not None:
        source.set_aside(batch.unreadable, replace=True)
    tx.set_position(source.name, batch.head)
    return applied


def _written(good: list[Any], bad: list[Any]) -> list[tuple[str, str]]:
    """The rows whose last record is carriable (their quarantine entries are cleared)."""
    from .sql.images import DELETE, UPSERT, key_text

    last_bad = {(q.table, q.key): q.capture_id for q in bad}
    last_good: dict[tuple[str, str], int] = {}
    for r in good:
        if r.op in (UPSERT, DELETE) and r.key is not None:
            last_good[(r.table, key_text(r.key))] = r.id
    return sorted(p for p, i in last_good.items() if i > (last_bad.get(p) or -1))


def _carried(tx: RegistryTransaction, batch: Any) -> dict[str, dict[str, Any]]:
    """A full read's tables, with each unreadable row at its last carried image (or absent)."""
    contents = {name: dict(rows) for name, rows in batch.contents.items()}
    for entry in batch.unreadable:
        current = tx.state.tables[entry.table]
        if entry.key in current.rows:
            contents[entry.table][entry.key] = thaw(current.rows[entry.key])
    return contents


def trim(source: Any, position: int) -> None:
    try:
        source.trim(position)
    except Exception as exc:  # the records are consumed; trimming again later is harmless
        logger.warning("could not trim the change capture: %s", exc)


def _apply(
    tx: RegistryTransaction, source: Any, sets: list[Any]
) -> list[tuple[str | None, Mapping[str, ReloadResult]]]:
    from .sql.images import merged

    start, records = tx.state, list(tx.records)
    try:
        return [(cs.tx, tx.apply(cs.changes(tx.state.tables))) for cs in sets]
    except ProtocolError:
        # A change set the contract cannot carry (say an integer beyond 2^53) may be repaired by a
        # later write; every pending change as one set is the state to serve if it is valid.
        tx.state, tx.records = start, records
        whole = merged(sets)
        try:
            return [(whole.tx, tx.apply(whole.changes(tx.state.tables)))]
        except ProtocolError as exc:
            raise SourceError(
                f"{source.name}: a captured change cannot be served: {exc.detail}"
            ) from None


def _differs(tx: RegistryTransaction, source: Any, contents: Mapping[str, Any]) -> str | None:
    for name, rows in contents.items():
        current = tx.state.tables[name]
        if not source.snapshot(name, current.version, rows).same_content(current):
            return f"table {name!r} differs from the database beyond what the capture recorded"
    return None


def _restart(
    tx: RegistryTransaction, source: Any, contents: Mapping[str, Any], reason: str
) -> None:
    tables: dict[str, Snapshot] = {}
    for name, rows in contents.items():
        current = tx.state.tables[name]
        candidate = source.snapshot(name, current.version, rows)
        if not candidate.same_content(current):
            try:
                candidate = candidate.restamped(next_version(current.version))
            except ProtocolError:
                pass  # not dotted-numeric: the new epoch alone tells clients to revalidate
        tables[name] = candidate
    tx.restart(tables)
    logger.warning(
        "%s: %s; starting a new history epoch %s at seq %d",
        source.name,
        reason,
        tx.state.epoch,
        tx.state.seq,
    )
