"""llama.cpp's server in a child process on 127.0.0.1, and the pool that shares one per config.

:class:`LlamaServer` starts the child (:mod:`.serve`), waits for its ready line, and stops it by
closing its stdin (then SIGTERM, then SIGKILL). :class:`ServerPool` hands the same server to every
planner built for the same configuration (the runs of one grid share one server with a slot per
run) and stops a server when its last user releases it, or, inside :meth:`ServerPool.hold`, when
the hold ends. Every server still running is stopped at interpreter exit.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO

from ..errors import PlannerConfigError, PlannerUnavailableError

DEFAULT_CONTEXT = 8192
DEFAULT_START_TIMEOUT_S = 300.0
_STOP_GRACE_S = 10.0
_LOG_TAIL_BYTES = 16_384
_SERVE_SCRIPT = Path(__file__).with_name("serve.py")


def default_threads() -> int:
    """Half the CPUs, at least one: the harness needs a core too, and llama.cpp's threads wait
    for each other at every step, so a thread that loses its core stalls the rest (measured on
    2 busy cores: 1 thread answered a planner call in 30-53 s, 2 threads in 224 s)."""
    return max(1, (os.cpu_count() or 2) // 2)


@dataclass(frozen=True, slots=True)
class ServerConfig:
    """What a server is started with; equal configs share one server."""

    model_path: str
    alias: str
    parallel: int = 1
    context: int = DEFAULT_CONTEXT
    """Context tokens per slot."""
    threads: int = field(default_factory=lambda: default_threads())
    port: int = 0
    """0: the server binds a free port itself."""


class LlamaServer:
    """One running llama.cpp server child; ``url`` is its OpenAI-compatible base URL."""

    def __init__(self, config: ServerConfig, process: subprocess.Popen[bytes], url: str, log: Path):
        self.config = config
        self.process = process
        self.url = url
        self.log = log

    @classmethod
    def start(
        cls, config: ServerConfig, *, timeout: float = DEFAULT_START_TIMEOUT_S
    ) -> LlamaServer:
        """Start a server and wait until it answers; a clear error when it cannot.

        A port that will not bind or a start past ``timeout`` raises PlannerUnavailableError;
        a model file llama.cpp cannot load raises PlannerConfigError.
        """
        log = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
        # Run as a script, not ``-m``: the child needs xllamacpp only, not this package.
        command = [sys.executable, str(_SERVE_SCRIPT), json.dumps(asdict(config))]
        with log.open("wb") as sink:
            process = subprocess.Popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=sink,
                start_new_session=True,
            )
        assert process.stdout is not None
        line = _read_line(process.stdout, timeout)
        try:
            message = json.loads(line) if line else {}
        except json.JSONDecodeError:
            message = {}
        if "ready" in message:
            return cls(config, process, str(message["ready"]).rstrip("/") + "/v1", log)
        server = cls(config, process, "", log)
        if line is None:
            server.stop()
            raise PlannerUnavailableError(
                f"the llama.cpp server did not load {config.model_path} within {timeout:g} s "
                "(raise it with the planner option start_timeout=SECONDS)"
            )
        process.wait(_STOP_GRACE_S)
        error = _start_error(config, _log_tail(log))
        server.stop()
        raise error

    def alive(self) -> bool:
        return self.process.poll() is None

    def failure(self) -> str:
        """Why the server is gone: its exit status and the last error line of its log."""
        status = self.process.poll()
        reason = _last_error(_log_tail(self.log)) or "no error in its log"
        return (
            f"the llama.cpp server (pid {self.process.pid}, {self.config.alias}) exited with "
            f"status {status} mid-run: {reason}"
        )

    def stop(self) -> None:
        """Close stdin (the child exits), then terminate, then kill; remove the log."""
        if self.alive():
            try:
                if self.process.stdin is not None:
                    self.process.stdin.close()
                self.process.wait(_STOP_GRACE_S)
            except (OSError, subprocess.TimeoutExpired):
                self.process.terminate()
                try:
                    self.process.wait(_STOP_GRACE_S)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None and not stream.closed:
                stream.close()
        self.log.unlink(missing_ok=True)


def _read_line(stream: IO[bytes], timeout: float) -> str | None:
    """The next line of ``stream`` ('' at EOF), or None when none came within ``timeout``."""
    lines: queue.Queue[bytes] = queue.Queue()
    threading.Thread(target=lambda: lines.put(stream.readline()), daemon=True).start()
    try:
        return lines.get(timeout=timeout).decode(errors="replace").strip()
    except queue.Empty:
        return None


def _log_tail(log: Path) -> str:
    try:
        with log.open("rb") as file:
            file.seek(max(0, log.stat().st_size - _LOG_TAIL_BYTES))
            return file.read().decode(errors="replace")
    except OSError:
        return ""


def _last_error(tail: str) -> str | None:
    """The last error line llama.cpp logged (its lines carry `` E `` after the timestamp)."""
    errors = [line.split(" E ", 1)[1].strip() for line in tail.splitlines() if " E " in line]
    return errors[-1] if errors else None


def _start_error(config: ServerConfig, tail: str) -> Exception:
    if "couldn't bind" in tail:
        return PlannerUnavailableError(
            f"port {config.port} on 127.0.0.1 will not bind for the llama.cpp server "
            "(in use? choose another with the planner option port=N, or 0 for a free one)"
        )
    if "failed to load model" in tail:
        return PlannerConfigError(
            f"llama.cpp cannot load {config.model_path}: not a complete GGUF model "
            "(truncated or corrupt?)"
        )
    if "No module named" in tail:
        return PlannerConfigError(
            "xllamacpp is not installed; the local planner needs the 'local' extra: "
            "pip install '.[local]' (in the project's checkout)"
        )
    reason = _last_error(tail) or (tail.strip().splitlines() or ["no output"])[-1]
    return PlannerUnavailableError(f"the llama.cpp server did not start: {reason}")


@dataclass
class _Lease:
    server: LlamaServer
    users: int = 0


class ServerPool:
    """Servers shared by configuration; stopped when unused (and not held) or at exit."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._leases: dict[ServerConfig, _Lease] = {}
        self._holds = 0

    def acquire(
        self, config: ServerConfig, *, timeout: float = DEFAULT_START_TIMEOUT_S
    ) -> LlamaServer:
        """The running server for ``config`` (started when there is none or it died); blocks."""
        with self._lock:
            lease = self._leases.get(config)
            if lease is not None and not lease.server.alive():
                lease.server.stop()
                lease = None
            if lease is None:
                lease = _Lease(LlamaServer.start(config, timeout=timeout))
                self._leases[config] = lease
            lease.users += 1
            return lease.server

    def release(self, config: ServerConfig) -> None:
        """One user fewer; the last one stops the server unless a hold keeps it."""
        with self._lock:
            lease = self._leases.get(config)
            if lease is None:
                return
            lease.users = max(0, lease.users - 1)
            if lease.users == 0 and self._holds == 0:
                del self._leases[config]
                lease.server.stop()

    @contextmanager
    def hold(self) -> Iterator[None]:
        """Keep servers up between users until the block ends (a grid's runs, one after another,
        reuse one server instead of loading the model per run); stop the unused ones then."""
        with self._lock:
            self._holds += 1
        try:
            yield
        finally:
            with self._lock:
                self._holds -= 1
                if self._holds == 0:
                    self._stop_where(lambda lease: lease.users == 0)

    def stop_all(self) -> None:
        """Stop every server, in use or not (interpreter exit)."""
        with self._lock:
            self._stop_where(lambda lease: True)

    def running(self) -> list[LlamaServer]:
        with self._lock:
            return [lease.server for lease in self._leases.values()]

    def _stop_where(self, condition: Callable[[_Lease], bool]) -> None:
        for config, lease in list(self._leases.items()):
            if condition(lease):
                del self._leases[config]
                lease.server.stop()


#: The process's pool: every local planner takes its server from here.
POOL = ServerPool()
atexit.register(POOL.stop_all)
