"""Push over plain HTTP: one watch stream per origin, kept open by the httpx transports.

With ``watch=True`` (or a ``WatchOptions``) a ``ContractTransport`` / ``AsyncContractTransport``
opens ``GET {origin}/contract/watch?since=&epoch=`` (SPEC §8.4) after its first response from an
origin, under the contract location that response's ``Link`` named (``/shop/api/contract/watch``
for a contract mounted there), in a background thread (sync) or task (async). Each ``versions``
event past the memory's position makes it read ``/contract/versions`` through the transport
itself, so the memory evicts what the change made stale — and fetches the feed it needs — while
the agent is idle, before its next request.

What the watch decides (bounds, the events' meaning, the steps, stalls, backoff) is the sans-IO
``client.push``; here are the requests, the thread and the task that carry it out, and the
``Watches`` of a transport. A stream that cannot be kept never fails the agent: the memory goes
on detecting changes from responses (as without a watch).
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import AsyncIterable, Iterable
from typing import TYPE_CHECKING, Protocol, cast

import httpx

from ..client.events import MemoryEvent
from ..client.memory import AsyncFixMemory, FixMemory
from ..client.push import (
    WATCH_PATH,
    Known,
    Pause,
    Refresh,
    WatchCore,
    WatchFailure,
    WatchOptions,
    WatchStep,
    Withhold,
)
from ..client.shared.steps import adrive, drive
from ..client.values import Position
from .extensions import describe

if TYPE_CHECKING:
    from .extensions import Listener


class Watched(Protocol):
    """What a watch thread uses of its ``transport.ContractTransport`` (typed here, so the
    transport imports its watches and the watches never import the transport)."""

    memory: FixMemory
    wrapped: httpx.BaseTransport

    def contract_url(self, origin: str, path: str) -> httpx.URL: ...

    def handle_request(self, request: httpx.Request) -> httpx.Response: ...


class AsyncWatched(Protocol):
    """What a watch task uses of its ``transport.AsyncContractTransport``."""

    memory: AsyncFixMemory
    wrapped: httpx.AsyncBaseTransport

    def contract_url(self, origin: str, path: str) -> httpx.URL: ...

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response: ...


VERSIONS_PATH = "/contract/versions"


def stream_request(core: WatchCore, position: Position, url: httpx.URL) -> httpx.Request:
    """The request that opens ``core``'s stream from the memory's ``position`` at ``url`` (the
    origin's watch route, where its contract lives)."""
    params: dict[str, str] = {"timeout": str(core.options.stream_timeout_s)}
    if position.seq is not None:
        params["since"] = str(position.seq)
        if position.epoch:
            params["epoch"] = position.epoch
    c, stall = core.options.connect_timeout_s, core.options.stall_timeout_s
    return httpx.Request(
        "GET",
        url,
        params=params,
        headers={"accept": "text/event-stream", "cache-control": "no-store", **core.forwarded},
        extensions={"timeout": {"connect": c, "read": stall, "write": c, "pool": c}},
    )


def versions_request(core: WatchCore, url: httpx.URL) -> httpx.Request:
    """The read at ``url`` (the origin's ``/contract/versions``) that brings the memory to the
    announced position (through the transport)."""
    return httpx.Request(
        "GET",
        url,
        headers={"accept": "application/json", **core.forwarded},
    )


def opened(core: WatchCore, response: httpx.Response, since: int | None) -> None:
    """Raise ``WatchFailure`` unless ``response`` opened an event stream."""
    core.check(response.status_code, response.headers.get("content-type", ""), since)


class SyncWatch:
    """One origin's watch in a daemon thread, for ``ContractTransport``."""

    def __init__(self, transport: Watched, core: WatchCore) -> None:
        self.transport = transport
        self.core = core
        self._stop = threading.Event()
        self._progress = threading.Condition()
        self._response: httpx.Response | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"contract-watch {core.origin}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def close(self, timeout_s: float = 2.0) -> None:
        self._stop.set()
        _shutdown(self._response)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout_s)

    def caught_up(self, seq: int, timeout_s: float) -> bool:
        """Wait until the watch has heard of position ``seq`` and the memory has acted on it
        (evictions done, feed fetched); False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._progress:
            while self.core.seen < seq:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._progress.wait(left)
        return True

    def _saw(self, seq: int) -> None:
        with self._progress:
            self.core.seen = max(self.core.seen, seq)
            self._progress.notify_all()

    def _run(self) -> None:
        core = self.core
        while not self._stop.is_set():
            try:
                self._stream()
            except WatchFailure as failure:
                if failure.refresh and not self._stop.is_set():
                    self._refresh()
                wait = core.failed(failure)
                if wait is None:
                    return
                self._stop.wait(wait)
            except httpx.HTTPError as exc:
                if self._stop.is_set():
                    return
                wait = core.failed(WatchFailure(describe(exc)))
                self._stop.wait(wait if wait is not None else 0)
            except Exception as exc:  # a watch never fails the agent: it falls back, and says so
                if self._stop.is_set():
                    return
                core.failed(WatchFailure(f"the watch stopped: {describe(exc)}", permanent=True))
                return

    def _stream(self) -> None:
        core = self.core
        position = self.transport.memory.position(core.origin)
        url = self.transport.contract_url(core.origin, WATCH_PATH)
        response = self.transport.wrapped.handle_request(stream_request(core, position, url))
        self._response = response
        try:
            if self._stop.is_set():
                return
            opened(core, response, position.seq)
            parser = core.parser()
            last = time.monotonic()
            # A sync transport answers with a sync stream (httpx types the field as either).
            for chunk in cast(Iterable[bytes], response.stream):
                if self._stop.is_set():
                    return
                events, last, progressed = core.feed(parser, chunk, last)
                drive(core.announced(events), self._step, ())
                if progressed:
                    core.healthy()
        finally:
            self._response = None
            response.close()

    def _step(self, step: WatchStep) -> Position | None:
        if isinstance(step, Known):
            known: Position = self.transport.memory.position(self.core.origin)
            return None if self._stop.is_set() else known
        if isinstance(step, Withhold):
            self.transport.memory.announced(self.core.origin, step.seq, step.epoch)
            return None
        if isinstance(step, Pause):
            self._stop.wait(step.seconds)
        elif isinstance(step, Refresh):
            self._refresh()
        else:
            self._saw(step.seq)
        return None

    def _refresh(self) -> None:
        url = self.transport.contract_url(self.core.origin, VERSIONS_PATH)
        self.transport.handle_request(versions_request(self.core, url)).close()


class AsyncWatch:
    """One origin's watch in an asyncio task, for ``AsyncContractTransport``."""

    def __init__(self, transport: AsyncWatched, core: WatchCore) -> None:
        self.transport = transport
        self.core = core
        self._task: asyncio.Task[None] | None = None
        self._progress: asyncio.Event | None = None

    def start(self) -> None:
        self._progress = asyncio.Event()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def aclose(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass

    async def caught_up(self, seq: int, timeout_s: float) -> bool:
        """Wait until the watch has heard of position ``seq`` and the memory has acted on it
        (evictions done, feed fetched); False on timeout."""
        try:
            async with asyncio.timeout(timeout_s):
                while self.core.seen < seq:
                    if self._progress is None:
                        return False
                    await self._progress.wait()
        except TimeoutError:
            return False
        return True

    def _saw(self, seq: int) -> None:
        self.core.seen = max(self.core.seen, seq)
        progress, self._progress = self._progress, asyncio.Event()
        if progress is not None:
            progress.set()

    async def _run(self) -> None:
        core = self.core
        while True:
            try:
                await self._stream()
            except WatchFailure as failure:
                if failure.refresh:
                    await self._refresh()
                wait = core.failed(failure)
                if wait is None:
                    return
                await asyncio.sleep(wait)
            except httpx.HTTPError as exc:
                wait = core.failed(WatchFailure(describe(exc)))
                await asyncio.sleep(wait if wait is not None else 0)
            except Exception as exc:  # a watch never fails the agent: it falls back, and says so
                core.failed(WatchFailure(f"the watch stopped: {describe(exc)}", permanent=True))
                return

    async def _stream(self) -> None:
        core = self.core
        position = await self.transport.memory.position(core.origin)
        url = self.transport.contract_url(core.origin, WATCH_PATH)
        request = stream_request(core, position, url)
        response = await self.transport.wrapped.handle_async_request(request)
        try:
            opened(core, response, position.seq)
            parser = core.parser()
            last = time.monotonic()
            async for chunk in cast(AsyncIterable[bytes], response.stream):
                events, last, progressed = core.feed(parser, chunk, last)
                await adrive(core.announced(events), self._step, ())
                if progressed:
                    core.healthy()
        finally:
            await response.aclose()

    async def _step(self, step: WatchStep) -> Position | None:
        if isinstance(step, Known):
            known: Position = await self.transport.memory.position(self.core.origin)
            return known
        if isinstance(step, Withhold):
            self.transport.memory.announced(self.core.origin, step.seq, step.epoch)
            return None
        if isinstance(step, Pause):
            await asyncio.sleep(step.seconds)
        elif isinstance(step, Refresh):
            await self._refresh()
        else:
            self._saw(step.seq)
        return None

    async def _refresh(self) -> None:
        url = self.transport.contract_url(self.core.origin, VERSIONS_PATH)
        response = await self.transport.handle_async_request(versions_request(self.core, url))
        await response.aclose()


def _shutdown(response: httpx.Response | None) -> None:
    """Wake a thread blocked reading ``response`` (closing the socket alone does not)."""
    if response is None:
        return
    stream = response.extensions.get("network_stream")
    sock = stream.get_extra_info("socket") if stream is not None else None
    if isinstance(sock, socket.socket):
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Watches:
    """A transport's watch streams: at most one per origin, opened after its first response."""

    def __init__(
        self,
        transport: Watched | AsyncWatched,
        options: WatchOptions | None,
        listener: Listener | None,
    ) -> None:
        self.transport = transport
        self.options = options
        self.listener = listener
        self.events: list[MemoryEvent] = []
        """The last ``WatchOpened``/``WatchLost`` events (at most 100), oldest first."""
        self._by_origin: dict[str, SyncWatch | AsyncWatch] = {}
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.options is not None and bool(self.transport.memory.strategy.invalidates)

    def ensure(self, origin: str, request: httpx.Request, *, asynchronous: bool = False) -> None:
        """Open ``origin``'s watch unless it is open (or was given up)."""
        options = self.options
        if options is None or origin in self._by_origin or not self.enabled:
            return
        with self._lock:
            if origin in self._by_origin:
                return
            core = WatchCore(origin, options, request.headers, self._emit)
            watch: SyncWatch | AsyncWatch = (
                AsyncWatch(cast("AsyncWatched", self.transport), core)
                if asynchronous
                else SyncWatch(cast("Watched", self.transport), core)
            )
            self._by_origin[origin] = watch
        watch.start()

    def of(self, origin: str) -> SyncWatch | AsyncWatch | None:
        return self._by_origin.get(origin)

    def is_open(self, origin: str) -> bool:
        watch = self._by_origin.get(origin)
        return watch is not None and watch.core.open

    def caught_up(self, origin: str, seq: int, *, timeout_s: float = 10.0) -> bool:
        """Sync transports: wait until ``origin``'s memory has read ``seq`` (False: timeout)."""
        watch = self._by_origin.get(origin)
        if not isinstance(watch, SyncWatch):
            raise ValueError(f"no sync watch is open on {origin}")
        return watch.caught_up(seq, timeout_s)

    async def acaught_up(self, origin: str, seq: int, *, timeout_s: float = 10.0) -> bool:
        """Async transports: wait until ``origin``'s memory has read ``seq`` (False: timeout)."""
        watch = self._by_origin.get(origin)
        if not isinstance(watch, AsyncWatch):
            raise ValueError(f"no async watch is open on {origin}")
        return await watch.caught_up(seq, timeout_s)

    def close(self) -> None:
        with self._lock:
            watches, self._by_origin = list(self._by_origin.values()), {}
        for watch in watches:
            if isinstance(watch, SyncWatch):
                watch.close()

    async def aclose(self) -> None:
        with self._lock:
            watches, self._by_origin = list(self._by_origin.values()), {}
        for watch in watches:
            if isinstance(watch, AsyncWatch):
                await watch.aclose()

    def _emit(self, event: MemoryEvent) -> None:
        self.events = [*self.events[-99:], event]
        if callable(self.listener):
            self.listener(event)


def watches(client: httpx.Client | httpx.AsyncClient) -> Watches:
    """The watch streams of a ``contract_client`` / ``async_contract_client``."""
    found = getattr(getattr(client, "_transport", None), "watches", None)
    if not isinstance(found, Watches):
        raise ValueError("this client's transport keeps no watch streams")
    return found
