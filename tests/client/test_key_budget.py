"""The budget on dependency keys (issue 38, H2): a fix whose vector names more row keys than
``max_keys_per_entry``, or that would take its origin past ``max_keys_per_origin``, is stored at
table granularity with a ``Coarsened`` event: any change to its tables evicts it, and the memory
holds no key of it. Checked against a brute-force count of every key the memory holds."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.client import Coarsened, FixMemory, Limits
from invalidation_contracts.client.events import NotStored, Refused
from invalidation_contracts.client.limits import WideKeys, parse_json
from invalidation_contracts.client.values import Answer, Observed
from invalidation_contracts.protocol.wirecost import wire_cost

ORIGIN = "https://keys.example"


def failure(name: str, keys: list[str], table: str = "t") -> dict[str, Any]:
    suggestion = {
        "type": name,
        "action": "add_field",
        "parameters": {"note": name},
        "cache_hint": "cacheable",
        "scope": {"sku": name},
        "tables": [{"table": table, "version": "1.0.0", "keys": keys}],
    }
    return {
        "type": "urn:x",
        "title": "t",
        "status": 422,
        "success": False,
        "recovery_feedback": {"suggestions": [suggestion]},
        "table_versions": {table: "1.0.0", "u": "1.0.0"},
        "contract_seq": 0,
        "contract_epoch": "e",
    }


def teach(
    memory: FixMemory,
    name: str,
    keys: list[str],
    table: str = "t",
    *,
    parsed: bool = False,
    membership: bool = False,
) -> Any:
    """Teach one fix; ``parsed``: through the transport's parse of the body's bytes (wide key
    lists dropped there); ``membership``: the keys as a key-set read."""
    body = failure(name, keys, table)
    if membership:
        body["recovery_feedback"]["suggestions"][0]["tables"][0] = {
            "table": table,
            "version": "1.0.0",
            "membership": {"keys": keys},
        }
    if parsed:
        raw = json.dumps(body).encode()
        body, _ = parse_json(raw, memory.limits.max_json_depth, memory.limits.max_keys_per_entry)
    return memory.observe(ORIGIN, Observed({"sku": name}, 422, body), operation="op")


def held_keys(memory: FixMemory) -> int:
    """The oracle: every row key of every live entry, dependencies and stored suggestion."""
    total = 0
    for entry in memory.entries(ORIGIN):
        total += sum(len(d.keys or ()) for d in entry.dependencies)
        assert sum(len(t.keys or ()) for t in entry.suggestion.tables or ()) <= sum(
            len(d.keys or ()) for d in entry.dependencies
        )
    return total


def test_a_fix_naming_more_keys_than_the_entry_cap_is_kept_at_table_granularity():
    with FixMemory("row", limits=Limits(max_keys_per_entry=10)) as memory:
        obs = teach(memory, "wide", [f"k{i}" for i in range(1000)])

        (event,) = obs.of(Coarsened)
        assert (event.bound, event.cap, event.actual, event.tables) == (
            "max_keys_per_entry",
            10,
            1000,
            ("t",),
        )
        (entry,) = memory.entries(ORIGIN)
        assert [(d.table, d.keys) for d in entry.dependencies] == [("t", None)]
        assert entry.suggestion.tables[0].keys is None and held_keys(memory) == 0


def test_a_coarsened_fix_is_evicted_by_a_change_to_any_row_of_its_table():
    with FixMemory("row", limits=Limits(max_keys_per_entry=2)) as memory:
        teach(memory, "wide", ["a", "b", "c"])
        feed = {
            "contract_epoch": "e",
            "since": 0,
            "last_seq": 1,
            "rows": [
                {
                    "seq": 1,
                    "table": "t",
                    "key": "zzz-not-named",
                    "op": "changed",
                    "old_version": "1.0.0",
                    "new_version": "1.1.0",
                }
            ],
            "tables": [{"seq": 1, "table": "t", "old_version": "1.0.0", "new_version": "1.1.0"}],
        }
        body = {"success": True, "table_versions": {"t": "1.1.0"}, "contract_seq": 1}
        obs = memory.observe(ORIGIN, Observed(None, 200, {**body, "contract_epoch": "e"}))
        for need in obs.needs:
            memory.answer(need, Answer(200, feed))
        assert memory.entries(ORIGIN) == []


def test_a_fix_within_the_entry_cap_keeps_its_keys():
    with FixMemory("row", limits=Limits(max_keys_per_entry=10)) as memory:
        obs = teach(memory, "narrow", ["a", "b"])
        assert obs.of(Coarsened) == [] and held_keys(memory) == 2


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from("abcdef"), st.integers(min_value=0, max_value=12), st.booleans()),
        max_size=12,
    ),
    st.integers(min_value=1, max_value=8),
    st.integers(min_value=1, max_value=30),
    st.booleans(),
)
def test_the_keys_an_origin_holds_follow_a_brute_force_budget(
    lessons, per_entry, per_origin, parsed
):
    """Any sequence of fixes (new ones, replacements, restamps; row keys or key sets) against a
    model that counts every key held: the same fixes coarsened, by the same bound, with the same
    count, and the same keys held, whether the lists over the entry cap were dropped as the body
    was parsed (``parsed``) or read and coarsened after."""
    limits = Limits(max_keys_per_entry=per_entry, max_keys_per_origin=per_origin)
    model: dict[str, int] = {}  # fix name -> keys its entry holds
    with FixMemory("row", limits=limits) as memory:
        for name, width, membership in lessons:
            held = sum(model.values())  # the entry a fix replaces still counts while it is judged
            bound = None
            if width > per_entry:
                bound = "max_keys_per_entry"
            elif width and held + width > per_origin:
                bound = "max_keys_per_origin"
            keys = [f"{name}{i}" for i in range(width)]
            obs = teach(memory, name, keys, parsed=parsed, membership=membership)
            model[name] = 0 if bound else width

            assert [(e.bound, e.tables) for e in obs.of(Coarsened)] == (
                [(bound, ("t",))] if bound else []
            )
            if bound == "max_keys_per_entry":
                assert [e.actual for e in obs.of(Coarsened)] == [width]
            assert {e.key.type: e.row_keys for e in memory.entries(ORIGIN)} == model
            assert held_keys(memory) == sum(model.values()) <= per_origin


# -- lists over the entry cap are dropped as the body is parsed (the agent's peak RSS) ------------


def test_a_key_list_over_the_entry_cap_is_dropped_as_the_body_is_parsed():
    body = failure("wide", [f"k{i}" for i in range(11)])
    body["recovery_feedback"]["suggestions"][0]["tables"].append(
        {"table": "u", "version": "1.0.0", "keys": ["a", "b"]}
    )

    parsed, _ = parse_json(json.dumps(body).encode(), 128, 10)

    wide, narrow = parsed["recovery_feedback"]["suggestions"][0]["tables"]
    assert isinstance(wide["keys"], WideKeys) and wide["keys"].count == 11
    assert narrow["keys"] == ["a", "b"]


@pytest.mark.parametrize("where", ["parameters", "scope"])
def test_a_value_shaped_like_a_wide_dependency_elsewhere_is_not_stored_altered(where):
    """The parse cannot tell where an object sits: a fix value shaped like an over-budget
    dependency item loses its list, so the fix is refused as malformed, never stored changed."""
    body = failure("odd", ["a"])
    value = {"table": "t", "version": "1", "keys": [f"k{i}" for i in range(11)]}
    body["recovery_feedback"]["suggestions"][0][where]["note"] = value
    with FixMemory("row", limits=Limits(max_keys_per_entry=10)) as memory:
        parsed, _ = parse_json(json.dumps(body).encode(), 128, 10)
        obs = memory.observe(ORIGIN, Observed({"sku": "odd"}, 422, parsed), operation="op")

        assert memory.entries(ORIGIN) == []
        assert [e.reason.split(":")[0] for e in obs.of(NotStored)] == ["malformed suggestion"]


def test_the_wire_cost_counts_the_keys_dropped_as_the_body_was_parsed():
    body = failure("wide", [f"k{i}-é" for i in range(300)])
    raw = json.dumps(body).encode()

    parsed, _ = parse_json(raw, 128, 10)

    assert wire_cost(parsed) == wire_cost(json.loads(raw))


def test_a_suggestion_over_its_byte_cap_by_keys_dropped_at_parse_is_still_refused():
    limits = Limits(max_keys_per_entry=10, max_suggestion_bytes=2_000)
    with FixMemory("row", limits=limits) as memory:
        obs = teach(memory, "big", [f"key-{i:05d}" for i in range(500)], parsed=True)

        assert [e.bound for e in obs.of(Refused)] == ["max_suggestion_bytes"]
        assert memory.entries(ORIGIN) == []
