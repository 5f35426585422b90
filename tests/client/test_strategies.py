"""Each strategy (arm) against each kind of drift, and the behaviours that set the arms apart.

The standard memory: e1 = ADD_PROMO for plan_a (reads codes:plan_a, rule promo), e2 = ADD_PROMO for
plan_b (codes:plan_b, rule promo), e3 = USE_CREDIT for tok_x (tokens:tok_x, rule credit).
"""

from __future__ import annotations

import pytest

from invalidation_contracts.client import (
    Evicted,
    EvictionReason,
    FetchRules,
    FixMemory,
    Restamped,
    RulesAlert,
    strategy_for,
)
from invalidation_contracts.client.strategies import STRATEGY_CLASSES
from invalidation_contracts.client.values import Answer, Observed

ROW = EvictionReason.ROW_CHANGED
TABLE = EvictionReason.TABLE_CHANGED
RULES = EvictionReason.RULES
SUPERSEDED = EvictionReason.SUPERSEDED

ROW_FAMILY = [
    "row",
    "row+consumers",
    "row+graph",
    "rules-oracle",
    "rules-stamp",
    "rules-stamp+vectors",
]
NOT_RULE_READERS = ["naive", "table", "row", "row+consumers", "row+graph", "rules-stamp+vectors"]


def drift(server, rules, kind: str) -> None:
    if kind == "breaking":
        server.update("codes", "plan_a", {"code": "WINTER"})
    elif kind == "benign":
        server.update("tokens", "tok_y", {"funding": "credit"})
    elif kind == "touch":
        server.touch("codes")
    elif kind == "rule-removal":
        server.set_rules({rules["credit"]})
    elif kind == "rule-addition":
        server.set_rules({rules["promo"], rules["credit"], rules["extra"]})


def _cases():
    cases = [
        ("naive", kind, {}, set())
        for kind in ("breaking", "benign", "touch", "rule-removal", "rule-addition")
    ]
    cases += [
        ("table", "breaking", {"e1": TABLE, "e2": TABLE}, set()),
        ("table", "benign", {"e3": TABLE}, set()),
        ("table", "touch", {"e1": TABLE, "e2": TABLE}, set()),
        ("table", "rule-removal", {}, set()),
        ("table", "rule-addition", {}, set()),
    ]
    for name in ROW_FAMILY:
        cases += [
            (name, "breaking", {"e1": ROW}, {"e2"}),
            (name, "benign", {}, {"e3"}),
            (name, "touch", {}, {"e1", "e2"}),
        ]
    for name in ("row", "row+consumers", "row+graph", "rules-stamp+vectors"):
        cases += [(name, "rule-removal", {}, set()), (name, "rule-addition", {}, set())]
    cases += [
        ("rules-oracle", "rule-removal", {"e1": RULES, "e2": RULES}, {"e3"}),
        ("rules-oracle", "rule-addition", {}, {"e1", "e2", "e3"}),
        ("rules-stamp", "rule-removal", {"e1": RULES, "e2": RULES, "e3": RULES}, set()),
        ("rules-stamp", "rule-addition", {"e1": RULES, "e2": RULES, "e3": RULES}, set()),
    ]
    return [pytest.param(*case, id=f"{case[0]}-{case[1]}") for case in cases]


@pytest.mark.parametrize("strategy, kind, evicted, restamped", _cases())
def test_strategy_on_drift(
    strategy, kind, evicted, restamped, server, rules, standard_fixes, driver_class
):
    memory = FixMemory(strategy)
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    drift(server, rules, kind)

    events = drive.ok()

    assert {e.entry_id: e.reason for e in events if isinstance(e, Evicted)} == evicted
    assert {e.entry_id for e in events if isinstance(e, Restamped)} == restamped
    assert [e.id for e in memory.entries(server.url)] == [
        i for i in ("e1", "e2", "e3") if i not in evicted
    ]


@pytest.mark.parametrize("kind", ["breaking", "benign", "touch", "rule-removal", "rule-addition"])
def test_no_memory_stores_nothing_whatever_the_drift(
    kind, server, rules, standard_fixes, driver_class
):
    memory = FixMemory("none")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    drift(server, rules, kind)

    events = drive.ok()

    assert events == []
    assert memory.entries(server.url) == []
    assert list(memory.lookup(server.url, {"plan": "plan_a"}).entries) == []


