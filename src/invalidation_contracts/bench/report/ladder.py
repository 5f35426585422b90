"""The A-ladder tables of a table-drift stream: compliance by arm (Table 3), events beside
completion, token and retry cost (Table 6), and the terminal's per-cell ladder."""

from __future__ import annotations

from collections.abc import Sequence

from ..metrics import (
    CellMetrics,
    arm_rank,
)
from .markup import (
    DASH,
    SIMULATED_NOTE,
    _by_arm_counts,
    _completed,
    _count,
    _delta,
    _drift_caption,
    _fixed,
    _Grid,
    _per_drift,
    _section,
    _stat,
    markdown_table,
)


def compliance_caption(cells: Sequence[CellMetrics], slots: Sequence[int]) -> str:
    """How compliance excluded episodes here: the stale slots, and any departure, labelled."""
    text = (
        f"Compliance (%) is the first-try rate on the governed class over its episodes except the "
        f"stale slots {list(slots)} (the paper's rule, §4.1); undefined at A0."
    )
    departures = next((c for c in cells if c.departure_slots), None)
    if departures is not None:
        reasons = "; ".join(r for r in departures.departure_reasons if r)
        text += (
            f" **Departure from the paper:** it also excludes episodes "
            f"{list(departures.departure_slots)}, pre-registered in the manifest"
            + (f" ({reasons})" if reasons else "")
            + "."
        )
    return text


def table3(scenario: str, cells: Sequence[CellMetrics], slots: Sequence[int]) -> str:
    """The A-ladder: compliance by arm, Δ A2D−A1, eviction precision and post-drift funding."""
    grid = _Grid(cells)
    memory_arms = [a for a in grid.arms if a != "none"]
    evicting_arms = [a for a in memory_arms if a != "naive"]
    funding = any(c["post_drift_funding"].n for c in cells)
    headers = ["Planner"] + [f"Compl. {grid.code(a)}" for a in memory_arms]
    headers += [f"Δ {grid.code('row')}−{grid.code('naive')}"]
    headers += [f"Prec. {grid.code(a)}" for a in evicting_arms]
    if funding:
        headers += [f"Funding {grid.code(a)}" for a in grid.arms]
    headers += ["Completed", "Completed unfaithful", "Planner errors"]
    rows = []
    for label, arms in grid.series():
        row = [label] + [_stat(arms.get(a), "compliance") for a in memory_arms]
        row += [_delta(arms.get("row"), arms.get("naive"), "compliance")]
        row += [_stat(arms.get(a), "precision", _fixed) for a in evicting_arms]
        if funding:
            row += [_stat(arms.get(a), "post_drift_funding") for a in grid.arms]
        row += [
            _completed(arms.values()),
            _by_arm_counts(arms, grid.arms, "completed_unfaithful"),
            _by_arm_counts(arms, grid.arms, "planner_errors"),
        ]
        rows.append(row)
    last = max((w.after_episode for c in cells for w in c.drift), default=None)
    caption = compliance_caption(cells, slots) + " Precision = correct / labelled evictions. "
    if funding:
        caption += (
            f"Funding = post-drift funding first-try (%), funding episodes after episode {last}. "
        )
    caption += (
        "Completed = episodes that ended on a faithful accepted request / scheduled, over arms and "
        "seeds; Completed unfaithful = accepted requests that changed the task beyond what a fix "
        "said (never counted as completed or first-try); Planner errors = unusable planner replies "
        "(each a failed attempt); both per arm, mean over seeds."
    )
    stats = [c["compliance"] for c in cells]
    return _section(
        f"Table 3 — The A-ladder on `{scenario}`",
        caption,
        markdown_table(headers, rows),
        cells,
        stats,
    )


