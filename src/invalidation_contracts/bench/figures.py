"""Figures in the shape of the paper's Figures 3–6, drawn from the artifacts' cell metrics.

``plan_figures`` says which figures the data supports (the report links them without drawing,
each with its title and caption: the images carry none, as a paper sets its own);
``write_figures`` draws them with matplotlib's Agg canvas (no display, no pyplot global state) as
PNG, and as SVG or PDF beside it when asked (``FORMATS``). A point is drawn at its own x: series
that coincide are told apart by marker size, never moved along the axis.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

from .._extras import require_extra
from .artifacts import read_runs
from .frontier import draw_frontier, frontier, has_withheld
from .metrics import (
    SIMULATED_MARK,
    CellMetrics,
    aggregate,
    arm_rank,
    is_variant,
    rotation_count,
    series_label,
)
from .palette import COLORS, MARKERS

# Checked at import, though matplotlib is imported only where a figure is drawn.
require_extra("bench", "matplotlib")

LINESTYLES: tuple[Literal["-", "--", ":", "-."], ...] = ("-", "--", ":", "-.")
#: Marker size of the last line drawn; each earlier one is ``MARKER_STEP`` larger, so a marker that
#: coincides with a later one still shows as a ring around it.
MARKER_SIZE = 5.0
MARKER_STEP = 2.5
#: The file formats ``write_figures`` can write, by suffix; PNG is what the report links.
FORMATS = ("png", "svg", "pdf")
#: PNG resolution (dots per inch); the vector formats have none.
PNG_DPI = 200
DASH = "–"
#: The height (percentage points) of the stub that shows a zero bar in its series' colour.
ZERO_STUB = 1.5
#: The colour of legend keys that stand for a line style rather than a series.
STYLE_KEY = "#555555"
#: Line plots start below zero so a series at 0 is drawn above the axis, not under its spine.
LINE_FLOOR = -5.0


@dataclass(frozen=True, slots=True)
class FigureSpec:
    """One figure the data supports: its file name, title and caption."""

    filename: str
    title: str
    caption: str
    draw: Callable[[Figure], None]


Series = tuple[str, str, str]


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)


def _series(cells: Sequence[CellMetrics]) -> list[Series]:
    return sorted({(c.planner, c.detection, c.apply_mode) for c in cells})


def _label(series: Series, cells: Sequence[CellMetrics]) -> str:
    simulated = any(c.simulated for c in cells if (c.planner, c.detection, c.apply_mode) == series)
    return series_label(series[0], simulated, series[1], series[2])


def _series_key(series: Sequence[Series], cells: Sequence[CellMetrics]) -> list[Any]:
    """The legend's entries for ``series``: each planner's color and marker, by its label."""
    from matplotlib.lines import Line2D

    return [
        Line2D(
            [],
            [],
            color=COLORS[i % len(COLORS)],
            marker=MARKERS[i % len(MARKERS)],
            label=_label(s, cells),
        )
        for i, s in enumerate(series)
    ]


def _suffix(cells: Sequence[CellMetrics]) -> str:
    if all(c.simulated for c in cells):
        return " (simulated planners)"
    if any(c.simulated for c in cells):
        return f" ({SIMULATED_MARK} simulated planners)"
    return ""


def _index(cells: Sequence[CellMetrics]) -> dict[tuple[Series, str, str], CellMetrics]:
    return {((c.planner, c.detection, c.apply_mode), c.scenario, c.arm): c for c in cells}


def _percent(cell: CellMetrics | None, name: str) -> tuple[float, float]:
    stat = None if cell is None else cell[name]
    if stat is None or stat.mean is None:
        return float("nan"), 0.0
    return 100 * stat.mean, 100 * (stat.std or 0.0)


def _defined(xs: Iterable[float], ys: Iterable[float]) -> tuple[list[float], list[float]]:
    """The points with a value, so a line joins the arms or streams a series has data for."""
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if not math.isnan(y)]
    return [x for x, _ in pairs], [y for _, y in pairs]


def _bars(
    cells: Sequence[CellMetrics],
    scenario: str,
    arms: Sequence[str],
    metric: str,
    ylabel: str,
) -> Callable[[Figure], None]:
    """Grouped bars: one group per arm, one bar per planner, seed std as error bars."""

    def draw(fig: Figure) -> None:
        from matplotlib.patches import Patch

        index = _index(cells)
        series = _series(cells)
        codes = {c.arm: c.arm_code for c in cells}
        ax = fig.add_subplot()
        width = 0.8 / max(len(series), 1)
        # Plain swatches: a series whose first bar is a zero stub keeps an unhatched key.
        handles = [
            Patch(facecolor=COLORS[i % len(COLORS)], label=_label(s, cells))
            for i, s in enumerate(series)
        ]
        for i, s in enumerate(series):
            values = [_percent(index.get((s, scenario, a)), metric) for a in arms]
            xs = [j - 0.4 + width * (i + 0.5) for j in range(len(arms))]
            ax.bar(
                xs,
                # A zero is a short hatched stub in the series' colour, so every series shows.
                [ZERO_STUB if v == 0 else v for v, _ in values],
                width,
                hatch=["////" if v == 0 else "" for v, _ in values],
                yerr=[e for _, e in values],
                capsize=2,
                error_kw={"ecolor": "#444444", "elinewidth": 0.8},
                color=COLORS[i % len(COLORS)],
            )
            for x, (v, _) in zip(xs, values, strict=True):
                if math.isnan(v) or v == 0:
                    label, y = (DASH, 1.0) if math.isnan(v) else ("0", ZERO_STUB + 0.5)
                    ax.text(x, y, label, ha="center", va="bottom", fontsize=7)
        ax.set_xticks(range(len(arms)), [codes.get(a, a) for a in arms])
        _finish(fig, ax, ylabel, legend_title="planner", handles=handles)

    return draw


def _marker_size(i: int, n: int) -> float:
    """The marker size of the ``i``-th of ``n`` lines: the first drawn largest, so a later line's
    marker on the same point sits inside it."""
    return MARKER_SIZE + MARKER_STEP * (n - 1 - i)


def coincidences(
    cells: Sequence[CellMetrics],
    line_of: Callable[[CellMetrics], str | None],
    x: Callable[[CellMetrics], Any],
    metric: str,
) -> list[str]:
    """Which drawn lines coincide: groups of lines (each named by ``line_of``; None: not drawn)
    whose values are equal at every point. Said in the caption, because they share every point
    (their markers nest by size)."""
    points: dict[str, dict[Any, float]] = defaultdict(dict)
    for c in cells:
        name, mean = line_of(c), c[metric].mean
        if name is not None and mean is not None:
            points[name][x(c)] = round(mean, 9)
    groups: list[list[str]] = []
    for name in points:
        for group in groups:
            if points[group[0]] == points[name]:
                group.append(name)
                break
        else:
            groups.append([name])
    return [" and ".join(group) + " coincide" for group in groups if len(group) > 1]


def _finish(
    fig: Figure,
    ax: Axes,
    ylabel: str,
    legend_title: str | None = None,
    handles: Sequence[Artist] | None = None,
    floor: float = 0.0,
) -> None:
    ax.set_ylim(floor, 105)
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(
        handles=handles,
        fontsize=8,
        title=legend_title,
        title_fontsize=8,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        frameon=False,
    )
    fig.tight_layout()


def _rotations(cells: Sequence[CellMetrics], stream: str) -> Callable[[Figure], None]:
    """Compliance against the number of rotations: A2D solid, A1 dashed, one color per planner."""

    def draw(fig: Figure) -> None:
        from matplotlib.lines import Line2D

        ax = fig.add_subplot()
        index = _index(cells)
        points: dict[str, int] = {}
        for c in cells:
            parsed = rotation_count(c.scenario)
            if parsed and parsed[0] == stream:
                points[c.scenario] = parsed[1]
        order = sorted(points, key=points.get)  # type: ignore[arg-type]
        codes = {c.arm: c.arm_code for c in cells}
        series = _series(cells)
        for i, s in enumerate(series):
            for k, (arm, style) in enumerate((("row", "-"), ("naive", "--"))):
                values = [_percent(index.get((s, sc, arm)), "compliance")[0] for sc in order]
                ax.plot(
                    *_defined([points[sc] for sc in order], values),
                    style,
                    marker=MARKERS[i % len(MARKERS)],
                    markersize=_marker_size(2 * i + k, 2 * len(series)),
                    markerfacecolor=COLORS[i % len(COLORS)] if arm == "row" else "white",
                    color=COLORS[i % len(COLORS)],
                    clip_on=False,
                )
        ax.set_xticks(sorted(set(points.values())))
        ax.set_xlabel("table rotations in the stream")
        handles = _series_key(series, cells)
        # Each arm's line style and marker fill, as its lines are drawn.
        handles += [
            Line2D(
                [],
                [],
                color=STYLE_KEY,
                linestyle="-",
                marker="o",
                markerfacecolor=STYLE_KEY,
                label=codes.get("row", "A2D"),
            ),
            Line2D(
                [],
                [],
                color=STYLE_KEY,
                linestyle="--",
                marker="o",
                markerfacecolor="white",
                label=codes.get("naive", "A1"),
            ),
        ]
        _finish(fig, ax, "Compliance (%)", handles=handles, floor=LINE_FLOOR)

    return draw


def _targeted(cells: Sequence[CellMetrics], scenarios: Sequence[str]) -> Callable[[Figure], None]:
    """First-try on each stream's drift-targeted class by arm: a color per planner, a style per
    stream."""

    def draw(fig: Figure) -> None:
        from matplotlib.lines import Line2D

        ax = fig.add_subplot()
        index = _index(cells)
        arms = sorted({c.arm for c in cells}, key=arm_rank)
        codes = {c.arm: c.arm_code for c in cells}
        series = _series(cells)
        lines = len(series) * len(scenarios)
        for i, s in enumerate(series):
            for j, scenario in enumerate(scenarios):
                values = [
                    _percent(index.get((s, scenario, a)), "targeted_first_try")[0] for a in arms
                ]
                ax.plot(
                    *_defined(list(range(len(arms))), values),
                    LINESTYLES[j % len(LINESTYLES)],
                    marker=MARKERS[i % len(MARKERS)],
                    markersize=_marker_size(i * len(scenarios) + j, lines),
                    color=COLORS[i % len(COLORS)],
                    clip_on=False,
                )
        ax.set_xticks(range(len(arms)), [codes.get(a, a) for a in arms])
        handles = _series_key(series, cells)
        targeted = {c.scenario: c.targeted_class for c in cells}
        if len(scenarios) > 1:  # one stream needs no style key: the caption names it
            handles += [
                Line2D(
                    [],
                    [],
                    color=STYLE_KEY,
                    linestyle=LINESTYLES[j % len(LINESTYLES)],
                    label=f"{sc} ({targeted[sc]})",
                )
                for j, sc in enumerate(scenarios)
            ]
        _finish(fig, ax, "First-try on the targeted class (%)", handles=handles, floor=LINE_FLOOR)

    return draw


def _coincide_note(notes: Sequence[str]) -> str:
    if not notes:
        return " No two series coincide."
    return (
        " Where series coincide they share every point, their markers nested by size: "
        + "; ".join(notes)
        + "."
    )


def _last_event(cells: Sequence[CellMetrics]) -> str:
    windows = next((c.drift for c in cells if c.drift), ())
    if not windows:
        return "no drift event"
    last = windows[-1]
    return f"episode {last.after_episode} (the {last.kind} event on {last.target})"


def plan_figures(cells: Sequence[CellMetrics]) -> list[FigureSpec]:
    """The figures the cells support, in paper order; a figure without data is left out."""
    by_scenario: dict[str, list[CellMetrics]] = defaultdict(list)
    for c in cells:
        by_scenario[c.scenario].append(c)
    table_streams = {
        s: cs for s, cs in sorted(by_scenario.items()) if not any(c.rules_stream for c in cs)
    }
    specs: list[FigureSpec] = []

    for scenario, cs in table_streams.items():
        arms = sorted({c.arm for c in cs if c["eligible_first_try"].n}, key=arm_rank)
        if any(a != "none" for a in arms):
            klass = cs[0].compliance_class
            title = f"Figure 3 — {klass.capitalize()} first-try by arm on {scenario}{_suffix(cs)}"
            specs.append(
                FigureSpec(
                    f"fig3-compliance-{_slug(scenario)}.png",
                    title,
                    f"First-try rate on the {klass} class (the stream's compliance class) over its "
                    "injection-eligible episodes "
                    "(the stale slots left out), by arm; for a memory arm this is its compliance, "
                    "and A0, which keeps no memory, shows the zero floor of §6.2. Bars are means "
                    "over seeds, whiskers the sample std; a zero is a short hatched stub marked "
                    "0, so every planner's colour shows.",
                    _bars(
                        cs,
                        scenario,
                        arms,
                        "eligible_first_try",
                        f"{klass.capitalize()} first-try (%)",
                    ),
                )
            )
    for scenario, cs in table_streams.items():
        arms = sorted({c.arm for c in cs if c["post_drift_funding"].n}, key=arm_rank)
        if arms:
            title = f"Figure 4 — Post-drift funding first-try on {scenario}{_suffix(cs)}"
            specs.append(
                FigureSpec(
                    f"fig4-post-drift-funding-{_slug(scenario)}.png",
                    title,
                    f"First-try rate on the funding episodes after {_last_event(cs)}, by arm; "
                    "a zero is a short hatched stub marked 0.",
                    _bars(
                        cs,
                        scenario,
                        arms,
                        "post_drift_funding",
                        "Post-drift funding first-try (%)",
                    ),
                )
            )
    streams: dict[str, list[CellMetrics]] = defaultdict(list)
    for scenario, cs in table_streams.items():
        if (parsed := rotation_count(scenario)) is not None:
            streams[parsed[0]] += [c for c in cs if c.arm in ("row", "naive") and c["compliance"].n]
    for stream, cs in sorted(streams.items()):
        if cs:
            title = f"Figure 5 — Compliance vs rotations ({stream}){_suffix(cs)}"
            notes = coincidences(
                cs, lambda c: f"{c.label} {c.arm_code}", lambda c: c.scenario, "compliance"
            )
            specs.append(
                FigureSpec(
                    f"fig5-rotations-{_slug(stream)}.png",
                    title,
                    "Compliance against the number of table rotations in one stream: A2D solid "
                    "(filled markers), A1 dashed (hollow), one colour and marker per planner."
                    + _coincide_note(notes),
                    _rotations(cs, stream),
                )
            )
    targeted = [
        s
        for s, cs in table_streams.items()
        if rotation_count(s) is None
        and not is_variant(s, table_streams)
        and any(c.targeted_class and c["targeted_first_try"].n for c in cs)
    ]
    if targeted:
        cs = [c for c in cells if c.scenario in targeted]
        title = f"Figure 6 — First-try on the drift-targeted class{_suffix(cs)}"
        notes = coincidences(
            cs, lambda c: f"{c.label} on `{c.scenario}`", lambda c: c.arm, "targeted_first_try"
        )
        specs.append(
            FigureSpec(
                "fig6-targeted-class.png",
                title,
                "First-try rate on the class each stream's drift targets (the class of its stale "
                "slots), by arm, "
                + (
                    "one line style per stream: " + ", ".join(f"`{s}`" for s in targeted)
                    if len(targeted) > 1
                    else f"on `{targeted[0]}`"
                )
                + "; one colour and marker per planner."
                + _coincide_note(notes),
                _targeted(cs, targeted),
            )
        )
    if has_withheld(cells) and frontier([c for c in cells if not c.rules_stream]):
        specs.append(
            FigureSpec(
                "fig-frontier-contractless.png",
                "Saving vs staleness with and without the contract",
                "Token saving against stale injections, one colour and marker per arm (∅: the "
                "contract withheld), one point per stream; means over seeds.",
                draw_frontier([c for c in cells if not c.rules_stream]),
            )
        )
    return specs


def write_figures(root: Path, formats: Sequence[str] = ("png",)) -> list[Path]:
    """Draw every supported figure of the runs under ``root`` into ``root/figures``, once per
    format of ``formats`` (each in ``FORMATS``; the PNG is the report's); return the files."""
    from matplotlib import rc_context
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    unknown = sorted(set(formats) - set(FORMATS))
    if unknown:
        raise ValueError(f"figure formats are {', '.join(FORMATS)}, not {', '.join(unknown)}")
    specs = plan_figures(aggregate(read_runs(Path(root))))
    out = Path(root) / "figures"
    written = []
    for spec in specs:
        out.mkdir(parents=True, exist_ok=True)
        fig = Figure(figsize=(9.0, 4.2))
        FigureCanvasAgg(fig)
        spec.draw(fig)
        for suffix in formats:
            path = (out / spec.filename).with_suffix(f".{suffix}")
            # No timestamps in the vector formats, so a rebuild writes the same bytes.
            metadata = {"CreationDate": None} if suffix == "pdf" else {"Date": None}
            options: dict[str, Any] = {"dpi": PNG_DPI} if suffix == "png" else {}
            if suffix != "png":
                options["metadata"] = metadata
            with rc_context({"svg.hashsalt": "invalidation-contracts"}):  # stable SVG ids
                fig.savefig(path, format=suffix, **options)
            written.append(path)
    return written
