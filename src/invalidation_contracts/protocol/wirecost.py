"""What the contract costs on the wire: bytes of each response body, and how many are contract.

The one definition every measurement here uses (the memory's counters, the harness artifacts,
the benchmarks): the contract is the response-level fields plus each suggestion's cache metadata;
``patch`` restates ``parameters`` and is counted as payload, apart.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .models import ContractFields

#: The response-level contract members (every field of ``ContractFields``).
ENVELOPE_FIELDS = tuple(ContractFields.model_fields)
#: The per-suggestion members that belong to the contract.
SUGGESTION_FIELDS = ("cache_hint", "table", "tables", "rules", "scope", "max_age_s")
#: The paper's Level 1 contract (§3.7): ``table_versions`` on the envelope ...
PAPER_ENVELOPE_FIELDS = ("table_versions",)
#: ... and ``cache_hint`` and ``table`` on each suggestion; nothing else is counted there.
PAPER_SUGGESTION_FIELDS = ("cache_hint", "table")


def compact(value: object) -> bytes:
    """JSON as the service sends it (compact separators, UTF-8)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def compact_size(value: object) -> int:
    """``len(compact(value))``; a value read without its content (one with ``json_bytes``: the
    client's dropped key lists) counts as the bytes it had on the wire."""
    encoded = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=_stand_in)
    return len(encoded.encode())


def _stand_in(value: object) -> str:
    """A string encoding to as many bytes as ``value`` took (``json.dumps``'s ``default``)."""
    size = getattr(value, "json_bytes", None)
    if not isinstance(size, int):
        raise TypeError(f"{type(value).__name__} is not JSON")
    return "x" * (size - 2)


@dataclass(frozen=True, slots=True)
class WireCost:
    """Bytes of one response body, split into the contract's share by field group."""

    total: int
    envelope: int
    suggestions: int
    patch: int

    @property
    def contract(self) -> int:
        """Contract bytes: the envelope stamps plus the per-suggestion cache metadata."""
        return self.envelope + self.suggestions

    @property
    def payload(self) -> int:
        """The body without any contract field."""
        return self.total - self.contract


def _strip(
    body: Mapping[str, Any], envelope: tuple[str, ...], suggestion_fields: tuple[str, ...]
) -> dict[str, Any]:
    out = {k: v for k, v in body.items() if k not in envelope}
    feedback = out.get("recovery_feedback")
    if isinstance(feedback, Mapping) and isinstance(feedback.get("suggestions"), list):
        out["recovery_feedback"] = {
            **feedback,
            "suggestions": [
                {k: v for k, v in s.items() if k not in suggestion_fields}
                if isinstance(s, Mapping)
                else s
                for s in feedback["suggestions"]
            ],
        }
    return out


def wire_cost(body: Mapping[str, Any]) -> WireCost:
    """Measure ``body`` by removing each field group in turn and re-serializing."""
    return _cost(body, ENVELOPE_FIELDS, SUGGESTION_FIELDS)


def paper_wire_cost(body: Mapping[str, Any]) -> WireCost:
    """Measure only the paper's L1 fields (``table_versions``; ``cache_hint``, ``table``), so a
    response of any level can be set beside the paper's §3.7 figures."""
    return _cost(body, PAPER_ENVELOPE_FIELDS, PAPER_SUGGESTION_FIELDS)


def _cost(
    body: Mapping[str, Any], envelope: tuple[str, ...], suggestion_fields: tuple[str, ...]
) -> WireCost:
    total = _stripped_size(body, (), ())
    no_envelope = _stripped_size(body, envelope, ())
    no_meta = _stripped_size(body, envelope, suggestion_fields)
    no_patch = _stripped_size(body, envelope, (*suggestion_fields, "patch"))
    return WireCost(
        total=total,
        envelope=total - no_envelope,
        suggestions=no_envelope - no_meta,
        patch=no_meta - no_patch,
    )


def _stripped_size(
    body: Mapping[str, Any], envelope: tuple[str, ...], suggestion_fields: tuple[str, ...]
) -> int:
    """``len(compact(body))`` with the ``envelope`` members and each suggestion's
    ``suggestion_fields`` left out, summed member by member: no copy of the body is built, and
    one suggestion at a time is serialized (a body of 64,000 row keys held 12 MB of encoder
    chunks when serialized whole; issue 38, H2)."""
    members = []
    for name, value in body.items():
        if name in envelope:
            continue
        suggestions = value.get("suggestions") if isinstance(value, Mapping) else None
        if name == "recovery_feedback" and isinstance(suggestions, list):
            value_size = _object_size(
                _member(key, _array_size(_suggestion_size(s, suggestion_fields) for s in item))
                if key == "suggestions"
                else _member(key, compact_size(item))
                for key, item in value.items()
            )
        else:
            value_size = compact_size(value)
        members.append(_member(name, value_size))
    return _object_size(members)


def _suggestion_size(suggestion: object, left_out: tuple[str, ...]) -> int:
    if not isinstance(suggestion, Mapping):
        return compact_size(suggestion)
    return _object_size(
        _member(name, compact_size(value))
        for name, value in suggestion.items()
        if name not in left_out
    )


def _member(name: str, value_size: int) -> int:
    """Bytes of ``"name":value`` given the value's size."""
    return len(compact(name)) + 1 + value_size


def _object_size(member_sizes: Iterable[int]) -> int:
    """Bytes of ``{m1,m2,...}`` given each member's size."""
    sizes = list(member_sizes)
    return 2 + sum(sizes) + max(len(sizes) - 1, 0)


def _array_size(item_sizes: Iterable[int]) -> int:
    """Bytes of ``[i1,i2,...]`` given each item's size."""
    return _object_size(item_sizes)
