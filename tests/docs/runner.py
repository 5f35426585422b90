"""Runs the docs' shell commands as a reader runs them, in a temporary folder, bounded.

Only three things are rewritten: a server command (``serve``, ``serve-mcp --transport http``,
``uvicorn``) listens on a free 127.0.0.1 port instead of the one the page names, and the block's
later commands reach it there (``localhost:8000``, ``127.0.0.1:8000`` become that port); a
``postgresql://…@db/…`` URL becomes the test's own PostgreSQL database; ``curl`` gets ``--fail``,
so an HTTP error is a failed command. ``export NAME=VALUE`` sets the block's environment and
``$NAME`` is expanded from it, as a shell would.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from .snippets import ROOT, Command

#: The most of a command's output a failure message shows (the files themselves are bounded by
#: the command's timeout; a docs command prints little).
TAIL = 3000
POSTGRES_IN_DOCS = re.compile(r"postgresql://[^\s'\"]*@db/\w+")


@dataclass
class Server:
    """A server command running in the background, and where it listens."""

    process: subprocess.Popen[bytes]
    url: str
    doc_port: int
    log: Path


@dataclass
class Folder:
    """A reader's working folder: the checkout's top-level entries linked, so relative paths of
    the docs (``docs/examples/…``) resolve while everything a command writes stays here."""

    path: Path
    env: dict[str, str]
    postgres_url: str | None = None
    servers: list[Server] = field(default_factory=list)

    @classmethod
    def make(cls, path: Path, pythonpath: list[str]) -> Folder:
        for entry in ROOT.iterdir():
            if entry.name in (
                "docs",
                "scenarios",
                "tests",
                "benchmarks",
                "src",
                "pyproject.toml",
                "deploy",
            ):
                (path / entry.name).symlink_to(entry)
        shims = path / ".bin"
        shims.mkdir()
        for name, target in {
            "invalidation-contracts": "-m invalidation_contracts.cli",
            "python": "",
            "uvicorn": "-m uvicorn",
        }.items():
            shim = shims / name
            shim.write_text(f'#!/bin/sh\nexec {sys.executable} {target} "$@"\n')
            shim.chmod(0o755)
        env = {
            **os.environ,
            "PATH": f"{shims}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(pythonpath),
            "XDG_STATE_HOME": str(path / ".state"),  # serve's default history stays here
            "COLUMNS": "100",
        }
        return cls(path, env)

    # --- rewriting -----------------------------------------------------------------------------

    def words(self, command: Command) -> list[str]:
        """The command's words as this folder runs them: variables expanded, URLs rewritten."""
        words = [self._expand(word) for word in command.words]
        if self.postgres_url is not None:
            words = [POSTGRES_IN_DOCS.sub(self.postgres_url, word) for word in words]
        for server in self.servers:
            here = f"127.0.0.1:{server.url.rsplit(':', 1)[1].split('/')[0]}"
            pattern = re.compile(rf"\b(localhost|127\.0\.0\.1):{server.doc_port}\b")
            words = [pattern.sub(here, word) for word in words]
        if words[0] == "curl":
            words.insert(1, "--fail")
        return words

    def assignments(self, command: Command) -> dict[str, str]:
        found = {}
        for assignment in command.env:
            name, _, value = assignment.partition("=")
            found[name] = self._expand(value)
            if self.postgres_url is not None:
                found[name] = POSTGRES_IN_DOCS.sub(self.postgres_url, found[name])
        return found

    def _expand(self, word: str) -> str:
        return re.sub(r"\$\{?([A-Z_][A-Z0-9_]*)\}?", lambda m: self.env.get(m[1], m[0]), word)

    # --- running -------------------------------------------------------------------------------

    def run(self, command: Command, *, timeout: float = 180) -> str:
        """Run one command to its end; its output when it exits 0, else a failure (its tail)."""
        if command.words[0] == "export":
            for assignment in command.words[1:]:
                name, _, value = assignment.partition("=")
                self.env[name] = self._expand(value)
            return ""
        words = self.words(command)
        log = self.path / f".log-{len(list(self.path.glob('.log-*')))}"
        with log.open("wb") as out:
            try:
                done = subprocess.run(
                    words,
                    cwd=self.path,
                    env={**self.env, **self.assignments(command)},
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    timeout=timeout,
                    check=False,
                )
            except subprocess.TimeoutExpired:
                raise AssertionError(
                    f"`{command.line}` ran past {timeout} s:\n{tail(log)}"
                ) from None
        assert done.returncode == 0, (
            f"`{command.line}` exited {done.returncode} (ran as {words}):\n{tail(log)}"
        )
        return _text(log)

    def start(self, command: Command, *, timeout: float = 90) -> Server:
        """Start a server command on a free port; return once it said where it listens and a
        first request got an answer."""
        words = self.words(command)
        doc_port = int(_option(words, "--port") or 8000)
        port = free_port()
        if "--port" in words:
            words[words.index("--port") + 1] = str(port)
        else:
            words += ["--port", str(port)]
        log = self.path / f".server-{len(self.servers)}"
        with log.open("wb") as out:
            process = subprocess.Popen(
                words,
                cwd=self.path,
                env={**self.env, **self.assignments(command)},
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        server = Server(process, "", doc_port, log)
        self.servers.append(server)
        deadline = time.monotonic() + timeout
        while (found := re.search(rf"http://[\w.:\[\]]+:{port}\S*", _text(log))) is None:
            assert process.poll() is None, (
                f"`{command.line}` exited {process.returncode} before listening:\n{tail(log)}"
            )
            assert time.monotonic() < deadline, f"`{command.line}` never said where it listens"
            time.sleep(0.1)
        server.url = found[0].rstrip(").,")
        return server

    def stop(self) -> None:
        """Terminate every server of the block (its whole process group), then wait for it."""
        for server in self.servers:
            if server.process.poll() is None:
                os.killpg(server.process.pid, signal.SIGTERM)
            try:
                server.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.process.pid, signal.SIGKILL)
                server.process.wait(timeout=10)


def wait_for_answer(url: str, *, timeout: float = 60) -> httpx.Response:
    """GET ``url`` until the server answers (it may still be starting its workers)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return httpx.get(url, timeout=5)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


@contextmanager
def folder(path: Path, pythonpath: list[str]) -> Iterator[Folder]:
    made = Folder.make(path, pythonpath)
    try:
        yield made
    finally:
        made.stop()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def tail(log: Path) -> str:
    return _text(log)[-TAIL:]


def _text(log: Path) -> str:
    return log.read_bytes().decode("utf-8", "replace")


def _option(words: list[str], name: str) -> str | None:
    return words[words.index(name) + 1] if name in words else None
