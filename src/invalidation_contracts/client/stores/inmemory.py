"""A process-local store of JSON documents, for tests, simulations and short-lived agents.

Several memories (or threads) of one process may share one; each batch is atomic and isolated.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Hashable, Iterable
from datetime import UTC, datetime
from typing import Any

from .base import (
    CheckOp,
    GetOp,
    Item,
    Namespace,
    Op,
    PutOp,
    Result,
    SearchOp,
    Store,
    check,
    matches_filter,
    namespaces_under,
    prepare,
)


class InMemoryStore(Store):
    """Values are copied through JSON on the way in and out, so they behave as SQLite's do."""

    def __init__(self) -> None:
        self._items: dict[Namespace, dict[str, Item]] = {}
        self._lock = threading.Lock()
        self._writes = 0

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        # Every op is validated and its value copied, and every check made against the state the
        # batch will have reached at it, before the first op runs; running a put on a dict cannot
        # fail, so the batch is all-or-nothing.
        prepared = [prepare(op) for op in ops]
        with self._lock:
            self._check(prepared)
            results = [self._run(self._items, op) for op in prepared]
            if any(isinstance(op, PutOp) for op in prepared):
                self._writes += 1
            return results

    def version(self) -> Hashable:
        return self._writes

    def _check(self, ops: list[Op]) -> None:
        pending: dict[tuple[Namespace, str], Any] = {}
        for op in ops:
            if isinstance(op, PutOp):
                pending[(op.namespace, op.key)] = op.value
            elif isinstance(op, CheckOp):
                where = (op.namespace, op.key)
                if where in pending:
                    check(op, pending[where])
                else:
                    item = self._items.get(op.namespace, {}).get(op.key)
                    check(op, item.value if item else None)

    def _run(self, items: dict[Namespace, dict[str, Item]], op: Op) -> Result:
        if isinstance(op, CheckOp):
            return None
        if isinstance(op, GetOp):
            item = items.get(op.namespace, {}).get(op.key)
            return _copy(item) if item else None
        if isinstance(op, PutOp):
            bucket = items.setdefault(op.namespace, {})
            if op.value is None:
                bucket.pop(op.key, None)
                if not bucket:
                    del items[op.namespace]
                return None
            now = datetime.now(UTC)
            old = bucket.get(op.key)
            bucket[op.key] = Item(
                op.namespace, op.key, dict(op.value), old.created_at if old else now, now
            )
            return None
        if isinstance(op, SearchOp):
            prefix = op.namespace_prefix
            hits = [
                item
                for ns in sorted(items)
                if ns[: len(prefix)] == prefix
                for _, item in sorted(items[ns].items())
                if matches_filter(item.value, op.filter)
            ]
            return [_copy(item) for item in hits[op.offset : op.offset + op.limit]]
        found = namespaces_under(items, op.prefix, op.max_depth)
        return found[op.offset : op.offset + op.limit]


def _copy(item: Item) -> Item:
    return Item(
        item.namespace,
        item.key,
        json.loads(json.dumps(item.value)),
        item.created_at,
        item.updated_at,
    )
