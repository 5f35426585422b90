"""The README's figures are what their commands print: the ladder table is compared with a fresh
``invalidation-contracts ladder`` (a study: 72 runs). The real-model table lives in
docs/researchers.md, rebuilt from its artifacts by test_guide_figures.py.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.metrics import aggregate
from invalidation_contracts.cli import main

from .snippets import ROOT

README = (ROOT / "README.md").read_text(encoding="utf-8")
REAL_MODEL = ROOT / "docs" / "results" / "real-model-qwen2.5-coder-0.5b"


def markdown_rows(text: str, after: str) -> list[dict[str, str]]:
    """The first Markdown table after the line ``after``: one dict per row, keyed by header."""
    lines = text[text.index(after) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    header, _, *rows = table
    return [dict(zip(header, row, strict=True)) for row in rows]


def arm_of(readme_arm: str) -> tuple[str, bool]:
    """``A2D `row/eager/client``` -> ("A2D", client applies)."""
    code, name = readme_arm.split(" ", 1)
    return code, name.strip("`").endswith("/client")


def printed(table: str, planner: str) -> dict[tuple[str, bool], dict[str, str]]:
    """The ladder table's rows of one planner, by (arm code, client apply)."""
    rows = markdown_rows(table, "| Scenario")
    return {
        (row["Arm"], row["Planner"].endswith("[client]")): row
        for row in rows
        if row["Planner"].split(" ")[0] == planner
    }


def percent(readme: str) -> str:
    return readme.replace(" %", "").replace("−", "")


def check_common(readme: dict[str, str], row: dict[str, str]) -> None:
    assert percent(readme["compliance"]) == row["Compl. (%)"]
    assert readme["retries"] == row["Retries"]
    assert readme["eviction precision"] == row["Prec."]
    assert readme["recall"] == row["Recall"]
    assert readme["evictions correct/wrong"] == row["Evict c/w"]
    assert readme["restamps"] == row["Restamps"]


@pytest.mark.study
def test_the_readme_ladder_table_is_what_ladder_prints(tmp_path: Path, capsys):
    assert main(["ladder", "--out", str(tmp_path), "--no-progress"]) == 0
    rows = printed(capsys.readouterr().out, "simulated:exact")
    readme_rows = markdown_rows(README, "## What the ladder measures")
    assert [arm_of(r["arm"])[0] for r in readme_rows] == ["A0", "A1", "A2", "A2D", "A2DC", "A2DG"]
    for readme in readme_rows:
        check_common(readme, rows[arm_of(readme["arm"])])
    assert re.search(r"ladder` \(72 runs", README)
    assert len(list((tmp_path / "runs").rglob("*.meta.json"))) == 72
    check_researchers_ladder(tmp_path, rows)


def check_researchers_ladder(results: Path, rows: dict[tuple[str, bool], dict[str, str]]) -> None:
    """docs/researchers.md's ladder table (with post-drift funding), from the same fresh run."""
    text = (ROOT / "docs" / "researchers.md").read_text(encoding="utf-8")
    page = markdown_rows(text, "Measured by `invalidation-contracts ladder` (simulated:exact")
    cells = {
        c.arm_code: c
        for c in aggregate(read_runs(results))
        if c.planner == "simulated:exact" and c.apply_mode == "planner"
    }
    assert page
    for row in page:
        key = arm_of(row["arm"])
        check_common(
            {**row, "evictions correct/wrong": row["evictions (correct/wrong)"]}, rows[key]
        )
        funding = cells[key[0]].stats["post_drift_funding"].mean
        assert row["post-drift funding"] == f"{100 * (funding or 0.0):.1f} %"


@pytest.mark.study
def test_the_real_model_report_is_rebuilt_byte_identical_by_its_command(tmp_path: Path):
    """``report --from docs/results/real-model-...`` (README, researchers.md) leaves the checkout
    as it was: the committed report and figures are what the command writes from the runs."""
    copy = tmp_path / REAL_MODEL.name
    shutil.copytree(REAL_MODEL, copy)

    assert main(["report", "--from", str(copy)]) == 0

    def files(folder: Path) -> list[Path]:
        return sorted(p.relative_to(folder) for p in folder.rglob("*") if p.is_file())

    assert files(copy) == files(REAL_MODEL)
    changed = [p for p in files(copy) if (copy / p).read_bytes() != (REAL_MODEL / p).read_bytes()]
    assert changed == []
