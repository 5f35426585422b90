"""The client scorer's own rules: episodes, retries, first tries, stale values, bounds, keys."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from tests.observe.conftest import ORDERS
from tests.service.conftest import TOKEN, make_domain

from invalidation_contracts.observe import instrument
from invalidation_contracts.observe.clients import ClientKey
from invalidation_contracts.observe.scoring import ClientScores
from invalidation_contracts.server.http.app import create_app

ADMIN = {"Authorization": f"Bearer {TOKEN}"}
GOOD = {"plan": "basic", "funding_type": "card"}
BAD = {"plan": "basic", "funding_type": "wire"}


def scored(**options):
    app = create_app(make_domain(), admin_token=TOKEN)
    scores = ClientScores(**options)
    key = ClientKey.header("X-Client", secret=b"k")
    instrument(app, app.state.service, prometheus=False, scores=scores, client_key=key)
    return TestClient(app), scores


def _key(name: str) -> str:
    """The key ``scored``'s scorer files the client sending ``X-Client: name`` under."""
    scope = {"type": "http", "headers": [(b"x-client", name.encode())]}
    return ClientKey.header("X-Client", secret=b"k")(scope)


def only(scores):
    (figures,) = scores.snapshot().values()
    return figures


def test_a_passing_first_request_is_a_first_try():
    client, scores = scored()
    with client:
        client.post(ORDERS, json=GOOD, headers={"X-Client": "a"})
    assert (only(scores).episodes, only(scores).first_try) == (1, 1)


def test_a_request_after_a_422_is_a_retry_not_an_episode():
    client, scores = scored()
    with client:
        client.post(ORDERS, json=BAD, headers={"X-Client": "a"})
        client.post(ORDERS, json=GOOD, headers={"X-Client": "a"})
    figures = only(scores)
    assert (figures.episodes, figures.first_try, figures.retries) == (1, 0, 1)


def test_after_the_retry_budget_the_next_request_opens_an_episode():
    client, scores = scored(max_attempts=2)
    with client:
        for _ in range(3):
            client.post(ORDERS, json=BAD, headers={"X-Client": "a"})
    assert (only(scores).episodes, only(scores).retries) == (2, 1)


def test_clients_are_scored_apart():
    client, scores = scored()
    with client:
        client.post(ORDERS, json=BAD, headers={"X-Client": "a"})
        client.post(ORDERS, json=GOOD, headers={"X-Client": "b"})
    assert sorted((f.episodes, f.first_try) for f in scores.snapshot().values()) == [
        (1, 0),
        (1, 1),
    ]


def test_a_value_a_change_made_stale_is_a_stale_injection():
    client, scores = scored()
    with client:
        client.post(ORDERS, json={"plan": "basic"}, headers={"X-Client": "a"})  # taught: card
        client.post(ORDERS, json=GOOD, headers={"X-Client": "a"})
        rows = {"basic": {"funding": "wire"}, "enterprise": {"funding": "invoice", "promo": "E"}}
        client.post("/admin/reload-table", json={"table": "plans", "rows": rows}, headers=ADMIN)
        client.post(ORDERS, json=GOOD, headers={"X-Client": "a"})  # carries the stale card
    figures = only(scores)
    assert (figures.episodes, figures.stale_values_sent) == (2, 1)


def test_a_taught_value_still_current_is_no_stale_injection():
    client, scores = scored()
    with client:
        client.post(ORDERS, json={"plan": "basic"}, headers={"X-Client": "a"})
        client.post(ORDERS, json=GOOD, headers={"X-Client": "a"})
        client.post(ORDERS, json=GOOD, headers={"X-Client": "a"})
    assert (only(scores).episodes, only(scores).first_try, only(scores).stale_values_sent) == (
        2,
        1,
        0,
    )


def test_the_scorer_keeps_at_most_max_clients():
    client, scores = scored(max_clients=2)
    with client:
        for name in "abc":
            client.post(ORDERS, json=GOOD, headers={"X-Client": name})
    assert len(scores.snapshot()) == 2


