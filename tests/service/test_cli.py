"""The operator's commands: serve, reload and graph; every error one line, exit 1 or 2 (usage)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from invalidation_contracts import cli, domains
from invalidation_contracts.server.http.app import create_app
from invalidation_contracts.server.worker.timing import DEFAULT_POLL_INTERVAL_S

TOKEN = "s3cret-admin-token"
TOKEN_ENV = "INVALIDATION_CONTRACTS_ADMIN_TOKEN"


@pytest.fixture(autouse=True)
def admin_token(monkeypatch):
    """The operator's shell holds the admin token in the environment, never in argv."""
    monkeypatch.setenv(TOKEN_ENV, TOKEN)


@pytest.fixture
def server(domain, serve):
    app = create_app(domain, admin_token=TOKEN)
    with serve(app) as url:
        yield url, app.state.registry


@pytest.fixture
def snapshot(tmp_path):
    path = tmp_path / "plans.json"
    path.write_text(
        json.dumps({"table": "plans", "version": "2.0.0", "rows": {"basic": {"funding": "wire"}}})
    )
    return path


def run(capsys, *argv) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_reload_sends_the_snapshot_and_prints_the_diff(server, snapshot, capsys):
    url, registry = server
    status, out, _ = run(capsys, "reload", "--url", url, "--snapshot", str(snapshot))
    assert status == 0
    assert out.strip() == (
        "plans: 1.0.0 -> 2.0.0 (0 added, 2 removed, 1 changed); 2 downstream nodes affected; seq 1"
    )
    assert registry.state.versions()["plans"] == "2.0.0"


def test_reload_takes_the_token_from_the_environment_and_prints_json(server, snapshot, capsys):
    url, _ = server
    status, out, _ = run(
        capsys, "reload", "--url", url, "--snapshot", str(snapshot), "--version", "3.0.0", "--json"
    )
    assert status == 0
    assert json.loads(out)["new_version"] == "3.0.0"


def test_reload_takes_the_token_from_a_file(server, snapshot, capsys, monkeypatch, tmp_path):
    monkeypatch.delenv(TOKEN_ENV)
    token_file = tmp_path / "admin-token"
    token_file.write_text(TOKEN + "\n")
    status, _, _ = run(
        capsys,
        "reload",
        "--url",
        server[0],
        "--admin-token-file",
        str(token_file),
        "--snapshot",
        str(snapshot),
    )
    assert status == 0


def test_reload_with_the_wrong_token_is_one_line_and_exit_1(server, snapshot, capsys, monkeypatch):
    url, registry = server
    monkeypatch.setenv(TOKEN_ENV, "nope")
    status, out, err = run(capsys, "reload", "--url", url, "--snapshot", str(snapshot))
    assert status == 1 and out == ""
    assert err.count("\n") == 1 and "admin token was rejected" in err
    assert registry.state.seq == 0


def test_reload_without_a_token_says_how_to_give_one(server, snapshot, capsys, monkeypatch):
    monkeypatch.delenv(TOKEN_ENV)
    status, _, err = run(capsys, "reload", "--url", server[0], "--snapshot", str(snapshot))
    assert status == 1
    assert "--admin-token-file" in err and TOKEN_ENV in err


def test_reload_against_a_server_that_is_down_is_one_line(snapshot, capsys):
    url = f"http://127.0.0.1:{closed_port()}"
    status, _, err = run(capsys, "reload", "--url", url, "--snapshot", str(snapshot))
    assert status == 1
    assert (
        err.strip() == f"invalidation-contracts: error: cannot reach {url}: is the server running?"
    )


