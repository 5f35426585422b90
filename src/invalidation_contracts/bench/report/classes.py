"""First-try by constraint class (Table 4) and by hint shape across streams (Table 7)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from ..metrics import (
    CellMetrics,
    class_rank,
    is_variant,
    rotation_count,
)
from .markup import (
    DASH,
    _Grid,
    _pct,
    _section,
    markdown_table,
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