def test_a_flood_of_fresh_client_keys_cannot_push_out_busier_clients():
    """Anyone can mint client keys (hostile audit H11): a flood of one-request keys churns among
    its own keys; of the clients busier than it, at most the one its first key replaced goes."""
    client, scores = scored(max_clients=20)
    real = [f"real-{i}" for i in range(10)]
    with client:
        for _ in range(3):
            for name in real:
                client.post(ORDERS, json=GOOD, headers={"X-Client": name})
        for i in range(300):
            client.post(ORDERS, json=GOOD, headers={"X-Client": f"flood-{i}"})
    kept = scores.snapshot()
    keys = [_key(name) for name in real]

    assert len(kept) == 20
    assert len([key for key in keys if key in kept]) >= 9
    assert all(kept[key].requests == 3 for key in keys if key in kept)
    assert scores.totals().requests == 3 * 10 + 300  # forgotten clients stay in the totals


def test_among_equally_busy_clients_the_least_recently_seen_goes_first():
    client, scores = scored(max_clients=2)
    with client:
        for name in "aba":
            client.post(ORDERS, json=GOOD, headers={"X-Client": name})
        client.post(ORDERS, json=GOOD, headers={"X-Client": "b"})  # a and b: 2 each, b newer
        client.post(ORDERS, json=GOOD, headers={"X-Client": "c"})
    assert set(scores.snapshot()) == {_key("b"), _key("c")}


def test_a_client_key_from_a_credential_never_holds_the_credential():
    secret_token = "sk_live_very_secret_value"
    key = ClientKey.bearer(secret=b"server-secret")
    scope = {"type": "http", "headers": [(b"authorization", f"Bearer {secret_token}".encode())]}
    derived = key(scope)
    assert secret_token not in derived and derived.startswith("token:")
    assert key(scope) == derived  # stable for one secret
    assert ClientKey.bearer(secret=b"other")(scope) != derived


def test_a_request_without_a_token_is_keyed_by_its_address():
    key = ClientKey.bearer(secret=b"s")
    assert key({"type": "http", "headers": [], "client": ("10.0.0.7", 5000)}) == "10.0.0.7"


@pytest.mark.parametrize("bad", [0, -1])
def test_bounds_below_one_are_refused(bad):
    with pytest.raises(ValueError):
        ClientScores(max_attempts=bad)


def test_the_totals_are_exported_as_counters_and_outlive_forgotten_clients(readings):
    app = create_app(make_domain(), admin_token=TOKEN)
    scores = ClientScores(max_clients=1)
    instrument(
        app,
        app.state.service,
        prometheus=False,
        meter_provider=readings.meter_provider,
        scores=scores,
        client_key=ClientKey.header("X-Client", secret=b"k"),
    )
    with TestClient(app) as client:
        for name in "ab":
            client.post(ORDERS, json=GOOD, headers={"X-Client": name})
    assert len(scores.snapshot()) == 1
    assert readings.value("invalidation_contracts.clients.episodes") == 2
    assert readings.value("invalidation_contracts.clients.first_try") == 2


def test_the_busiest_clients_are_exported_per_client_and_a_key_flood_only_counts_as_forgotten(
    readings,
):
    """Per-client series for each worker's busiest clients: real clients keep their series
    while a flood of one-request keys churns below them, counted in ``clients.forgotten``."""
    app = create_app(make_domain(), admin_token=TOKEN)
    scores = ClientScores(max_clients=5)
    instrument(
        app,
        app.state.service,
        prometheus=False,
        meter_provider=readings.meter_provider,
        scores=scores,
        client_key=ClientKey.header("X-Client", secret=b"k"),
    )
    with TestClient(app) as client:
        for _ in range(3):
            for name in ("alice", "bob"):
                client.post(ORDERS, json=GOOD, headers={"X-Client": name})
        client.post(ORDERS, json=BAD, headers={"X-Client": "bob"})
        for i in range(40):
            client.post(ORDERS, json=GOOD, headers={"X-Client": f"flood-{i}"})

    per_client = {
        point.attributes["client"]: point.value
        for point in readings.points("invalidation_contracts.client.requests")
    }
    assert per_client[_key("alice")] == 3 and per_client[_key("bob")] == 4
    assert len(per_client) == 5  # the kept clients (fewer than the top 20)
    assert readings.value("invalidation_contracts.client.first_try", client=_key("bob")) == 3
    assert readings.value("invalidation_contracts.clients.kept") == 5
    assert readings.value("invalidation_contracts.clients.forgotten") == 37
    assert [key for key, _ in scores.busiest(2)] == [_key("bob"), _key("alice")]
