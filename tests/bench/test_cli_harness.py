"""The harness commands as a user runs them: ladder, run (in-process, at a URL), report."""

import asyncio
import json
import socket
import threading
import time

import pytest
import uvicorn

from invalidation_contracts.cli import main
from invalidation_contracts.domains import get_domain
from invalidation_contracts.server.http.app import create_app


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


def test_report_writes_the_figures_in_each_format_asked_beside_the_png(tmp_path, capsys):
    argv = ["--scenario", "payments-drifted", "--planner", "simulated:exact", "--arm", "row"]
    main(["run", *argv, "--seeds", "0", "--out", str(tmp_path), "--no-progress"])

    assert main(["report", "--from", str(tmp_path), "--format", "svg,pdf"]) == 0

    written = {p.name for p in (tmp_path / "figures").iterdir()}
    assert {"fig6-targeted-class.png", "fig6-targeted-class.svg"} <= written
    assert "fig6-targeted-class.pdf" in written


def test_report_refuses_an_unknown_figure_format_in_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit:
        main(["report", "--from", str(tmp_path), "--format", "gif"])

    assert exit.value.code == 2
    assert "figure formats are png, svg, pdf" in capsys.readouterr().err


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


class _Serving:
    """The Acme API under uvicorn on 127.0.0.1 in a thread; ``stop()`` shuts it down."""

    token = "t0ken"

    def __init__(self, app=None):
        app = app or create_app(get_domain("acme_billing"), level=6, admin_token=self.token)
        self.port = _free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)

    @property
    def url(self):
        return f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.server.should_exit = True
        if threading.current_thread() is not self.thread:
            self.thread.join(5)


@pytest.fixture
def live_server():
    serving = _Serving()
    yield serving.url, serving.token
    serving.stop()


def _dying_after(domain_requests):
    """An Acme server that shuts itself down once it has answered ``domain_requests`` requests."""
    app = create_app(get_domain("acme_billing"), level=6, admin_token=_Serving.token)
    seen = []

    async def counting(scope, receive, send):
        if scope["type"] == "http" and scope["path"].startswith("/v1/"):
            seen.append(scope["path"])
            if len(seen) == domain_requests:
                # Hold this answer until uvicorn has begun its shutdown (it polls should_exit
                # every 0.1 s), so the keep-alive connection closes after it and nothing more
                # is answered: the client's next request finds no server.
                serving.server.should_exit = True
                await asyncio.sleep(0.5)
        await app(scope, receive, send)

    serving = _Serving(counting)
    return serving


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


def test_the_shipped_grids_cover_every_stream_and_the_paper_grid_every_profile():
    from invalidation_contracts.bench.grid import load_grid
    from invalidation_contracts.bench.scenario import shipped_scenarios

    grid = load_grid("paper")
    tau2 = load_grid("tau2")
    paper_streams = [s for s in shipped_scenarios() if not s.startswith("tau2-")]
    assert sorted(s.name for s in grid.scenarios) == paper_streams
    assert sorted(s.name for s in tau2.scenarios) == sorted(
        set(shipped_scenarios()) - set(paper_streams)
    )
    assert len(grid.planners) == 4 and list(grid.seeds) == [0, 1, 2]


def test_a_usage_error_is_one_line_with_exit_status_2(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["ladder", "--seeds", "x"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert "seeds must be comma-separated integers" in err


def _run_against(url, out, seeds="0,1,2"):
    token_file = out.parent / f"{out.name}.token"
    token_file.write_text(_Serving.token)
    return main(
        [
            "run",
            "--scenario",
            "payments-control",
            "--planner",
            "simulated:exact",
            "--arm",
            "row",
            "--seeds",
            seeds,
            "--server-url",
            url,
            "--admin-token-file",
            str(token_file),
            "--out",
            str(out),
            "--no-progress",
        ]
    )


def test_a_server_that_dies_mid_run_ends_the_grid_with_one_line_and_a_rerun_resumes(
    tmp_path, capsys
):
    dying = _dying_after(60)  # one run of payments-control sends about 45 domain requests

    code = _run_against(dying.url, tmp_path)

    err = capsys.readouterr().err.splitlines()
    assert code == 1
    assert len([line for line in err if "stopped answering" in line]) == 1
    assert any("1 run(s) not started" in line for line in err), err
    metas = {p.name: json.loads(p.read_text()) for p in (tmp_path / "runs").rglob("*.meta.json")}
    assert metas["seed-0.meta.json"]["completed"] is True
    assert metas["seed-1.meta.json"]["completed"] is False
    assert "stopped answering" in metas["seed-1.meta.json"]["error"]

    fresh = _Serving()
    try:
        assert _run_against(fresh.url, tmp_path) == 0
    finally:
        fresh.stop()
    metas = [json.loads(p.read_text()) for p in (tmp_path / "runs").rglob("*.meta.json")]
    assert sorted(m["key"]["seed"] for m in metas if m["completed"]) == [0, 1, 2]
