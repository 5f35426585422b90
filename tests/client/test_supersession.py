"""Supersession judged on the draft (issue 23 item 3).

A fix keyed on the field it rewrites (``token: tok_x → tok_c1``, scoped by ``token: tok_x``)
leaves the request carrying its own value. When the server refuses that request and teaches
another value for the field, the injected entry must go — judged against the draft before
injection (``token: tok_x``), not the rewritten request (``token: tok_c1``) — under every memory
arm, naive included, so no arm re-injects a fix the server has just refuted.
"""

from __future__ import annotations

import pytest

from invalidation_contracts.client import Evicted, EvictionReason, FixMemory
from invalidation_contracts.client.admission import draft_before
from invalidation_contracts.client.values import Observed

STORING_ARMS = [
    "naive",
    "table",
    "row",
    "row+consumers",
    "row+graph",
    "rules-oracle",
    "rules-stamp",
    "rules-stamp+vectors",
]
DRAFT = {"plan": "growth", "token": "tok_x"}


@pytest.fixture
def bank(fake_origin):
    return fake_origin(
        {
            "tokens": {"tok_x": {"funding": "debit"}, "tok_c1": {"funding": "credit"}},
            "recommended": {"visa": {"token": "tok_c1"}},
        }
    )


def credit_fix(server, scope_token, to_token):
    return server.fix(
        "USE_CREDIT",
        {"token": to_token},
        scope={"token": scope_token},
        reads={"tokens": [scope_token], "recommended": ["visa"]},
        action="conditional_rewrite",
    )


def learned(arm, server, driver_class):
    memory = FixMemory(arm)
    drive = driver_class(memory, server)
    drive.fail(credit_fix(server, "tok_x", "tok_c1"), request=DRAFT)
    return memory, drive


def injected_failure(memory, drive, new_fix):
    """Inject the live fix into DRAFT, send it, and observe (and settle) the server's refusal."""
    [entry] = memory.lookup(drive.origin, DRAFT).entries
    sent = {**DRAFT, **entry.suggestion.parameters}
    return entry, drive.fail(new_fix, request=sent, injected=[entry.id])


@pytest.mark.parametrize("arm", STORING_ARMS)
def test_a_rewrite_keyed_fix_is_retired_after_drift_under_every_memory_arm(arm, bank, driver_class):
    memory, drive = learned(arm, bank, driver_class)
    bank.update("tokens", "tok_c1", {"funding": "closed"})
    bank.update("tokens", "tok_c2", {"funding": "credit"})

    stale, events = injected_failure(memory, drive, credit_fix(bank, "tok_c1", "tok_c2"))

    assert stale.id not in {e.id for e in memory.entries(bank.url)}
    assert [e.id for e in memory.lookup(bank.url, DRAFT).entries] == []
    [gone] = [e for e in events if isinstance(e, Evicted) and e.entry_id == stale.id]
    if arm == "naive":
        assert gone.reason is EvictionReason.SUPERSEDED


@pytest.mark.parametrize("arm", [a for a in STORING_ARMS if a != "naive"])
def test_a_refused_rewrite_keyed_fix_is_contradicted_when_no_stamp_moved(arm, bank, driver_class):
    memory, drive = learned(arm, bank, driver_class)

    stale, events = injected_failure(memory, drive, credit_fix(bank, "tok_c1", "tok_c2"))

    [gone] = [e for e in events if isinstance(e, Evicted) and e.entry_id == stale.id]
    assert gone.reason is EvictionReason.CONTRADICTED


def test_a_fix_injected_into_a_draft_its_scope_did_not_match_is_not_contradicted(bank):
    memory = FixMemory("row")
    memory.observe(
        bank.url, Observed(DRAFT, 422, bank.failure(credit_fix(bank, "tok_x", "tok_c1")))
    )
    [entry] = memory.entries(bank.url)
    sent = {"plan": "growth", "token": "tok_other"}  # the adapter patched the wrong draft

    memory.observe(
        bank.url,
        Observed(
            sent, 422, bank.failure(credit_fix(bank, "tok_other", "tok_c2")), injected=[entry.id]
        ),
    )

    assert entry.id in {e.id for e in memory.entries(bank.url)}


def test_no_memory_neither_stores_nor_retires_anything(bank):
    memory = FixMemory("none")
    obs = memory.observe(
        bank.url, Observed(DRAFT, 422, bank.failure(credit_fix(bank, "tok_x", "tok_c1")))
    )
    assert memory.entries(bank.url) == [] and not obs.of(Evicted)


def test_the_draft_before_injection_restores_the_scope_value_of_a_field_the_fix_wrote(bank):
    memory = FixMemory("row")
    memory.observe(
        bank.url, Observed(DRAFT, 422, bank.failure(credit_fix(bank, "tok_x", "tok_c1")))
    )
    [entry] = memory.entries(bank.url)

    assert draft_before({"plan": "growth", "token": "tok_c1"}, entry) == DRAFT
    assert draft_before({"plan": "growth", "token": "tok_c9"}, entry) == {
        "plan": "growth",
        "token": "tok_c9",
    }
