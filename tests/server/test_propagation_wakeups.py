"""What a captured write costs the workers between its COMMIT and its being served (issue 41):
a consumer round that serves nothing new wakes nobody, and the capture leader's heartbeat does
not consume again what the round its look woke has consumed."""

from __future__ import annotations

from collections.abc import Iterator

import psycopg
import pytest

from invalidation_contracts.server import Domain, SQLTable
from invalidation_contracts.server.capture.source import ChangeSource
from invalidation_contracts.server.capture.survey import Recheck
from invalidation_contracts.server.sql.lead import CaptureLead
from invalidation_contracts.server.store.postgres import PostgresRegistryStore, channel
from invalidation_contracts.server.worker.follower import Follower
from invalidation_contracts.server.worker.runtime import Runtime, ingest, open_runtime

pytestmark = pytest.mark.postgres


def plans() -> Domain:
    return Domain("plans", {"plans": SQLTable("plans")}, [], [])


@pytest.fixture
def runtime(postgres_url: str) -> Iterator[Runtime]:
    with psycopg.connect(postgres_url, autocommit=True) as db:
        db.execute("CREATE TABLE plans (id TEXT PRIMARY KEY, n INTEGER)")
        db.execute("INSERT INTO plans VALUES ('basic', 0)")
    opened = open_runtime(plans(), store=postgres_url, database=postgres_url)
    yield opened
    opened.close()


def write(url: str, n: int) -> None:
    with psycopg.connect(url, autocommit=True) as db:
        db.execute("UPDATE plans SET n = %s WHERE id = 'basic'", (n,))


def heard(listener: psycopg.Connection[tuple[object, ...]]) -> list[str]:
    return [note.payload for note in listener.notifies(timeout=0.3)]


def counted_ingests(follower: Follower, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the sources ``follower`` consumes from now on (it consumes nothing)."""
    consumed: list[str] = []

    def counted(source: ChangeSource, head: int | None = None, recheck: Recheck | None = None):
        consumed.append(source.name)

    monkeypatch.setattr(follower, "_ingest", counted)
    return consumed


def test_a_consumer_round_that_moves_only_the_capture_position_wakes_no_worker(
    runtime: Runtime, postgres_url: str
) -> None:
    store = runtime.store
    assert isinstance(store, PostgresRegistryStore)
    source = runtime.sources[0]
    with psycopg.connect(postgres_url, autocommit=True) as listener:
        listener.execute(f'LISTEN "{channel(store.schema, "registry")}"')
        listener.execute("SELECT pg_current_xact_id()")  # the cluster's xmin moves on
        ingest(runtime.registry, source, head=-1)  # reads, moves the position, serves nothing
        assert heard(listener) == []
        write(postgres_url, 1)
        assert ingest(runtime.registry, source) is True
        assert heard(listener) == [str(runtime.registry.state.seq)]


def test_the_capture_leaders_heartbeat_does_not_consume_again_what_its_look_woke(
    runtime: Runtime, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    follower = runtime.follower
    assert follower is not None
    source = runtime.sources[0]
    follower.wakeups.open()
    lead = (follower.wakeups.listeners or {})[source.name]
    assert isinstance(lead, CaptureLead) and lead.try_lead()
    write(postgres_url, 2)
    assert lead.changed()  # the look that wakes the leader's round
    follower.check(everything=False, notified=frozenset({source.name}))
    assert runtime.registry.state.tables["plans"].rows["basic"]["n"] == 2
    consumed = counted_ingests(follower, monkeypatch)
    follower.check(everything=True)  # the heartbeat: the capture's head is where it looked
    assert consumed == []
    write(postgres_url, 3)
    follower.check(everything=True)  # a record committed since the look is consumed
    assert consumed == [source.name]


def test_the_quarantine_release_runs_after_the_registry_commit(
    runtime: Runtime, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = runtime.sources[0]
    served_at_release: list[int] = []

    def release(pairs: list[tuple[str, str]]) -> None:
        served_at_release.append(runtime.registry.state.tables["plans"].rows["basic"]["n"])

    monkeypatch.setattr(source, "release", release)
    write(postgres_url, 4)
    assert ingest(runtime.registry, source) is True
    assert served_at_release == [4]  # committed and served before the source was written to


def test_a_heartbeat_takes_no_registry_lock_for_a_capture_the_leader_consumed(
    runtime: Runtime, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    follower = runtime.follower
    assert follower is not None
    source = runtime.sources[0]
    follower.check(everything=True)  # the head this worker saw
    write(postgres_url, 5)
    assert ingest(runtime.registry, source) is True  # the leader's round: consumed, trimmed
    consumed = counted_ingests(follower, monkeypatch)
    follower.check(everything=True)  # the head moved, but nothing waits
    assert consumed == []
    write(postgres_url, 6)
    follower.check(everything=True)  # a record waits: consumed (a stuck leader's included)
    assert consumed == [source.name]


def test_a_failed_transaction_still_announces_what_its_catch_up_adopted(
    runtime: Runtime, postgres_url: str
) -> None:
    other = open_runtime(plans(), store=postgres_url, database=postgres_url)
    try:
        write(postgres_url, 7)
        assert ingest(other.registry, other.sources[0]) is True  # another worker's commit
    finally:
        other.close()
    told: list[int] = []
    runtime.registry.subscribe(lambda before, after: told.append(after.seq))
    with pytest.raises(RuntimeError), runtime.registry.transaction():
        raise RuntimeError("the consuming round fails after the catch-up")
    assert runtime.registry.state.tables["plans"].rows["basic"]["n"] == 7  # served
    assert told == [runtime.registry.state.seq]  # and its watchers told
