"""The CLI says what it does: where it listens, what it skipped, in words that agree."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from invalidation_contracts.cli import main

RUN_ROW = ["run", "--scenario", "payments-control", "--planner", "simulated:exact"]
RUN_ROW += ["--arm", "row", "--seeds", "0", "--no-progress"]


def test_a_rerun_says_how_many_completed_runs_it_skipped(tmp_path, capsys):
    assert main([*RUN_ROW, "--out", str(tmp_path)]) == 0
    assert "skipped" not in capsys.readouterr().err
    assert main([*RUN_ROW, "--out", str(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert "skipped 1 completed run(s)" in err and "--fresh" in err


def test_scenarios_counts_drift_events_in_words_that_agree(capsys):
    assert main(["scenarios"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines
    for line in lines:
        count = int(line.split("episodes")[1].split()[0])
        word = "event" if count == 1 else "events"
        assert f"{count} drift {word} " in line


def test_run_help_names_the_default_scenario(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "default: payments-drifted" in " ".join(capsys.readouterr().out.split())


def test_serve_with_an_unknown_domain_says_only_that(capsys, monkeypatch):
    monkeypatch.delenv("INVALIDATION_CONTRACTS_ADMIN_TOKEN", raising=False)
    assert main(["serve", "--domain", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown domain 'nope'" in err


@pytest.mark.workers
def test_serve_prints_the_address_it_listens_on(tmp_path: Path):
    log = tmp_path / "serve.log"
    env = {**os.environ, "INVALIDATION_CONTRACTS_ADMIN_TOKEN": "t" * 24}
    command = [sys.executable, "-m", "invalidation_contracts.cli", "serve"]
    command += ["--domain", "acme_billing", "--port", "0"]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
    try:
        deadline = time.monotonic() + 60
        while "serving http://127.0.0.1:" not in log.read_text() and time.monotonic() < deadline:
            assert process.poll() is None, log.read_text()
            time.sleep(0.1)
        line = next(x for x in log.read_text().splitlines() if "serving http://" in x)
    finally:
        process.terminate()
        process.wait(20)
    port = int(line.split("serving http://127.0.0.1:")[1].split()[0])
    assert port > 0 and line.endswith("(1 worker)")
