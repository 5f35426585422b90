"""The harness against the paper's self-consistency checks, on the real domains and server."""

import asyncio
import dataclasses
import functools
import json

import pytest
from tests.support.tau2 import scenario_params

from invalidation_contracts.bench.arms import Arm
from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.grid import Grid, run_grid
from invalidation_contracts.bench.metrics import run_metrics
from invalidation_contracts.bench.runner import (
    PlannerUnavailable,
    RunSpec,
    ScenarioMismatch,
    check_scenario,
    run_one,
)
from invalidation_contracts.bench.scenario import load_scenario, shipped_scenarios
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.planners import PlannerCallError, PlannerResponseError, create_planner

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
    assert constrained
    assert all(e["attempts"] == 2 for e in constrained)
    assert all(e["attempts"] == 1 for e in episodes if e["klass"] == "no_constraint")
    assert run_metrics(drifted["none"]).retries == len(constrained) == 27


def test_row_invalidation_evicts_exactly_the_rotated_fix(drifted):
    metrics = run_metrics(drifted["row"])
    assert (metrics.evictions, metrics.evictions_correct) == (1, 1)
    assert metrics.precision == 1.0 and metrics.recall == 1.0
    (evicted,) = evictions(drifted["row"])
    assert evicted["key"]["type"] == "ADD_REQUIRED_PROMO_CODE" and evicted["episode"] == 12


def test_the_benign_bump_evicts_nothing_and_restamps_each_plans_funding_entry(drifted):
    restamps = [
        r for r in drifted["row"].of("memory") if r["event"] == "restamp" and r["episode"] > 23
    ]
    after_bump = [r for r in evictions(drifted["row"]) if r["episode"] > 23]
    assert after_bump == [] and len(restamps) == 4  # one funding entry per plan that needs credit
    assert {r["key"]["type"] for r in restamps} == {"USE_REQUIRED_FUNDING_TYPE"}


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


@pytest.mark.parametrize("name", scenario_params(shipped_scenarios()))
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


def test_every_store_record_carries_the_values_the_memory_cached(drifted):
    stores = [
        r for r in drifted["row"].records if r["record"] == "memory" and r["event"] == "store"
    ]
    assert stores and all(set(r["fix"]) == {"type", "parameters"} for r in stores)
    codes = {
        r["fix"]["parameters"].get("promo_code")
        for r in stores
        if r["fix"]["type"] == "ADD_REQUIRED_PROMO_CODE"
    }
    assert {"SUMMERSALE25", "WINTERLAUNCH26"} <= codes  # before and after the rotation


def test_an_arm_named_by_its_paper_code_is_the_same_arm():
    assert Arm.parse("A2D") == Arm("row") and Arm.parse("A0/EAGER/planner") == Arm("none")


@pytest.mark.parametrize(
    "text, message",
    [("row/eager/clinet", "apply mode"), ("row/sometimes", "detection"), ("A9", "strategy")],
)
def test_an_unknown_arm_part_is_refused(text, message):
    with pytest.raises(ValueError, match=message):
        Arm.parse(text)


# -- one path: the harness drives the shipped transport ------------------------------------------


def test_a_run_verifies_signed_contracts_because_it_asks_for_them_as_an_agent_transport_does(
    tmp_path,
):
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from invalidation_contracts.client.trust import TrustPolicy
    from invalidation_contracts.server.http.app import create_app
    from invalidation_contracts.server.trust import TrustOptions

    key = Ed25519PrivateKey.generate()
    signing = functools.partial(
        create_app, trust=TrustOptions(signing_keys={"k1": key}, active_kid="k1")
    )
    policy = TrustPolicy(require_signatures=True, public_keys={"k1": key.public_key()})
    spec = RunSpec(load_scenario("payments-drifted"), "simulated:exact", Arm("row"), 0)

    asyncio.run(run_one(spec, tmp_path, app_factory=signing, trust=policy))

    metrics = run_metrics(read_runs(tmp_path)[0])
    assert (metrics.evictions_correct, metrics.evictions, metrics.restamps) == (1, 1, 6)


