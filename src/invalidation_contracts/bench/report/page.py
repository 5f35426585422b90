"""The whole report page: header, definitions, every table in the paper's order, the figures and
every cell; ``build_report`` writes it from the artifacts under a root."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from ..artifacts import read_runs
from ..figures import plan_figures
from ..frontier import contractless_table, has_withheld
from ..metrics import (
    DEFINITIONS,
    SIMULATED_MARK,
    CellMetrics,
    RunMetrics,
    aggregate,
    arm_rank,
    score,
)
from .classes import table4, table7
from .cost import model_view_table, wire_table
from .ladder import events_table, ladder_table, table3, table6
from .markup import (
    SIMULATED_NOTE,
    _skip,
)
from .policies import table5


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
        # The title is the caption's, not the image's: a paper sets its own.
        parts.append(f"![{spec.title}]({rel}/{spec.filename})\n\n**{spec.title}.** {spec.caption}")
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
    if has_withheld(cells):
        parts.append(
            "## Without a contract\n\nArms marked ∅ ran with the contract withheld (the server "
            "at level `none`: suggestions, no contract field); means over seeds. Precision and "
            "recall where the arm evicts; probes are requests sent without a doubted fix and "
            "reads of a resource a fix cites (its validator, then conditional reads).\n\n"
            + contractless_table(cells)
        )
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
