"""Fixtures of the trust tests; the shared pieces live in ``trust_helpers``."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

sys.path.insert(0, str(Path(__file__).parent))

from trust_helpers import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def keys() -> dict[str, Ed25519PrivateKey]:
    """Two signing keys: ``k1`` (current) and ``k2`` (its successor)."""
    return {"k1": Ed25519PrivateKey.generate(), "k2": Ed25519PrivateKey.generate()}
