"""Sound scopes, on every shipped domain: a fix the memory would serve to a draft — any draft whose
fields equal the fix's scope — is one that draft needs, and applying it leaves the draft free of
the violation it repairs. Brute force: every fix the domain's task drafts draw, against every
draft in its scope built from them (the family drafts with the scope's values written in).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
from tests.support.tau2 import domain_params

from invalidation_contracts.domains import available_domains, get_catalog
from invalidation_contracts.server import Provider


def fixes_and_drafts(domain: str) -> Iterator[tuple[Any, dict[str, Any], dict[str, Any]]]:
    """``(violation, draft that drew it, draft in its scope)`` for every pair of the domain."""
    for violation, taught_by, draft, _route in routed_fixes_and_drafts(domain):
        yield violation, taught_by, draft


def routed_fixes_and_drafts(
    domain: str,
) -> Iterator[tuple[Any, dict[str, Any], dict[str, Any], str]]:
    """The same with the route both drafts go to: a fix is served only to its own route's
    drafts (a domain of several routes, like τ²'s tools)."""
    catalog, provider = served(domain)
    drafts = [(f.draft(), catalog.route_of(f)) for f in catalog.task_families.values()]
    for draft, route in drafts:
        for finding in provider.findings(route, draft):
            violation = finding.violation
            if violation.no_store or not violation.parameters or not violation.scope:
                continue
            for other, other_route in drafts:
                if other_route.path == route.path:
                    yield violation, draft, {**other, **violation.scope}, route.path


def violated(
    domain: str, request: Mapping[str, Any], route: str | None = None
) -> set[tuple[str, frozenset[str]]]:
    """Each violation of ``request`` (sent to ``route``, the default one when None) as (type, the
    fields its fix writes): a draft may break one type twice on different fields (a vegan dish
    with dairy *and* meat)."""
    catalog, provider = served(domain)
    target = catalog.route if route is None else catalog.domain.route(route)
    return {
        (f.violation.type, frozenset(f.violation.parameters))
        for f in provider.findings(target, request)
    }


@functools.cache
def served(domain: str) -> tuple[Any, Provider]:
    """One catalog and provider per domain (only read: findings never change the registry)."""
    catalog = get_catalog(domain)
    return catalog, Provider(catalog.domain)


def mark(violation: Any) -> tuple[str, frozenset[str]]:
    return violation.type, frozenset(violation.parameters)


def applied(request: Mapping[str, Any], parameters: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(request)
    for name, value in parameters.items():
        if value is None:
            out.pop(name, None)
        else:
            out[name] = value
    return out


def unsound(domain: str) -> list[str]:
    problems = []
    for violation, taught_by, draft, route in routed_fixes_and_drafts(domain):
        needs = mark(violation) in violated(domain, draft, route)
        fixed = applied(draft, violation.parameters)
        repaired = mark(violation) not in violated(domain, fixed, route)
        if not needs or not repaired:
            problems.append(
                f"{violation.type} scoped {dict(violation.scope)} (taught by plan "
                f"{taught_by.get('plan')}) on {draft}: needed={needs} repaired={repaired}"
            )
    return problems


@pytest.mark.parametrize("domain", domain_params(available_domains()))
def test_every_fix_served_in_its_scope_is_needed_there_and_repairs_it(domain):
    assert unsound(domain) == []


def test_the_acme_funding_fix_is_not_served_to_a_plan_that_accepts_the_token():
    """The case that was unsound: learned on a plan that requires credit, the debit token's fix is
    not in scope for a draft of a plan that accepts debit (``plan_starter_monthly``)."""
    in_scope_elsewhere = [
        (taught_by["plan"], draft["plan"])
        for violation, taught_by, draft in fixes_and_drafts("acme_billing")
        if violation.type == "USE_REQUIRED_FUNDING_TYPE" and draft["plan"] != taught_by["plan"]
    ]
    assert in_scope_elsewhere == []
