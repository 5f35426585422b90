"""A process-local store of JSON documents, for tests, simulations and short-lived agents.

Several memories (or threads) of one process may share one; each batch is atomic and isolated.
Values are kept as their JSON text, as SQLite keeps them: a put copies, a read parses, and a
large memory is a few strings to the garbage collector rather than millions of objects.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..shared.store import (
    CheckOp,
    GetOp,
    Item,
    Namespace,
    Op,
    Prepared,
    Result,
    SearchOp,
    Store,
    Write,
    check,
    matches_filter,
    namespaces_under,
    prepare,
)


@dataclass(frozen=True, slots=True)
class _Record:
    text: str
    created_at: datetime
    updated_at: datetime


class InMemoryStore(Store):
    """Namespaced JSON documents in a dict, behind a lock."""

    def __init__(self) -> None:
        self._items: dict[Namespace, dict[str, _Record]] = {}
        self._lock = threading.Lock()
        self._writes = 0

    def batch(self, ops: Iterable[Op]) -> list[Result]:
        # Every op is validated and its value encoded, and every check made against the state
        # the batch will have reached at it, before the first op runs; running a write on a dict
        # cannot fail, so the batch is all-or-nothing.
        prepared = [prepare(op) for op in ops]
        with self._lock:
            self._check(prepared)
            results = [self._run(op) for op in prepared]
            if any(isinstance(op, Write) for op in prepared):
                self._writes += 1
            return results

    def version(self) -> Hashable:
        return self._writes

    def _check(self, ops: list[Prepared]) -> None:
        pending: dict[tuple[Namespace, str], Write] = {}
        for op in ops:
            if isinstance(op, Write):
                pending[(op.namespace, op.key)] = op
            elif isinstance(op, CheckOp):
                written = pending.get((op.namespace, op.key))
                if written is not None:
                    check(op, written.value)
                else:
                    record = self._items.get(op.namespace, {}).get(op.key)
                    check(op, json.loads(record.text) if record else None)

    def _run(self, op: Prepared) -> Result:
        items = self._items
        if isinstance(op, CheckOp):
            return None
        if isinstance(op, GetOp):
            record = items.get(op.namespace, {}).get(op.key)
            return _item(op.namespace, op.key, record) if record else None
        if isinstance(op, Write):
            bucket = items.setdefault(op.namespace, {})
            if op.text is None:
                bucket.pop(op.key, None)
                if not bucket:
                    del items[op.namespace]
                return None
            now = datetime.now(UTC)
            old = bucket.get(op.key)
            bucket[op.key] = _Record(op.text, old.created_at if old else now, now)
            return None
        if isinstance(op, SearchOp):
            prefix = op.namespace_prefix
            found = (
                _item(ns, key, record)
                for ns in sorted(items)
                if ns[: len(prefix)] == prefix
                for key, record in sorted(items[ns].items())
            )
            hits = [item for item in found if matches_filter(item.value, op.filter)]
            return hits[op.offset : op.offset + op.limit]
        listed = namespaces_under(items, op.prefix, op.max_depth)
        return listed[op.offset : op.offset + op.limit]


def _item(namespace: Namespace, key: str, record: _Record) -> Item:
    value: dict[str, Any] = json.loads(record.text)
    return Item(namespace, key, value, record.created_at, record.updated_at)
