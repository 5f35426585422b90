"""``wire_cost`` sums the body member by member (one suggestion serialized at a time); checked
against serializing whole copies of the body with each field group left out, as it did before."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.protocol.wirecost import (
    ENVELOPE_FIELDS,
    SUGGESTION_FIELDS,
    WireCost,
    compact,
    wire_cost,
)

SCALARS = st.none() | st.booleans() | st.integers() | st.text(max_size=6)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)
MEMBERS = st.sampled_from([*SUGGESTION_FIELDS, "patch", "type", "parameters", "é"])
SUGGESTION = st.dictionaries(MEMBERS, VALUES, max_size=6) | SCALARS
BODY = st.fixed_dictionaries(
    {},
    optional={
        **{name: VALUES for name in ENVELOPE_FIELDS[:3]},
        "detail": VALUES,
        "recovery_feedback": st.fixed_dictionaries(
            {"suggestions": st.lists(SUGGESTION, max_size=4)}, optional={"extra": VALUES}
        )
        | VALUES,
    },
)


def _strip(body: Mapping[str, Any], envelope: tuple[str, ...], fields: tuple[str, ...]) -> Any:
    out = {k: v for k, v in body.items() if k not in envelope}
    feedback = out.get("recovery_feedback")
    if isinstance(feedback, Mapping) and isinstance(feedback.get("suggestions"), list):
        out["recovery_feedback"] = {
            **feedback,
            "suggestions": [
                {k: v for k, v in s.items() if k not in fields} if isinstance(s, Mapping) else s
                for s in feedback["suggestions"]
            ],
        }
    return out


@settings(max_examples=60, deadline=None)
@given(BODY)
def test_the_wire_cost_equals_serializing_each_stripped_copy(body):
    total = len(compact(body))
    no_envelope = len(compact(_strip(body, ENVELOPE_FIELDS, ())))
    no_meta = len(compact(_strip(body, ENVELOPE_FIELDS, SUGGESTION_FIELDS)))
    no_patch = len(compact(_strip(body, ENVELOPE_FIELDS, (*SUGGESTION_FIELDS, "patch"))))

    assert wire_cost(body) == WireCost(
        total=total,
        envelope=total - no_envelope,
        suggestions=no_envelope - no_meta,
        patch=no_meta - no_patch,
    )
