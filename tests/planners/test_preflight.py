"""The compliance preflight: first-try compliance per action type, served model id, JSON report."""

from __future__ import annotations

import asyncio
import json

import pytest

from invalidation_contracts.client.prompting import L2_SENTENCE
from invalidation_contracts.planners import (
    Plan,
    PlannerResponseError,
    PlanningContext,
    PreflightReport,
    Usage,
    create_planner,
    preflight,
)
from invalidation_contracts.planners.preflight import PROBES, carries_fix
from invalidation_contracts.protocol import Action

ACTIONS = [a.value for a in Action]


def run(spec_or_planner, **kwargs) -> PreflightReport:
    planner = (
        create_planner(spec_or_planner) if isinstance(spec_or_planner, str) else spec_or_planner
    )
    return asyncio.run(preflight(planner, **kwargs))


class EchoTask:
    """A planner that sends the task fields and ignores memory; one reply in three is malformed."""

    name = "test:echo"
    simulated = False
    requested_model = "echo-1"

    def __init__(self) -> None:
        self.contexts: list[PlanningContext] = []

    async def plan(self, context: PlanningContext) -> Plan:
        self.contexts.append(context)
        if context.episode % 3 == 2:
            raise PlannerResponseError("no tool call")
        return Plan(
            dict(context.task_fields), Usage(10, 2, estimated=False), served_model="echo-1-2025"
        )

    async def aclose(self) -> None:
        return None


def test_probes_cover_every_action_type_with_several_tasks():
    for action in Action:
        assert sum(p.action is action for p in PROBES) >= 3


def test_every_probe_fix_is_new_to_its_task():
    assert not any(carries_fix(p.task_fields, p.fix) for p in PROBES)


def test_exact_profile_complies_with_every_action_type():
    report = run("simulated:exact")
    assert [(a.action, a.rate) for a in report.actions] == [(name, 1.0) for name in ACTIONS]


def test_conservative_profile_rarely_adds_fields_but_rewrites():
    report = run("simulated:conservative", rounds=10)
    assert report.rate(Action.ADD_FIELD) < 0.3
    assert report.rate(Action.REWRITE_VALUE) == 1.0
    assert report.rate(Action.CONDITIONAL_REWRITE) == 1.0


def test_opt_out_profile_complies_with_nothing():
    report = run("simulated:opt-out")
    assert all(a.rate == 0.0 for a in report.actions)


def test_l2_sentence_is_in_the_probe_prompt_unless_switched_off():
    assert all(a.rate == 1.0 for a in run("simulated:paraphrase", rounds=3).actions)
    assert any(a.rate < 1.0 for a in run("simulated:paraphrase", rounds=3, l2=False).actions)


def test_injected_count_is_probes_times_rounds():
    report = run("simulated:exact", rounds=2)
    assert [a.injected for a in report.actions] == [
        2 * sum(p.action.value == n for p in PROBES) for n in ACTIONS
    ]


def test_planner_sees_the_fix_in_memory_on_a_first_attempt():
    planner = EchoTask()
    run(planner)
    probe_fixes = {p.fix.type for p in PROBES}
    assert {c.memory[0].type for c in planner.contexts} == probe_fixes
    assert all(
        c.attempts == () and c.memory_block and L2_SENTENCE in c.system_prompt
        for c in planner.contexts
    )


def test_malformed_replies_count_as_errors_not_compliance():
    report = run(EchoTask())
    assert (
        sum(a.errors for a in report.actions) == sum(p.error is not None for p in report.probes) > 0
    )
    assert all(a.compliant == 0 for a in report.actions)


def test_served_and_requested_model_ids_are_recorded():
    report = run(EchoTask())
    assert (report.requested_model, report.served_model, report.served_models) == (
        "echo-1",
        "echo-1-2025",
        ["echo-1-2025"],
    )


def test_report_round_trips_through_json():
    report = run("simulated:conservative", seed=3)
    data = json.loads(json.dumps(report.to_json()))
    assert PreflightReport.model_validate(data) == report
    assert data["simulated"] is True and data["usage"]["estimated"] is True
    assert {a["action"]: a["rate"] for a in data["actions"]} == {
        a.action: a.rate for a in report.actions
    }


def test_equal_seeds_give_equal_reports():
    assert run("simulated:conservative", seed=5, rounds=3) == run(
        "simulated:conservative", seed=5, rounds=3
    )


def test_rounds_below_one_are_rejected():
    with pytest.raises(ValueError, match="rounds"):
        run("simulated:exact", rounds=0)


def test_failed_api_call_propagates_from_the_preflight():
    from invalidation_contracts.planners import PlannerCallError

    class Down(EchoTask):
        async def plan(self, context: PlanningContext) -> Plan:
            raise PlannerCallError("HTTP 503")

    with pytest.raises(PlannerCallError, match="503"):
        run(Down())
