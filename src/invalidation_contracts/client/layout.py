"""How a fix memory lies in a store: one namespace triple per origin and part.

``("invalidation-contracts", <origin label>, "entries" | "tombstones" | "meta")``. Reading an
origin back and writing one transaction as a single batch live here, so the memory core never
spells a namespace itself.
"""

from __future__ import annotations

from urllib.parse import unquote

from pydantic import ValidationError

from .entries import MemoryEntry, Tombstone
from .index import OriginIndex
from .ledger import Ledger
from .state import OriginState
from .stats import OriginStats
from .stores import Item, PutOp, Store, StoreError

#: The first label of every namespace the memory writes.
ROOT = "invalidation-contracts"
_PAGE = 500


def origin_label(origin: str) -> str:
    """An origin as one namespace label: ``%``, ``.`` and control characters percent-encoded."""
    return "".join(f"%{ord(ch):02X}" if ch in "%." or ord(ch) < 0x20 else ch for ch in origin)


def origin_of_label(label: str) -> str:
    return unquote(label)


def namespace(origin: str, part: str) -> tuple[str, str, str]:
    """The namespace of one part (``entries``, ``tombstones``, ``meta``) of an origin's memory."""
    return (ROOT, origin_label(origin), part)


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


def load_origin(store: Store, origin: str) -> tuple[OriginIndex, OriginState, OriginStats]:
    """An origin's live entries (indexed), contract state and counters, as last committed."""
    meta = namespace(origin, "meta")
    state_item = store.get(meta, "state")
    stats_item = store.get(meta, "stats")
    try:
        state = OriginState.from_dict(state_item.value) if state_item else OriginState()
        stats = OriginStats.from_dict(stats_item.value) if stats_item else OriginStats()
        entries = [
            MemoryEntry.from_dict(item.value)
            for item in read_all(store, namespace(origin, "entries"))
        ]
    except (KeyError, TypeError, ValueError, ValidationError) as exc:
        raise StoreError(f"the memory of {origin} cannot be read: {exc}") from exc
    return OriginIndex(entries), state, stats


def load_tombstones(store: Store, origin: str) -> list[Tombstone]:
    """An origin's evicted entries, in the order they were evicted."""
    items = read_all(store, namespace(origin, "tombstones"))
    return sorted((Tombstone.from_dict(item.value) for item in items), key=lambda t: t.sequence)


def has_tombstone(store: Store, origin: str, entry_id: str) -> bool:
    return store.get(namespace(origin, "tombstones"), entry_id) is not None


def stored_origins(store: Store) -> list[str]:
    """Every origin the store holds a memory of."""
    found = store.list_namespaces(prefix=(ROOT,), max_depth=2, limit=1_000_000)
    return sorted({origin_of_label(ns[1]) for ns in found if len(ns) > 1})


def commit_ops(tx: Ledger) -> list[PutOp]:
    """One transaction as one batch: written entries, buried ones with their tombstones, meta."""
    entries, tombstones, meta = (
        namespace(tx.origin, part) for part in ("entries", "tombstones", "meta")
    )
    ops = [PutOp(entries, eid, entry.to_dict()) for eid, entry in tx.written.items()]
    for eid, tomb in tx.removed.items():
        ops.append(PutOp(entries, eid, None))
        ops.append(PutOp(tombstones, eid, tomb.to_dict()))
    ops.append(PutOp(meta, "state", tx.state.to_dict()))
    ops.append(PutOp(meta, "stats", tx.stats.to_dict()))
    return ops
