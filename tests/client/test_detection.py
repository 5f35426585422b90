"""When the memory reads the contract: lazy, eager, resync; epochs, deltas, and origin isolation."""

from __future__ import annotations

import pytest

from invalidation_contracts.client import (
    Detection,
    Evicted,
    EvictionReason,
    FetchChanges,
    FixMemory,
)
from invalidation_contracts.client.values import Answer, Observed


def test_lazy_detection_ignores_the_stamps_of_successful_responses(
    server, standard_fixes, driver_class
):
    memory = FixMemory("row", "lazy")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    server.update("codes", "plan_a", {"code": "WINTER"})

    events = drive.ok()

    assert events == []
    assert [e.id for e in memory.lookup(server.url, {"plan": "plan_a"}).entries] == ["e1"]


def test_lazy_detection_evicts_on_the_next_failure(server, standard_fixes, driver_class):
    memory = FixMemory("row", "lazy")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    server.update("codes", "plan_a", {"code": "WINTER"})
    drive.ok()

    events = drive.fail()

    assert [(e.entry_id, e.reason) for e in events if isinstance(e, Evicted)] == [
        ("e1", EvictionReason.ROW_CHANGED)
    ]


def test_eager_detection_evicts_on_a_successful_response(server, standard_fixes, driver_class):
    memory = FixMemory("row", "eager")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    server.update("codes", "plan_a", {"code": "WINTER"})

    assert [e.entry_id for e in drive.ok() if isinstance(e, Evicted)] == ["e1"]


def test_resync_detection_asks_for_the_changes_since_the_last_position(
    server, standard_fixes, driver_class
):
    memory = FixMemory("row", "resync")
    driver_class(memory, server).fail(*standard_fixes(server))
    position = server.seq
    server.update("codes", "plan_a", {"code": "WINTER"})

    assert memory.begin_episode(server.url, 2) == [FetchChanges(server.url, position, "epoch-1")]


def test_resync_detection_evicts_before_the_episode_sends_anything(
    server, standard_fixes, driver_class
):
    memory = FixMemory("row", "resync")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    server.update("codes", "plan_a", {"code": "WINTER"})

    events = drive.begin(2)

    assert [(e.entry_id, e.reason) for e in events if isinstance(e, Evicted)] == [
        ("e1", EvictionReason.ROW_CHANGED)
    ]


def test_resync_detection_asks_nothing_of_an_empty_memory(server, driver_class):
    memory = FixMemory("row", "resync")
    driver_class(memory, server).ok()

    assert memory.begin_episode(server.url, 1) == []


def test_eager_detection_asks_nothing_before_an_episode(server, standard_fixes, driver_class):
    memory = FixMemory("row", "eager")
    driver_class(memory, server).fail(*standard_fixes(server))
    server.update("codes", "plan_a", {"code": "WINTER"})

    assert memory.begin_episode(server.url, 2) == []


def test_a_position_older_than_the_change_log_revalidates_everything(
    server, standard_fixes, driver_class
):
    memory = FixMemory("row", "resync")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    server.update("codes", "plan_a", {"code": "WINTER"})
    server.forget_log()

    events = drive.begin(2)

    assert {e.entry_id: e.reason for e in events if isinstance(e, Evicted)} == {
        "e1": EvictionReason.RESYNC,
        "e2": EvictionReason.RESYNC,
        "e3": EvictionReason.RESYNC,
    }


def test_a_new_contract_epoch_on_a_response_revalidates_everything(
    server, standard_fixes, driver_class
):
    memory = FixMemory("row")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))
    server.new_epoch("epoch-2")

    events = drive.ok()

    assert {e.reason for e in events if isinstance(e, Evicted)} == {EvictionReason.RESYNC}
    assert memory.entries(server.url) == []
    assert memory.state(server.url).epoch == "epoch-2"


def test_a_changes_feed_of_another_epoch_revalidates_everything(server, standard_fixes):
    memory = FixMemory("row")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))
    feed = server.changes(0) | {"contract_epoch": "epoch-9"}

    obs = memory.answer(FetchChanges(server.url, 0), Answer.changes(feed))

    assert len(obs.of(Evicted)) == 3 and memory.entries(server.url) == []


