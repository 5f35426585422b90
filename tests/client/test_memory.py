"""The fix memory's own rules: what it stores, how it keys and serves, what it records."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from invalidation_contracts.client import (
    Evicted,
    EvictionReason,
    FixMemory,
    Ignored,
    NotStored,
    Served,
    SQLiteStore,
    Stored,
)
from invalidation_contracts.client.stats import contract_bytes
from invalidation_contracts.client.values import Answer, Observed
from invalidation_contracts.protocol.models import ChangesFeed
from invalidation_contracts.protocol.wirecost import wire_cost


def test_only_cacheable_suggestions_are_stored(server):
    memory = FixMemory("row")
    body = server.failure(
        server.fix("ROUND", {"amount": 10}, cache_hint="recompute"),
        server.fix("SECRET", {"otp": "1"}, cache_hint="no-store"),
        server.fix("ADD_PROMO", {"promo_code": "SUMMER"}, reads={"codes": ["plan_a"]}),
    )

    obs = memory.observe(server.url, Observed(None, 422, body))

    assert [(e.suggestion_type, e.reason) for e in obs.of(NotStored)] == [
        ("ROUND", "cache_hint is recompute"),
        ("SECRET", "cache_hint is no-store"),
    ]
    assert [e.type for e in memory.entries(server.url)] == ["ADD_PROMO"]


def test_suggestions_of_a_successful_response_are_not_stored(server):
    memory = FixMemory("row")
    body = server.success() | {
        "recovery_feedback": {"suggestions": [server.fix("X", {"a": 1}, reads={"codes": None})]}
    }

    memory.observe(server.url, Observed(None, 200, body))

    assert memory.entries(server.url) == []


def test_an_entry_is_keyed_by_origin_type_and_canonical_scope(server):
    memory = FixMemory("row")
    memory.observe(
        server.url,
        Observed(
            None,
            422,
            server.failure(
                server.fix(
                    "ADD_PROMO",
                    {"promo_code": "S"},
                    scope={"plan": "a", "region": "eu"},
                    reads={"codes": ["a"]},
                )
            ),
        ),
    )

    key = memory.entries(server.url)[0].key

    assert (key.origin, key.type, key.scope) == (
        server.url,
        "ADD_PROMO",
        '{"plan":"a","region":"eu"}',
    )


def test_an_entry_is_relevant_when_every_scope_field_equals_the_drafts(server, standard_fixes):
    memory = FixMemory("row")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))

    assert [
        e.id for e in memory.lookup(server.url, {"plan": "plan_b", "token": "tok_x"}).entries
    ] == [
        "e2",
        "e3",
    ]
    assert list(memory.lookup(server.url, {"plan": "plan_c"}).entries) == []


def test_an_entry_without_scope_is_relevant_to_every_draft(server):
    memory = FixMemory("row")
    memory.observe(
        server.url,
        Observed({}, 422, server.failure(server.fix("ALWAYS", {"v": 1}, reads={"codes": None}))),
    )

    assert [e.type for e in memory.lookup(server.url, {}).entries] == ["ALWAYS"]


def test_a_new_fix_with_the_same_key_supersedes_the_old_one(server):
    memory = FixMemory("row")
    fix = server.fix(
        "ADD_PROMO", {"promo_code": "SUMMER"}, scope={"plan": "plan_a"}, reads={"codes": ["plan_a"]}
    )
    memory.observe(server.url, Observed(None, 422, server.failure(fix)))
    fix["parameters"] = {"promo_code": "WINTER"}

    obs = memory.observe(server.url, Observed(None, 422, server.failure(fix)))

    assert [(e.entry_id, e.reason) for e in obs.of(Evicted)] == [("e1", EvictionReason.SUPERSEDED)]
    assert [(e.entry_id, e.replaced) for e in obs.of(Stored)] == [("e2", "e1")]
    assert [e.suggestion.parameters for e in memory.entries(server.url)] == [
        {"promo_code": "WINTER"}
    ]


def test_naive_memory_replaces_a_fix_with_the_newer_one_for_its_key(server):
    # A1 "stores what it learns" (paper §3.5): no invalidation channel, but it keeps learning.
    memory = FixMemory("naive")
    fix = server.fix(
        "ADD_PROMO", {"promo_code": "SUMMER"}, scope={"plan": "plan_a"}, reads={"codes": ["plan_a"]}
    )
    memory.observe(server.url, Observed(None, 422, server.failure(fix)))
    fix["parameters"] = {"promo_code": "WINTER"}

    obs = memory.observe(server.url, Observed(None, 422, server.failure(fix)))

    assert [(e.entry_id, e.reason) for e in obs.of(Evicted)] == [("e1", EvictionReason.SUPERSEDED)]
    assert [e.suggestion.parameters for e in memory.entries(server.url)] == [
        {"promo_code": "WINTER"}
    ]


def test_a_fix_learned_with_entries_injected_records_them_as_derived_from(server, standard_fixes):
    memory = FixMemory("row+consumers")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))

    memory.observe(
        server.url,
        Observed(
            None,
            422,
            server.failure(server.fix("B", {"b": 1}, reads={"promos": ["SUMMER"]})),
            injected=["e1", "e3", "e1"],
        ),
    )

    assert memory.entries(server.url)[-1].derived_from == ("e1", "e3")


def test_derived_from_keeps_only_ids_of_the_same_origin(server, standard_fixes):
    memory = FixMemory("row")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))

    memory.observe(
        "https://other.test",
        Observed(
            None,
            422,
            server.failure(server.fix("B", {"b": 1}, reads={"codes": None})),
            injected=["e1"],
        ),
    )

    assert memory.entries("https://other.test")[0].derived_from == ()


def test_an_entry_records_the_contract_it_was_stored_under(server):
    memory = FixMemory("row")
    server.touch("tokens")
    memory.observe(
        server.url,
        Observed(
            None,
            422,
            server.failure(
                server.fix(
                    "ADD_PROMO",
                    {"p": 1},
                    scope={"plan": "a"},
                    reads={"codes": ["plan_a"], "tokens": None},
                    rules=[("codes", "promos", "r")],
                ),
            ),
            response_id="req-9",
        ),
        episode=4,
    )

    entry = memory.entries(server.url)[0]

    assert [(d.table, d.version, d.keys) for d in entry.dependencies] == [
        ("codes", "1.0.0", ("plan_a",)),
        ("tokens", "1.0.1", None),
    ]
    assert entry.rules == (("codes", "promos", "r"),)
    assert (entry.rules_version, entry.contract_seq, entry.contract_epoch) == (
        server.rules_version,
        1,
        "epoch-1",
    )
    assert (entry.provenance.episode, entry.provenance.response_id) == (4, "req-9")


def test_an_entry_past_its_max_age_is_evicted_instead_of_served(server):
    now = [1000.0]
    memory = FixMemory("row", clock=lambda: now[0])
    memory.observe(
        server.url,
        Observed(
            None,
            422,
            server.failure(
                server.fix("ADD_PROMO", {"p": 1}, reads={"codes": ["plan_a"]}, max_age_s=60)
            ),
        ),
    )
    now[0] += 61

    lookup = memory.lookup(server.url, {})

    assert lookup.entries == ()
    assert [(e.entry_id, e.reason) for e in lookup.events if isinstance(e, Evicted)] == [
        ("e1", EvictionReason.MAX_AGE)
    ]


def test_a_lookup_reports_each_served_entry(server, standard_fixes):
    memory = FixMemory("row")
    memory.observe(
        server.url, Observed(None, 422, server.failure(*standard_fixes(server))), episode=1
    )

    lookup = memory.lookup(server.url, {"plan": "plan_a"}, episode=2)

    assert [(e.entry_id, e.episode) for e in lookup.events if isinstance(e, Served)] == [("e1", 2)]


def test_malformed_contract_fields_are_ignored_and_change_nothing(server, standard_fixes):
    memory = FixMemory("table")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))
    body = server.success() | {"table_versions": {"codes": 7}, "contract_seq": -1}

    obs = memory.observe(server.url, Observed(None, 200, body))

    assert [type(e) for e in obs.events] == [Ignored]
    assert len(memory.entries(server.url)) == 3


def test_a_rejection_with_malformed_contract_fields_teaches_nothing(server, standard_fixes):
    memory = FixMemory("row")
    body = server.failure(*standard_fixes(server)) | {"table_versions": {"codes": 7}}

    obs = memory.observe(server.url, Observed(None, 422, body))

    assert [type(e) for e in obs.events] == [Ignored]
    assert memory.entries(server.url) == []


def test_a_malformed_suggestion_is_reported_and_the_others_stored(server):
    memory = FixMemory("row")
    body = server.failure(
        {"type": "BROKEN", "parameters": "nope"}, server.fix("OK", {"a": 1}, reads={"codes": None})
    )

    obs = memory.observe(server.url, Observed(None, 422, body))

    assert [e.suggestion_type for e in obs.of(NotStored)] == ["BROKEN"]
    assert [e.type for e in memory.entries(server.url)] == ["OK"]


def test_tombstones_keep_the_entry_and_the_reason_in_eviction_order(
    server, standard_fixes, driver_class
):
    memory = FixMemory("table")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    server.touch("tokens")
    drive.ok()
    server.touch("codes")
    drive.ok()

    tombs = memory.tombstones(server.url)

    assert [(t.entry.id, t.reason) for t in tombs] == [
        ("e3", EvictionReason.TABLE_CHANGED),
        ("e1", EvictionReason.TABLE_CHANGED),
        ("e2", EvictionReason.TABLE_CHANGED),
    ]


@pytest.mark.parametrize(
    "selector, evicted",
    [
        ({"entry_ids": ["e2"]}, ["e2"]),
        ({"table": "codes"}, ["e1", "e2"]),
        ({"everything": True}, ["e1", "e2", "e3"]),
    ],
)
def test_an_operator_evicts_by_id_table_or_all(selector, evicted, server, standard_fixes):
    memory = FixMemory("row")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))

    obs = memory.evict(server.url, **selector)

    assert [(e.entry_id, e.reason) for e in obs.of(Evicted)] == [
        (i, EvictionReason.OPERATOR) for i in evicted
    ]


def test_counters_track_lookups_stores_evictions_restamps_and_contract_bytes(
    server, standard_fixes, driver_class
):
    memory = FixMemory("row")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    memory.lookup(server.url, {"plan": "plan_a"})
    memory.lookup(server.url, {"plan": "nobody"})
    server.update("codes", "plan_a", {"code": "WINTER"})
    drive.ok()

    stats = memory.stats(server.url)

    assert (stats.lookups, stats.hits, stats.misses, stats.served) == (2, 1, 1, 1)
    assert (stats.stores, stats.evictions, stats.restamps) == (3, {"row-changed": 1}, 1)
    assert stats.responses == 2 and stats.contract_bytes > 0


def test_contract_bytes_count_the_response_and_suggestion_contract_members(server):
    memory = FixMemory("none")
    body = {"success": True, "contract_seq": 12, "rules_version": "abc"}

    memory.observe(server.url, Observed(None, 200, body, response_bytes=80))

    stats = memory.stats(server.url)
    assert stats.contract_bytes == len('"contract_seq":12,') + len('"rules_version":"abc",')
    assert stats.response_bytes == 80


def test_every_event_serializes_to_one_json_line(server, standard_fixes, driver_class):
    memory = FixMemory("row+graph")
    drive = driver_class(memory, server)
    events = drive.fail(*standard_fixes(server))
    server.update("codes", "plan_a", {"code": "WINTER"}, affected=["tokens:tok_x"])
    events += drive.ok()
    events += memory.lookup(server.url, {"plan": "plan_b"}).events

    lines = [json.loads(json.dumps(e.to_dict())) for e in events]

    assert {line["event"] for line in lines} == {
        "stored",
        "version-moved",
        "evicted",
        "restamped",
        "served",
    }
    evicted = [line for line in lines if line["event"] == "evicted"]
    assert {(line["entry_id"], line["reason"]) for line in evicted} == {
        ("e1", "row-changed"),
        ("e3", "downstream"),
    }
    assert evicted[0]["scope"] == {"plan": "plan_a"} and evicted[0]["origin"] == server.url


def test_a_sqlite_memory_reopened_holds_the_same_entries_state_and_counters(
    tmp_path, server, standard_fixes
):
    path = tmp_path / "memory.db"
    with FixMemory("row", store=path) as memory:
        memory.observe(
            server.url, Observed(None, 422, server.failure(*standard_fixes(server))), episode=3
        )
        memory.lookup(server.url, {"plan": "plan_a"})
        before = (memory.entries(server.url), memory.state(server.url), memory.stats(server.url))

    with FixMemory("row", store=SQLiteStore(path), close_store=True) as reopened:
        after = (
            reopened.entries(server.url),
            reopened.state(server.url),
            reopened.stats(server.url),
        )
        assert reopened.origins() == [server.url]

    assert after == before


def test_entry_ids_keep_counting_after_a_reopen(tmp_path, server):
    path = tmp_path / "memory.db"
    with FixMemory("row", store=path) as memory:
        memory.observe(
            server.url,
            Observed({}, 422, server.failure(server.fix("A", {"a": 1}, reads={"codes": None}))),
        )
    with FixMemory("row", store=path) as memory:
        memory.observe(
            server.url,
            Observed({}, 422, server.failure(server.fix("B", {"b": 1}, reads={"codes": None}))),
        )
        assert [e.id for e in memory.entries(server.url)] == ["e1", "e2"]


def test_an_origin_with_dots_and_ports_round_trips_through_the_store(
    tmp_path, standard_fixes, fake_origin
):
    origin = fake_origin({"codes": {"plan_a": {}}}, url="http://127.0.0.1:8080")
    with FixMemory("row", store=tmp_path / "m.db") as memory:
        memory.observe(
            origin.url,
            Observed({}, 422, origin.failure(origin.fix("A", {"a": 1}, reads={"codes": None}))),
        )
        assert memory.origins() == ["http://127.0.0.1:8080"]


def test_answer_routes_a_410_to_resync_and_a_bad_body_to_the_fallback(server, standard_fixes):
    from invalidation_contracts.client import FetchChanges

    memory = FixMemory("row")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))
    need = FetchChanges(server.url, 0, "epoch-1")

    gone = memory.answer(
        need, Answer(410, {"type": "urn:invalidation-contracts:problem:resync-required"})
    )
    assert {e.reason for e in gone.of(Evicted)} == {EvictionReason.RESYNC}
    assert memory.answer(need, Answer(200, {"not": "a feed"})).needs == ()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3)
    ),
    max_leaves=6,
)
members = st.sampled_from(
    ["table_versions", "rules_version", "contract_seq", "contract_epoch", "success", "result", "é"]
)
suggestion_members = st.sampled_from(
    ["type", "parameters", "cache_hint", "table", "tables", "rules", "scope", "max_age_s", "patch"]
)


@settings(max_examples=300, deadline=None)
@given(
    body=st.dictionaries(members, json_values, max_size=5),
    suggestions=st.lists(st.dictionaries(suggestion_members, json_values, max_size=5), max_size=3),
)
def test_contract_bytes_agree_with_the_wire_cost_definition(body, suggestions):
    if suggestions:
        body["recovery_feedback"] = {"suggestions": suggestions}

    assert contract_bytes(body) == wire_cost(body).contract


def _two_operations(server) -> FixMemory:
    """Two fixes of ``create`` (plans a and b) and one of ``refund``."""
    memory = FixMemory("row")
    for plan, code in (("plan_a", "SUMMER"), ("plan_b", "WINTER")):
        fix = server.fix(
            "ADD_PROMO", {"promo_code": code}, scope={"plan": plan}, reads={"codes": [plan]}
        )
        memory.observe(
            server.url, Observed({"plan": plan}, 422, server.failure(fix)), operation="create"
        )
    fix = server.fix("ROUND", {"amount": 10}, scope={"plan": "plan_a"}, reads={"codes": ["plan_a"]})
    memory.observe(
        server.url, Observed({"plan": "plan_a"}, 422, server.failure(fix)), operation="refund"
    )
    return memory


def test_fixes_for_an_operation_lists_its_fixes_whatever_the_draft(server):
    memory = _two_operations(server)

    shown = list(memory.lookup(server.url, operation="create").entries)

    assert [e.suggestion.parameters for e in shown] == [
        {"promo_code": "SUMMER"},
        {"promo_code": "WINTER"},
    ]
    assert [e.key.operation for e in memory.lookup(server.url, operation="refund").entries] == [
        "refund"
    ]


def test_fixes_for_is_not_counted_as_a_lookup(server):
    memory = _two_operations(server)

    memory.lookup(server.url, operation="create")

    assert (memory.stats(server.url).lookups, memory.stats(server.url).hits) == (0, 0)


def test_fixes_for_leaves_out_fixes_awaiting_the_row_diff(server):
    memory = _two_operations(server)
    server.touch("codes")
    need = memory.observe(server.url, Observed(None, 200, server.success())).needs[0]

    assert list(memory.lookup(server.url, operation="create").entries) == []
    memory.answer(need, Answer.changes(server.changes(need.since)))
    assert len(memory.lookup(server.url, operation="create").entries) == 2


def test_an_answer_built_from_a_parsed_feed_is_the_feed_as_it_travels(server):
    feed = ChangesFeed.model_validate(server.changes(0))

    assert Answer.changes(feed) == Answer(200, feed.to_wire())
    assert Answer.rules(server.rules_listing()) == Answer(200, server.rules_listing())
    assert Answer.resync() == Answer(410)


def test_an_unusable_answer_falls_back_like_a_body_that_does_not_parse(server, standard_fixes):
    def fallback(answer: Answer) -> list[str]:
        memory = FixMemory("row")
        memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))
        server.touch("codes")
        need = memory.observe(server.url, Observed(None, 200, server.success())).needs[0]
        return [e.kind for e in memory.answer(need, answer).events]

    unusable, unparsed = fallback(Answer.unusable()), fallback(Answer(200, {"not": "a feed"}))
    assert unusable == unparsed and "evicted" in unusable
