"""The Python API example in docs/researchers.md runs as the page says."""

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).parents[2] / "docs" / "examples" / "harness_api.py"


def test_the_harness_api_example_runs_a_grid_scores_it_and_writes_the_report(tmp_path):
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "grid: 3 runs, 0 failed"
    assert "A2D  compliance=1.0 retries=7 precision=1.0 restamps=6" in lines
    assert "A0   compliance=None retries=27 precision=None restamps=0" in lines
    assert (tmp_path / "report.md").is_file() and lines[-1].startswith("report:")
