"""Denial of savings: a server that bumps versions on every response must not force re-derivation.

Attack (paper §6.5): spurious bumps on every response turn the memory's token saving into a
surcharge. Defences: touches restamp (row-level arms ask the changes feed, which says no row
changed), and a client-side bound on stamp-driven evictions per table turns an eviction storm into
revalidation through ``/contract/changes`` for the arms that evict on stamps alone.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from trust_helpers import (
    CATALOG,
    GROWTH,
    OPERATION,
    ORIGIN,
    PLAIN,
    STARTER,
    TOKEN,
    ForgingTransport,
    Session,
    acme_app,
    asgi,
    problem_json,
    rotate_growth_code,
    touch_version,
    touching_app,
)

from invalidation_contracts.bench.arms import Arm
from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.metrics import run_metrics
from invalidation_contracts.bench.runner import RunSpec, run_one
from invalidation_contracts.bench.scenario import load_scenario
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.events import Evicted, Ignored, Restamped
from invalidation_contracts.client.memory import FixMemory
from invalidation_contracts.client.trust import TrustPolicy

ARMS = ("none", "table", "row")


def savings(root: Path, app_factory) -> dict[str, object]:
    scenario = load_scenario("payments-drifted")
    for arm in ARMS:
        asyncio.run(
            run_one(
                RunSpec(scenario, "simulated:exact", Arm(arm), 0), root, app_factory=app_factory
            )
        )
    metrics = {m.arm: m for m in map(run_metrics, read_runs(root))}
    baseline = metrics["none"].tokens
    return {arm: (1 - metrics[arm].tokens / baseline, metrics[arm]) for arm in ARMS}


@pytest.fixture(scope="module")
def payments(tmp_path_factory):
    """The payments stream under each arm, against the honest server and the bumping one."""
    honest = savings(tmp_path_factory.mktemp("honest"), None)
    hostile = savings(tmp_path_factory.mktemp("hostile"), touching_app)
    return honest, hostile


def test_every_run_completes_its_stream_against_either_server(payments):
    for results in payments:
        for _, m in results.values():
            assert m.completed_episodes == m.episodes == 36


def test_the_row_arm_keeps_its_token_saving_against_a_server_that_bumps_on_every_request(payments):
    honest, hostile = payments
    honest_saving, honest_row = honest["row"]
    hostile_saving, hostile_row = hostile["row"]

    assert honest_saving > 0.3
    assert hostile_saving == pytest.approx(honest_saving, abs=0.02)
    assert (hostile_row.evictions, hostile_row.evictions_correct) == (
        honest_row.evictions,
        honest_row.evictions_correct,
    )
    assert hostile_row.restamps > 10 * honest_row.restamps


def test_the_table_arm_loses_its_saving_to_the_same_server(payments):
    honest, hostile = payments
    honest_saving, _ = honest["table"]
    hostile_saving, hostile_table = hostile["table"]

    assert honest_saving > 0.3
    assert hostile_saving < 0.05
    assert hostile_table.evictions_wrong > 10


# -- the client-side bound -------------------------------------------------------------------


def episode(session: Session, draft: dict) -> int:
    """One episode of an exact planner: inject what memory serves, apply feedback, retry once."""
    request = dict(draft)
    for entry in session.memory.lookup(ORIGIN, draft, operation=OPERATION).entries:
        request.update(entry.suggestion.parameters)
    response = session.post(request)
    if response.status_code == 200:
        return 1
    for suggestion in response.json()["recovery_feedback"]["suggestions"]:
        request.update(suggestion["parameters"])
    assert session.post(request).status_code == 200
    return 2


def bounded(clock=None, strategy="table", limit=2) -> FixMemory:
    policy = TrustPolicy(max_evictions_per_table=limit, window_s=3600)
    return FixMemory(strategy, trust=policy, **({"clock": clock} if clock else {}))


def storm_app():
    return touching_app(CATALOG.domain, registry=CATALOG.domain.registry(), admin_token=TOKEN)


def test_without_the_bound_a_stamp_storm_forces_re_derivation_every_episode():
    session = Session(FixMemory("table"), asgi(storm_app()))

    attempts = [episode(session, GROWTH) for _ in range(8)]

    assert attempts == [2] * 8


def test_the_bound_turns_the_storm_into_revalidation_after_its_allowance():
    session = Session(bounded(), asgi(storm_app()))

    attempts = [episode(session, GROWTH) for _ in range(8)]

    assert attempts == [2, 2, 2, 1, 1, 1, 1, 1]
    assert [e.reason for e in session.of(Evicted)] == [EvictionReason.TABLE_CHANGED] * 2
    assert len(session.of(Restamped)) >= 5
    assert any("revalidating through /contract/changes" in i.detail for i in session.of(Ignored))


def exhaust_bound(session: Session, app) -> None:
    """Spend the growth fix's tables' allowance: two stamp-driven evictions on each."""
    registry = app.state.registry
    for _ in range(2):
        episode(session, GROWTH)
        for name, snapshot in registry.state.tables.items():
            registry.reload(name, snapshot.plain_rows(), touch_version(snapshot.version))
        session.post(PLAIN)


def test_past_the_bound_a_real_row_change_still_evicts_and_the_rest_is_restamped():
    app = acme_app()
    session = Session(bounded(), asgi(app))
    exhaust_bound(session, app)
    episode(session, GROWTH)
    episode(session, STARTER)
    rotate_growth_code(app)
    session.post(PLAIN)

    (evicted,) = session.of(Evicted)[2:]
    assert evicted.key.type == "ADD_REQUIRED_PROMO_CODE" and evicted.key.scope_fields == {
        "plan": "plan_partner_growth"
    }
    assert evicted.reason is EvictionReason.ROW_CHANGED
    (kept,) = session.memory.entries(ORIGIN)
    assert kept.key.scope_fields == {"plan": "plan_partner_starter"}
    assert list(session.memory.lookup(ORIGIN, STARTER, operation=OPERATION).entries) == [kept]


def test_past_the_bound_without_a_changes_feed_the_memory_falls_back_to_evicting():
    app = acme_app()

    def no_feed(request: httpx.Request):
        if request.url.path == "/contract/changes":
            return problem_json(404, {"title": "not served", "status": 404})
        return None

    session = Session(bounded(), ForgingTransport(asgi(app), no_feed))
    exhaust_bound(session, app)
    episode(session, GROWTH)
    registry = app.state.registry
    rows = registry.state.tables["active_csm_codes"].plain_rows()
    registry.reload(
        "active_csm_codes", rows, touch_version(registry.state.tables["active_csm_codes"].version)
    )
    session.post(PLAIN)

    assert session.memory.entries(ORIGIN) == []
    assert "no changes feed is available" in session.of(Evicted)[-1].detail


def test_the_bound_is_a_rate_stamp_evictions_resume_once_the_window_passes(clock):
    session = Session(bounded(clock), asgi(storm_app()))
    attempts = [episode(session, GROWTH) for _ in range(4)]
    clock.advance(3601)
    attempts += [episode(session, GROWTH) for _ in range(4)]

    assert attempts == [2, 2, 2, 1] + [1, 2, 2, 1]


def test_the_bound_must_allow_at_least_one_eviction():
    with pytest.raises(ValueError, match="at least 1"):
        TrustPolicy(max_evictions_per_table=0)
