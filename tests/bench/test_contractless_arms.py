"""The same stream with and without the contract (issue 37 item 2): an ``@none`` arm (or
``--level none``) runs against the server at level ``none``, through the same client code, and the
report compares it with the contract arms."""

from __future__ import annotations

import json

import pytest

from invalidation_contracts.bench.arms import Arm
from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.frontier import contractless_table, frontier
from invalidation_contracts.bench.metrics import aggregate
from invalidation_contracts.cli import main


def test_an_arm_with_the_contract_withheld_is_written_with_at_none():
    arm = Arm.parse("A1L@none")
    assert (arm.strategy, arm.withheld, str(arm), arm.label) == (
        "learned",
        True,
        "learned@none",
        "learned@none",
    )
    assert str(Arm.parse("row/lazy@none")) == "row/lazy/planner@none"


def test_an_arm_names_no_level_but_none():
    with pytest.raises(ValueError, match="only level an arm names is @none"):
        Arm.parse("row@L4")


@pytest.fixture(scope="module")
def withheld_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("contractless")
    argv = ["run", "--scenario", "payments-rotations-1", "--planner", "simulated:exact"]
    for arm in ("none", "row", "learned@none"):
        argv += ["--arm", arm]
    assert main([*argv, "--seeds", "0", "--out", str(out), "--no-progress"]) == 0
    return out


def test_a_withheld_arm_runs_at_level_none(withheld_run):
    levels = {run.meta.key.arm: run.meta.level for run in read_runs(withheld_run)}
    assert levels == {"none": 6, "row": 6, "learned@none": -1}


def test_without_a_contract_learned_memory_still_saves_tokens(withheld_run):
    cells = {c.arm: c for c in aggregate(read_runs(withheld_run))}
    assert cells["learned@none"]["token_saving"].mean > 0.0
    assert cells["learned@none"]["injections"].mean > 0


def test_the_report_has_the_contract_less_table_and_the_frontier_figure(withheld_run):
    report = (withheld_run / "report.md").read_text(encoding="utf-8")
    table = contractless_table(aggregate(read_runs(withheld_run)))
    assert "## Without a contract" in report and table in report
    assert "| payments-rotations-1 | A1L∅ |" in table
    assert (withheld_run / "figures" / "fig-frontier-contractless.png").stat().st_size > 0
    assert set(frontier(aggregate(read_runs(withheld_run)))) == {"A0", "A2D", "A1L∅"}


def test_level_none_withholds_the_contract_from_every_arm(tmp_path, capsys):
    argv = ["run", "--scenario", "payments-rotations-1", "--planner", "simulated:exact"]
    argv += ["--arm", "A1V", "--seeds", "0", "--level", "none"]
    assert main([*argv, "--out", str(tmp_path), "--no-progress", "--json"]) == 0
    assert {run.meta.key.arm for run in read_runs(tmp_path)} == {"verify@none"}
    assert json.loads(capsys.readouterr().out)


def test_a_withheld_arm_against_a_server_url_is_a_usage_error(tmp_path, capsys):
    argv = ["run", "--arm", "learned@none", "--server-url", "http://127.0.0.1:9"]
    assert main([*argv, "--admin-token-file", "/dev/null", "--out", str(tmp_path)]) == 2
    assert "needs the in-process server" in capsys.readouterr().err
