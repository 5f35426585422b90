"""How a fix memory lies in a store: one namespace per origin and part, a generation, a journal.

``("invalidation-contracts", <origin label>, "entries" | "tombstones" | "meta" | "journal")``.

- ``meta/state`` and ``meta/stats``: the origin's contract state and counters.
- ``meta/generation``: ``{"generation": n}``, bumped by every write batch of the origin (absent:
  0). A write batch is conditional on the generation it was computed at (a ``CheckOp``), so two
  processes can never both commit a change made from the same state: the loser re-reads and
  recomputes. Entry ids are unique across processes that way.
- ``journal/<generation>``: the ids each batch wrote and removed (the last ``JOURNAL_KEEP``
  batches), so a process that sees the generation move reads only what changed.

The memory core never spells a namespace; everything it reads or writes is built here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

from pydantic import ValidationError

from .entries import MemoryEntry, Tombstone
from .index import OriginIndex
from .ledger import Ledger
from .limits import DEFAULT_LIMITS, Limits
from .retention import dropped, tombstone_key
from .state import OriginState
from .stats import OriginStats
from .stores import CheckOp, GetOp, Item, Op, PutOp, Result, SearchOp, Store, StoreError

#: The first label of every namespace the memory writes.
ROOT = "invalidation-contracts"
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
class Snapshot:
    """An origin as committed at one generation."""

    index: OriginIndex
    state: OriginState
    stats: OriginStats
    generation: int


@dataclass(frozen=True, slots=True)
class Changes:
    """What the journal says happened between two generations."""

    written: tuple[str, ...]
    """Ids written (stored or restamped) and still live at the end, in the order written."""
    removed: frozenset[str]
    """Ids removed (evicted) by the end."""


# ---------------------------------------------------------------------------------- reading


def load_ops(origin: str) -> list[Op]:
    """One read batch for a whole origin: its meta items and every live entry."""
    meta = namespace(origin, "meta")
    return [
        GetOp(meta, "generation"),
        GetOp(meta, "state"),
        GetOp(meta, "stats"),
        SearchOp(namespace(origin, "entries"), limit=_EVERYTHING),
    ]


def loaded(origin: str, results: Sequence[Result]) -> Snapshot:
    """The snapshot ``load_ops`` read."""
    generation, state, stats, items = results
    ns = namespace(origin, "entries")
    try:
        entries = [
            MemoryEntry.from_dict(item.value) for item in _items(items) if item.namespace == ns
        ]
        return Snapshot(
            OriginIndex(entries),
            _state(origin, state),
            _stats(origin, stats),
            generation_of(generation),
        )
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        raise StoreError(f"the memory of {origin} cannot be read: {exc}") from exc


def generation_ops(origin: str) -> list[Op]:
    """The cheap read that says whether an origin changed: its generation."""
    return [GetOp(namespace(origin, "meta"), "generation")]


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
    for record in records:
        if not isinstance(record, Item) or record.value.get("reload"):
            return None
        for entry_id in record.value.get("removed", ()):
            written.pop(entry_id, None)
            removed.add(entry_id)
        for entry_id in record.value.get("written", ()):
            removed.discard(entry_id)
            written.pop(entry_id, None)
            written[entry_id] = None
    return Changes(tuple(written), frozenset(removed))


def entry_ops(origin: str, entry_ids: Sequence[str]) -> list[Op]:
    """The generation now, and the given entries."""
    entries = namespace(origin, "entries")
    ops: list[Op] = [GetOp(namespace(origin, "meta"), "generation")]
    ops += [GetOp(entries, entry_id) for entry_id in entry_ids]
    return ops


def entries_of(origin: str, results: Sequence[Result]) -> list[MemoryEntry]:
    try:
        return [MemoryEntry.from_dict(r.value) for r in results if isinstance(r, Item)]
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        raise StoreError(f"the memory of {origin} cannot be read: {exc}") from exc


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
    """An origin's evicted entries, in the order they were evicted."""
    items = read_all(store, namespace(origin, "tombstones"))
    return sorted((Tombstone.from_dict(item.value) for item in items), key=lambda t: t.sequence)


def stored_origins(store: Store) -> list[str]:
    """Every origin the store holds a memory of."""
    found = store.list_namespaces(prefix=(ROOT,), max_depth=2, limit=1_000_000)
    return sorted({origin_of_label(ns[1]) for ns in found if len(ns) > 1})


# ---------------------------------------------------------------------------------- writing


def journal_key(generation: int) -> str:
    return f"{generation:020d}"


def commit_ops(
    tx: Ledger,
    generation: int,
    stats: OriginStats,
    turn: Mapping[str, Any] | None = None,
    limits: Limits = DEFAULT_LIMITS,
) -> Iterator[Op]:
    """One call as one batch, valid only at ``generation`` and while no other writer holds the
    origin's turn (``turn``: the one this call holds, released by the batch; ``client.turn``):
    entries, tombstones (pruned to ``limits``, ``client.retention``), meta, journal.

    A generator: each entry's dict is made as the store encodes it and dropped right after, so a
    batch of 10⁵ restamps never holds 10⁵ dicts at once.
    """
    entries, tombstones, meta, journal = (
        namespace(tx.origin, part) for part in ("entries", "tombstones", "meta", "journal")
    )
    after = generation + 1
    yield CheckOp(meta, "generation", {"generation": generation} if generation else None)
    yield CheckOp(meta, "turn", turn)
    if turn is not None:
        yield PutOp(meta, "turn", None)
    for eid, entry in tx.written.items():
        yield PutOp(entries, eid, entry.to_dict())
    for eid, tomb in tx.removed.items():
        yield PutOp(entries, eid, None)
        yield PutOp(tombstones, tombstone_key(tomb.sequence), tomb.to_dict())
    first = min((tomb.sequence for tomb in tx.removed.values()), default=None)
    for sequence in dropped(tx.state, tx.now, limits, first):  # bounded history
        yield PutOp(tombstones, tombstone_key(sequence), None)
    yield PutOp(meta, "state", tx.state.to_dict())
    yield PutOp(meta, "stats", stats.to_dict())
    yield PutOp(meta, "generation", {"generation": after})
    record: dict[str, Any] = {"written": list(tx.written), "removed": list(tx.removed)}
    if len(tx.written) + len(tx.removed) > JOURNAL_MAX_IDS:
        record = {"reload": True}
    yield PutOp(journal, journal_key(after), record)
    if after > JOURNAL_KEEP:
        yield PutOp(journal, journal_key(after - JOURNAL_KEEP), None)


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
