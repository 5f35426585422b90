"""A real hostile HTTP server on 127.0.0.1 for client tests: each path answers what a test set.

An answer is a status, headers and a body given as chunks; ``chunked`` sends it without
``Content-Length`` (``Transfer-Encoding: chunked``). The server runs in a thread of the test
process, one thread per connection, and stops with the context manager.
"""

from __future__ import annotations

import threading
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Answer:
    status: int
    body: Callable[[], Iterable[bytes]]
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = False


@dataclass
class HostileServer:
    """``answers[path]`` is a list consumed in order (the last one repeats)."""

    answers: dict[str, list[Answer]] = field(default_factory=dict)
    sent: dict[str, int] = field(default_factory=dict)
    requests: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def origin(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def answer(self, path: str) -> Answer:
        queue = self.answers[path]
        return queue.pop(0) if len(queue) > 1 else queue[0]

    def __enter__(self) -> HostileServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                if length:
                    self.rfile.read(length)
                path = self.path.split("?")[0]
                owner.requests.append((self.path, dict(self.headers)))
                answer = owner.answer(path)
                self.send_response(answer.status)
                for name, value in answer.headers.items():
                    self.send_header(name, value)
                chunks = answer.body()
                sent = 0
                try:
                    if answer.chunked:
                        self.send_header("transfer-encoding", "chunked")
                        self.end_headers()
                        for chunk in chunks:
                            if chunk:
                                self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                                sent += len(chunk)
                        self.wfile.write(b"0\r\n\r\n")
                    else:
                        data = b"".join(chunks)
                        self.send_header("content-length", str(len(data)))
                        self.end_headers()
                        self.wfile.write(data)
                        sent = len(data)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True
                owner.sent[path] = owner.sent.get(path, 0) + sent

            do_GET = _serve
            do_POST = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()


def compressed(chunks: Iterable[bytes], encoding: str) -> Iterator[bytes]:
    """``chunks`` encoded with ``gzip`` or ``deflate``, streamed."""
    wbits = zlib.MAX_WBITS | 16 if encoding == "gzip" else zlib.MAX_WBITS
    encoder = zlib.compressobj(9, zlib.DEFLATED, wbits)
    for chunk in chunks:
        out = encoder.compress(chunk)
        if out:
            yield out
    yield encoder.flush()


def zeros(total: int, step: int = 1 << 20) -> Iterator[bytes]:
    block = b"0" * step
    for _ in range(total // step):
        yield block


def bomb(decoded: int, encoding: str = "gzip", layers: int = 1) -> bytes:
    """A JSON-looking body of ``decoded`` bytes once decoded, compressed ``layers`` times."""
    data: Iterable[bytes] = [b'{"pad":"', *zeros(decoded), b'"}']
    for _ in range(layers):
        data = list(compressed(data, encoding))
    return b"".join(data)


def nested(depth: int) -> bytes:
    """A JSON array nested ``depth`` deep."""
    return b"[" * depth + b"]" * depth
