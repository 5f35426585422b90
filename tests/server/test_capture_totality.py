"""Capture is total or refuses: a value the contract cannot carry fails the writer's transaction
with a message naming the table, the column (and, on PostgreSQL, the row); a capture record or a
row that is already unreadable is quarantined and reported, never a failure of every read or of
a worker's start. The writers here are plain ``sqlite3`` / ``psycopg``, not the library."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.server.sqldb import BACKENDS, ProviderDB, provider_db

from invalidation_contracts.server import Domain, SQLTable
from invalidation_contracts.server.tables import MAX_JSON_DEPTH
from invalidation_contracts.server.worker.runtime import Runtime, ingest, open_runtime


def poisoned() -> Domain:
    return Domain("poisoned", {"poison": SQLTable("poison", key="k")}, [], [])


@pytest.fixture(params=BACKENDS)
def pdb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProviderDB]:
    yield from provider_db(request, tmp_path)


@pytest.fixture
def worker(pdb: ProviderDB, tmp_path: Path) -> Iterator[Runtime]:
    pdb.script(
        f"CREATE TABLE poison (k TEXT UNIQUE, b BIGINT, f {pdb.type('float')}, "
        f"j {pdb.type('json')})",
        "INSERT INTO poison VALUES ('a', 1, 1.5, '{\"n\": 1}')",
    )
    store = str(tmp_path / "registry.sqlite") if pdb.kind == "sqlite" else pdb.url
    runtime = open_runtime(poisoned(), store=store, database=pdb.url)
    yield runtime
    runtime.close()


def rows(runtime: Runtime) -> dict[str, Any]:
    return runtime.registry.state.tables["poison"].plain_rows()


def refused(pdb: ProviderDB, statement: str) -> str:
    with pytest.raises(Exception) as caught:
        pdb.script(statement)
    return str(caught.value)


@pytest.mark.parametrize(
    ("statement", "column"),
    [
        ("UPDATE poison SET b = 9007199254740993 WHERE k = 'a'", "b"),
        ("UPDATE poison SET b = -9007199254740993 WHERE k = 'a'", "b"),
        ("UPDATE poison SET j = '{\"n\": 9007199254740993}' WHERE k = 'a'", "j"),
        ("UPDATE poison SET j = '[1, [2, 1e400]]' WHERE k = 'a'", "j"),
    ],
)
def test_a_value_outside_i_json_is_refused_in_the_writers_transaction(
    pdb: ProviderDB, worker: Runtime, statement: str, column: str
) -> None:
    message = refused(pdb, statement)
    assert "reference table 'poison'" in message and f"column '{column}'" in message
    if pdb.kind == "postgres":
        assert '"k": "a"' in message or '["a"]' in message, "the row is named"
    assert pdb.query("SELECT b FROM poison WHERE k = 'a'") == [(1,)], "nothing committed"


def test_the_largest_interoperable_integer_is_carried(pdb: ProviderDB, worker: Runtime) -> None:
    pdb.script("UPDATE poison SET b = 9007199254740991 WHERE k = 'a'")
    ingest(worker.registry, worker.sources[0])
    assert rows(worker)["a"]["b"] == 9007199254740991


def test_a_null_key_is_refused(pdb: ProviderDB, worker: Runtime) -> None:
    message = refused(pdb, "INSERT INTO poison VALUES (NULL, 2, 2.5, NULL)")
    assert "key column 'k' is NULL" in message and "reference table 'poison'" in message
    assert pdb.query("SELECT count(*) FROM poison") == [(1,)]


def test_infinity_is_refused(pdb: ProviderDB, worker: Runtime) -> None:
    value = "'Infinity'" if pdb.kind == "postgres" else "9e999"
    message = refused(pdb, f"UPDATE poison SET f = {value} WHERE k = 'a'")
    assert "column 'f'" in message and "Infinity" in message


@pytest.mark.postgres
def test_nan_is_refused_on_postgresql(postgres_url: str, tmp_path: Path) -> None:
    pdb = ProviderDB("postgres", postgres_url, postgres_url)
    pdb.script(
        "CREATE TABLE poison (k TEXT UNIQUE, b BIGINT, f DOUBLE PRECISION, j JSONB)",
        "INSERT INTO poison VALUES ('a', 1, 1.5, NULL)",
    )
    runtime = open_runtime(poisoned(), store=postgres_url, database=postgres_url)
    try:
        message = refused(pdb, "UPDATE poison SET f = 'NaN' WHERE k = 'a'")
        assert "column 'f'" in message and "not a finite number" in message
    finally:
        runtime.close()


def test_a_blob_is_refused_on_sqlite(tmp_path: Path) -> None:
    pdb = ProviderDB("sqlite", f"sqlite:///{tmp_path / 'p.db'}", str(tmp_path / "p.db"))
    pdb.script("CREATE TABLE poison (k TEXT UNIQUE, b BIGINT, f REAL, j JSON)")
    runtime = open_runtime(poisoned(), store=str(tmp_path / "r.sqlite"), database=pdb.url)
    try:
        message = refused(pdb, "INSERT INTO poison VALUES ('x', X'00ff', NULL, NULL)")
        assert "column 'b' holds a BLOB" in message
    finally:
        runtime.close()


def forge(pdb: ProviderDB, op: str, key: str, row: str | None) -> None:
    """A capture record as an older release (without the checks) could have written it; on
    PostgreSQL, where a reader takes each touched row's current image, the row is written too."""
    if pdb.kind == "postgres" and key == '["a"]' and row is not None:
        pdb.script(
            "ALTER TABLE poison DISABLE TRIGGER ic_capture",
            "UPDATE poison SET b = 9007199254740993 WHERE k = 'a'",
            "ALTER TABLE poison ENABLE ALWAYS TRIGGER ic_capture",
        )
    values = f"'poison', '{op}', '{key}', " + ("NULL" if row is None else f"'{row}'")
    if pdb.kind == "sqlite":
        pdb.script(f"INSERT INTO ic_capture (table_name, op, key, row) VALUES ({values})")
        return
    pdb.script(
        "INSERT INTO invalidation_contracts.capture SELECT"
        " nextval('invalidation_contracts.capture_seq'), pg_current_xact_id()::text,"
        f" {values}"
    )


