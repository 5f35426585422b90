"""Server processes for the studies that drive the shipped command: started, awaited, stopped.

``serve_command`` runs ``python -m invalidation_contracts.cli serve ...`` as a user would;
``bare_uvicorn`` runs the same app under ``uvicorn.run(host, port)`` (uvicorn binds the socket),
the baseline the keep-alive study compares ``serve`` against.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager

from . import loadgen
from .provider_load import free_port

ADMIN_TOKEN = "benchmark-only"
ENV = {"INVALIDATION_CONTRACTS_ADMIN_TOKEN": ADMIN_TOKEN}

_BARE = """
import sys, uvicorn
from invalidation_contracts.server.http.launch import FACTORY, AppSpec
port, workers = int(sys.argv[1]), int(sys.argv[2])
if workers == 1:
    uvicorn.run(AppSpec.from_env().build(), host="127.0.0.1", port=port, log_level="info")
else:
    uvicorn.run(
        FACTORY, factory=True, host="127.0.0.1", port=port, workers=workers, log_level="info"
    )
"""


@contextmanager
def process(
    command: Sequence[str], port: int, env: Mapping[str, str] | None = None
) -> Iterator[int]:
    """Run ``command`` (a server on ``port``) until the block ends; yield the port once ready."""
    proc = subprocess.Popen(
        list(command),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **ENV, **(env or {})},
    )
    try:
        loadgen.wait_ready(port, timeout_s=90.0)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@contextmanager
def serve_command(*args: str) -> Iterator[int]:
    """``invalidation-contracts serve ARGS`` on a free loopback port."""
    port = free_port()
    command = [sys.executable, "-m", "invalidation_contracts.cli", "serve", *args]
    with process([*command, "--port", str(port)], port) as ready:
        yield ready


@contextmanager
def bare_uvicorn(spec_json: str, workers: int = 1) -> Iterator[int]:
    """The app an ``AppSpec`` describes, under ``uvicorn.run(host, port)`` (uvicorn binds)."""
    port = free_port()
    command = [sys.executable, "-c", _BARE, str(port), str(workers)]
    with process(command, port, {"INVALIDATION_CONTRACTS_SERVE_SPEC": spec_json}) as ready:
        yield ready