def test_reload_of_a_bad_file_is_one_line(server, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    status, _, err = run(capsys, "reload", "--url", server[0], "--snapshot", str(bad))
    assert status == 1 and "bad.json: not valid JSON" in err and err.count("\n") == 1


def test_reload_names_the_server_problem(server, tmp_path, capsys):
    stale = tmp_path / "stale.json"
    stale.write_text(json.dumps({"table": "plans", "version": "0.1.0", "rows": {}}))
    status, _, err = run(capsys, "reload", "--url", server[0], "--snapshot", str(stale))
    assert status == 1 and "409 version-conflict" in err


def test_reload_refuses_a_snapshot_of_another_table(server, snapshot, capsys):
    status, _, err = run(
        capsys,
        "reload",
        "--url",
        server[0],
        "--snapshot",
        str(snapshot),
        "--table",
        "funding_types",
    )
    assert status == 2 and "not 'funding_types'" in err


def test_graph_prints_the_edges(server, capsys):
    status, out, _ = run(capsys, "graph", "--url", server[0])
    assert status == 0
    lines = out.splitlines()
    assert lines[0].startswith("6 nodes, 3 edges")
    assert "plans:basic -[requires_funding]-> funding_types:card" in lines


def test_graph_json_is_the_listing(server, capsys):
    status, out, _ = run(capsys, "graph", "--url", server[0], "--json")
    assert status == 0 and set(json.loads(out)) >= {"nodes", "edges"}


def test_graph_against_a_server_that_is_down_is_exit_1(capsys):
    status, _, err = run(capsys, "graph", "--url", f"http://127.0.0.1:{closed_port()}")
    assert status == 1 and "cannot reach" in err


@pytest.fixture
def fake_domains(monkeypatch, domain):
    def get_domain(name):
        if name != domain.name:
            raise KeyError(f"unknown domain {name!r}; available: {domain.name}")
        return domain

    monkeypatch.setattr(domains, "get_domain", get_domain, raising=False)


def test_serve_an_unknown_domain_is_exit_2(fake_domains, capsys):
    status, _, err = run(capsys, "serve", "--domain", "nope", "--port", str(closed_port()))
    assert status == 2 and "unknown domain 'nope'" in err


def test_serve_on_a_port_in_use_is_exit_1(fake_domains, capsys):
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        status, _, err = run(capsys, "serve", "--domain", "test_shop", "--port", str(port))
    assert status == 1 and f"cannot listen on 127.0.0.1:{port}" in err


def test_serve_a_registry_file_of_another_domain_is_exit_1(fake_domains, domain, tmp_path, capsys):
    from dataclasses import replace

    db = tmp_path / "other.db"
    create_app(replace(domain, name="other"), store=db).state.store.close()
    status, _, err = run(
        capsys, "serve", "--domain", "test_shop", "--db", str(db), "--port", str(closed_port())
    )
    assert status == 1 and "domain 'other'" in err


def test_serve_rejects_an_unknown_level(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve", "--domain", "x", "--level", "9"])
    assert exit_.value.code == 2


@pytest.mark.parametrize("lag", ["0", "-1", "soon", "inf", "nan"])
def test_serve_rejects_a_lag_bound_that_is_not_a_positive_number_of_seconds(capsys, lag):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve", "--domain", "x", "--max-lag", lag])
    assert exit_.value.code == 2
    assert "--max-lag" in capsys.readouterr().err


def test_serve_refuses_a_lag_bound_below_the_heartbeat_in_one_line(tmp_path, capsys):
    code = cli.main(
        ["serve", "--domain", "acme_billing", "--db", str(tmp_path / "r.db"), "--max-lag", "0.5"]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "max_lag_s (0.5) must exceed" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("interval", ["0", "-1", "often", "inf", "nan"])
def test_serve_rejects_a_poll_interval_that_is_not_a_positive_number_of_seconds(capsys, interval):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve", "--domain", "x", "--poll-interval", interval])
    assert exit_.value.code == 2
    assert "--poll-interval" in capsys.readouterr().err


def test_serve_refuses_a_poll_interval_past_the_lag_bound_in_one_line(tmp_path, capsys):
    db = str(tmp_path / "r.db")
    code = cli.main(["serve", "--domain", "acme_billing", "--db", db, "--poll-interval", "3"])
    assert code == 1
    err = capsys.readouterr().err
    assert "must exceed poll_interval_s (3)" in err and len(err.strip().splitlines()) == 1


def test_the_poll_interval_reaches_every_worker_s_configuration():
    from invalidation_contracts.cli.launch import AppSpec

    spec = AppSpec(domain="acme_billing", poll_interval_s=0.05)
    assert AppSpec.from_env(spec.to_env()).config().poll_interval_s == 0.05
    assert AppSpec(domain="acme_billing").config().poll_interval_s == DEFAULT_POLL_INTERVAL_S


@pytest.mark.skipif(
    not hasattr(domains, "get_domain"),
    reason="invalidation_contracts.domains.get_domain not yet available",
)
def test_serve_starts_a_real_domain(tmp_path):
    port = closed_port()
    env = {**os.environ, "INVALIDATION_CONTRACTS_ADMIN_TOKEN": TOKEN}
    args = [
        sys.executable,
        "-m",
        "invalidation_contracts.cli",
        "serve",
        "--domain",
        "acme_billing",
        "--level",
        "6",
        "--db",
        str(tmp_path / "acme.db"),
        "--port",
        str(port),
    ]
    process = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                response = httpx.get(f"http://127.0.0.1:{port}/contract/versions", timeout=1)
                break
            except httpx.TransportError:
                assert process.poll() is None, process.stdout.read().decode()
                assert time.monotonic() < deadline, "server did not start"
                time.sleep(0.2)
        assert response.status_code == 200
        assert response.json()["contract_seq"] == 0
    finally:
        process.terminate()
        process.wait(10)
