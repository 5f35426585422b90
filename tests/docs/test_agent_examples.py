"""The guides' listener, watch and observed-shop examples run as a user runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


def run(name: str) -> str:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name)],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_agent_listener_shows_the_events_and_the_wire_cost_of_one_request():
    out = run("agent_listener.py")
    assert "status 422 outstanding needs ()" in out
    assert "events: ['Stored']" in out
    assert "contract bytes" in out


@pytest.mark.watch
def test_agent_watch_evicts_the_rotated_fix_before_any_request():
    out = run("agent_watch.py")
    assert "learned: ['ADD_REQUIRED_PROMO_CODE']" in out
    assert "before any request, evicted: ['row-changed']" in out


def test_observed_shop_scores_its_client_and_exports_the_refusal():
    out = run("observed_shop.py")
    assert "agent: 422 then 200" in out
    assert 'suggestion_type="USE_REQUIRED_FUNDING_TYPE"} 1.0' in out
    assert "episodes 1 retries 1" in out and "the-agents-own-api-token" not in out
