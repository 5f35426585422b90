"""Patchable fields published over HTTP (SPEC §10.4): the ``Contract-Patchable`` header and
the OpenAPI document; client apply mode works with no ``set_patchable`` by hand. A real uvicorn
server on 127.0.0.1."""

from __future__ import annotations

import pytest

from invalidation_contracts.client import FixMemory, TrustPolicy
from invalidation_contracts.client.published import parse_patchable
from invalidation_contracts.domains import get_catalog
from invalidation_contracts.httpx import contract_client
from invalidation_contracts.server.http.app import create_app

pytestmark = [pytest.mark.workers, pytest.mark.timeout(120)]

ROUTE = "/v1/subscriptions"
OPERATION = f"POST {ROUTE}"
ACME = get_catalog("acme_billing")
GROWTH = ACME.family("governed-partner-growth").draft()
FIELDS = ["amount_cents", "promo_code"]


def test_a_domain_route_publishes_its_patchable_fields_in_a_header_and_in_openapi(serve):
    with serve(create_app(ACME.domain)) as url, contract_client(FixMemory("row")) as client:
        answer = client.post(f"{url}{ROUTE}", json=GROWTH)
        document = client.get(f"{url}/openapi.json").json()

    assert answer.headers["Contract-Patchable"] == ", ".join(FIELDS)
    assert document["paths"][ROUTE]["post"]["x-contract-patchable"] == FIELDS


def test_client_apply_mode_works_without_set_patchable_by_hand(serve):
    memory = FixMemory("row")
    with serve(create_app(ACME.domain)) as url, contract_client(memory, base_url=url) as client:
        assert client.post(ROUTE, json=GROWTH).status_code == 422
        fixes = list(memory.lookup(url, GROWTH, operation=OPERATION).entries)
        patched = memory.apply_patches(url, GROWTH, fixes, operation=OPERATION)
        status = client.post(ROUTE, json=patched.request).status_code

    assert patched.applied == ("e1",) and status == 200
    assert memory.state(url).patchable == [f"/{name}" for name in FIELDS]


def test_client_apply_mode_leaves_the_customers_payment_method_to_the_planner(serve):
    """The funding fix is kept (the planner may apply it) but the client never swaps the
    payment method itself: the route does not publish it as patchable (SPEC §10.4)."""
    memory = FixMemory("row")
    draft = ACME.family("funding-enterprise-annual").draft()
    with serve(create_app(ACME.domain)) as url, contract_client(memory, base_url=url) as client:
        assert client.post(ROUTE, json=draft).status_code == 422
        (fix,) = memory.lookup(url, draft, operation=OPERATION).entries
        patched = memory.apply_patches(url, draft, [fix], operation=OPERATION)

    assert fix.type == "USE_REQUIRED_FUNDING_TYPE" and fix.suggestion.patch is None
    assert patched.applied == () and [entry for entry, _ in patched.skipped] == [fix.id]
    assert patched.request["payment_method_token"] == draft["payment_method_token"]


def test_an_allowlist_the_agent_set_is_never_replaced_by_the_header(serve):
    memory = FixMemory("row")
    with serve(create_app(ACME.domain)) as url, contract_client(memory, base_url=url) as client:
        memory.set_patchable(url, ["promo_code"])
        client.post(ROUTE, json=GROWTH)

    assert memory.state(url).patchable == ["/promo_code"]


@pytest.mark.parametrize(
    "value",
    [None, "", " , ", "a b", "x" * 9000, ",".join(f"f{i}" for i in range(300)), "caf\u00e9"],
    ids=["absent", "empty", "blank", "space", "too-long", "too-many", "non-ascii"],
)
def test_a_malformed_header_publishes_nothing(value):
    assert parse_patchable(value) is None


def test_under_the_parameter_guard_the_published_allowlist_is_not_adopted(serve):
    memory = FixMemory("row", trust=TrustPolicy(guard_parameters=True))
    with serve(create_app(ACME.domain)) as url, contract_client(memory, base_url=url) as client:
        client.post(ROUTE, json=GROWTH)

    assert memory.state(url).patchable is None  # the guard's allowlist is the agent's to give
