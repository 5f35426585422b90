"""Client scores shared through the registry (issue 42, item 2): two workers of one registry score
one client whose requests alternate between them exactly as one worker scores it alone (a retry
stays a retry, a taught fix stays taught), and a key-minting flood cannot push a repeat client
out (``observe.shared``). SQLite here; PostgreSQL in ``test_shared_scores_postgres``."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from fastapi.testclient import TestClient
from tests.observe.conftest import ORDERS
from tests.observe.test_scoring_rules import ADMIN, BAD, GOOD, _key
from tests.service.conftest import TOKEN, make_domain

from invalidation_contracts.observe import instrument
from invalidation_contracts.observe.clients import ClientKey
from invalidation_contracts.observe.scoring import ClientFigures, ClientScores, Scores
from invalidation_contracts.observe.shared import SharedScores
from invalidation_contracts.server.http.app import create_app

KEY = ClientKey.header("X-Client", secret=b"k")
STALE_RUN = [
    ("post", ORDERS, {"plan": "basic"}),  # 422: taught the card
    ("post", ORDERS, GOOD),  # a retry, with the fix
    ("post", ORDERS, BAD),  # a new episode, refused
    ("post", ORDERS, BAD),  # a retry, refused again
    ("post", ORDERS, GOOD),  # a retry that passes
    ("admin", "/admin/reload-table", {"table": "plans", "rows": {"basic": {"funding": "wire"}}}),
    ("post", ORDERS, GOOD),  # carries the card a change made stale
]


@contextmanager
def workers(scores: list[Scores], store: str | None) -> Iterator[list[TestClient]]:
    with ExitStack() as stack:
        clients = []
        for each in scores:
            options = {"store": store} if store is not None else {}
            app = create_app(make_domain(), admin_token=TOKEN, **options)
            instrument(app, app.state.service, prometheus=False, scores=each, client_key=KEY)
            clients.append(stack.enter_context(TestClient(app)))
        yield clients


def drive(clients: list[TestClient]) -> None:
    """The run, request ``i`` sent to worker ``i mod n`` (each worker catches up first)."""
    for i, (kind, path, body) in enumerate(STALE_RUN):
        worker = clients[i % len(clients)]
        worker.app.state.service.registry.sync()
        headers = ADMIN if kind == "admin" else {"X-Client": "a"}
        worker.post(path, json=body, headers=headers)


def settle(*scores: SharedScores) -> None:
    """Every worker writes what it buffered, then one folds all of it (no settling wait)."""
    for each in scores:
        each.flush()
    scores[0].fold(everything=True)


def test_two_workers_sharing_the_registry_score_a_client_as_one_worker_does(tmp_path):
    alone = ClientScores()
    with workers([alone], None) as one:
        drive(one)
    path = str(tmp_path / "history.sqlite")
    shared = [SharedScores(path), SharedScores(path)]
    with workers(shared, path) as two:
        drive(two)
        settle(*shared)
    expected = alone.figures(_key("a"))
    assert expected is not None and expected.stale_values_sent == 1 and expected.retries == 3
    assert shared[0].figures(_key("a")) == expected
    assert shared[1].snapshot() == {_key("a"): expected}
    assert shared[0].totals() == expected


def test_a_flood_of_fresh_keys_never_pushes_a_repeat_client_out(tmp_path):
    path = str(tmp_path / "history.sqlite")
    scores = SharedScores(path, max_clients=4, max_newcomers=8)
    real = [f"real-{i}" for i in range(4)]
    with workers([scores], path) as (client,):
        for _ in range(3):
            for name in real:
                client.post(ORDERS, json=GOOD, headers={"X-Client": name})
        for i in range(60):  # one request per minted key, then two per key
            client.post(ORDERS, json=GOOD, headers={"X-Client": f"flood-{i}"})
        for i in range(60, 80):
            for _ in range(2):
                client.post(ORDERS, json=GOOD, headers={"X-Client": f"flood-{i}"})
        settle(scores)
    kept = scores.snapshot()
    assert all(_key(name) in kept for name in real)  # busier than any flood key: kept
    assert len(kept) <= 4 + 8
    assert scores.forgotten >= 80 - 8
    assert scores.totals().requests == 3 * 4 + 60 + 2 * 20  # no request lost from the totals


def test_a_busier_repeat_key_takes_the_place_of_a_less_busy_kept_client(tmp_path):
    path = str(tmp_path / "history.sqlite")
    scores = SharedScores(path, max_clients=1, max_newcomers=4)
    with workers([scores], path) as (client,):
        for _ in range(2):
            client.post(ORDERS, json=GOOD, headers={"X-Client": "quiet"})
        for _ in range(3):
            client.post(ORDERS, json=GOOD, headers={"X-Client": "busy"})
        settle(scores)
    assert set(scores.snapshot()) == {_key("busy")}
    assert scores.totals() == ClientFigures(requests=5, episodes=5, first_try=5)


def test_the_scores_live_beside_the_registry_not_in_its_file(tmp_path):
    path = tmp_path / "history.sqlite"
    SharedScores(str(path)).close()
    assert Path(str(path) + "-clients").exists()


def test_a_killed_worker_loses_only_the_checks_it_had_not_flushed(tmp_path):
    """A worker writes its buffer every ``flush_s``: killed, it loses at most that interval."""
    path = str(tmp_path / "history.sqlite")
    killed = SharedScores(path, flush_s=3600)  # its flush thread never gets to write
    survivor = SharedScores(path, flush_s=3600)
    with workers([killed, survivor], path) as (dying, living):
        for _ in range(3):
            dying.post(ORDERS, json=GOOD, headers={"X-Client": "a"})
        killed.flush()  # its last flush before the kill
        for _ in range(2):
            dying.post(ORDERS, json=GOOD, headers={"X-Client": "a"})
        killed._buffer.clear()  # killed: what it buffered is gone
        living.post(ORDERS, json=GOOD, headers={"X-Client": "a"})
        settle(survivor)
    assert survivor.totals() == ClientFigures(requests=4, episodes=4, first_try=4)


def test_the_flush_threads_alone_bring_every_worker_s_checks_into_the_totals(tmp_path):
    """No one calls ``flush``: each worker's thread writes and one of them folds, and the
    registry-wide totals equal what the workers were sent, within a bounded wait."""
    path = str(tmp_path / "history.sqlite")
    timing = {"flush_s": 0.02, "fold_s": 0.05, "settle_s": 0.1}
    shared = [SharedScores(path, **timing), SharedScores(path, **timing)]
    with workers(shared, path) as clients:
        for i in range(20):
            clients[i % 2].post(ORDERS, json=GOOD, headers={"X-Client": f"c{i % 3}"})
            clients[i % 2].post(ORDERS, json={"plan": "basic"}, headers={"X-Client": "r"})
        deadline = time.monotonic() + 10
        while shared[1].totals().requests < 40 and time.monotonic() < deadline:
            time.sleep(0.05)
    totals = shared[0].totals()
    assert totals.requests == 40 and totals.refused == 20
    assert sum(f.requests for f in shared[1].snapshot().values()) == 40
    assert shared[0].figures(_key("r")) == ClientFigures(
        requests=20, episodes=4, retries=16, refused=20
    )
