"""The shipped Prometheus alert rules (``observe/alerts.yml``) under Debian's ``promtool``: the file
is valid, and its unit tests (``alerts_test.yml``) fire every alert on the series that should
fire it and keep it quiet otherwise. The rules also load into the real Prometheus that scrapes
``serve --workers 4`` (``test_prometheus_server.py``)."""

from __future__ import annotations

import shutil
import subprocess
from importlib.resources import files
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.prometheus

RULES = Path(str(files("invalidation_contracts.observe") / "alerts.yml"))
UNIT_TESTS = Path(__file__).with_name("alerts_test.yml")


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool is not installed (Debian's prometheus package)")
    return found


def alert_names() -> set[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return {rule["alert"] for group in groups for rule in group["rules"] if "alert" in rule}


def test_the_shipped_alert_rules_pass_promtool_check():
    done = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(alert_names())} rules found" in done.stdout


def test_every_shipped_alert_fires_in_the_promtool_unit_tests(tmp_path):
    tests = yaml.safe_load(UNIT_TESTS.read_text())
    fired = {
        case["alertname"]
        for test in tests["tests"]
        for case in test["alert_rule_test"]
        if case.get("exp_alerts")
    }
    assert fired == alert_names()  # each alert has a test in which it fires
    tests["rule_files"] = [str(RULES)]
    runnable = tmp_path / "alerts_test.yml"
    runnable.write_text(yaml.safe_dump(tests, sort_keys=False))

    done = subprocess.run(
        [promtool(), "test", "rules", str(runnable)], capture_output=True, text=True, timeout=120
    )

    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout
