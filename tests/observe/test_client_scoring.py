"""Client scoring from requests alone against the harness's oracle figures (paper §6.5).

The harness runs its shipped streams against an instrumented provider; the provider's per-client
figures, folded from the requests it saw, must equal the figures the harness computes from its
own records and oracle, cell for cell (one cell per scenario, planner profile and ladder arm).
"""

from __future__ import annotations

import asyncio

import pytest
from opentelemetry.metrics import NoOpMeterProvider

from invalidation_contracts.bench.arms import LADDER
from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.metrics import run_metrics
from invalidation_contracts.bench.runner import RunSpec, run_one
from invalidation_contracts.bench.scenario import load_scenario
from invalidation_contracts.observe import instrument
from invalidation_contracts.observe.scoring import ClientScores
from invalidation_contracts.server.http.app import create_app

#: Profiles that send what they were shown: every stale injection reaches the wire.
SENDS_WHAT_IT_IS_SHOWN = ("exact", "paraphrase")
#: Profiles that may ignore an injected fix (opt-out never reads the memory; conservative applies
#: a cached add-field fix one time in ten): an injection the model ignored never reaches the
#: provider, so the provider's count is the stale values actually sent.
MAY_IGNORE = ("conservative", "opt-out")


def score(scenario_name: str, profile: str, tmp_path):
    """Run every ladder arm; yield (arm, harness metrics, the provider's one client's figures)."""
    scenario = load_scenario(scenario_name)
    for arm in LADDER:
        scores = ClientScores(max_attempts=scenario.max_attempts)

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

        root = tmp_path / arm.strategy.replace("+", "-")
        spec = RunSpec(scenario, f"simulated:{profile}", arm, 0)
        asyncio.run(run_one(spec, root, app_factory=factory))
        (run,) = read_runs(root)
        (client,) = scores.snapshot().values()
        yield arm.strategy, run_metrics(run), client


@pytest.mark.parametrize(
    ("scenario", "profile"),
    [
        *(("payments-drifted", p) for p in (*SENDS_WHAT_IT_IS_SHOWN, *MAY_IGNORE)),
        ("recipes-drifted", "exact"),
    ],
)
def test_the_provider_scores_equal_the_harness_oracle_cell_for_cell(scenario, profile, tmp_path):
    cells = []
    for arm, harness, provider in score(scenario, profile, tmp_path):
        cells.append(
            (
                arm,
                (provider.episodes, provider.first_try, provider.stale_injections),
                (harness.episodes_recorded, harness.first_try, harness.stale_injections),
            )
        )
    for arm, mine, oracle in cells:
        assert mine[:2] == oracle[:2], f"{scenario} {profile} {arm}: episodes, first-try"
        if profile in SENDS_WHAT_IT_IS_SHOWN:
            assert mine[2] == oracle[2], f"{scenario} {profile} {arm}: stale injections"
        else:
            assert mine[2] <= oracle[2], f"{scenario} {profile} {arm}: stale values sent"
    assert any(oracle[2] for _, _, oracle in cells)  # the stream does inject stale fixes
