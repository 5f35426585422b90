"""Pinning: a server that never announces a change cannot keep a stale fix in memory forever.

Attack (paper §6.5): validity is asserted, not verified — a server that never bumps a version (or
that only touches, so every stamp move is "no row changed") pins a fix indefinitely. Defence: a
client freshness ceiling, ``default_max_age_s``, counted from when the fix was learned; past it
the entry is evicted (reason ``max-age``) and the next request re-derives the fix from the server.
"""

from __future__ import annotations

from typing import Any

import pytest
from trust_helpers import (
    CATALOG,
    GROWTH,
    OPERATION,
    ORIGIN,
    PLAIN,
    TOKEN,
    Session,
    TamperingTransport,
    acme_app,
    asgi,
    rotate_growth_code,
    touching_app,
)

from invalidation_contracts.client.entries import EvictionReason
from invalidation_contracts.client.memory import FixMemory
from invalidation_contracts.client.trust import TrustPolicy

HOUR = 3600
TEN_YEARS = 10 * 365 * 24 * HOUR


def never_bumps():
    """Rewrites every response's contract to the first one the client saw: nothing ever moves."""
    first: dict[str, Any] = {}

    def freeze(body: dict[str, Any]) -> dict[str, Any]:
        if not first:
            first.update(
                {
                    k: body[k]
                    for k in ("table_versions", "contract_seq", "contract_epoch", "rules_version")
                }
            )
        frozen = {**body, **first}
        feedback = body.get("recovery_feedback")
        if feedback:
            versions = first["table_versions"]
            frozen["recovery_feedback"] = {
                "suggestions": [
                    {
                        **s,
                        "tables": [
                            {**t, "version": versions[t["table"]]} for t in s.get("tables", [])
                        ],
                    }
                    for s in feedback["suggestions"]
                ]
            }
        return frozen

    return freeze


def promo_code(session: Session) -> list[str]:
    return [
        e.suggestion.parameters["promo_code"]
        for e in session.memory.lookup(ORIGIN, GROWTH, operation=OPERATION).entries
    ]


def learn_then_rotate_silently(memory: FixMemory) -> tuple[Session, Any]:
    app = acme_app()
    session = Session(memory, TamperingTransport(asgi(app), never_bumps()))
    session.post(GROWTH)
    rotate_growth_code(app)
    session.post(PLAIN)
    return session, app


def test_a_server_that_never_bumps_pins_a_stale_fix_without_a_ceiling(clock):
    session, _ = learn_then_rotate_silently(FixMemory("row", clock=clock))
    clock.advance(TEN_YEARS)

    assert promo_code(session) == ["SUMMERSALE25"]  # the rotated-out code, served forever


def test_the_client_ceiling_evicts_the_pinned_fix_and_the_server_gives_the_current_one(clock):
    memory = FixMemory("row", clock=clock, trust=TrustPolicy(default_max_age_s=HOUR))
    session, _ = learn_then_rotate_silently(memory)
    clock.advance(HOUR - 1)
    assert promo_code(session) == ["SUMMERSALE25"]

    clock.advance(2)
    assert promo_code(session) == []
    (evicted,) = session.memory.tombstones(ORIGIN)
    assert evicted.reason is EvictionReason.MAX_AGE
    assert evicted.detail == "learned more than default_max_age_s=3600 ago"

    session.post(GROWTH)
    assert promo_code(session) == ["WINTERLAUNCH26"]


def test_restamps_from_a_touching_server_do_not_extend_the_ceiling(clock):
    app = touching_app(CATALOG.domain, registry=CATALOG.domain.registry(), admin_token=TOKEN)
    memory = FixMemory("row", clock=clock, trust=TrustPolicy(default_max_age_s=HOUR))
    session = Session(memory, asgi(app))
    session.post(GROWTH)
    for _ in range(3):
        clock.advance(HOUR / 3)
        session.post(PLAIN)
    (entry,) = memory.entries(ORIGIN)
    assert entry.restamps == 3 and clock.now - entry.validated_at < HOUR

    clock.advance(1)
    assert promo_code(session) == []
    assert [t.reason for t in memory.tombstones(ORIGIN)] == [EvictionReason.MAX_AGE]


def test_a_longer_max_age_from_the_server_does_not_lift_the_client_ceiling(clock):
    def forever(body: dict[str, Any]) -> dict[str, Any]:
        feedback = body.get("recovery_feedback")
        if feedback:
            body["recovery_feedback"] = {
                "suggestions": [{**s, "max_age_s": TEN_YEARS} for s in feedback["suggestions"]]
            }
        return body

    memory = FixMemory("row", clock=clock, trust=TrustPolicy(default_max_age_s=HOUR))
    session = Session(memory, TamperingTransport(asgi(acme_app()), forever))
    session.post(GROWTH)
    clock.advance(HOUR + 1)

    assert promo_code(session) == []


def test_a_shorter_max_age_from_the_server_still_applies(clock):
    def brief(body: dict[str, Any]) -> dict[str, Any]:
        feedback = body.get("recovery_feedback")
        if feedback:
            body["recovery_feedback"] = {
                "suggestions": [{**s, "max_age_s": 60} for s in feedback["suggestions"]]
            }
        return body

    memory = FixMemory("row", clock=clock, trust=TrustPolicy(default_max_age_s=HOUR))
    session = Session(memory, TamperingTransport(asgi(acme_app()), brief))
    session.post(GROWTH)
    clock.advance(61)

    assert promo_code(session) == []
    assert [t.detail for t in memory.tombstones(ORIGIN)] == ["older than max_age_s=60"]


def test_the_ceiling_must_not_be_negative():
    with pytest.raises(ValueError, match="default_max_age_s"):
        TrustPolicy(default_max_age_s=-1)
