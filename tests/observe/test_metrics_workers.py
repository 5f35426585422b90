"""``serve --workers N --metrics``: the one scrape target reports what every worker did (issue 42,
item 1). Real ``serve --workers 4`` processes on 127.0.0.1, scraped over one kept-alive
connection as Prometheus scrapes (which reached a single worker for a whole run before)."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest
from tests.observe.conftest import ADMIN
from tests.observe.test_prometheus_scrape import samples
from tests.service.conftest import DRAFT, TOKEN
from tests.support.processes import serving

from invalidation_contracts.observe.workers import merge

pytestmark = pytest.mark.workers

ROUTE = "/v1/subscriptions"
SENT = 40
BOUND_S = 30.0


def _by_worker(text: str, name: str) -> dict[str, float]:
    """The samples of ``name`` summed per ``worker`` label ("" for a sample without one)."""
    totals: dict[str, float] = {}
    for (sample, labels), value in samples(text).items():
        if sample == name:
            worker = dict(labels).get("worker", "")
            totals[worker] = totals.get(worker, 0.0) + value
    return totals


def test_one_scrape_of_serve_workers_reports_every_worker_and_their_counts_add_up(tmp_path):
    args = ["--domain", "acme_billing", "--db", str(tmp_path / "r.sqlite"), "--workers", "4"]
    env = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": TOKEN}
    with serving([*args, "--metrics"], tmp_path / "logs", env=env) as url:

        def send(_: int) -> int:  # a fresh connection each: the requests spread over workers
            return httpx.post(url + ROUTE, json=DRAFT, timeout=20.0).status_code

        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(send, range(SENT)))
        with httpx.Client(headers=ADMIN, timeout=20.0) as scraper:  # one kept-alive connection
            deadline = time.monotonic() + BOUND_S
            while True:
                text = scraper.get(url + "/contract/metrics").text
                responses = _by_worker(text, "invalidation_contracts_http_responses_total")
                seqs = _by_worker(text, "invalidation_contracts_worker_seq")
                # each worker writes its metrics once a second: wait for the last one's first write
                done = sum(responses.values()) >= SENT and len(seqs) == 4
                if done or time.monotonic() > deadline:
                    break
                time.sleep(0.3)

    assert all(status in (200, 422) for status in statuses)
    assert sum(responses.values()) == SENT  # the sum over workers is what they served
    assert "" not in responses  # every series is one worker's
    assert len(seqs) == 4  # all four workers in one scrape


def test_merged_expositions_label_each_sample_with_its_worker_unless_it_has_one():
    first = (
        "# HELP demo_total Demo.\n# TYPE demo_total counter\n"
        'demo_total{route="a"} 2.0\n'
        '# HELP seq Seq.\n# TYPE seq gauge\nseq{worker="7"} 3.0\n'
    )
    second = '# HELP demo_total Demo.\n# TYPE demo_total counter\ndemo_total{route="a"} 5.0\n'

    merged = merge({"7": first, "8": second, "9": "not an exposition {"}).decode()

    assert _by_worker(merged, "demo_total") == {"7": 2.0, "8": 5.0}
    assert _by_worker(merged, "seq") == {"7": 3.0}
    assert merged.count("# TYPE demo_total counter") == 1


def test_every_worker_keys_a_client_under_the_secret_serve_was_given(tmp_path):
    """``serve --client-key-secret-file``: every worker hashes a bearer token under the same
    secret (each picked a random one: 3 clients became 11 keys), so any worker, and any server
    given the same file, names the client alike."""
    secret = tmp_path / "client-key-secret"
    secret.write_text("shared-secret-of-the-fleet\n")
    secret.chmod(0o600)
    args = ["--domain", "acme_billing", "--db", str(tmp_path / "r.sqlite"), "--workers", "2"]
    args += ["--metrics", "--client-key-secret-file", str(secret)]
    env = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": TOKEN}
    with serving(args, tmp_path / "logs", env=env) as url:

        def send(_: int) -> int:
            headers = {"Authorization": "Bearer agent-7"}
            return httpx.post(url + ROUTE, json=DRAFT, headers=headers, timeout=20.0).status_code

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(send, range(12)))
        keys = set()
        for _ in range(12):  # fresh connections: the views of both workers, most likely
            view = httpx.get(url + "/contract/operator/state", headers=ADMIN, timeout=20.0)
            keys |= {c["client"] for c in view.json()["clients"] if c["client"] != "unknown"}

    expected = hmac.new(b"shared-secret-of-the-fleet", b"agent-7", hashlib.sha256).hexdigest()
    assert keys == {"token:" + expected[:16]}


WRITES = 5
CLIENT = {"Authorization": "Bearer agent-on-postgres"}
PATTERN = "BBGBGGBBBBBB"
"""One client's requests: B a refused draft (422), G the draft that passes."""
REFUSED = {**DRAFT, "amount_cents": 1}


@dataclass
class PostgresRun:
    text: str
    """The last scrape."""
    statuses: list[int]
    """What one client's requests were answered, in order (each on a fresh connection)."""


