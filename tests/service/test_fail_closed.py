"""A worker that cannot vouch for its state says so at once: a follower that never started is not
ready past the lag bound, the heartbeat deadline runs from the last confirmation (not from each
wake-up), and a client ahead of a worker that is in an outage gets 503 now, not after it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from fastapi.testclient import TestClient
from tests.service.conftest import TOKEN, make_domain

from invalidation_contracts.server import Registry
from invalidation_contracts.server.http.app import create_app
from invalidation_contracts.server.worker.follower import Follower
from invalidation_contracts.server.worker.runtime import open_runtime


def test_a_follower_that_never_started_is_not_ready_past_the_lag_bound(tmp_path: Path) -> None:
    runtime = open_runtime(
        make_domain(), store=str(tmp_path / "r.sqlite"), max_lag_s=0.3, heartbeat_s=0.1
    )
    try:  # no lifespan ran: nothing follows the shared history
        deadline = time.monotonic() + 0.3
        while time.monotonic() < deadline + 0.2:
            time.sleep(0.05)
        health = runtime.health()
        assert not health.ready and health.state == "idle"
        assert health.reason is not None and "never started" in health.reason
    finally:
        runtime.close()


def test_a_started_follower_is_ready() -> None:
    follower = Follower(Registry({"t": {}}), max_lag_s=0.3, heartbeat_s=0.1)
    follower.start()
    try:
        time.sleep(0.5)
        assert follower.available
    finally:
        follower.stop()


def test_the_heartbeat_deadline_runs_from_the_last_confirmation() -> None:
    """A wait that starts late in the heartbeat (rounds a NOTIFY woke confirm nothing) ends at
    the heartbeat after the last confirmation, so the next round confirms within the bound."""
    follower = Follower(Registry({"t": {}}), heartbeat_s=1.0, max_lag_s=2.0)
    last_ok = time.monotonic() - 0.9
    started = time.monotonic()
    everything, _ = follower.wakeups.wait(last_ok)
    assert everything, "a heartbeat round: it reads every database and confirms"
    assert time.monotonic() - started < 0.5, "not a whole heartbeat after this wait began"


def test_a_client_ahead_of_a_worker_in_an_outage_gets_503_at_once(tmp_path: Path) -> None:
    app = create_app(
        make_domain(),
        store=str(tmp_path / "r.sqlite"),
        admin_token=TOKEN,
        max_lag_s=0.5,
        heartbeat_s=0.2,
    )
    with TestClient(app, raise_server_exceptions=False) as client:
        registry: Registry = app.state.registry
        stuck, release = threading.Event(), threading.Event()

        def hold() -> None:  # a change stuck on a silent link: it holds the writers' lock
            with registry.transaction():
                stuck.set()
                release.wait(30)

        holder = threading.Thread(target=hold, daemon=True)
        holder.start()
        try:
            assert stuck.wait(5)
            deadline = time.monotonic() + 10
            while client.get("/contract/ready").status_code == 200:
                assert time.monotonic() < deadline, "the stuck follower never lost readiness"
                time.sleep(0.05)
            started = time.monotonic()
            ahead = client.get("/contract/versions", headers={"Contract-Since": "999"})
            took = time.monotonic() - started
            assert ahead.status_code == 503
            assert ahead.headers["content-type"].startswith("application/problem+json")
            assert took < 2.0, f"waited {took:.1f} s for an outage to end"
        finally:
            release.set()
            holder.join(10)


def test_a_worker_whose_follower_never_started_still_takes_admin_writes(tmp_path: Path) -> None:
    """A write catches up with the shared history under the write lock before it applies, so an
    admin-only app in a process that never runs its lifespan writes soundly."""
    store = str(tmp_path / "r.sqlite")
    app = create_app(make_domain(), store=store, admin_token=TOKEN, max_lag_s=0.3, heartbeat_s=0.1)
    client = TestClient(app, raise_server_exceptions=False)  # no lifespan
    time.sleep(0.5)
    assert client.get("/contract/ready").status_code == 503
    answer = client.post(
        "/admin/rules",
        headers={"Authorization": f"Bearer {TOKEN}"},
        json={"rules": [{"from_table": "plans", "to_table": "funding_types", "relation": "r"}]},
    )
    assert answer.status_code == 200, answer.text
