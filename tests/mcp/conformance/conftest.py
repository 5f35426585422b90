"""The conformance suite's real components: ``serve-mcp`` processes over one registry file (stdio
children of the host, and one streamable HTTP server per module), a drift written to that file by
another worker (the way an operator's reload reaches every worker of a history), and the pinned
npm packages."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support.mcp_hosts import Unavailable, node_modules, serve_mcp_http

from invalidation_contracts.domains import get_catalog
from invalidation_contracts.server.http.service import ContractService

OPERATION = "POST /v1/subscriptions"
TOOL = "create_subscription"
EXTENSION = "io.github.invalidation-contracts/contract"
ACME = get_catalog("acme_billing")
GROWTH = ACME.family("governed-partner-growth").draft()  # rejected: it lacks the CSM promo code
STARTER = ACME.family("plain-starter-monthly").draft()  # served as it is
#: The codes growth's plan rotates through: each drift moves its row to the next one.
CODES = ("WINTERLAUNCH26", "SPRINGRENEW27", "AUTUMNBOOST28", "SUMMERSALE25")
_drifts = itertools.count()


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("conformance") / "registry.sqlite"


@pytest.fixture(scope="module")
def http_url(registry: Path) -> Iterator[str]:
    with serve_mcp_http(registry, "--tool-name", f"{OPERATION}={TOOL}") as url:
        yield url


@pytest.fixture(scope="module")
def npm_modules() -> Path:
    try:
        return node_modules()
    except Unavailable as exc:
        pytest.skip(str(exc))


def drift(registry: Path) -> str:
    """Another worker of the history reloads ``active_csm_codes`` with a new code for growth's
    plan (a SQL write to the shared registry); the new code."""
    code = CODES[next(_drifts) % len(CODES)]
    snapshot = ACME.read_snapshot("active_csm_codes.rotation-1")
    rows = {**snapshot.rows, "plan_partner_growth": {**snapshot.rows["plan_partner_growth"]}}
    rows["plan_partner_growth"]["code"] = code
    service = ContractService.open(ACME.domain, level=6, store=str(registry))
    try:
        service.reload(snapshot.table, rows, None)
    finally:
        service.close()
    return code
