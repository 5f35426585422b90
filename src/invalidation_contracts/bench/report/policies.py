"""Detection policies on a rules stream (Table 5): lazy, stamp-only, stamp+vectors, oracle."""

from __future__ import annotations

from collections.abc import Sequence

from ..metrics import (
    LAZY_REFERENCE,
    CellMetrics,
    arm_rank,
    series_label,
)
from .markup import (
    DASH,
    _completed,
    _count,
    _drift_caption,
    _per_drift,
    _section,
    _signed_pct,
    _stat,
    markdown_table,
)

#: Table 5's row order (the paper's): lazy, stamp-only, stamp+vectors, oracle; others after.
TABLE5_ORDER = {
    LAZY_REFERENCE: 0,
    ("rules-stamp", "eager"): 1,
    ("rules-stamp+vectors", "eager"): 2,
    ("rules-oracle", "eager"): 3,
}
POLICY_NAMES = {
    "rules-stamp": "Stamp-only",
    "rules-stamp+vectors": "Stamp+vec.",
    "rules-oracle": "Oracle",
}


def table5(scenario: str, cells: Sequence[CellMetrics]) -> str:
    """Detection policies on a rules stream: counts, the alert per rule event, Δ tokens vs lazy."""
    ordered = sorted(
        cells,
        key=lambda c: (
            c.planner,
            TABLE5_ORDER.get((c.arm, c.detection), len(TABLE5_ORDER)),
            arm_rank(c.arm),
            c.detection,
            c.apply_mode,
        ),
    )
    headers = [
        "Planner",
        "Policy",
        "Detection",
        "First-try",
        "Retries",
        "Evict",
        "Restamp",
        "Alert",
        "Completed",
        "Completed unfaithful",
        "Δ tok. vs lazy (%)",
    ]
    rows = []
    for c in ordered:
        reference = (c.arm, c.detection) == LAZY_REFERENCE
        name = "Lazy" if reference else POLICY_NAMES.get(c.arm, c.arm)
        rows.append(
            [
                series_label(c.planner, c.simulated, "eager", c.apply_mode),
                f"{name} ({c.arm_code})",
                c.detection,
                _count(c["first_try"].mean),
                _count(c["retries"].mean),
                _per_drift(c, "evictions", rules_only=True),
                _per_drift(c, "restamps", rules_only=True),
                "/".join(_count(w.alert.mean) for w in c.drift if w.rules) or DASH,
                _completed([c]),
                _count(c["completed_unfaithful"].mean),
                DASH if reference else _stat(c, "tokens_vs_lazy", _signed_pct),
            ]
        )
    caption = (
        f"First-try and retries are counts over the stream; {_drift_caption(cells)}. Evict and "
        "Restamp are per rule event (a + b). Alert is the episode at which the arm learns that the "
        "rules changed, per rule event: its first alert (an arm reading the rules stamp on every "
        "response), or for a failure-gated lazy arm the first rejected response carrying the new "
        "rules fingerprint; an eviction is not an alert. Δ tokens against lazy "
        f"`{LAZY_REFERENCE[0]}` of the same planner and seed."
    )
    return _section(
        f"Table 5 — Detection policies on `{scenario}`",
        caption,
        markdown_table(headers, rows),
        cells,
    )
