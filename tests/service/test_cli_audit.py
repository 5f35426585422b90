"""The reliability audit's bad CLI invocations (D7, D9): each one line, no traceback, no secret.

Exit status 2: the command line cannot run as given. Exit status 1: the command could not be done.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from invalidation_contracts import cli
from invalidation_contracts.cli import service as cli_service
from invalidation_contracts.server.http.app import create_app

TOKEN_ENV = "INVALIDATION_CONTRACTS_ADMIN_TOKEN"
SECRET = "tökén€-s3cret"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    status = cli.main(list(argv))
    out, err = capsys.readouterr()
    return status, out, err


def one_line(err: str) -> str:
    assert err.count("\n") == 1, err
    assert "Traceback" not in err
    return err.strip()


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("port", ["99999", "-1", "http"])
def test_serve_on_a_port_that_does_not_exist_is_a_usage_error(capsys, port):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve", "--domain", "acme_billing", "--port", port])
    assert exit_.value.code == 2
    assert "--port" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("command", ["reload", "graph", "run", "serve"])
def test_no_command_takes_the_admin_token_in_argv(capsys, command):
    for flag in ("--token", "--admin-token"):
        with pytest.raises(SystemExit) as exit_:
            cli.main([command, flag, "x"])
        assert exit_.value.code == 2
        capsys.readouterr()


def test_an_admin_token_a_header_cannot_carry_is_refused_without_echoing_it(
    capsys, monkeypatch, tmp_path
):
    monkeypatch.setenv(TOKEN_ENV, SECRET)
    status, _, err = run(capsys, "graph", "--url", f"http://127.0.0.1:{closed_port()}")

    assert status == 2
    message = one_line(err)
    assert "visible ASCII" in message and f"${TOKEN_ENV}" in message
    assert SECRET not in err and "tök" not in err


def test_a_token_file_that_cannot_be_read_is_one_line(capsys, tmp_path):
    missing = tmp_path / "no-such-token"
    status, _, err = run(capsys, "graph", "--admin-token-file", str(missing))
    assert status == 1
    assert f"cannot read the admin token file {missing}" in one_line(err)


@pytest.mark.parametrize("url", ["http://[::1", "http://exa mple.com", "::"])
def test_a_url_that_is_not_one_is_one_line(capsys, url):
    status, _, err = run(capsys, "graph", "--url", url)
    assert status == 1
    one_line(err)


@pytest.mark.parametrize("concurrency", ["0", "-1", "many"])
def test_run_refuses_a_concurrency_below_one(capsys, concurrency, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run", "--concurrency", concurrency, "--out", str(tmp_path)])
    assert exit_.value.code == 2
    assert "--concurrency" in one_line(capsys.readouterr().err)


@pytest.mark.parametrize("command", ["ladder", "run"])
def test_an_unwritable_results_directory_is_one_line_before_any_run(capsys, tmp_path, command):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    out = blocker / "results"

    status, _, err = run(capsys, command, "--out", str(out), "--no-progress")

    assert status == 1
    assert f"cannot write results to {out}" in one_line(err)


def test_run_against_a_server_without_a_token_is_a_usage_error(capsys, monkeypatch, tmp_path):
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    status, _, err = run(
        capsys, "run", "--server-url", "http://127.0.0.1:1", "--out", str(tmp_path)
    )
    assert status == 2
    assert "--admin-token-file" in one_line(err)


def test_a_missing_extra_is_one_line_naming_it(capsys, monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "cryptography", None)
    status, _, err = run(capsys, "keygen", "--out", str(tmp_path / "k.pem"))
    assert status == 1
    assert "pip install '.[signing]'" in one_line(err)


def test_an_unexpected_error_is_one_line_unless_debugging(capsys, monkeypatch):
    def broken(args):
        raise RuntimeError("a bug\nwith a second line")

    monkeypatch.setattr(cli_service, "_graph", broken)
    status, _, err = run(capsys, "graph")
    assert status == 1
    assert one_line(err) == ("invalidation-contracts: error: unexpected RuntimeError: a bug")
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    with pytest.raises(RuntimeError):
        cli.main(["graph"])


def test_graph_into_a_closed_pipe_stops_quietly(domain, serve):
    """``invalidation-contracts graph | head``: the reader goes away before the output is read."""
    with serve(create_app(domain)) as url:
        process = subprocess.Popen(
            [sys.executable, "-m", "invalidation_contracts.cli", "graph", "--url", url],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, TOKEN_ENV: "t" * 24},
        )
        process.stdout.close()  # before the interpreter has even started: every write fails
        _, err = process.communicate(timeout=60)
    assert process.returncode == 1
    assert err == b""
