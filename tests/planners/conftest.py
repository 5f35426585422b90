"""A scripted stand-in HTTP server for the vendor adapters: a real socket, scripted replies."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn


@dataclass
class Reply:
    status: int
    body: Any
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


class StandIn:
    """An ASGI app that answers each request with the next scripted reply and records requests."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Seen] = []
        self.url = ""

    def reply(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
        """Queue one reply: a dict is sent as JSON, a str as plain text."""
        self.replies.append(Reply(status, body, dict(headers or {})))

    def reset(self) -> None:
        self.replies.clear()
        self.requests.clear()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        raw = b"".join(chunks)
        try:
            body = json.loads(raw) if raw else None
        except json.JSONDecodeError:
            body = raw.decode(errors="replace")
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        self.requests.append(Seen(scope["method"], scope["path"], headers, body))
        reply = (
            self.replies.popleft()
            if self.replies
            else Reply(
                418,
                {"error": {"message": "stand-in: no reply scripted"}},
                {"x-should-retry": "false"},
            )
        )
        payload = (
            reply.body.encode() if isinstance(reply.body, str) else json.dumps(reply.body).encode()
        )
        content_type = "text/plain" if isinstance(reply.body, str) else "application/json"
        response_headers = [(b"content-type", content_type.encode())]
        response_headers += [(k.encode(), v.encode()) for k, v in reply.headers.items()]
        await send(
            {"type": "http.response.start", "status": reply.status, "headers": response_headers}
        )
        await send({"type": "http.response.body", "body": payload})


@pytest.fixture(scope="module")
def _server() -> Any:
    app = StandIn()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("stand-in server did not start")
        time.sleep(0.01)
    app.url = f"http://127.0.0.1:{port}"
    yield app
    server.should_exit = True
    thread.join(timeout=5)
    sock.close()


@pytest.fixture
def standin(_server: StandIn) -> StandIn:
    """The module's stand-in server, with an empty script and no recorded requests."""
    _server.reset()
    yield _server
    _server.reset()
