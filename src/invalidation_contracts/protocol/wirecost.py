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


def compact(value: Any) -> bytes:
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
    body: Mapping[str, Any], envelope: bool, suggestion_fields: tuple[str, ...]
) -> dict[str, Any]:
    out = {k: v for k, v in body.items() if not (envelope and k in ENVELOPE_FIELDS)}
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
    total = len(compact(body))
    no_envelope = len(compact(_strip(body, True, ())))
    no_meta = len(compact(_strip(body, True, SUGGESTION_FIELDS)))
    no_patch = len(compact(_strip(body, True, SUGGESTION_FIELDS + ("patch",))))
    return WireCost(
        total=total,
        envelope=total - no_envelope,
        suggestions=no_envelope - no_meta,
        patch=no_meta - no_patch,
    )
