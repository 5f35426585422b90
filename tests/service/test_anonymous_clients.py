"""An anonymous client cannot exhaust a server (issue 42, item 4; hostile audit H3 and H5).

Real ``serve`` (1 and 2 workers) and ``serve-mcp --transport http`` processes on 127.0.0.1, raw
sockets as the attacker: a body trickled a byte at a time ends at its total deadline (the stall
timeout alone restarted on every byte); a connection beyond a worker's cap is answered 503 and
closed; the open-file soft limit is raised to the hard limit at start, and running out of
descriptors is logged at most once a second; a watch beyond the worker's cap, or beyond one
client's, is a 503 with ``Retry-After`` before any stream byte (SPEC §8.4).
"""

from __future__ import annotations

import contextlib
import json
import resource
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from tests.service.conftest import DRAFT
from tests.service.test_header_timeout import MCP_INITIALIZE, _read_response, _wait_closed
from tests.support.processes import free_port, stop, wait_ready

from invalidation_contracts.protocol.problems import ProblemType

#: Seconds a test waits for what it expects (generous: the machine is shared).
BOUND_S = 20.0
ROUTE = "/v1/subscriptions"


def _limit(soft: int, hard: int) -> Callable[[], None]:
    """A ``preexec_fn`` that starts the server with these open-file limits."""

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return apply


class Running:
    """A server process: its port, log, and the pids of it and its workers."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, log: Path, post: str) -> None:
        self.process = process
        self.port = port
        self.log = log
        self.post = post

    def pids(self) -> list[int]:
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text()
        return [self.process.pid, *(int(child) for child in children.split())]

    def head(self, length: int) -> bytes:
        return (
            f"POST {self.post} HTTP/1.1\r\nHost: 127.0.0.1:{self.port}\r\n"
            "Accept: application/json, text/event-stream\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\nConnection: close\r\n\r\n"
        ).encode()

    def body(self) -> bytes:
        return json.dumps(MCP_INITIALIZE if self.post == "/mcp" else DRAFT).encode()

    def get(self) -> int:
        """A normal client's request (a GET on ``serve``, an MCP initialize on ``serve-mcp``)."""
        url = f"http://127.0.0.1:{self.port}"
        if self.post == "/mcp":
            headers = {"Accept": "application/json, text/event-stream"}
            return httpx.post(url + "/mcp", json=MCP_INITIALIZE, headers=headers).status_code
        return httpx.get(url + "/contract/rules", timeout=10.0).status_code


@contextlib.contextmanager
def _run(
    command: str, args: list[str], logs: Path, preexec: Callable[[], None] | None = None
) -> Iterator[Running]:
    port = free_port()
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"{command}-{port}.log"
    argv = [sys.executable, "-m", "invalidation_contracts.cli", command, "--domain"]
    argv += ["acme_billing", *args, "--port", str(port)]
    if command == "serve-mcp":
        argv += ["--transport", "http"]
    with log.open("wb") as out:
        process = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, preexec_fn=preexec)
    running = Running(process, port, log, "/mcp" if command == "serve-mcp" else ROUTE)
    try:
        wait_ready(f"http://127.0.0.1:{port}", process, log, running.get)
        yield running
    finally:
        stop(process)


SERVERS = {
    "serve": ("serve", ["--ephemeral"]),
    "serve --workers 2": ("serve", ["--workers", "2"]),
    "serve-mcp --transport http": ("serve-mcp", []),
}


def _server_params() -> list[object]:
    marks = {"serve-mcp --transport http": pytest.mark.mcp}
    return [pytest.param(name, marks=marks.get(name, pytest.mark.workers)) for name in SERVERS]


def _args(name: str, tmp_path: Path, *extra: str) -> tuple[str, list[str]]:
    command, args = SERVERS[name]
    if "--workers" in args:
        args = [*args, "--db", str(tmp_path / "h.sqlite")]
    return command, [*args, *extra]


def _problem(response: bytes) -> dict[str, object]:
    return dict(json.loads(response.partition(b"\r\n\r\n")[2]))


@pytest.mark.parametrize("name", _server_params())
def test_a_body_trickled_a_byte_at_a_time_is_cut_off_at_its_deadline(name, tmp_path):
    command, args = _args(name, tmp_path, "--body-timeout", "1", "--body-deadline", "2")
    with _run(command, args, tmp_path / "logs") as server:
        body = server.body()
        with socket.create_connection(("127.0.0.1", server.port), timeout=10.0) as sock:
            sock.sendall(server.head(len(body)))
            started = time.monotonic()
            received = b""
            sock.settimeout(0.3)  # a byte every 0.3 s: never a stall of the 1 s body timeout
            for byte in body[: len(body) - 1]:
                if time.monotonic() - started > BOUND_S:
                    break
                try:
                    sock.sendall(bytes([byte]))
                    chunk = sock.recv(65536)
                except TimeoutError:
                    continue  # nothing yet: the next byte
                except OSError:  # reset by the server's close
                    break
                received += chunk
                if not chunk or received:
                    break
            with contextlib.suppress(OSError):
                sock.settimeout(5.0)
                while chunk := sock.recv(65536):
                    received += chunk
            elapsed = time.monotonic() - started

    assert received.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), received[:300]
    assert _problem(received)["type"] == ProblemType.REQUEST_TIMEOUT.uri
    assert "slower than" in str(_problem(received)["detail"])
    assert elapsed < BOUND_S / 2


