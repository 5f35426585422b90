"""The guides' figures are what the commands they name produced (docs/researchers.md, "Figures in
these docs"): from the artifact the command wrote, or, when it is deterministic, from a fresh run.

- A paragraph or table row that names ``python -m benchmarks --only NAME`` quotes only figures
  that study recorded in benchmarks/results.json (timings are noisy: never recomputed, only read).
- The real-model table and prose (researchers.md) are rebuilt from the committed
  artifacts in docs/results/.
- Figures of a deterministic harness command (client apply mode; the paper grid's wire cost and
  run count) are recomputed by running the command the page names (``study``: minutes of CPU).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.metrics import aggregate
from invalidation_contracts.bench.report import ladder_table
from invalidation_contracts.cli import main

from .snippets import PAGES, ROOT
from .test_docs_figures import REAL_MODEL, arm_of, markdown_rows, percent, printed

README = (ROOT / "README.md").read_text(encoding="utf-8")
RESEARCHERS = (ROOT / "docs" / "researchers.md").read_text(encoding="utf-8")
STUDIES = json.loads((ROOT / "benchmarks" / "results.json").read_text(encoding="utf-8"))["studies"]
#: A quoted figure: a number with a unit or a ratio sign (not a section number, not a version).
FIGURE = re.compile(r"(?<![\w.§/-])\d[\d,.]*(?:\s?(?:×|%|ms|µs|s\b|MB|KB|kB|GB|B\b|min\b))")


def units(text: str) -> list[str]:
    """Paragraphs, and each table row on its own (a row is one claim)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    found: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        rows = [line for line in paragraph.splitlines() if line.startswith("|")]
        found.extend(rows if rows else [paragraph])
    return found


def _squeezed(text: str) -> str:
    return re.sub(r"[\s\u202f\u2009]", "", text)


CITED = [
    pytest.param(page, unit, id=f"{page.relative_to(ROOT)}:{unit[:40]}")
    for page in [p for p in PAGES if p.name != "decisions.md"]
    for unit in units(page.read_text(encoding="utf-8"))
    if "--only " in unit and FIGURE.search(unit)
]


@pytest.mark.parametrize("page, unit", CITED)
def test_every_benchmark_figure_quoted_is_what_its_study_recorded(page: Path, unit: str) -> None:
    names = [n for found in re.findall(r"--only ([\w,]+)", unit) for n in found.split(",")]
    assert all(n in STUDIES for n in names), f"no such study: {names}"
    recorded = _squeezed(
        " ".join(json.dumps([STUDIES[n]["markdown"], STUDIES[n]["checks"]]) for n in names)
    )
    recorded += _squeezed(" ".join(STUDIES[n]["markdown"] for n in names))
    for figure in FIGURE.findall(unit):
        assert _squeezed(figure) in recorded, (
            f"{page.name}: {figure!r} is not in what `--only {','.join(names)}` recorded "
            "(benchmarks/results.json): rerun the study or quote what it wrote"
        )


def test_the_citing_rule_sees_the_figures_it_checks() -> None:
    """The check above is not vacuous: agents.md's confirmation cost is one of its cases."""
    assert any("1.03×" in unit for _, unit in (p.values for p in CITED))


# --- the real model: committed artifacts -------------------------------------------------------


def real_model_cells():
    return {(c.arm_code, c.apply_mode == "client"): c for c in aggregate(read_runs(REAL_MODEL))}


def test_the_researchers_real_model_table_is_what_its_artifacts_say() -> None:
    rows = printed(ladder_table(aggregate(read_runs(REAL_MODEL))), "local:qwen2.5-coder-0.5b")
    page = markdown_rows(RESEARCHERS, "#### The real-model ladder, measured")
    assert len(page) == len(rows) == 4
    for row in page:
        key = arm_of(row["arm"])
        got = rows[key]
        assert percent(row["compliance"]) == got["Compl. (%)"]
        assert row["retries"] == got["Retries"]
        assert row["precision"] == got["Prec."] and row["recall"] == got["Recall"]
        assert row["evictions c/w"] == got["Evict c/w"] and row["restamps"] == got["Restamps"]
        assert row["completed"] == got["Completed"]
        assert row["unfaithful"] == got["Unfaithful"]
        assert row["planner errors"] == got["Planner err."]
        if key[0] != "A0":
            assert percent(row["tokens (server-reported)"]) == got["Saving (%)"]


