"""A silent network drop between the workers and PostgreSQL (issue 21; docs/SPEC.md §8.2.5).

A black-holed link or a proxy's idle cut sends neither a FIN nor an RST: the workers' connections
stay open and every call on them waits. The workers serve through a TCP relay on 127.0.0.1
(``tests/support/relay.py``) that the test silences in both directions without closing a socket,
while a second process commits a write straight to PostgreSQL. The promise: past the lag bound a
worker answers ``503 registry-unavailable`` with ``Retry-After`` (and its readiness probe says
not ready) instead of stamps it cannot verify, the write committed meanwhile is never served
stale, and once the path carries traffic again — the relay forwards again, drops its stale
connections, or forgets them while new ones pass — every worker is ready again by itself, at the
committed state, with no restart.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest
from tests.service.probes import UNAVAILABLE, Probe, wait_every_worker_ready
from tests.service.test_follower_faults import commit, rotate
from tests.support.processes import serving
from tests.support.relay import Relay, unix_socket

from invalidation_contracts.domains import get_domain
from invalidation_contracts.server.config import WorkerConfig
from invalidation_contracts.server.sql import create_tables
from invalidation_contracts.server.worker.timing import (
    DEFAULT_MAX_LAG_S,
    DEFAULT_STALL_TIMEOUT_S,
    stall_bound,
)

WORKERS = 2
SILENT_S = DEFAULT_MAX_LAG_S + 2.5  # how long the path stays silent: past lag and stall bounds
BROKEN = "breaking its connections to reconnect"  # the watchdog's log line
STALL_S = "3"  # --stall-timeout where the test needs the watchdog (it must exceed the lag bound)


@pytest.fixture
def relay(postgres_url: str) -> Iterator[Relay]:
    """A relay to the test's PostgreSQL server (its Unix socket)."""
    create_tables(postgres_url, get_domain("acme_billing"))
    with Relay(unix_socket(postgres_url.split("host=", 1)[1].split("&", 1)[0])) as relay:
        yield relay


def serve_through(
    stack: ExitStack, relay: Relay, postgres_url: str, logs: Path, *options: str
) -> str:
    """``serve --workers 2`` whose registry and provider database are both behind the relay."""
    through = relay.url(postgres_url)
    args = ["--domain", "acme_billing", "--database", through, "--db", through, *options]
    return stack.enter_context(serving([*args, "--workers", str(WORKERS)], logs))


def assert_not_ready(url: str) -> None:
    """Every worker's readiness probe, asked on fresh connections, says not ready."""
    limits = httpx.Limits(max_keepalive_connections=0)
    with httpx.Client(limits=limits, timeout=10.0) as http:
        for _ in range(2 * WORKERS):
            ready = http.get(url + "/contract/ready")
            assert ready.status_code == 503, ready.text
            assert ready.json()["type"] == UNAVAILABLE and ready.json()["ready"] is False
            assert ready.headers["retry-after"]


def said(logs: Path) -> str:
    """What the server processes wrote to their logs."""
    return "".join(log.read_text() for log in logs.iterdir())


def silent_drop(relay: Relay, postgres_url: str, url: str, heal: Callable[[], None]) -> Probe:
    """Silence the path while a client probes every worker and a write commits directly; then
    ``heal`` it and wait (bounded) until every worker is ready at that write. The probe."""
    wait_every_worker_ready(url, WORKERS, 0)
    with Probe(url) as probe:
        time.sleep(0.3)
        relay.blackhole()
        silenced = time.monotonic()
        committed = commit(postgres_url, rotate("WHILESILENT"))  # straight to PostgreSQL
        time.sleep(SILENT_S)
        assert_not_ready(url)
        healed = time.monotonic()
        heal()
        wait_every_worker_ready(url, WORKERS, 1)
        time.sleep(DEFAULT_MAX_LAG_S + 0.5)  # probing on, past the lag bound after recovery
    assert probe.stamped_between(silenced + DEFAULT_MAX_LAG_S, healed) == []
    assert [s for s in probe.seen if silenced < s.sent < healed and s.status == 503]
    assert probe.unverified(committed, 1) == []
    assert any(s.seq == 1 for s in probe.seen if s.sent > healed)
    return probe