def quarantined(runtime: Runtime) -> list[tuple[str, str]]:
    return [(q.table, q.key) for q in runtime.sources[0].quarantined()]


def test_an_unreadable_capture_record_is_quarantined_and_the_rest_is_served(
    pdb: ProviderDB, worker: Runtime
) -> None:
    forge(pdb, "upsert", '["a"]', '{"b": 9007199254740993, "f": 1.5, "j": null}')
    pdb.script("INSERT INTO poison VALUES ('c', 3, 3.5, NULL)")
    assert ingest(worker.registry, worker.sources[0]) is True, "no exception: the rest is served"
    assert rows(worker)["a"]["b"] == 1, "the last carried image stays"
    assert rows(worker)["c"]["b"] == 3
    assert quarantined(worker) == [("poison", "a")]
    [entry] = worker.sources[0].quarantined()
    assert "9007199254740993" in entry.reason and entry.capture_id is not None


def test_a_carriable_write_to_a_quarantined_row_clears_it(pdb: ProviderDB, worker: Runtime) -> None:
    forge(pdb, "upsert", "[null]", '{"b": 1, "f": null, "j": null}')
    forge(pdb, "upsert", '["a"]', '{"b": 9007199254740993, "f": 1.5, "j": null}')
    ingest(worker.registry, worker.sources[0])
    assert quarantined(worker) == [("poison", "[null]"), ("poison", "a")]
    pdb.script("UPDATE poison SET b = 7 WHERE k = 'a'")
    ingest(worker.registry, worker.sources[0])
    assert rows(worker)["a"]["b"] == 7
    assert quarantined(worker) == [("poison", "[null]")]


