"""The store API, in the shape of LangGraph's ``BaseStore``: namespaced JSON documents.

A namespace is a tuple of string labels, a key a string, a value a JSON object. ``batch`` is the one
primitive (as in LangGraph); ``get``/``put``/``delete``/``search``/``list_namespaces`` are built on
it, and ``abatch`` is its async twin. Unlike LangGraph's contract, a ``batch`` here is **atomic**
and isolated: every operation in it commits or none does, and its reads see one committed state.
That is what lets the memory evict an entry and write its tombstone as one step. A ``CheckOp``
makes a batch conditional (compare-and-write): it fails with ``StoreConflict``, writing nothing,
unless an item holds the expected value — which is how processes sharing a store never overwrite
each other's changes. ``version()`` is a cheap token that changes whenever another writer commits,
so a reader can tell, without a round trip, that its copy is still current.
Search supports equality filters on top-level value fields; results are ordered by namespace, key.
"""

from __future__ import annotations

import asyncio
import json
from abc import ABC, abstractmethod
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Self

Namespace = tuple[str, ...]
#: Separates a namespace's labels where a store keeps it as one string.
SEPARATOR = "\x1f"

#: Characters a namespace label may not contain (``.`` as in LangGraph; the rest are separators).
FORBIDDEN_LABEL_CHARS = frozenset(".\x1e\x1f")


class StoreError(Exception):
    """The store cannot be opened or used (missing, corrupt, or of another schema)."""


class StoreConflict(StoreError):
    """A ``CheckOp`` found another value (someone wrote first); nothing of the batch was written."""


@dataclass(frozen=True, slots=True)
class Item:
    """A stored document."""

    namespace: Namespace
    key: str
    value: dict[str, Any]
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class GetOp:
    namespace: Namespace
    key: str


@dataclass(frozen=True, slots=True)
class PutOp:
    """Write ``value`` under ``(namespace, key)``; ``value=None`` deletes it."""

    namespace: Namespace
    key: str
    value: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class CheckOp:
    """Fail the whole batch with ``StoreConflict`` unless ``(namespace, key)`` holds ``value``
    (``None``: unless it is absent). Evaluated in order, after the batch's earlier puts."""

    namespace: Namespace
    key: str
    value: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class SearchOp:
    namespace_prefix: Namespace
    filter: Mapping[str, Any] | None = None
    limit: int = 10
    offset: int = 0


@dataclass(frozen=True, slots=True)
class ListNamespacesOp:
    prefix: Namespace | None = None
    max_depth: int | None = None
    limit: int = 100
    offset: int = 0


Op = GetOp | PutOp | CheckOp | SearchOp | ListNamespacesOp
Result = Item | list[Item] | list[Namespace] | None


