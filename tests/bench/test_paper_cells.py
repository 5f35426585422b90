"""The paper's model-independent cells, reproduced by ``simulated:exact`` on the shipped streams.

``simulated:exact`` applies every fix it is shown, as the paper's compliant models do, so these are
the counts any fully compliant client must produce: validity cells (precision, evictions,
restamps) and the first-try counts the stream's design fixes. Each test names the paper's cell it
pins; docs/researchers.md lists the cells that are not reproduced and why.
"""

from __future__ import annotations

import asyncio

import pytest

from invalidation_contracts.bench.arms import LADDER, RULES_ARMS
from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.grid import Grid, run_grid
from invalidation_contracts.bench.metrics import RunMetrics, score
from invalidation_contracts.bench.scenario import load_scenario

ROTATIONS = ("payments-rotations-1", "payments-rotations-2", "payments-rotations-3")
MEMORY_ARMS = ("naive", "table", "row", "row+consumers", "row+graph")


def _run(root, scenarios, arms) -> dict[tuple[str, str, str], RunMetrics]:
    grid = Grid(
        [load_scenario(s) for s in scenarios],
        ["simulated:exact"],
        list(arms),
        [0],
        rules_arms=list(arms),
    )
    outcome = asyncio.run(run_grid(grid, root, progress=False, concurrency=2))
    assert outcome.failed == []
    return {(m.scenario, m.arm, m.detection): m for m in score(read_runs(root))}


@pytest.fixture(scope="module")
def cells(tmp_path_factory) -> dict[tuple[str, str, str], RunMetrics]:
    root = tmp_path_factory.mktemp("paper-cells")
    table_streams = ("payments-drifted", "payments-control", "payments-drifted-l1", *ROTATIONS)
    out = _run(root / "tables", table_streams, LADDER)
    out.update(_run(root / "rules", ("rules-drifted",), RULES_ARMS))
    return out


def drifted(cells, arm: str) -> RunMetrics:
    return cells[("payments-drifted", arm, "eager")]


# --- Table 3 / Table 6: the A-ladder on the drifted stream ---------------------------------------


def test_a0_pays_one_retry_per_constrained_episode_27(cells):
    assert drifted(cells, "none").retries == 27


def test_a2d_retries_7_and_a1_that_learns_matches_it(cells):
    # haiku and gpt-5-mini read 7 at A2D; gpt-5.4-mini reads 7 at A1 as well
    assert drifted(cells, "row").retries == drifted(cells, "naive").retries == 7


def test_compliance_100_over_nine_eligible_episodes_at_every_memory_arm(cells):
    for arm in MEMORY_ARMS:
        m = drifted(cells, arm)
        assert (m.compliance, m.compliance_eligible) == (1.0, 9), arm


def test_eviction_precision_014_at_a2_where_the_paper_reads_025_and_100_at_a2d(cells):
    # the paper's 0.25 is 1 of 4; the sound funding scope keeps one funding entry per plan, and
    # A2 evicts all four at the bump (1 of 7): docs/researchers.md, "The funding fix's scope"
    table, row = drifted(cells, "table"), drifted(cells, "row")
    assert (table.evictions, table.evictions_correct, table.precision) == (7, 1, 1 / 7)
    assert (row.evictions, row.evictions_correct, row.precision) == (1, 1, 1.0)


def test_the_rotation_evicts_one_entry_and_the_benign_bump_none_with_four_restamps(cells):
    # the paper reads one restamp at the bump: one funding entry per debit token, ours one per plan
    rotation, bump = drifted(cells, "row").drift
    assert (rotation.evictions, rotation.restamps) == (1, 2)
    assert (bump.evictions, bump.restamps) == (0, 4)
    assert drifted(cells, "row").restamps == 6


def test_post_drift_funding_667_0_667_at_a1_a2_a2d(cells):
    funding = [drifted(cells, a).post_drift_funding for a in ("naive", "table", "row")]
    assert funding == [pytest.approx(2 / 3), 0.0, pytest.approx(2 / 3)]
    assert drifted(cells, "none").post_drift_funding == 0.0


# --- Table 4 and Table 7 -------------------------------------------------------------------------


