"""Real server processes on 127.0.0.1 for the multi-worker tests (started and stopped by pid)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import httpx

READY_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """Poll ``url`` until it answers (bounded); fail with the server's log if it does not."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            httpx.get(url + "/contract/rules", timeout=2.0)
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"server at {url} did not start:\n{log.read_text()[-3000:]}")


@contextmanager
def serving(
    args: Sequence[str],
    logs: Path,
    *,
    env: Mapping[str, str] | None = None,
    port: int | None = None,
) -> Iterator[str]:
    """Run ``invalidation-contracts serve ARGS --port P``; yield its URL; stop it by pid.

    ``port``: the one to listen on (a restarted server keeps its origin); default: a free one.
    """
    port = port if port is not None else free_port()
    logs.mkdir(parents=True, exist_ok=True)
    log = logs / f"serve-{port}.log"
    command = [sys.executable, "-m", "invalidation_contracts.cli", "serve", *args]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*command, "--port", str(port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, process, log)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)
