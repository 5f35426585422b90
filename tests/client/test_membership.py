"""Membership (key-set) dependencies on the client: a key added or removed evicts, a row's
contents changing does not unless the fix also read that row (SPEC §5.2, §9)."""

from __future__ import annotations

import pytest

from invalidation_contracts.client import Evicted, EvictionReason, FixMemory, Restamped, SQLiteStore
from invalidation_contracts.client.entries import Dependency, dependencies_of
from invalidation_contracts.protocol import Suggestion

ROW_ARMS = [
    "row",
    "row+consumers",
    "row+graph",
    "rules-oracle",
    "rules-stamp",
    "rules-stamp+vectors",
]
CARDS = {"c1": {"limit": 5}, "c2": {"limit": 9}}


@pytest.fixture
def wallet(fake_origin):
    return fake_origin({"cards": dict(CARDS)})


def card_fix(server, also_read=("c9",)):
    """USE_REGISTERED_CARD for card c9: it listed the cards and looked c9 up (absent)."""
    return server.fix(
        "USE_REGISTERED_CARD",
        {"card": "c1"},
        scope={"card": "c9"},
        reads={"cards": ["c9"]},
        tables=[
            {
                "table": "cards",
                "version": server.version("cards"),
                "membership": {"keys": list(also_read)},
            }
        ],
    )


def learned(strategy, server, driver_class, **kwargs):
    memory = FixMemory(strategy, **kwargs)
    drive = driver_class(memory, server)
    drive.fail(card_fix(server))
    assert len(memory.entries(server.url)) == 1
    return memory, drive


@pytest.mark.parametrize("strategy", ROW_ARMS)
def test_a_change_to_an_unread_rows_contents_restamps_a_key_set_fix(strategy, wallet, driver_class):
    memory, drive = learned(strategy, wallet, driver_class)
    wallet.update("cards", "c2", {"limit": 10})

    events = drive.ok()

    assert [type(e) for e in events if isinstance(e, (Evicted, Restamped))] == [Restamped]
    assert len(memory.entries(wallet.url)) == 1


@pytest.mark.parametrize("strategy", ROW_ARMS)
@pytest.mark.parametrize(
    "change", [("c3", {"limit": 1}), ("c2", None)], ids=["key-added", "key-removed"]
)
def test_a_key_added_or_removed_evicts_a_key_set_fix(strategy, change, wallet, driver_class):
    memory, drive = learned(strategy, wallet, driver_class)
    wallet.update("cards", *change)

    events = drive.ok()

    [evicted] = [e for e in events if isinstance(e, Evicted)]
    assert evicted.reason is EvictionReason.ROW_CHANGED
    assert "key set" in evicted.detail
    assert memory.entries(wallet.url) == []


def test_a_change_to_a_row_it_also_read_evicts_a_key_set_fix(fake_origin, driver_class):
    server = fake_origin({"cards": dict(CARDS)})
    memory = FixMemory("row")
    drive = driver_class(memory, server)
    drive.fail(card_fix(server, also_read=("c1",)))
    server.update("cards", "c1", {"limit": 6})

    drive.ok()

    assert memory.entries(server.url) == []


def test_the_table_arm_evicts_a_key_set_fix_on_any_move(wallet, driver_class):
    memory, drive = learned("table", wallet, driver_class)
    wallet.update("cards", "c2", {"limit": 10})

    drive.ok()

    assert memory.entries(wallet.url) == []


def test_a_key_set_dependency_survives_a_restart_of_a_persistent_store(
    tmp_path, wallet, driver_class
):
    with SQLiteStore(tmp_path / "m.db") as store:
        learned("row", wallet, driver_class, store=store)
    with SQLiteStore(tmp_path / "m.db") as store:
        memory = FixMemory("row", store=store)
        [entry] = memory.entries(wallet.url)
        assert entry.dependencies == (Dependency("cards", "1.0.0", ("c9",), membership=True),)
        drive = driver_class(memory, wallet)
        wallet.update("cards", "c3", {"limit": 1})
        drive.ok()
        assert memory.entries(wallet.url) == []


def test_repeated_items_of_a_table_merge_keeping_the_key_set_read():
    suggestion = Suggestion.model_validate(
        {
            "type": "T",
            "parameters": {},
            "action": "add_field",
            "tables": [
                {"table": "cards", "version": "1", "keys": ["c1"]},
                {"table": "cards", "version": "1", "membership": {"keys": ["c2"]}},
            ],
        }
    )
    assert dependencies_of(suggestion, lambda t: "1") == (
        Dependency("cards", "1", ("c1", "c2"), membership=True),
    )


def test_a_key_set_item_read_by_a_client_that_ignores_membership_is_table_granular():
    item = {"table": "cards", "version": "1", "membership": {"keys": ["c9"]}}
    suggestion = Suggestion.model_validate(
        {"type": "T", "parameters": {}, "action": "add_field", "tables": [item]}
    )
    assert suggestion.tables is not None and suggestion.tables[0].keys is None
