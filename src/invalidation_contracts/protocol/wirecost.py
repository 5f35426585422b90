"""What the contract costs on the wire: bytes of each response body, and how many are contract.

The one definition every measurement here uses (the memory's counters, the harness artifacts,
the benchmarks): the contract is the response-level fields plus each suggestion's cache metadata;
``patch`` restates ``parameters`` and is counted as payload, apart.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
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
    total = len(compact(body))
    no_envelope = len(compact(_strip(body, envelope, ())))
    no_meta = len(compact(_strip(body, envelope, suggestion_fields)))
    no_patch = len(compact(_strip(body, envelope, suggestion_fields + ("patch",))))
    return WireCost(
        total=total,
        envelope=total - no_envelope,
        suggestions=no_envelope - no_meta,
        patch=no_meta - no_patch,
    )
