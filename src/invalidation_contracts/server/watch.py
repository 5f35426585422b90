"""The watch stream's core: which positions a watcher is told of, and when (no HTTP here).

``GET /contract/watch`` (SPEC §8.4) follows the Kubernetes watch model: the client names the
position it knows (``since`` and ``epoch``); the server tells it of every later position as one
Server-Sent Event (``versions``, ``id`` = the ``contract_seq``), sends a heartbeat when nothing
moved for a while, and ends the stream after the client's ``timeout`` so connections rotate. A
position of another history ends the stream with an ``error`` event holding a 410
``resync-required`` problem. Moves are coalesced: a watcher that was busy is told only of the
newest position, which is all it needs (it reads the changes feed from its own position).

``WatchHub`` is fed by ``Registry.subscribe``: it runs for a write in this worker and for changes
adopted from other workers (``serve --workers N`` and a retrofitted app alike), in the writer's
thread, so it only wakes each stream's event loop.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

from ..protocol.problems import ProblemType, ProtocolError
from .registry import Registry
from .state import RegistryState

#: Seconds between heartbeats of a stream that has nothing to say.
WATCH_HEARTBEAT_S = 10.0
#: The longest a stream stays open (seconds) before the server ends it (clients reconnect).
MAX_WATCH_TIMEOUT_S = 3600
#: A stream's default lifetime (seconds) when the client names none.
DEFAULT_WATCH_TIMEOUT_S = 300
#: Streams one worker keeps open at once; beyond, a new watch is answered 503.
MAX_WATCH_STREAMS = 1024
#: Streams one client (its address) may hold in one worker; beyond, its new watch is 503.
MAX_WATCH_STREAMS_PER_CLIENT = 64
#: Seconds a refused watcher is told to wait (``Retry-After``).
WATCH_RETRY_AFTER_S = 5
#: Reconnection delay the stream advises (SSE ``retry``, milliseconds).
RETRY_MS = 1000


def versions_event(seq: int, epoch: str) -> bytes:
    """One ``versions`` event: the position ``seq`` of history ``epoch``."""
    data = json.dumps({"contract_seq": seq, "contract_epoch": epoch}, separators=(",", ":"))
    return f"event: versions\nid: {seq}\ndata: {data}\n\n".encode()


def error_event(problem: dict[str, Any]) -> bytes:
    """The ``error`` event that ends a stream (a problem document, one line)."""
    return f"event: error\ndata: {json.dumps(problem, separators=(',', ':'))}\n\n".encode()


HEARTBEAT = b": heartbeat\n\n"


class WatchSlot:
    """One stream's place in its hub: claimed before the response starts (so a refusal is a
    503, not a broken stream), released once when the stream ends or is dropped unstarted."""

    __slots__ = ("__weakref__", "_hub", "_token", "event")

    def __init__(self, hub: WatchHub, token: object, event: asyncio.Event) -> None:
        self._hub = hub
        self._token = token
        self.event = event
        """Set whenever the registry's state moves."""

    def release(self) -> None:
        self._hub._release(self._token)


class WatchHub:
    """Wakes every open stream when the registry's state moves; bounds how many are open, in
    all and per client."""

    def __init__(
        self,
        registry: Registry,
        *,
        max_streams: int = MAX_WATCH_STREAMS,
        max_per_client: int = MAX_WATCH_STREAMS_PER_CLIENT,
    ) -> None:
        self.registry = registry
        self.max_streams = max_streams
        self.max_per_client = max_per_client
        self._lock = threading.Lock()
        self._waiters: dict[object, tuple[asyncio.AbstractEventLoop, asyncio.Event]] = {}
        self._owners: dict[object, str] = {}
        self._per_client: Counter[str] = Counter()
        self._unsubscribe: Callable[[], None] | None = None

    @property
    def open_streams(self) -> int:
        return len(self._waiters)

    def claim(self, client: str = "") -> WatchSlot:
        """A slot for one stream of ``client`` (its address); ``ProtocolError`` 503 with
        ``Retry-After`` when this worker's streams, or this client's, are at their cap."""
        loop = asyncio.get_running_loop()
        event = asyncio.Event()
        token = object()
        with self._lock:
            if len(self._waiters) >= self.max_streams:
                raise self._full(f"this worker already serves {self.max_streams} watch streams")
            if self._per_client[client] >= self.max_per_client:
                raise self._full(
                    f"this client already holds {self.max_per_client} watch streams here"
                )
            if self._unsubscribe is None:
                self._unsubscribe = self.registry.subscribe(self._moved)
            self._waiters[token] = (loop, event)
            self._owners[token] = client
            self._per_client[client] += 1
        return WatchSlot(self, token, event)

    @staticmethod
    def _full(detail: str) -> ProtocolError:
        return ProtocolError(
            ProblemType.REGISTRY_UNAVAILABLE,
            detail,
            headers={"Retry-After": str(WATCH_RETRY_AFTER_S)},
        )

    def _release(self, token: object) -> None:
        with self._lock:
            if self._waiters.pop(token, None) is None:
                return
            client = self._owners.pop(token)
            self._per_client[client] -= 1
            if self._per_client[client] <= 0:
                del self._per_client[client]

    def _moved(self, before: RegistryState, after: RegistryState) -> None:
        """The registry's listener (writer's thread): wake every stream's loop, nothing more."""
        with self._lock:
            waiters = list(self._waiters.values())
        for loop, event in waiters:
            try:
                loop.call_soon_threadsafe(event.set)
            except RuntimeError:  # that loop is closed: its stream is ending
                pass


async def watch_stream(
    slot: WatchSlot,
    current: Callable[[], RegistryState],
    *,
    since: int | None,
    epoch: str,
    timeout_s: float,
    heartbeat_s: float = WATCH_HEARTBEAT_S,
    available: Callable[[], bool] = lambda: True,
) -> AsyncIterator[bytes]:
    """The bytes of one stream: a ``versions`` event for each new position after ``since``
    (coalesced), heartbeats, and an ``error`` event if the history is replaced or the worker
    cannot vouch for its state. Ends after ``timeout_s``, releasing ``slot``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    told = -1 if since is None else since
    wake = slot.event
    try:
        yield f"retry: {RETRY_MS}\n\n".encode() + HEARTBEAT  # the client sees a live stream
        while True:
            wake.clear()
            if not available():
                problem = ProtocolError(
                    ProblemType.REGISTRY_UNAVAILABLE, "this worker cannot read the registry"
                ).to_problem()
                yield error_event(problem.model_dump(exclude_none=True))
                return
            state = current()
            if state.epoch != epoch:
                problem = ProtocolError(
                    ProblemType.RESYNC_REQUIRED,
                    f"the history {epoch!r} was replaced by {state.epoch!r}",
                ).to_problem()
                yield error_event(problem.model_dump(exclude_none=True))
                return
            if state.seq > told:
                told = state.seq
                yield versions_event(state.seq, state.epoch)
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            try:
                await asyncio.wait_for(wake.wait(), min(heartbeat_s, remaining))
            except TimeoutError:
                if deadline - loop.time() > 0:
                    yield HEARTBEAT
    finally:
        slot.release()