def test_naive_memory_survives_a_resync(server, standard_fixes):
    memory = FixMemory("naive")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))

    memory.answer(FetchChanges(server.url, 0), Answer.resync())

    assert len(memory.entries(server.url)) == 3


def test_an_older_response_than_the_memory_position_changes_nothing(
    server, standard_fixes, driver_class
):
    memory = FixMemory("table")
    stale_body = server.success()
    server.touch("codes")
    drive = driver_class(memory, server)
    drive.fail(*standard_fixes(server))

    obs = memory.observe(server.url, Observed(None, 200, stale_body))

    assert obs.events == () and len(memory.entries(server.url)) == 3


# -- conditional contract (Contract-Since)


def test_contract_since_is_the_position_the_known_versions_are_accurate_at(server, driver_class):
    memory = FixMemory("row")
    server.touch("codes")
    driver_class(memory, server).ok()

    assert memory.position(server.url).seq == server.seq == 1


def test_strategies_that_do_not_read_the_contract_send_no_contract_since(server, driver_class):
    memory = FixMemory("naive")
    driver_class(memory, server).ok()

    assert memory.position(server.url).seq is None


def test_a_delta_does_not_drop_the_tables_it_leaves_out(server, standard_fixes, driver_class):
    memory = FixMemory("table")
    drive = driver_class(memory, server, conditional=True)
    drive.fail(*standard_fixes(server))

    events = drive.ok()

    assert events == [] and len(memory.entries(server.url)) == 3


def test_a_delta_listing_a_moved_table_invalidates_it(server, standard_fixes, driver_class):
    memory = FixMemory("row")
    drive = driver_class(memory, server, conditional=True)
    drive.fail(*standard_fixes(server))
    server.update("codes", "plan_a", {"code": "WINTER"})

    events = drive.ok()

    assert [e.entry_id for e in events if isinstance(e, Evicted)] == ["e1"]
    assert memory.position(server.url).seq == server.seq


def test_full_and_delta_forms_reach_the_same_memory(
    server, fake_origin, standard_fixes, driver_class, rules
):
    outcomes = []
    for conditional in (False, True):
        origin = fake_origin(server.tables, {rules["promo"], rules["credit"]})
        memory = FixMemory("row")
        drive = driver_class(memory, origin, conditional=conditional)
        drive.fail(*standard_fixes(origin))
        origin.update("codes", "plan_a", {"code": "WINTER"})
        drive.ok()
        origin.touch("tokens")
        drive.ok()
        outcomes.append([(e.id, e.dependencies) for e in memory.entries(origin.url)])

    assert outcomes[0] == outcomes[1]


# -- origin isolation


def test_a_response_from_another_origin_never_evicts_this_origins_entries(
    server, fake_origin, standard_fixes
):
    memory = FixMemory("table")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))
    other = fake_origin(server.tables, url="https://other.test")
    for table in other.tables:
        other.touch(table)

    obs = memory.observe(other.url, Observed(None, 200, other.success()))

    assert obs.events == () and len(memory.entries(server.url)) == 3


def test_a_resync_of_another_origin_leaves_this_origins_entries(server, standard_fixes):
    memory = FixMemory("row")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))

    memory.answer(FetchChanges("https://other.test", 0), Answer.resync())

    assert len(memory.entries(server.url)) == 3


def test_an_origins_stamps_never_restamp_another_origins_entries(
    server, fake_origin, standard_fixes, driver_class
):
    memory = FixMemory("row")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))
    other = fake_origin(server.tables, url="https://other.test")
    driver_class(memory, other).ok()
    other.touch("codes")

    driver_class(memory, other).ok()

    assert {dep.version for e in memory.entries(server.url) for dep in e.dependencies} == {"1.0.0"}


def test_lookups_serve_only_the_asking_origins_entries(server, standard_fixes):
    memory = FixMemory("row")
    memory.observe(server.url, Observed(None, 422, server.failure(*standard_fixes(server))))

    assert list(memory.lookup("https://other.test", {"plan": "plan_a"}).entries) == []


def test_detection_names_parse_and_unknown_ones_are_refused():
    assert Detection.parse("Eager") is Detection.EAGER
    with pytest.raises(ValueError, match="lazy, eager or resync"):
        Detection.parse("sometimes")
