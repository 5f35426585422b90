"""Many workers, one registry: real server processes share one history (a SQLite file or a
PostgreSQL database), and an agent moving between them never loses memory: zero 410s, and the
only evictions are the fixes the drift made stale."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from tests.service.agent import Agent
from tests.service.conftest import running
from tests.support.processes import serving

from invalidation_contracts.domains import get_catalog, get_domain
from invalidation_contracts.server.http.app import create_app

TOKEN = "workers-admin-token"
ENV = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": TOKEN}
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
FAMILIES = (
    "governed-partner-growth",
    "funding-enterprise-annual",
    "control-partner-starter",
    "control-agency-pro",
    "plain-starter-monthly",
)
LEARNED = [
    "ADD_REQUIRED_PROMO_CODE plan_agency_pro",
    "ADD_REQUIRED_PROMO_CODE plan_partner_growth",
    "ADD_REQUIRED_PROMO_CODE plan_partner_starter",
    "USE_REQUIRED_FUNDING_TYPE plan_enterprise_annual",  # scoped by plan and token
]
STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield str(tmp_path / "registry.sqlite")
    else:
        yield request.getfixturevalue("postgres_url")


def drift_and_work(agent: Agent, admin_urls: list[str]) -> None:
    """Learn every fix, rotate the governed code, take a benign bump, keep working throughout."""
    catalog = get_catalog("acme_billing")
    for family in FAMILIES:
        assert agent.solve(catalog.family(family).draft()) > 0
    assert agent.live() == LEARNED
    for i, snapshot in enumerate(("active_csm_codes.rotation-1", "token_funding_map.benign-bump")):
        data = catalog.read_snapshot(snapshot)
        reload = httpx.post(
            admin_urls[i % len(admin_urls)] + "/admin/reload-table",
            json={"table": data.table, "rows": data.rows},
            headers=ADMIN,
        )
        assert reload.status_code == 200, reload.text
        for _ in range(2):
            for family in FAMILIES:
                assert agent.solve(catalog.family(family).draft()) > 0


def assert_nothing_lost(agent: Agent) -> None:
    assert agent.recorder.count(410) == 0, agent.recorder.statuses
    assert agent.evictions() == [("ADD_REQUIRED_PROMO_CODE plan_partner_growth", "row-changed")]
    assert agent.live() == LEARNED, "the rotated fix was learned again; nothing else was lost"


@pytest.mark.workers
@pytest.mark.parametrize("workers", [2, 4])
def test_an_agent_alternating_between_independent_workers_loses_nothing(
    store: str, workers: int, tmp_path: Path
) -> None:
    with ExitStack() as stack:
        urls = [
            stack.enter_context(
                serving(["--domain", "acme_billing", "--db", store], tmp_path / "logs", env=ENV)
            )
            for _ in range(workers)
        ]
        epochs = {httpx.get(url + "/contract/versions").json()["contract_epoch"] for url in urls}
        assert len(epochs) == 1, "the epoch belongs to the history, not to a process"
        agent = Agent(urls)
        try:
            drift_and_work(agent, urls[::-1])
            assert_nothing_lost(agent)
            assert len(agent.recorder.served) == workers
            assert min(agent.recorder.served.values()) >= 5, "every worker answered its share"
        finally:
            agent.close()
        answers = [httpx.get(url + "/contract/versions").json() for url in urls]
        assert all(answer == answers[0] for answer in answers), "every worker at one head"


@pytest.mark.workers
def test_a_worker_behind_the_client_catches_up_before_answering_its_changes_fetch(
    store: str,
) -> None:
    """Workers that never follow by themselves (no lifespan): each learns of a change only when a
    client at a later position asks, the need fetches for a diff included (SPEC §8.2, 3.). A
    worker that answered the diff from its old state would leave the fix withheld and relearned."""
    domain = get_domain("acme_billing")
    with ExitStack() as stack:
        urls = [
            stack.enter_context(
                # never started, a worker vouches for its state for max_lag_s after opening; the
                # bound is lifted here, where what is tested is the catch-up a position forces
                running(
                    create_app(domain, store=store, admin_token=TOKEN, max_lag_s=600.0),
                    lifespan="off",
                )
            )
            for _ in range(4)  # more lagging workers than the need loop has rounds
        ]
        agent = Agent(urls)
        try:
            drift_and_work(agent, urls)
            assert_nothing_lost(agent)
        finally:
            agent.close()


@pytest.mark.workers
@pytest.mark.parametrize(
    ("store", "workers"),
    [("sqlite", 2), pytest.param("postgres", 4, marks=pytest.mark.postgres)],
    indirect=["store"],
)
def test_serve_with_workers_shares_one_registry(store: str, workers: int, tmp_path: Path) -> None:
    args = ["--domain", "acme_billing", "--db", store, "--workers", str(workers)]
    with serving(args, tmp_path / "logs", env=ENV) as url:
        agent = Agent([url], keepalive=False)  # a connection per request: the workers take turns
        try:
            drift_and_work(agent, [url])
            assert_nothing_lost(agent)
        finally:
            agent.close()
        seen = {httpx.get(url + "/contract/versions").text for _ in range(12)}
        assert len(seen) == 1, "every worker answers from one committed state"


def test_serve_refuses_several_workers_without_a_shared_store(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from invalidation_contracts.cli import main

    assert main(["serve", "--domain", "acme_billing", "--workers", "2", "--ephemeral"]) == 2
    assert "--workers cannot be --ephemeral" in capsys.readouterr().err
