"""The harness over MCP: a real MCP client and server reproduce the HTTP transport's validity
figures cell for cell; with notifications, the stale fix is never injected."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from invalidation_contracts.bench.arms import Arm
from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.metrics import RunMetrics, run_metrics
from invalidation_contracts.bench.runner import RunSpec, run_one
from invalidation_contracts.bench.scenario import load_scenario
from invalidation_contracts.cli import main
from invalidation_contracts.client.modelview import model_view
from invalidation_contracts.planners import Planner, PlanningContext, render_prompt
from invalidation_contracts.planners.registry import create_planner

pytestmark = [pytest.mark.mcp, pytest.mark.timeout(600)]

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

#: Contract members as they would appear in a prompt's JSON.
CONTRACT = ('"table_versions"', '"contract_seq"', '"rules_version"', '"patch"', '"scope"')


def _run(root: Path, scenario: str, arm: str, **options: Any) -> tuple[RunMetrics, list[dict]]:
    spec = RunSpec(load_scenario(scenario), "simulated:exact", Arm.parse(arm), 0)
    asyncio.run(run_one(spec, root, **options))
    (run,) = read_runs(root)
    memory = [{k: v for k, v in r.items() if k != "key"} for r in run.of("memory")]
    return run_metrics(run), memory


@pytest.fixture(scope="module")
def cells(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str, str], Any]:
    """Each (scenario, arm, transport) run once: its metrics and its memory records."""
    out = {}
    for scenario, arm in [("payments-drifted", "row"), ("rules-drifted", "rules-oracle")]:
        for transport in ("http", "mcp-stdio", "mcp-http"):
            root = tmp_path_factory.mktemp(f"{scenario}-{transport}")
            out[(scenario, arm, transport)] = _run(root, scenario, arm, transport=transport)
    return out


@pytest.mark.parametrize("transport", ["mcp-stdio", "mcp-http"])
@pytest.mark.parametrize(
    ("scenario", "arm"), [("payments-drifted", "row"), ("rules-drifted", "rules-oracle")]
)
def test_over_mcp_the_validity_figures_equal_the_http_transports(cells, scenario, arm, transport):
    http, _ = cells[(scenario, arm, "http")]
    mcp, _ = cells[(scenario, arm, transport)]

    assert {f: getattr(mcp, f) for f in VALIDITY} == {f: getattr(http, f) for f in VALIDITY}
    assert mcp.evictions_correct >= 1 and mcp.transport and "MCP" in mcp.transport


@pytest.mark.parametrize("transport", ["mcp-stdio", "mcp-http"])
def test_over_mcp_the_memory_does_the_same_thing_at_the_same_moment(cells, transport):
    _, http = cells[("payments-drifted", "row", "http")]
    _, mcp = cells[("payments-drifted", "row", transport)]

    assert mcp == http


def test_with_notifications_the_rotated_fix_is_evicted_before_it_is_injected(tmp_path):
    metrics, memory = _run(
        tmp_path, "payments-drifted", "row", transport="mcp-http", notifications=True
    )

    assert metrics.stale_injections == 0
    assert (metrics.evictions_correct, metrics.evictions_wrong) == (1, 0)
    assert metrics.precision == 1.0 and metrics.recall == 1.0
    (evicted,) = [r for r in memory if r["event"] == "evict"]
    assert (evicted["episode"], evicted["attempt"]) == (12, 0)  # before episode 12's lookup


@pytest.mark.parametrize("transport", ["mcp-stdio", "mcp-http"])
def test_the_harness_reports_the_contract_tokens_kept_from_the_model(cells, transport):
    http, _ = cells[("payments-drifted", "row", "http")]
    mcp, _ = cells[("payments-drifted", "row", transport)]

    # equal up to rounding: each retry's estimate is two ceil(chars / 4) whose texts differ by the
    # HTTP problem document's ``instance`` (absent over MCP), so one token per retry at most
    assert http.contract_tokens > 0
    assert abs(mcp.contract_tokens - http.contract_tokens) <= http.retries
    assert mcp.tokens_estimated and http.tokens_estimated


class _Recording:
    """A simulated planner that keeps every context it is given (what a model would be shown)."""

    def __init__(self, inner: Planner, seen: list[PlanningContext]) -> None:
        self.inner, self.seen = inner, seen
        self.name, self.simulated = inner.name, inner.simulated

    async def plan(self, context: PlanningContext) -> Any:
        self.seen.append(context)
        return await self.inner.plan(context)

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.mark.parametrize("transport", ["http", "mcp-stdio"])
def test_planners_are_shown_earlier_responses_without_contract_metadata(tmp_path, transport):
    seen: list[PlanningContext] = []
    spec = RunSpec(load_scenario("payments-drifted"), "simulated:exact", Arm.parse("row"), 0)

    asyncio.run(
        run_one(
            spec,
            tmp_path,
            transport=transport,
            planner_factory=lambda name: _Recording(create_planner(name), seen),
        )
    )

    shown = [a.response for c in seen for a in c.attempts]
    assert shown and all(model_view(r) == r for r in shown)
    assert any(r.get("recovery_feedback", {}).get("suggestions") for r in shown)
    assert not any(member in render_prompt(c).user for c in seen for member in CONTRACT)


def test_run_over_mcp_from_the_command_line(tmp_path, capsys):
    argv = ["run", "--scenario", "payments-control", "--planner", "simulated:exact"]
    argv += ["--arm", "row", "--seeds", "0", "--out", str(tmp_path), "--no-progress"]

    assert main([*argv, "--transport", "mcp"]) == 0

    out = capsys.readouterr().out
    assert "A2D" in out and "Contract tok. hidden" in out
    (meta,) = (tmp_path / "runs").rglob("*.meta.json")
    assert json.loads(meta.read_text())["extra"]["transport"] == "ContractSession (MCP over stdio)"
    assert main([*argv, "--transport", "http"]) == 1
    assert "holds runs made with ContractSession" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--mcp-notifications"], "--mcp-notifications needs --transport mcp"),
        (["--transport", "mcp", "--server-url", "http://127.0.0.1:9"], "--server-url runs over"),
    ],
)
def test_transport_options_that_cannot_go_together_are_usage_errors(
    tmp_path, capsys, monkeypatch, extra, message
):
    monkeypatch.setenv("INVALIDATION_CONTRACTS_ADMIN_TOKEN", "token")
    argv = ["run", "--scenario", "payments-control", "--planner", "simulated:exact"]

    assert main([*argv, "--out", str(tmp_path), "--no-progress", *extra]) == 2
    assert message in capsys.readouterr().err
