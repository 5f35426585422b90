"""A TCP relay on 127.0.0.1 that a test can make go silent: a network path it controls.

``Relay(connect)`` listens on a free loopback port and forwards every connection it accepts to a
new connection made by ``connect()`` (a PostgreSQL server's Unix socket, say: ``unix_socket``).
A test then breaks the path the way a network does, without a word to either end:

- ``blackhole()``: nothing is forwarded in either direction, on the open connections and on new
  ones (accepted, but not connected onward until forwarding resumes); no socket is closed, so
  neither end sees a FIN or an RST — a black-holed link, a proxy that stopped forwarding;
- ``resume()``: forwarding starts again; what waited in the sockets' buffers goes through;
- ``cut()``: every connection open now is closed on both sides (a proxy that drops its stale
  connections, or one whose idle cut resets them); new ones are forwarded as before;
- ``forget()``: the connections open now go silent for good, still open, while new ones are
  forwarded (a proxy or NAT whose idle cut forgot a flow without telling either end);
  ``forget(backend=pid)``: only the connection to that PostgreSQL backend (its pid, read from the
  server's BackendKeyData as it passed), a single flow dropped silently.

One thread, a selector, bounded: at most ``max_connections`` at once (more are refused), and
``close()`` ends the thread and every socket. Loopback only; nothing leaves the machine.
"""

from __future__ import annotations

import contextlib
import glob
import selectors
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CHUNK = 65536
HEAD = 4096
"""How much of what a server sends first a relay keeps (to find its backend's pid)."""


def backend_pid(head: bytes) -> int | None:
    """The backend pid in a PostgreSQL server's first bytes (after a refused SSL or GSS request's
    one-byte ``N``): its BackendKeyData message; None until it has passed."""
    i = 0
    while head[i : i + 1] == b"N":
        i += 1
    while i + 5 <= len(head):
        kind, size = head[i : i + 1], int.from_bytes(head[i + 1 : i + 5], "big")
        if kind == b"K":
            body = head[i + 5 : i + 9]
            return int.from_bytes(body, "big") if len(body) == 4 else None
        i += 1 + size
    return None


def unix_socket(directory: str | Path) -> Callable[[], socket.socket]:
    """A ``connect`` for a PostgreSQL server listening on a Unix socket in ``directory``."""
    [path] = [p for p in glob.glob(str(Path(directory) / ".s.PGSQL.*")) if not p.endswith(".lock")]

    def connect() -> socket.socket:
        upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        upstream.connect(path)
        return upstream

    return connect


@dataclass(eq=False)
class _Pair:
    client: socket.socket
    upstream: socket.socket | None = None
    forgotten: bool = False
    head: bytes = b""

    def peer(self, sock: socket.socket) -> socket.socket | None:
        return self.upstream if sock is self.client else self.client

    def sockets(self) -> list[socket.socket]:
        return [s for s in (self.client, self.upstream) if s is not None]


