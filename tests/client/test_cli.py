"""``invalidation-contracts memory stats|list|evict`` on a fix memory file."""

from __future__ import annotations

import json

import pytest

from invalidation_contracts.cli import main
from invalidation_contracts.client import EvictionReason, FixMemory
from invalidation_contracts.client.values import Observed


@pytest.fixture
def db(tmp_path, server, standard_fixes, driver_class):
    path = tmp_path / "memory.db"
    with FixMemory("row", store=path) as memory:
        drive = driver_class(memory, server)
        drive.fail(*standard_fixes(server))
        memory.lookup(server.url, {"plan": "plan_a"})
        server.update("codes", "plan_a", {"code": "WINTER"})
        drive.ok()
    return path


def run(capsys, *argv):
    status = main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def test_memory_stats_prints_the_counters_of_each_origin_as_json(capsys, db, server):
    status, out, _ = run(capsys, "memory", "stats", "--db", str(db), "--json")

    (row,) = json.loads(out)
    assert status == 0
    assert (row["origin"], row["entries"], row["tombstones"]) == (server.url, 2, 1)
    assert (row["hits"], row["stores"], row["evictions"], row["restamps"]) == (
        1,
        3,
        {"row-changed": 1},
        1,
    )
    assert row["contract_bytes"] > 0


def test_memory_stats_renders_a_table(capsys, db):
    status, out, _ = run(capsys, "memory", "stats", "--db", str(db))

    rows = {cells[0]: cells[1:] for line in out.splitlines() if (cells := line.strip("│ ").split())}
    assert status == 0 and "counters per origin" in out
    assert rows["row-changed"] == ["│", "1"] and rows["stores"] == ["│", "3"]


def test_memory_stats_counts_refusals_by_bound(capsys, tmp_path, server):
    path = tmp_path / "refusing.db"
    unmarked = server.fix("GLOBAL", {"x": 1}, reads={"codes": None}, origin_wide=None)
    with FixMemory("row", store=path) as memory:
        memory.observe(server.url, Observed(None, 422, server.failure(unmarked)))

    status, out, _ = run(capsys, "memory", "stats", "--db", str(path))

    rows = {cells[0]: cells[1:] for line in out.splitlines() if (cells := line.strip("│ ").split())}
    assert status == 0 and rows["refused"] == ["│", "1"] and rows["unscoped"] == ["│", "1"]


def test_memory_list_shows_the_live_entries(capsys, db):
    status, out, _ = run(capsys, "memory", "list", "--db", str(db), "--json")

    assert status == 0
    assert [(r["id"], r["type"], r["depends_on"]) for r in json.loads(out)] == [
        ("e2", "ADD_PROMO", "codes@1.0.1[plan_b]"),
        ("e3", "USE_CREDIT", "tokens@1.0.0[tok_x]"),
    ]


def test_memory_list_tombstones_shows_the_evicted_entries_with_their_reason(capsys, db):
    status, out, _ = run(capsys, "memory", "list", "--db", str(db), "--tombstones", "--json")

    assert status == 0
    assert [(r["id"], r["reason"]) for r in json.loads(out)] == [("e1", "row-changed")]


def test_memory_list_renders_a_table(capsys, db, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    status, out, _ = run(capsys, "memory", "list", "--db", str(db))

    assert status == 0 and "live entries" in out and "USE_CREDIT" in out
    assert "codes@1.0.1[plan_b]" in out


def test_memory_list_reads_at_80_columns_with_each_fixs_parameters(capsys, db, monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    status, out, _ = run(capsys, "memory", "list", "--db", str(db))
    entries = json.loads(run(capsys, "memory", "list", "--db", str(db), "--json")[1])

    assert status == 0
    assert max(len(line) for line in out.splitlines()) <= 80
    assert "depends on: codes@1.0.1[plan_b]" in out  # labels and values are not broken
    for entry in entries:
        for name, value in entry["parameters"].items():
            assert f"{name}={json.dumps(value)}" in out


@pytest.mark.parametrize(
    "selector, evicted",
    [(["--id", "e2"], ["e2"]), (["--table", "tokens"], ["e3"]), (["--all"], ["e2", "e3"])],
)
def test_memory_evict_evicts_by_id_table_or_all(capsys, db, server, selector, evicted):
    status, out, _ = run(
        capsys, "memory", "evict", "--db", str(db), "--origin", server.url, *selector
    )

    assert status == 0 and out.strip().endswith(", ".join(evicted))
    with FixMemory("row", store=db) as memory:
        tombs = {t.entry.id: t.reason for t in memory.tombstones(server.url)}
    assert all(tombs[i] is EvictionReason.OPERATOR for i in evicted)


def test_memory_evict_of_an_unknown_id_fails_and_evicts_nothing(capsys, db, server):
    status, _, err = run(
        capsys,
        "memory",
        "evict",
        "--db",
        str(db),
        "--origin",
        server.url,
        "--id",
        "e2",
        "--id",
        "e99",
    )

    assert status == 1 and err.count("\n") == 1 and "e99" in err
    with FixMemory("row", store=db) as memory:
        assert [e.id for e in memory.entries(server.url)] == ["e2", "e3"]


def test_an_unknown_origin_is_a_one_line_error(capsys, db):
    status, _, err = run(
        capsys, "memory", "stats", "--db", str(db), "--origin", "https://nowhere.test"
    )

    assert status == 1 and err.count("\n") == 1 and "nowhere.test" in err


def test_a_missing_database_is_a_one_line_error(capsys, tmp_path):
    status, _, err = run(capsys, "memory", "list", "--db", str(tmp_path / "absent.db"))

    assert status == 1 and err.count("\n") == 1 and "no memory database" in err
    assert not (tmp_path / "absent.db").exists()


def test_a_corrupt_database_is_a_one_line_error(capsys, tmp_path):
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"\x00garbage" * 512)

    status, _, err = run(capsys, "memory", "stats", "--db", str(path))

    assert status == 1 and err.count("\n") == 1 and "not a fix-memory database" in err
