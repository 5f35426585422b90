"""``serve --workers N``'s supervisor replaces a dead worker at its next check
(``server/http/supervisor.py``), even one that died while the supervisor waited for its answer."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
from tests.service.probes import ready_reports
from tests.support.processes import serving

from invalidation_contracts.server.http.serve import WORKER_START_TIMEOUT_S

WORKERS = 2


@pytest.mark.workers
def test_a_worker_that_dies_during_its_health_check_is_replaced_without_waiting_out_the_check(
    tmp_path: Path,
) -> None:
    args = ["--domain", "acme_billing", "--db", str(tmp_path / "registry.sqlite")]
    with serving([*args, "--workers", str(WORKERS)], tmp_path / "logs") as url:
        before = ready_reports(url, WORKERS, 0)
        victim = min(before)
        # Stopped, it cannot answer: the supervisor's next check (every 0.5 s) waits on it.
        os.kill(victim, signal.SIGSTOP)
        time.sleep(1.5)
        os.kill(victim, signal.SIGKILL)
        died = time.monotonic()
        after = ready_reports(url, WORKERS, 0)
        replaced_s = time.monotonic() - died
    assert victim not in after and len(after) == WORKERS
    # Before the fix the supervisor waited the whole check timeout (60 s) on the dead pipe.
    assert replaced_s < WORKER_START_TIMEOUT_S / 2, f"replaced after {replaced_s:.1f} s"
