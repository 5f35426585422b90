"""Markdown building blocks of the report: number formats, the pipe table, a section with its
seeds and simulated-planner lines, and the per-scenario grid of cells every table reads."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence

from ..metrics import (
    SIMULATED_MARK,
    CellMetrics,
    Stat,
    arm_rank,
    series_label,
)

DASH = "–"
SIMULATED_NOTE = (
    f"{SIMULATED_MARK} simulated planners are deterministic behaviour models, not LLMs; "
    "their token counts are estimates."
)


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
        from ...planners.registry import token_source

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
    """One term per drift event, in order; the events of a shared window each with its own."""
    terms = []
    for w in cell.drift:
        for event in w.parts or (w,):
            if event.rules or not rules_only:
                terms.append(_count(getattr(event, name).mean))
    return " + ".join(terms) or DASH


def _drift_caption(cells: Sequence[CellMetrics]) -> str:
    windows = next((c.drift for c in cells if c.drift), ())
    if not windows:
        return "no drift events"
    events = [(w.after_episode, e.target, e.kind) for w in windows for e in (w.parts or (w,))]
    caption = "drift events in order: " + "; ".join(
        f"after episode {after} ({target}, {kind})" for after, target, kind in events
    )
    if any(w.parts for w in windows):
        caption += (
            ". Events after the same episode are counted each on its own: an eviction under "
            "each event that changed a table the evicted entry depended on (a rules event: an "
            "eviction for a rules change), a restamp under each event whose table it restamped"
        )
    return caption


def _by_arm_counts(arms: dict[str, CellMetrics], order: Sequence[str], name: str) -> str:
    """``0``, or the arms where a count is non-zero: ``A1 2 · A2D 1`` (mean over seeds)."""
    parts = [
        f"{arms[a].arm_code} {_count(arms[a][name].mean)}"
        for a in order
        if a in arms and (arms[a][name].mean or 0) > 0
    ]
    return " · ".join(parts) or "0"
