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
                    {"episode": 3, "event": "inject", "entry": "promo"},
                    {"episode": 7, "event": "inject", "entry": "funding"},
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
    """Artifacts for every table and figure: ladder, rotations, a second domain, a rules stream."""
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
        lazy = detection == "lazy"
        memory = [
            {"episode": 7, "event": "evict", "entry": "r", "stale": True},
            {"episode": 9, "event": "evict", "entry": "r2", "stale": True},
        ]
        if not lazy:
            memory += [{"episode": e, "event": "alert", "entry": None} for e in (6, 9)]
        B.write_run(
            root,
            B.episodes(misses=(7, 10) if lazy else ()),
            scenario="rules-drifted",
            arm=arm,
            detection=detection,
            memory=memory,
            drift=RULES,
            stale_slots=(),
            rules_versions=[(1, "aaa"), (6, "bbb"), (9, "ccc")],
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


# --- the document --------------------------------------------------------------------------------


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
    missing = [t.splitlines()[0] for t in tables if "Simulated planners:" not in t]
    assert tables and missing == []


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


# --- the tables' contents ------------------------------------------------------------------------


def test_table3_shows_compliance_precision_and_funding_by_arm(report):
    table3 = _section(report, "### Table 3 — The A-ladder on `payments-drifted`")
    header = _row(table3, "Planner")
    row = dict(zip(header, _row(table3, "simulated:compliant †"), strict=True))
    assert (row["Compl. A1"], row["Compl. A2D"], row["Δ A2D−A1"]) == ("75.0", "100.0", "+25.0")
    assert (row["Prec. A2"], row["Prec. A2D"]) == ("0.50", "1.00")
    assert (row["Funding A0"], row["Funding A2"], row["Funding A2D"]) == ("100.0", "0.0", "100.0")
    assert row["Completed"] == "12/12"
    assert (row["Completed unfaithful"], row["Planner errors"]) == ("0", "0")
    assert "Compl. A0" not in header
    assert "the stale slots [6] (the paper's rule, §4.1)" in table3
    assert "Departure" not in table3


def test_table3_labels_a_pre_registered_exclusion_as_a_departure(tmp_path):
    departures = [{"episodes": [1], "reason": "the first governed episode finds memory empty"}]
    for arm in ("naive", "row"):
        B.write_run(tmp_path, B.episodes(misses=(1, 6)), arm=arm, departures=departures)
    table3 = _section(build_report(tmp_path), "### Table 3")
    assert "**Departure from the paper:** it also excludes episodes [1]" in table3
    assert "(the first governed episode finds memory empty)" in table3
    assert _row(table3, "simulated:compliant †")[1:3] == ["100.0", "100.0"]


def test_unfaithful_completions_and_planner_errors_are_shown_beside_compliance(tmp_path):
    B.write_run(tmp_path, B.episodes(), arm="naive", unfaithful=(3,))
    B.write_run(tmp_path, B.episodes(misses=(2,)), arm="row", planner_errors=(2,))
    text = build_report(tmp_path)
    table3 = _section(text, "### Table 3")
    row = dict(zip(_row(table3, "Planner"), _row(table3, "simulated:compliant †"), strict=True))
    assert (row["Completed unfaithful"], row["Planner errors"]) == ("A1 1", "A2D 1")
    assert row["Compl. A1"] == "75.0"  # the unfaithful governed episode 3 is no success
    cells = text[text.index("## Every cell") :]
    assert "| Unfaithful | Planner err. |" in cells


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


def test_the_events_table_gives_events_after_the_same_episode_each_their_own_counts(tmp_path):
    drift = (
        {"after_episode": 5, "kind": "benign", "table": "token_map", "rules": None},
        {"after_episode": 5, "kind": "breaking", "table": "recommended", "rules": None},
    )
    memory = [
        {"episode": 2, "event": "store", "entry": "tok", "tables": ["token_map"]},
        {"episode": 3, "event": "store", "entry": "rec", "tables": ["recommended"]},
        {"episode": 3, "event": "store", "entry": "rec2", "tables": ["recommended"]},
        {"episode": 6, "event": "evict", "entry": "rec", "stale": True},
        {"episode": 7, "event": "evict", "entry": "rec2", "stale": True},
        {"episode": 7, "event": "restamp", "entry": "tok", "tables": ["token_map"]},
    ]
    B.write_run(tmp_path, B.episodes(), memory=memory, drift=drift)
    events = _section(build_report(tmp_path), "### Events and completion")
    row = next(line for line in events.splitlines() if "A2D (row)" in line)
    assert "| 0 + 2 | 1 + 0 |" in row  # token_map: a restamp; recommended: two evictions
    assert "after episode 5 (table token_map, benign); after episode 5 (table recommended" in events
    assert "counted each on its own" in events


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
    assert (lazy["Alert"], stamp["Alert"]) == ("7/10", "6/9")
    # 12 attempts against the lazy run's 14 (two misses), at equal tokens per attempt
    assert (lazy["Δ tok. vs lazy (%)"], stamp["Δ tok. vs lazy (%)"]) == ("–", "-14.3")
    assert stamp["Evict"] == "1 + 1"


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


def test_table4_has_the_papers_columns_funding_after_the_last_drift(report):
    table4 = _section(report, "### Table 4 — First-try by class on `payments-drifted`")
    header = _row(table4, "Planner")
    assert header[1:3] == ["governed (add-a-field) A1", "governed (add-a-field) A2D"]
    assert "funding after ep 8 (cond.-rewrite) A2D" in header
    row = dict(zip(header, _row(table4, "simulated:compliant †"), strict=True))
    assert row["funding after ep 8 (cond.-rewrite) A2D"] == "100.0"  # 9 and 11; 2 and 7 precede
    assert row["governed (add-a-field) A1"] == "60.0"  # every governed episode, 6 and 8 missed
    assert "counts only its episodes after episode 8" in table4


def test_table4_omits_a_no_constraint_class_that_always_reads_100(tmp_path):
    stream = ("governed", "funding", "no_constraint", "governed", "no_constraint", "governed")
    for arm in ("naive", "row"):
        B.write_run(tmp_path, B.episodes(stream=stream), arm=arm, drift=(), stale_slots=())
    table4 = _section(build_report(tmp_path), "### Table 4")
    assert not any(h.startswith("no_constraint") for h in _row(table4, "Planner"))
    assert "The no-constraint class reads 100.0 in all 2 cells, so it is omitted." in table4


def _reached():
    """A row run whose governed and funding fixes a drift reached, and whose control none did."""
    return [
        {"episode": 3, "event": "inject", "entry": "promo"},
        {"episode": 4, "event": "inject", "entry": "ctl"},
        {"episode": 7, "event": "inject", "entry": "fund"},
        {"episode": 6, "event": "evict", "entry": "promo", "stale": True},
        {"episode": 9, "event": "restamp", "entry": "fund"},
    ]


def test_table7_has_the_papers_columns_reached_classes_and_funding_pre_post(tmp_path):
    B.write_run(tmp_path, B.episodes(misses=(2, 6, 9)), arm="row", memory=_reached())
    table7 = _section(build_report(tmp_path), "### Table 7 — First-try by hint shape")
    header = _row(table7, "Planner")
    assert header[1:] == [
        "add-a-field: governed",
        "cond.-rewrite: funding pre",
        "cond.-rewrite: funding post",
    ]
    assert _row(table7, "simulated:compliant †")[1:] == ["80.0", "50.0", "50.0"]


def test_the_wire_table_labels_the_papers_row_the_full_and_the_conditional_contract(tmp_path):
    for level, conditional in ((1, False), (6, False), (6, True)):
        B.write_run(
            tmp_path,
            B.episodes(),
            scenario=f"s{level}{'c' if conditional else ''}",
            level=level,
            conditional=conditional,
            wire=(800, 120, 100, 20),
            paper_bytes=(90, 80),
        )
    wire = _section(build_report(tmp_path), "### §3.7 — What the contract costs on the wire")
    first = [line.split("|")[1].strip() for line in wire.splitlines() if line.startswith("| L")]
    assert first == [
        "L1 · the paper's L1 fields only (table_versions, cache_hint, table)",
        "L1 · full contract: every contract member",
        "L6 · full contract: every contract member",
        "L6 · conditional contract (Contract-Since, ext): every contract member",
    ]
    paper = dict(zip(_row(wire, "What is counted"), _row(wire, first[0]), strict=True))
    assert (paper["Mean contract (B)"], paper["Envelope mean (B)"], paper["Max contract (B)"]) == (
        "90",
        "80",
        "90",
    )
    assert "Paper §3.7 (quoted" in wire and "| 15.1 |" in wire


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
        "Unfaithful",
        "Planner err.",
        "Retries",
        "Prec.",
        "Recall",
        "Evict c/w",
        "Restamps",
        "Completed",
        "Saving (%)",
        "Contract tok. hidden",
    ]
    assert len([line for line in text.splitlines() if line.startswith("| payments-drifted")]) == 8
    assert "| A0 | 2 | – | 0 | 0 |" in text  # compliance undefined at A0


