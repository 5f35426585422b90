"""The production and keep-alive studies run end to end at their quick size (no timing asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest
from benchmarks import production, retrofit_overhead, serve_latency


@pytest.mark.workers
def test_the_keep_alive_study_compares_serve_with_bare_uvicorn(tmp_path: Path) -> None:
    result = serve_latency.run(quick=True, out_dir=tmp_path)
    assert "|---" in result.markdown
    assert set(result.data["ratios"]) == {"serve / uvicorn", "serve ×2 / uvicorn ×2"}
    assert len(result.checks) == 2


@pytest.mark.workers
@pytest.mark.postgres
def test_the_production_study_measures_all_four_things(tmp_path: Path) -> None:
    result = production.run(quick=True, out_dir=tmp_path)
    assert set(result.data) == {"propagation", "workers", "policy", "capture"}
    assert set(result.data["capture"]) == {"postgres", "sqlite"}
    assert result.data["propagation"]["postgres"]["trials"] == production.QUICK.propagation_trials
    assert [c.target.split(" ")[0] for c in result.checks] == ["Propagation", "2"]


@pytest.mark.workers
@pytest.mark.mcp
def test_the_mcp_keep_alive_study_compares_serve_mcp_with_serve_and_a_bare_sdk_server(
    tmp_path: Path,
) -> None:
    from benchmarks import mcp_keepalive

    result = mcp_keepalive.run(quick=True, out_dir=tmp_path)
    assert "|---" in result.markdown and len(result.checks) == 2  # against serve, and the SDK
    assert set(result.data["servers"]) == set(mcp_keepalive.REQUESTS)
    assert mcp_keepalive.FLOOR in result.data["ratios"]


@pytest.mark.workers
def test_the_retrofit_study_compares_the_same_app_with_and_without_the_contract(
    tmp_path: Path,
) -> None:
    result = retrofit_overhead.run(quick=True, out_dir=tmp_path)
    assert "|---" in result.markdown
    requests = set(retrofit_overhead.REQUESTS)
    assert {"POST", "GET"} < requests  # the two, and a large answer
    assert set(result.data["ratios"]) == set(result.data["extra_us"]) == requests
    assert set(result.data["noise_ratios"]) == requests
    assert len(result.data["cpu_s_per_request"]) == 3 * len(requests)  # with, without, again
    assert bool(result.data["profile"]) == any(not check.met for check in result.checks)


@pytest.mark.mcp
@pytest.mark.study  # four server processes and a proxy: CI's study step
def test_the_proxy_study_times_a_call_through_mcp_proxy_straight_and_in_process(
    tmp_path: Path,
) -> None:
    from benchmarks import mcp_proxy

    result = mcp_proxy.run(quick=True, out_dir=tmp_path)
    assert "|---" in result.markdown and len(result.checks) == 1
    assert set(result.data["p50_ms"]) == {
        mcp_proxy.STRAIGHT,
        mcp_proxy.PROXIED,
        mcp_proxy.LIBRARY,
        mcp_proxy.RELAY,
    }
    assert result.data["cpu_ms_per_call"][mcp_proxy.PROXIED] > 0


@pytest.mark.mcp
@pytest.mark.study  # two harness runs over serve-mcp children: CI's study step
def test_the_proxy_stale_study_runs_the_harness_through_the_proxy_and_in_process(
    tmp_path: Path,
) -> None:
    from benchmarks import mcp_proxy_stale

    result = mcp_proxy_stale.run(quick=True, out_dir=tmp_path)
    cells = result.data["cells"]
    assert set(cells) == {mcp_proxy_stale.IN_PROCESS, mcp_proxy_stale.PROXIED}
    assert all(cell["runs"] == 1 and cell["episodes"] > 0 for cell in cells.values())
    assert [check.met for check in result.checks] == [True, True]