def events_table(scenario: str, cells: Sequence[CellMetrics]) -> str:
    """Event counts beside completed episodes (§4.1), per drift event."""
    grid = _Grid(cells)
    headers = [
        "Planner",
        "Arm",
        "Evict (correct/wrong/unlabelled)",
        "Evict per drift",
        "Restamp per drift",
        "Prec.",
        "Recall",
        "Stale inj. (outside slots)",
        "Completed",
    ]
    rows = []
    for label, arms in grid.series():
        for arm in grid.arms:
            c = arms.get(arm)
            if c is None:
                continue
            rows.append(
                [
                    label,
                    f"{c.arm_code} ({arm})",
                    f"{_count(c['evictions_correct'].mean)}/{_count(c['evictions_wrong'].mean)}"
                    f"/{_count(c['evictions_unlabelled'].mean)}",
                    _per_drift(c, "evictions"),
                    _per_drift(c, "restamps"),
                    _stat(c, "precision", _fixed),
                    _stat(c, "recall", _fixed),
                    f"{_count(c['stale_injections'].mean)} "
                    f"({_count(c['stale_injections_outside_slots'].mean)})",
                    _completed([c]),
                ]
            )
    caption = (
        f"Events on `{scenario}`; {_drift_caption(cells)}. Per-drift counts cover the episodes up "
        "to the next event. An unlabelled eviction (no oracle label) is counted apart and left "
        "out of precision. A run that exhausts its retries reaches fewer drift events, so read "
        "each count beside Completed."
    )
    return _section(
        f"Events and completion on `{scenario}`", caption, markdown_table(headers, rows), cells
    )


def table6(scenario: str, cells: Sequence[CellMetrics]) -> str | None:
    """Token saving per arm against the same planner's A0, Δ A2D−A1, and retries at A0/A1/A2D."""
    grid = _Grid(cells)
    if "none" not in grid.arms:
        return None
    memory_arms = [a for a in grid.arms if a != "none"]
    retry_arms = [a for a in ("none", "naive", "row") if a in grid.arms]
    headers = ["Planner", f"{grid.code('none')} tokens"] + [
        f"Saving {grid.code(a)}" for a in memory_arms
    ]
    headers += [f"Δ {grid.code('row')}−{grid.code('naive')}"] + [
        f"Retries {grid.code(a)}" for a in retry_arms
    ]
    rows = []
    for label, arms in grid.series():
        a0 = arms.get("none")
        tokens = (
            DASH
            if a0 is None
            else f"{a0['tokens'].mean:,.0f}" + (" est." if a0.tokens_estimated else "")
        )
        row = [label, tokens] + [_stat(arms.get(a), "token_saving") for a in memory_arms]
        row += [_delta(arms.get("row"), arms.get("naive"), "token_saving")]
        rows.append(row + [_stat(arms.get(a), "retries", _count) for a in retry_arms])
    caption = (
        "Saving (%) = 1 − tokens / tokens of the same planner's A0 (same seed, detection and apply "
        "mode); tokens are input + output summed over attempts, `est.` where estimated."
    )
    stats = [c["token_saving"] for c in cells]
    return _section(
        f"Table 6 — Token and retry cost on `{scenario}`",
        caption,
        markdown_table(headers, rows),
        cells,
        stats,
    )


def ladder_table(cells: Sequence[CellMetrics]) -> str:
    """Compact per-cell summary for the terminal: one row per planner and arm."""
    headers = [
        "Scenario",
        "Planner",
        "Arm",
        "Seeds",
        "Compl. (%)",
        "Unfaithful",
        "Planner err.",
        "Retries",
        "Prec.",
        "Recall",
        "Evict c/w",
        "Restamps",
        "Completed",
        "Saving (%)",
        "Contract tok. hidden",
    ]
    ordered = sorted(
        cells, key=lambda c: (c.scenario, c.planner, c.detection, c.apply_mode, arm_rank(c.arm))
    )
    rows = [
        [
            c.scenario,
            c.label,
            c.arm_code,
            str(len(c.seeds)),
            _stat(c, "compliance"),
            _stat(c, "completed_unfaithful", _count),
            _stat(c, "planner_errors", _count),
            _stat(c, "retries", _count),
            _stat(c, "precision", _fixed),
            _stat(c, "recall", _fixed),
            f"{_count(c['evictions_correct'].mean)}/{_count(c['evictions_wrong'].mean)}",
            _stat(c, "restamps", _count),
            _completed([c]),
            _stat(c, "token_saving"),
            f"{_count(c['contract_tokens'].mean)} est.",
        ]
        for c in ordered
    ]
    footer = SIMULATED_NOTE if any(c.simulated for c in cells) else "No simulated planner."
    cascaded = [c for c in ordered if (c["evictions_cascaded_from_wrong"].mean or 0) > 0]
    if cascaded:
        footer += " " + " ".join(
            f"{c.scenario} {c.arm_code}: {_count(c['evictions_cascaded_from_wrong'].mean)} of its "
            "evictions cascaded from a wrong eviction (a consumer arm cannot tell a wrong eviction "
            "from a correct one, so it cascades from both)."
            for c in cascaded
        )
    return markdown_table(headers, rows) + "\n\n" + footer
