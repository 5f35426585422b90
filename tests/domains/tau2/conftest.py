"""τ²-bench airline fixtures: the catalog (one per module: its 11,800 rows are frozen once per
process) and a fresh registry of it per test."""

from __future__ import annotations

import pytest

from invalidation_contracts.domains import get_catalog
from invalidation_contracts.domains.catalog import DomainCatalog
from invalidation_contracts.server import Provider, Registry


@pytest.fixture(scope="module")
def airline() -> DomainCatalog:
    return get_catalog("tau2_airline")


@pytest.fixture
def registry(airline: DomainCatalog) -> Registry:
    return airline.domain.registry()


@pytest.fixture
def provider(airline: DomainCatalog, registry: Registry) -> Provider:
    return Provider(airline.domain, registry)
