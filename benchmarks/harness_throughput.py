"""Study 5 — harness throughput: the whole simulated paper grid, in-process.

Every shipped stream × every simulated profile × the arms of its stream (the A-ladder, or the
detection arms on the rules stream) × seeds 0, 1, 2, run by ``bench.grid.run_grid`` against the
in-process service, as ``invalidation-contracts ladder`` does: spread over worker processes (the
default, one per usable core) and, as the baseline in the same run, in one process. Reported:
wall time against the issue's 2-minute budget, episodes and runs per second, the speed-up of the
worker processes over one process, and the grid's per-run rate against one run of
``payments-drifted`` timed alone (what concurrency and grid bookkeeping cost).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from invalidation_contracts.bench.arms import LADDER, Arm
from invalidation_contracts.bench.grid import (
    SIMULATED_PROFILES,
    Grid,
    default_processes,
    load_grid,
    run_grid,
)
from invalidation_contracts.bench.runner import RunSpec, run_one
from invalidation_contracts.bench.scenario import load_scenario

from .common import Check, StudyResult, markdown_table, median

NAME = "harness"
TITLE = "Harness throughput: the simulated paper grid"
BUDGET_S = 120.0
GRID_REPEATS = 3


def paper_grid(quick: bool = False) -> Grid:
    """All streams, all arms, all simulated profiles, seeds 0–2 (quick: one small corner of it)."""
    if quick:
        return Grid([load_scenario("payments-drifted")], ["simulated:exact"], LADDER[:2], (0,))
    return Grid(list(load_grid("paper").scenarios), SIMULATED_PROFILES, LADDER, (0, 1, 2))


def run(quick: bool = False, out_dir: Path | None = None) -> StudyResult:
    grid = paper_grid(quick)
    specs = grid.specs()
    episodes = sum(spec.scenario.episodes for spec in specs)
    repeats = 1 if quick else GRID_REPEATS
    processes = default_processes(4, len(specs))
    walls: list[float] = []
    walls_one: list[float] = []
    with tempfile.TemporaryDirectory(prefix="bench-harness-") as tmp:
        root = Path(tmp)
        alone = [_one_run(root / f"alone-{i}") for i in range(1 if quick else 5)]
        for i in range(repeats):
            walls_one.append(_grid_wall(grid, root / f"one-{i}", processes=1))
            walls.append(_grid_wall(grid, root / f"grid-{i}", processes=None))
    wall = median(walls)
    wall_one = median(walls_one)
    single = median(alone)
    per_run = wall / len(specs)
    data: dict[str, Any] = {
        "walls_s": walls,
        "walls_one_process_s": walls_one,
        "processes": processes,
        "cores": os.cpu_count(),
        "wall_one_process_s": wall_one,
        "speedup_over_one_process": wall_one / wall,
        "runs": len(specs),
        "episodes": episodes,
        "wall_s": wall,
        "episodes_per_s": episodes / wall,
        "runs_per_s": len(specs) / wall,
        "single_run_s": single,
        "grid_per_run_s": per_run,
        "budget_s": BUDGET_S,
        "scenarios": [s.name for s in grid.scenarios],
        "planners": list(grid.planners),
    }
    rows = [
        [
            f"{len(specs)}",
            f"{episodes:,}",
            f"{processes}",
            f"{wall_one:.1f}",
            f"{wall_one / wall:.2f}",
            f"{wall:.1f}",
            f"{wall / BUDGET_S:.2f}",
            f"{episodes / wall:,.0f}",
            f"{len(specs) / wall:.1f}",
            f"{1000 * single:.0f}",
            f"{per_run / single:.2f}",
        ]
    ]
    md = "\n\n".join(
        [
            (
                f"`run_grid` (default concurrency 4, in-process ASGI service, artifacts to a "
                f"temporary directory) over {len(grid.scenarios)} stream(s) "
                f"({', '.join(f'`{s.name}`' for s in grid.scenarios)}), {len(grid.planners)} "
                f"simulated profile(s), the stream's arms and seeds "
                f"{', '.join(map(str, grid.seeds))}; spread over {processes} worker process(es) "
                f"(the default on this machine's {os.cpu_count()} core(s)) against one process, "
                f"interleaved in the same run. *Alone*: one `payments-drifted` / "
                f"`simulated:exact` / `row` run timed by itself (median of {len(alone)}); "
                f"*grid / alone* is the grid's wall time per run against it. Wall times: median "
                f"of {repeats} grid run(s) each (workers "
                f"{', '.join(f'{w:.1f}' for w in walls)} s; one process "
                f"{', '.join(f'{w:.1f}' for w in walls_one)} s)."
            ),
            markdown_table(
                [
                    "Runs",
                    "Episodes",
                    "Processes",
                    "One process (s)",
                    "Speed-up",
                    "Wall (s)",
                    "Wall / 120 s budget",
                    "Episodes/s",
                    "Runs/s",
                    "Alone (ms/run)",
                    "Grid / alone per run",
                ],
                rows,
            ),
        ]
    )
    checks = (
        []
        if quick
        else [
            Check(
                "whole simulated paper grid in under 2 minutes",
                f"{wall:.1f} s ({wall / BUDGET_S:.2f} of the budget)",
                wall < BUDGET_S,
            )
        ]
    )
    return StudyResult(NAME, TITLE, md, checks, [], data)


def _grid_wall(grid: Grid, root: Path, processes: int | None) -> float:
    start = time.perf_counter()
    outcome = asyncio.run(run_grid(grid, root, progress=False, resume=False, processes=processes))
    wall = time.perf_counter() - start
    if outcome.failed:
        spec, exc = outcome.failed[0]
        raise RuntimeError(f"{len(outcome.failed)} grid runs failed; first: {spec.key}: {exc!r}")
    return wall


def _one_run(root: Path) -> float:
    spec = RunSpec(load_scenario("payments-drifted"), "simulated:exact", Arm("row"), 0)
    start = time.perf_counter()
    asyncio.run(run_one(spec, root))
    return time.perf_counter() - start
