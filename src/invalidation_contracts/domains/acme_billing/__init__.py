"""Acme billing: ``POST /v1/subscriptions`` over six reference tables and five policies.

Built only on the public provider API; the tables, rules, drift snapshots and task families are
data files beside this module. ``acme_rules`` is the same API under the rules stream's
declarations (one rule edge removed, one added).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from invalidation_contracts.protocol import fingerprint
from invalidation_contracts.server import Domain, RegistryState, Route

from ..catalog import DomainCatalog, load_rules, load_tables
from .payments import PaymentsBackend, backend_from_env
from .policies import POLICIES
from .schema import PATCHABLE, Subscription, SubscriptionRequest

HERE = Path(__file__).parent
NAME = "acme_billing"
RULES_STREAM_NAME = "acme_rules"
ROUTE_PATH = "/v1/subscriptions"


def subscription_route(payments: PaymentsBackend) -> Route[Any]:
    """The subscriptions endpoint; a request that passes every policy is charged by ``payments``.

    The idempotency key is the request body's fingerprint, so resending the same subscription
    never charges twice.
    """

    def subscribe(request: SubscriptionRequest, state: RegistryState) -> Mapping[str, Any]:
        subscription_id = "sub_" + fingerprint(request.model_dump(mode="json"), 24)
        charge = payments.charge(
            request.customer,
            request.amount_cents,
            request.currency,
            request.payment_method_token,
            subscription_id,
        )
        return {
            "subscription_id": subscription_id,
            "charge_id": charge.charge_id,
            "amount_cents": charge.amount_cents,
            "currency": charge.currency,
            "plan": request.plan,
        }

    return Route(
        ROUTE_PATH,
        SubscriptionRequest,
        POLICIES,
        on_success=subscribe,
        patchable=PATCHABLE,
        summary="Subscribe a customer to a plan and take the first payment",
        response_model=Subscription,
    )


def build_domain(
    *, payments: PaymentsBackend | None = None, rule_set: str = "initial", name: str = NAME
) -> Domain:
    """The Acme domain with the rule declarations of ``rules/<rule_set>.json``.

    Without ``payments`` the backend comes from the environment
    (:func:`.payments.backend_from_env`), which is the in-memory ledger unless configured otherwise.
    """
    payments = payments if payments is not None else backend_from_env(os.environ)
    return Domain(
        name,
        load_tables(HERE / "data"),
        load_rules(HERE / "rules" / f"{rule_set}.json"),
        [subscription_route(payments)],
        description="Acme billing: subscriptions over CSM promo codes and payment funding rules.",
        extras={"payments": payments},
    )


def catalog(*, payments: PaymentsBackend | None = None) -> DomainCatalog:
    """``acme_billing``: the payments streams (code rotations, benign token bump, touch)."""
    return _catalog(build_domain(payments=payments), {})


def rules_catalog(*, payments: PaymentsBackend | None = None) -> DomainCatalog:
    """``acme_rules``: the rules stream. It starts without ``settles_under``; ``rule-removal``
    drops ``assigned_by_csm`` and ``rule-addition`` then declares ``settles_under``."""
    domain = build_domain(payments=payments, rule_set="rules-stream", name=RULES_STREAM_NAME)
    return _catalog(domain, {"initial": HERE / "rules" / "rules-stream.json"})


def _catalog(domain: Domain, rule_sets: Mapping[str, Path]) -> DomainCatalog:
    return DomainCatalog.from_directory(domain, HERE, ROUTE_PATH, rule_sets)


__all__ = [
    "NAME",
    "PATCHABLE",
    "POLICIES",
    "PaymentsBackend",
    "ROUTE_PATH",
    "RULES_STREAM_NAME",
    "Subscription",
    "SubscriptionRequest",
    "backend_from_env",
    "build_domain",
    "catalog",
    "rules_catalog",
    "subscription_route",
]
