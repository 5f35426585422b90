"""Immutable reference-table snapshots and the exact diff between two of them."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

from ..protocol.canonical import row_etag
from ..protocol.models import TableDiff
from ..protocol.problems import ProblemType, ProtocolError

FrozenRow = Mapping[str, Any]
_V = TypeVar("_V")
MAX_SAFE_INTEGER = 2**53 - 1
MAX_JSON_DEPTH = 128
"""The deepest nesting of a row's values the contract carries (deeper: refused, quarantined;
far below what decoding, hashing and encoding on every worker and client can recurse through)."""
"""Largest integer RFC 8785 (and every JSON parser built on doubles) represents exactly."""


def freeze(value: object, where: str = "row", depth: int = 0) -> Any:
    """Deep-freeze a JSON value (dicts become read-only mappings, lists tuples); reject non-JSON
    and values nested deeper than ``MAX_JSON_DEPTH``."""
    if depth > MAX_JSON_DEPTH:
        raise ProtocolError(
            ProblemType.INVALID_REQUEST,
            f"{where[:80]}…: nested deeper than {MAX_JSON_DEPTH} levels, which the contract "
            "does not carry",
        )
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise ProtocolError(
                    ProblemType.INVALID_REQUEST, f"{where}: object keys must be strings"
                )
            out[k] = freeze(v, f"{where}.{k}", depth + 1)
        return MappingProxyType(out)
    if isinstance(value, (list, tuple)):
        return tuple(freeze(v, f"{where}[{i}]", depth + 1) for i, v in enumerate(value))
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ProtocolError(
                ProblemType.INVALID_REQUEST, f"{where}: {value} is not a JSON number"
            )
        if isinstance(value, int) and abs(value) > MAX_SAFE_INTEGER:
            raise ProtocolError(
                ProblemType.INVALID_REQUEST,
                f"{where}: integer {value} is outside the interoperable range ±2^53",
            )
        return value
    raise ProtocolError(
        ProblemType.INVALID_REQUEST, f"{where}: {type(value).__name__} is not a JSON value"
    )


def thaw(value: object) -> Any:
    """The plain-JSON (dict/list) copy of a frozen value."""
    if isinstance(value, Mapping):
        return {k: thaw(v) for k, v in value.items()}
    if isinstance(value, tuple):
        return [thaw(v) for v in value]
    return value


def same_json(a: object, b: object) -> bool:
    """Two frozen JSON values are the same value of the same types all the way down (``1``,
    ``1.0`` and ``True`` compare equal in Python and differ here)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same_json(v, b[k]) for k, v in a.items())
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _frozen_row(table: str, key: object, row: object) -> FrozenRow:
    if not isinstance(key, str) or not key:
        raise ProtocolError(
            ProblemType.INVALID_REQUEST, f"table {table!r}: row keys must be non-empty strings"
        )
    if not isinstance(row, Mapping):
        raise ProtocolError(
            ProblemType.INVALID_REQUEST,
            f"table {table!r}: row {key!r} must be an object, not {type(row).__name__}",
        )
    frozen: FrozenRow = freeze(row, f"{table}[{key!r}]")
    return frozen


def mutable_copy(mapping: Mapping[str, _V]) -> dict[str, _V]:
    """A dict copy of ``mapping``: a read-only proxy's ``copy()`` is the C dict copy, ~20× faster
    than ``dict(proxy)``."""
    if isinstance(mapping, (dict, MappingProxyType)):
        return mapping.copy()
    return dict(mapping)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """One version of a reference table: keyed rows, each with a content etag. Never mutated."""

    name: str
    version: str
    rows: Mapping[str, FrozenRow]
    etags: Mapping[str, str] = field(repr=False)

    @classmethod
    def build(
        cls, name: str, version: str, rows: Mapping[str, Any], previous: Snapshot | None = None
    ) -> Snapshot:
        """Validate and freeze ``rows`` (key → JSON object) into a snapshot.

        With ``previous`` (the table a reload replaces), a row identical to its previous
        version, value for value and type for type, keeps that version's etag instead of being
        fingerprinted again: identical JSON has the same canonical form, so the etag is the same.
        """
        if not isinstance(rows, Mapping):
            raise ProtocolError(
                ProblemType.INVALID_REQUEST, f"table {name!r}: rows must be an object of key → row"
            )
        frozen = {key: _frozen_row(name, key, row) for key, row in rows.items()}
        old_rows = previous.rows if previous is not None else {}
        etags = {
            key: previous.etags[key]
            if previous is not None and key in old_rows and same_json(row, old_rows[key])
            else row_etag(row)
            for key, row in frozen.items()
        }
        return cls(name, version, MappingProxyType(frozen), MappingProxyType(etags))

    def with_changes(
        self,
        version: str,
        upsert: Mapping[str, Any] = MappingProxyType({}),
        delete: Iterable[str] = (),
    ) -> Snapshot:
        """A new snapshot with ``upsert`` rows set and ``delete`` keys removed (missing keys are
        an error)."""
        rows = mutable_copy(self.rows)
        etags = mutable_copy(self.etags)
        for key in delete:
            if key not in rows:
                raise ProtocolError(
                    ProblemType.INVALID_REQUEST, f"table {self.name!r}: no row {key!r} to delete"
                )
            del rows[key], etags[key]
        for key, row in upsert.items():
            rows[key] = _frozen_row(self.name, key, row)
            etags[key] = row_etag(rows[key])
        return Snapshot(self.name, version, MappingProxyType(rows), MappingProxyType(etags))

    def holds(self, rows: Mapping[str, Any]) -> bool:
        """Whether every row of ``rows`` is already here, the same (costs ``len(rows)``; a row
        the contract cannot carry raises as ``with_changes`` would)."""
        etags = self.etags
        return all(
            key in etags and row_etag(_frozen_row(self.name, key, row)) == etags[key]
            for key, row in rows.items()
        )

    def restamped(self, version: str) -> Snapshot:
        """The same rows under another version (a touch)."""
        return Snapshot(self.name, version, self.rows, self.etags)

    def same_content(self, other: Snapshot) -> bool:
        return self.etags == other.etags

    def plain_rows(self) -> dict[str, dict[str, Any]]:
        return {key: thaw(row) for key, row in self.rows.items()}

    def __len__(self) -> int:
        return len(self.rows)


def diff(old: Snapshot, new: Snapshot, keys: Iterable[str] | None = None) -> TableDiff:
    """The keys ``new`` added, removed and changed against ``old``.

    With ``keys`` only those candidates are compared, so a patch costs in proportion to its size.
    """
    if keys is None:
        old_etags, new_etags = old.etags, new.etags
        moved = [key for key, etag in new_etags.items() if old_etags.get(key, etag) != etag]
        return TableDiff(
            added=sorted(new_etags.keys() - old_etags.keys()),
            removed=sorted(old_etags.keys() - new_etags.keys()),
            changed=sorted(moved),
        )
    added: list[str] = []
    removed: list[str] = []
    changed: list[str] = []
    for key in set(keys):
        before, after = old.etags.get(key), new.etags.get(key)
        if before is None and after is not None:
            added.append(key)
        elif before is not None and after is None:
            removed.append(key)
        elif before != after:
            changed.append(key)
    return TableDiff(added=sorted(added), removed=sorted(removed), changed=sorted(changed))
