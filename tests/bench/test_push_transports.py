"""Push to the agent, over each transport: on ``payments-drifted``, row arm, the rotated promo code
is evicted before the first lookup after the rotation when the agent hears of changes as they
happen — HTTP with the watch stream (SPEC §8.4), MCP with ``resources/updated`` — and is injected
once (the stream's stale slot) over HTTP without push. ``benchmarks/stale_transports.py`` puts the
three side by side; nothing here is timed."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from invalidation_contracts.bench import channels
from invalidation_contracts.bench.arms import Arm
from invalidation_contracts.bench.artifacts import paths, read_runs
from invalidation_contracts.bench.errors import ServerUnavailable
from invalidation_contracts.bench.metrics import RunMetrics, run_metrics
from invalidation_contracts.bench.runner import RunSpec, run_one
from invalidation_contracts.bench.scenario import load_scenario
from invalidation_contracts.cli import main
from invalidation_contracts.server.http.app import create_app

pytestmark = [pytest.mark.watch, pytest.mark.timeout(600)]

PUSHED = [
    pytest.param({"watch": True}, "AsyncContractTransport (watch stream)", id="http-watch"),
    pytest.param(
        {"transport": "mcp-http", "notifications": True},
        "ContractSession (MCP over streamable HTTP, resources/updated)",
        id="mcp-notifications",
        marks=pytest.mark.mcp,
    ),
]


def _run(root: Path, **options: Any) -> tuple[RunMetrics, list[dict[str, Any]]]:
    spec = RunSpec(load_scenario("payments-drifted"), "simulated:exact", Arm.parse("row"), 0)
    asyncio.run(run_one(spec, root, **options))
    (run,) = read_runs(root)
    return run_metrics(run), list(run.of("memory"))


@pytest.mark.parametrize(("options", "label"), PUSHED)
def test_with_push_the_row_arm_injects_no_stale_fix(tmp_path, options, label):
    metrics, memory = _run(tmp_path, **options)

    assert (metrics.stale_injections, metrics.completed_episodes) == (0, 36)
    assert (metrics.evictions_correct, metrics.evictions_wrong, metrics.restamps) == (1, 0, 6)
    (evicted,) = [r for r in memory if r["event"] == "evict"]
    assert (evicted["episode"], evicted["attempt"]) == (12, 0)  # before episode 12's lookup
    assert metrics.transport == label


def test_without_push_the_http_row_arm_injects_the_rotated_code_once_in_its_slot(tmp_path):
    metrics, _ = _run(tmp_path)

    assert (metrics.stale_injections, metrics.stale_injections_outside_slots) == (1, 0)
    assert metrics.transport == "AsyncContractTransport"


def test_a_watch_that_cannot_be_kept_ends_the_run_instead_of_measuring_without_push(
    tmp_path, monkeypatch
):
    """The server has no watch route: the run does not report response-time detection's figures
    as the watch's; it stops at the first drift event, saying why."""
    monkeypatch.setattr(channels, "SETTLE_TIMEOUT_S", 2.0)

    def without_watch(*args: Any, **kwargs: Any) -> Any:
        app = create_app(*args, **kwargs)

        async def guarded(scope: Any, receive: Any, send: Any) -> None:
            if scope["type"] == "http" and scope["path"] == "/contract/watch":
                await send({"type": "http.response.start", "status": 404, "headers": []})
                await send({"type": "http.response.body", "body": b""})
                return
            await app(scope, receive, send)

        return guarded

    spec = RunSpec(load_scenario("payments-drifted"), "simulated:exact", Arm.parse("row"), 0)
    with pytest.raises(ServerUnavailable, match="watch stream did not bring the memory to seq 1"):
        asyncio.run(run_one(spec, tmp_path, watch=True, app_factory=without_watch))
    meta = json.loads(paths(tmp_path, spec.key)[1].read_text(encoding="utf-8"))
    assert meta["completed"] is False and meta["completed_episodes"] == 11
    assert "watch stream did not bring the memory" in meta["error"]


@pytest.mark.parametrize("transport", ["mcp", "mcp-http", "pydantic-ai"])
def test_the_watch_is_refused_on_a_transport_other_than_http(tmp_path, capsys, transport):
    code = main(
        ["run", "--scenario", "payments-drifted", "--planner", "simulated:exact", "--arm", "row"]
        + ["--seeds", "0", "--transport", transport, "--watch", "--out", str(tmp_path)]
    )

    assert code == 2
    assert "--watch needs --transport http" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_the_runner_refuses_the_watch_over_mcp(tmp_path):
    spec = RunSpec(load_scenario("payments-drifted"), "simulated:exact", Arm.parse("row"), 0)
    with pytest.raises(ValueError, match="the watch stream is the http transport's"):
        asyncio.run(run_one(spec, tmp_path, transport="mcp-http", watch=True))
