"""Two providers on one PostgreSQL database (issue 41, fault and change suite: two domains).

Each provider keeps its registry in a schema of its own (``store_schema``) and its capture lives
there too: its own lead, consumer and trim. A write to one domain's table reaches that domain's
contract within the lag bound and never the other's; a table both domains read keeps a trigger
for each (neither install replaces the other's); two domains on one registry schema are refused
at start by name. Before, both captured into one shared schema: the leader of one consumed and
trimmed the other's records, which then served a stale row while ready until a reconciliation.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack

import psycopg
import pytest

from invalidation_contracts.server import Domain, SQLTable
from invalidation_contracts.server.store.dialect import StorageError
from invalidation_contracts.server.worker.follower import DEFAULT_MAX_LAG_S
from invalidation_contracts.server.worker.runtime import Runtime, open_runtime

pytestmark = pytest.mark.postgres

SHOP = Domain("shop", {"items": SQLTable("items"), "prices": SQLTable("prices")}, [], [])
PARTS = Domain("parts", {"parts": SQLTable("parts"), "prices": SQLTable("prices")}, [], [])


@pytest.fixture
def database(postgres_url: str) -> str:
    with psycopg.connect(postgres_url, autocommit=True) as pg:
        for table in ("items", "parts", "prices"):
            pg.execute(f"CREATE TABLE {table} (id TEXT PRIMARY KEY, n INTEGER)")
            pg.execute(f"INSERT INTO {table} VALUES ('a', 0)")
    return postgres_url


@pytest.fixture
def providers(database: str) -> Iterator[dict[str, Runtime]]:
    """Both providers running (their followers started), each with its own registry schema."""
    with ExitStack() as stack:
        running = {}
        for domain in (SHOP, PARTS):
            runtime = open_runtime(
                domain, store=database, database=database, store_schema=f"ic_{domain.name}"
            )
            stack.callback(runtime.close)
            runtime.start()
            running[domain.name] = runtime
        yield running


def write(database: str, table: str, n: int) -> None:
    with psycopg.connect(database, autocommit=True) as pg:
        pg.execute(f"UPDATE {table} SET n = %s WHERE id = 'a'", (n,))


def served(runtime: Runtime, table: str) -> int:
    return int(runtime.registry.state.tables[table].plain_rows()["a"]["n"])


def within_lag_bound(predicate: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEFAULT_MAX_LAG_S
    while not predicate():
        assert time.monotonic() < deadline, "not served within the lag bound"
        time.sleep(0.02)


def test_each_domains_writes_reach_its_own_contract_within_the_lag_bound(
    database: str, providers: dict[str, Runtime]
) -> None:
    shop, parts = providers["shop"], providers["parts"]
    epochs = [shop.registry.state.epoch, parts.registry.state.epoch]
    for n in range(1, 6):  # every write, not only those before one leader trims the capture
        write(database, "items", n)
        write(database, "parts", n)
        within_lag_bound(lambda n=n: served(shop, "items") == n and served(parts, "parts") == n)
    assert shop.registry.state.seq == parts.registry.state.seq == 5
    assert [shop.registry.state.epoch, parts.registry.state.epoch] == epochs
    assert shop.health().ready and parts.health().ready


def test_a_write_to_one_domain_never_reaches_the_others_contract(
    database: str, providers: dict[str, Runtime]
) -> None:
    shop, parts = providers["shop"], providers["parts"]
    write(database, "items", 7)
    within_lag_bound(lambda: served(shop, "items") == 7)
    time.sleep(0.5)  # several of the other's rounds
    assert "items" not in parts.registry.state.tables
    assert parts.registry.state.seq == 0
    assert parts.registry.changes(0).rows == []


def test_a_table_both_domains_read_reaches_both_with_a_trigger_each(
    database: str, providers: dict[str, Runtime]
) -> None:
    shop, parts = providers["shop"], providers["parts"]
    write(database, "prices", 3)
    within_lag_bound(lambda: served(shop, "prices") == 3 and served(parts, "prices") == 3)
    with psycopg.connect(database) as pg:
        triggers = pg.execute(
            "SELECT tgname, p.pronamespace::regnamespace::text FROM pg_trigger t"
            " JOIN pg_proc p ON p.oid = t.tgfoid WHERE tgrelid = 'prices'::regclass"
            " AND NOT tgisinternal ORDER BY tgname"
        ).fetchall()
    assert triggers == [
        ("ic_capture_ic_parts", "ic_parts"),
        ("ic_capture_ic_shop", "ic_shop"),
        ("ic_capture_truncate_ic_parts", "ic_parts"),
        ("ic_capture_truncate_ic_shop", "ic_shop"),
    ]


def test_two_domains_on_one_registry_schema_are_refused_by_name(database: str) -> None:
    with ExitStack() as stack:
        first = open_runtime(SHOP, store=database, database=database)
        stack.callback(first.close)
        with pytest.raises(StorageError, match="holds the registry of domain 'shop', not 'parts'"):
            open_runtime(PARTS, store=database, database=database)