# --- figures -------------------------------------------------------------------------------------


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


def _drawn(full, filename):
    """The named figure drawn onto a fresh matplotlib Figure (no file), and its spec."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from invalidation_contracts.bench.figures import plan_figures

    [spec] = [s for s in plan_figures(aggregate(read_runs(full))) if s.filename == filename]
    fig = Figure()
    FigureCanvasAgg(fig)
    spec.draw(fig)
    return spec, fig.axes[0]


def test_figure3_draws_a0_as_the_zero_floor(full):
    spec, ax = _drawn(full, "fig3-compliance-payments-drifted.png")
    assert [t.get_text() for t in ax.get_xticklabels()][0] == "A0"
    assert "A0, which keeps no memory, shows the zero floor" in spec.caption


def test_figure4_names_each_streams_own_last_drift_event(full):
    drifted, _ = _drawn(full, "fig4-post-drift-funding-payments-drifted.png")
    assert "after episode 8 (the benign event on table funding_policy)" in drifted.caption
    assert "benign bump" not in drifted.caption


def test_figure5_keeps_coinciding_series_visible_and_says_they_coincide(tmp_path):
    for planner in ("simulated:exact", "simulated:paraphrase"):
        for n in (1, 2):
            _ladder(
                tmp_path, planner, True, scenario=f"payments-rotations-{n}", arms=("naive", "row")
            )
    spec, ax = _drawn(tmp_path, "fig5-rotations-payments.png")
    lines = [line for line in ax.get_lines() if len(line.get_xdata())]
    assert {tuple(line.get_xdata()) for line in lines} == {(1, 2)}  # each point at its own x
    assert len({line.get_markersize() for line in lines}) == 4  # nested: each ring shows
    assert len({line.get_marker() for line in lines}) == 2  # one marker per planner
    assert "simulated:exact † A2D and simulated:paraphrase † A2D coincide" in spec.caption
    assert "simulated:exact † A1 and simulated:paraphrase † A1 coincide" in spec.caption


def test_figure5_says_when_a1_and_a2d_coincide(tmp_path):
    for n in (1, 2):
        for arm in ("naive", "row"):
            B.write_run(
                tmp_path, B.episodes(misses=(6,)), scenario=f"payments-rotations-{n}", arm=arm
            )
    spec, _ = _drawn(tmp_path, "fig5-rotations-payments.png")
    assert "simulated:compliant † A1 and simulated:compliant † A2D coincide" in spec.caption


def test_line_figures_draw_each_point_at_its_own_x(full):
    for filename in ("fig5-rotations-payments.png", "fig6-targeted-class.png"):
        _, ax = _drawn(full, filename)
        ticks = {float(x) for x in ax.get_xticks()}
        for line in ax.get_lines():
            assert {float(x) for x in line.get_xdata()} <= ticks, filename


def test_no_figure_bakes_its_title_into_the_image(full, report):
    from invalidation_contracts.bench.figures import plan_figures

    for spec in plan_figures(aggregate(read_runs(full))):
        _, ax = _drawn(full, spec.filename)
        assert ax.get_title() == "" and not ax.figure.texts, spec.filename
        assert f"**{spec.title}.** {spec.caption}" in report  # the caption carries it


def test_figure3_names_each_streams_own_compliance_class(full):
    import dataclasses

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from invalidation_contracts.bench.figures import plan_figures

    # recipes-drifted's class is celiac (scenarios/recipes-drifted.toml); the builder writes none.
    cells = [
        dataclasses.replace(c, compliance_class="celiac") if c.scenario == "recipes-drifted" else c
        for c in aggregate(read_runs(full))
    ]
    labels = {}
    for spec in plan_figures(cells):
        if spec.filename.startswith("fig3-"):
            fig = Figure()
            FigureCanvasAgg(fig)
            spec.draw(fig)
            labels[spec.filename] = (fig.axes[0].get_ylabel(), spec.title, spec.caption)
    ylabel, title, caption = labels["fig3-compliance-recipes-drifted.png"]
    assert ylabel == "Celiac first-try (%)" and title.startswith("Figure 3 — Celiac first-try")
    assert "on the celiac class" in caption
    assert labels["fig3-compliance-payments-drifted.png"][0] == "Governed first-try (%)"


def test_figure5_s_legend_shows_each_arm_s_marker_fill(full):
    _, ax = _drawn(full, "fig5-rotations-payments.png")
    keys = {
        t.get_text(): h
        for h, t in zip(ax.get_legend().legend_handles, ax.get_legend().get_texts(), strict=True)
    }
    assert keys["A1"].get_markerfacecolor() == "white" and keys["A1"].get_linestyle() == "--"
    assert keys["A2D"].get_markerfacecolor() != "white" and keys["A2D"].get_linestyle() == "-"


def test_figures_are_written_in_each_asked_format_beside_the_png(full):
    paths = write_figures(full, ("png", "svg", "pdf"))
    fig6 = {p.suffix: p.read_bytes() for p in paths if p.stem == "fig6-targeted-class"}
    assert sorted(fig6) == [".pdf", ".png", ".svg"]
    assert fig6[".png"].startswith(b"\x89PNG") and fig6[".pdf"].startswith(b"%PDF")
    assert b"<svg" in fig6[".svg"][:2000]


def test_a_rebuild_writes_the_same_vector_bytes(full):
    first = {p: p.read_bytes() for p in write_figures(full, ("svg", "pdf"))}
    again = {p: p.read_bytes() for p in write_figures(full, ("svg", "pdf"))}
    assert first == again


def test_an_unknown_figure_format_is_refused(full):
    with pytest.raises(ValueError, match="figure formats are png, svg, pdf"):
        write_figures(full, ("png", "gif"))


def test_figure6_says_which_series_coincide_on_which_stream(full):
    spec, _ = _drawn(full, "fig6-targeted-class.png")
    both = "claude-haiku-4-5 on `payments-drifted` and simulated:compliant † on `payments-drifted`"
    assert f"{both} coincide" in spec.caption


def test_table7_leaves_out_a_stream_without_a_breaking_event(tmp_path):
    touch = ({"after_episode": 8, "kind": "touch", "table": "funding_policy", "rules": None},)
    B.write_run(tmp_path, B.episodes(), arm="row", memory=_reached(), drift=touch, stale_slots=())
    assert "### Table 7 — First-try by hint shape\n\n_Skipped:" in build_report(tmp_path)


def _visible_colours(ax) -> set[str]:
    """The colours of what is drawn with a visible extent: lines with points, bars with height."""
    from matplotlib.colors import to_hex

    colours = {to_hex(line.get_color()) for line in ax.get_lines() if len(line.get_xdata())}
    colours |= {to_hex(bar.get_facecolor()) for bar in ax.patches if bar.get_height() > 0}
    return colours


def test_every_legend_entry_of_every_figure_has_a_visible_artist(full):
    from matplotlib.colors import to_hex

    from invalidation_contracts.bench.figures import STYLE_KEY, plan_figures

    for spec in plan_figures(aggregate(read_runs(full))):
        _, ax = _drawn(full, spec.filename)
        legend = ax.get_legend()
        drawn = _visible_colours(ax)
        styles = {line.get_linestyle() for line in ax.get_lines() if len(line.get_xdata())}
        for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True):
            colour = to_hex(
                handle.get_facecolor() if hasattr(handle, "get_height") else handle.get_color()
            )
            if colour == STYLE_KEY:
                assert handle.get_linestyle() in styles, (spec.filename, text.get_text())
            else:
                assert colour in drawn, (spec.filename, text.get_text())


def test_line_figures_draw_a_zero_series_above_the_axis(full):
    for filename in ("fig5-rotations-payments.png", "fig6-targeted-class.png"):
        _, ax = _drawn(full, filename)
        floor = ax.get_ylim()[0]
        for line in ax.get_lines():
            assert all(y > floor for y in line.get_ydata()), filename
            assert not line.get_clip_on(), filename


def test_a_zero_bar_is_a_visible_stub_in_its_series_colour(full):
    _, ax = _drawn(full, "fig3-compliance-payments-drifted.png")
    zero_labels = [t for t in ax.texts if t.get_text() == "0"]
    assert zero_labels
    assert all(bar.get_height() > 0 for bar in ax.patches)
