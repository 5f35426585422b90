"""Start a provider the ways users do, each in its own process on a free loopback port.

``serve``: the shipped command, ``invalidation-contracts serve --domain … --level … --port …``,
with its own defaults (uvicorn's ``info`` log level and access log; the output is discarded).
``uvicorn``: ``create_app`` under bare ``uvicorn.run`` (it binds the socket itself), logging as
asked: quiet for the load study, uvicorn's defaults where it stands beside ``serve``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import IO

from . import loadgen

ADMIN_TOKEN = "benchmark-only"
"""The admin token every benchmark server accepts (the studies never call an admin route)."""

LAUNCHERS = ("uvicorn", "serve")

#: The bare-uvicorn server: ``create_app`` handed to ``uvicorn.run``, which binds the port itself.
_BARE_UVICORN = f"""
import sys
import uvicorn
from invalidation_contracts.domains import get_domain
from invalidation_contracts.server.app import create_app

domain, level, port, quiet = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
app = create_app(get_domain(domain), level=level, admin_token="{ADMIN_TOKEN}")
options = dict(log_level="warning", access_log=False) if quiet else {{}}
uvicorn.run(app, host="{loadgen.LOOPBACK}", port=port, **options)
"""


@dataclass(slots=True)
class Server:
    """A provider process; ``stop`` ends it (SIGINT, as Ctrl-C would, then SIGKILL)."""

    name: str
    port: int
    process: subprocess.Popen[bytes] = field(repr=False)
    log: IO[bytes] = field(repr=False)
    """The process's stderr (startup lines, errors); stdout, the access log, is discarded."""

    def wait_ready(self, timeout_s: float = 30.0) -> None:
        """Block until the server answers; ``RuntimeError`` with its stderr if it does not."""
        try:
            loadgen.wait_ready(self.port, timeout_s)
        except TimeoutError:
            self.stop()
            self.log.seek(0)
            tail = self.log.read().decode("utf-8", "replace")[-2000:]
            raise RuntimeError(f"{self.name} did not answer on port {self.port}:\n{tail}") from None

    def cpu_seconds(self) -> float | None:
        """CPU time (user + system, every thread) the server process has used; None where
        ``/proc`` does not tell (not Linux). A worker process of ``--workers`` is not counted."""
        try:
            stat = Path(f"/proc/{self.process.pid}/stat").read_text(encoding="ascii")
        except OSError:
            return None
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self, timeout_s: float = 10.0) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout_s)
        self.log.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind((loadgen.LOOPBACK, 0))
        port: int = s.getsockname()[1]
        return port


def serve_command() -> list[str]:
    """The shipped console script beside this interpreter (else ``python -m …cli``)."""
    script = Path(sys.executable).with_name("invalidation-contracts")
    if script.is_file():
        return [str(script)]
    found = shutil.which("invalidation-contracts")
    return [found] if found else [sys.executable, "-m", "invalidation_contracts.cli"]


@cache
def serve_supports_workers() -> bool:
    """Whether this checkout's ``serve`` takes ``--workers``."""
    out = subprocess.run(
        [*serve_command(), "serve", "--help"], capture_output=True, text=True, check=False
    )
    return "--workers" in out.stdout


def start(
    launcher: str,
    level: int,
    *,
    domain: str = "acme_billing",
    workers: int = 1,
    quiet: bool = True,
) -> Server:
    """Start ``domain`` at ``level`` through ``launcher`` (``serve`` or ``uvicorn``).

    ``quiet`` applies to bare uvicorn only; ``serve`` runs with its own defaults. ``workers`` > 1
    is for ``serve`` only.
    """
    port = free_port()
    if launcher == "serve":
        command = [*serve_command(), "serve", "--domain", domain, "--level", str(level)]
        command += ["--port", str(port)]
        if workers != 1:
            command += ["--workers", str(workers)]
        name = "serve" if workers == 1 else f"serve --workers {workers}"
    elif launcher == "uvicorn":
        if workers != 1:
            raise ValueError("bare uvicorn is started with one worker")
        command = [sys.executable, "-c", _BARE_UVICORN, domain, str(level), str(port)]
        command.append("1" if quiet else "0")
        name = "uvicorn"
    else:
        raise ValueError(f"unknown launcher {launcher!r}; expected one of {LAUNCHERS}")
    env = {**os.environ, "INVALIDATION_CONTRACTS_ADMIN_TOKEN": ADMIN_TOKEN}
    log = tempfile.TemporaryFile()
    process = subprocess.Popen(
        command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log
    )
    return Server(name, port, process, log)
