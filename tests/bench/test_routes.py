"""A catalog with several routes: each task family names its route, and the harness sends, files,
prompts and judges each episode on that route (issue 23: "a catalog has one route only").

The domain is tests/support/domains/travel_ext: booking a trip (``POST /v1/bookings``, the default
route) and registering a card (``POST /v1/cards``), both wrapping the service's own validation
code. Its stream (travel-routes.toml) drifts a table only the card route reads (breaking) and a
table only the booking route reads (benign for its key-set fix).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import textwrap
from pathlib import Path
from typing import Any

import pytest

from invalidation_contracts.bench.arms import Arm
from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.labels import check_labels
from invalidation_contracts.bench.metrics import RunMetrics, run_metrics
from invalidation_contracts.bench.runner import RunSpec, run_one
from invalidation_contracts.bench.scenario import ScenarioMismatch, parse_scenario
from invalidation_contracts.bench.verify import check_scenario
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.domains.audit import audit
from invalidation_contracts.domains.catalog import DomainCatalog, TaskFamily
from invalidation_contracts.planners import Plan, Planner, PlanningContext
from invalidation_contracts.planners.registry import create_planner
from invalidation_contracts.server import DataFileError

SUPPORT = Path(__file__).parents[1] / "support" / "domains"
MANIFEST = SUPPORT / "travel-routes.toml"
BOOKINGS, CARDS = "/v1/bookings", "/v1/cards"


@pytest.fixture
def travel(monkeypatch: pytest.MonkeyPatch) -> DomainCatalog:
    """The travel domain importable here and in child processes (an MCP server)."""
    monkeypatch.syspath_prepend(str(SUPPORT))
    path = os.pathsep.join(p for p in (str(SUPPORT), os.environ.get("PYTHONPATH")) if p)
    monkeypatch.setenv("PYTHONPATH", path)
    return get_catalog("travel_ext:catalog")


class Recording:
    """``simulated:exact``, keeping every planning context it was given."""

    def __init__(self, name: str) -> None:
        self.inner = create_planner(name)
        self.name, self.simulated = self.inner.name, True
        self.contexts: list[PlanningContext] = []

    async def plan(self, context: PlanningContext) -> Plan:
        self.contexts.append(context)
        return await self.inner.plan(context)

    async def aclose(self) -> None:
        await self.inner.aclose()


def _run(root: Path, arm: str, **options: Any) -> tuple[RunMetrics, Any]:
    scenario = parse_scenario(MANIFEST.read_text(encoding="utf-8"), str(MANIFEST))
    spec = RunSpec(scenario, "simulated:exact", Arm.parse(arm), 0)
    asyncio.run(run_one(spec, root, **options))
    (run,) = read_runs(root)
    return run_metrics(run), run


# --- the catalog ---------------------------------------------------------------------------------


def test_a_family_naming_a_route_is_sent_to_it_and_one_naming_none_to_the_default(travel):
    assert sorted(travel.routes) == [BOOKINGS, CARDS]
    assert travel.route.path == BOOKINGS
    assert travel.route_of("book-with-new-card").path == BOOKINGS
    assert travel.route_of("register-card-h1").path == CARDS


def test_each_route_adds_its_paragraph_to_the_system_prompt_of_its_families(travel):
    prompt = travel.system_prompt_of("register-card-h1")
    assert prompt.startswith(travel.system_prompt)
    assert prompt.endswith("the body has holder, card and currency.")
    assert "booking_ref" in travel.system_prompt_of("book-with-new-card")


def test_a_single_route_catalog_is_unchanged(travel):
    shipped = get_catalog("acme_billing")
    assert list(shipped.routes) == [shipped.route.path]
    family = next(iter(shipped.task_families.values()))
    assert shipped.route_of(family) is shipped.route
    assert shipped.system_prompt_of(family) == shipped.system_prompt


def test_a_family_naming_a_route_the_catalog_lacks_is_refused_naming_both(travel):
    stray = TaskFamily("stray", "governed", "t", {"x": 1}, route="/v1/refunds")
    with pytest.raises(ValueError, match=r"'stray' names route '/v1/refunds'.*/v1/bookings"):
        dataclasses.replace(travel, task_families={"stray": stray})


def _tasks(tmp_path: Path, extra: str) -> Path:
    base = (SUPPORT / "travel_ext" / "tasks.toml").read_text(encoding="utf-8")
    directory = tmp_path / "travel"
    directory.mkdir()
    (directory / "tasks.toml").write_text(base + textwrap.dedent(extra), encoding="utf-8")
    return directory


def test_tasks_toml_naming_a_route_the_domain_lacks_is_a_data_file_error(travel, tmp_path):
    directory = _tasks(
        tmp_path,
        """
        [[family]]
        id = "refund"
        class = "governed"
        route = "/v1/refunds"
        text = "Refund BK1."
        fields = { booking_ref = "BK1" }
        """,
    )
    with pytest.raises(DataFileError, match=r"route '/v1/refunds' is not a route of domain"):
        DomainCatalog.from_directory(travel.domain, directory, BOOKINGS)


@pytest.mark.parametrize("route", ["5", '"v1/cards"'])
def test_a_route_that_is_not_a_path_is_a_data_file_error(travel, tmp_path, route):
    directory = _tasks(
        tmp_path,
        f"""
        [[family]]
        id = "odd"
        class = "governed"
        route = {route}
        text = "Register."
        fields = {{ holder = "H1" }}
        """,
    )
    with pytest.raises(DataFileError, match=r"family #4 \(odd\): 'route' must be a route path"):
        DomainCatalog.from_directory(travel.domain, directory, BOOKINGS)


def test_the_drift_labels_are_judged_on_each_familys_route(travel):
    scenario = parse_scenario(MANIFEST.read_text(encoding="utf-8"))
    assert check_labels(scenario, travel) == []
    wrong = parse_scenario(
        MANIFEST.read_text(encoding="utf-8").replace('kind = "breaking"', 'kind = "benign"')
    )
    with pytest.raises(ScenarioMismatch, match="USE_HOLDER_CURRENCY"):
        check_scenario(wrong, travel)


def test_the_leak_audit_reads_every_routes_schema_and_prompt(travel):
    assert audit(travel) == []
    leaky = dataclasses.replace(travel, route_prompts={CARDS: "Holders are billed in EUR."})
    assert [(leak.value, leak.where) for leak in audit(leaky)] == [
        ("EUR", f"the system prompt of route {CARDS}")
    ]


# --- the harness ---------------------------------------------------------------------------------


def test_each_episode_goes_to_its_familys_route_and_files_its_fix_there(travel, tmp_path):
    metrics, run = _run(tmp_path, "row")
    routes = {r["family"]: r["route"] for r in run.of("episode")}
    assert routes == {
        "book-with-new-card": BOOKINGS,
        "register-card-h1": CARDS,
        "register-card-h2": CARDS,
    }
    stored = {
        r["key"]["type"]: r["key"]["operation"] for r in run.of("memory") if r["event"] == "store"
    }
    assert stored == {
        "USE_REGISTERED_CARD": f"POST {BOOKINGS}",
        "USE_HOLDER_CURRENCY": f"POST {CARDS}",
    }
    assert metrics.completed_episodes == 9
    tables = {r["key"]["type"]: r["tables"] for r in run.of("memory") if r["event"] == "store"}
    assert tables == {
        "USE_REGISTERED_CARD": ["cards"],
        "USE_HOLDER_CURRENCY": ["holders"],
    }


def test_the_oracle_judges_each_fix_on_the_route_it_was_learned_on(travel, tmp_path):
    row, _ = _run(tmp_path / "row", "row")
    assert (row.evictions_correct, row.evictions_wrong, row.precision, row.recall) == (
        1,
        0,
        1.0,
        1.0,
    )
    table, run = _run(tmp_path / "table", "table")
    evicted = [r["key"]["type"] for r in run.of("memory") if r["event"] == "evict"]
    # The holders drift evicts both card fixes (one stale); the cards drift evicts the booking
    # fix, still current on /v1/bookings: two wrong evictions, judged on each fix's own route.
    assert sorted(evicted) == ["USE_HOLDER_CURRENCY", "USE_HOLDER_CURRENCY", "USE_REGISTERED_CARD"]
    assert (table.evictions_correct, table.evictions_wrong) == (1, 2)


def test_a_planner_is_shown_the_schema_and_prompt_of_its_familys_route(travel, tmp_path):
    planners: list[Recording] = []

    def factory(name: str) -> Planner:
        planners.append(Recording(name))
        return planners[-1]

    _run(tmp_path, "row", planner_factory=factory)
    contexts = [c for p in planners for c in p.contexts]
    by_task = {c.task_fields.get("holder", "booking"): c for c in contexts}
    assert sorted(by_task["H1"].request_schema["properties"]) == ["card", "currency", "holder"]
    assert "registers a payment card" in by_task["H1"].system_prompt
    booking = by_task["booking"]
    assert "amount" in booking.request_schema["properties"]
    assert "books a trip" in booking.system_prompt


@pytest.mark.mcp
@pytest.mark.timeout(300)
def test_over_mcp_each_route_is_its_own_tool_with_the_http_figures(travel, tmp_path):
    http, _ = _run(tmp_path / "http", "row")
    mcp, run = _run(tmp_path / "mcp", "row", transport="mcp-stdio")
    operations = {r["key"]["operation"] for r in run.of("memory") if r["event"] == "store"}
    assert len(operations) == 2 and not any(o.startswith("POST ") for o in operations)
    fields = ("evictions_correct", "evictions_wrong", "stale_injections", "completed_episodes")
    assert [getattr(mcp, f) for f in fields] == [getattr(http, f) for f in fields]
