import sys
from pathlib import Path

import pytest

from invalidation_contracts.domains import get_catalog

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture
def acme():
    return get_catalog("acme_billing")


@pytest.fixture
def acme_rules():
    return get_catalog("acme_rules")


@pytest.fixture
def recipes():
    return get_catalog("recipes")
