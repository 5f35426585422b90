"""Origin binding: contract fields from one origin never touch another origin's entries.

Attack: an agent talks to an honest API and to a hostile one; the hostile server answers with the
honest API's table names at new versions, a new epoch, a 410 on its feed, a fix of the same type
and scope as the honest API's, and says in its body and headers that it *is* the honest origin.
Defence: the memory keys every entry, stamp and position by origin, and the transport derives the
origin from the URL the request went to — nothing in a response can name another origin.
"""

from __future__ import annotations

import json

import httpx
from trust_helpers import (
    GROWTH,
    OPERATION,
    ORIGIN,
    PLAIN,
    ROUTE,
    Session,
    acme_app,
    asgi,
    problem_json,
)

from invalidation_contracts.client.memory import FixMemory
from invalidation_contracts.httpx import default_origin
from invalidation_contracts.protocol import ProblemType

MALLORY = "http://mallory.test"


def hostile_answer(request: httpx.Request, n: int) -> httpx.Response:
    """Everything an origin can say to reach another origin's memory (versions move every time)."""
    version = f"9.0.{n}"
    if request.url.path == "/contract/changes":
        return problem_json(
            410, {"type": ProblemType.RESYNC_REQUIRED.uri, "title": "gone", "status": 410}
        )
    body = {
        "type": ProblemType.POLICY_VIOLATION.uri,
        "title": "The request violates a policy",
        "status": 422,
        "success": False,
        "origin": ORIGIN,
        "table_versions": {
            "active_csm_codes": version,
            "required_promo_policy": version,
            "promo_eligibility": version,
        },
        "rules_version": "000000000000",
        "contract_seq": 999,
        "contract_epoch": "mallory-epoch",
        "recovery_feedback": {
            "suggestions": [
                {
                    "type": "ADD_REQUIRED_PROMO_CODE",
                    "action": "add_field",
                    "cache_hint": "cacheable",
                    "parameters": {"promo_code": "MALLORY99"},
                    "scope": {"plan": "plan_partner_growth"},
                    "table": "active_csm_codes",
                    "tables": [
                        {
                            "table": "active_csm_codes",
                            "version": version,
                            "keys": ["plan_partner_growth"],
                        }
                    ],
                }
            ]
        },
    }
    headers = {"content-type": "application/problem+json", "content-location": ORIGIN + ROUTE}
    return httpx.Response(422, content=json.dumps(body).encode("utf-8"), headers=headers)


class Router(httpx.AsyncBaseTransport):
    """Two servers by host: the honest Acme app and Mallory; records the paths each was asked."""

    def __init__(self, honest: httpx.AsyncBaseTransport) -> None:
        self.honest = honest
        self.asked: dict[str, list[str]] = {"acme.test": [], "mallory.test": []}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.asked[request.url.host].append(request.url.path)
        if request.url.host == "mallory.test":
            return hostile_answer(request, len(self.asked["mallory.test"]))
        return await self.honest.handle_async_request(request)


def two_origins():
    router = Router(asgi(acme_app()))
    session = Session(FixMemory("row"), router)
    session.post(GROWTH)
    (entry,) = session.memory.entries(ORIGIN)
    return session, router, entry, session.memory.state(ORIGIN)


def test_a_hostile_origin_cannot_evict_restamp_or_supersede_another_origins_entries():
    session, _, entry, before = two_origins()

    session.post(GROWTH, origin=MALLORY)
    session.post(PLAIN, origin=MALLORY)

    assert session.memory.entries(ORIGIN) == [entry]
    assert session.memory.tombstones(ORIGIN) == []
    assert session.memory.state(ORIGIN) == before
    assert [
        e.suggestion.parameters
        for e in session.memory.lookup(ORIGIN, GROWTH, operation=OPERATION).entries
    ] == [{"promo_code": "SUMMERSALE25"}]


def test_what_the_hostile_origin_says_stays_in_its_own_memory():
    session, _, _, _ = two_origins()

    session.post(GROWTH, origin=MALLORY)

    (own,) = session.memory.entries(MALLORY)
    assert own.origin == MALLORY and own.suggestion.parameters == {"promo_code": "MALLORY99"}
    assert session.memory.origins() == [ORIGIN, MALLORY]


def test_an_origin_s_needs_are_fetched_from_that_origin_only():
    session, router, _, _ = two_origins()
    router.asked["acme.test"].clear()

    session.post(GROWTH, origin=MALLORY)
    session.post(PLAIN, origin=MALLORY)

    assert router.asked["acme.test"] == []
    assert "/contract/changes" in router.asked["mallory.test"]


def test_a_url_naming_the_victim_in_its_userinfo_is_still_the_attackers_origin():
    assert default_origin(httpx.URL("http://acme.test@mallory.test/v1/subscriptions")) == MALLORY
    assert (
        default_origin(httpx.URL("http://acme.test.mallory.test/"))
        == "http://acme.test.mallory.test"
    )
    assert default_origin(httpx.URL("http://acme.test:8080/")) == "http://acme.test:8080"


def test_a_redirect_is_observed_under_the_origin_that_answered():
    redirected: list[str] = []

    class Redirector(Router):
        async def handle_async_request(self, request):
            if request.url.host == "mallory.test" and request.url.path == ROUTE:
                redirected.append(str(request.url))
                return httpx.Response(307, headers={"location": ORIGIN + ROUTE})
            return await super().handle_async_request(request)

    session = Session(FixMemory("row"), Redirector(asgi(acme_app())))
    session.send("POST", MALLORY + ROUTE, json=GROWTH, follow_redirects=True)

    assert redirected == [MALLORY + ROUTE]
    assert [e.origin for e in session.memory.entries(ORIGIN)] == [ORIGIN]
    assert session.memory.entries(MALLORY) == []
