"""A minimal invalidation-contract provider: one table, one rule, one policy.

Needs no extra: the provider's core installs with ``pip install .``.

Run it: ``python docs/examples/minimal_provider.py``. It sends a request that violates the policy,
applies the suggested fix, then drifts the table and shows the cached fix going stale.
Serve the same domain over HTTP with ``invalidation_contracts.server.http.app.create_app(domain)``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from invalidation_contracts.protocol import Action, Problem
from invalidation_contracts.server import (
    Domain,
    Provider,
    RegistryState,
    Route,
    Rule,
    TableSpec,
    TrackedTables,
    Violation,
    current_fix,
    policy,
)


class Shipment(BaseModel):
    sku: str
    country: str
    carrier: str


@policy("country_carrier_policy")
def country_carrier(request: Mapping[str, Any], tables: TrackedTables) -> Violation | None:
    """Each destination country ships with the carrier the country table names."""
    row = tables["country_carriers"].get(request["country"])  # read → recorded as a dependency
    if row is not None and request["carrier"] != row["carrier"]:
        return Violation(
            "USE_COUNTRY_CARRIER",
            f"shipments to {request['country']} go with the contracted carrier",
            {"carrier": row["carrier"]},
            Action.REWRITE_VALUE,
            scope={"country": request["country"]},
        )
    return None


def ship(shipment: Shipment, state: RegistryState) -> dict[str, str]:
    """What a request that passes every policy returns (typed with the route's own model)."""
    return {"sku": shipment.sku, "carrier": shipment.carrier}


domain = Domain(
    "shipping",
    {
        "country_carriers": TableSpec({"NO": {"carrier": "posten"}, "SE": {"carrier": "postnord"}}),
        "carriers": TableSpec(
            {
                "posten": {"tracking": True},
                "postnord": {"tracking": True},
                "bring": {"tracking": True},
            }
        ),
    },
    [Rule("country_carriers", "carriers", "ships_with", via="carrier")],
    [Route("/v1/shipments", Shipment, [country_carrier], on_success=ship)],
)


def main() -> None:
    provider = Provider(domain)
    route = domain.route("/v1/shipments")
    draft = {"sku": "mug-01", "country": "NO", "carrier": "dhl"}

    first = provider.handle(route, draft)
    assert isinstance(first.body, Problem) and first.body.recovery_feedback is not None
    (fix,) = first.body.recovery_feedback.suggestions
    print("first try:", first.status, json.dumps(fix.to_wire(), sort_keys=True))

    fixed = {**draft, **fix.parameters}
    print("with the fix:", provider.handle(route, fixed).status)

    result = provider.registry.reload(
        "country_carriers", {"NO": {"carrier": "bring"}, "SE": {"carrier": "postnord"}}
    )
    print(
        "reload:",
        result.old_version,
        "->",
        result.new_version,
        "changed",
        result.diff.changed,
        "downstream",
        result.affected_downstream,
    )
    print(
        "cached fix still current:",
        current_fix(route, draft, fix.type, fix.scope, provider.registry.state)
        == dict(fix.parameters),
    )
    print("stale fix injected:", provider.handle(route, fixed).status)


if __name__ == "__main__":
    main()
