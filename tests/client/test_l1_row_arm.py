"""The row arm at the paper's Level 1 + reload diff: an L1 entry carries only its ``table``, and
the diff's changed keys are matched to the scope it was stored under (Table 2: A2D = L1 + diff)."""

from __future__ import annotations

from invalidation_contracts.client import Evicted, EvictionReason, FixMemory, Restamped


def _l1_codes(server):
    """Two L1 fixes on ``codes`` rows (no dependency vector), scoped by the plan that keys them."""
    return [
        server.fix(
            "ADD_PROMO",
            {"promo_code": code},
            scope={"plan": plan},
            reads={"codes": [plan]},
            level=1,
        )
        for plan, code in (("plan_a", "SUMMER"), ("plan_b", "SPRING"))
    ]


def _entry(memory, server, plan):
    [entry] = [e for e in memory.entries(server.url) if e.key.scope_fields == {"plan": plan}]
    return entry


def test_an_l1_entry_whose_scope_names_the_changed_row_is_evicted(server, driver_class):
    memory = FixMemory("row")
    driver = driver_class(memory, server)
    driver.fail(*_l1_codes(server))
    assert all(e.dependencies[0].keys is None for e in memory.entries(server.url))
    stale = _entry(memory, server, "plan_a").id

    server.update("codes", "plan_a", {"code": "WINTER"})
    events = driver.ok()

    evicted = [e for e in events if isinstance(e, Evicted)]
    assert [(e.entry_id, e.reason) for e in evicted] == [(stale, EvictionReason.ROW_CHANGED)]


def test_an_l1_entry_on_an_unchanged_row_of_the_moved_table_is_restamped(server, driver_class):
    memory = FixMemory("row")
    driver = driver_class(memory, server)
    driver.fail(*_l1_codes(server))
    kept = _entry(memory, server, "plan_b").id

    server.update("codes", "plan_a", {"code": "WINTER"})
    events = driver.ok()

    assert kept in {e.entry_id for e in events if isinstance(e, Restamped)}
    assert _entry(memory, server, "plan_b").dependencies[0].version == server.version("codes")


def test_a_keyless_l4_entry_stays_at_table_granularity(server, driver_class):
    # An L4 vector without keys means the policy scanned the table: any row change may matter.
    memory = FixMemory("row")
    driver = driver_class(memory, server)
    scan = server.fix(
        "ADD_PROMO", {"promo_code": "SPRING"}, scope={"plan": "plan_b"}, reads={"codes": None}
    )
    driver.fail(scan)

    server.update("codes", "plan_a", {"code": "WINTER"})
    events = driver.ok()

    assert [e.reason for e in events if isinstance(e, Evicted)] == [EvictionReason.TABLE_CHANGED]


def test_an_l1_entry_without_a_scope_stays_at_table_granularity(server, driver_class):
    memory = FixMemory("row")
    driver = driver_class(memory, server)
    driver.fail(
        server.fix("ADD_PROMO", {"promo_code": "SPRING"}, reads={"codes": ["plan_b"]}, level=1)
    )

    server.update("codes", "plan_a", {"code": "WINTER"})
    events = driver.ok()

    assert [e.reason for e in events if isinstance(e, Evicted)] == [EvictionReason.TABLE_CHANGED]


def test_the_table_arm_at_l1_still_clears_the_whole_table(server, driver_class):
    memory = FixMemory("table")
    driver = driver_class(memory, server)
    driver.fail(*_l1_codes(server))

    server.update("codes", "plan_a", {"code": "WINTER"})
    events = driver.ok()

    assert len([e for e in events if isinstance(e, Evicted)]) == 2
