"""The harness against the paper's self-consistency checks (issue 7), on the real domains and server."""

import asyncio
import json

import pytest

from invalidation_contracts.bench.arms import Arm
from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.grid import Grid, run_grid
from invalidation_contracts.bench.metrics import run_metrics
from invalidation_contracts.bench.runner import RunSpec, ScenarioMismatch, check_scenario, run_one
from invalidation_contracts.bench.scenario import load_scenario, shipped_scenarios
from invalidation_contracts.domains import get_catalog

ARMS = ("none", "naive", "table", "row")


@pytest.fixture(scope="module")
def drifted(tmp_path_factory):
    """payments-drifted with the exact planner, one seed, four arms: {arm: Run}."""
    root = tmp_path_factory.mktemp("drifted")
    grid = Grid(
        [load_scenario("payments-drifted")], ["simulated:exact"], [Arm(a) for a in ARMS], [0]
    )
    outcome = asyncio.run(run_grid(grid, root, progress=False))
    assert outcome.failed == [] and outcome.ran == len(ARMS)
    return {run.meta.key.arm: run for run in read_runs(root)}


def evictions(run):
    return [r for r in run.of("memory") if r["event"] == "evict"]


def test_without_memory_each_constrained_episode_costs_exactly_one_retry(drifted):
    episodes = list(drifted["none"].of("episode"))
    constrained = [e for e in episodes if e["klass"] != "no_constraint"]
    assert all(e["attempts"] == 2 for e in constrained)
    assert all(e["attempts"] == 1 for e in episodes if e["klass"] == "no_constraint")
    assert run_metrics(drifted["none"]).retries == len(constrained) == 27


def test_row_invalidation_evicts_exactly_the_rotated_fix(drifted):
    metrics = run_metrics(drifted["row"])
    assert (metrics.evictions, metrics.evictions_correct) == (1, 1)
    assert metrics.precision == 1.0 and metrics.recall == 1.0
    (evicted,) = evictions(drifted["row"])
    assert evicted["key"]["type"] == "ADD_REQUIRED_PROMO_CODE" and evicted["episode"] == 12


def test_the_benign_bump_evicts_nothing_and_restamps_one_entry_at_row_granularity(drifted):
    restamps = [
        r for r in drifted["row"].of("memory") if r["event"] == "restamp" and r["episode"] > 23
    ]
    after_bump = [r for r in evictions(drifted["row"]) if r["episode"] > 23]
    assert after_bump == [] and len(restamps) == 1
    assert restamps[0]["key"]["type"] == "USE_REQUIRED_FUNDING_TYPE"


def test_table_invalidation_destroys_the_co_located_codes_and_the_funding_fix(drifted):
    metrics = run_metrics(drifted["table"])
    wrong = {r["key"]["type"] for r in evictions(drifted["table"]) if r["stale"] is False}
    assert metrics.precision < 1.0 and metrics.evictions_correct == 1
    assert "USE_REQUIRED_FUNDING_TYPE" in wrong
    assert (
        len(
            [
                r
                for r in evictions(drifted["table"])
                if r["stale"] is False and r["key"]["type"] == "ADD_REQUIRED_PROMO_CODE"
            ]
        )
        == 2
    )


def test_table_invalidation_pays_re_derivation_retries_the_row_arm_does_not(drifted):
    assert run_metrics(drifted["table"]).retries > run_metrics(drifted["row"]).retries


def test_naive_memory_injects_the_stale_code_until_a_failure_teaches_it_the_new_one(drifted):
    stale = [r for r in drifted["naive"].of("memory") if r["event"] == "inject" and r["stale"]]
    assert [r["episode"] for r in stale] == [12]
    superseded = [r for r in drifted["naive"].of("memory") if r["event"] == "supersede"]
    assert [r["episode"] for r in superseded] == [12]
    assert run_metrics(drifted["naive"]).evictions == 0


def test_row_invalidation_injects_the_stale_code_only_in_the_pre_registered_slot(drifted):
    stale = [r for r in drifted["row"].of("memory") if r["event"] == "inject" and r["stale"]]
    assert [r["episode"] for r in stale] == drifted["row"].meta.extra["stale_slots"] == [12]


def test_every_run_records_its_metadata_and_opening_probe(drifted):
    meta = drifted["row"].meta
    assert meta.completed and meta.completed_episodes == 36
    assert meta.planner_requested == "simulated:exact" and meta.planner_served == "simulated:exact"
    assert meta.planner_simulated and meta.extra["arm_code"] == "A2D"
    assert len(meta.scenario_digest) == 64 and meta.preflight["probes"]


def test_a_completed_run_is_not_run_again(tmp_path):
    grid = Grid([load_scenario("payments-control")], ["simulated:exact"], [Arm("row")], [0])
    first = asyncio.run(run_grid(grid, tmp_path, progress=False))
    second = asyncio.run(run_grid(grid, tmp_path, progress=False))
    assert (first.ran, second.ran, second.skipped) == (1, 0, 1)


def test_an_interrupted_run_leaves_no_completed_artifact(tmp_path):
    class Boom(RuntimeError):
        pass

    def failing_planner(spec):
        raise Boom("planner unavailable")

    spec = RunSpec(load_scenario("payments-control"), "simulated:exact", Arm("row"), 0)
    with pytest.raises(Boom):
        asyncio.run(run_one(spec, tmp_path, planner_factory=failing_planner))
    assert read_runs(tmp_path) == []


@pytest.mark.parametrize("name", shipped_scenarios())
def test_every_shipped_scenario_refers_only_to_what_its_domain_ships(name):
    scenario = load_scenario(name)
    check_scenario(scenario, get_catalog(scenario.domain))


def test_a_schedule_naming_an_unknown_family_is_refused(tmp_path):
    scenario = load_scenario("payments-control").model_copy(update={"schedule": ["no-such-family"]})
    with pytest.raises(ScenarioMismatch, match="unknown task families"):
        check_scenario(scenario, get_catalog("acme_billing"))


def test_conditional_contract_keeps_the_same_validity(tmp_path):
    spec = RunSpec(load_scenario("payments-drifted"), "simulated:exact", Arm("row"), 0)
    asyncio.run(run_one(spec, tmp_path, conditional=True))
    (run,) = read_runs(tmp_path)
    assert run.meta.extra["conditional"] is True
    assert (run_metrics(run).evictions_correct, run_metrics(run).evictions) == (1, 1)


def test_artifact_lines_are_json_records_with_a_discriminator(drifted):
    assert {r["record"] for r in drifted["row"].records} >= {
        "attempt",
        "memory",
        "episode",
        "drift",
    }
    assert json.loads(json.dumps(drifted["row"].records[0]))["record"]


def test_an_arm_named_by_its_paper_code_is_the_same_arm():
    assert Arm.parse("A2D") == Arm("row") and Arm.parse("A0/EAGER/planner") == Arm("none")


@pytest.mark.parametrize(
    "text, message",
    [("row/eager/clinet", "apply mode"), ("row/sometimes", "detection"), ("A9", "strategy")],
)
def test_an_unknown_arm_part_is_refused(text, message):
    with pytest.raises(ValueError, match=message):
        Arm.parse(text)
