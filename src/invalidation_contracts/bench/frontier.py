"""The contract-less comparison: each policy with the contract withheld (``@none`` arms) next to
the contract arms on the same streams, and the saving-vs-staleness frontier (issue 37)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .metrics import CellMetrics, arm_rank
from .metrics.order import WITHHELD
from .palette import COLORS, MARKERS

if TYPE_CHECKING:
    from matplotlib.figure import Figure

#: The table's columns: header and how a cell shows it.
HEADERS = (
    "Scenario",
    "Arm",
    "Stale inj.",
    "Retries",
    "Prec.",
    "Recall",
    "Probes",
    "Saving vs A0 (%)",
    "Share of A2D's saving (%)",
)


def has_withheld(cells: Sequence[CellMetrics]) -> bool:
    """Whether any arm ran with the contract withheld."""
    return any(c.arm.endswith(WITHHELD) for c in cells)


def _mean(cell: CellMetrics, name: str) -> float | None:
    return cell[name].mean


def _fmt(value: float | None, scale: float = 1.0, digits: int = 1) -> str:
    return "–" if value is None else f"{value * scale:.{digits}f}"


def share_of_a2d(cell: CellMetrics, cells: Sequence[CellMetrics]) -> float | None:
    """The cell's token saving as a share of A2D's on the same scenario and planner."""
    a2d = next(
        (
            c
            for c in cells
            if (c.scenario, c.planner, c.arm) == (cell.scenario, cell.planner, "row")
        ),
        None,
    )
    mine, theirs = _mean(cell, "token_saving"), None if a2d is None else _mean(a2d, "token_saving")
    if mine is None or not theirs:
        return None
    return mine / theirs


def contractless_table(cells: Sequence[CellMetrics]) -> str:
    """One row per scenario, planner and arm: means over seeds."""
    lines = ["| " + " | ".join(HEADERS) + " |", "|:---|---:" + "|---:" * (len(HEADERS) - 2) + "|"]
    for c in sorted(cells, key=lambda c: (c.scenario, c.planner, arm_rank(c.arm))):
        row = [
            c.scenario,
            c.arm_code,
            _fmt(_mean(c, "stale_injections")),
            _fmt(_mean(c, "retries")),
            _fmt(_mean(c, "precision"), digits=2),
            _fmt(_mean(c, "recall"), digits=2),
            _fmt(_mean(c, "probes")),
            _fmt(_mean(c, "token_saving"), 100),
            _fmt(share_of_a2d(c, cells), 100, 0),
        ]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def frontier(cells: Sequence[CellMetrics]) -> dict[str, list[tuple[float, float]]]:
    """Per arm code: ``(stale injections, saving %)`` on each scenario (means over seeds)."""
    out: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for c in sorted(cells, key=lambda c: (arm_rank(c.arm), c.scenario)):
        stale, saving = _mean(c, "stale_injections"), _mean(c, "token_saving")
        if stale is not None and saving is not None:
            out[c.arm_code].append((stale, 100 * saving))
    return dict(out)


def draw_frontier(cells: Sequence[CellMetrics]) -> Callable[[Figure], None]:
    """A scatter of saving against stale injections, one series (colour and marker) per arm,
    one point per scenario; every series drawn with a distinct marker and a slight offset."""
    points = frontier(cells)

    def draw(fig: Figure) -> None:
        ax = fig.add_subplot(1, 1, 1)
        for i, (code, xy) in enumerate(points.items()):
            offset = (i - len(points) / 2) * 0.04
            ax.scatter(
                [x + offset for x, _ in xy],
                [y for _, y in xy],
                color=COLORS[i % len(COLORS)],
                marker=MARKERS[i % len(MARKERS)],
                s=60,
                alpha=0.85,
                label=code,
                zorder=3 + i,
            )
        ax.set_xlabel("Stale injections per run (mean over seeds)")
        ax.set_ylabel("Token saving vs A0 (%)")
        ax.set_title("Saving vs staleness, with and without the contract (∅: withheld)")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize=8)

    return draw
