"""The harness runs τ²'s airline stream end to end from the installed package: two arms, the exact
simulated planner, one seed; the contract arm evicts exactly the fix the drift made stale."""

from __future__ import annotations

import asyncio

import pytest

from invalidation_contracts.bench.arms import Arm
from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.grid import Grid, run_grid
from invalidation_contracts.bench.metrics import run_metrics
from invalidation_contracts.bench.scenario import load_scenario

pytestmark = pytest.mark.tau2


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("tau2-drifted")
    grid = Grid(
        [load_scenario("tau2-airline-drifted")],
        ["simulated:exact"],
        [Arm("naive"), Arm("row")],
        [0],
    )
    outcome = asyncio.run(run_grid(grid, root, progress=False, processes=1))
    assert outcome.failed == [] and outcome.ran == 2
    return {run.meta.key.arm: run_metrics(run) for run in read_runs(root)}


def test_every_episode_of_the_stream_completes_under_both_arms(runs):
    assert {arm: m.completed_episodes for arm, m in runs.items()} == {"naive": 36, "row": 36}


def test_the_contract_arm_evicts_exactly_the_spent_gift_cards_fix(runs):
    row = runs["row"]
    assert (row.evictions, row.evictions_correct, row.evictions_wrong) == (1, 1, 0)
    assert row.precision == 1.0 and row.recall == 1.0


def test_without_invalidation_the_stale_fix_is_injected_until_refuted(runs):
    naive, row = runs["naive"], runs["row"]
    assert naive.evictions == 0 and naive.recall == 0.0
    assert naive.stale_injections >= 1
    assert row.stale_injections <= naive.stale_injections
    assert row.stale_injections_outside_slots == 0