class Relay:
    """A loopback TCP relay that forwards, goes silent, or cuts its connections on command."""

    def __init__(self, connect: Callable[[], socket.socket], *, max_connections: int = 64) -> None:
        self._connect = connect
        self._max = max_connections
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._wake_r, self._wake_w = socket.socketpair()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ)
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._pairs: list[_Pair] = []
        self._lock = threading.Lock()
        self._commands: list[tuple[str, int | None, threading.Event]] = []
        self._forwarding = True
        self._closed = False
        self.accepted = 0
        self._thread = threading.Thread(target=self._run, name="test-relay", daemon=True)
        self._thread.start()

    def url(self, database_url: str) -> str:
        """``database_url`` (``postgresql://user:…@…/name?…``) reached through this relay."""
        head, _, _ = database_url.partition("?")
        user = head.split("://", 1)[1].split("@", 1)[0].split(":", 1)[0]
        name = head.rsplit("/", 1)[1]
        return f"postgresql://{user}@127.0.0.1:{self.port}/{name}"

    def blackhole(self) -> None:
        self._command("blackhole")

    def resume(self) -> None:
        self._command("resume")

    def cut(self) -> None:
        self._command("cut")

    def forget(self, *, backend: int | None = None) -> None:
        self._command("forget", backend)

    def backends(self) -> list[int]:
        """The backend pids of the connections forwarded now (those whose key has passed)."""
        with self._lock:
            found = [backend_pid(pair.head) for pair in self._pairs]
        return [pid for pid in found if pid is not None]

    @property
    def open_connections(self) -> int:
        with self._lock:
            return len(self._pairs)

    def close(self) -> None:
        if not self._closed:
            self._command("close")
            self._thread.join(10)
            self._closed = True

    def __enter__(self) -> Relay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the relay's thread ------------------------------------------------------------------

    def _command(self, what: str, backend: int | None = None) -> None:
        """Hand ``what`` to the relay's thread and wait until it has been carried out."""
        done = threading.Event()
        with self._lock:
            self._commands.append((what, backend, done))
        self._wake_w.send(b"x")
        assert done.wait(10), f"the relay did not {what}"

    def _run(self) -> None:
        try:
            while True:
                for key, _ in self._selector.select(timeout=1.0):
                    sock = key.fileobj
                    if sock is self._wake_r:
                        if self._carry_out():
                            return
                    elif sock is self._listener:
                        self._accept()
                    else:
                        self._forward(key.data, sock)  # type: ignore[arg-type]
        finally:
            for pair in list(self._pairs):
                self._drop(pair)
            self._selector.close()
            self._listener.close()
            self._wake_r.close()
            self._wake_w.close()

    def _carry_out(self) -> bool:
        """Run the pending commands; True on ``close``."""
        with contextlib.suppress(BlockingIOError):
            self._wake_r.recv(CHUNK)
        with self._lock:
            commands, self._commands = self._commands, []
        stop = False
        for what, backend, _ in commands:
            if what == "forget" and backend is not None:
                for pair in self._pairs:
                    if backend_pid(pair.head) == backend:
                        self._silence(pair)
                        pair.forgotten = True
            elif what == "blackhole" and self._forwarding:
                self._forwarding = False
                for pair in self._pairs:
                    self._silence(pair)
            elif what == "resume" and not self._forwarding:
                self._forwarding = True
                for pair in list(self._pairs):
                    if not pair.forgotten:
                        self._start(pair)
            elif what == "forget":
                for pair in self._pairs:
                    self._silence(pair)
                    pair.forgotten = True
                self._forwarding = True
            elif what == "cut":
                for pair in list(self._pairs):
                    self._drop(pair)
            elif what == "close":
                stop = True
        for _, _, done in commands:
            done.set()
        return stop

    def _accept(self) -> None:
        try:
            client, _ = self._listener.accept()
        except BlockingIOError:
            return
        if len(self._pairs) >= self._max:
            client.close()
            return
        self.accepted += 1
        pair = _Pair(client)
        with self._lock:
            self._pairs.append(pair)
        if self._forwarding:
            self._start(pair)

    def _start(self, pair: _Pair) -> None:
        """Forward ``pair`` (connecting onward first if it waited through a black hole)."""
        if pair.upstream is None:
            try:
                pair.upstream = self._connect()
            except OSError:
                self._drop(pair)
                return
        for sock in pair.sockets():
            sock.setblocking(True)
            self._selector.register(sock, selectors.EVENT_READ, pair)

    def _silence(self, pair: _Pair) -> None:
        for sock in pair.sockets():
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)

    def _forward(self, pair: _Pair, sock: socket.socket) -> None:
        silent = not self._forwarding or pair.forgotten
        if silent or pair not in self._pairs:  # silenced or cut earlier in this round
            return
        peer = pair.peer(sock)
        try:
            data = sock.recv(CHUNK)
            if sock is pair.upstream and len(pair.head) < HEAD:
                pair.head += data[: HEAD - len(pair.head)]
            if data and peer is not None:
                peer.sendall(data)
        except OSError:
            data = b""
        if not data:
            self._drop(pair)

    def _drop(self, pair: _Pair) -> None:
        with self._lock:
            if pair not in self._pairs:
                return
            self._pairs.remove(pair)
        for sock in pair.sockets():
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
            with contextlib.suppress(OSError):
                sock.close()