def test_an_unreadable_row_does_not_block_a_worker_from_starting(
    pdb: ProviderDB, worker: Runtime, tmp_path: Path
) -> None:
    epoch = worker.registry.state.epoch
    worker.close()
    drop = (
        "DROP TRIGGER ic_capture_poison_insert"
        if pdb.kind == "sqlite"
        else ("DROP TRIGGER ic_capture ON poison")
    )
    pdb.script(
        drop,
        "INSERT INTO poison VALUES (NULL, 5, 5.5, NULL)",
        "INSERT INTO poison VALUES ('big', 9007199254740993, 1.0, NULL)",
    )
    store = str(tmp_path / "registry.sqlite") if pdb.kind == "sqlite" else pdb.url
    again = open_runtime(poisoned(), store=store, database=pdb.url)
    try:
        assert again.registry.state.epoch == epoch
        assert set(rows(again)) == {"a"}, "what cannot be carried is left out, not served"
        assert quarantined(again) == [("poison", "[null]"), ("poison", "big")]
    finally:
        again.close()


@pytest.mark.parametrize("pdb", BACKENDS[1:], indirect=True)  # only PostgreSQL is surveyed
def test_a_survey_quarantines_a_bypassed_row_it_cannot_carry(
    pdb: ProviderDB, worker: Runtime
) -> None:
    pdb.script(
        "DROP TRIGGER ic_capture ON poison",
        "INSERT INTO poison VALUES ('big', 9007199254740993, 1.0, NULL)",
    )
    state, [source] = worker.registry.state, worker.sources
    marks = {name: f"{state.epoch}/{t.version}" for name, t in state.tables.items()}
    source.survey(state.tables, marks)  # type: ignore[attr-defined]
    assert quarantined(worker) == [("poison", "big")], "reported, not silently left out"
    assert "big" not in rows(worker)


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [3000, MAX_JSON_DEPTH + 2])
def test_a_value_nested_too_deeply_is_quarantined_and_the_rest_is_served(
    pdb: ProviderDB, worker: Runtime, depth: int
) -> None:
    insert = f"INSERT INTO poison VALUES ('deep', 1, 1.0, '{nested(depth)}')"
    if pdb.kind == "sqlite" and depth > 1000:  # SQLite's own JSON parser refuses it
        assert "malformed JSON" in refused(pdb, insert)
        return
    pdb.script(insert)
    pdb.script("INSERT INTO poison VALUES ('c', 3, 3.5, NULL)")
    assert ingest(worker.registry, worker.sources[0]) is True, "no exception: the rest is served"
    assert "deep" not in rows(worker) and rows(worker)["c"]["b"] == 3
    [entry] = worker.sources[0].quarantined()
    assert (entry.table, entry.key) == ("poison", "deep")
    assert f"deeper than {MAX_JSON_DEPTH} levels" in entry.reason


def test_a_value_nested_too_deeply_does_not_stop_a_worker_from_starting(
    pdb: ProviderDB, worker: Runtime, tmp_path: Path
) -> None:
    depth = 3000 if pdb.kind == "postgres" else MAX_JSON_DEPTH + 2  # SQLite refuses 3000
    pdb.script(f"INSERT INTO poison VALUES ('deep', 1, 1.0, '{nested(depth)}')")
    epoch = worker.registry.state.epoch
    worker.close()
    store = str(tmp_path / "registry.sqlite") if pdb.kind == "sqlite" else pdb.url
    again = open_runtime(poisoned(), store=store, database=pdb.url)
    try:
        assert "deep" not in rows(again)
        assert quarantined(again) == [("poison", "deep")]
        assert again.registry.state.epoch == epoch, "the history is kept"
    finally:
        again.close()


