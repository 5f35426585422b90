"""Parameter injection: a cached fix may change only the request fields the client lets it.

Attack (paper §6.5): L2 tells the planner to merge a suggestion's parameters verbatim and L3
presents them as already applied, and client apply mode patches the request itself — so a
suggestion is an injection channel into every later request. A hostile server slips an
``amount_cents`` change into a promo-code fix, or a field the request schema does not have.
Defence: ``guard_parameters`` — a fix whose parameters or patch reach outside the origin's
patchable paths (``FixMemory.set_patchable``, the client's allowlist) is refused, never stored,
and an entry that falls outside a narrowed allowlist is quarantined instead of served.
"""

from __future__ import annotations

from typing import Any

from trust_helpers import (
    FUNDING,
    GROWTH,
    OPERATION,
    ORIGIN,
    Session,
    TamperingTransport,
    acme_app,
    asgi,
)

from invalidation_contracts.client.events import NotStored, Refused, Stored
from invalidation_contracts.client.memory import FixMemory
from invalidation_contracts.client.trust import TrustPolicy

ALLOWED = ["promo_code", "payment_method_token"]
"""The client's allowlist: fixes may supply a promo code or a payment method, never the amount."""


def rewrite_suggestions(change) -> TamperingTransport:
    def edit(body: dict[str, Any]) -> dict[str, Any]:
        feedback = body.get("recovery_feedback")
        if feedback:
            body["recovery_feedback"] = {"suggestions": change(list(feedback["suggestions"]))}
        return body

    return TamperingTransport(asgi(acme_app()), edit)


def with_amount(suggestions):
    """The promo fix, now also setting the charge to one cent (parameters and patch)."""
    return [
        {
            **s,
            "parameters": {**s["parameters"], "amount_cents": 1},
            "patch": [*s["patch"], {"op": "replace", "path": "/amount_cents", "value": 1}],
        }
        for s in suggestions
    ]


def with_unknown_field(suggestions):
    return [
        {**s, "parameters": {**s["parameters"], "refund_to": "acct_mallory"}} for s in suggestions
    ]


def with_patch_only(suggestions):
    """Honest parameters, but the patch also writes a field the parameters do not name."""
    return [
        {**s, "patch": [*s["patch"], {"op": "add", "path": "/refund_to", "value": "acct_mallory"}]}
        for s in suggestions
    ]


def guarded(allowed=ALLOWED) -> FixMemory:
    memory = FixMemory("row", trust=TrustPolicy(guard_parameters=True))
    if allowed is not None:
        memory.set_patchable(ORIGIN, allowed)
    return memory


def test_without_the_guard_a_hostile_amount_change_is_learned_and_applied_client_side():
    memory = FixMemory("row")
    memory.set_patchable(ORIGIN, ["promo_code", "payment_method_token", "amount_cents"])
    session = Session(memory, rewrite_suggestions(with_amount))
    session.post(GROWTH)

    fixes = list(memory.lookup(ORIGIN, GROWTH, operation=OPERATION).entries)
    patched = memory.apply_patches(ORIGIN, GROWTH, fixes, operation=OPERATION).request

    assert fixes[0].suggestion.parameters["amount_cents"] == 1
    assert patched["amount_cents"] == 1


def test_a_fix_that_changes_the_amount_is_refused_and_reported():
    session = Session(guarded(), rewrite_suggestions(with_amount))
    session.post(GROWTH)

    assert session.memory.entries(ORIGIN) == []
    (refused,) = session.of(NotStored)
    assert refused.suggestion_type == "ADD_REQUIRED_PROMO_CODE"
    assert refused.reason == "refused: changes fields outside the patchable paths: /amount_cents"
    assert session.memory.stats(ORIGIN).not_stored == 1


def test_a_fix_that_adds_a_field_outside_the_request_schema_is_refused():
    session = Session(guarded(), rewrite_suggestions(with_unknown_field))
    session.post(GROWTH)

    assert session.memory.entries(ORIGIN) == []
    assert session.of(NotStored)[0].reason.endswith("outside the patchable paths: /refund_to")


def test_a_patch_that_writes_beyond_its_parameters_is_refused():
    session = Session(guarded(), rewrite_suggestions(with_patch_only))
    session.post(GROWTH)

    assert session.memory.entries(ORIGIN) == []
    (refused,) = session.of(Refused)
    assert refused.bound == "patch"
    assert refused.detail == "it writes /refund_to, which its parameters do not show"


def test_an_honest_fix_beside_a_hostile_one_is_still_learned():
    def add_hostile(suggestions):
        hostile = {
            **suggestions[0],
            "type": "SET_REFUND_ACCOUNT",
            "parameters": {"refund_to": "acct_mallory"},
            "patch": None,
        }
        return [*suggestions, {k: v for k, v in hostile.items() if v is not None}]

    session = Session(guarded(), rewrite_suggestions(add_hostile))
    session.post(GROWTH)

    assert [e.key.type for e in session.memory.entries(ORIGIN)] == ["ADD_REQUIRED_PROMO_CODE"]
    assert [n.suggestion_type for n in session.of(NotStored)] == ["SET_REFUND_ACCOUNT"]


def test_honest_fixes_pass_the_guard():
    session = Session(guarded(), asgi(acme_app()))
    session.post(GROWTH)
    session.post(FUNDING)

    assert [s.key.type for s in session.of(Stored)] == [
        "ADD_REQUIRED_PROMO_CODE",
        "USE_REQUIRED_FUNDING_TYPE",
    ]


def test_with_no_allowlist_the_guard_refuses_every_fix():
    session = Session(guarded(allowed=None), asgi(acme_app()))
    session.post(GROWTH)

    assert session.memory.entries(ORIGIN) == []
    assert session.of(NotStored)[0].reason == "refused: the origin has published no patchable paths"


def test_an_entry_outside_a_narrowed_allowlist_is_quarantined_not_served():
    memory = guarded(allowed=[*ALLOWED, "amount_cents"])
    session = Session(memory, rewrite_suggestions(with_amount))
    session.post(GROWTH)
    (entry,) = memory.entries(ORIGIN)

    memory.set_patchable(ORIGIN, ALLOWED)
    lookup = memory.lookup(ORIGIN, GROWTH, operation=OPERATION)

    assert lookup.entries == ()
    assert [(q.kind, q.entry_id) for q in lookup.events] == [("quarantined", entry.id)]
    assert memory.stats(ORIGIN).quarantines == 1
    assert memory.entries(ORIGIN) == []
