"""How a fix memory lies in a store: one namespace per origin and part, a generation, a journal.

``("invalidation-contracts", <origin label>, "entries" | "tombstones" | "meta" | "journal" |
"records")``.

- ``meta/state`` and ``meta/stats``: the origin's contract state and counters.
- ``meta/generation``: ``{"generation": n}``, bumped by every write batch of the origin (absent:
  0). A write batch is conditional on the generation it was computed at (a ``CheckOp``), so two
  processes can never both commit a change made from the same state: the loser re-reads and
  recomputes. Entry ids are unique across processes that way.
- ``journal/<generation>``: the ids each batch wrote and removed, and the eviction records it
  wrote or swept (the last ``JOURNAL_KEEP`` batches), so a process that sees the generation move
  reads only what changed.
- ``records/<generation>``: a large eviction written once (``client.shared.moves``): the entries it
  names stay stored, dead, and every reader leaves them out; their rows are the tombstones.

The memory core never spells a namespace; everything it reads or writes is built here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

from pydantic import ValidationError

from ..entries import MemoryEntry, Tombstone
from ..limits import DEFAULT_LIMITS, Limits
from ..retention import dropped, tombstone_key
from ..state import OriginState
from ..stats import OriginStats
from . import moves
from .index import OriginIndex
from .ledger import Ledger
from .moves import EvictionRecord, Sweep, covered, kept_ids, record_of, sweep, tombstones
from .store import (
    UNREADABLE,
    CheckOp,
    GetOp,
    Item,
    Op,
    PutOp,
    Result,
    SearchOp,
    Store,
    StoreError,
)

#: The first label of every namespace the memory writes.
ROOT = "invalidation-contracts"
#: The item of an origin's ``meta`` namespace that holds its writers' turn (``client.shared.turn``).
TURN_KEY = "turn"
#: How many batches the journal keeps; a process further behind reloads the origin.
JOURNAL_KEEP = 1024
#: A batch that writes or removes more entries than this is journalled as "reload the origin".
JOURNAL_MAX_IDS = 4096
_EVERYTHING = 2**62
_PAGE = 500


def origin_label(origin: str) -> str:
    """An origin as one namespace label: ``%``, ``.`` and control characters percent-encoded."""
    return "".join(f"%{ord(ch):02X}" if ch in "%." or ord(ch) < 0x20 else ch for ch in origin)


def origin_of_label(label: str) -> str:
    return unquote(label)


def namespace(origin: str, part: str) -> tuple[str, str, str]:
    """The namespace of one part (``entries``, ``tombstones``, ``meta``, ``journal``)."""
    return (ROOT, origin_label(origin), part)


@dataclass(slots=True)
class CommittedOrigin:
    """An origin as committed at one generation."""

    index: OriginIndex
    state: OriginState
    stats: OriginStats
    generation: int
    records: dict[int, EvictionRecord]
    """The origin's eviction records, by generation."""
    announced: frozenset[str] = frozenset()
    """Ids the writer holding the turn announced it is evicting (``client.shared.turn``)."""
    unreadable: dict[str, str] = field(default_factory=dict)
    """Entry rows that could not be read (``{id: why}``): left out of the index (issue 38)."""


@dataclass(frozen=True, slots=True)
class Changes:
    """What the journal says happened between two generations."""

    written: tuple[str, ...]
    """Ids written (stored or restamped) and still live at the end, in the order written."""
    removed: frozenset[str]
    """Ids removed (evicted) by the end, not counting those in eviction records."""
    records: frozenset[int] = frozenset()
    """Generations of the eviction records written, swept or dropped meanwhile."""


# ---------------------------------------------------------------------------------- reading


def load_ops(origin: str) -> list[Op]:
    """One read batch for a whole origin: its meta items, eviction records and entries."""
    meta = namespace(origin, "meta")
    return [
        GetOp(meta, "generation"),
        GetOp(meta, "state"),
        GetOp(meta, "stats"),
        SearchOp(namespace(origin, "records"), limit=_EVERYTHING),
        SearchOp(namespace(origin, "entries"), limit=_EVERYTHING),
        GetOp(meta, TURN_KEY),
    ]


