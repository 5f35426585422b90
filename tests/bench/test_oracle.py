"""The oracle labels every entry it is told about, and refuses to guess about any other."""

import pytest

from invalidation_contracts.bench.errors import UnlabelledEviction
from invalidation_contracts.bench.oracle import Oracle
from invalidation_contracts.client.entries import MemoryKey
from invalidation_contracts.client.events import Stored
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.protocol.models import Action, CacheHint, Suggestion
from invalidation_contracts.server import Provider

CATALOG = get_catalog("acme_billing")
ORIGIN = "http://acme.test"
GROWTH = dict(CATALOG.task_families["governed-partner-growth"].fields)


@pytest.fixture
def oracle():
    return Oracle(CATALOG, Provider(CATALOG.domain, level=6).registry)


def code(value):
    return Suggestion(
        type="ADD_REQUIRED_PROMO_CODE",
        parameters={"promo_code": value},
        action=Action.ADD_FIELD,
        cache_hint=CacheHint.CACHEABLE,
        scope={"plan": "plan_partner_growth"},
    )


def stored(entry_id, suggestion):
    key = MemoryKey.of(ORIGIN, suggestion.type, suggestion.scope)
    return Stored(origin=ORIGIN, episode=1, entry_id=entry_id, key=key)


def test_an_entry_stored_later_than_its_response_is_labelled_from_that_response(oracle):
    fix = code("STALE-CODE")
    oracle.heard(GROWTH, [fix])

    oracle.learned(stored("e1", fix), fix=None)  # already gone when the harness looked

    assert oracle.is_stale("e1") is True


def test_an_entry_from_no_recorded_response_stops_the_run(oracle):
    oracle.heard(GROWTH, [code("ONE")])

    with pytest.raises(UnlabelledEviction, match="e7"):
        oracle.learned(stored("e7", code("OTHER")), code("OTHER"))


def test_an_eviction_of_an_unknown_entry_is_never_counted_silently(oracle):
    with pytest.raises(UnlabelledEviction, match="e9"):
        oracle.is_stale("e9")


def test_each_entry_is_reported_stale_once(oracle):
    fix = code("STALE-CODE")
    oracle.heard(GROWTH, [fix])
    oracle.learned(stored("e1", fix), fix)

    assert oracle.newly_stale(["e1"]) == ["e1"]
    assert oracle.newly_stale(["e1"]) == []
