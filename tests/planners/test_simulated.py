"""Simulated profiles: what each applies from memory and feedback, paraphrase, determinism."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from invalidation_contracts.client.prompting import L2_SENTENCE
from invalidation_contracts.planners import (
    PRESETS,
    Attempt,
    PlannerConfigError,
    PlanningContext,
    SimulatedPlanner,
    SimulatedProfile,
    estimate_tokens,
    render_prompt,
)
from invalidation_contracts.planners.simulated import paraphrased_key, simulate
from invalidation_contracts.protocol import Action, Suggestion

BASE = "You plan request bodies."
WITH_L2 = f"{BASE} {L2_SENTENCE}"
TASK = {"plan": "enterprise_annual", "flour": "wheat_flour", "token": "tok_card"}

PROMO = Suggestion(type="ADD_PROMO", parameters={"promo_code": "P-1"}, action=Action.ADD_FIELD)
FLOUR = Suggestion(type="USE_RICE", parameters={"flour": "rice_flour"}, action=Action.REWRITE_VALUE)
TOKEN = Suggestion(
    type="USE_SEPA", parameters={"token": "tok_sepa"}, action=Action.CONDITIONAL_REWRITE
)
REGION = Suggestion(
    type="ADD_REGION",
    parameters={"data_region": "eu", "residency_attested": True},
    action=Action.ADD_FIELD,
)


def context(
    *,
    memory: tuple[Suggestion, ...] = (),
    attempts: tuple[Attempt, ...] = (),
    system_prompt: str = WITH_L2,
    seed: int = 0,
    episode: int = 0,
) -> PlanningContext:
    return PlanningContext(
        system_prompt=system_prompt,
        task="Subscribe, bake and pay.",
        task_fields=dict(TASK),
        request_schema={"type": "object"},
        memory_block="\n".join(f"- {s.type}: {json.dumps(s.parameters)}" for s in memory),
        memory=memory,
        attempts=attempts,
        seed=seed,
        episode=episode,
        attempt=len(attempts) + 1,
    )


def rejected(request: dict, *suggestions: Suggestion) -> Attempt:
    body = {
        "type": "urn:invalidation-contracts:problem:policy-violation",
        "title": "Policy violation",
        "status": 422,
        "success": False,
        "recovery_feedback": {"suggestions": [s.to_wire() for s in suggestions]},
    }
    return Attempt(request=request, status=422, response=body)


def carries(request: dict, fix: Suggestion) -> bool:
    return all(request.get(k) == v for k, v in fix.parameters.items())


def first_try_rate(profile: SimulatedProfile, fix: Suggestion, episodes: int = 400, **kw) -> float:
    hits = sum(
        carries(simulate(profile, context(memory=(fix,), episode=e, **kw)).request, fix)
        for e in range(episodes)
    )
    return hits / episodes


def run_episode(profile: SimulatedProfile, needed: Suggestion, episode: int, max_attempts: int = 5):
    """Reject until the request carries ``needed``; return the attempt that did (None: never)."""
    attempts: tuple[Attempt, ...] = ()
    for number in range(1, max_attempts + 1):
        plan = simulate(profile, context(attempts=attempts, episode=episode, system_prompt=BASE))
        if carries(plan.request, needed):
            return number
        attempts += (rejected(plan.request, needed),)
    return None


def test_exact_applies_every_cached_fix_on_the_first_attempt():
    plan = simulate(PRESETS["exact"], context(memory=(PROMO, FLOUR, TOKEN)))
    assert plan.request == {
        "plan": "enterprise_annual",
        "flour": "rice_flour",
        "token": "tok_sepa",
        "promo_code": "P-1",
    }


def test_exact_applies_every_suggestion_of_the_latest_response():
    attempt = rejected(dict(TASK), PROMO, FLOUR)
    plan = simulate(PRESETS["exact"], context(attempts=(attempt,)))
    assert carries(plan.request, PROMO) and carries(plan.request, FLOUR)


def test_later_attempt_keeps_what_the_previous_attempt_sent():
    earlier = {**TASK, "promo_code": "P-1"}
    plan = simulate(PRESETS["exact"], context(attempts=(rejected(earlier, FLOUR),)))
    assert plan.request == {**earlier, "flour": "rice_flour"}


def test_prose_only_response_gives_nothing_to_act_on():
    earlier = {**TASK, "promo_code": "P-1"}
    prose = Attempt(request=earlier, status=422, response={"detail": "add the promo code P-2"})
    plan = simulate(PRESETS["exact"], context(attempts=(prose,)))
    assert plan.request == earlier
    assert "no-structured-feedback" in plan.notes


def test_conservative_refuses_cached_add_field_fixes_at_its_rate():
    profile = PRESETS["conservative"]
    assert abs(first_try_rate(profile, PROMO) - profile.memory_add_field_rate) < 0.06


def test_conservative_applies_cached_rewrites():
    profile = PRESETS["conservative"]
    assert first_try_rate(profile, FLOUR) == 1.0
    assert first_try_rate(profile, TOKEN) == 1.0


def test_add_field_rate_is_a_parameter():
    profile = PRESETS["conservative"].with_overrides({"memory_add_field_rate": 0.5})
    assert abs(first_try_rate(profile, PROMO) - 0.5) < 0.08


def test_conditional_rewrite_is_governed_by_the_rewrite_rate():
    profile = SimulatedProfile(memory_rewrite_rate=0.0)
    assert first_try_rate(profile, TOKEN, episodes=50) == 0.0
    assert first_try_rate(profile, PROMO, episodes=50) == 1.0


def test_conservative_complies_with_repeated_feedback_by_comply_after():
    profile = PRESETS["conservative"]
    winners = [run_episode(profile, PROMO, episode) for episode in range(200)]
    assert all(w is not None and w <= profile.comply_after + 1 for w in winners)
    assert any(w > 2 for w in winners), "a conservative planner pays extra retries on add_field"


def test_opt_out_ignores_the_memory_block():
    plan = simulate(PRESETS["opt-out"], context(memory=(PROMO, FLOUR)))
    assert plan.request == TASK
    assert "memory-ignored" in plan.notes


def test_opt_out_rederives_from_feedback_in_one_retry():
    assert {run_episode(PRESETS["opt-out"], PROMO, e) for e in range(50)} == {2}


def test_paraphrase_damages_applied_fields_without_the_l2_sentence():
    plans = [
        simulate(PRESETS["paraphrase"], context(memory=(REGION,), episode=e, system_prompt=BASE))
        for e in range(200)
    ]
    damaged = [p for p in plans if not carries(p.request, REGION)]
    assert 0.4 < len(damaged) / len(plans) < 0.8
    renamed = [
        p
        for p in damaged
        if {paraphrased_key("data_region"), paraphrased_key("residency_attested")} & set(p.request)
    ]
    assert renamed and len(renamed) < len(damaged), "both renames and drops occur"


def test_paraphrase_applies_verbatim_with_the_l2_sentence():
    assert first_try_rate(PRESETS["paraphrase"], REGION, episodes=200, system_prompt=WITH_L2) == 1.0


def test_l2_sentence_is_recognised_whatever_its_case_and_spacing():
    prompt = f"{BASE}\n{L2_SENTENCE.upper().replace(' ', '  ')}"
    assert first_try_rate(PRESETS["paraphrase"], REGION, episodes=100, system_prompt=prompt) == 1.0


def test_paraphrase_planner_completes_by_comply_after():
    profile = PRESETS["paraphrase"]
    winners = [run_episode(profile, REGION, e) for e in range(200)]
    assert all(w is not None and w <= profile.comply_after + 1 for w in winners)


def test_verbatim_repair_removes_the_paraphrased_field():
    paraphrased = {**TASK, paraphrased_key("promo_code"): "P-1"}
    attempts = tuple(
        rejected(paraphrased, PROMO) for _ in range(PRESETS["paraphrase"].comply_after)
    )
    plan = simulate(PRESETS["paraphrase"], context(attempts=attempts, system_prompt=BASE))
    assert plan.request == {**TASK, "promo_code": "P-1"}


def test_equal_seeds_give_equal_plans():
    profile = PRESETS["conservative"]
    for episode in range(50):
        a = simulate(profile, context(memory=(PROMO,), seed=7, episode=episode))
        b = simulate(profile, context(memory=(PROMO,), seed=7, episode=episode))
        assert a == b


def test_different_seeds_give_different_draws():
    profile = PRESETS["conservative"]

    def outcomes(seed: int) -> list[bool]:
        return [
            carries(
                simulate(profile, context(memory=(PROMO,), seed=seed, episode=e)).request, PROMO
            )
            for e in range(200)
        ]

    assert outcomes(1) != outcomes(2)


def test_draws_do_not_depend_on_the_interpreter_hash_seed():
    script = (
        "from invalidation_contracts.planners.simulated import PRESETS, simulate\n"
        "from invalidation_contracts.planners import PlanningContext\n"
        "from invalidation_contracts.protocol import Action, Suggestion\n"
        "fix = Suggestion(type='ADD_PROMO', parameters={'promo_code': 'P-1'},"
        " action=Action.ADD_FIELD)\n"
        "contexts = [PlanningContext('s', 't', {}, {}, memory=(fix,), episode=e)"
        " for e in range(64)]\n"
        "print([len(simulate(PRESETS['conservative'], c).request) for c in contexts])\n"
    )
    runs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for hash_seed in ("1", "2")
    }
    assert len(runs) == 1


def test_simulated_plans_are_labelled_and_usage_is_estimated_from_the_rendered_prompt():
    ctx = context(memory=(PROMO,))
    planner = SimulatedPlanner(PRESETS["exact"])
    plan = asyncio.run(planner.plan(ctx))
    prompt = render_prompt(ctx)
    assert planner.simulated is True
    assert "simulated" in plan.notes
    assert plan.usage.estimated is True
    assert plan.usage.input_tokens == estimate_tokens(prompt.system) + estimate_tokens(prompt.user)
    assert plan.usage.output_tokens == estimate_tokens(plan.raw)
    assert json.loads(plan.raw) == plan.request


def test_planning_does_not_mutate_the_context():
    ctx = context(memory=(PROMO,), attempts=(rejected(dict(TASK), FLOUR),))
    before = (dict(ctx.task_fields), dict(ctx.attempts[0].request))
    simulate(PRESETS["exact"], ctx)
    assert (dict(ctx.task_fields), dict(ctx.attempts[0].request)) == before


@pytest.mark.parametrize(
    "field", ["memory_add_field_rate", "paraphrase_rate", "feedback_rewrite_rate"]
)
@pytest.mark.parametrize("value", [-0.1, 1.5])
def test_rates_outside_the_unit_interval_are_rejected(field, value):
    with pytest.raises(PlannerConfigError, match=field):
        SimulatedProfile(**{field: value})


def test_comply_after_below_one_is_rejected():
    with pytest.raises(PlannerConfigError, match="comply_after"):
        SimulatedProfile(comply_after=0)
