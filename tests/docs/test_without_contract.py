"""docs/without-contract.md is what the harness wrote: its table is the report's "Without a
contract" table of the command the page names (rerun under ``study`` by test_docs_commands, which
calls ``check_without_contract`` on what it wrote), and its figure is shipped."""

from __future__ import annotations

from pathlib import Path

from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.frontier import HEADERS, contractless_table
from invalidation_contracts.bench.metrics import aggregate

from .snippets import ROOT

PAGE = (ROOT / "docs" / "without-contract.md").read_text(encoding="utf-8")


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