@pytest.fixture(scope="module")
def postgres_run(
    tmp_path_factory: pytest.TempPathFactory, postgres_cluster
) -> Iterator[PostgresRun]:
    """``serve --workers 4 --metrics`` on PostgreSQL (history and tables): five admin writes,
    then one client's requests over fresh connections (spread over the workers); the scrape."""
    root = tmp_path_factory.mktemp("postgres-workers")
    url_db = postgres_cluster.database()
    args = ["--domain", "acme_billing", "--db", url_db, "--workers", "4", "--metrics"]
    args += ["--database", url_db, "--create-tables"]
    args += ["--max-lag", "30"]  # a loaded CI host: a worker's heartbeat may run late, not fail
    env = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": TOKEN}
    try:
        with serving(args, root / "logs", env=env) as url:
            for i in range(WRITES):
                row = {f"plan_x{i}": {"code": f"X{i}", "csm": "csm_avery_chen"}}
                answer = httpx.post(
                    url + "/admin/patch-table",
                    json={"table": "active_csm_codes", "upsert": row},
                    headers=ADMIN,
                    timeout=20.0,
                )
                assert answer.status_code == 200, answer.text
            statuses = [
                httpx.post(
                    url + ROUTE, json=REFUSED if kind == "B" else DRAFT, headers=CLIENT, timeout=20
                ).status_code
                for kind in PATTERN
            ]
            with httpx.Client(headers=ADMIN, timeout=20.0) as scraper:
                deadline = time.monotonic() + BOUND_S
                while True:
                    text = scraper.get(url + "/contract/metrics").text
                    adopted = _by_worker(
                        text, "invalidation_contracts_worker_adopted_changes_total"
                    )
                    folded = sum(  # the shared scores fold within about a second
                        v
                        for (n, _), v in samples(text).items()
                        if n == "invalidation_contracts_client_requests_total"
                    )
                    settled = sum(adopted.values()) >= 3 * WRITES and folded >= len(PATTERN)
                    if settled or time.monotonic() > deadline:
                        break
                    time.sleep(0.3)
        yield PostgresRun(text, statuses)
    finally:
        postgres_cluster.drop(url_db)


@pytest.mark.postgres
def test_each_admin_write_through_postgresql_capture_is_one_change_set_at_four_workers(
    postgres_run,
):
    """History and tables in PostgreSQL: each admin write is committed to the database, captured,
    and consumed or adopted by every worker; it was counted twice (once ``admin``, once
    ``captured`` by a worker whose capture round adopted it)."""
    changes: dict[str, float] = {}
    for (name, labels), value in samples(postgres_run.text).items():
        if name == "invalidation_contracts_contract_changes_total" and value:
            origin = dict(labels)["origin"]
            changes[origin] = changes.get(origin, 0.0) + value
    adopted = _by_worker(postgres_run.text, "invalidation_contracts_worker_adopted_changes_total")

    assert changes == {"admin": WRITES}
    assert sum(adopted.values()) == 3 * WRITES  # the three other workers adopt each one


def _one_worker_scores(statuses: list[int], max_attempts: int = 5) -> tuple[int, int, int]:
    """Episodes, first tries and retries of one route's answers, as one worker folds them."""
    streak = episodes = first = retries = 0
    for status in statuses:
        opening = streak == 0 or streak >= max_attempts
        episodes, first = episodes + opening, first + (opening and status != 422)
        retries += not opening
        streak = (1 if opening else streak + 1) if status == 422 else 0
    return episodes, first, retries


@pytest.mark.postgres
def test_a_client_spread_over_four_workers_on_postgresql_scores_as_on_one(postgres_run):
    """The scores live in the registry's schema (``observe.shared``): a retry reaching another
    worker than its refusal is still a retry."""
    figures = {}
    for (name, labels), value in samples(postgres_run.text).items():
        for figure in ("requests", "episodes", "first_try", "retries"):
            if name == f"invalidation_contracts_client_{figure}_total":
                assert dict(labels)["worker"] == "registry"
                figures[figure] = figures.get(figure, 0.0) + value
    assert postgres_run.statuses == [422 if kind == "B" else 200 for kind in PATTERN]
    assert figures["requests"] == len(PATTERN)
    expected = _one_worker_scores(postgres_run.statuses)
    assert (figures["episodes"], figures["first_try"], figures["retries"]) == expected


def test_a_gone_worker_keeps_its_counters_in_the_merge_but_not_its_gauges():
    """A worker the supervisor replaced: its counts stay (sums never drop), its last seq and
    readiness leave (a dead worker is neither behind nor not ready)."""
    text = (
        "# HELP c_total C.\n# TYPE c_total counter\nc_total 4.0\n"
        "# HELP seq Seq.\n# TYPE seq gauge\nseq 3.0\n"
    )

    merged = merge({"7": text, "8": text}, gone=frozenset({"7"})).decode()

    assert _by_worker(merged, "c_total") == {"7": 4.0, "8": 4.0}
    assert _by_worker(merged, "seq") == {"8": 3.0}
