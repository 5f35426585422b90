"""The SQL studies of issue 21 run at their quick size against real PostgreSQL (and SQLite) and
report their tables (figures are not asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks import reconcile_cost


@pytest.mark.postgres
def test_the_reconciliation_study_times_the_digest_path_and_the_full_reads(tmp_path: Path) -> None:
    result = reconcile_cost.run(quick=True, out_dir=tmp_path)
    assert "|---" in result.markdown
    assert set(result.data["seconds"]) == {
        "SQLite, full read",
        "PostgreSQL, digest path (unchanged table)",
        "PostgreSQL, full read",
    }
