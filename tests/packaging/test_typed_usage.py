"""The documented usage type-checks: ``mypy --strict`` on the examples a user copies, as a user.

mypy runs outside the checkout (so the project's own mypy configuration does not apply) against
the installed package, which ships ``py.typed``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def test_the_provider_and_agent_examples_pass_mypy_strict(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--no-incremental",
            "--cache-dir",
            str(tmp_path / "cache"),
            str(EXAMPLES / "minimal_provider.py"),
            str(EXAMPLES / "agent_memory.py"),
            str(EXAMPLES / "wrapped_validator.py"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=tmp_path,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("Success: no issues found")
