"""Memory policies for origins without a contract (issue 37 item 1): ``ttl`` (A1T), ``verify``
(A1V) and ``learned`` (A1L), driven with problem documents that carry suggestions and no contract
field at all, as the server at level ``none`` sends them."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from invalidation_contracts.client import EvictionReason, FixMemory
from invalidation_contracts.client.events import (
    Evicted,
    NotStored,
    PolicyChosen,
    PolicyStateReset,
    Probing,
)
from invalidation_contracts.client.strategies import strategy_for
from invalidation_contracts.client.values import Observed

ORIGIN = "https://api.example"
DRAFT = {"plan": "growth"}


def problem(value: str, fix_type: str = "USE_CODE", scope: dict[str, Any] | None = None) -> Any:
    """A 422 with one suggestion and no contract field (no cache_hint, no stamps)."""
    return {
        "type": "urn:example:policy-violation",
        "title": "Policy violation",
        "status": 422,
        "detail": "use another code",
        "recovery_feedback": {
            "suggestions": [
                {
                    "type": fix_type,
                    "parameters": {"code": value},
                    "action": "rewrite_value",
                    "scope": scope or DRAFT,
                }
            ]
        },
    }


def fail(memory: FixMemory, value: str, episode: int, *, injected: tuple[str, ...] = (), **kw: Any):
    request = dict(kw.pop("request", DRAFT))
    return memory.observe(
        ORIGIN,
        Observed(status=422, body=problem(value, **kw), request=request, injected=injected),
        episode=episode,
    )


def served(memory: FixMemory, episode: int, draft: dict[str, Any] = DRAFT) -> list[str]:
    return [e.id for e in memory.lookup(ORIGIN, draft, episode=episode).entries]


@pytest.mark.parametrize(("name", "arm"), [("ttl", "A1T"), ("verify", "A1V"), ("learned", "A1L")])
def test_each_policy_is_a_strategy_named_by_its_arm_code(name, arm):
    assert strategy_for(arm).name == name and strategy_for(name).arm == arm


def test_naive_memory_stores_nothing_without_a_cache_hint():
    memory = FixMemory("naive")
    [event] = fail(memory, "A", 1).events
    assert isinstance(event, NotStored) and event.reason == "cache_hint is absent"


@pytest.mark.parametrize("policy", ["ttl", "verify", "learned"])
def test_a_policy_stores_and_serves_a_fix_without_contract_fields(policy):
    memory = FixMemory(policy)
    fail(memory, "A", 1)
    assert served(memory, 2) == ["e1"]


@pytest.mark.parametrize("policy", ["ttl", "verify", "learned"])
def test_a_policy_still_refuses_a_fix_the_server_marks_no_store(policy):
    memory = FixMemory(policy)
    body = problem("A")
    body["recovery_feedback"]["suggestions"][0]["cache_hint"] = "no-store"
    observation = memory.observe(ORIGIN, Observed(status=422, body=body, request=DRAFT), episode=1)
    assert [e.reason for e in observation.events if isinstance(e, NotStored)] == [
        "cache_hint is no-store"
    ]


def test_ttl_evicts_a_fix_past_its_lifetime():
    memory = FixMemory(strategy_for("ttl").__class__(lifetime=3))
    fail(memory, "A", 1)
    assert served(memory, 3) == ["e1"]
    lookup = memory.lookup(ORIGIN, DRAFT, episode=4)
    assert lookup.entries == ()
    [evicted] = [e for e in lookup.events if isinstance(e, Evicted)]
    assert evicted.reason is EvictionReason.MAX_AGE


def test_ttl_counts_from_the_last_time_the_server_taught_the_fix():
    memory = FixMemory(strategy_for("ttl").__class__(lifetime=3))
    fail(memory, "A", 1)
    fail(memory, "A", 3)  # taught again: the same fix
    assert served(memory, 5) == ["e1"]


def test_verify_probes_a_fix_past_its_lifetime_once_then_serves_it():
    memory = FixMemory(strategy_for("verify").__class__(lifetime=3))
    fail(memory, "A", 1)
    lookup = memory.lookup(ORIGIN, DRAFT, episode=4)
    assert lookup.entries == ()
    assert [type(e) for e in lookup.events] == [Probing]
    assert served(memory, 4) == ["e1"]  # one probe per entry and episode, not a withholding
    assert memory.stats(ORIGIN).probes == 1


def test_a_probe_answered_with_the_same_fix_keeps_it_in_service():
    memory = FixMemory(strategy_for("verify").__class__(lifetime=3))
    fail(memory, "A", 1)
    memory.lookup(ORIGIN, DRAFT, episode=4)  # probed: the request goes without it
    fail(memory, "A", 4)  # the answer: the same fix, so it is confirmed
    assert served(memory, 5) == ["e1"]
    assert memory.stats(ORIGIN).probes == 1


def test_a_probe_answered_with_another_fix_supersedes_it():
    memory = FixMemory(strategy_for("verify").__class__(lifetime=3))
    fail(memory, "A", 1)
    memory.lookup(ORIGIN, DRAFT, episode=4)
    fail(memory, "B", 4)
    [entry] = memory.entries(ORIGIN)
    assert entry.suggestion.parameters == {"code": "B"}


def test_an_accepted_injection_confirms_the_fix_for_verify():
    memory = FixMemory(strategy_for("verify").__class__(lifetime=3))
    fail(memory, "A", 1)
    memory.observe(
        ORIGIN,
        Observed(status=200, body={"ok": True}, request={**DRAFT, "code": "A"}, injected=("e1",)),
        episode=3,
    )
    assert served(memory, 5) == ["e1"]


@pytest.mark.parametrize("policy", ["verify", "learned"])
def test_a_refutation_in_one_scope_puts_the_type_in_doubt_in_every_scope(policy):
    memory = FixMemory(policy)
    other = {"plan": "starter"}
    fail(memory, "A", 1)
    fail(memory, "A", 1, scope=other, request=other)
    assert served(memory, 2, other) == ["e2"]
    fail(memory, "B", 3, injected=("e1",), request={**DRAFT, "code": "A"})  # a rotation
    lookup = memory.lookup(ORIGIN, other, episode=4)
    assert lookup.entries == ()
    [probe] = [e for e in lookup.events if isinstance(e, Probing)]
    assert probe.entry_id == "e2" and "refuted" in probe.detail or "changed" in probe.detail


def test_learned_serves_blind_until_it_has_seen_a_change():
    memory = FixMemory("learned")
    fail(memory, "A", 1)
    assert served(memory, 500) == ["e1"]


def test_learned_withholds_a_fix_before_a_periodic_change_is_due():
    memory = FixMemory("learned")
    value, serial = "v0", 1
    fail(memory, value, 1)
    for change in (10, 20, 30):
        value = f"v{change}"
        fail(memory, value, change, injected=(f"e{serial}",), request={**DRAFT, "code": "x"})
        serial += 1
    assert served(memory, 36) == [f"e{serial}"]
    summary = memory.state(ORIGIN).learner
    assert summary["types"]["USE_CODE"]["changes"][-1] == [20.0, 30.0]
    lookup = memory.lookup(ORIGIN, DRAFT, episode=38)
    assert [type(e) for e in lookup.events] == [Probing]
    assert "periodic" in lookup.events[0].detail


def test_learned_doubts_a_co_drifting_type_when_its_partner_changes():
    memory = FixMemory("learned")
    a, b = {"plan": "a"}, {"plan": "b"}
    fail(memory, "1", 1, fix_type="T1", scope=a, request=a)
    fail(memory, "1", 1, fix_type="T2", scope=b, request=b)
    # both change together after episode 5: seen at 6 and 7
    fail(memory, "2", 6, fix_type="T1", scope=a, request={**a, "code": "1"}, injected=("e1",))
    fail(memory, "2", 7, fix_type="T2", scope=b, request={**b, "code": "1"}, injected=("e2",))
    assert served(memory, 8, b) == ["e4"]
    # T1 changes again; T2's fresh entry is put in doubt before it is ever injected stale
    fail(memory, "3", 12, fix_type="T1", scope=a, request={**a, "code": "2"}, injected=("e3",))
    lookup = memory.lookup(ORIGIN, b, episode=13)
    assert lookup.entries == ()
    assert "co-drifting type T1" in lookup.events[0].detail


def test_learned_state_persists_with_the_memory(tmp_path):
    path = tmp_path / "memory.db"
    with FixMemory("learned", store=path) as memory:
        fail(memory, "A", 1)
        fail(memory, "B", 4, injected=("e1",), request={**DRAFT, "code": "A"})
    with FixMemory("learned", store=path) as memory:
        assert memory.state(ORIGIN).learner["types"]["USE_CODE"]["changes"] == [[1.0, 4.0]]


def test_unreadable_learner_state_is_reset_with_an_event_never_a_crash(tmp_path):
    path = tmp_path / "memory.db"
    with FixMemory("learned", store=path) as memory:
        fail(memory, "A", 1)
        fail(memory, "B", 4, injected=("e1",), request={**DRAFT, "code": "A"})
    db = sqlite3.connect(path)
    corrupted = 0
    for namespace, key, value in db.execute("select namespace, key, value from items").fetchall():
        if '"learner"' in value:
            junk = value.replace('"v": 1', '"v": "junk"').replace('"v":1', '"v":"junk"')
            db.execute(
                "update items set value = ? where namespace = ? and key = ?", (junk, namespace, key)
            )
            corrupted += junk != value
    db.commit()
    db.close()
    assert corrupted, "the learner state was not found in the store"
    with FixMemory("learned", store=path) as memory:
        lookup = memory.lookup(ORIGIN, DRAFT, episode=5)
        [reset] = [e for e in lookup.events if isinstance(e, PolicyStateReset)]
        assert "version 'junk'" in reset.detail
        assert lookup.entries and memory.state(ORIGIN).learner["types"] == {}


# --- choosing a policy per origin ---------------------------------------------------------------


def test_a_contract_memory_switches_an_origin_that_speaks_no_contract_automatically():
    memory = FixMemory("row", contractless="learned")
    events = fail(memory, "A", 1).events
    [chosen] = [e for e in events if isinstance(e, PolicyChosen)]
    assert (chosen.policy, chosen.reason) == (
        "learned",
        "automatic: suggestions without any contract field",
    )
    assert memory.state(ORIGIN).policy == "learned"
    assert served(memory, 2) == ["e1"]


def test_without_a_contractless_policy_a_contract_memory_keeps_nothing_unhinted():
    memory = FixMemory("row")
    events = fail(memory, "A", 1).events
    assert [e.reason for e in events if isinstance(e, NotStored)] == ["cache_hint is absent"]
    assert memory.state(ORIGIN).policy is None


def test_an_origin_that_speaks_the_contract_is_not_switched():
    memory = FixMemory("row", contractless="learned")
    body = problem("A")
    body["recovery_feedback"]["suggestions"][0]["cache_hint"] = "cacheable"
    body["recovery_feedback"]["suggestions"][0]["table"] = "codes"
    body.update(table_versions={"codes": "1"}, contract_seq=1, contract_epoch="e")
    memory.observe(ORIGIN, Observed(status=422, body=body, request=DRAFT), episode=1)
    assert memory.state(ORIGIN).policy is None


def test_a_policy_is_chosen_explicitly_per_origin():
    memory = FixMemory("row")
    [chosen] = memory.set_policy(ORIGIN, "A1V").events
    assert isinstance(chosen, PolicyChosen) and (chosen.policy, chosen.reason) == (
        "verify",
        "explicit",
    )
    fail(memory, "A", 1)
    fail(memory, "A", 1, scope={"plan": "x"}, request={"plan": "x"})
    assert served(memory, 2) == ["e1"]
    assert memory.state("https://other.example").policy is None


def test_only_a_contract_less_policy_can_be_chosen_for_an_origin():
    with pytest.raises(ValueError, match="not a contract-less policy"):
        FixMemory("row").set_policy(ORIGIN, "table")


def test_the_memory_says_which_policy_governs_an_origin_in_its_stats(tmp_path):
    from invalidation_contracts.cli.operator import origin_stats

    path = tmp_path / "memory.db"
    with FixMemory("row", store=path, contractless="ttl") as memory:
        fail(memory, "A", 1)
        memory.set_policy("https://contract.example", "verify")
    rows = {row["origin"]: row for row in origin_stats(path)}
    assert rows[ORIGIN]["policy"] == "ttl"
    assert rows["https://contract.example"]["policy"] == "verify"


def test_learned_assumes_a_period_from_two_changes_and_probes_when_the_third_is_due():
    memory = FixMemory("learned")
    fail(memory, "v0", 1)
    fail(memory, "v1", 10, injected=("e1",), request={**DRAFT, "code": "v0"})
    fail(memory, "v2", 19, injected=("e2",), request={**DRAFT, "code": "v1"})
    assert served(memory, 25) == ["e3"]
    lookup = memory.lookup(ORIGIN, DRAFT, episode=27)
    assert lookup.entries == () and "periodic change is due" in lookup.events[0].detail


def test_a_gap_that_disagrees_drops_the_period():
    memory = FixMemory("learned")
    fail(memory, "v0", 1)
    for serial, (value, at) in enumerate([("v1", 10), ("v2", 19), ("v3", 40)], start=1):
        fail(memory, value, at, injected=(f"e{serial}",), request={**DRAFT, "code": "x"})
    cast = memory.state(ORIGIN).learner["types"]["USE_CODE"]
    assert len(cast["changes"]) == 3
    from invalidation_contracts.client.learner import period

    assert period([(1.0, 10.0), (10.0, 19.0), (19.0, 40.0)]) is None
    assert served(memory, 48) == ["e4"]
