"""Real server processes on 127.0.0.1 for the multi-worker and deployment tests (started and
stopped by pid)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import IO, Any

import httpx

READY_TIMEOUT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(
    url: str,
    process: subprocess.Popen[bytes],
    log: Path,
    probe: Callable[[], object] | None = None,
) -> None:
    """Call ``probe`` (default: GET ``url``/contract/rules) until it connects (bounded); fail with
    the server's log if it does not."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"server exited {process.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if probe is None:
                httpx.get(url + "/contract/rules", timeout=2.0)
            else:
                probe()
            return
        except httpx.TransportError:
            time.sleep(0.1)
    raise RuntimeError(f"server at {url} did not start:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen[Any], grace_s: float = 20.0) -> None:
    """Terminate ``process``; kill it if it has not exited within ``grace_s``."""
    process.terminate()
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(10)


@contextmanager
def started(
    command: Sequence[str],
    port: int,
    log: Path,
    *,
    env: Mapping[str, str] | None = None,
    stdout: Path | None = None,
    probe: Callable[[], object] | None = None,
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """Run ``command`` (a server listening on ``port``) with its output in ``log`` (stdout in
    ``stdout`` where named); once it answers (:func:`wait_ready`), yield its URL and its process;
    stop it by pid."""
    with ExitStack() as files:
        err: IO[bytes] = files.enter_context(log.open("wb"))
        out = files.enter_context(stdout.open("wb")) if stdout is not None else err
        process = subprocess.Popen(
            list(command), stdout=out, stderr=err, env={**os.environ, **(env or {})}
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(url, process, log, probe)
        yield url, process
    finally:
        stop(process)


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
    command = [sys.executable, "-m", "invalidation_contracts.cli", "serve", *args]
    log = logs / f"serve-{port}.log"
    with started([*command, "--port", str(port)], port, log, env=env) as (url, _):
        yield url
