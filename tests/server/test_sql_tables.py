"""Reference tables declared over a provider's own SQL tables: declaration checks and loading."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.server.sqldb import BACKENDS, ProviderDB, provider_db

from invalidation_contracts.server import SQLTable
from invalidation_contracts.server.sql import DeclarationError, SQLSource, bind
from invalidation_contracts.server.sql.declare import BoundTable
from invalidation_contracts.server.sql.engine import make_engine


@pytest.fixture(params=BACKENDS)
def pdb(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ProviderDB]:
    yield from provider_db(request, tmp_path)


def declare(pdb: ProviderDB, table: SQLTable, name: str = "plans") -> BoundTable:
    engine = make_engine(pdb.url)
    try:
        return bind(engine, name, table)
    finally:
        engine.dispose()


def test_a_declaration_names_at_least_one_key_column() -> None:
    with pytest.raises(ValueError, match="the key names no column"):
        SQLTable("plans", key=())


def test_a_key_column_cannot_also_be_a_row_column() -> None:
    with pytest.raises(ValueError, match="'id' is part of the key"):
        SQLTable("plans", key="id", columns=["id", "funding"])


def test_a_table_that_does_not_exist_is_refused(pdb: ProviderDB) -> None:
    with pytest.raises(DeclarationError, match="'plans'.*no such table"):
        declare(pdb, SQLTable("plans"))


def test_a_table_without_a_primary_key_needs_a_declared_key(pdb: ProviderDB) -> None:
    pdb.script("CREATE TABLE plans (id TEXT, funding TEXT)")
    with pytest.raises(DeclarationError, match="reference table 'plans'.*no primary key"):
        declare(pdb, SQLTable("plans"))


def test_a_key_column_that_does_not_exist_is_named(pdb: ProviderDB) -> None:
    pdb.script("CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT)")
    with pytest.raises(DeclarationError, match="key column 'plan_id' does not exist"):
        declare(pdb, SQLTable("plans", key="plan_id"))


def test_a_row_column_that_does_not_exist_is_named(pdb: ProviderDB) -> None:
    pdb.script("CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT)")
    with pytest.raises(DeclarationError, match="column 'promo' does not exist"):
        declare(pdb, SQLTable("plans", columns=["funding", "promo"]))


def test_a_declared_key_must_be_unique(pdb: ProviderDB) -> None:
    pdb.script("CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT)")
    with pytest.raises(DeclarationError, match="neither the primary key nor unique"):
        declare(pdb, SQLTable("plans", key="funding"))


def test_a_unique_column_may_be_the_key(pdb: ProviderDB) -> None:
    pdb.script("CREATE TABLE plans (id INTEGER PRIMARY KEY, slug TEXT NOT NULL UNIQUE, f TEXT)")
    engine = make_engine(pdb.url)
    try:
        bound = bind(engine, "plans", SQLTable("plans", key="slug"))
    finally:
        engine.dispose()
    assert [c.name for c in bound.key] == ["slug"]
    assert [c.name for c in bound.columns] == ["id", "f"]


@pytest.mark.parametrize("sql_type", ["NUMERIC(10, 2)", "DATE", "TIMESTAMP"])
def test_an_unsupported_column_type_is_named_with_the_table(pdb: ProviderDB, sql_type: str) -> None:
    pdb.script(f"CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT, starts {sql_type})")
    with pytest.raises(
        DeclarationError,
        match=r"reference table 'plans' \(SQL table 'plans'\): column 'starts' has type",
    ):
        declare(pdb, SQLTable("plans"))


def test_a_column_left_out_of_the_declaration_is_not_checked(pdb: ProviderDB) -> None:
    pdb.script("CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT, starts DATE)")
    binding = declare(pdb, SQLTable("plans", columns=["funding"]))
    assert [column.name for column in binding.columns] == ["funding"]


def test_a_float_key_is_refused(pdb: ProviderDB) -> None:
    pdb.script(f"CREATE TABLE plans (id {pdb.type('float')} PRIMARY KEY, funding TEXT)")
    with pytest.raises(DeclarationError, match="key column 'id' is float"):
        declare(pdb, SQLTable("plans"))


def test_rows_load_as_json_values_of_their_column_types(pdb: ProviderDB) -> None:
    pdb.script(
        "CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT, seats INTEGER, "
        f"price {pdb.type('float')}, public {pdb.type('bool')}, tags {pdb.type('json')})",
        "INSERT INTO plans VALUES ('basic', 'card', 3, 0.30000000000000004, TRUE, "
        """'["a", {"b": 1}]')""",
        "INSERT INTO plans VALUES ('gold', NULL, NULL, 2.0, FALSE, NULL)",
    )
    source = SQLSource(pdb.url, {"plans": SQLTable("plans")})
    try:
        source.open()
        snapshots, _ = source.load()
    finally:
        source.close()
    rows = snapshots["plans"].plain_rows()
    assert rows["basic"] == {
        "funding": "card",
        "seats": 3,
        "price": 0.30000000000000004,
        "public": True,
        "tags": ["a", {"b": 1}],
    }
    assert rows["gold"] == {
        "funding": None,
        "seats": None,
        "price": 2.0,
        "public": False,
        "tags": None,
    }


def test_an_integer_key_becomes_its_decimal_text_and_a_composite_key_a_json_array(
    pdb: ProviderDB,
) -> None:
    pdb.script(
        "CREATE TABLE seats (id INTEGER PRIMARY KEY, label TEXT)",
        "INSERT INTO seats VALUES (7, 'seven')",
        "CREATE TABLE prices (region TEXT, plan TEXT, cents INTEGER, PRIMARY KEY (region, plan))",
        "INSERT INTO prices VALUES ('eu', 'basic', 900)",
    )
    source = SQLSource(pdb.url, {"seats": SQLTable("seats"), "prices": SQLTable("prices")})
    try:
        source.open()
        snapshots, _ = source.load()
    finally:
        source.close()
    assert snapshots["seats"].plain_rows() == {"7": {"label": "seven"}}
    assert snapshots["prices"].plain_rows() == {'["eu","basic"]': {"cents": 900}}


def test_only_the_declared_columns_are_read(pdb: ProviderDB) -> None:
    pdb.script(
        "CREATE TABLE plans (id TEXT PRIMARY KEY, funding TEXT, internal_note TEXT)",
        "INSERT INTO plans VALUES ('basic', 'card', 'do not publish')",
    )
    source = SQLSource(pdb.url, {"plans": SQLTable("plans", columns=["funding"])})
    try:
        source.open()
        snapshots, _ = source.load()
    finally:
        source.close()
    assert snapshots["plans"].plain_rows() == {"basic": {"funding": "card"}}
