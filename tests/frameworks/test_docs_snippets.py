"""docs/frameworks.md: every snippet is in its runnable example, and every example runs."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "frameworks.md"
EXAMPLES = ROOT / "docs" / "examples" / "frameworks"
#: Each section's example, in page order.
FILES = (
    "pydantic_ai_agent.py",
    "openai_agents_agent.py",
    "langgraph_agent.py",
    "llama_index_agent.py",
    "adk_agent.py",
)
#: The examples whose framework the `test` extra installs. google-adk cannot be installed beside
#: it (docs/frameworks.md), so adk_agent.py runs in a venv of its `adk` extra instead, in the
#: study step (tests/docs/test_example_extras.py).
RUN_HERE = tuple(name for name in FILES if name != "adk_agent.py")

pytestmark = [pytest.mark.frameworks, pytest.mark.mcp, pytest.mark.timeout(180)]


def snippets() -> list[str]:
    return re.findall(r"```python\n(.*?)```", PAGE.read_text(), flags=re.DOTALL)


def test_each_framework_adopts_the_contract_in_three_lines_that_its_example_runs():
    found = snippets()

    assert len(found) == len(FILES)
    for snippet, name in zip(found, FILES, strict=True):
        lines = [line.strip() for line in snippet.strip().splitlines()]
        assert len(lines) <= 3
        example = {line.strip() for line in (EXAMPLES / name).read_text().splitlines()}
        assert set(lines) <= example, f"{name} lacks {set(lines) - example}"


@pytest.mark.parametrize("name", RUN_HERE)
def test_each_example_learns_a_fix_and_reuses_it(name):
    done = subprocess.run(
        [sys.executable, "-W", "ignore", name],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )

    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["run 1: 2 model call(s)", "run 2: 1 model call(s)"]
