"""docs/without-contract.md is what the harness wrote: its table is the report's "Without a
contract" table of the command the page names (rerun as written under ``study`` here, in a file
of its own: under xdist's ``--dist loadfile`` a file is one worker's job, so this grid and the
paper grid of test_docs_commands run side by side), and its figure is shipped."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.frontier import HEADERS, contractless_table
from invalidation_contracts.bench.metrics import aggregate

from .runner import folder
from .snippets import ROOT, commands, shell_blocks

PAGE = (ROOT / "docs" / "without-contract.md").read_text(encoding="utf-8")
#: The page's grid: the contract-less policies on the five shipped streams and the two τ² airline
#: streams.
WITHOUT_CONTRACT = (
    "invalidation-contracts run --scenario payments-rotations-1 --scenario payments-rotations-2 "
    "--scenario payments-rotations-3 --scenario payments-drifted --scenario recipes-drifted "
    "--scenario tau2-airline-drifted --scenario tau2-airline-seats "
    "--planner simulated:exact --arm none --arm naive --arm row --arm naive@none --arm ttl@none "
    "--arm verify@none --arm learned@none --seeds 0,1,2 --out results/without-contract"
)


def check_without_contract(results: Path) -> None:
    """The page's table is the one the page's command wrote, row for row; so is its figure."""
    table = contractless_table(aggregate(read_runs(results)))
    assert table in PAGE, "docs/without-contract.md: paste the table the command wrote"
    assert (results / "figures" / "fig-frontier-contractless.png").stat().st_size > 0
    report = (results / "report.md").read_text(encoding="utf-8")
    assert table in report


def test_the_page_quotes_the_report_table_for_every_stream_and_arm() -> None:
    header = "| " + " | ".join(HEADERS) + " |"
    assert header in PAGE
    rows = [
        line
        for line in PAGE.splitlines()
        if line.startswith(("| payments-", "| recipes-", "| tau2-"))
    ]
    streams = {row.split("|")[1].strip() for row in rows}
    assert streams == {
        "payments-rotations-1",
        "payments-rotations-2",
        "payments-rotations-3",
        "payments-drifted",
        "recipes-drifted",
        "tau2-airline-drifted",
        "tau2-airline-seats",
    }
    assert len(rows) == 7 * 7


def test_the_page_shows_the_frontier_figure() -> None:
    assert "](images/without-contract-frontier.png)" in PAGE
    assert (ROOT / "docs" / "images" / "without-contract-frontier.png").stat().st_size > 0


@pytest.mark.study
@pytest.mark.tau2
@pytest.mark.timeout(1200)  # the command may take its 900 s; the suite's 600 s would cut it first
def test_the_pages_grid_runs_as_written_and_writes_the_table_and_figure_the_page_shows(
    tmp_path: Path,
) -> None:
    [command] = [
        c for b in shell_blocks() for c in commands(b.body) if " ".join(c.words) == WITHOUT_CONTRACT
    ]
    with folder(tmp_path, list(sys.path)) as here:
        here.run(command, timeout=900)
        check_without_contract(here.path / "results" / "without-contract")
