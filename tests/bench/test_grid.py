"""The grid over worker processes: what one process writes, and failures that end it early."""

import asyncio
import json
import os
import sys
import textwrap

import pytest

from invalidation_contracts.bench.arms import Arm
from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.errors import PlannerUnavailable
from invalidation_contracts.bench.grid import RUNS_PER_WORKER, Grid, default_processes, run_grid
from invalidation_contracts.bench.pool import WorkerDied
from invalidation_contracts.bench.scenario import load_scenario

CONTROL = load_scenario("payments-control")


def records(root):
    """Every run's records, keyed by run, with the server's random epoch left out."""
    out = {}
    for run in read_runs(root):
        rows = []
        for record in run.records:
            if record["record"] == "drift":
                record = {**record, "result": {**record["result"], "contract_epoch": None}}
            rows.append(record)
        out[run.meta.key] = rows
    return out


def test_runs_spread_over_worker_processes_write_what_one_process_writes(tmp_path):
    grid = Grid([load_scenario("payments-drifted")], ["simulated:exact"], [Arm("row")], [0, 1])
    alone = asyncio.run(run_grid(grid, tmp_path / "one", processes=1, progress=False))
    spread = asyncio.run(
        run_grid(grid, tmp_path / "two", processes=2, concurrency=2, progress=False)
    )

    assert (alone.ran, spread.ran, spread.failed) == (2, 2, [])
    assert records(tmp_path / "one") == records(tmp_path / "two")


def test_a_planner_that_cannot_be_built_is_not_tried_again_in_the_same_grid(tmp_path):
    grid = Grid([CONTROL], ["simulated:exact", "simulated:nonesuch"], [Arm("row")], [0, 1, 2])

    outcome = asyncio.run(run_grid(grid, tmp_path, processes=1, concurrency=1, progress=False))

    assert outcome.ran == 3
    [(spec, error)] = outcome.failed
    assert spec.planner == "simulated:nonesuch" and isinstance(error, PlannerUnavailable)
    assert [(s.planner, s.seed) for s in outcome.not_started] == [
        ("simulated:nonesuch", 1),
        ("simulated:nonesuch", 2),
    ]


def test_a_failure_in_a_worker_comes_back_as_itself(tmp_path):
    grid = Grid([CONTROL], ["simulated:exact", "simulated:nonesuch"], [Arm("row")], [0, 1])

    outcome = asyncio.run(run_grid(grid, tmp_path, processes=2, concurrency=2, progress=False))

    assert outcome.ran == 2
    assert outcome.failed and all(isinstance(e, PlannerUnavailable) for _, e in outcome.failed)
    assert "unknown simulated profile" in str(outcome.failed[0][1])
    assert len(outcome.failed) + len(outcome.not_started) == 2


@pytest.fixture
def crashing_factory(tmp_path, monkeypatch):
    """A planner factory that kills the worker process it runs in (importable by the workers)."""
    (tmp_path / "crashing_planner.py").write_text(
        textwrap.dedent(
            """
            import os

            def factory(spec):
                os._exit(3)
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    import crashing_planner

    yield crashing_planner.factory
    sys.modules.pop("crashing_planner", None)


def test_a_worker_that_dies_fails_its_runs_and_the_grid_ends(tmp_path, crashing_factory):
    grid = Grid([CONTROL], ["simulated:exact"], [Arm("row")], [0, 1])

    outcome = asyncio.run(
        run_grid(
            grid,
            tmp_path / "out",
            processes=2,
            concurrency=2,
            planner_factory=crashing_factory,
            progress=False,
        )
    )

    assert outcome.ran == 0 and len(outcome.failed) == 2
    assert all(isinstance(e, WorkerDied) for _, e in outcome.failed)
    assert "exited (3)" in str(outcome.failed[0][1])


def test_one_worker_per_usable_core_up_to_the_concurrency_for_grids_worth_the_start():
    cores = len(os.sched_getaffinity(0))
    assert default_processes(concurrency=64, runs=10_000) == cores
    assert default_processes(concurrency=1, runs=10_000) == 1
    assert default_processes(concurrency=64, runs=RUNS_PER_WORKER - 1) == 1
    assert default_processes(concurrency=64, runs=2 * RUNS_PER_WORKER) == min(2, cores)


def test_a_grid_with_nothing_to_do_starts_no_worker(tmp_path):
    grid = Grid([CONTROL], ["simulated:exact"], [Arm("row")], [0])
    asyncio.run(run_grid(grid, tmp_path, progress=False))

    outcome = asyncio.run(run_grid(grid, tmp_path, processes=4, progress=False))

    assert (outcome.ran, outcome.skipped, outcome.failed) == (0, 1, [])
    meta = json.loads(next((tmp_path / "runs").rglob("*.meta.json")).read_text())
    assert meta["completed"] is True