def test_every_strategy_is_named_by_its_descriptive_name_and_its_arm_code():
    for cls in STRATEGY_CLASSES:
        assert type(strategy_for(cls.name)) is cls
        assert type(strategy_for(cls.arm)) is cls
        assert type(strategy_for(cls.arm.lower())) is cls


def test_an_unknown_strategy_name_is_refused_with_the_known_ones_listed():
    with pytest.raises(ValueError, match="row \\(A2D\\)"):
        strategy_for("rows")


@pytest.mark.parametrize("strategy", ["rules-oracle", "rules-stamp", "rules-stamp+vectors"])
def test_rules_strategies_alert_when_the_rules_stamp_moves(
    strategy, server, rules, standard_fixes, driver_class
):
    memory = FixMemory(strategy)
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    old = server.rules_version
    server.set_rules({rules["credit"]})

    alerts = [e for e in drive.ok() if isinstance(e, RulesAlert)]

    assert [(a.old_rules_version, a.new_rules_version) for a in alerts] == [
        (old, server.rules_version)
    ]


@pytest.mark.parametrize("strategy", NOT_RULE_READERS[:-1])
def test_strategies_that_do_not_read_rules_raise_no_alert(
    strategy, server, rules, standard_fixes, driver_class
):
    memory = FixMemory(strategy)
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    server.set_rules({rules["credit"]})

    assert not [e for e in drive.ok() if isinstance(e, RulesAlert)]


# -- row+consumers (A2DC)


def _learn_consumer(server, drive, rules):
    """e4 is learned from a request into which e1 was injected."""
    follow_up = server.fix(
        "ADD_BONUS",
        {"bonus": "B1"},
        scope={"plan": "plan_a"},
        reads={"promos": ["SUMMER"]},
        rules=[rules["promo"]],
    )
    drive.fail(follow_up, injected=["e1"])


def test_consumers_are_evicted_with_the_entry_they_were_derived_from(
    server, rules, standard_fixes, driver_class
):
    memory = FixMemory("row+consumers")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    _learn_consumer(server, drive, rules)
    server.update("codes", "plan_a", {"code": "WINTER"})

    events = drive.ok()

    evicted = {e.entry_id: e.reason for e in events if isinstance(e, Evicted)}
    assert evicted == {"e1": ROW, "e4": EvictionReason.CONSUMER}


def test_consumer_eviction_is_transitive(server, rules, standard_fixes, driver_class):
    memory = FixMemory("A2DC")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    _learn_consumer(server, drive, rules)
    drive.fail(
        server.fix(
            "ADD_NOTE", {"note": "n"}, scope={"plan": "plan_a"}, reads={"promos": ["SPRING"]}
        ),
        injected=["e4"],
    )
    server.update("codes", "plan_a", {"code": "WINTER"})

    evicted = [e.entry_id for e in drive.ok() if isinstance(e, Evicted)]

    assert evicted == ["e1", "e4", "e5"]


def test_row_strategy_keeps_entries_derived_from_an_evicted_one(
    server, rules, standard_fixes, driver_class
):
    memory = FixMemory("row")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    _learn_consumer(server, drive, rules)
    server.update("codes", "plan_a", {"code": "WINTER"})

    drive.ok()

    assert [e.id for e in memory.entries(server.url)] == ["e2", "e3", "e4"]


# -- row+graph (A2DG)


def test_graph_evicts_entries_reading_a_downstream_node(server, driver_class):
    memory = FixMemory("row+graph")
    drive = driver_class(memory, server)
    drive.fail(
        server.fix(
            "CHECK_PROMO",
            {"promo_code": "SUMMER"},
            scope={"plan": "plan_a"},
            reads={"promos": ["SUMMER"]},
        )
    )
    server.update("codes", "plan_a", {"code": "WINTER"}, affected=["promos:SUMMER"])

    events = drive.ok()

    assert [(e.entry_id, e.reason) for e in events if isinstance(e, Evicted)] == [
        ("e1", EvictionReason.DOWNSTREAM)
    ]


