"""The harness commands as a user runs them: ladder, run (in-process and against a URL), report, scenarios."""

import json
import socket
import threading
import time

import pytest
import uvicorn

from invalidation_contracts.cli import main
from invalidation_contracts.domains import get_domain
from invalidation_contracts.server.app import create_app


def test_ladder_prints_the_table_and_writes_report_and_figures(tmp_path, capsys):
    code = main(["ladder", "--seeds", "0", "--out", str(tmp_path), "--no-progress"])
    out = capsys.readouterr().out
    assert code == 0
    assert "A2D" in out and "simulated" in out
    assert (tmp_path / "report.md").exists()
    assert list((tmp_path / "figures").glob("*.png"))
    assert len(list((tmp_path / "runs").rglob("*.meta.json"))) == 4 * 6


def test_report_rebuilds_from_artifacts_alone(tmp_path, capsys):
    main(
        [
            "run",
            "--scenario",
            "payments-control",
            "--planner",
            "simulated:exact",
            "--arm",
            "row",
            "--seeds",
            "0",
            "--out",
            str(tmp_path),
            "--no-progress",
        ]
    )
    first = (tmp_path / "report.md").read_text()
    (tmp_path / "report.md").unlink()
    capsys.readouterr()
    assert main(["report", "--from", str(tmp_path), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (tmp_path / "report.md").read_text() == first
    assert summary["runs"] and summary["cells"]


def test_report_on_a_directory_without_runs_is_a_one_line_error(tmp_path, capsys):
    assert main(["report", "--from", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no completed runs" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["run", "--scenario", "no-such-stream"], "no scenario named"),
        (["run", "--arm", "row/sideways"], "unknown"),
        (["run", "--server-url", "http://127.0.0.1:9"], "admin-token"),
        (["ladder", "--seeds", "x"], None),
    ],
)
def test_bad_harness_arguments_fail_with_a_clear_message(
    argv, message, tmp_path, capsys, monkeypatch
):
    monkeypatch.delenv("INVALIDATION_CONTRACTS_ADMIN_TOKEN", raising=False)
    with pytest.raises(SystemExit) if message is None else _no_raise():
        code = main([*argv, "--out", str(tmp_path), "--no-progress"])
        assert code != 0
        assert message in capsys.readouterr().err


class _no_raise:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_scenarios_lists_the_shipped_streams(capsys):
    assert main(["scenarios"]) == 0
    out = capsys.readouterr().out
    for name in ("payments-drifted", "payments-control", "recipes-drifted", "rules-drifted"):
        assert name in out


def test_a_bad_manifest_is_refused_with_its_path_and_field(tmp_path, capsys):
    manifest = tmp_path / "bad.toml"
    manifest.write_text('name = "x"\ndomain = "acme_billing"\nschedule = []\n')
    assert main(["scenarios", str(manifest)]) == 2
    err = capsys.readouterr().err
    assert str(manifest) in err and "schedule" in err


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def live_server():
    token = "t0ken"
    app = create_app(get_domain("acme_billing"), level=6, admin_token=token)
    port = _free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}", token
    server.should_exit = True
    thread.join(5)


def test_a_grid_runs_against_a_real_server_on_loopback(live_server, tmp_path, capsys, monkeypatch):
    url, token = live_server
    monkeypatch.setenv("INVALIDATION_CONTRACTS_ADMIN_TOKEN", token)
    argv = [
        "run",
        "--scenario",
        "payments-drifted",
        "--planner",
        "simulated:exact",
        "--arm",
        "row",
        "--arm",
        "table",
        "--seeds",
        "0",
        "--server-url",
        url,
        "--out",
        str(tmp_path),
        "--json",
    ]
    assert main(argv) == 0
    cells = {c["arm"]: c for c in json.loads(capsys.readouterr().out)["cells"]}
    assert set(cells) == {"row", "table"}


def test_an_unknown_shipped_grid_is_refused_with_the_known_names(tmp_path, capsys):
    assert main(["run", "--grid", "nope", "--out", str(tmp_path)]) == 2
    assert "shipped: paper" in capsys.readouterr().err


def test_the_shipped_paper_grid_covers_every_stream_and_profile():
    from invalidation_contracts.bench.grid import load_grid
    from invalidation_contracts.bench.scenario import shipped_scenarios

    grid = load_grid("paper")
    assert sorted(s.name for s in grid.scenarios) == shipped_scenarios()
    assert len(grid.planners) == 4 and list(grid.seeds) == [0, 1, 2]


def test_a_usage_error_is_one_line_with_exit_status_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["ladder", "--seeds", "x"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "seeds must be comma-separated integers" in err