def test_the_real_model_prose_is_what_its_artifacts_say() -> None:
    cells = real_model_cells()
    base = cells[("A0", False)]
    memory = [cell for key, cell in cells.items() if key != ("A0", False)]
    more = sorted(
        round(c.stats["completed_episodes"].mean - base.stats["completed_episodes"].mean)
        for c in memory
    )
    fewer = sorted(
        round(100 * (1 - c.stats["retries"].mean / base.stats["retries"].mean)) for c in memory
    )
    assert f"completes {more[0]}–{more[-1]}\nmore episodes" in RESEARCHERS
    assert f"needs {fewer[0]}–{fewer[-1]} % fewer retries" in RESEARCHERS
    funding = {round(c.stats["post_drift_funding"].mean * 100, 1) for c in memory}
    assert len(funding) == 1
    assert f"Post-drift funding\nfirst-try is {funding.pop()} % on every memory arm" in RESEARCHERS
    shown = markdown_rows(
        (REAL_MODEL / "report.md").read_text(encoding="utf-8"), "### What the model is shown"
    )
    share = sorted(round(float(r["Share (%)"])) for r in shown)
    assert f"({share[0]}–{share[-1]} % of input tokens, estimated)" in RESEARCHERS


def test_the_real_model_wall_times_are_what_its_run_metadata_record() -> None:
    """Per seed, the first run's start to the last run's end (``started_at``/``finished_at``)."""
    from datetime import datetime

    spans: dict[int, list[datetime]] = {}
    for path in (REAL_MODEL / "runs").rglob("*.meta.json"):
        meta = json.loads(path.read_text(encoding="utf-8"))
        times = spans.setdefault(meta["key"]["seed"], [])
        times += [datetime.fromisoformat(meta["started_at"])]
        times += [datetime.fromisoformat(meta["finished_at"])]
    walls = []
    for seed in sorted(spans):
        seconds = int((max(spans[seed]) - min(spans[seed])).total_seconds())
        walls.append((seconds // 60, seconds % 60))
    (m0, s0), (m1, s1) = walls
    assert f"{m0} min\n    {s0} s from its first run's start" in RESEARCHERS
    assert f"kept): {m1} min {s1} s" in RESEARCHERS


# --- deterministic harness figures: a fresh run of the command the page names --------------------


def _command_after(text: str, anchor: str) -> list[str]:
    """The ``invalidation-contracts …`` command quoted in the paragraph that contains ``anchor``."""
    [unit] = [u for u in units(text) if anchor in u]
    [quoted] = re.findall(r"`(invalidation-contracts [^`]+)`", unit)
    return shlex.split(quoted)[1:]


@pytest.mark.study
def test_client_apply_mode_figures_are_what_their_command_prints(tmp_path: Path, capsys) -> None:
    argv = _command_after(RESEARCHERS, "**Client apply mode**")
    assert main([*argv, "--out", str(tmp_path), "--no-progress"]) == 0
    rows = printed(capsys.readouterr().out, "simulated:conservative")
    planner, client = rows[("A2D", False)], rows[("A2D", True)]
    expected = (
        f"compliance at\nA2D goes from {planner['Compl. (%)']} % to {client['Compl. (%)']} % "
        f"and the token saving against A0 from {planner['Saving (%)']} % to "
        f"{client['Saving (%)']} %"
    )
    assert expected in RESEARCHERS
    assert f"reads {planner['Compl. (%)']} % compliance and {planner['Retries']} retries" in (
        RESEARCHERS
    )


def check_paper_grid(results: Path) -> None:
    """What the pages say of ``run --grid paper``, against the run's own artifacts and report:
    its run count (README.md, researchers.md), its evictions, all labelled, and the §3.7 row of
    researchers.md's table of cells not reproduced (run by test_docs_commands under ``study``)."""
    from invalidation_contracts.bench.metrics import score

    metrics = score(read_runs(results))
    assert f"whole simulated paper grid: {len(metrics)} runs" in README
    assert f"`invalidation-contracts run --grid paper`, {len(metrics)} runs)" in RESEARCHERS
    evicted = sum(m.evictions for m in metrics)
    unlabelled = sum(m.evictions_unlabelled for m in metrics)
    assert f"that is {evicted:,} evictions,\n{unlabelled} unlabelled" in RESEARCHERS
    precision: dict[str, set[float | None]] = {}
    for m in metrics:
        if m.scenario in ("payments-rotations-2", "payments-rotations-3") and m.planner in (
            "simulated:exact",
            "simulated:paraphrase",
        ):
            precision.setdefault(m.arm_code, set()).add(m.precision)
    assert precision["A2D"] == precision["A2DC"] == {1.0}
    [graph] = precision["A2DG"]
    stated = "`simulated:exact` and `simulated:paraphrase` read precision 1.00 at A2D and A2DC"
    assert f"{stated} and {graph:.2f} at\nA2DG" in RESEARCHERS
    report = (results / "report.md").read_text(encoding="utf-8")
    wire = report[report.index("### §3.7") :].split("\n### ", 1)[0]
    cells = set(re.findall(r"(?<![\w.§])\d[\d,]*(?:\.\d+)?", wire))
    [row] = [u for u in units(RESEARCHERS) if u.startswith("| §3.7")]
    _, _, project, why = [cell.strip() for cell in row.strip("|").split("|")]
    for number in re.findall(r"(?<![\w.§])\d[\d,]*(?:\.\d+)?", f"{project} {why}"):
        assert number in cells, f"researchers.md's §3.7 row: {number} is not in the report"


def _one_run(argv: list[str], out: Path):
    from invalidation_contracts.bench.metrics import score

    assert main([*argv, "--out", str(out), "--no-progress"]) == 0
    [run] = score(read_runs(out))
    return run


def _commands_in(unit: str) -> list[list[str]]:
    quoted = re.findall(r"`(invalidation-contracts [^`]+)`", unit.replace("\n", " "))
    return [shlex.split(q)[1:] for q in quoted]


@pytest.mark.study
@pytest.mark.mcp
def test_the_model_view_figures_are_what_their_command_records(tmp_path: Path) -> None:
    """agents.md's input tokens shown and kept from the model, from the run it names."""
    text = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    [unit] = [u for u in units(text) if "**What the model sees.**" in u]
    [argv] = _commands_in(unit)
    run = _one_run([a for a in argv if a != "--no-progress"], tmp_path)
    # The report's "Share" column (bench.report.cost.model_view_table): of shown + hidden.
    whole = run.tokens_in + run.contract_tokens
    share = 100 * run.contract_tokens / whole
    expected = (
        f"{run.tokens_in:,} input tokens shown, {run.contract_tokens:,} kept from the model "
        f'({share:.1f}%, the report\'s "Share": of the {whole:,} the model would have been '
        "shown with them)"
    )
    assert expected in " ".join(unit.split())


@pytest.mark.study
def test_the_framework_table_is_what_the_http_reference_run_records(tmp_path: Path) -> None:
    """frameworks.md: every transport's row reads the ``http`` reference run's figures (the
    framework runs are held equal to it by tests/frameworks/test_harness_stream.py)."""
    text = (ROOT / "docs" / "frameworks.md").read_text(encoding="utf-8")
    [argv] = [c for c in _blocks_of(text) if "--transport" in c]
    argv[argv.index("--transport") + 1] = "http"
    out = argv.index("--out")
    del argv[out : out + 2]
    run = _one_run([a for a in argv if a != "--no-progress"], tmp_path)
    figures = {
        "evictions c/w": f"{run.evictions_correct}/{run.evictions_wrong}",
        "restamps": str(run.restamps),
        "precision": f"{run.precision:.2f}",
        "recall": f"{run.recall:.2f}",
        "stale injections (outside slots)": (
            f"{run.stale_injections} ({run.stale_injections_outside_slots})"
        ),
        "injections": str(run.injections),
        "completed": f"{run.completed_episodes}/{run.episodes}",
    }
    rows = markdown_rows(text, "| transport | evictions c/w")
    assert [r["transport"].split(" ")[0] for r in rows][0] == "`http`"
    for row in rows:
        assert {k: row[k] for k in figures} == figures, row["transport"]


def _blocks_of(text: str) -> list[list[str]]:
    from .snippets import commands

    found = []
    for body in re.findall(r"^```[\w-]*\n(.*?)^```", text, flags=re.S | re.M):
        found += [
            list(c.words[1:]) for c in commands(body) if c.words[0] == "invalidation-contracts"
        ]
    return found