def test_row_strategy_ignores_downstream_nodes(server, driver_class):
    memory = FixMemory("row")
    drive = driver_class(memory, server)
    drive.fail(
        server.fix(
            "CHECK_PROMO",
            {"promo_code": "SUMMER"},
            scope={"plan": "plan_a"},
            reads={"promos": ["SUMMER"]},
        )
    )
    server.update("codes", "plan_a", {"code": "WINTER"}, affected=["promos:SUMMER"])

    assert not [e for e in drive.ok() if isinstance(e, Evicted)]


# -- rules-stamp+vectors (A2DRC)


def test_vectors_keep_entries_in_service_after_the_alert(
    server, rules, standard_fixes, driver_class
):
    memory = FixMemory("rules-stamp+vectors")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    server.set_rules({rules["promo"]})
    drive.ok()

    served = list(memory.lookup(server.url, {"token": "tok_x"}).entries)

    assert [e.id for e in served] == ["e3"]


def test_vectors_evict_on_the_next_failure_whose_vector_differs(
    server, rules, standard_fixes, driver_class
):
    memory = FixMemory("rules-stamp+vectors")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    server.set_rules({rules["promo"]})
    drive.ok()
    now = server.fix(
        "USE_CREDIT", {"token": "tok_q"}, scope={"token": "tok_x"}, reads={"tokens": ["tok_x"]}
    )

    events = drive.fail(now)

    assert [(e.entry_id, e.reason) for e in events if isinstance(e, Evicted)] == [("e3", RULES)]
    assert [e.id for e in memory.entries(server.url)] == ["e1", "e2", "e4"]


def test_vectors_restamp_entries_whose_vector_still_matches(
    server, rules, standard_fixes, driver_class
):
    memory = FixMemory("rules-stamp+vectors")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    server.set_rules({rules["promo"], rules["credit"], rules["extra"]})
    drive.ok()
    same = server.fix(
        "ADD_PROMO",
        {"promo_code": "SUMMER"},
        scope={"plan": "plan_a"},
        reads={"codes": ["plan_a"]},
        rules=[rules["promo"]],
    )

    events = drive.fail(same)

    restamped = [e for e in events if isinstance(e, Restamped)]
    assert [e.entry_id for e in restamped] == ["e1", "e2"]
    assert all(e.rules_version[1] == server.rules_version for e in restamped)
    assert not [e for e in events if isinstance(e, Evicted) and e.reason is RULES]


def test_vectors_dispose_against_a_rule_listing_when_one_is_fed(
    server, rules, standard_fixes, driver_class
):
    memory = FixMemory("rules-stamp+vectors")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    server.set_rules({rules["credit"]})
    drive.ok()

    obs = memory.answer(FetchRules(server.url), Answer.rules(server.rules_listing()))

    assert {e.entry_id for e in obs.of(Evicted)} == {"e1", "e2"}
    assert [e.entry_id for e in obs.of(Restamped)] == ["e3"]


# -- granularity and fallbacks


def test_a_dependency_without_keys_is_evicted_by_any_row_change_in_its_table(server, driver_class):
    memory = FixMemory("row")
    drive = driver_class(memory, server)
    drive.fail(server.fix("ADD_PROMO", {"promo_code": "SUMMER"}, scope={}, reads={"codes": None}))
    server.update("codes", "plan_b", {"code": "AUTUMN"})

    events = drive.ok()

    assert [(e.entry_id, e.reason) for e in events if isinstance(e, Evicted)] == [("e1", TABLE)]


def test_a_dependency_without_keys_survives_a_touch(server, driver_class):
    memory = FixMemory("row")
    drive = driver_class(memory, server)
    drive.fail(
        server.fix("ADD_PROMO", {"promo_code": "SUMMER"}, scope={}, reads={"codes": None}, level=1)
    )
    server.touch("codes")

    events = drive.ok()

    assert [e.entry_id for e in events if isinstance(e, Restamped)] == ["e1"]
    assert memory.entries(server.url)[0].dependencies[0].version == server.version("codes")


def test_an_l1_suggestion_depends_on_its_table_at_the_stamped_version(server, driver_class):
    memory = FixMemory("row")
    server.touch("codes")
    driver_class(memory, server).fail(
        server.fix("ADD_PROMO", {"promo_code": "SUMMER"}, reads={"codes": ["plan_a"]}, level=1)
    )

    (dep,) = memory.entries(server.url)[0].dependencies

    assert (dep.table, dep.version, dep.keys) == ("codes", "1.0.1", None)


