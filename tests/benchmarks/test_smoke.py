"""Each benchmark runs end to end at its quick size and reports what it measured (no timing
asserts)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from benchmarks import __main__ as cli
from benchmarks import (
    client_cost,
    confirmation_cost,
    dependencies,
    harness_throughput,
    learned_cost,
    mcp_conditional,
    observe_overhead,
    provider_load,
    reload_cost,
    wire_cost,
)

STUDIES = [
    confirmation_cost,
    wire_cost,
    provider_load,
    reload_cost,
    client_cost,
    harness_throughput,
    observe_overhead,
    dependencies,
    mcp_conditional,
    learned_cost,
]


@pytest.mark.parametrize("study", STUDIES, ids=lambda m: m.NAME)
def test_study_runs_at_quick_size_and_reports_a_table(study, tmp_path: Path) -> None:
    result = study.run(quick=True, out_dir=tmp_path)
    assert result.name == study.NAME
    assert "|---" in result.markdown
    for fig in result.figures:
        assert fig.is_file() and fig.stat().st_size > 0
        assert f"]({fig.relative_to(tmp_path).as_posix()})" in result.markdown


def test_the_command_writes_results_with_machine_and_command(tmp_path: Path) -> None:
    # two of the cheapest studies: what is checked is the command's record, not a study
    assert cli.main(["--quick", "--only", "reload,dependencies", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert "`python -m benchmarks --quick --only reload,dependencies --out" in text
    assert "`nproc` =" in text and "Python " in text
    data = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert set(data["studies"]) == {"reload", "dependencies"}


@pytest.mark.parametrize(
    ("uncommitted", "said"),
    [(True, " (plus uncommitted work in the tree)"), (False, " (a clean tree)"), (None, "")],
)
def test_the_tree_state_is_what_git_said_not_a_fixed_suffix(uncommitted, said) -> None:
    assert cli.tree_state({"uncommitted": uncommitted}) == said


def test_a_run_records_whether_the_tree_was_clean() -> None:
    import subprocess

    from benchmarks.common import REPO_ROOT, machine

    status = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=no"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert machine()["uncommitted"] is bool(status.stdout.strip())


def test_the_command_refuses_an_unknown_study(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.parse(["--only", "wire,nonsense"])
    assert exc.value.code == 2
    assert "nonsense" in capsys.readouterr().err


def test_a_partial_run_keeps_the_other_studies_sections_with_their_commands(tmp_path: Path) -> None:
    assert cli.main(["--quick", "--only", "reload", "--out", str(tmp_path)]) == 0
    assert cli.main(["--quick", "--only", "dependencies", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "RESULTS.md").read_text(encoding="utf-8")
    assert "## 1. Reload cost" in text and "## 2. Membership dependencies" in text
    assert f"_Measured by `python -m benchmarks --quick --only reload --out {tmp_path}`" in text
    assert (
        f"_Measured by `python -m benchmarks --quick --only dependencies --out {tmp_path}`" in text
    )
    data = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    assert set(data["studies"]) == {"reload", "dependencies"}
    assert data["studies"]["reload"]["run"]["command"].endswith(f"--only reload --out {tmp_path}")


def test_the_distinct_mix_outgrows_the_render_cache() -> None:
    from invalidation_contracts.server.render_cache import DEFAULT_CAPACITY

    bodies = provider_load.request_mixes()["distinct"]
    assert len(set(bodies)) == len(bodies) == provider_load.DISTINCT >= 4 * DEFAULT_CAPACITY


@pytest.mark.postgres
def test_the_fleet_replica_study_runs_at_quick_size(tmp_path: Path) -> None:
    from benchmarks import pg_replica

    result = pg_replica.run(quick=True, out_dir=tmp_path)
    stores = result.data["lookups"]["stores"]
    assert set(stores) == {"in-memory", "postgres, replica (LISTEN)", "postgres, round trip"}
    assert result.data["delivery"]["writes"] == 20
    assert "|---" in result.markdown
