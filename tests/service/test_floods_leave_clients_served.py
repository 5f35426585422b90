"""Anonymous floods leave legitimate clients served (issue 42's done-when).

A real ``serve --workers 2 --metrics`` on 127.0.0.1; raw sockets as the attacker hold hundreds of
connections open at once, half trickling headers (slowloris), half a body that never completes;
meanwhile a legitimate client's requests are all answered, each within a bound, and a scrape
still counts exactly what that client was answered. Then a flood of 300 fresh bearer tokens (each a
new client key) does not push the legitimate client out of the per-client series each worker
exports (its 20 busiest clients), and every answer is counted.
"""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from tests.observe.test_prometheus_scrape import samples
from tests.service.conftest import TOKEN
from tests.service.test_header_timeout import DRAFT
from tests.support.processes import serving

pytestmark = pytest.mark.workers

ROUTE = "/v1/subscriptions"
ADMIN = {"Authorization": f"Bearer {TOKEN}"}
HELD = 300
"""Connections the attacker holds open at once (half slowloris, half slow bodies)."""
LEGIT = 20
ANSWER_BOUND_S = 5.0


@contextlib.contextmanager
def _held(port: int, count: int) -> Iterator[list[socket.socket]]:
    """``count`` connections: even ones send half a request line and headers, odd ones whole
    headers and one byte of a 1,000-byte body; all are left hanging."""
    held: list[socket.socket] = []
    try:
        for i in range(count):
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            if i % 2:
                sock.sendall(
                    f"POST {ROUTE} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                    "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{".encode()
                )
            else:
                sock.sendall(f"POST {ROUTE} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ".encode())
            held.append(sock)
        yield held
    finally:
        for sock in held:
            sock.close()


def test_held_connections_and_minted_keys_leave_a_legitimate_client_served(tmp_path):
    args = ["--domain", "acme_billing", "--db", str(tmp_path / "h.sqlite"), "--workers", "2"]
    args += ["--metrics", "--max-lag", "30"]
    env = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": TOKEN}
    legit = {"Authorization": "Bearer the-real-agent"}
    with serving(args, tmp_path / "logs", env=env) as url:
        port = int(url.rsplit(":", 1)[1])
        statuses, slowest = [], 0.0
        with _held(port, HELD):
            for _ in range(LEGIT):  # a fresh connection each: whichever worker takes it
                start = time.monotonic()
                reply = httpx.post(url + ROUTE, json=DRAFT, headers=legit, timeout=ANSWER_BOUND_S)
                slowest = max(slowest, time.monotonic() - start)
                statuses.append(reply.status_code)
        with httpx.Client(timeout=10.0) as flood:  # 300 one-request keys: a key-minting flood
            for i in range(300):
                flood.post(url + ROUTE, json=DRAFT, headers={"Authorization": f"Bearer m-{i}"})
        deadline = time.monotonic() + 20
        while True:
            text = httpx.get(url + "/contract/metrics", headers=ADMIN, timeout=10.0).text
            found = samples(text)
            total = sum(
                v
                for (n, _), v in found.items()
                if n == "invalidation_contracts_http_responses_total"
            )
            if total >= LEGIT + 300 or time.monotonic() > deadline:
                break
            time.sleep(0.3)

    assert len(statuses) == LEGIT and set(statuses) <= {200, 422}
    assert slowest < ANSWER_BOUND_S
    assert total == LEGIT + 300  # every answer counted, none lost to the flood
    # the real agent (20 requests over two workers) is among each worker's busiest clients
    per_client: dict[str, float] = {}
    for (name, labels), value in found.items():
        if name == "invalidation_contracts_client_requests_total":
            client = dict(labels)["client"]
            per_client[client] = per_client.get(client, 0.0) + value
    assert max(per_client.values()) == LEGIT