def test_entries_awaiting_the_row_diff_are_withheld_from_lookups(server, standard_fixes):
    memory = FixMemory("row")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))
    server.touch("codes")

    obs = memory.observe(server.url, Observed(None, 200, server.success()))

    assert obs.needs and list(memory.lookup(server.url, {"plan": "plan_a"}).entries) == []
    memory.answer(obs.needs[0], Answer.changes(server.changes(obs.needs[0].since)))
    assert [e.id for e in memory.lookup(server.url, {"plan": "plan_a"}).entries] == ["e1"]


def test_without_a_changes_feed_row_strategies_fall_back_to_table_eviction(server, standard_fixes):
    memory = FixMemory("row")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))
    server.touch("codes")
    need = memory.observe(server.url, Observed(None, 200, server.success())).needs[0]

    obs = memory.answer(need, Answer.unusable())

    assert {e.entry_id: e.reason for e in obs.of(Evicted)} == {"e1": TABLE, "e2": TABLE}
    assert memory.observe(server.url, Observed(None, 200, server.success())).needs == ()


def test_without_a_rule_listing_the_oracle_clears_rule_dependent_entries(
    server, rules, standard_fixes
):
    memory = FixMemory("rules-oracle")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))
    server.set_rules({rules["credit"]})
    need = memory.observe(server.url, Observed(None, 200, server.success())).needs[0]

    obs = memory.answer(need, Answer.unusable())

    assert {e.entry_id for e in obs.of(Evicted)} == {"e1", "e2", "e3"}


def test_a_table_no_longer_served_evicts_its_entries(server, standard_fixes):
    memory = FixMemory("row")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))
    body = server.success()
    del body["table_versions"]["tokens"]

    obs = memory.observe(server.url, Observed(None, 200, body))

    assert [(e.entry_id, e.reason) for e in obs.of(Evicted)] == [("e3", TABLE)]


def test_a_failure_that_reveals_drift_is_learned_only_after_the_diff_is_judged(
    server, standard_fixes
):
    memory = FixMemory("row")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))
    server.update("codes", "plan_a", {"code": "WINTER"})
    fresh = server.fix(
        "ADD_PROMO", {"promo_code": "WINTER"}, scope={"plan": "plan_a"}, reads={"codes": ["plan_a"]}
    )

    held = memory.observe(server.url, Observed(None, 422, server.failure(fresh), injected=["e1"]))
    settled = memory.answer(held.needs[0], Answer.changes(server.changes(held.needs[0].since)))

    assert not any(isinstance(e, Evicted) for e in held.events)
    assert {e.entry_id: e.reason for e in settled.of(Evicted)} == {"e1": ROW}
    assert [
        e.suggestion.parameters for e in memory.lookup(server.url, {"plan": "plan_a"}).entries
    ] == [{"promo_code": "WINTER"}]


def test_without_pending_drift_a_failure_is_learned_at_once(server, standard_fixes):
    memory = FixMemory("row")

    obs = memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))

    assert [e.entry_id for e in obs.events if e.kind == "stored"] == ["e1", "e2", "e3"]


@pytest.mark.parametrize("strategy", ["row", "row+consumers", "table", "rules-stamp+vectors"])
def test_an_injected_fix_the_server_contradicts_is_evicted(strategy, server, standard_fixes):
    memory = FixMemory(strategy)
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))
    drop = server.fix(
        "REMOVE_PROMO", {"promo_code": None}, scope={"plan": "plan_a"}, reads={"codes": ["plan_a"]}
    )

    obs = memory.observe(
        server.url,
        Observed(
            {"plan": "plan_a", "promo_code": "SUMMER"}, 422, server.failure(drop), injected=["e1"]
        ),
    )

    assert {e.entry_id: e.reason for e in obs.of(Evicted)} == {"e1": EvictionReason.CONTRADICTED}


def test_a_failure_that_does_not_touch_the_injected_fields_contradicts_nothing(
    server, standard_fixes
):
    memory = FixMemory("row")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))
    other = server.fix("ROUND", {"amount_cents": 100}, cache_hint="recompute")

    obs = memory.observe(server.url, Observed(None, 422, server.failure(other), injected=["e1"]))

    assert obs.of(Evicted) == []


