"""The whole payments-drifted stream through each agent framework: the row arm's validity figures
equal the HTTP harness's cell for cell (seed 0, ``simulated:exact``, both run here).

Each run is ``run_one`` with ``transport`` set to the framework: 36 episodes, two drift events
through the admin route, the oracle labelling every eviction and injection, each attempt one run
of the framework's agent over a real ``serve-mcp`` child (``bench.framework_channel``).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from invalidation_contracts.bench.arms import Arm
from invalidation_contracts.bench.artifacts import read_run, read_runs
from invalidation_contracts.bench.channels import Outgoing
from invalidation_contracts.bench.errors import HarnessError
from invalidation_contracts.bench.framework_channel import framework_agent
from invalidation_contracts.bench.metrics import RunMetrics, run_metrics
from invalidation_contracts.bench.runner import RunSpec, run_one
from invalidation_contracts.bench.scenario import load_scenario
from invalidation_contracts.cli import main
from invalidation_contracts.client import FixMemory
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.planners import PlanningContext
from invalidation_contracts.planners.registry import create_planner
from invalidation_contracts.protocol.levels import Level

pytest.importorskip("pydantic_ai")
pytest.importorskip("agents")
pytest.importorskip("langgraph")

pytestmark = [
    pytest.mark.frameworks,
    pytest.mark.mcp,
    pytest.mark.timeout(300),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

FRAMEWORKS = ("pydantic-ai", "openai-agents", "langchain")
VALIDITY = (
    "evictions_correct",
    "evictions_wrong",
    "evictions_unlabelled",
    "restamps",
    "stale_injections",
    "stale_injections_outside_slots",
    "precision",
    "recall",
    "completed_episodes",
    "injections",
)


def _run(root: Path, transport: str) -> tuple[RunMetrics, list[dict[str, Any]]]:
    spec = RunSpec(load_scenario("payments-drifted"), "simulated:exact", Arm.parse("row"), 0)
    asyncio.run(run_one(spec, root, transport=transport))
    (run,) = read_runs(root)
    memory = [{k: v for k, v in r.items() if k != "key"} for r in run.of("memory")]
    return run_metrics(run), memory


@pytest.fixture(scope="module")
def http(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunMetrics, list[dict[str, Any]]]:
    return _run(tmp_path_factory.mktemp("http"), "http")


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_through_the_framework_the_row_arms_validity_figures_equal_the_http_harness(
    http, framework, tmp_path
):
    reference, reference_memory = http
    metrics, memory = _run(tmp_path, framework)

    figures = {f: getattr(metrics, f) for f in VALIDITY}
    assert figures == {f: getattr(reference, f) for f in VALIDITY}
    assert (metrics.evictions_correct, metrics.evictions_wrong, metrics.restamps) == (1, 0, 6)
    assert metrics.precision == metrics.recall == 1.0
    assert memory == reference_memory  # the same event at the same episode and attempt
    assert metrics.transport is not None and "streamable HTTP" in metrics.transport
    assert metrics.simulated
    print(framework, figures)  # noqa: T201 (the figures docs/frameworks.md records, with -s)


def test_a_run_through_a_framework_from_the_command_line_records_the_framework(tmp_path, capsys):
    argv = ["run", "--scenario", "payments-control", "--planner", "simulated:exact"]
    argv += ["--arm", "row", "--seeds", "0", "--out", str(tmp_path), "--no-progress"]

    assert main([*argv, "--transport", "pydantic-ai"]) == 0

    (meta,) = (tmp_path / "runs").rglob("*.meta.json")
    recorded = json.loads(meta.read_text())
    assert recorded["completed"] is True and recorded["planner_simulated"] is True
    assert recorded["extra"]["transport"].startswith("PydanticAI ContractToolset")


def test_notifications_through_a_framework_are_a_usage_error(tmp_path, capsys):
    argv = ["run", "--scenario", "payments-control", "--planner", "simulated:exact"]
    argv += ["--out", str(tmp_path), "--no-progress", "--transport", "langchain"]

    assert main([*argv, "--mcp-notifications"]) == 2
    assert "--mcp-notifications needs --transport mcp" in capsys.readouterr().err
    with pytest.raises(ValueError, match="notifications"):
        spec = RunSpec(load_scenario("payments-control"), "simulated:exact", Arm("row"), 0)
        asyncio.run(run_one(spec, tmp_path / "api", transport="langchain", notifications=True))


async def _attempt(relay: Any) -> None:
    """One attempt of episode 1 through PydanticAI, its relay wrapped by ``relay``."""
    catalog = get_catalog("acme_billing")
    memory = FixMemory("row")
    opened = framework_agent(
        "pydantic-ai", catalog, memory, level=Level(6), token="t", conditional=False
    )
    async with opened as (channel, _origin, _admin):
        channel.relay = relay(channel.relay)
        draft = catalog.family("governed-partner-growth").draft()
        await channel.send(Outgoing(draft, catalog.route, 1, [], lambda event: None))


def test_a_framework_that_shows_its_model_something_else_than_the_model_view_stops_the_run():
    def tampered(real: Any) -> Any:
        async def relay(tool: str, request: dict[str, Any]) -> str:
            return (await real(tool, request)).replace("SUMMERSALE25", "OTHER")

        return relay

    with pytest.raises(HarnessError, match="something else than the model view"):
        asyncio.run(_attempt(tampered))


def test_a_framework_whose_model_makes_no_tool_call_stops_the_run():
    def silent(real: Any) -> Any:
        async def relay(tool: str, request: dict[str, Any]) -> str:
            return "done"

        return relay

    with pytest.raises(HarnessError, match="0 tool calls"):
        asyncio.run(_attempt(silent))


class _KillsTheServer:
    """``simulated:exact``, which kills the ``serve-mcp`` children of this process before it
    plans episode ``at``: the server dies mid-stream."""

    def __init__(self, at: int) -> None:
        self.inner = create_planner("simulated:exact")
        self.name, self.simulated, self.at = self.inner.name, True, at

    async def plan(self, context: PlanningContext) -> Any:
        if context.episode == self.at and context.attempt == 1:
            for pid in _serve_mcp_children():
                os.kill(pid, signal.SIGKILL)
        return await self.inner.plan(context)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _serve_mcp_children() -> list[int]:
    found = []
    for task in Path("/proc/self/task").iterdir():
        for pid in (task / "children").read_text().split():
            if b"serve-mcp" in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
    return found


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_server_killed_mid_stream_ends_the_run_with_its_error_recorded(framework, tmp_path):
    spec = RunSpec(load_scenario("payments-drifted"), "simulated:exact", Arm("row"), 0)

    with pytest.raises(Exception):  # noqa: B017 (each framework words a dead server its own way)
        asyncio.run(
            run_one(
                spec, tmp_path, transport=framework, planner_factory=lambda n: _KillsTheServer(3)
            )
        )

    assert read_runs(tmp_path) == []  # no completed run: a rerun starts it again
    (meta,) = (tmp_path / "runs").rglob("*.meta.json")
    run = read_run(meta)
    assert run.meta.completed is False and run.meta.error
    assert [r["episode"] for r in run.of("episode")] == [1, 2]  # the finished ones are kept