def loaded(origin: str, results: Sequence[Result]) -> CommittedOrigin:
    """The snapshot ``load_ops`` read: the entries no eviction record names."""
    generation, state, stats, record_items, items, turn = results
    ns = namespace(origin, "entries")
    try:
        records = records_of(origin, record_items)
        dead = covered(records.values())
        entries, unreadable = readable_entries(
            i for i in _items(items) if i.namespace == ns and i.key not in dead
        )
        return CommittedOrigin(
            OriginIndex(entries),
            _state(origin, state),
            _stats(origin, stats),
            generation_of(generation),
            records,
            announced(turn),
            unreadable,
        )
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        raise StoreError(f"the memory of {origin} cannot be read: {exc}") from exc


def records_of(origin: str, result: Result) -> dict[int, EvictionRecord]:
    """The eviction records a ``SearchOp`` of the ``records`` namespace read, by generation."""
    ns = namespace(origin, "records")
    try:
        found = [EvictionRecord.from_dict(i.value) for i in _items(result) if i.namespace == ns]
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"the memory of {origin} cannot be read: {exc}") from exc
    return {record.generation: record for record in found}


def record_ops(origin: str, generations: Iterable[int]) -> list[Op]:
    """The given eviction records (absent ones read as None: dropped)."""
    ns = namespace(origin, "records")
    return [GetOp(ns, journal_key(g)) for g in generations]


def record_read(origin: str, result: Result) -> EvictionRecord | None:
    if result is None:
        return None
    try:
        return EvictionRecord.from_dict(_value(result))
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"the memory of {origin} cannot be read: {exc}") from exc


def generation_ops(origin: str) -> list[Op]:
    """The cheap read that says whether an origin changed: its generation, and the turn (which
    may announce an eviction about to commit)."""
    meta = namespace(origin, "meta")
    return [GetOp(meta, "generation"), GetOp(meta, TURN_KEY)]


def announced(turn: Result) -> frozenset[str]:
    """The ids a turn (as read) announces it is evicting; empty when it announces none."""
    return announced_in(turn.value) if isinstance(turn, Item) else frozenset()


def announced_in(turn: Mapping[str, Any]) -> frozenset[str]:
    if "evicting" not in turn:
        return frozenset()
    try:
        return frozenset(EvictionRecord.from_dict(turn["evicting"]).ids())
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"a turn announces an unreadable eviction: {exc}") from exc


def generation_of(result: Result) -> int:
    """The generation a ``GetOp`` of ``meta/generation`` read (0 when absent)."""
    if result is None:
        return 0
    if not isinstance(result, Item) or not isinstance(result.value.get("generation"), int):
        raise StoreError(f"not a memory generation: {result!r}")
    return int(result.value["generation"])


def journal_ops(origin: str, start: int, end: int) -> list[Op]:
    """Meta items now, and the journal records of the batches ``start + 1`` … ``end``."""
    meta, journal = namespace(origin, "meta"), namespace(origin, "journal")
    return [
        GetOp(meta, "generation"),
        GetOp(meta, "state"),
        GetOp(meta, "stats"),
        *(GetOp(journal, journal_key(g)) for g in range(start + 1, end + 1)),
    ]


def journalled(records: Sequence[Result]) -> Changes | None:
    """The changes the journal records say; None when one is gone or asks for a reload."""
    written: dict[str, None] = {}
    removed: set[str] = set()
    touched: set[int] = set()
    for record in records:
        if not isinstance(record, Item) or record.value.get("reload"):
            return None
        for generation in record.value.get("records", ()):
            if not isinstance(generation, int) or isinstance(generation, bool):
                return None
            touched.add(generation)
        for entry_id in record.value.get("removed", ()):
            written.pop(entry_id, None)
            removed.add(entry_id)
        for entry_id in record.value.get("written", ()):
            removed.discard(entry_id)
            written.pop(entry_id, None)
            written[entry_id] = None
    return Changes(tuple(written), frozenset(removed), frozenset(touched))


def entry_ops(origin: str, entry_ids: Sequence[str]) -> list[Op]:
    """The generation now, and the given entries."""
    entries = namespace(origin, "entries")
    ops: list[Op] = [GetOp(namespace(origin, "meta"), "generation")]
    ops += [GetOp(entries, entry_id) for entry_id in entry_ids]
    return ops


def readable_entries(items: Iterable[Item]) -> tuple[list[MemoryEntry], dict[str, str]]:
    """The entries of ``items`` that read, and ``{id: why}`` for each that does not: one
    damaged row costs that entry alone, never the origin (issue 38, H6)."""
    entries: list[MemoryEntry] = []
    unreadable: dict[str, str] = {}
    for item in items:
        if UNREADABLE in item.value:
            unreadable[item.key] = str(item.value[UNREADABLE])
            continue
        try:
            entries.append(MemoryEntry.from_dict(item.value))
        except (KeyError, TypeError, ValueError, ValidationError) as exc:
            unreadable[item.key] = f"not an entry: {type(exc).__name__}: {exc}"[:200]
    return entries, unreadable


