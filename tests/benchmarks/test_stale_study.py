"""The stale-injection study runs the shipped ``invalidation-contracts run`` over HTTP, HTTP with
the watch stream and MCP with notifications at its quick size and reports one table: 0 stale
injections with push, the stale slot's one without (no timing is asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks import stale_transports


@pytest.mark.mcp
@pytest.mark.watch
def test_the_stale_study_shows_none_with_push_and_the_slots_one_without(tmp_path: Path) -> None:
    result = stale_transports.run(quick=True, out_dir=tmp_path)

    assert "|---" in result.markdown
    figures = [result.data["cells"][label] for label, _, _ in stale_transports.TRANSPORTS]
    assert [f["stale_injections"] for f in figures] == [1, 0, 0]
    assert all(f["completed"] == f["episodes"] == 36 for f in figures)
    assert all(check.met for check in result.checks)
