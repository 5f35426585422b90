"""A real Prometheus (Debian's 2.42) scraping ``serve --workers 4 --metrics`` while the harness
drives it, against the harness's own figures of the same run (issue 42's done-when).

One module-scoped stack: ``serve --workers 4`` on 127.0.0.1 with a SQLite history and the
domain's tables in a SQLite database (so every admin write goes through the change capture, the
path where a change set was counted once per worker), and the ``prometheus`` binary run directly
(its own config, storage in a temporary folder, a 1 s scrape interval, the shipped alert rules)
scraping the one documented target. The harness then runs payments-drifted under three arms, each
run a client of its own (its own loopback source address, which the default client key names),
over its real client path (``run_one`` against the server URL) without keep-alive, so each
client's requests spread over the four workers (its scores are shared through the registry,
``observe.shared``). What Prometheus answers through
its HTTP API must equal what the harness recorded: the answers by route and status, the
refusals by suggestion type, the change sets and rows each admin write made, every client's
episodes, first tries, retries and stale values sent, and where each worker stands (the seq of
the last admin answer, on every worker: no lag). Every query docs/operators.md gives runs here.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from tests.observe.test_alert_rules import RULES, alert_names
from tests.service.conftest import TOKEN
from tests.support.processes import free_port, serving, stop

from invalidation_contracts.bench.artifacts import read_runs
from invalidation_contracts.bench.driver import DriftDriver
from invalidation_contracts.bench.grid import load_grid
from invalidation_contracts.bench.metrics import run_metrics
from invalidation_contracts.bench.runner import run_one

pytestmark = [pytest.mark.prometheus, pytest.mark.workers]

DOCS = Path(__file__).parents[2] / "docs" / "operators.md"
SCENARIO, PLANNER = "payments-drifted", "simulated:exact"
ARMS = ("none", "table")
NO_KEEPALIVE = httpx.Limits(max_keepalive_connections=0)
SETTLE_S = 60.0
"""How long Prometheus may take to hold the run's final figures (workers publish every second,
Prometheus scrapes every second)."""


@dataclass
class Oracle:
    """What the harness recorded on the run: its records, its metrics, its admin answers."""

    clients: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    """Per client (source address): episodes, first tries, retries, stale values sent."""
    responses: Counter[tuple[str, str]] = field(default_factory=Counter)
    refusals: Counter[tuple[str, str]] = field(default_factory=Counter)
    changes: Counter[str] = field(default_factory=Counter)
    rows: Counter[str] = field(default_factory=Counter)
    seq: int = 0


@dataclass
class Stack:
    url: str
    prometheus: str
    oracle: Oracle

    def query(self, promql: str) -> list[dict[str, Any]]:
        """An instant query's result vector (a failed query fails the test)."""
        answer = httpx.get(f"{self.prometheus}/api/v1/query", params={"query": promql}).json()
        assert answer["status"] == "success", (promql, answer)
        result: list[dict[str, Any]] = answer["data"]["result"]
        return result

    def by(self, promql: str, *labels: str) -> dict[Any, float]:
        """The query's values keyed by ``labels`` (one label: its value; none: the one value)."""
        out: dict[Any, float] = {}
        for sample in self.query(promql):
            key = tuple(sample["metric"].get(name, "") for name in labels)
            out[key[0] if len(key) == 1 else key] = float(sample["value"][1])
        return out