def test_the_negative_control_holds_833_at_every_memory_arm_and_0_at_a0(cells):
    for arm in MEMORY_ARMS:
        assert drifted(cells, arm).first_try_by_class["negative_control"] == pytest.approx(5 / 6)
    assert drifted(cells, "none").first_try_by_class["negative_control"] == 0.0


def test_the_no_constraint_class_is_100_at_every_arm_including_a0(cells):
    for arm in ("none", *MEMORY_ARMS):
        assert drifted(cells, arm).first_try_by_class["no_constraint"] == 1.0


def test_add_a_field_90_at_a1_and_a2d_and_the_a0_zero_floor(cells):
    assert drifted(cells, "row").first_try_by_class["governed"] == pytest.approx(0.9)
    assert drifted(cells, "naive").first_try_by_class["governed"] == pytest.approx(0.9)
    assert drifted(cells, "none").eligible_first_try == 0.0


def test_conditional_rewrite_pre_50_and_post_667_at_a2d(cells):
    row = drifted(cells, "row")
    assert (row.pre_drift_funding_episodes, row.post_drift_funding_episodes) == (8, 3)
    assert (row.pre_drift_funding, row.post_drift_funding) == (0.5, pytest.approx(2 / 3))


# --- the control stream and the drift-rate streams (Figure 5) ------------------------------------


def test_the_control_stream_has_11_eligible_governed_episodes(cells):
    for arm in MEMORY_ARMS:
        m = cells[("payments-control", arm, "eager")]
        assert (m.compliance_eligible, m.compliance) == (11, 1.0)


@pytest.mark.parametrize("scenario, retries", list(zip(ROTATIONS, (6, 7, 8), strict=True)))
def test_a2d_holds_100_compliance_and_retries_near_7_at_every_rotation_count(
    cells, scenario, retries
):
    m = cells[(scenario, "row", "eager")]
    assert (m.compliance, m.retries) == (1.0, retries)


@pytest.mark.parametrize("scenario", ROTATIONS)
@pytest.mark.parametrize("arm", ("row", "row+consumers"))
def test_row_arms_evict_only_stale_fixes_on_every_rotation_stream(cells, scenario, arm):
    m = cells[(scenario, arm, "eager")]
    assert (m.precision, m.evictions_unlabelled) == (1.0, 0)
    assert m.evictions_correct == len(m.drift)  # one stale code per rotation


@pytest.mark.parametrize("scenario", ROTATIONS)
def test_the_graph_arm_also_evicts_the_rotated_plans_funding_fix(cells, scenario):
    # the rotated code's row reaches the plan's funding_type_policy row (settles_under), which the
    # plan's own funding fix reads: one wrong eviction per rotation (the paper's 1.00 was one
    # funding entry learned on a plan no rotation reaches)
    m = cells[(scenario, "row+graph", "eager")]
    assert (m.precision, m.evictions_unlabelled) == (0.5, 0)
    assert m.evictions_correct == len(m.drift) == m.evictions - len(m.drift)


# --- Table 2: A2D at the paper's L1 + diff -------------------------------------------------------


def test_a2d_keeps_row_precision_at_the_papers_level_1(cells):
    m = cells[("payments-drifted-l1", "row", "eager")]
    assert (m.level, m.evictions, m.precision, m.compliance) == (1, 1, 1.0, 1.0)


# --- Table 5: the rules stream -------------------------------------------------------------------


def test_lazy_and_stamp_plus_vectors_read_28_first_try_and_8_retries(cells):
    lazy = cells[("rules-drifted", "row+consumers", "lazy")]
    vectors = cells[("rules-drifted", "rules-stamp+vectors", "eager")]
    assert (lazy.first_try, lazy.retries) == (vectors.first_try, vectors.retries) == (28, 8)


def test_a_lazy_arm_alerts_at_13_and_25_and_stamp_readers_at_12_and_24(cells):
    def alerts(arm, detection):
        return [w.alert for w in cells[("rules-drifted", arm, detection)].drift]

    assert alerts("row+consumers", "lazy") == [13, 25]
    for arm in ("rules-stamp", "rules-stamp+vectors", "rules-oracle"):
        assert alerts(arm, "eager") == [12, 24]