@pytest.mark.postgres
@pytest.mark.workers
@pytest.mark.parametrize(
    "options",
    # The watchdog's own recovery is the "forgot" test below; this variant of it runs in the
    # study step (CI's `pytest -m study`), keeping the README's run within its 10 minutes.
    [(), pytest.param(("--stall-timeout", STALL_S), marks=pytest.mark.study)],
    ids=["waiting", "watchdog-fired-while-silent"],
)
def test_workers_behind_a_black_holed_link_answer_503_then_recover_when_it_forwards_again(
    options: tuple[str, ...], relay: Relay, postgres_url: str, tmp_path: Path
) -> None:
    """Whether the waiting calls simply finish when the link forwards again, or the watchdog
    broke them while it was silent (new connections then wait in the black hole too)."""
    logs = tmp_path / "logs"
    with ExitStack() as stack:
        url = serve_through(stack, relay, postgres_url, logs, *options)
        silent_drop(relay, postgres_url, url, relay.resume)
    assert (BROKEN in said(logs)) == bool(options)


@pytest.mark.postgres
@pytest.mark.workers
@pytest.mark.study  # CI's study step; the README's run keeps the black hole and the forgotten link
def test_workers_whose_silent_connections_are_dropped_reconnect_by_themselves(
    relay: Relay, postgres_url: str, tmp_path: Path
) -> None:
    def drop_stale() -> None:
        relay.cut()
        relay.resume()

    with ExitStack() as stack:
        url = serve_through(stack, relay, postgres_url, tmp_path / "logs")
        silent_drop(relay, postgres_url, url, drop_stale)


@pytest.mark.postgres
@pytest.mark.workers
def test_workers_whose_connections_a_proxy_forgot_reconnect_by_themselves(
    relay: Relay, postgres_url: str, tmp_path: Path
) -> None:
    """The old connections stay open and silent for good; only new ones pass. A worker must
    not wait on them forever: past the stall bound (``--stall-timeout``, default 20 s; short
    here) it breaks them and reconnects. Before that bound existed the workers waited for good
    (a relay that acknowledges what it does not forward defeats TCP keepalives)."""
    logs = tmp_path / "logs"
    with ExitStack() as stack:
        url = serve_through(stack, relay, postgres_url, logs, "--stall-timeout", STALL_S)
        silent_drop(relay, postgres_url, url, relay.forget)
    assert BROKEN in said(logs)


def test_a_stall_bound_within_the_lag_bound_is_refused_and_the_default_outlasts_it() -> None:
    with pytest.raises(ValueError, match="stall_timeout_s"):
        WorkerConfig(max_lag_s=2.0, stall_timeout_s=2.0)
    assert stall_bound(None, DEFAULT_MAX_LAG_S) == DEFAULT_STALL_TIMEOUT_S
    assert stall_bound(None, 15.0) == 30.0  # twice a long lag bound
    assert stall_bound(3.0, DEFAULT_MAX_LAG_S) == 3.0


def test_worker_connections_get_keepalives_and_a_connect_timeout_unless_the_url_sets_them() -> None:
    from sqlalchemy import event

    from invalidation_contracts.server.sql.engine import make_engine
    from invalidation_contracts.server.store.postgres import connection_options

    assert connection_options("postgresql://api@db/api") == {
        "connect_timeout": 10,
        "keepalives": 1,
        "keepalives_idle": 5,
        "keepalives_interval": 2,
        "keepalives_count": 3,
        "tcp_user_timeout": 10_000,
    }
    own = "postgresql://api@db/api?connect_timeout=30&keepalives_idle=60"
    assert {"connect_timeout", "keepalives_idle"}.isdisjoint(connection_options(own))
    engine = make_engine(own)
    sent: dict[str, object] = {}

    def capture(_dialect: object, _record: object, _args: object, params: dict[str, object]):
        sent.update(params)
        raise LookupError("connected nowhere")

    event.listen(engine, "do_connect", capture)
    with pytest.raises(LookupError):
        engine.connect()
    assert (sent["connect_timeout"], sent["keepalives_idle"], sent["keepalives_count"]) == (
        "30",
        "60",
        3,
    )
