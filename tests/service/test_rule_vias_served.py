"""A fix carries each rule's ``via`` (``rule_vias``): through a real ``serve`` process, an operator
dropping a rule's ``via`` before the agent read any rule listing evicts the fix that relied on it
(issue 38; without the field the client had no ``via`` to compare and kept the fix)."""

from __future__ import annotations

from contextlib import ExitStack
from pathlib import Path

import httpx
from tests.support.processes import serving

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.events import FetchRules
from invalidation_contracts.client.values import Answer
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.httpx import contract_client

TOKEN = "rule-vias-admin-token"
ENV = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": TOKEN}
REQUIRES_RECOGNITION = ["active_csm_codes", "promo_eligibility", "requires_recognition"]
PATH = "/v1/subscriptions"
STRATEGIES = ("rules-oracle", "rules-stamp+vectors")  # one server process for both


def test_a_via_dropped_on_a_served_rule_evicts_the_fix_that_relied_on_it(tmp_path: Path):
    catalog = get_catalog("acme_billing")
    memories = {strategy: FixMemory(strategy) for strategy in STRATEGIES}
    with (
        serving(["--domain", "acme_billing", "--ephemeral"], tmp_path / "logs", env=ENV) as url,
        ExitStack() as stack,
    ):
        agents = {
            s: stack.enter_context(contract_client(m, base_url=url, timeout=30.0))
            for s, m in memories.items()
        }
        for agent in agents.values():
            learned = agent.post(PATH, json=catalog.family("governed-partner-growth").draft())
            [fix] = learned.json()["recovery_feedback"]["suggestions"]
            vias = dict(zip(map(tuple, fix["rules"]), fix["rule_vias"], strict=True))
            assert vias[tuple(REQUIRES_RECOGNITION)] == "code"

        listing = httpx.get(url + "/contract/rules").json()
        rules = [
            {k: v for k, v in rule.items() if k != "via" or _triple(rule) != REQUIRES_RECOGNITION}
            for rule in listing["rules"]
        ]
        headers = {"Authorization": f"Bearer {TOKEN}"}
        moved = httpx.post(url + "/admin/rules", json={"rules": rules}, headers=headers)
        assert moved.status_code == 200, moved.text
        # The next answer carries the moved stamp: the oracle reads the listing itself;
        # rules-stamp+vectors only raises the alert, so the listing is handed to it.
        for agent in agents.values():
            agent.post(PATH, json=catalog.family("plain-starter-monthly").draft())
        memories["rules-stamp+vectors"].answer(
            FetchRules(url), Answer.rules(httpx.get(url + "/contract/rules").json())
        )

    for memory in memories.values():
        [tombstone] = memory.tombstones(url)
        assert tombstone.entry.suggestion.type == "ADD_REQUIRED_PROMO_CODE"
        assert tombstone.reason is EvictionReason.RULES
        assert (
            tombstone.detail == f"rule {REQUIRES_RECOGNITION} changed its via from 'code' to None"
        )


def _triple(rule: dict[str, str]) -> list[str]:
    return [rule["from_table"], rule["to_table"], rule["relation"]]
