"""Google ADK's tests, in a virtual environment of their own (a study).

google-adk 2.13 pins ``opentelemetry-api``/``-sdk<=1.44`` and ``websockets<16``, below what the
``test`` extra resolves to, so ``.[test]`` does not bring it and tests/frameworks/test_adk.py is
skipped in the main environment. Here that file runs in a venv made from the ``adk`` extra and
the test runner (cached as the examples' venvs are: tests/docs/test_example_extras.py), with the
checkout's ``src`` first on the path; every one of its tests must pass, none skipped. mypy
--strict checks adk.py there too, against ADK's own types (the main environment reads them as
``Any``: pyproject.toml's mypy overrides).
"""

from __future__ import annotations

import os
import subprocess

import pytest
from tests.docs.snippets import ROOT
from tests.docs.test_example_extras import venv_with

#: What the checks need beside the ``adk`` extra: the runner, the conftest's imports, mypy.
RUNNER = (
    "pytest>=8",
    "pytest-timeout>=2.3",
    "pytest-xdist>=3.6",  # the suite's addopts run it in worker processes
    "hypothesis>=6.100",
    "mypy>=1.13",
)

QUIET = ("-q", "-p", "no:cacheprovider")

pytestmark = [pytest.mark.study, pytest.mark.frameworks, pytest.mark.timeout(1500)]


def in_adk_venv(*command: str) -> subprocess.CompletedProcess[str]:
    """``python -m COMMAND`` in the ADK venv, from the checkout's root, its ``src`` first."""
    return subprocess.run(
        [str(venv_with(["adk"], RUNNER)), "-m", *command],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src"), "CI": "true"},
    )


def test_the_adk_integration_passes_its_tests_in_a_venv_of_the_adk_extra():
    tests = ("tests/frameworks/test_adk.py", "tests/test_exported_members.py", "-k", "adk")
    done = in_adk_venv("pytest", *tests, *QUIET)

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and " skipped" not in done.stdout


def test_the_adk_integration_type_checks_against_adks_own_types():
    done = in_adk_venv("mypy", "src/invalidation_contracts/adk.py")

    assert done.returncode == 0, done.stdout[-3000:]
