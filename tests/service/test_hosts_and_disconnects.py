"""``serve`` answers only the Host names it is allowed to (reliability audit 2, N12: DNS
rebinding), and a client hanging up mid-body costs one log line, not a traceback (N14). Both
against a real uvicorn server on 127.0.0.1."""

from __future__ import annotations

import logging
import socket
import time
from urllib.parse import urlsplit

import httpx
import pytest
from tests.service.conftest import running

from invalidation_contracts.server.http.app import create_app
from invalidation_contracts.server.http.hosts import LOOPBACK_HOSTS, host_name


@pytest.mark.parametrize(
    ("header", "name"),
    [
        ("127.0.0.1:8000", "127.0.0.1"),
        ("[::1]:80", "::1"),
        ("LocalHost", "localhost"),
        ("api.example", "api.example"),
        ("::1", "::1"),
    ],
)
def test_the_host_name_is_read_without_its_port(header, name):
    assert host_name(header) == name


def test_a_foreign_host_is_refused_421_before_any_route_runs(domain):
    app = create_app(domain, allowed_hosts=LOOPBACK_HOSTS)
    with running(app) as url:
        port = urlsplit(url).port
        foreign = httpx.get(f"{url}/contract/graph", headers={"Host": "attacker.example"})
        named = httpx.get(f"http://localhost:{port}/contract/versions")
        direct = httpx.post(f"{url}/v1/orders", json={"plan": "basic"})

    assert foreign.status_code == 421
    assert foreign.headers["content-type"] == "application/problem+json"
    assert foreign.json()["type"].endswith("misdirected-request")
    assert named.status_code == 200 and direct.status_code in (200, 422)


def test_an_extended_allow_list_answers_its_names_and_a_star_answers_any(domain):
    with running(create_app(domain, allowed_hosts=(*LOOPBACK_HOSTS, "api.example"))) as url:
        assert httpx.get(f"{url}/contract/versions", headers={"Host": "api.example"}).is_success
        assert (
            httpx.get(f"{url}/contract/versions", headers={"Host": "x.example"}).status_code == 421
        )
    with running(create_app(domain, allowed_hosts=("*",))) as url:
        assert httpx.get(f"{url}/contract/versions", headers={"Host": "x.example"}).is_success


def test_the_serve_command_allows_only_loopback_names_by_default():
    from invalidation_contracts.cli import build_parser

    args = build_parser().parse_args(["serve", "--domain", "acme_billing"])
    assert args.allowed_host == []  # added to localhost, 127.0.0.1 and ::1


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


def mid_body(capture: Capture) -> list[logging.LogRecord]:
    return [r for r in capture.records if "disconnected mid-body" in r.getMessage()]


def test_a_client_hanging_up_mid_body_is_one_log_line_without_a_traceback(domain):
    capture = Capture()
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "invalidation_contracts")]
    for logger in loggers:
        logger.addHandler(capture)
    try:
        with running(create_app(domain)) as url:
            port = urlsplit(url).port
            for _ in range(5):
                with socket.create_connection(("127.0.0.1", port)) as raw:
                    raw.sendall(
                        b"POST /v1/orders HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                        b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"plan"'
                    )
                    time.sleep(0.05)
            deadline = time.monotonic() + 15  # bounded: a loaded machine logs late, not never
            while not mid_body(capture) and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(0.2)  # the other hang-ups' lines, if they come
            assert httpx.get(f"{url}/contract/versions").is_success  # still serving
    finally:
        for logger in loggers:
            logger.removeHandler(capture)

    lines = mid_body(capture)
    assert 1 <= len(lines) <= 5
    assert not [r for r in capture.records if r.exc_info]
    assert all("\n" not in r.getMessage() for r in lines)