def test_resync_detection_fetches_the_changes_feed_before_episodes_through_the_transport(tmp_path):
    from invalidation_contracts.server.http.app import create_app

    fetched = []

    def recording(*args, **kwargs):
        app = create_app(*args, **kwargs)

        async def spy(scope, receive, send):
            if scope["type"] == "http" and scope["path"] == "/contract/changes":
                fetched.append(dict(scope["headers"]).get(b"accept"))
            await app(scope, receive, send)

        return spy

    spec = RunSpec(load_scenario("payments-drifted"), "simulated:exact", Arm("row", "resync"), 0)
    asyncio.run(run_one(spec, tmp_path, app_factory=recording))

    episodes_after_the_first_store = 35
    assert len(fetched) >= episodes_after_the_first_store
    assert set(fetched) == {b"application/json"}  # the contract transport's need requests


# -- every eviction labelled ---------------------------------------------------------------------


@pytest.mark.parametrize("scenario", ["payments-rotations-2", "payments-rotations-3"])
@pytest.mark.parametrize("arm", ["row", "row+consumers", "row+graph"])
def test_a_fix_learned_after_a_pending_diff_is_labelled_when_evicted(scenario, arm, tmp_path):
    spec = RunSpec(load_scenario(scenario), "simulated:exact", Arm(arm), 0)
    asyncio.run(run_one(spec, tmp_path))

    (run,) = read_runs(tmp_path)
    assert [e for e in evictions(run) if e["stale"] is None] == []
    metrics = run_metrics(run)
    # row+graph also evicts the rotated plan's funding fix (its plan row is downstream of the
    # rotated code): labelled wrong, not unlabelled
    assert metrics.precision == (0.5 if arm == "row+graph" else 1.0) and metrics.recall == 1.0


def test_every_entry_that_goes_stale_is_recorded_for_recall(tmp_path):
    spec = RunSpec(load_scenario("payments-rotations-3"), "simulated:exact", Arm("row"), 0)
    asyncio.run(run_one(spec, tmp_path))

    (run,) = read_runs(tmp_path)
    stale = [r["entry"] for r in run.of("stale")]
    evicted_stale = [e["entry"] for e in evictions(run) if e["stale"]]
    assert len(stale) == 3 and sorted(stale) == sorted(evicted_stale)


# -- planner failures are attempts, not crashes --------------------------------------------------


class ScriptedPlanner:
    """``simulated:exact``, except that it fails as told on some ``(episode, attempt)`` calls."""

    simulated = True

    def __init__(self, failures=None, rewrite=None):
        self.inner = create_planner("simulated:exact")
        self.name = self.inner.name
        self.failures = failures or {}
        self.rewrite = rewrite

    async def plan(self, context):
        failure = self.failures.get((context.episode, context.attempt))
        if failure is not None:
            raise failure
        plan = await self.inner.plan(context)
        if self.rewrite is not None and context.episode >= 1:
            return dataclasses.replace(plan, request=self.rewrite(context, dict(plan.request)))
        return plan

    async def aclose(self):
        return None


def unusable(detail, raw):
    error = PlannerResponseError(detail)
    error.raw = raw
    return error


def scripted(**kwargs):
    planner = ScriptedPlanner(**kwargs)
    return lambda spec: planner


def control_run(tmp_path, **kwargs):
    spec = RunSpec(load_scenario("payments-control"), "simulated:exact", Arm("row"), 0)
    return asyncio.run(run_one(spec, tmp_path, planner_factory=scripted(**kwargs)))


def test_an_unusable_reply_is_a_failed_attempt_recorded_with_its_raw_text(tmp_path):
    meta = control_run(
        tmp_path, failures={(3, 1): unusable("reply is not JSON", "Sure! Here is the body.")}
    )

    (run,) = read_runs(tmp_path)
    failed = [a for a in run.of("attempt") if a.get("planner_error")]
    assert [(a["episode"], a["attempt"], a["status"], a["request"]) for a in failed] == [
        (3, 1, None, None)
    ]
    assert failed[0]["planner_error"] == {
        "kind": "response",
        "detail": "reply is not JSON",
        "raw": "Sure! Here is the body.",
    }
    episode = next(e for e in run.of("episode") if e["episode"] == 3)
    assert episode["completed"] and not episode["first_try"] and episode["planner_errors"] == 1
    assert meta.completed and meta.completed_episodes == 36