class Store(ABC):
    """A namespaced document store. Implementations provide ``batch`` and ``close``."""

    @abstractmethod
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` atomically, in order; one result per op (``None`` for a put or check)."""

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """``batch`` for async callers: by default it runs in a worker thread, off the loop."""
        return await asyncio.to_thread(self.batch, ops)

    def version(self) -> Hashable | None:
        """A token that changes whenever a batch with writes commits (any writer, any process).

        Cheap by contract (no network round trip, no disk read): callers compare it before each
        read to skip re-reading what they hold. ``None`` means the store has no such token, and a
        reader must ask the store itself.
        """
        return None

    def close(self) -> None:  # noqa: B027 - optional: a store with nothing to release
        """Release the store's resources. Idempotent."""

    def get(self, namespace: Namespace, key: str) -> Item | None:
        return self.batch([GetOp(tuple(namespace), key)])[0]  # type: ignore[return-value]

    def put(self, namespace: Namespace, key: str, value: Mapping[str, Any]) -> None:
        self.batch([PutOp(tuple(namespace), key, value)])

    def delete(self, namespace: Namespace, key: str) -> None:
        self.batch([PutOp(tuple(namespace), key, None)])

    def search(
        self,
        namespace_prefix: Namespace,
        /,
        *,
        filter: Mapping[str, Any] | None = None,
        limit: int = 10,
        offset: int = 0,
    ) -> list[Item]:
        """Items under ``namespace_prefix`` whose value matches ``filter``."""
        op = SearchOp(tuple(namespace_prefix), filter, limit, offset)
        return self.batch([op])[0]  # type: ignore[return-value]

    def list_namespaces(
        self,
        *,
        prefix: Namespace | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Namespace]:
        """Distinct namespaces under ``prefix``, truncated to ``max_depth`` labels, sorted."""
        op = ListNamespacesOp(
            tuple(prefix) if prefix is not None else None, max_depth, limit, offset
        )
        return self.batch([op])[0]  # type: ignore[return-value]

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def validate_namespace(namespace: Sequence[str], *, allow_empty: bool = False) -> Namespace:
    """Check a namespace's labels; raise ``ValueError`` on an empty or ill-formed one."""
    ns = tuple(namespace)
    if not ns and not allow_empty:
        raise ValueError("a namespace needs at least one label")
    for label in ns:
        if not isinstance(label, str) or not label:
            raise ValueError(f"namespace labels must be non-empty strings, got {label!r}")
        if FORBIDDEN_LABEL_CHARS & set(label):
            raise ValueError(f"namespace label {label!r} contains a forbidden character")
    return ns


@dataclass(frozen=True, slots=True)
class Write:
    """A prepared ``PutOp``: its value encoded once, as the compact JSON text stores keep."""

    namespace: Namespace
    key: str
    text: str | None
    """None: delete."""

    @property
    def value(self) -> dict[str, Any] | None:
        return None if self.text is None else _object(self.text)


Prepared = GetOp | Write | CheckOp | SearchOp | ListNamespacesOp


def prepare(op: Op) -> Prepared:
    """Validate an operation before any op of its batch runs; a put's value is encoded as JSON
    (which is also its copy: later changes to the caller's dict do not reach the store)."""
    if isinstance(op, GetOp):
        return GetOp(validate_namespace(op.namespace), str(op.key))
    if isinstance(op, PutOp):
        text = None if op.value is None else encode_value(op.value)
        return Write(validate_namespace(op.namespace), str(op.key), text)
    if isinstance(op, CheckOp):
        value = None if op.value is None else _object(encode_value(op.value))
        return CheckOp(validate_namespace(op.namespace), str(op.key), value)
    if isinstance(op, SearchOp):
        prefix = validate_namespace(op.namespace_prefix, allow_empty=True)
        return SearchOp(prefix, op.filter, op.limit, op.offset)
    if isinstance(op, ListNamespacesOp):
        under = validate_namespace(op.prefix, allow_empty=True) if op.prefix is not None else None
        return ListNamespacesOp(under, op.max_depth, op.limit, op.offset)
    raise TypeError(f"unknown store operation {op!r}")


def encode_value(value: Mapping[str, Any]) -> str:
    """A store value as compact JSON text; ``TypeError`` or ``ValueError`` if not a JSON object."""
    if not isinstance(value, Mapping):
        raise TypeError(f"store values must be JSON objects, got {type(value).__name__}")
    return json.dumps(value, allow_nan=False, separators=(",", ":"))


#: The one key of the value a store reads for a row whose text is not a JSON object (torn write,
#: bit flip, another program): its value says why. The memory leaves such an entry out (issue 38).
UNREADABLE = "__unreadable__"


def decode_value(text: str) -> dict[str, Any]:
    """A stored value from its JSON text; ``{UNREADABLE: why}`` when it is not a JSON object."""
    try:
        value = json.loads(text)
    except ValueError as exc:
        return {UNREADABLE: f"not JSON: {exc}"}
    if not isinstance(value, dict):
        return {UNREADABLE: f"not a JSON object: {type(value).__name__}"}
    return value


def _object(text: str) -> dict[str, Any]:
    value: dict[str, Any] = json.loads(text)
    return value


def check(op: CheckOp, current: Mapping[str, Any] | None) -> None:
    """Raise ``StoreConflict`` unless ``current`` is what ``op`` expects."""
    if (None if current is None else dict(current)) != op.value:
        raise StoreConflict(
            f"{'/'.join(op.namespace)}/{op.key} is {current!r}, not {op.value!r}: written meanwhile"
        )


def matches_filter(value: Mapping[str, Any], wanted: Mapping[str, Any] | None) -> bool:
    return not wanted or all(name in value and value[name] == want for name, want in wanted.items())


def encode(namespace: Namespace) -> str:
    """A namespace as one string (its labels joined by ``SEPARATOR``)."""
    return SEPARATOR.join(namespace)


def decode(text: str) -> Namespace:
    return tuple(text.split(SEPARATOR))


def prefix_bounds(prefix: Namespace) -> tuple[str, str, str]:
    """``(prefix, low, high)``: a namespace is ``prefix`` or below it iff it equals ``prefix``
    or lies in ``[low, high)`` — labels never contain the separator, and the next character
    after it closes the range, so a key-range scan finds them."""
    ns = encode(prefix)
    return ns, ns + SEPARATOR, ns + chr(ord(SEPARATOR) + 1)


def namespaces_under(
    namespaces: Iterable[Namespace], prefix: Namespace | None, max_depth: int | None
) -> list[Namespace]:
    """The sorted distinct namespaces with ``prefix``, each cut to ``max_depth`` labels."""
    found = set()
    for ns in namespaces:
        if prefix and ns[: len(prefix)] != prefix:
            continue
        found.add(ns[:max_depth] if max_depth is not None else ns)
    return sorted(found)