def entries_of(origin: str, results: Sequence[Result]) -> tuple[list[MemoryEntry], dict[str, str]]:
    """The entries a batch of ``GetOp`` read (absent ones left out), and the unreadable ones."""
    return readable_entries(r for r in results if isinstance(r, Item))


def meta_of(origin: str, state: Result, stats: Result) -> tuple[OriginState, OriginStats]:
    try:
        return _state(origin, state), _stats(origin, stats)
    except (KeyError, TypeError, ValueError) as exc:
        raise StoreError(f"the memory of {origin} cannot be read: {exc}") from exc


def read_all(store: Store, ns: tuple[str, ...]) -> list[Item]:
    """Every item in exactly ``ns``, paging through the store."""
    items: list[Item] = []
    offset = 0
    while True:
        page = store.search(ns, limit=_PAGE, offset=offset)
        offset += len(page)
        items.extend(item for item in page if item.namespace == ns)
        if len(page) < _PAGE:
            return items


def load_tombstones(store: Store, origin: str) -> list[Tombstone]:
    """An origin's evicted entries, in the order they were evicted: the tombstones written one
    by one, and those eviction records stand for (rebuilt from the entries' stored rows)."""
    items = read_all(store, namespace(origin, "tombstones"))
    found = _readable_tombstones(items)
    state, records = store.batch(
        [
            GetOp(namespace(origin, "meta"), "state"),
            SearchOp(namespace(origin, "records"), limit=_EVERYTHING),
        ]
    )
    held = records_of(origin, records)
    if held:
        floor = _state(origin, state).tombstone_floor
        ns = namespace(origin, "entries")
        wanted = kept_ids(held.values(), floor)
        rows: dict[str, MemoryEntry] = {}
        for start in range(0, len(wanted), _PAGE):
            got = store.batch([GetOp(ns, eid) for eid in wanted[start : start + _PAGE]])
            rows.update((e.id, e) for e in entries_of(origin, got)[0])
        found += tombstones(held.values(), rows, floor)
    return sorted(found, key=lambda t: t.sequence)


def _readable_tombstones(items: Iterable[Item]) -> list[Tombstone]:
    """The tombstones that read; a damaged row is left out, as an entry's is."""
    found = []
    for item in items:
        try:
            found.append(Tombstone.from_dict(item.value))
        except (KeyError, TypeError, ValueError, ValidationError):
            continue
    return found


def stored_origins(store: Store) -> list[str]:
    """Every origin the store holds a memory of."""
    found = store.list_namespaces(prefix=(ROOT,), max_depth=2, limit=1_000_000)
    return sorted({origin_of_label(ns[1]) for ns in found if len(ns) > 1})


# ---------------------------------------------------------------------------------- writing


def journal_key(generation: int) -> str:
    return f"{generation:020d}"


@dataclass(frozen=True, slots=True)
class CommitPlan:
    """What a commit does beyond its entries: the eviction it records, the tombstones still
    written one by one, the tombstones and dead rows bounded history drops."""

    record: EvictionRecord | None
    eager: Mapping[str, Tombstone]
    """Evictions written as a delete and a tombstone each."""
    dropped: tuple[int, ...]
    """Sequences of written tombstones that fall out of the history."""
    sweep: Sweep

    @property
    def touched(self) -> tuple[int, ...]:
        """Generations of the records this commit writes, updates or deletes."""
        new = (self.record.generation,) if self.record is not None else ()
        return new + self.sweep.touched


def plan_commit(
    tx: Ledger,
    generation: int,
    records: Mapping[int, EvictionRecord],
    limits: Limits = DEFAULT_LIMITS,
) -> CommitPlan:
    """Plan the commit of ``tx`` at ``generation`` over the origin's ``records``; moves the
    state's tombstone floor (``client.retention``), so call it once per commit attempt."""
    record, eager = record_of(tx.removed, tx.index.base, generation + 1, minimum=moves.RECORD_MIN)
    first = min((tomb.sequence for tomb in tx.removed.values()), default=None)
    floor_range = dropped(tx.state, tx.now, limits, first)
    held = [*records.values(), *([record] if record is not None else [])]
    spans = sorted((g.first, g.first + g.size) for r in held for g in r.groups)
    return CommitPlan(
        record,
        eager,
        tuple(_outside(floor_range, spans)),
        # a new record is swept from the next commit on
        sweep(list(records.values()), tx.state.tombstone_floor, moves.SWEEP_MAX),
    )


