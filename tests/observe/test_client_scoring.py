"""Client scoring from requests alone against the harness's oracle figures (paper §6.5).

The harness runs every shipped stream under every simulated profile (the paper grid, seed 0;
a grid-sized run, so marked ``study``: ``pytest -m study``, which CI runs) against an instrumented
provider; the provider's per-client figures, folded from the requests it saw, must equal the
figures the harness computes from its own records and oracle, cell for cell (one cell per
scenario, planner profile and arm): episodes, first tries, and stale values sent. The default
suite checks the same on payments-drifted under every profile and recipes-drifted under exact.

A provider sees requests, not prompts: its stale count is the harness's *stale values sent*
(``RunMetrics.stale_values_sent``: the fixes a change made stale whose values an opening request
carried), not its *stale injections* (stale fixes shown to the model), which a model may ignore.
"""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.metrics import NoOpMeterProvider

from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.grid import load_grid
from invalidation_contracts.bench.metrics import run_metrics
from invalidation_contracts.bench.runner import run_one
from invalidation_contracts.observe import instrument
from invalidation_contracts.observe.scoring import ClientScores
from invalidation_contracts.server.http.app import create_app

PAPER = load_grid("paper")
CELLS = [(s.name, p) for s in PAPER.scenarios for p in PAPER.planners]
QUICK = [*(c for c in CELLS if c[0] == "payments-drifted"), ("recipes-drifted", "simulated:exact")]
#: Profiles that apply every fix they are shown: each stale injection reaches the wire.
SENDS_WHAT_IT_IS_SHOWN = ("simulated:exact", "simulated:paraphrase")


def score(scenario_name: str, planner: str, root):
    """Run the scenario's arms at seed 0; (arm, harness metrics, the provider's one client)."""
    specs = [s for s in PAPER.specs() if s.scenario.name == scenario_name and s.seed == 0]
    out = []
    for spec in (s for s in specs if s.planner == planner):
        scores = ClientScores(max_attempts=spec.scenario.max_attempts)

        def factory(domain, scores=scores, **options):
            app = create_app(domain, **options)
            instrument(
                app,
                app.state.service,
                prometheus=False,
                meter_provider=NoOpMeterProvider(),
                scores=scores,
            )
            return app

        where = root / spec.key.slug
        asyncio.run(run_one(spec, where, app_factory=factory))
        (run,) = read_runs(where)
        (client,) = scores.snapshot().values()
        out.append((str(spec.arm), run_metrics(run), client))
    return out


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """``score``, each (scenario, planner) run once per module."""
    done: dict[tuple[str, str], list] = {}

    def get(scenario: str, planner: str) -> list:
        if (scenario, planner) not in done:
            done[(scenario, planner)] = score(scenario, planner, tmp_path_factory.mktemp("cells"))
        return done[(scenario, planner)]

    return get


@pytest.mark.parametrize(("scenario", "planner"), QUICK)
def test_the_provider_scores_equal_the_harness_oracle_cell_for_cell(scenario, planner, scored):
    _assert_cell_for_cell(scenario, planner, scored(scenario, planner))


@pytest.mark.study
@pytest.mark.parametrize(("scenario", "planner"), [c for c in CELLS if c not in QUICK])
def test_every_shipped_stream_and_profile_scores_equal_cell_for_cell(scenario, planner, scored):
    _assert_cell_for_cell(scenario, planner, scored(scenario, planner))


def _assert_cell_for_cell(scenario: str, planner: str, cells: list) -> None:
    assert cells
    for arm, harness, provider in cells:
        mine = (provider.episodes, provider.first_try, provider.stale_values_sent)
        oracle = (harness.episodes_recorded, harness.first_try, harness.stale_values_sent)
        assert mine == oracle, f"{scenario} {planner} {arm}: episodes, first tries, stale sent"


@pytest.mark.parametrize("planner", SENDS_WHAT_IT_IS_SHOWN)
def test_a_profile_that_applies_what_it_is_shown_sends_every_stale_injection(planner, scored):
    cells = [(h.stale_values_sent, h.stale_injections) for _, h, _ in scored(*drifted(planner))]
    assert all(sent == shown for sent, shown in cells)
    assert any(shown for _, shown in cells)  # the stream does inject stale fixes


def test_a_model_that_ignores_its_memory_sends_no_stale_value_it_was_shown(scored):
    cells = [(h.stale_values_sent, h.stale_injections) for _, h, _ in scored(*drifted("opt-out"))]
    assert any(shown for _, shown in cells)  # shown stale fixes ...
    assert all(sent == 0 for sent, _ in cells)  # ... and never sent them


def drifted(profile: str) -> tuple[str, str]:
    return ("payments-drifted", profile if ":" in profile else f"simulated:{profile}")
