"""Plain MCP hosts for the conformance suite: the official TypeScript SDK, the Inspector CLI and
the Python SDK (v2, and v1 in its own environment), each as a real process, and ``serve-mcp`` as a
real process too.

The npm packages are pinned by ``node/package.json`` + ``node/package-lock.json`` and installed
once (``npm ci``) into the cache directory (``$INVALIDATION_CONTRACTS_CACHE``, else the platform's
per-user cache: where the local model is kept), under a folder named for the lock file's digest,
so a changed pin installs afresh and an unchanged one is reused. Node is the machine's. The
Python SDK v1 (which shares the import name ``mcp`` with v2) is installed the same way: a virtual
environment from ``python_v1/requirements.txt`` (every package pinned), under a folder named for
that file's digest.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tests.support.processes import stop

from invalidation_contracts.planners.local.assembly import cache_dir

NODE_DIR = Path(__file__).parent / "node"
TS_HOST = NODE_DIR / "mcp_host.mjs"
PY_HOST = Path(__file__).parent / "mcp_host.py"
PY_V1_HOST = Path(__file__).parent / "mcp_host_v1.py"
PY_V1_PINS = Path(__file__).parent / "python_v1" / "requirements.txt"
#: Seconds one host command may take (a connect spawns a server; a wait is bounded by its own).
ANSWER_TIMEOUT_S = 60.0
#: Seconds ``npm ci`` may take on a cold cache.
INSTALL_TIMEOUT_S = 300.0


class Unavailable(RuntimeError):
    """Node, npm or the pinned packages cannot be had on this machine (the test skips)."""


def _installed_once(kind: str, pins: bytes, install: Callable[[Path], None]) -> Path:
    """The cache folder ``kind/<digest of pins>``, ``install``-ed into on first use: one install
    however many test processes ask (a file lock), reused while the pins are unchanged."""
    target = cache_dir() / kind / hashlib.sha256(pins).hexdigest()[:16]
    done = target / "installed"
    if done.exists():
        return target
    target.mkdir(parents=True, exist_ok=True)
    with open(target / ".lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        if done.exists():
            return target
        try:
            install(target)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
            stderr = getattr(exc, "stderr", "") or ""
            raise Unavailable(f"installing the {kind} hosts failed: {stderr[-400:]}") from exc
        done.write_text("ok\n")
    return target


def _run(argv: list[str], cwd: Path | None = None) -> None:
    subprocess.run(
        argv, cwd=cwd, check=True, capture_output=True, text=True, timeout=INSTALL_TIMEOUT_S
    )


def node_modules() -> Path:
    """The folder whose ``node_modules`` holds the pinned packages (installed on first use)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        raise Unavailable("node and npm are not on PATH (.ci/run installs Debian's nodejs, npm)")

    def install(target: Path) -> None:
        for name in ("package.json", "package-lock.json"):
            shutil.copyfile(NODE_DIR / name, target / name)
        _run([npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"], target)

    return _installed_once("npm", (NODE_DIR / "package-lock.json").read_bytes(), install)


def v1_python() -> Path:
    """The interpreter of a virtual environment holding the Python SDK v1 as pinned by
    ``python_v1/requirements.txt`` (built with this interpreter's ``venv`` on first use)."""

    def install(target: Path) -> None:
        _run([sys.executable, "-m", "venv", "--clear", str(target / "venv")])
        pip = [str(target / "venv" / "bin" / "python"), "-m", "pip", "--disable-pip-version-check"]
        _run([*pip, "install", "--quiet", "--no-deps", "-r", str(PY_V1_PINS)])
        _run([*pip, "check"])  # the pins are whole: nothing was left to resolve

    return _installed_once("pyvenv", PY_V1_PINS.read_bytes(), install) / "venv" / "bin" / "python"


def inspector(
    modules: Path, *args: str, timeout_s: float = 120.0
) -> subprocess.CompletedProcess[str]:
    """Run the pinned MCP Inspector CLI (``--cli`` mode) with ``args``.

    It runs in ``node_modules``: inspector-cli 1.0.3 finds its own package.json by testing
    ``../package.json`` against the working directory, so it fails anywhere else."""
    entry = (
        modules / "node_modules" / "@modelcontextprotocol" / "inspector-cli" / "build" / "cli.js"
    )
    return subprocess.run(
        [shutil.which("node") or "node", str(entry), "--cli", *args],
        cwd=modules / "node_modules",
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env=dict(os.environ),
    )


class LineHost:
    """A host process that takes one JSON command a line and answers one JSON line each."""

    def __init__(self, argv: list[str], env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._lines: queue.Queue[str] = queue.Queue()
        self._stderr: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()
        threading.Thread(target=self._drain, daemon=True).start()

    def _pump(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self._lines.put(line)

    def _drain(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self._stderr = [*self._stderr[-40:], line]

    def ask(self, op: str, timeout_s: float = ANSWER_TIMEOUT_S, **fields: Any) -> dict[str, Any]:
        """Send one command; its answer (``AssertionError`` with the host's stderr on an error)."""
        answer = self.try_ask(op, timeout_s, **fields)
        assert answer["ok"], f"{op}: {answer['error']}"
        return answer

    def try_ask(
        self, op: str, timeout_s: float = ANSWER_TIMEOUT_S, **fields: Any
    ) -> dict[str, Any]:
        """Send one command; its answer, ``ok`` false when the host's SDK raised."""
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps({"op": op, **fields}) + "\n")
        self.process.stdin.flush()
        try:
            return dict(json.loads(self._lines.get(timeout=timeout_s)))
        except queue.Empty:
            raise AssertionError(
                f"{op}: no answer in {timeout_s} s; host stderr: {''.join(self._stderr)[-1500:]}"
            ) from None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.try_ask("close", 10.0)
        with contextlib.suppress(Exception):
            assert self.process.stdin is not None
            self.process.stdin.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)


def ts_host(modules: Path) -> LineHost:
    """A TypeScript SDK host (``node/mcp_host.mjs``)."""
    return LineHost([shutil.which("node") or "node", str(TS_HOST), str(modules)])


def py_host() -> LineHost:
    """A Python SDK host (``mcp_host.py``), with this interpreter and path."""
    return LineHost([sys.executable, str(PY_HOST)], env=dict(os.environ))


def py_v1_host() -> LineHost:
    """A Python SDK v1 host (``mcp_host_v1.py``) in its own environment (``v1_python``); the
    project's path is left out so that ``mcp`` is v1's."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return LineHost([str(v1_python()), str(PY_V1_HOST)], env=env)


def serve_mcp_args(registry: Path, *extra: str) -> list[str]:
    """``serve-mcp`` of acme_billing over ``registry``, as this interpreter runs it."""
    return [
        *("-m", "invalidation_contracts.cli", "serve-mcp", "--domain", "acme_billing"),
        *("--db", str(registry), *extra),
    ]


@contextlib.contextmanager
def serve_mcp_http(registry: Path, *extra: str) -> Iterator[str]:
    """A ``serve-mcp --transport http`` process on a free loopback port; yields its URL."""
    process = subprocess.Popen(
        [sys.executable, *serve_mcp_args(registry, "--transport", "http", "--port", "0", *extra)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        assert process.stderr is not None
        url = None
        for _ in range(50):  # a few lines at most before it listens
            line = process.stderr.readline()
            found = re.search(r"serving MCP at (\S+)", line)
            if found or not line:
                url = found.group(1) if found else None
                break
        assert url is not None, "serve-mcp --transport http never said where it serves"
        threading.Thread(target=process.stderr.read, daemon=True).start()
        yield url
    finally:
        stop(process, grace_s=10)
