"""The indexed client scorer against a brute-force one, on random request streams with drift.

``ClientScores`` finds a request's candidate fixes by one dict lookup per anchored field, builds
each refusal's lesson once per document and keeps a carried fix's judgement per served state.
The brute force below does none of that: it keeps every fix ever taught, scans them all on every
opening request and runs the policy again each time. Both must give every client the same
figures, whatever the requests, the clients and the changes between them.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict
from tests.service.conftest import make_domain

from invalidation_contracts.observe.lessons import Lessons, value_key
from invalidation_contracts.observe.scoring import ClientFigures, ClientScores
from invalidation_contracts.protocol.models import Action
from invalidation_contracts.server import Domain, Provider, Route, TableSpec, Violation, policy
from invalidation_contracts.server.provider import current_fix

PLAN_ROWS = [
    {"basic": {"funding": "card"}, "enterprise": {"funding": "invoice", "promo": "ENT10"}},
    {"basic": {"funding": "wire"}, "enterprise": {"funding": "invoice", "promo": "ENT20"}},
    {"basic": {"funding": "card"}, "enterprise": {"funding": "wire", "promo": "ENT10"}},
]
WALLET_ROWS = [
    {"w1": {"cards": ["c1", "c2"]}, "w2": {"cards": ["c2"]}},
    {"w1": {"cards": ["c2", "c1"]}, "w2": {"cards": ["c3", "c2"]}},
    {"w1": {"cards": ["c3"]}, "w2": {"cards": ["c2"]}},
]


class Payment(BaseModel):
    model_config = ConfigDict(extra="forbid")

    wallet: str
    card: str | None = None


@policy("card_policy")
def card_policy(request, tables):
    """Any registered card passes; the fix names the first one. A change that puts another card
    first leaves a request carrying the old fix passing, but the fix is no longer current."""
    wallet = tables["wallets"].get(request["wallet"])
    if wallet is None or request.get("card") in wallet["cards"]:
        return None
    return Violation(
        type="USE_A_REGISTERED_CARD",
        message="pay with a registered card",
        parameters={"card": wallet["cards"][0]},
        action=Action.ADD_FIELD if request.get("card") is None else Action.REWRITE_VALUE,
        scope={"wallet": request["wallet"]},
    )


def wallet_domain() -> Domain:
    return Domain(
        name="wallets",
        tables={"wallets": TableSpec(WALLET_ROWS[0])},
        rules=(),
        routes=(Route(path="/v1/payments", request_model=Payment, policies=(card_policy,)),),
    )


shop_requests = st.fixed_dictionaries(
    {
        "client": st.sampled_from("ab"),
        "plan": st.sampled_from(["basic", "enterprise", "starter"]),
        "funding_type": st.sampled_from([None, "card", "invoice", "wire"]),
        "promo_code": st.sampled_from([None, "ENT10", "ENT20"]),
        "quantity": st.sampled_from([1, 100, 150]),
    }
)
wallet_requests = st.fixed_dictionaries(
    {
        "client": st.sampled_from("ab"),
        "wallet": st.sampled_from(["w1", "w2"]),
        "card": st.sampled_from([None, "c1", "c2", "c3"]),
    }
)
SHOP = (make_domain, "plans", PLAN_ROWS, shop_requests)
WALLETS = (wallet_domain, "wallets", WALLET_ROWS, wallet_requests)


def _frozen(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


class BruteForce:
    """The scorer's rules, written as plainly as possible (no index, no memo, no bound)."""

    def __init__(self, max_attempts: int) -> None:
        self.max_attempts = max_attempts
        self.figures: dict[str, ClientFigures] = {}
        self.streak: dict[tuple[str, str], int] = {}
        self.taught: dict[str, list[Any]] = {}

    def checked(self, client, route, request, state, findings) -> None:
        figures = self.figures.setdefault(client, ClientFigures())
        streak = self.streak.get((client, route.path), 0)
        opening = streak == 0 or streak >= self.max_attempts
        figures.requests += 1
        figures.refused += 1 if findings else 0
        if opening:
            figures.episodes += 1
            figures.first_try += 0 if findings else 1
            figures.stale_values_sent += self.stale(client, route, request, state, findings)
        else:
            figures.retries += 1
        if findings:
            self.streak[(client, route.path)] = 1 if opening else streak + 1
            for finding in findings:
                if finding.violation.parameters:
                    self.taught.setdefault(client, []).append(finding)
        else:
            self.streak.pop((client, route.path), None)

    def stale(self, client, route, request, state, findings) -> int:
        refused = {(f.violation.type, _frozen(dict(f.violation.scope))) for f in findings}
        newest: dict[tuple[str, str], Any] = {}
        for finding in self.taught.get(client, []):  # oldest first: the newest wins
            v = finding.violation
            wanted = {**v.scope, **v.parameters}
            if all(k in request and _frozen(request[k]) == _frozen(x) for k, x in wanted.items()):
                newest[(v.type, _frozen(dict(v.scope)))] = finding
        stale = 0
        for slot, finding in newest.items():
            v = finding.violation
            if slot in refused:
                stale += 1
                continue
            draft = {k: x for k, x in request.items() if k not in v.parameters}
            draft.update({k: x for k, x in v.scope.items() if k in v.parameters})
            own = tuple(p for p in route.policies if p.name == finding.policy)
            narrowed = dataclasses.replace(route, policies=own)
            now = current_fix(narrowed, draft, v.type, v.scope, state)
            stale += now is None or _frozen(now) != _frozen(dict(v.parameters))
        return stale


@settings(max_examples=60, deadline=None)
@given(st.data())
@pytest.mark.parametrize("world", [SHOP, WALLETS], ids=["shop", "wallets"])
def test_the_indexed_scorer_equals_a_brute_force_one(world, data):
    build, table, variants, requests = world
    changes = st.integers(0, len(variants) - 1)
    stream = data.draw(st.lists(st.one_of(requests, requests, changes), max_size=40))
    provider = Provider(build(), level=6)
    route = provider.domain.routes[0]
    scores, brute = ClientScores(max_attempts=3), BruteForce(max_attempts=3)
    for step in stream:
        if isinstance(step, int):
            provider.registry.reload(table, variants[step])
            continue
        payload = {k: v for k, v in step.items() if k != "client" and v is not None}
        outcome = provider.handle(route, payload)
        request = route.request_model.model_validate(payload).model_dump(mode="json")
        content = outcome.content if outcome.status == 422 else None
        scores.checked(step["client"], route, request, outcome.state, outcome.findings, content)
        brute.checked(step["client"], route, request, outcome.state, outcome.findings)
    assert scores.snapshot() == brute.figures


def test_a_lesson_is_kept_for_the_document_object_it_was_answered_as():
    provider = Provider(make_domain(), level=6)
    route = provider.domain.routes[0]
    first = provider.handle(route, {"plan": "basic"})
    again = provider.handle(route, {"plan": "basic"})
    assert again.content is first.content  # the render cache's bytes object
    lessons = Lessons(8)
    kept = lessons.of(first.findings, first.content)
    assert lessons.of(again.findings, again.content) is kept
    copy = bytes(bytearray(again.content))  # equal bytes, another object
    assert lessons.of(again.findings, copy) is not kept


def test_value_keys_tell_json_types_apart():
    keys = {value_key(v) for v in (1, 1.0, True, "1", None, [1], [1.0], {"a": 1})}
    assert len(keys) == 8
