"""A damaged fix-memory file (issue 38, H6): a row whose JSON does not parse, or that is not an
entry, costs that entry alone. It is set aside (never served), reported once as an
``Unreadable`` event with a log line, and counted by ``memory stats``; the other entries of the
origin are served and the agent's calls go on. Real SQLite files damaged with ``sqlite3``."""

from __future__ import annotations

import logging
import sqlite3

from invalidation_contracts.cli.operator import origin_stats
from invalidation_contracts.client import FixMemory, MemorySetAside, Unreadable
from invalidation_contracts.client.shared.layout import namespace
from invalidation_contracts.client.shared.store import encode
from invalidation_contracts.client.values import Observed

ORIGIN = "https://damaged.example"


def failure(name: str) -> dict:
    suggestion = {
        "type": name,
        "action": "add_field",
        "parameters": {"note": name},
        "cache_hint": "cacheable",
        "scope": {"sku": name},
        "tables": [{"table": "t", "version": "1.0.0", "keys": [name]}],
    }
    return {
        "type": "urn:x",
        "title": "t",
        "status": 422,
        "success": False,
        "recovery_feedback": {"suggestions": [suggestion]},
        "table_versions": {"t": "1.0.0"},
        "contract_seq": 0,
        "contract_epoch": "e",
    }


def learned(path: str, names: list[str]) -> dict[str, str]:
    """A memory file holding one fix per name; ``{name: entry id}``."""
    with FixMemory("row", "lazy", store=path) as memory:
        for name in names:
            memory.observe(ORIGIN, Observed({"sku": name}, 422, failure(name)), operation="op")
        return {e.key.type: e.id for e in memory.entries(ORIGIN)}


def damage(path: str, entry_id: str, text: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute(
            "UPDATE items SET value = ? WHERE namespace = ? AND key = ?",
            (text, encode(namespace(ORIGIN, "entries")), entry_id),
        )


def test_a_row_that_is_not_json_costs_that_entry_alone(tmp_path, caplog):
    path = str(tmp_path / "memory.sqlite")
    ids = learned(path, ["a", "b", "c"])
    damage(path, ids["b"], "{not json")
    damage(path, ids["c"], '{"id": "shape of nothing"}')

    with caplog.at_level(logging.WARNING), FixMemory("row", "lazy", store=path) as memory:
        first = memory.observe(ORIGIN, Observed({"sku": "a"}, 200, {"success": True}))
        served = memory.lookup(ORIGIN, {"sku": "a"}, operation="op")
        again = memory.observe(ORIGIN, Observed({"sku": "a"}, 200, {"success": True}))

        assert [e.key.type for e in memory.entries(ORIGIN)] == ["a"]
        assert [e.key.type for e in served.entries] == ["a"]
        assert sorted(e.entry_id for e in first.of(Unreadable)) == sorted([ids["b"], ids["c"]])
        assert again.of(Unreadable) == []  # reported once
        assert sorted(memory.unreadable(ORIGIN)) == sorted([ids["b"], ids["c"]])
    assert sum("cannot be read and is set aside" in r.getMessage() for r in caplog.records) == 2


def test_memory_stats_counts_the_unreadable_entries(tmp_path):
    path = str(tmp_path / "memory.sqlite")
    ids = learned(path, ["a", "b"])
    damage(path, ids["a"], "[1, 2")

    (row,) = origin_stats(path)

    assert row["entries"] == 1 and row["unreadable"] == 1


def test_a_fix_learned_again_replaces_the_unreadable_row(tmp_path):
    path = str(tmp_path / "memory.sqlite")
    ids = learned(path, ["a"])
    damage(path, ids["a"], "\x00garbage")

    with FixMemory("row", "lazy", store=path) as memory:
        memory.observe(ORIGIN, Observed({"sku": "a"}, 422, failure("a")), operation="op")
        assert [e.key.type for e in memory.lookup(ORIGIN, {"sku": "a"}, operation="op").entries]
        assert [e.key.type for e in memory.entries(ORIGIN)] == ["a"]


def test_a_file_sqlite_cannot_open_is_set_aside_and_replaced(tmp_path, caplog):
    """Truncated to half: the agent starts on a new, empty memory; the damaged file is kept
    beside it, with a log line and a ``MemorySetAside`` event on the origin's first call."""
    path = tmp_path / "memory.sqlite"
    learned(str(path), ["a", "b"])
    damaged = path.read_bytes()[: path.stat().st_size // 2]
    path.write_bytes(damaged)

    with caplog.at_level(logging.WARNING), FixMemory("row", store=str(path)) as memory:
        first = memory.observe(ORIGIN, Observed({"sku": "a"}, 422, failure("a")), operation="op")
        second = memory.observe(ORIGIN, Observed({"sku": "a"}, 200, {"success": True}))
        assert [e.key.type for e in memory.entries(ORIGIN)] == ["a"]

    (event,) = first.of(MemorySetAside)
    assert event.path == str(path) and second.of(MemorySetAside) == []
    (aside,) = tmp_path.glob("memory.sqlite.damaged-*[!lm]")
    assert str(aside) == event.aside and aside.read_bytes() == damaged
    assert any("set aside as" in r.getMessage() for r in caplog.records)
