"""A canary deploy, its rollback and the redeploy, end to end across processes (issue 41, fault
and change suite: deploy/rollback/redeploy with mixed workers), in the documented deploy order
(docs/providers.md, "Versions side by side: the deploy order").

One PostgreSQL. Release 1 (Acme) serves from ``serve --workers 2``; an agent (the real fix memory
behind the httpx transport) learns its fixes there. The new release's additive migration (a table
``embargoes``, a column ``promo_eligibility.region``) runs, then ``db upgrade`` with release 2; a
canary worker of release 2 starts beside the old ones, and the agent's requests go to both while
plain-SQL writes from another process reach an old table, the new table and the new column. The
canary is rolled back (stopped, then ``db upgrade`` with release 1), then release 2 is redeployed
(``db upgrade``, its workers started, the old ones stopped). At every phase: every worker ready,
no stamp older than a write past the lag bound, the epoch the agent's fixes hang on unchanged, no
503 on any route (each worker reads only its own tables), and every fix the agent is served after
the drift is still right (0 stale); only the rotated row's fix is evicted.
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.service.agent import ORIGIN, Agent
from tests.service.probes import Probe, ready_reports
from tests.service.test_follower_faults import commit
from tests.support import canary
from tests.support.processes import serving

from invalidation_contracts.cli import main
from invalidation_contracts.domains import get_catalog, get_domain
from invalidation_contracts.server.sql import create_tables
from invalidation_contracts.server.worker.timing import DEFAULT_MAX_LAG_S

# Three server processes and a few lag-bound waits: a study (CI runs it too).
pytestmark = [pytest.mark.postgres, pytest.mark.workers, pytest.mark.study]

FAMILIES = (
    "governed-partner-growth",
    "funding-enterprise-annual",
    "control-partner-starter",
    "control-agency-pro",
    "plain-starter-monthly",
)
ROTATED = "ADD_REQUIRED_PROMO_CODE plan_partner_growth"
ACME = get_catalog("acme_billing")


def versions(url: str) -> dict[str, Any]:
    answer = httpx.get(url + "/contract/versions", timeout=10)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


def db_upgrade(domain: str, database: str, declare: Path) -> None:
    """``invalidation-contracts db upgrade`` with a release, as its deploy step runs it."""
    args = ["db", "upgrade", "--domain", domain, "--database", database]
    assert main([*args, "--declare", str(declare)]) == 0


def route_to(agent: Agent, *urls: str) -> None:
    """The agent's requests (one origin) now go to these workers, round robin."""
    agent.recorder.urls = [httpx.URL(u) for u in urls]


def solve_all(agent: Agent) -> list[str]:
    """Every family solved; the fixes the memory served that the server then refused (stale:
    the answer asks for the same fix, of the same type and scope, again)."""
    stale = []
    for family in FAMILIES:
        draft = ACME.family(family).draft()
        served = agent.memory.lookup(ORIGIN, draft, operation="POST /v1/subscriptions").entries
        request = dict(draft)
        for entry in served:
            request.update(entry.suggestion.parameters)
        answer = agent.http.post("/v1/subscriptions", json=request)
        if answer.status_code != 200:
            feedback = answer.json().get("recovery_feedback", {}).get("suggestions", [])
            asked = {(s["type"], json.dumps(s.get("scope"), sort_keys=True)) for s in feedback}
            for entry in served:
                fix = entry.suggestion
                if (fix.type, json.dumps(fix.scope, sort_keys=True)) in asked:
                    stale.append(f"{fix.type} {(fix.scope or {}).get('plan', '')}")
        assert agent.solve(draft) > 0, family
    return stale


def evicted_since(agent: Agent, before: list[tuple[str, str]]) -> list[str]:
    """The fixes evicted since ``before`` (a prefix of the list); each because its row changed."""
    now = agent.evictions()
    assert all(reason == "row-changed" for _, reason in now), now
    rest = list(now)
    for seen in before:
        rest.remove(seen)
    return [name for name, _ in rest]


def settled(urls: dict[str, int], seq: int, probes: list[Probe], committed: float) -> None:
    """Every worker ready at ``seq``, then no stamp older than it past the lag bound."""
    for url, workers in urls.items():
        ready_reports(url, workers, seq)
    time.sleep(DEFAULT_MAX_LAG_S + 0.3)
    for probe in probes:
        assert probe.unverified(committed, seq) == []
        assert [s for s in probe.seen if s.status == 503] == [], "a route went down"


