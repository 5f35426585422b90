"""A real model end to end: llama.cpp serving Qwen2.5-Coder-0.5B, driven through the shipped CLI.

Bounded for two CPU cores: one preflight round, then a three-episode stream on one arm, twice with
the same seed. Those three are studies (``pytest -m study``, CI's second step); the killed-server
test is the smoke every default run does. Marked ``real_model``: under ``CI=true`` a skip (model
unobtainable) is a failure.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path

import pytest

from invalidation_contracts.cli import main
from invalidation_contracts.planners import PlannerUnavailableError, PlanningContext
from invalidation_contracts.planners.local.planner import LocalPlanner
from invalidation_contracts.planners.local.server import POOL

from .conftest import SHORT_SCENARIO, SPEC

pytestmark = [pytest.mark.real_model, pytest.mark.timeout(1500)]


def requests_sent(out: Path) -> list[dict]:
    """The request of every attempt of every run under ``out``, in order."""
    sent = []
    for path in sorted(out.rglob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            if record["record"] == "attempt":
                sent.append(record["request"])
    return sent


def run_short(scenario: Path, out: Path) -> int:
    """The short stream, arm ``row``, seed 0, one run at a time, through the shipped CLI."""
    return main(
        ["run", "--scenario", str(scenario), "--planner", SPEC, "--arm", "row", "--seeds", "0"]
        + ["--concurrency", "1", "--out", str(out), "--no-progress", "--json"]
    )


@pytest.fixture(scope="module")
def first_run(local_model, tmp_path_factory) -> tuple[int, Path, Path]:
    """One run of the short stream: (exit status, scenario file, results directory)."""
    root = tmp_path_factory.mktemp("short")
    scenario = root / "payments-short.toml"
    scenario.write_text(SHORT_SCENARIO, encoding="utf-8")
    return run_short(scenario, root / "first"), scenario, root / "first"


@pytest.mark.study
def test_preflight_round_answers_every_probe_with_a_request_body(local_model, capsys):
    code = main(["preflight", "--planner", SPEC, "--concurrency", "2", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    assert report["served_model"] == "qwen2.5-coder-0.5b"
    assert len(report["probes"]) == 9
    assert [p["error"] for p in report["probes"]] == [None] * 9
    assert report["usage"]["label"] == "reported by server"
    assert POOL.running() == []


@pytest.mark.study
def test_short_scenario_runs_to_the_end_and_stops_its_server(first_run):
    code, _, out = first_run
    assert code == 0
    assert len(list(out.rglob("*.meta.json"))) == 1
    assert requests_sent(out)
    assert POOL.running() == []


@pytest.mark.study
def test_the_same_seed_sends_the_same_requests(first_run):
    _, scenario, first = first_run
    second = first.with_name("second")
    assert run_short(scenario, second) == 0
    assert requests_sent(second) == requests_sent(first)


def test_a_server_killed_mid_run_is_named_as_the_cause(local_model):
    context = PlanningContext(
        system_prompt="You plan request bodies.",
        task="Order 2 boxes of tea for account acc_9.",
        task_fields={"account": "acc_9", "item": "tea", "quantity": 2},
        request_schema={
            "type": "object",
            "properties": {
                "account": {"type": "string"},
                "item": {"type": "string"},
                "quantity": {"type": "integer"},
            },
            "required": ["account", "item", "quantity"],
        },
    )

    async def scenario() -> str:
        planner = LocalPlanner("qwen2.5-coder-0.5b", max_retries=0, max_tokens=64)
        try:
            first = await planner.plan(context)
            assert first.request["account"] == "acc_9"
            [server] = POOL.running()
            os.kill(server.process.pid, signal.SIGKILL)
            server.process.wait()
            with pytest.raises(PlannerUnavailableError) as caught:
                await planner.plan(context)
            return str(caught.value)
        finally:
            await planner.aclose()

    message = asyncio.run(scenario())
    assert "exited with status -9 mid-run" in message
    assert POOL.running() == []
