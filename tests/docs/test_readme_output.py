"""The output the README shows for an example is what that example prints today.

The README quotes an example's output in a ``text`` block right after the prose that names
``python docs/examples/NAME.py``; the example is run as the reader runs it and its standard
output must be the block, line for line.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from .snippets import ROOT, blocks

README = ROOT / "README.md"
QUOTED = [
    block
    for block in blocks()
    if block.page == README and block.lang == "text" and "docs/examples/" in block.before
]


def _example(before: str) -> str:
    [path] = re.findall(r"`python (docs/examples/\w+\.py)`", before)
    return path


def test_the_readme_quotes_the_output_of_its_examples() -> None:
    assert {_example(b.before) for b in QUOTED} == {
        "docs/examples/retrofit_app.py",
        "docs/examples/agent_memory.py",
    }


@pytest.mark.parametrize("block", QUOTED, ids=lambda b: _example(b.before))
def test_a_quoted_output_is_what_the_example_prints(block, tmp_path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / _example(block.before))],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    printed = done.stdout.splitlines()
    quoted = block.body.splitlines()
    # the retrofit example ends with its OpenAPI paths, which the README leaves out
    assert printed[: len(quoted)] == quoted