@pytest.mark.parametrize("name", [p for p in _server_params() if "workers" not in str(p.values[0])])
def test_a_connection_beyond_the_workers_cap_is_answered_503_and_closed(name, tmp_path):
    command, args = _args(name, tmp_path, "--max-connections", "4", "--header-timeout", "60")
    with _run(command, args, tmp_path / "logs") as server:
        held = [socket.create_connection(("127.0.0.1", server.port)) for _ in range(4)]
        try:
            time.sleep(0.5)  # all four accepted by the worker
            with socket.create_connection(("127.0.0.1", server.port), timeout=10.0) as extra:
                extra.sendall(server.head(len(server.body())) + server.body())
                answer = _read_response(extra)
                extra.setblocking(False)
                _wait_closed([extra], BOUND_S)
        finally:
            for sock in held:
                sock.close()
        time.sleep(0.5)
        after = server.get()

    head = answer.partition(b"\r\n\r\n")[0].lower()
    assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer[:300]
    assert b"retry-after: 1" in head and b"application/problem+json" in head
    assert _problem(answer)["type"] == ProblemType.REGISTRY_UNAVAILABLE.uri
    assert after == 200  # the held connections gone, the worker serves again


def _open_files(pid: int) -> tuple[int, int]:
    for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
        if line.startswith("Max open files"):
            soft, hard = line.split()[3:5]
            return int(soft), int(hard)
    raise AssertionError(f"no open-file limit for {pid}")


@pytest.mark.parametrize("name", _server_params())
def test_the_open_file_soft_limit_is_raised_to_the_hard_limit_at_start(name, tmp_path):
    hard = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 4096)
    command, args = _args(name, tmp_path)
    with _run(command, args, tmp_path / "logs", _limit(256, hard)) as server:
        limits = {pid: _open_files(pid) for pid in server.pids()}

    assert set(limits.values()) == {(hard, hard)}, limits


@pytest.mark.workers
def test_running_out_of_descriptors_is_logged_at_most_once_a_second(tmp_path):
    args = ["--ephemeral", "--max-connections", "1000", "--header-timeout", "60"]
    with _run("serve", args, tmp_path / "logs", _limit(64, 64)) as server:
        held = []
        try:
            for _ in range(120):  # past the 64 descriptors: accept() fails with EMFILE
                held.append(socket.create_connection(("127.0.0.1", server.port), timeout=5.0))
            started = time.monotonic()
            time.sleep(3.0)
            held_s = time.monotonic() - started
        finally:
            for sock in held:
                sock.close()
        time.sleep(1.5)
        after = server.get()
        log = server.log.read_text()

    reports = log.count("socket.accept() out of system resource")
    assert 1 <= reports <= held_s + 3, (reports, log[-2000:])
    assert after == 200


def _watch(port: int, source: str, stack: contextlib.ExitStack) -> httpx.Response:
    """A watch from the address ``source`` (loopback has every 127.x address), held open."""
    client = stack.enter_context(
        httpx.Client(transport=httpx.HTTPTransport(local_address=source), timeout=10.0)
    )
    response = stack.enter_context(
        client.stream("GET", f"http://127.0.0.1:{port}/contract/watch?timeout=60")
    )
    if response.status_code == 200:
        chunks = response.iter_raw()  # kept: a dropped iterator would end the stream
        next(chunks)  # the stream's first bytes: it holds its slot
        stack.callback(chunks.close)
    else:
        response.read()
    return response


@pytest.mark.watch
def test_watches_beyond_the_caps_are_503_with_retry_after_before_any_stream_byte(tmp_path):
    args = ["--ephemeral", "--max-watch-streams", "3", "--max-watch-per-client", "2"]
    with _run("serve", args, tmp_path / "logs") as server, contextlib.ExitStack() as stack:
        first = [_watch(server.port, "127.0.0.1", stack).status_code for _ in range(2)]
        over_client = _watch(server.port, "127.0.0.1", stack)
        other = _watch(server.port, "127.0.0.2", stack).status_code
        over_worker = _watch(server.port, "127.0.0.3", stack)
        log = server.log.read_text()

    assert first == [200, 200] and other == 200
    for refused in (over_client, over_worker):
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "5"
        assert refused.headers["content-type"] == "application/problem+json"
        assert refused.json()["type"] == ProblemType.REGISTRY_UNAVAILABLE.uri
    assert "client already holds 2" in over_client.json()["detail"]
    assert "already serves 3" in over_worker.json()["detail"]
    assert "Traceback" not in log


@pytest.mark.watch
def test_a_watch_that_ends_gives_its_slot_back(tmp_path):
    args = ["--ephemeral", "--max-watch-streams", "1"]
    with _run("serve", args, tmp_path / "logs") as server:
        with contextlib.ExitStack() as stack:
            assert _watch(server.port, "127.0.0.1", stack).status_code == 200
        deadline = time.monotonic() + BOUND_S
        while True:  # the server notices the hang-up at its next write or heartbeat
            with contextlib.ExitStack() as stack:
                status = _watch(server.port, "127.0.0.1", stack).status_code
            if status == 200 or time.monotonic() > deadline:
                break
            time.sleep(0.5)

    assert status == 200
