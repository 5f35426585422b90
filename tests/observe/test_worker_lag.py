"""Worker lag is commit-to-serve seconds (issue 42, item 1): the shared history keeps each change
set's commit time (``at`` in its log record; records written before it was kept still load), and a
worker observes now minus that time into ``invalidation_contracts.worker.lag`` when it starts
serving the change set."""

from __future__ import annotations

import json
import sqlite3
import time

from tests.observe.conftest import Readings
from tests.service.conftest import make_domain

from invalidation_contracts.observe import ProviderTelemetry
from invalidation_contracts.server.origin import change_origin
from invalidation_contracts.server.worker.runtime import open_runtime

LAG = "invalidation_contracts.worker.lag"


def _histogram(readings: Readings) -> tuple[int, float]:
    points = readings.points(LAG)
    return sum(p.count for p in points), sum(p.sum for p in points)


def test_a_worker_observes_the_seconds_from_commit_until_it_serves_a_change_set(tmp_path):
    store = str(tmp_path / "history.sqlite")
    writer = open_runtime(make_domain(), store=store)
    follower = open_runtime(make_domain(), store=store)
    readings = Readings()
    telemetry = ProviderTelemetry(follower, meter_provider=readings.meter_provider)
    unsubscribe = follower.registry.subscribe(telemetry.moved)
    try:
        with change_origin("admin"):
            writer.registry.patch("plans", {"gold": {"funding": "card"}})
            writer.registry.patch("plans", {"silver": {"funding": "card"}})
        time.sleep(0.3)  # the follower serves them 0.3 s after their commit
        follower.registry.sync()
        count, total = _histogram(readings)
    finally:
        unsubscribe()
        follower.close()
        writer.close()
        readings.meter_provider.shutdown()

    assert count == 2  # one observation per change set served
    assert 0.6 <= total < 0.6 + 10  # each waited at least 0.3 s


def test_the_commit_time_is_kept_in_the_history_and_old_records_without_it_still_load(tmp_path):
    path = tmp_path / "history.sqlite"
    writer = open_runtime(make_domain(), store=str(path))
    try:
        before = time.time()
        with change_origin("admin"):
            writer.registry.patch("plans", {"gold": {"funding": "card"}})
            writer.registry.patch("plans", {"silver": {"funding": "card"}})
    finally:
        writer.close()
    with sqlite3.connect(path) as db:
        records = dict(db.execute("SELECT seq, record FROM ic_log"))
        assert all(before <= json.loads(text)["at"] <= time.time() for text in records.values())
        old = json.loads(records[1])
        del old["at"]  # a record written before the commit time was kept
        db.execute("UPDATE ic_log SET record = ? WHERE seq = 1", (json.dumps(old),))
    reopened = open_runtime(make_domain(), store=str(path))
    try:
        state = reopened.registry.state
        kept = {r.seq: r.committed_at for r in reopened.registry.log.records()}
    finally:
        reopened.close()
    assert state.seq == 2  # the same history, not a new epoch
    assert kept[1] is None and kept[2] is not None
