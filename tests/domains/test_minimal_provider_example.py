"""The runnable example in docs/providers.md works as the page says."""

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "minimal_provider.py"


def test_minimal_provider_example_runs_and_shows_the_fix_going_stale():
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert (
        lines[0].startswith("first try: 422") and '"parameters": {"carrier": "posten"}' in lines[0]
    )
    assert lines[1:] == [
        "with the fix: 200",
        "reload: 1.0.0 -> 1.1.0 changed ['NO'] downstream ['carriers:posten']",
        "cached fix still current: False",
        "stale fix injected: 422",
    ]