def commit_ops(
    tx: Ledger,
    generation: int,
    stats: OriginStats,
    turn: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
    plan: CommitPlan | None = None,
) -> Iterator[Op]:
    """One call as one batch, valid only at ``generation`` and while no other writer holds the
    origin's turn (``turn``: the one this call holds, released by the batch; ``shared.turn``):
    entries, tombstones (pruned to ``limits``, ``client.retention``) or one eviction record
    (``plan``, ``client.shared.moves``), meta, journal.

    A generator: each entry's dict is made as the store encodes it and dropped right after, so a
    batch of 10⁵ restamps never holds 10⁵ dicts at once.
    """
    if plan is None:
        plan = plan_commit(tx, generation, {}, limits)
    entries, tombstones, meta, journal, records = (
        namespace(tx.origin, part)
        for part in ("entries", "tombstones", "meta", "journal", "records")
    )
    after = generation + 1
    yield CheckOp(meta, "generation", {"generation": generation} if generation else None)
    yield CheckOp(meta, TURN_KEY, turn)
    if turn is not None:
        yield PutOp(meta, TURN_KEY, _released(turn, tx))
    for eid, entry in tx.written.items():
        yield PutOp(entries, eid, entry.to_dict())
    for eid, tomb in plan.eager.items():
        yield PutOp(entries, eid, None)
        yield PutOp(tombstones, tombstone_key(tomb.sequence), tomb.to_dict())
    if plan.record is not None:
        yield PutOp(records, journal_key(after), plan.record.to_dict())
    for sequence in plan.dropped:  # bounded history
        yield PutOp(tombstones, tombstone_key(sequence), None)
    for eid in plan.sweep.deleted_rows:
        yield PutOp(entries, eid, None)
    for updated in plan.sweep.updated:
        yield PutOp(records, journal_key(updated.generation), updated.to_dict())
    for gone in plan.sweep.dropped:
        yield PutOp(records, journal_key(gone), None)
    yield PutOp(meta, "state", tx.state.to_dict())
    yield PutOp(meta, "stats", stats.to_dict())
    yield PutOp(meta, "generation", {"generation": after})
    record: dict[str, Any] = {"written": list(tx.written), "removed": list(plan.eager)}
    if plan.touched:
        record["records"] = list(plan.touched)
    if len(tx.written) + len(plan.eager) > JOURNAL_MAX_IDS:
        record = {"reload": True}
    yield PutOp(journal, journal_key(after), record)
    if after > JOURNAL_KEEP:
        yield PutOp(journal, journal_key(after - JOURNAL_KEEP), None)


def _released(turn: Mapping[str, Any], tx: Ledger) -> dict[str, Any] | None:
    """The turn a commit leaves: none — unless the turn announced an eviction (one it took over
    from a writer that died before committing it) that this commit leaves live. That stays
    announced, in a free turn, until a commit evicts it: the server did move."""
    if "evicting" not in turn:
        return None
    if not any(entry_id in tx.index for entry_id in announced_in(turn)):
        return None
    return {"evicting": turn["evicting"], "until": 0}


def _outside(sequences: range, spans: Sequence[tuple[int, int]]) -> Iterator[int]:
    """The sequences of ``sequences`` in none of the ``[start, end)`` spans (sorted): the
    tombstones written one by one (a record's tombstones are its entries' rows)."""
    at = sequences.start
    for start, end in spans:
        if end <= at:
            continue
        if start >= sequences.stop:
            break
        yield from range(at, min(start, sequences.stop))
        at = max(at, end)
    yield from range(at, sequences.stop)


def _items(result: Result) -> list[Item]:
    return [item for item in result if isinstance(item, Item)] if isinstance(result, list) else []


def _state(origin: str, result: Result) -> OriginState:
    return OriginState.from_dict(_value(result)) if result is not None else OriginState()


def _stats(origin: str, result: Result) -> OriginStats:
    return OriginStats.from_dict(_value(result)) if result is not None else OriginStats()


def _value(result: Result) -> Mapping[str, Any]:
    if not isinstance(result, Item):
        raise TypeError(f"expected a stored item, got {type(result).__name__}")
    return result.value
