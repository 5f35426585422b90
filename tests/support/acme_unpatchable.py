"""Acme billing with no patchable field on any route: every fix it suggests is one a client in
apply mode cannot patch in, so the memory proxy shows it to the model instead (a domain spec
for ``serve-mcp --domain tests.support.acme_unpatchable:domain``)."""

from __future__ import annotations

import dataclasses

from invalidation_contracts.domains import get_domain
from invalidation_contracts.server import Domain


def domain() -> Domain:
    acme = get_domain("acme_billing")
    routes = [dataclasses.replace(route, patchable=frozenset()) for route in acme.routes]
    return dataclasses.replace(acme, routes=routes)
