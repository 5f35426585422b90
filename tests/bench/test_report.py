"""Reports and figures rebuilt from synthetic artifacts: every table and figure, and their skips."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest
from matplotlib.image import imread

from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.figures import write_figures
from invalidation_contracts.bench.metrics import aggregate
from invalidation_contracts.bench.report import build_report, ladder_table


def _load_builder():
    name = "bench_artifact_builder"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            name, Path(__file__).with_name("artifact_builder.py")
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


B = _load_builder()
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
RULES = (
    {"after_episode": 5, "kind": "breaking", "rules": "rule-removal"},
    {"after_episode": 8, "kind": "breaking", "rules": "rule-addition"},
)
COMMAND = "invalidation-contracts bench run --seeds 1-2"


def _ladder(
    root: Path,
    planner: str,
    simulated: bool,
    scenario: str = "payments-drifted",
    arms=("none", "naive", "table", "row"),
) -> None:
    for seed in (1, 2):
        for arm in arms:
            misses = {"none": (1, 2, 3, 6, 8, 10), "naive": (6, 8), "table": (6, 9, 11)}.get(
                arm, (6,)
            )
            memory = {
                "table": [
                    {"episode": 6, "event": "evict", "entry": e, "stale": e == "promo"}
                    for e in ("promo", "funding")
                ],
                "row": [
                    {"episode": 6, "event": "evict", "entry": "promo", "stale": True},
                    {"episode": 9, "event": "restamp", "entry": "funding"},
                ],
            }.get(arm, [])
            B.write_run(
                root,
                B.episodes(misses=misses, tokens=100 if arm == "none" else 80),
                scenario=scenario,
                planner=planner,
                arm=arm,
                seed=seed,
                simulated=simulated,
                memory=memory,
                stale=[(5, "promo")],
                command=COMMAND,
            )


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> Path:
    """Artifacts for every table and figure: the ladder, rotations, a second domain and a rules stream."""
    root = tmp_path_factory.mktemp("full")
    _ladder(root, "simulated:compliant", True)
    _ladder(root, "claude-haiku-4-5", False)
    for n in (1, 2):
        _ladder(
            root,
            "simulated:compliant",
            True,
            scenario=f"payments-rotations-{n}",
            arms=("naive", "row"),
        )
    _ladder(root, "simulated:compliant", True, scenario="recipes-drifted", arms=("naive", "row"))
    for arm, detection in (
        ("row+consumers", "lazy"),
        ("rules-stamp", "eager"),
        ("rules-oracle", "eager"),
    ):
        memory = [
            {
                "episode": 6 if detection == "eager" else 7,
                "event": "alert" if detection == "eager" else "evict",
                "entry": "r",
            },
            {"episode": 9, "event": "evict", "entry": "r2", "stale": True},
        ]
        B.write_run(
            root,
            B.episodes(),
            scenario="rules-drifted",
            arm=arm,
            detection=detection,
            memory=memory,
            drift=RULES,
            stale_slots=(),
        )
    return root


@pytest.fixture(scope="module")
def report(full) -> str:
    return build_report(full)


def _section(report: str, heading: str) -> str:
    start = report.index(heading)
    end = report.find("\n### ", start + 1)
    return report[start : end if end != -1 else None]


def _row(section: str, first_cell: str) -> list[str]:
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in {section}")


# --- the document -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "heading",
    [
        "## Definitions",
        "### Table 3 — The A-ladder on `payments-drifted`",
        "### Events and completion on `payments-drifted`",
        "### Table 4 — First-try by class on `payments-drifted`",
        "### Table 5 — Detection policies on `rules-drifted`",
        "### Table 6 — Token and retry cost on `payments-drifted`",
        "### Table 7 — First-try by hint shape",
        "### §3.7 — What the contract costs on the wire",
        "## Figures",
        "## Every cell",
    ],
)
def test_the_report_has_each_table(report, heading):
    assert heading in report


def test_the_report_is_written_under_the_root_by_default(full, report):
    assert (full / "report.md").read_text(encoding="utf-8") == report


def test_the_report_can_be_written_elsewhere(full, tmp_path):
    out = tmp_path / "nested" / "r.md"
    text = build_report(full, out)
    assert out.read_text(encoding="utf-8") == text
    link = f"]({Path('../..', full.name).as_posix()}/figures/fig3-compliance-payments-drifted.png)"
    assert link in text  # relative to the report's folder


def test_a_report_rebuilt_from_the_same_artifacts_is_identical(full, report):
    assert build_report(full) == report


def test_the_header_names_versions_scenarios_planners_seeds_and_the_command(report):
    header = report[: report.index("## Definitions")]
    assert "Package version: 0.1.0" in header
    assert "`payments-drifted` (12 episodes)" in header
    assert "`simulated:compliant` † simulated" in header and "`claude-haiku-4-5`," in header
    assert "Seeds: 1, 2" in header
    assert f"`{COMMAND}`" in header


def test_every_table_names_the_simulated_planners(report):
    tables = [s for s in report.split("\n### ")[1:]]
    assert tables and all("Simulated planners:" in t for t in tables)


def test_simulated_rows_are_marked_and_footnoted(report):
    table3 = _section(report, "### Table 3 — The A-ladder on `payments-drifted`")
    assert _row(table3, "simulated:compliant †")
    assert _row(table3, "claude-haiku-4-5")
    assert "deterministic behaviour models, not LLMs; their token counts are estimates" in table3


def test_a_table_of_real_planners_says_none_is_simulated(tmp_path):
    _ladder(tmp_path, "claude-haiku-4-5", False, arms=("none", "row"))
    text = build_report(tmp_path)
    assert "Simulated planners: none" in _section(text, "### Table 3")
    assert "†" not in _section(text, "### Table 3")


def test_the_definitions_state_each_pre_registered_measure(report):
    definitions = report[report.index("## Definitions") : report.index("## Tables")]
    for name in (
        "Compliance",
        "Recall",
        "Token saving",
        "Completed episodes",
        "Wire cost",
        "Aggregation",
    ):
        assert f"**{name}**" in definitions
    assert "sample standard deviation" in definitions


# --- the tables' contents ---------------------------------------------------------------------------


def test_table3_shows_compliance_precision_and_funding_by_arm(report):
    table3 = _section(report, "### Table 3 — The A-ladder on `payments-drifted`")
    header = _row(table3, "Planner")
    row = dict(zip(header, _row(table3, "simulated:compliant †"), strict=True))
    assert (row["Compl. A1"], row["Compl. A2D"], row["Δ A2D−A1"]) == ("66.7", "100.0", "+33.3")
    assert (row["Prec. A2"], row["Prec. A2D"]) == ("0.50", "1.00")
    assert (row["Funding A0"], row["Funding A2"], row["Funding A2D"]) == ("100.0", "0.0", "100.0")
    assert row["Completed"] == "12/12"
    assert "Compl. A0" not in header


def test_undefined_values_are_shown_as_a_dash(report):
    events = _section(report, "### Events and completion on `payments-drifted`")
    naive = next(line for line in events.splitlines() if "A1 (naive)" in line)
    assert "| – |" in naive  # no eviction: precision undefined


def test_the_events_table_splits_counts_per_drift_event(report):
    events = _section(report, "### Events and completion on `payments-drifted`")
    row = next(
        line
        for line in events.splitlines()
        if "simulated:compliant" in line and "A2D (row)" in line
    )
    assert (
        "| 1 + 0 | 0 + 1 |" in row
    )  # rotation: one eviction; benign bump: zero evictions, one restamp


def test_an_exhausted_run_shows_its_completed_count(tmp_path):
    eps = B.episodes()[:3] + [
        B.Ep(k, first_try=False, attempts=5, completed=False) for k in B.STREAM[3:]
    ]
    B.write_run(
        tmp_path,
        eps,
        arm="table",
        memory=[{"episode": 6, "event": "evict", "entry": "p", "stale": True}],
    )
    text = build_report(tmp_path)
    assert "3/12" in _row(_section(text, "### Table 3"), "simulated:compliant †")
    assert "| 1.00 |" in _section(text, "### Events and completion")


def test_table5_prices_each_detection_policy_against_lazy(report):
    table5 = _section(report, "### Table 5 — Detection policies on `rules-drifted`")
    lines = [line for line in table5.splitlines() if line.startswith("| simulated:compliant")]
    assert [line.split("|")[2].strip() for line in lines] == [
        "Lazy (A2DC)",
        "Stamp-only (A2DR)",
        "Oracle (A2DO)",
    ]
    lazy, stamp, _ = (
        dict(
            zip(
                _row(table5, "Planner"),
                [c.strip() for c in line.strip("|").split("|")],
                strict=True,
            )
        )
        for line in lines
    )
    assert (lazy["Reaction"], stamp["Reaction"]) == ("7/9", "6/9")
    assert (lazy["Δ tok. vs lazy (%)"], stamp["Δ tok. vs lazy (%)"]) == ("–", "+0.0")
    assert stamp["Evict"] == "0 + 1"


def test_table6_reports_saving_against_a0_and_labels_estimates(report):
    table6 = _section(report, "### Table 6 — Token and retry cost on `payments-drifted`")
    row = dict(zip(_row(table6, "Planner"), _row(table6, "simulated:compliant †"), strict=True))
    assert row["A0 tokens"].endswith(" est.")
    assert float(row["Saving A2D"]) > float(row["Saving A1"]) > 0
    assert (row["Retries A0"], row["Retries A1"], row["Retries A2D"]) == ("6", "2", "1")
    real = dict(zip(_row(table6, "Planner"), _row(table6, "claude-haiku-4-5"), strict=True))
    assert not real["A0 tokens"].endswith("est.")


def test_table6_is_skipped_without_an_a0_run(tmp_path):
    _ladder(tmp_path, "simulated:compliant", True, arms=("naive", "row"))
    assert "### Table 6 — Token and retry cost\n\n_Skipped: no A0" in build_report(tmp_path)


def test_table7_has_a_column_per_hint_shape_and_stream(report):
    table7 = _section(report, "### Table 7 — First-try by hint shape")
    header = _row(table7, "Planner")
    assert "add_field · payments-drifted" in header and "add_field · recipes-drifted" in header
    assert not any("rotations" in h for h in header)


def test_the_wire_table_pools_responses_by_level(report):
    wire = _section(report, "### §3.7 — What the contract costs on the wire")
    row = dict(zip(_row(wire, "Level"), _row(wire, "L6"), strict=True))
    assert row["Max contract (B)"] == "120"
    assert row["Overhead w/ sugg. (%)"] == "15.0"


def test_tables_without_runs_are_skipped_with_a_note(tmp_path):
    B.write_run(tmp_path, B.episodes(), arm="none")
    text = build_report(tmp_path)
    assert "### Table 3 — The A-ladder\n\n_Skipped:" in text
    assert "### Table 5 — Detection policies\n\n_Skipped:" in text
    assert "### Table 7 — First-try by hint shape\n\n_Skipped:" in text


def test_the_header_counts_unfinished_runs_it_leaves_out(tmp_path):
    B.write_run(tmp_path, B.episodes())
    aborted = B.ArtifactWriter(
        tmp_path, B.RunKey("payments-drifted", "simulated:compliant", "naive", 1)
    )
    aborted.write(
        "episode", episode=1, klass="governed", first_try=True, completed=True, attempts=1
    )
    aborted.abort()
    text = build_report(tmp_path)
    assert "- Left out: 1 unfinished run(s)" in text
    assert "- Runs: 1 " in text


def test_a_root_without_runs_gives_a_short_report(tmp_path):
    assert "No completed runs" in build_report(tmp_path)


def test_the_ladder_table_has_one_row_per_planner_and_arm(full):
    cells = [c for c in aggregate(read_runs(full)) if c.scenario == "payments-drifted"]
    text = ladder_table(cells)
    header = [h.strip() for h in text.splitlines()[0].strip("|").split("|")]
    assert header[4:] == [
        "Compl. (%)",
        "Retries",
        "Prec.",
        "Recall",
        "Evict c/w",
        "Restamps",
        "Completed",
        "Saving (%)",
    ]
    assert len([line for line in text.splitlines() if line.startswith("| payments-drifted")]) == 8
    assert "| A0 | 2 | – |" in text  # compliance undefined at A0


# --- figures --------------------------------------------------------------------------------------


def test_figures_are_written_as_valid_pngs(full):
    paths = write_figures(full)
    names = sorted(p.name for p in paths)
    assert names == [
        "fig3-compliance-payments-drifted.png",
        "fig3-compliance-payments-rotations-1.png",
        "fig3-compliance-payments-rotations-2.png",
        "fig3-compliance-recipes-drifted.png",
        "fig4-post-drift-funding-payments-drifted.png",
        "fig4-post-drift-funding-payments-rotations-1.png",
        "fig4-post-drift-funding-payments-rotations-2.png",
        "fig4-post-drift-funding-recipes-drifted.png",
        "fig5-rotations-payments.png",
        "fig6-targeted-class.png",
    ]
    for path in paths:
        assert path.parent == full / "figures"
        assert path.read_bytes()[:8] == PNG_SIGNATURE
        assert imread(path).shape[2] in (3, 4)


def test_the_report_links_the_figures_write_figures_draws(full, report):
    linked = set(re.findall(r"\]\(figures/([^)]+)\)", report))
    assert linked == {p.name for p in write_figures(full)}


def test_figures_without_data_are_skipped(tmp_path):
    for arm, detection in (("row+consumers", "lazy"), ("rules-stamp", "eager")):
        B.write_run(
            tmp_path,
            B.episodes(),
            scenario="rules-drifted",
            arm=arm,
            detection=detection,
            drift=RULES,
            stale_slots=(),
        )
    assert write_figures(tmp_path) == []
    assert not (tmp_path / "figures").exists()
