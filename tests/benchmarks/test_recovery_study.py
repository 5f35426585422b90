"""The recovery study runs at its quick size against real PostgreSQL and uvicorn workers and
reports its table (figures are not asserted; the unverified-stamp count is a correctness check)."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks import recovery


@pytest.mark.postgres
@pytest.mark.workers
def test_the_recovery_study_reports_recovery_times_and_no_unverified_stamp(tmp_path: Path) -> None:
    result = recovery.run(quick=True, out_dir=tmp_path)
    assert "|---" in result.markdown
    assert result.data["unverified"] == 0
    assert result.data["all_ready"]
    assert len(result.data["kill_s"]) == recovery.QUICK.kills
