"""The SQL studies of issue 21 run at their quick size against real PostgreSQL (and SQLite) and
report their tables (figures are not asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks import reconcile_cost, two_writers


@pytest.mark.postgres
def test_the_reconciliation_study_times_the_digest_path_and_the_full_reads(tmp_path: Path) -> None:
    result = reconcile_cost.run(quick=True, out_dir=tmp_path)
    assert "|---" in result.markdown
    assert set(result.data["seconds"]) == {
        "SQLite, full read",
        "PostgreSQL, digest path (unchanged table)",
        "PostgreSQL, full read",
    }


@pytest.mark.postgres
def test_the_two_writers_study_compares_captured_with_uncaptured_writers(tmp_path: Path) -> None:
    result = two_writers.run(quick=True, out_dir=tmp_path)
    assert "|---" in result.markdown
    assert all(len(rates) == two_writers.QUICK.rounds for rates in result.data["rates"].values())
    assert set(result.data["waits"]) == {
        "uncaptured/free",
        "uncaptured/held",
        "captured/free",
        "captured/held",
    }
    free = result.data["waits"]["uncaptured/held"]
    assert free["timeouts"] == 0  # without the capture, two tables never wait on each other


@pytest.mark.postgres
@pytest.mark.study
def test_the_consumer_study_compares_the_index_with_the_scan_and_times_a_backlog(
    tmp_path: Path,
) -> None:
    from benchmarks import consumer_cost

    result = consumer_cost.run(quick=True, out_dir=tmp_path)
    assert "|---" in result.markdown
    assert set(result.data["seconds"]) == {
        "change, index",
        "change, scan (before)",
        "no-op, index",
        "no-op, scan (before)",
    }
    assert result.data["backlog"]["seconds"] > 0


@pytest.mark.postgres
@pytest.mark.workers
def test_the_logical_capture_study_compares_both_sources_with_uncaptured_writers(
    tmp_path: Path,
) -> None:
    from benchmarks import logical_capture

    result = logical_capture.run(quick=True, out_dir=tmp_path)
    assert "|---" in result.markdown
    assert set(result.data["rates"]) == {"uncaptured", "triggers", "logical"}
    assert set(result.data["propagation"]) == {"triggers", "logical"}
