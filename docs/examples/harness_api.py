"""The harness from Python: a grid, one run, the metrics and the report, without the CLI.

Needs the ``bench`` extra: ``pip install '.[bench]'``.

Run it: ``python docs/examples/harness_api.py [OUT_DIR]`` (a temporary directory by default).
Everything runs in-process against the shipped Acme billing provider; no network, no model.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

from invalidation_contracts.bench.arms import Arm
from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.grid import Grid, run_grid
from invalidation_contracts.bench.metrics import aggregate, run_metrics, score
from invalidation_contracts.bench.report import build_report
from invalidation_contracts.bench.runner import RunSpec, run_one
from invalidation_contracts.bench.scenario import resolve_scenario


async def main(out: Path) -> None:
    # A manifest by name or path; resolve_scenario also checks it against its domain.
    drifted = resolve_scenario("payments-drifted")

    # The grid: scenarios x planners x arms x seeds. Each finished run is one artifact under out.
    grid = Grid([drifted], ["simulated:exact"], [Arm("none"), Arm("naive"), Arm("row")], [0])
    outcome = await run_grid(grid, out, progress=False)
    print(f"grid: {outcome.ran} runs, {len(outcome.failed)} failed")

    # One run on its own: an arm is STRATEGY[/DETECTION[/APPLY_MODE]].
    meta = await run_one(RunSpec(drifted, "simulated:exact", Arm.parse("A2D/lazy"), 0), out)
    print(f"one run: {meta.key.slug}, {meta.completed_episodes}/{meta.episodes} completed")

    # Metrics come from the artifacts alone: per run, and per cell (mean over seeds).
    for m in score(read_runs(out)):
        print(
            f"{m.arm_code:4} compliance={m.compliance} retries={m.retries} "
            f"precision={m.precision} restamps={m.restamps}"
        )
    [row] = [c for c in aggregate(read_runs(out)) if (c.arm, c.detection) == ("row", "eager")]
    print(f"cell A2D: compliance {row['compliance'].mean} over seeds {row.seeds}")
    lazy = next(r for r in read_runs(out) if r.meta.key.detection == "lazy")
    print(f"lazy A2D eligible episodes: {run_metrics(lazy).compliance_eligible}")

    # The report (Tables 3-7, the wire table, figure links) is rebuilt from the same artifacts.
    text = build_report(out)
    print("report:", out / "report.md", f"({text.count('### ')} sections)")


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    asyncio.run(main(target))