def test_naive_memory_supersedes_a_fix_the_server_refuted_on_a_request_carrying_it(
    server, standard_fixes
):
    memory = FixMemory("naive")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))
    drop = server.fix(
        "REMOVE_PROMO", {"promo_code": None}, scope={"plan": "plan_a"}, reads={"codes": ["plan_a"]}
    )

    obs = memory.observe(server.url, Observed(None, 422, server.failure(drop), injected=["e1"]))

    assert [(e.entry_id, e.reason) for e in obs.of(Evicted)] == [("e1", SUPERSEDED)]
    assert "e1" not in [e.id for e in memory.entries(server.url)]


# -- absent rules: a fix that held because a rule was not declared


def absent_promo_fix(server, rules):
    """e1: a fix its policy computed because ``rules["extra"]`` was looked up and not declared."""
    return server.fix(
        "ADD_PROMO",
        {"promo_code": "SUMMER"},
        scope={"plan": "plan_a"},
        reads={"codes": ["plan_a"]},
        absent_rules=[list(rules["extra"])],
    )


@pytest.mark.parametrize("strategy", ["rules-oracle", "rules-stamp"])
def test_declaring_a_rule_a_fix_found_absent_evicts_it_on_the_stamp(
    strategy, server, rules, driver_class
):
    memory = FixMemory(strategy)
    drive = driver_class(memory, server)
    drive.fail(absent_promo_fix(server, rules))
    server.set_rules({rules["promo"], rules["credit"], rules["extra"]})

    events = drive.ok()

    assert [(e.entry_id, e.reason) for e in events if isinstance(e, Evicted)] == [("e1", RULES)]


def test_the_oracle_keeps_an_absent_rule_fix_when_other_rules_change(server, rules, driver_class):
    memory = FixMemory("rules-oracle")
    drive = driver_class(memory, server)
    drive.fail(absent_promo_fix(server, rules))
    server.set_rules({rules["promo"]})

    events = drive.ok()

    assert not [e for e in events if isinstance(e, Evicted)]
    assert [e.entry_id for e in events if isinstance(e, Restamped)] == ["e1"]


def test_an_absent_rule_lookup_with_a_wildcard_matches_any_relation(server, rules, driver_class):
    memory = FixMemory("rules-oracle")
    drive = driver_class(memory, server)
    codes, promos, _ = rules["extra"]
    drive.fail(
        server.fix(
            "ADD_PROMO",
            {"promo_code": "SUMMER"},
            scope={"plan": "plan_a"},
            reads={"codes": ["plan_a"]},
            absent_rules=[[codes, promos, None]],
        )
    )
    server.set_rules({rules["promo"], rules["credit"], (codes, promos, "another_relation")})

    events = drive.ok()

    assert [(e.entry_id, e.reason) for e in events if isinstance(e, Evicted)] == [("e1", RULES)]


def test_vectors_dispose_of_an_absent_rule_fix_against_a_rule_listing(server, rules, driver_class):
    memory = FixMemory("rules-stamp+vectors")
    drive = driver_class(memory, server)
    drive.fail(absent_promo_fix(server, rules))
    server.set_rules({rules["promo"], rules["credit"], rules["extra"]})
    drive.ok()

    obs = memory.answer(FetchRules(server.url), Answer.rules(server.rules_listing()))

    assert [(e.entry_id, e.reason) for e in obs.of(Evicted)] == [("e1", RULES)]


def test_vectors_evict_when_a_failure_shows_the_absent_rules_of_a_type_changed(
    server, rules, driver_class
):
    memory = FixMemory("rules-stamp+vectors")
    drive = driver_class(memory, server)
    drive.fail(absent_promo_fix(server, rules))
    server.set_rules({rules["promo"], rules["credit"], rules["extra"]})
    drive.ok()
    other = server.fix(
        "ADD_PROMO",
        {"promo_code": "AUTUMN"},
        scope={"plan": "plan_b"},
        reads={"codes": ["plan_b"]},
        absent_rules=[list(rules["credit"])],
    )

    events = drive.fail(other)

    assert [(e.entry_id, e.reason) for e in events if isinstance(e, Evicted)] == [("e1", RULES)]
