"""The store API, the same for both stores; SQLite's durability and schema guard."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from invalidation_contracts.client import FixMemory, InMemoryStore, SQLiteStore, StoreError
from invalidation_contracts.client.stores import CheckOp, GetOp, PutOp, StoreConflict
from invalidation_contracts.client.values import Answer


@pytest.fixture(
    params=["in-memory", "sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def store(request, tmp_path):
    if request.param == "in-memory":
        made = InMemoryStore()
    elif request.param == "sqlite":
        made = SQLiteStore(tmp_path / "store.db")
    else:
        from invalidation_contracts.client.stores import PostgresStore

        made = PostgresStore(request.getfixturevalue("postgres_url"))
    yield made
    made.close()


# -- conformance: both stores


def test_a_put_value_is_read_back_by_get(store):
    store.put(("a", "b"), "k", {"n": 1, "list": [1, 2], "nested": {"x": None}})

    item = store.get(("a", "b"), "k")

    assert (item.namespace, item.key, item.value) == (
        ("a", "b"),
        "k",
        {"n": 1, "list": [1, 2], "nested": {"x": None}},
    )


def test_get_of_a_missing_key_is_none(store):
    assert store.get(("a",), "nothing") is None


def test_a_put_replaces_the_value_and_keeps_the_creation_time(store):
    store.put(("a",), "k", {"v": 1})
    first = store.get(("a",), "k")

    store.put(("a",), "k", {"v": 2})

    second = store.get(("a",), "k")
    assert second.value == {"v": 2}
    assert second.created_at == first.created_at and second.updated_at >= first.updated_at


def test_delete_removes_the_item(store):
    store.put(("a",), "k", {"v": 1})

    store.delete(("a",), "k")

    assert store.get(("a",), "k") is None


def test_a_stored_value_does_not_change_when_the_callers_dict_does(store):
    value = {"v": [1]}
    store.put(("a",), "k", value)
    value["v"].append(2)

    assert store.get(("a",), "k").value == {"v": [1]}


def test_search_returns_the_items_under_a_prefix_ordered_by_namespace_and_key(store):
    store.put(("a", "y"), "2", {})
    store.put(("a", "x"), "9", {})
    store.put(("a", "x"), "1", {})
    store.put(("ab",), "0", {})

    found = store.search(("a",), limit=10)

    assert [(i.namespace, i.key) for i in found] == [
        (("a", "x"), "1"),
        (("a", "x"), "9"),
        (("a", "y"), "2"),
    ]


def test_search_filters_on_top_level_fields_and_pages(store):
    for n in range(6):
        store.put(("a",), f"k{n}", {"even": n % 2 == 0, "n": n})

    page = store.search(("a",), filter={"even": True}, limit=2, offset=1)

    assert [i.value["n"] for i in page] == [2, 4]


def test_list_namespaces_cuts_to_the_depth_asked(store):
    store.put(("a", "x", "1"), "k", {})
    store.put(("a", "y", "2"), "k", {})
    store.put(("b",), "k", {})

    assert store.list_namespaces(prefix=("a",), max_depth=2) == [("a", "x"), ("a", "y")]
    assert store.list_namespaces() == [("a", "x", "1"), ("a", "y", "2"), ("b",)]


def test_a_batch_that_fails_changes_nothing(store):
    store.put(("a",), "kept", {"v": 1})

    with pytest.raises(TypeError):
        store.batch([PutOp(("a",), "kept", None), PutOp(("a",), "new", {"v": object()})])

    assert store.get(("a",), "kept").value == {"v": 1} and store.get(("a",), "new") is None


def test_a_batch_reads_its_own_earlier_writes(store):
    results = store.batch([PutOp(("a",), "k", {"v": 1}), GetOp(("a",), "k")])

    assert results[0] is None and results[1].value == {"v": 1}


def test_a_batch_whose_check_holds_is_written(store):
    store.put(("a",), "gen", {"n": 1})

    store.batch([CheckOp(("a",), "gen", {"n": 1}), PutOp(("a",), "gen", {"n": 2})])

    assert store.get(("a",), "gen").value == {"n": 2}


def test_a_batch_whose_check_fails_writes_nothing_and_raises_a_conflict(store):
    store.put(("a",), "gen", {"n": 2})

    with pytest.raises(StoreConflict):
        store.batch(
            [
                PutOp(("a",), "other", {"v": 1}),
                CheckOp(("a",), "gen", {"n": 1}),
                PutOp(("a",), "gen", {"n": 3}),
            ]
        )

    assert store.get(("a",), "gen").value == {"n": 2} and store.get(("a",), "other") is None


def test_a_check_for_none_holds_only_while_the_key_is_absent(store):
    store.batch([CheckOp(("a",), "k", None), PutOp(("a",), "k", {"v": 1})])

    with pytest.raises(StoreConflict):
        store.batch([CheckOp(("a",), "k", None), PutOp(("a",), "k", {"v": 2})])
    assert store.get(("a",), "k").value == {"v": 1}


def test_a_check_sees_the_batchs_own_earlier_put(store):
    store.batch([PutOp(("a",), "k", {"v": 1}), CheckOp(("a",), "k", {"v": 1})])

    with pytest.raises(StoreConflict):
        store.batch([PutOp(("a",), "k", {"v": 2}), CheckOp(("a",), "k", {"v": 1})])
    assert store.get(("a",), "k").value == {"v": 1}


@pytest.mark.parametrize("namespace", [(), ("",), ("has.dot",), ("sep\x1f",)])
def test_an_ill_formed_namespace_is_refused(store, namespace):
    with pytest.raises(ValueError):
        store.put(namespace, "k", {})


def test_a_value_must_be_a_json_object(store):
    with pytest.raises(TypeError):
        store.put(("a",), "k", [1, 2])  # type: ignore[arg-type]


# -- SQLite specifics


def test_sqlite_runs_in_wal_mode_with_full_synchronous(tmp_path):
    with SQLiteStore(tmp_path / "m.db") as store:
        assert store.journal_mode == "wal" and store.synchronous == 2


def test_the_in_memory_version_moves_with_each_write_and_not_with_reads():
    store = InMemoryStore()
    before = store.version()
    store.get(("a",), "k")
    assert store.version() == before
    store.put(("a",), "k", {})
    assert store.version() != before


def test_the_sqlite_version_moves_when_another_connection_commits(tmp_path):
    path = tmp_path / "m.db"
    with SQLiteStore(path) as mine, SQLiteStore(path) as theirs:
        before = mine.version()
        mine.get(("a",), "k")
        theirs.get(("a",), "k")
        assert mine.version() == before
        theirs.put(("a",), "k", {"v": 1})
        assert mine.version() != before


def test_the_sqlite_version_moves_with_its_own_writes(tmp_path):
    with SQLiteStore(tmp_path / "m.db") as store:
        before = store.version()
        store.put(("a",), "k", {})
        assert store.version() != before


def test_sqlite_records_its_schema_version(tmp_path):
    SQLiteStore(tmp_path / "m.db").close()

    db = sqlite3.connect(tmp_path / "m.db")
    assert db.execute("PRAGMA user_version").fetchone()[0] == 3
    db.close()


def _version_1_file(path, entry):
    """A fix-memory file as version 1 of this library wrote it (entries keyed without operation)."""
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE items (namespace TEXT NOT NULL, key TEXT NOT NULL, value TEXT NOT NULL, "
        "created_at REAL NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (namespace, key)) "
        "WITHOUT ROWID"
    )
    ns = "\x1f".join(("invalidation-contracts", "https://api%2Etest", "entries"))
    db.execute("INSERT INTO items VALUES (?, 'e1', ?, 0, 0)", (ns, json.dumps(entry)))
    db.execute("PRAGMA application_id = 1229147441")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()


def test_a_version_1_memory_is_migrated_and_its_entries_serve_the_unnamed_operation(tmp_path):
    entry = {
        "id": "e1",
        "serial": 1,
        "origin": "https://api.test",
        "type": "ADD_PROMO",
        "scope": {"plan": "plan_a"},
        "suggestion": {
            "type": "ADD_PROMO",
            "parameters": {"promo_code": "SUMMER"},
            "action": "add_field",
            "cache_hint": "cacheable",
            "scope": {"plan": "plan_a"},
        },
        "dependencies": [],
        "rules": [],
        "validated_at": 0.0,
        "provenance": {"episode": 1, "response_id": None, "stored_at": 0.0},
    }
    path = tmp_path / "v1.db"
    _version_1_file(path, entry)

    with FixMemory("row", store=path) as memory:
        (migrated,) = memory.entries("https://api.test")
        (confirm,) = memory.needs("https://api.test")  # a new process confirms the origin first
        empty = {"contract_epoch": "e", "since": 0, "last_seq": 0, "tables": []}
        memory.answer(confirm, Answer(200, empty))
        served = list(memory.lookup("https://api.test", {"plan": "plan_a"}).entries)
        named = list(
            memory.lookup("https://api.test", {"plan": "plan_a"}, operation="POST /v1/x").entries
        )

    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 3
    db.close()
    assert migrated.operation == "" and [e.id for e in served] == ["e1"] and named == []


def test_sqlite_refuses_a_missing_file_when_not_creating(tmp_path):
    with pytest.raises(StoreError, match="no memory database"):
        SQLiteStore(tmp_path / "absent.db", create=False)


def test_sqlite_refuses_a_file_that_is_not_a_database(tmp_path):
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not sqlite" * 100)

    with pytest.raises(StoreError, match="not a fix-memory database"):
        SQLiteStore(path)


def test_sqlite_refuses_another_applications_database(tmp_path):
    path = tmp_path / "other.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE t (x)")
    db.close()

    with pytest.raises(StoreError, match="another application"):
        SQLiteStore(path)


def test_sqlite_refuses_a_schema_version_it_does_not_read(tmp_path):
    path = tmp_path / "m.db"
    SQLiteStore(path).close()
    db = sqlite3.connect(path)
    db.execute("PRAGMA user_version = 99")
    db.close()

    with pytest.raises(StoreError, match="schema version 99"):
        SQLiteStore(path)


def test_a_closed_sqlite_store_refuses_work(tmp_path):
    store = SQLiteStore(tmp_path / "m.db")
    store.close()

    with pytest.raises(StoreError, match="closed"):
        store.get(("a",), "k")


_WRITER = textwrap.dedent(
    """
    import sys
    from invalidation_contracts.client import FixMemory, Observed
    memory = FixMemory("row", store=sys.argv[1])
    origin = "https://api.test"
    print("ready", flush=True)
    for n in range(100_000):
        fix = {
            "type": f"FIX_{n}", "parameters": {"n": n},
            "action": "add_field", "cache_hint": "cacheable", "scope": {"n": n},
            "tables": [{"table": "codes", "version": "1.0.0", "keys": [str(n)]}],
        }
        body = {
            "type": "urn:invalidation-contracts:problem:policy-violation",
            "title": "t", "status": 422,
            "recovery_feedback": {"suggestions": [fix]},
            "table_versions": {"codes": "1.0.0"}, "contract_seq": 0, "contract_epoch": "e",
        }
        obs = memory.observe(origin, Observed(None, 422, body))
        print(obs.events[0].entry_id, flush=True)
    """
)


def test_a_killed_writer_loses_no_committed_entry(tmp_path):
    path = tmp_path / "memory.db"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    child = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    committed = [child.stdout.readline().strip() for _ in range(25)]

    os.kill(child.pid, signal.SIGKILL)
    rest, _ = child.communicate(timeout=30)
    committed += rest.split()

    assert child.returncode == -signal.SIGKILL
    with FixMemory("row", store=SQLiteStore(path), close_store=True) as reopened:
        stored = {entry.id for entry in reopened.entries("https://api.test")}
        assert reopened.store.integrity_check() == "ok"
    assert set(committed) <= stored
    assert len(committed) >= 25


@pytest.mark.postgres
def test_a_postgresql_memory_of_version_1_is_marked_2_and_a_newer_one_is_refused(postgres_url):
    """Version 2 may hold eviction records whose dead rows version 1 would serve."""
    import psycopg

    from invalidation_contracts.client.stores import PostgresStore

    def stored_version() -> int:
        with psycopg.connect(postgres_url, autocommit=True) as db:
            return db.execute("SELECT version FROM ic_memory_schema").fetchone()[0]

    def mark(version: int) -> None:
        with psycopg.connect(postgres_url, autocommit=True) as db:
            db.execute("UPDATE ic_memory_schema SET version = %s", (version,))

    PostgresStore(postgres_url, listen=False).close()
    mark(1)
    PostgresStore(postgres_url, listen=False).close()
    assert stored_version() == 2
    mark(3)
    with pytest.raises(StoreError, match="schema version 3"):
        PostgresStore(postgres_url, listen=False)
