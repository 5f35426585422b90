"""Markdown reports in the shape of the paper's Tables 3–7 and its §3.7 wire-cost study.

Built from the artifacts alone (``metrics``), so a report is rebuilt without rerunning and two
builds
of the same artifacts are byte-identical. A table whose runs are absent is replaced by a one-line
note; every table names the planners that are simulated.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from .artifacts import read_runs
from .figures import plan_figures
from .metrics import (
    DEFINITIONS,
    LAZY_REFERENCE,
    SIMULATED_MARK,
    CellMetrics,
    RunMetrics,
    Stat,
    WireTotals,
    aggregate,
    arm_rank,
    class_rank,
    is_variant,
    rotation_count,
    score,
    series_label,
)

DASH = "–"
SIMULATED_NOTE = (
    f"{SIMULATED_MARK} simulated planners are deterministic behaviour models, not LLMs; "
    "their token counts are estimates."
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


# --- number formatting -------------------------------------------------------------------------


def _pct(value: float | None) -> str:
    return DASH if value is None else f"{100 * value:.1f}"


def _fixed(value: float | None, digits: int = 2) -> str:
    return DASH if value is None else f"{value:.{digits}f}"


def _count(value: float | None) -> str:
    if value is None:
        return DASH
    return str(round(value)) if abs(value - round(value)) < 1e-9 else f"{value:.1f}"


def _signed_pct(value: float | None) -> str:
    return DASH if value is None else f"{100 * value:+.1f}"


def _bytes(value: float | None) -> str:
    return DASH if value is None else f"{value:,.0f}"


def _stat(cell: CellMetrics | None, name: str, fmt: Callable[[float | None], str] = _pct) -> str:
    return DASH if cell is None else fmt(cell[name].mean)


def _delta(high: CellMetrics | None, low: CellMetrics | None, name: str) -> str:
    top = None if high is None else high[name].mean
    bottom = None if low is None else low[name].mean
    if top is None or bottom is None:
        return DASH
    return _signed_pct(top - bottom)


# --- table scaffolding -------------------------------------------------------------------------


def _escape(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """A pipe table: first column left-aligned, the rest right-aligned."""
    lines = [
        "| " + " | ".join(_escape(h) for h in headers) + " |",
        "|" + "|".join([":---"] + ["---:"] * (len(headers) - 1)) + "|",
    ]
    lines += ["| " + " | ".join(_escape(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def _simulated_line(cells: Iterable[CellMetrics]) -> str:
    simulated = sorted({c.planner for c in cells if c.simulated})
    if not simulated:
        from ..planners.registry import token_source

        tokens = " or ".join(sorted({token_source(c.planner) for c in cells}))
        return f"Simulated planners: none (every planner is a real model; tokens are {tokens})."
    return f"Simulated planners: {', '.join(f'`{p}`' for p in simulated)}. {SIMULATED_NOTE}"


def _seeds_line(cells: Sequence[CellMetrics], stats: Sequence[Stat] = ()) -> str:
    """How many seeds each cell averages, and the largest seed std of the rates ``stats``."""
    counts = sorted({len(c.seeds) for c in cells})
    n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    line = f"Mean over seeds (n = {n} per cell)"
    spreads = [s.std for s in stats if s.std is not None]
    if spreads:
        largest = 100 * max(spreads)
        line += f"; the largest seed standard deviation (sample) here is {largest:.1f} points"
    return line + "."


def _section(
    title: str, caption: str, table: str, cells: Sequence[CellMetrics], stats: Sequence[Stat] = ()
) -> str:
    return "\n\n".join(
        [f"### {title}", caption + " " + _seeds_line(cells, stats), table, _simulated_line(cells)]
    )


def _skip(title: str, why: str) -> str:
    return f"### {title}\n\n_Skipped: {why}_"


class _Grid:
    """Cells of one scenario indexed by series (planner, detection, apply mode) and arm."""

    def __init__(self, cells: Sequence[CellMetrics]) -> None:
        self.cells = list(cells)
        self.by: dict[tuple[str, str, str], dict[str, CellMetrics]] = defaultdict(dict)
        for c in self.cells:
            self.by[(c.planner, c.detection, c.apply_mode)][c.arm] = c
        self.arms = sorted({c.arm for c in self.cells}, key=arm_rank)
        self.codes = {c.arm: c.arm_code for c in self.cells}

    def series(self) -> list[tuple[str, dict[str, CellMetrics]]]:
        rows = []
        for (planner, detection, apply_mode), arms in sorted(self.by.items()):
            simulated = any(c.simulated for c in arms.values())
            rows.append((series_label(planner, simulated, detection, apply_mode), arms))
        return rows

    def code(self, arm: str) -> str:
        return self.codes.get(arm, arm)


def _completed(cells: Iterable[CellMetrics]) -> str:
    cells = list(cells)
    low = min(c.completed_range[0] for c in cells)
    high = max(c.completed_range[1] for c in cells)
    scheduled = max(round(c["episodes"].mean or 0) for c in cells)
    return f"{low}/{scheduled}" if low == high else f"{low}–{high}/{scheduled}"


def _per_drift(cell: CellMetrics, name: str, rules_only: bool = False) -> str:
    windows = [w for w in cell.drift if w.rules or not rules_only]
    return " + ".join(_count(getattr(w, name).mean) for w in windows) or DASH


def _drift_caption(cells: Sequence[CellMetrics]) -> str:
    windows = next((c.drift for c in cells if c.drift), ())
    if not windows:
        return "no drift events"
    return "drift events in order: " + "; ".join(
        f"after episode {w.after_episode} ({w.target}, {w.kind})" for w in windows
    )


# --- the tables --------------------------------------------------------------------------------


def _by_arm_counts(arms: dict[str, CellMetrics], order: Sequence[str], name: str) -> str:
    """``0``, or the arms where a count is non-zero: ``A1 2 · A2D 1`` (mean over seeds)."""
    parts = [
        f"{arms[a].arm_code} {_count(arms[a][name].mean)}"
        for a in order
        if a in arms and (arms[a][name].mean or 0) > 0
    ]
    return " · ".join(parts) or "0"


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


#: The paper's names of the hint shapes (Tables 4 and 7).
SHAPE_NAMES = {
    "add_field": "add-a-field",
    "rewrite_value": "rewrite-a-value",
    "conditional_rewrite": "cond.-rewrite",
}
NO_CONSTRAINT = "no_constraint"
FUNDING = "funding"


def _shape(cells: Sequence[CellMetrics], klass: str) -> str:
    action = next((c.class_actions[klass] for c in cells if klass in c.class_actions), None)
    return SHAPE_NAMES.get(action or "", action or "no hint")


def _class_rate(cell: CellMetrics | None, klass: str, post_drift: bool) -> str:
    if cell is None:
        return DASH
    if post_drift:
        return _pct(cell["post_drift_funding"].mean)
    stat = cell.first_try_by_class.get(klass)
    return DASH if stat is None else _pct(stat.mean)


def table4(scenario: str, cells: Sequence[CellMetrics]) -> str | None:
    """First-try per constraint class at A1 and A2D, in the paper's columns (its Table 4).

    The compliance class over all its episodes; the funding class over the episodes after the last
    drift event (the paper's conditional-rewrite column: the three after the benign bump); the
    other classes over all their episodes. A no-constraint class that reads 100.0 everywhere is
    left out with a note, as the paper does.
    """
    grid = _Grid([c for c in cells if c.arm in ("naive", "row")])
    if not grid.cells:
        return None
    arms = [a for a in ("naive", "row") if a in grid.arms]
    compliance_class = grid.cells[0].compliance_class
    classes = sorted({k for c in grid.cells for k in c.first_try_by_class}, key=class_rank)
    ordered = [k for k in classes if k == compliance_class] + [
        k for k in classes if k != compliance_class
    ]
    post = {k: k == FUNDING and any(c["post_drift_funding"].n for c in grid.cells) for k in ordered}
    notes = []
    if NO_CONSTRAINT in ordered:
        rates = [c.first_try_by_class[NO_CONSTRAINT].mean for c in grid.cells]
        if all(r == 1.0 for r in rates if r is not None):
            ordered.remove(NO_CONSTRAINT)
            notes.append(
                f"The no-constraint class reads 100.0 in all {len(rates)} cells, so it is omitted."
            )
    last = max((w.after_episode for c in grid.cells for w in c.drift), default=None)
    headers = ["Planner"]
    for k in ordered:
        name = f"{k} after ep {last}" if post[k] else k
        headers += [f"{name} ({_shape(grid.cells, k)}) {grid.code(a)}" for a in arms]
    rows = []
    for label, by_arm in grid.series():
        rows.append(
            [label] + [_class_rate(by_arm.get(a), k, post[k]) for k in ordered for a in arms]
        )
    caption = (
        "First-try rate (%) by constraint class at A1 and A2D: every episode of each class, except "
        f"the funding class, which counts only its episodes after episode {last} (the paper's "
        "conditional-rewrite column: the funding episodes after the benign bump)."
        if any(post.values())
        else "First-try rate (%) by constraint class at A1 and A2D, over every episode of a class."
    )
    if notes:
        caption += " " + " ".join(notes)
    stats = [s for c in grid.cells for s in c.first_try_by_class.values()]
    return _section(
        f"Table 4 — First-try by class on `{scenario}`",
        caption,
        markdown_table(headers, rows),
        grid.cells,
        stats,
    )


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


NEGATIVE_CONTROL = "negative_control"


def _table7_columns(row_cells: Sequence[CellMetrics]) -> list[tuple[str, str, str, str]]:
    """(scenario, class, part, header) per column: each class with a hint shape that a drift event
    reached, negative controls and no-constraint classes left out; funding split pre / post."""
    columns = []
    for scenario in sorted({c.scenario for c in row_cells}):
        cells = [c for c in row_cells if c.scenario == scenario]
        if not any(w.kind == "breaking" for c in cells for w in c.drift):
            continue  # the paper's columns come from its drifted streams, not touch or control
        reached = {k for c in cells for k in c.drift_reached_classes}
        actions = {k: a for c in cells for k, a in c.class_actions.items()}
        for klass in sorted(reached & set(actions), key=class_rank):
            if klass in (NEGATIVE_CONTROL, NO_CONSTRAINT):
                continue
            shape = SHAPE_NAMES.get(actions[klass], actions[klass])
            if klass == FUNDING and any(c["post_drift_funding"].n for c in cells):
                columns += [
                    (scenario, klass, part, f"{shape}: {klass} {part}") for part in ("pre", "post")
                ]
            else:
                columns.append((scenario, klass, "all", f"{shape}: {klass}"))
    order = {a: i for i, a in enumerate(SHAPE_NAMES.values())}
    columns.sort(key=lambda c: (order.get(c[3].split(":")[0], 99), c[0], c[1]))
    headers = [header for *_, header in columns]
    return [
        (scenario, klass, part, f"{header} ({scenario})" if headers.count(header) > 1 else header)
        for scenario, klass, part, header in columns
    ]


def _table7_value(cell: CellMetrics | None, klass: str, part: str) -> str:
    if cell is None:
        return DASH
    if part == "pre":
        return _pct(cell["pre_drift_funding"].mean)
    if part == "post":
        return _pct(cell["post_drift_funding"].mean)
    stat = cell.first_try_by_class.get(klass)
    return DASH if stat is None else _pct(stat.mean)


def table7(cells: Sequence[CellMetrics]) -> str | None:
    """First-try at A2D by hint shape, in the paper's columns (its Table 7): each class a drift
    event reaches, under its hint shape; the funding class split before / after the last drift."""
    names = {c.scenario for c in cells}
    row_cells = [
        c
        for c in cells
        if c.arm == "row"
        and not c.rules_stream
        and rotation_count(c.scenario) is None
        and not is_variant(c.scenario, names)
    ]
    columns = _table7_columns(row_cells)
    if not columns:
        return None
    by_series: dict[tuple[str, str, str], dict[str, CellMetrics]] = defaultdict(dict)
    labels: dict[tuple[str, str, str], str] = {}
    for c in row_cells:
        by_series[(c.planner, c.detection, c.apply_mode)][c.scenario] = c
        labels[(c.planner, c.detection, c.apply_mode)] = c.label
    headers = ["Planner"] + [header for _, _, _, header in columns]
    rows = []
    for series in sorted(by_series):
        rows.append(
            [labels[series]]
            + [
                _table7_value(by_series[series].get(scenario), klass, part)
                for scenario, klass, part, _ in columns
            ]
        )
    code = row_cells[0].arm_code
    streams = "; ".join(f"{header} on `{scenario}`" for scenario, _, _, header in columns)
    caption = (
        f"First-try rate (%) at {code} (`row`) by hint shape, one column per class that a drift "
        "event reaches (an injected fix of that class was evicted or restamped), as the paper's "
        "columns are (promo; celiac, incompatible; funding before / after the benign bump). "
        "Negative controls, no-constraint classes, streams without a breaking event (control, "
        "touch), rules streams, the drift-rate variants `*-rotations-N` and variants of a stream "
        f"in the grid (`payments-drifted-l1`) are left out. Columns: {streams}."
    )
    stats = [s for c in row_cells for s in c.first_try_by_class.values()]
    return _section(
        "Table 7 — First-try by hint shape",
        caption,
        markdown_table(headers, rows),
        row_cells,
        stats,
    )


#: The paper's own §3.7 figures (3,387 archived responses), quoted beside the measured rows.
PAPER_WIRE = (
    "Paper §3.7 (quoted: its 3,387 archived responses, L1 fields)",
    "–",
    "3,387",
    "–",
    "817",
    "123",
    "15.1",
    "11.7",
    "190",
    "3.2",
    "–",
    "–",
    "–",
    "251",
)


def _wire_row(label: str, runs: int, w: WireTotals) -> list[str]:
    return [
        label,
        str(runs),
        f"{w.responses:,}",
        f"{w.with_suggestions:,}",
        _bytes(w.mean_response_bytes),
        _bytes(w.mean_contract_bytes),
        _pct(w.overhead),
        _pct(w.envelope_share),
        _bytes(w.mean_envelope_bytes),
        _pct(w.suggestion_share),
        _bytes(w.mean_suggestion_bytes),
        _bytes(w.mean_contract_bytes_with_suggestions),
        _pct(w.overhead_with_suggestions),
        f"{w.max_contract_bytes:,}",
    ]


def _paper_row(label: str, runs: int, w: WireTotals) -> list[str]:
    return [
        label,
        str(runs),
        f"{w.paper_measured:,}",
        f"{w.with_suggestions:,}",
        _bytes(_ratio(w.paper_response_bytes, w.paper_measured)),
        _bytes(w.mean_paper_contract_bytes),
        _pct(w.paper_overhead),
        _pct(w.paper_envelope_share),
        _bytes(w.mean_paper_envelope_bytes),
        _pct(w.paper_suggestion_share),
        _bytes(w.mean_paper_suggestion_bytes),
        DASH,
        DASH,
        f"{w.max_paper_contract_bytes:,}",
    ]


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


def model_view_table(cells: Sequence[CellMetrics]) -> str:
    """What the model is not shown: the contract's input tokens kept out of the prompts."""
    headers = ["Scenario", "Planner", "Arm", "Input tokens", "Contract tokens hidden", "Share (%)"]
    ordered = sorted(
        cells, key=lambda c: (c.scenario, c.planner, c.detection, c.apply_mode, arm_rank(c.arm))
    )
    rows = []
    for c in ordered:
        shown, hidden = c["tokens_in"].mean, c["contract_tokens"].mean
        share = (
            DASH
            if shown is None or hidden is None or not shown + hidden
            else f"{100 * hidden / (shown + hidden):.1f}"
        )
        estimated = " est." if c.tokens_estimated else ""
        rows.append(
            [
                c.scenario,
                c.label,
                c.arm_code,
                f"{_count(shown)}{estimated}",
                f"{_count(hidden)} est.",
                share,
            ]
        )
    caption = (
        "Planners are shown each earlier response without its contract metadata (the envelope "
        "stamps, dependency vectors, scopes, patches, cache hints); the memory reads it whole. "
        "Contract tokens hidden = estimated input tokens those members would have added to the "
        "prompts (four characters a token); share = hidden / (input tokens + hidden). Mean over "
        "seeds."
    )
    return "\n\n".join(
        [
            "### What the model is shown",
            caption,
            markdown_table(headers, rows),
            _simulated_line(cells),
        ]
    )


def wire_table(metrics: Sequence[RunMetrics], cells: Sequence[CellMetrics]) -> str | None:
    """§3.7: what the contract costs on the wire, pooled over every response.

    Three measurements, each labelled: the paper's row (only its L1 fields ``table_versions``,
    ``cache_hint`` and ``table``, on the lowest-level responses there are); the project's full
    contract per server level (every contract member, extensions and dependency vectors included);
    and the conditional contract (``Contract-Since``) where runs sent it. The paper's own figures
    are quoted last.
    """
    if not any(m.wire.responses for m in metrics):
        return None
    groups: dict[tuple[int, bool], list[RunMetrics]] = defaultdict(list)
    for m in metrics:
        groups[(m.level, m.conditional)].append(m)
    totals = {}
    for key, group in groups.items():
        w = WireTotals()
        for m in group:
            w = w + m.wire
        totals[key] = w
    headers = [
        "What is counted",
        "Runs",
        "Responses",
        "With sugg.",
        "Mean resp. (B)",
        "Mean contract (B)",
        "Overhead (%)",
        "Envelope (%)",
        "Envelope mean (B)",
        "Sugg. fields (%)",
        "Sugg. fields mean (B)",
        "Contract w/ sugg. (B)",
        "Overhead w/ sugg. (%)",
        "Max contract (B)",
    ]
    rows = []
    plain = sorted(k for k in totals if not k[1] and totals[k].paper_measured)
    if plain:
        level = plain[0][0]
        where = "" if level == 1 else f", measured on L{level} responses (no L1 run)"
        rows.append(
            _paper_row(
                f"L{level} · the paper's L1 fields only (table_versions, cache_hint, table){where}",
                len(groups[plain[0]]),
                totals[plain[0]],
            )
        )
    for level, conditional in sorted(totals):
        what = "conditional contract (Contract-Since, ext)" if conditional else "full contract"
        rows.append(
            _wire_row(
                f"L{level} · {what}: every contract member",
                len(groups[(level, conditional)]),
                totals[(level, conditional)],
            )
        )
    rows.append(list(PAPER_WIRE))
    caption = (
        "Pooled over every response of every run at that server level (all scenarios, planners, "
        "arms). Overhead = Σ contract bytes / Σ response bytes; the envelope is the response-level "
        "stamps, the suggestion fields the per-suggestion cache metadata; “w/ sugg.” restricts to "
        "responses that carry suggestions. Rows measure different things: the paper's row counts "
        "only its L1 fields (what its 15.1 % counts); a full-contract row counts every contract "
        "member the level emits (the extensions `contract_seq`, `contract_epoch`, `scope`, and "
        "from L4 the dependency vectors with row keys and rules, from L6 `rules_version`); a "
        "conditional "
        "row is the same client sending `Contract-Since`, so unchanged stamps are left out. The "
        "last row quotes the paper (which also gives 2,419 responses carrying contract fields, "
        "173 B mean among them, `cache_hint` 24 B and `table` 28 B); its responses are not this "
        "project's."
    )
    return "\n\n".join(
        [
            "### §3.7 — What the contract costs on the wire",
            caption,
            markdown_table(headers, rows),
            _simulated_line(cells),
        ]
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


# --- the document ------------------------------------------------------------------------------


def unfinished_runs(root: Path) -> int:
    """Record files under ``root`` without completed metadata (aborted or in flight): left out."""
    count = 0
    for records in sorted((Path(root) / "runs").rglob("*.jsonl")):
        meta = records.with_name(records.name.removesuffix(".jsonl") + ".meta.json")
        try:
            count += not json.loads(meta.read_text(encoding="utf-8")).get("completed")
        except (OSError, ValueError):
            count += 1
    return count


def _header(metrics: Sequence[RunMetrics], cells: Sequence[CellMetrics], unfinished: int) -> str:
    versions = sorted({m.package_version for m in metrics})
    scenarios: dict[str, int] = {}
    for m in metrics:
        scenarios[m.scenario] = max(scenarios.get(m.scenario, 0), m.episodes)
    planners: dict[str, tuple[bool, set[str]]] = {}
    for m in metrics:
        simulated, served = planners.get(m.planner, (False, set()))
        planners[m.planner] = (
            simulated or m.simulated,
            served | ({m.planner_served} if m.planner_served else set()),
        )
    arms = sorted({(m.arm, m.arm_code) for m in metrics}, key=lambda a: arm_rank(a[0]))
    lines = [
        "# Evaluation report",
        "",
        "Rebuilt from the run artifacts alone (`runs/**/*.jsonl` and `*.meta.json`); "
        "nothing is rerun.",
        "",
        f"- Package version: {', '.join(versions)}",
        "- Scenarios: " + ", ".join(f"`{s}` ({n} episodes)" for s, n in sorted(scenarios.items())),
        "- Planners: "
        + ", ".join(
            f"`{p}`"
            + (f" {SIMULATED_MARK} simulated" if sim else "")
            + (f" (served: {', '.join(sorted(served))})" if served and served != {p} else "")
            for p, (sim, served) in sorted(planners.items())
        ),
        "- Arms: " + ", ".join(f"{code} (`{arm}`)" for arm, code in arms),
        f"- Seeds: {', '.join(str(s) for s in sorted({m.seed for m in metrics}))}",
        "- Transport: "
        + ", ".join(sorted({m.transport or "AsyncContractTransport" for m in metrics})),
        (
            f"- Runs: {len(metrics)} ({sum(m.episodes_recorded for m in metrics):,} episodes, "
            f"{sum(m.completed_episodes for m in metrics):,} completed), {len(cells)} cells"
        ),
    ]
    if unfinished:
        lines.append(
            f"- Left out: {unfinished} unfinished run(s) (records without completed metadata)"
        )
    commands = sorted({m.command for m in metrics if m.command})
    if commands:
        lines += ["- Reproduce:"] + [f"  `{c}`" for c in commands]
    if any(m.simulated for m in metrics):
        lines += ["", SIMULATED_NOTE]
    return "\n".join(lines)


def _definitions() -> str:
    return "## Definitions\n\n" + "\n".join(f"- **{name}**: {text}" for name, text in DEFINITIONS)


def _figures_section(cells: Sequence[CellMetrics], figures_dir: Path, out_dir: Path) -> str:
    specs = plan_figures(cells)
    if not specs:
        return "## Figures\n\n_Skipped: no run has the data of Figures 3–6._"
    rel = Path(os.path.relpath(figures_dir, out_dir)).as_posix()
    parts = ["## Figures", "Written by `figures.write_figures` under `figures/`."]
    for spec in specs:
        parts.append(f"![{spec.title}]({rel}/{spec.filename})\n\n{spec.caption}")
    return "\n\n".join(parts)


def render_report(
    metrics: Sequence[RunMetrics],
    cells: Sequence[CellMetrics],
    figures_dir: Path,
    out_dir: Path,
    unfinished: int = 0,
) -> str:
    """The whole report as Markdown, from scored runs and their cells."""
    if not metrics:
        left_out = f" ({unfinished} unfinished run(s) left out)" if unfinished else ""
        return f"# Evaluation report\n\n_No completed runs found{left_out}._\n"
    by_scenario: dict[str, list[CellMetrics]] = defaultdict(list)
    for c in cells:
        by_scenario[c.scenario].append(c)
    slots = {m.scenario: m.stale_slots for m in metrics}
    table_streams = {
        s: cs for s, cs in sorted(by_scenario.items()) if not any(c.rules_stream for c in cs)
    }
    rules_streams = {
        s: cs for s, cs in sorted(by_scenario.items()) if any(c.rules_stream for c in cs)
    }
    ladders = {s: cs for s, cs in table_streams.items() if any(c.arm != "none" for c in cs)}

    parts = [_header(metrics, cells, unfinished), _definitions(), "## Tables"]
    if ladders:
        for scenario, cs in ladders.items():
            parts += [table3(scenario, cs, slots[scenario]), events_table(scenario, cs)]
    else:
        parts.append(
            _skip("Table 3 — The A-ladder", "no memory-arm run on a table-drift or control stream.")
        )
    t4 = [t for s, cs in ladders.items() if (t := table4(s, cs))]
    parts += t4 or [_skip("Table 4 — First-try by class", "no A1 (`naive`) or A2D (`row`) run.")]
    if rules_streams:
        for scenario, cs in rules_streams.items():
            parts += [table5(scenario, cs), events_table(scenario, cs)]
    else:
        parts.append(
            _skip(
                "Table 5 — Detection policies",
                "no run on a rules stream (drift events that change rules).",
            )
        )
    t6 = [t for s, cs in table_streams.items() if (t := table6(s, cs))]
    parts += t6 or [
        _skip("Table 6 — Token and retry cost", "no A0 (`none`) run to measure a saving against.")
    ]
    parts.append(
        table7(cells)
        or _skip(
            "Table 7 — First-try by hint shape",
            "no A2D (`row`) run on a table-drift stream in which a drift event reached a class "
            "with a hint shape.",
        )
    )
    parts.append(
        wire_table(metrics, cells)
        or _skip("§3.7 — What the contract costs on the wire", "no response recorded.")
    )
    parts.append(model_view_table(cells))
    parts.append(_figures_section(cells, figures_dir, out_dir))
    parts += ["## Every cell", ladder_table(cells)]
    return "\n\n".join(parts) + "\n"


def build_report(root: Path, out: Path | None = None) -> str:
    """Write the report of every completed run under ``root`` to ``out`` (``root/report.md``)."""
    root = Path(root)
    out = Path(out) if out is not None else root / "report.md"
    metrics = score(read_runs(root))
    text = render_report(
        metrics, aggregate(metrics), root / "figures", out.parent, unfinished_runs(root)
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return text