def _start_prometheus(root: Path, target: str) -> tuple[subprocess.Popen[bytes], str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.skip("prometheus is not installed (Debian's prometheus package)")
    token = root / "scrape-token"
    token.write_text(TOKEN)
    config = documented_config()  # the operators page's, its paths and targets replaced
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(RULES)]
    (job,) = config["scrape_configs"]
    job["authorization"]["credentials_file"] = str(token)
    job["static_configs"] = [{"targets": [target]}]
    (root / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (root / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={root / 'prometheus.yml'}",
            f"--storage.tsdb.path={root / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError((root / "prometheus.log").read_text()[-3000:])
        try:
            if httpx.get(url + "/-/ready", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    process.kill()
    raise RuntimeError("prometheus did not become ready:\n" + (root / "prometheus.log").read_text())


def _drive(url: str, root: Path, monkeypatch: pytest.MonkeyPatch) -> Oracle:
    """The harness's runs against ``url``, each from its own loopback address; its figures."""
    oracle = Oracle()
    post = DriftDriver._post

    async def recorded(self: DriftDriver, path: str, body: Any) -> dict[str, Any]:
        answer = await post(self, path, body)
        if "table" in answer and answer.get("new_version") != answer.get("old_version"):
            oracle.changes[answer["table"]] += 1
            oracle.rows[answer["table"]] += sum(len(keys) for keys in answer["diff"].values())
        oracle.seq = max(oracle.seq, int(answer.get("contract_seq", 0)))
        return answer

    monkeypatch.setattr(DriftDriver, "_post", recorded)
    wire = httpx.AsyncHTTPTransport
    specs = [
        s
        for s in load_grid("paper").specs()
        if s.scenario.name == SCENARIO and s.planner == PLANNER and s.seed == 0
    ]
    for number, arm in enumerate(ARMS, start=2):
        (spec,) = [s for s in specs if str(s.arm) == arm]
        address = f"127.0.0.{number}"
        monkeypatch.setattr(  # no keep-alive: the client's requests spread over the workers
            httpx,
            "AsyncHTTPTransport",
            functools.partial(wire, local_address=address, limits=NO_KEEPALIVE),
        )
        asyncio.run(run_one(spec, root / arm, server_url=url, admin_token=TOKEN))
        monkeypatch.setattr(httpx, "AsyncHTTPTransport", wire)
        (run,) = read_runs(root / arm)
        figures = run_metrics(run)
        oracle.clients[address] = (
            figures.episodes_recorded,
            figures.first_try,
            figures.retries,
            figures.stale_values_sent,
        )
        routes = {r["episode"]: r["route"] for r in run.of("episode")}
        for attempt in run.of("attempt"):
            route = routes[attempt["episode"]]
            oracle.responses[(route, str(attempt["status"]))] += 1
            for kind in attempt["suggestion_types"]:
                oracle.refusals[(route, kind)] += 1
    return oracle


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp("prometheus")
    args = ["--domain", "acme_billing", "--db", str(root / "history.sqlite"), "--workers", "4"]
    args += ["--database", f"sqlite:///{root / 'billing.sqlite'}", "--create-tables", "--metrics"]
    args += ["--max-lag", "30"]  # a loaded CI host: a worker's heartbeat may run late, not fail
    env = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": TOKEN}
    with serving(args, root / "logs", env=env) as url:
        process, prometheus = _start_prometheus(root, url.removeprefix("http://"))
        try:
            with pytest.MonkeyPatch.context() as monkeypatch:
                oracle = _drive(url, root / "runs", monkeypatch)
            found = Stack(url, prometheus, oracle)
            _settle(found)
            yield found
        finally:
            stop(process)


def _settle(stack: Stack) -> None:
    """Wait until Prometheus's last scrape holds the run's final figures (bounded)."""
    episodes = sum(c[0] for c in stack.oracle.clients.values())
    answers = sum(stack.oracle.responses.values())
    deadline = time.monotonic() + SETTLE_S
    while time.monotonic() < deadline:
        now = (
            stack.by("sum(invalidation_contracts_clients_episodes_total)").get((), 0.0),
            stack.by("sum(invalidation_contracts_http_responses_total)").get((), 0.0),
            stack.by("min(invalidation_contracts_worker_seq)").get((), 0.0),
            stack.by("count(invalidation_contracts_worker_seq)").get((), 0.0),
        )
        if now == (episodes, answers, stack.oracle.seq, 4):
            return
        time.sleep(0.5)


def test_prometheus_scrapes_the_one_target_and_sees_all_four_workers(stack):
    assert stack.by("up", "job") == {"invalidation-contracts": 1.0}
    assert len(stack.by("invalidation_contracts_worker_ready", "worker")) == 4


def test_answers_by_route_and_status_equal_the_harness_attempts(stack):
    served = stack.by(
        "sum by (http_route, http_status_code) (invalidation_contracts_http_responses_total)",
        "http_route",
        "http_status_code",
    )
    assert {k: v for k, v in served.items() if v} == stack.oracle.responses


def test_every_request_s_duration_is_in_the_histogram_of_its_route(stack):
    counted = stack.by(
        "sum by (http_route) (invalidation_contracts_http_server_duration_seconds_count)",
        "http_route",
    )
    attempts: Counter[str] = Counter()
    for (route, _status), count in stack.oracle.responses.items():
        attempts[route] += count
    assert {route: counted.get(route) for route in attempts} == attempts


def test_each_worker_exports_its_process_metrics(stack):
    assert len(stack.by("process_cpu_seconds_total", "worker")) >= 4
    assert all(v > 0 for v in stack.by("process_resident_memory_bytes", "worker").values())


def test_refusals_by_suggestion_type_equal_the_harness_records(stack):
    served = stack.by(
        "sum by (http_route, suggestion_type) (invalidation_contracts_http_refusals_total)",
        "http_route",
        "suggestion_type",
    )
    assert stack.oracle.refusals
    assert {k: v for k, v in served.items() if v} == stack.oracle.refusals


def test_each_admin_write_is_one_change_set_across_four_workers(stack):
    """The writes go through the change capture: every worker's follower consumes or adopts
    them, and only the worker that made each counts it (it was counted 1-4 times)."""
    changes = stack.by(
        "sum by (table, origin) (invalidation_contracts_contract_changes_total)", "table", "origin"
    )
    assert {t: v for (t, o), v in changes.items() if o == "admin" and v} == stack.oracle.changes
    assert {(t, o) for (t, o), v in changes.items() if v and o != "admin"} == set()
    rows = stack.by(
        'sum by (table) (invalidation_contracts_contract_rows_changed_total{origin="admin"})',
        "table",
    )
    assert {t: v for t, v in rows.items() if v} == stack.oracle.rows
    adopted = stack.by("sum(invalidation_contracts_worker_adopted_changes_total)")[()]
    assert adopted == 3 * stack.oracle.seq  # the three other workers adopt each change set


def test_every_client_scores_as_the_harness_figured_its_run(stack):
    per_client = {
        name: stack.by(f"sum by (client) (invalidation_contracts_client_{name}_total)", "client")
        for name in ("episodes", "first_try", "retries", "stale_values_sent")
    }
    served = {
        client: tuple(int(per_client[name].get(client, 0)) for name in per_client)
        for client in per_client["episodes"]
    }
    assert served == stack.oracle.clients
    assert any(figures[3] for figures in served.values())  # the stream does send stale values


def test_each_client_s_requests_reached_several_workers_and_its_scores_are_the_registry_s(stack):
    answered = stack.by("sum by (worker) (invalidation_contracts_http_responses_total)", "worker")
    assert len([w for w, v in answered.items() if v]) >= 2  # no keep-alive: spread over workers
    scopes = stack.by("invalidation_contracts_client_episodes_total", "worker", "client")
    assert {worker for worker, _client in scopes} == {"registry"}  # one series per client


def test_every_worker_observes_each_change_set_s_commit_to_serve_lag(stack):
    observed = stack.by("sum(invalidation_contracts_worker_lag_seconds_count)")[()]
    assert observed == 4 * stack.oracle.seq  # each change set, once on each of the 4 workers
    workers = stack.by(
        "sum by (worker) (invalidation_contracts_worker_lag_seconds_count)", "worker"
    )
    assert set(workers.values()) == {float(stack.oracle.seq)}
    p99 = stack.by(
        "histogram_quantile(0.99, sum by (le) (invalidation_contracts_worker_lag_seconds_bucket))"
    )[()]
    assert 0 <= p99 <= 30


def test_client_totals_are_the_sum_of_every_client(stack):
    totals = stack.by("sum(invalidation_contracts_clients_first_try_total)")[()]
    assert totals == sum(c[1] for c in stack.oracle.clients.values())


def test_every_worker_serves_the_last_admin_answer_seq_so_the_lag_is_zero(stack):
    seqs = stack.by("invalidation_contracts_worker_seq", "worker")
    assert set(seqs.values()) == {float(stack.oracle.seq)}
    lag = stack.by(
        "max(invalidation_contracts_worker_seq) - min(invalidation_contracts_worker_seq)"
    )
    assert lag == {(): 0.0}


def test_the_shipped_alert_rules_load_and_none_fires_on_a_healthy_provider(stack):
    groups = httpx.get(f"{stack.prometheus}/api/v1/rules").json()["data"]["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert {rule["name"] for rule in rules} == alert_names()
    assert all(rule["health"] == "ok" for rule in rules), rules
    assert [rule["name"] for rule in rules if rule["state"] != "inactive"] == []


def documented_config() -> dict[str, Any]:
    """The Prometheus config docs/operators.md gives (its one ```yaml block)."""
    (block,) = re.findall(r"```yaml\n(.*?)```", DOCS.read_text("utf-8"), flags=re.S)
    config: dict[str, Any] = yaml.safe_load(block)
    return config


def documented_queries() -> list[str]:
    """Every PromQL query docs/operators.md gives (its ```promql blocks, one per line)."""
    blocks = re.findall(r"```promql\n(.*?)```", DOCS.read_text("utf-8"), flags=re.S)
    lines = (line.strip() for block in blocks for line in block.splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def documented_names() -> set[str]:
    """Every provider metric name docs/operators.md lists."""
    return set(re.findall(r"invalidation_contracts_[a-z_]+[a-z]", DOCS.read_text("utf-8")))


def test_every_query_the_operators_page_gives_runs_and_answers(stack):
    queries = documented_queries()
    assert len(queries) >= 6
    empty = [q for q in queries if not stack.query(q)]
    assert empty == []


def test_every_metric_name_the_operators_page_lists_is_in_prometheus(stack):
    names = documented_names()
    stored = set(httpx.get(f"{stack.prometheus}/api/v1/label/__name__/values").json()["data"])
    assert len(names) >= 20
    assert names - stored == set()


DASHBOARD = (
    Path(__file__).parents[2] / "src" / "invalidation_contracts" / "observe" / "dashboard.json"
)


def dashboard_queries() -> list[str]:
    """Every query of every panel of the shipped Grafana dashboard."""
    dashboard = json.loads(DASHBOARD.read_text("utf-8"))
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def test_every_panel_query_of_the_grafana_dashboard_runs_and_answers(stack):
    queries = dashboard_queries()
    assert len(queries) >= 12
    empty = [q for q in queries if not stack.query(q)]
    assert empty == []
