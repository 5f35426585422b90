"""What the FastAPI examples share: their app under a real uvicorn on 127.0.0.1, and a small JSON
client over the standard library, so each runs with the extras it declares (no test client).

    with served(create()) as http:
        reply = http.post("/v1/orders", json={"plan": "basic"})
        reply.status_code, reply.json()
"""

import asyncio
import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from invalidation_contracts.server.http.serve import serving

START_TIMEOUT_S = 30.0


class Reply:
    """One answer: its status, and its body as text or JSON."""

    def __init__(self, status_code: int, body: bytes) -> None:
        self.status_code = status_code
        self.text = body.decode()

    def json(self) -> Any:
        return json.loads(self.text)


class Client:
    """Requests to one served app (``base``: its ``http://127.0.0.1:port``)."""

    def __init__(self, base: str) -> None:
        self.base = base

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Reply:
        url = self.base + path + (f"?{urllib.parse.urlencode(params)}" if params else "")
        data = None if json is None else _dumps(json)
        sent = {"content-type": "application/json", **(headers or {})}
        request = urllib.request.Request(url, data=data, headers=sent, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                return Reply(answer.status, answer.read())
        except urllib.error.HTTPError as error:  # 4xx and 5xx come back as answers too
            with error:
                return Reply(error.code, error.read())

    def get(self, path: str, **options: Any) -> Reply:
        return self.request("GET", path, **options)

    def post(self, path: str, **options: Any) -> Reply:
        return self.request("POST", path, **options)


def _dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


@contextmanager
def served(app: Any) -> Iterator[Client]:
    """Serve ``app`` (its lifespan included) on a free port of 127.0.0.1 in a thread for the
    block; yields a client of it."""
    ready = threading.Event()
    state: dict[str, Any] = {}

    async def run() -> None:
        state["stop"] = stop = asyncio.Event()
        state["loop"] = asyncio.get_running_loop()
        try:
            async with serving(app) as base:
                state["base"] = base
                ready.set()
                await stop.wait()
        except BaseException as exc:  # reported by the caller's thread
            state["error"] = exc
            ready.set()

    thread = threading.Thread(target=asyncio.run, args=(run(),), daemon=True)
    thread.start()
    if not ready.wait(START_TIMEOUT_S) or "error" in state:
        raise RuntimeError("the app did not start") from state.get("error")
    try:
        yield Client(state["base"])
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(START_TIMEOUT_S)
