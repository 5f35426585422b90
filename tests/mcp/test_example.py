"""The runnable example of docs/agents.md "Use it from an MCP agent"."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "mcp_agent.py"

pytestmark = [pytest.mark.mcp, pytest.mark.timeout(120)]


def test_the_mcp_agent_example_learns_a_fix_sees_the_rotation_and_stops_injecting_it(capsys):
    runpy.run_path(str(EXAMPLE), run_name="__main__")

    lines = capsys.readouterr().out.splitlines()
    episodes = [line for line in lines if line.startswith("episode ")]
    assert episodes == [
        "episode 1: injected [], 2 attempt(s), status 200",
        "episode 2: injected [{'promo_code': 'SUMMERSALE25'}], 1 attempt(s), status 200",
        "episode 3: injected [], 2 attempt(s), status 200",
        "episode 4: injected [{'promo_code': 'WINTERLAUNCH26'}], 1 attempt(s), status 200",
    ]
    assert "after the rotation, before any call: evicted ['row-changed']" in lines
    assert (
        "kept from the model: ['contract_epoch', 'contract_seq', 'detail', 'rules_version', "
        "'table_versions']" in lines
    )
