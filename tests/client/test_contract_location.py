"""The memory keeps each origin's contract location (issue 41 item 4) in every durable store,
and a transport takes a kept location only for the same origin (as it takes a ``Link``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from invalidation_contracts.client import FixMemory
from invalidation_contracts.client.stores.postgres import PostgresStore
from invalidation_contracts.httpx.discovery import ContractLocations

ORIGIN = "https://shop.example"
BASE = "https://shop.example/api/contract"


def kept(make: Callable[[], Any]) -> str | None:
    with FixMemory("row", store=make(), close_store=True) as first:
        first.set_contract_location(ORIGIN, BASE)
    with FixMemory("row", store=make(), close_store=True) as later:
        location: str | None = later.state(ORIGIN).contract_location
        return location


def test_a_sqlite_memory_keeps_the_contract_location(tmp_path: Path) -> None:
    assert kept(lambda: str(tmp_path / "memory.db")) == BASE


@pytest.mark.postgres
def test_a_postgres_memory_keeps_the_contract_location(postgres_url: str) -> None:
    assert kept(lambda: PostgresStore(postgres_url, listen=False)) == BASE


@pytest.mark.parametrize(
    "base", ["https://evil.example/api/contract", "http://shop.example/api/contract", "not a url"]
)
def test_a_kept_location_of_another_origin_is_ignored(base: str) -> None:
    locations = ContractLocations()
    locations.restore(ORIGIN, base)
    assert str(locations.url(ORIGIN, "/contract/changes")) == ORIGIN + "/contract/changes"


def test_a_kept_location_never_replaces_one_a_response_named() -> None:
    locations = ContractLocations()
    link = httpx.Headers({"link": '</v2/contract>; rel="urn:invalidation-contracts:contract"'})
    assert locations.learn(ORIGIN, httpx.URL(ORIGIN + "/v2/x"), link) == ORIGIN + "/v2/contract"
    assert locations.learn(ORIGIN, httpx.URL(ORIGIN + "/v2/x"), link) is None  # kept once
    locations.restore(ORIGIN, BASE)
    assert str(locations.url(ORIGIN, "/contract/changes")) == ORIGIN + "/v2/contract/changes"
