"""Server processes for the studies that drive the shipped command: started, awaited, stopped.

``serve_command`` runs ``python -m invalidation_contracts.cli serve ...`` as a user would;
``bare_uvicorn`` runs the same app under ``uvicorn.run(host, port)`` (uvicorn binds the socket),
the baseline the keep-alive and provider studies compare ``serve`` against. Both log as uvicorn
does by default (``info``, access log on; stdout discarded, stderr kept for a failed start).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import loadgen

ADMIN_TOKEN = "benchmark-only"
ENV = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": ADMIN_TOKEN}

_BARE = """
import sys, uvicorn
from invalidation_contracts.cli.launch import FACTORY, AppSpec
port, workers = int(sys.argv[1]), int(sys.argv[2])
if workers == 1:
    uvicorn.run(AppSpec.from_env().build(), host="127.0.0.1", port=port, log_level="info")
else:
    uvicorn.run(
        FACTORY, factory=True, host="127.0.0.1", port=port, workers=workers, log_level="info"
    )
"""


@dataclass(frozen=True, slots=True)
class Server:
    """A running server process: where it listens, and its process id."""

    port: int
    pid: int

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system, every thread) the process has used; None where ``/proc``
        does not say (not Linux). Worker processes of ``--workers`` are not counted."""
        try:
            stat = Path(f"/proc/{self.pid}/stat").read_text(encoding="ascii")
        except OSError:
            return None
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind((loadgen.LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def process(
    command: Sequence[str],
    port: int,
    env: Mapping[str, str] | None = None,
    *,
    ready_s: float = 90.0,
    log_to: Path | None = None,
) -> Iterator[Server]:
    """Run ``command`` (a server on ``port``) until the block ends; yield it once it answers
    (within ``ready_s``). ``log_to``: its stderr kept in that file (else discarded at the end).

    ``RuntimeError`` with the end of its stderr if it never does.
    """
    kept = log_to.open("w+b") if log_to is not None else tempfile.TemporaryFile()
    with kept as log:
        proc = subprocess.Popen(
            list(command),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            env={**os.environ, **ENV, **(env or {})},
        )
        try:
            try:
                loadgen.wait_ready(port, timeout_s=ready_s)
            except TimeoutError:
                log.seek(0)
                tail = log.read().decode("utf-8", "replace")[-2000:]
                raise RuntimeError(f"no server answered on port {port}:\n{tail}") from None
            yield Server(port, proc.pid)
        finally:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)


@contextmanager
def serve_command(
    *args: str, ready_s: float = 90.0, log_to: Path | None = None
) -> Iterator[Server]:
    """``invalidation-contracts serve ARGS`` on a free loopback port (answering within
    ``ready_s``; its stderr kept in ``log_to`` when given)."""
    port = free_port()
    command = [sys.executable, "-m", "invalidation_contracts.cli", "serve", *args]
    with process([*command, "--port", str(port)], port, ready_s=ready_s, log_to=log_to) as ready:
        yield ready


@contextmanager
def bare_uvicorn(spec_json: str, workers: int = 1) -> Iterator[Server]:
    """The app an ``AppSpec`` describes, under ``uvicorn.run(host, port)`` (uvicorn binds)."""
    port = free_port()
    command = [sys.executable, "-c", _BARE, str(port), str(workers)]
    with process(command, port, {"INVALIDATION_CONTRACTS_SERVE_SPEC": spec_json}) as ready:
        yield ready