def test_a_value_at_the_depth_bound_is_carried(pdb: ProviderDB, worker: Runtime) -> None:
    pdb.script(f"INSERT INTO poison VALUES ('ok', 1, 1.0, '{nested(MAX_JSON_DEPTH)}')")
    ingest(worker.registry, worker.sources[0])
    assert "ok" in rows(worker) and quarantined(worker) == []


JSONB_REFUSED = [
    '{"rate": 0.10000000000000000555}',  # more digits than a double holds
    '{"n": 9007199254740993}',  # beyond 2^53 and not a double: an integer
    '{"n": 12345678901234567890}',  # a 20-digit integer a double rounds
    '{"d": 1.2345678901234567890123}',  # a 23-digit decimal a double rounds
    '{"tiny": 1e-400}',  # beyond a double's range
    '{"huge": [1, 1e400]}',
    '{"z": 0, "e": 5e-324}',  # below the smallest normal double: refused, not rounded
]
JSONB_CARRIED = [
    ('{"rate": 0.1}', {"rate": 0.1}),
    ('{"r": 0.30000000000000004, "n": [1, 2.25]}', {"r": 0.30000000000000004, "n": [1, 2.25]}),
    ('{"n": 9007199254740992}', {"n": 9007199254740992.0}),  # 2^53 is a double: served as one
    ('{"big": 1e300, "m": [-6.02e23]}', {"big": 1e300, "m": [-6.02e23]}),  # finite doubles
    ('{"x": 1.152921504606847e18}', {"x": 1.152921504606847e18}),
]


@pytest.fixture
def jsonb(postgres_url: str) -> Iterator[tuple[ProviderDB, Runtime]]:
    pdb = ProviderDB("postgres", postgres_url, postgres_url)
    pdb.script(
        "CREATE TABLE poison (k TEXT UNIQUE, b BIGINT, f DOUBLE PRECISION, j JSONB)",
        "INSERT INTO poison VALUES ('a', 1, 1.0, NULL)",
    )
    runtime = open_runtime(poisoned(), store=postgres_url, database=postgres_url)
    yield pdb, runtime
    runtime.close()


@pytest.mark.postgres
def test_jsonb_numbers_a_double_does_not_hold_are_refused_naming_the_column(
    jsonb: tuple[ProviderDB, Runtime],
) -> None:
    pdb, _ = jsonb
    for value in JSONB_REFUSED:
        message = refused(pdb, f"UPDATE poison SET j = '{value}' WHERE k = 'a'")
        assert "column 'j'" in message and "poison" in message, (value, message)


@pytest.mark.postgres
def test_jsonb_doubles_are_carried_as_a_double_holds_them(
    jsonb: tuple[ProviderDB, Runtime],
) -> None:
    pdb, runtime = jsonb
    for value, carried in JSONB_CARRIED:
        pdb.script(f"UPDATE poison SET j = '{value}' WHERE k = 'a'")
        ingest(runtime.registry, runtime.sources[0])
        served = rows(runtime)["a"]["j"]
        assert json.dumps(served, sort_keys=True) == json.dumps(carried, sort_keys=True)


@pytest.mark.postgres
def test_a_double_column_above_2_to_the_53_is_carried(postgres_url: str) -> None:
    pdb = ProviderDB("postgres", postgres_url, postgres_url)
    pdb.script(
        "CREATE TABLE poison (k TEXT UNIQUE, b BIGINT, f DOUBLE PRECISION, j JSONB)",
        "INSERT INTO poison VALUES ('a', 1, 1e300, NULL)",
    )
    runtime = open_runtime(poisoned(), store=postgres_url, database=postgres_url)
    try:
        assert rows(runtime)["a"]["f"] == 1e300  # the full read at open
        pdb.script("UPDATE poison SET f = -2.5e19 WHERE k = 'a'")
        ingest(runtime.registry, runtime.sources[0])
        assert rows(runtime)["a"]["f"] == -2.5e19  # a captured write
        assert quarantined(runtime) == []
    finally:
        runtime.close()