def test_a_canary_its_rollback_and_the_redeploy_keep_workers_ready_the_epoch_and_the_fixes(
    postgres_url: str, tmp_path: Path
) -> None:
    database = postgres_url
    create_tables(database, get_domain("acme_billing"))
    v1_toml, v2_toml = tmp_path / "v1.toml", tmp_path / "v2.toml"
    v1_toml.write_text(canary.V1_DECLARE)
    v2_toml.write_text(canary.V2_DECLARE)
    common = ["--database", database, "--db", database]
    v1 = ["--domain", "acme_billing", *common, "--declare", str(v1_toml)]
    v2 = ["--domain", "tests.support.canary:v2", *common, "--declare", str(v2_toml)]
    logs = tmp_path / "logs"
    with ExitStack() as stack:
        release_1 = stack.enter_context(ExitStack())
        old = release_1.enter_context(serving([*v1, "--workers", "2"], logs))
        ready_reports(old, 2, 0)
        epoch = versions(old)["contract_epoch"]
        agent = Agent([old], watch=True)  # push: 0 stale fixes, not one per drift
        stack.callback(agent.close)
        assert solve_all(agent) == []
        learned = agent.live()

        # 1. The additive migration, then `db upgrade` with release 2: release 1 serves on.
        commit(database, canary.MIGRATION)
        db_upgrade("tests.support.canary:v2", database, v2_toml)
        ready_reports(old, 2, versions(old)["contract_seq"])

        # 2. A canary of release 2 beside the old workers; writes to old and new tables.
        with serving(v2, logs) as new:
            seq = versions(new)["contract_seq"]  # its start added the column: one change set
            ready_reports(new, 1, seq)
            assert versions(new)["contract_epoch"] == versions(old)["contract_epoch"] == epoch
            route_to(agent, old, new)
            assert solve_all(agent) == []
            with Probe(old) as p_old, Probe(new) as p_new:
                rotate = "UPDATE active_csm_codes SET code = 'WINTERLAUNCH26'"
                commit(database, rotate + " WHERE key = 'plan_partner_growth'")
                commit(database, "UPDATE embargoes SET reason = 'export control'")
                region = "UPDATE promo_eligibility SET region = 'eu'"
                last = commit(database, region + " WHERE key = 'SUMMERSALE25'")
                seq += 3
                settled({old: 2, new: 1}, seq, [p_old, p_new], last)
            table_versions = versions(new)["table_versions"]
            assert "embargoes" in table_versions and table_versions["embargoes"] != "1.0.0"
            assert solve_all(agent) == [], "a fix the memory served was stale"
            assert ROTATED in evicted_since(agent, [])  # with those of rows that gained region
            assert agent.live() == learned

        # 3. Rollback: the canary stopped, then `db upgrade` with release 1.
        route_to(agent, old)
        db_upgrade("acme_billing", database, v1_toml)
        before = agent.evictions()
        with Probe(old) as p_old:
            commit(database, "UPDATE embargoes SET reason = 'lifted'")
            back = "UPDATE active_csm_codes SET code = 'SUMMERSALE25'"
            last = commit(database, back + " WHERE key = 'plan_partner_growth'")
            seq += 2
            settled({old: 2}, seq, [p_old], last)
        assert versions(old)["contract_epoch"] == epoch
        assert solve_all(agent) == []
        assert evicted_since(agent, before) == [ROTATED]
        assert agent.live() == learned

        # 4. Redeploy: `db upgrade` with release 2, its worker, then the old ones stop.
        db_upgrade("tests.support.canary:v2", database, v2_toml)
        redeployed = stack.enter_context(serving(v2, logs))
        ready_reports(redeployed, 1, seq)
        route_to(agent, redeployed)
        release_1.close()
        before = agent.evictions()
        with Probe(redeployed) as p_new:
            last = commit(database, "UPDATE embargoes SET reason = 'again'")
            seq += 1
            settled({redeployed: 1}, seq, [p_new], last)
        assert versions(redeployed)["contract_epoch"] == epoch
        assert solve_all(agent) == []
        assert evicted_since(agent, before) == [], "the redeploy evicted nothing"
        assert agent.live() == learned
        assert agent.recorder.count(503) == 0