def test_planner_failures_count_against_max_attempts(tmp_path):
    failures = {(2, n): unusable("reply was cut off", '{"customer": "cus_') for n in range(1, 6)}
    failures[8, 1] = PlannerCallError("timed out after 4 retries")  # a no-constraint episode
    control_run(tmp_path, failures=failures)

    (run,) = read_runs(tmp_path)
    second, eighth = (next(e for e in run.of("episode") if e["episode"] == n) for n in (2, 8))
    assert (second["attempts"], second["completed"], second["planner_errors"]) == (5, False, 5)
    assert (eighth["attempts"], eighth["completed"], eighth["planner_errors"]) == (2, True, 1)
    assert run_metrics(run).completed_episodes == 35


def test_a_planner_that_fails_every_call_stops_the_run_and_its_metadata_says_why(tmp_path):
    failures = {(4, n): PlannerCallError("cannot reach 127.0.0.1:9") for n in range(1, 6)}
    with pytest.raises(PlannerUnavailable, match="5 calls in a row: cannot reach"):
        control_run(tmp_path, failures=failures)

    (meta_path,) = (tmp_path / "runs").rglob("*.meta.json")
    meta = json.loads(meta_path.read_text())
    assert meta["completed"] is False and meta["completed_episodes"] == 3
    assert "cannot reach 127.0.0.1:9" in meta["error"]
    assert read_runs(tmp_path) == []


def test_a_planner_that_cannot_be_built_is_one_clear_error(tmp_path):
    spec = RunSpec(load_scenario("payments-control"), "simulated:nonesuch", Arm("row"), 0)
    with pytest.raises(PlannerUnavailable, match="cannot build planner simulated:nonesuch"):
        asyncio.run(run_one(spec, tmp_path))


def test_planner_options_reach_the_factory_and_are_recorded_with_secrets_masked(tmp_path):
    built = []

    def factory(spec, **options):
        built.append(options)
        return create_planner(spec)

    spec = RunSpec(load_scenario("payments-control"), "simulated:exact", Arm("row"), 0)
    meta = asyncio.run(
        run_one(
            spec,
            tmp_path,
            planner_factory=factory,
            planner_options={"timeout": "600", "api_key": "sk-123"},
        )
    )

    assert built == [{"timeout": "600", "api_key": "sk-123"}]
    assert meta.extra["planner_options"] == {"api_key": "***", "timeout": "600"}


def test_the_retries_a_planner_reports_are_recorded(tmp_path):
    class Retrying(ScriptedPlanner):
        async def plan(self, context):
            return _WithRetries(await super().plan(context), 2)

    planner = Retrying()
    spec = RunSpec(load_scenario("payments-control"), "simulated:exact", Arm("row"), 0)
    asyncio.run(run_one(spec, tmp_path, planner_factory=lambda _spec: planner))

    (run,) = read_runs(tmp_path)
    assert {a["planner_retries"] for a in run.of("attempt")} == {2}
    assert sum(e["planner_retries"] for e in run.of("episode")) == 2 * run_metrics(run).attempts


class _WithRetries:
    """A plan as an adapter that retried reports it: the plan's fields plus ``retries``."""

    def __init__(self, plan, retries):
        self._plan = plan
        self.retries = retries

    def __getattr__(self, name):
        return getattr(self._plan, name)


# -- honest scoring ------------------------------------------------------------------------------


def test_every_completed_episode_of_the_exact_planner_is_faithful(drifted):
    for run in drifted.values():
        completed = [e for e in run.of("episode") if e["completed"]]
        assert completed and all(e["faithful"] for e in completed)
        assert all(e["unfaithful_fields"] == [] for e in completed)


def test_an_accepted_request_for_another_plan_is_completed_but_unfaithful(tmp_path):
    def cheapest_plan(context, request):
        if context.task_fields["plan"] == "plan_partner_growth":
            request["plan"] = "plan_starter_monthly"
        return request

    control_run(tmp_path, rewrite=cheapest_plan)

    (run,) = read_runs(tmp_path)
    governed = [e for e in run.of("episode") if e["klass"] == "governed"]
    assert governed and all(e["completed"] and e["first_try"] for e in governed)
    assert all(e["faithful"] is False for e in governed)
    assert {tuple(e["unfaithful_fields"]) for e in governed} == {("plan",)}
