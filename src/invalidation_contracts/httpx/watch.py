"""Push over plain HTTP: one watch stream per origin, kept open by the httpx transports.

With ``watch=True`` (or a ``WatchOptions``) a ``ContractTransport`` / ``AsyncContractTransport``
opens ``GET {origin}/contract/watch?since=&epoch=`` (SPEC §8.4) after its first response from an
origin, in a background thread (sync) or task (async). Each ``versions`` event past the memory's
position makes it read ``/contract/versions`` through the transport itself, so the memory
evicts what the change made stale — and fetches the feed it needs — while the agent is idle,
before its next request.

Bounded, since the server controls the stream: one stream per origin; reads bounded by
``client.sse`` (line and event size); a stream that sends no event nor heartbeat for
``stall_timeout_s`` is dropped; reconnection backs off exponentially (with jitter) up to
``backoff_max_s``. A stream that cannot be kept never fails the agent: the memory goes on
detecting changes from responses (as without a watch), and a ``WatchLost`` event says why; a
``WatchOpened`` event says when push is back. A server without the route (404/405/406/501) is
not asked again.
"""

from __future__ import annotations

import asyncio
import json
import random
import socket
import threading
import time
from collections.abc import AsyncIterable, Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import httpx

from ..client.events import MemoryEvent, WatchLost, WatchOpened
from ..client.sse import MAX_EVENT_BYTES, MAX_LINE_BYTES, SSEEvent, SSEParser, StreamViolation
from ..client.steps import adrive, drive
from ..client.values import Position
from .extensions import describe

if TYPE_CHECKING:
    from .extensions import Listener
    from .transport import AsyncContractTransport, ContractTransport

WATCH_PATH = "/contract/watch"
#: Reads of ``/contract/versions`` one event may cost: with several workers the read may reach one
#: that has not yet adopted the announced change (it does within its follower's lag, SPEC §8.2).
REFRESH_ATTEMPTS = 20
REFRESH_RETRY_S = 0.025
_MAX_SEQ = 2**53 - 1
_PERMANENT = frozenset({400, 401, 403, 404, 405, 406, 422, 501})
_FORWARDED_HEADERS = ("authorization",)

Emit = Callable[[MemoryEvent], None]


@dataclass(frozen=True, slots=True)
class Known:
    """Step: read the memory's position (sent back; None when the watch is stopping)."""


@dataclass(frozen=True, slots=True)
class Pause:
    """Step: wait ``seconds`` before the next read."""

    seconds: float


@dataclass(frozen=True, slots=True)
class Refresh:
    """Step: read ``/contract/versions`` through the transport, so the memory catches up."""


@dataclass(frozen=True, slots=True)
class Saw:
    """Step: the memory has acted on announced position ``seq``."""

    seq: int


WatchStep = Known | Pause | Refresh | Saw


@dataclass(frozen=True, slots=True)
class WatchOptions:
    """How a transport keeps its watch streams (every field bounds what a server controls)."""

    stall_timeout_s: float = 30.0
    """Drop a stream that sent no event nor heartbeat for this long (servers beat every 10 s)."""
    stream_timeout_s: int = 300
    """The lifetime asked of the server (``timeout``); the stream is then reopened at once."""
    connect_timeout_s: float = 5.0
    backoff_initial_s: float = 0.25
    backoff_max_s: float = 30.0
    max_line_bytes: int = MAX_LINE_BYTES
    max_event_bytes: int = MAX_EVENT_BYTES

    def backoff(self, failures: int) -> float:
        """Seconds before attempt ``failures + 1``: exponential, capped, with ±20 % jitter."""
        base = min(self.backoff_max_s, self.backoff_initial_s * 2 ** max(0, failures - 1))
        return float(base * random.uniform(0.8, 1.2))


def watch_options(watch: bool | WatchOptions | None) -> WatchOptions | None:
    """The options a transport's ``watch`` argument means (None: no watch)."""
    if watch is None or watch is False:
        return None
    return WatchOptions() if watch is True else watch


class WatchFailure(Exception):
    """Why a stream ended badly; ``permanent``: the origin has no watch stream to keep."""

    def __init__(self, detail: str, *, permanent: bool = False, refresh: bool = False) -> None:
        super().__init__(detail)
        self.detail = detail
        self.permanent = permanent
        self.refresh = refresh


@dataclass(frozen=True, slots=True)
class Announced:
    """A position a ``versions`` event announced."""

    seq: int
    epoch: str


class WatchCore:
    """What the sync and async watchers share: the request, the checks, the events' meaning."""

    def __init__(
        self, origin: str, options: WatchOptions, forwarded: Mapping[str, str], emit: Emit
    ) -> None:
        self.origin = origin
        self.options = options
        self.forwarded = {k: v for k, v in forwarded.items() if k.lower() in _FORWARDED_HEADERS}
        self.emit = emit
        self.open = False
        self.lost = False
        self.failures = 0
        self.seen = -1
        self.since: int | None = None

    def request(self, position: Position) -> httpx.Request:
        params: dict[str, str] = {"timeout": str(self.options.stream_timeout_s)}
        if position.seq is not None:
            params["since"] = str(position.seq)
            if position.epoch:
                params["epoch"] = position.epoch
        c, stall = self.options.connect_timeout_s, self.options.stall_timeout_s
        return httpx.Request(
            "GET",
            httpx.URL(self.origin.rstrip("/") + WATCH_PATH),
            params=params,
            headers={"accept": "text/event-stream", "cache-control": "no-store", **self.forwarded},
            extensions={"timeout": {"connect": c, "read": stall, "write": c, "pool": c}},
        )

    def versions_request(self) -> httpx.Request:
        """The read that brings the memory to the announced position (through the transport)."""
        return httpx.Request(
            "GET",
            httpx.URL(self.origin.rstrip("/") + "/contract/versions"),
            headers={"accept": "application/json", **self.forwarded},
        )

    def check(self, response: httpx.Response, since: int | None) -> None:
        """Raise ``WatchFailure`` unless ``response`` opened an event stream."""
        status = response.status_code
        kind = response.headers.get("content-type", "").split(";")[0].strip().lower()
        if status == 200 and kind == "text/event-stream":
            self.since = since
            return
        if status == 410:
            raise WatchFailure("410: the position is not in the server's history", refresh=True)
        if status == 200:
            raise WatchFailure(f"the watch answered {kind or 'no content type'}", permanent=True)
        raise WatchFailure(f"the watch answered {status}", permanent=status in _PERMANENT)

    def healthy(self) -> None:
        """The stream sent a valid event or a heartbeat: push is on (said once per opening)."""
        if self.open:
            return
        self.open = True
        self.lost = False
        self.failures = 0
        self.emit(WatchOpened(origin=self.origin, episode=None, since=self.since))

    def parser(self) -> SSEParser:
        return SSEParser(
            max_line_bytes=self.options.max_line_bytes,
            max_event_bytes=self.options.max_event_bytes,
        )

    def feed(
        self, parser: SSEParser, chunk: bytes, last: float
    ) -> tuple[list[SSEEvent], float, bool]:
        """The events ``chunk`` completes, when the stream last made progress, and whether this
        chunk did; ``WatchFailure`` for a broken bound, or a stream stalled since ``last``."""
        before = parser.progress
        try:
            events = parser.feed(chunk)
        except StreamViolation as exc:
            raise WatchFailure(f"the stream broke a bound: {exc}") from None
        if parser.progress != before:
            return events, time.monotonic(), True
        if self.stalled(last):
            raise WatchFailure("the stream stalled (no event nor heartbeat)")
        return events, last, False

    def meaning(self, event: SSEEvent) -> Announced | None:
        """The position a ``versions`` event announces; ``WatchFailure`` for an ``error`` event
        or a malformed one (other event names are ignored, for later versions of the stream)."""
        if event.event == "error":
            raise WatchFailure(
                f"the stream ended with an error: {_detail(event.data)}", refresh=True
            )
        if event.event != "versions":
            return None
        try:
            data = json.loads(event.data)
        except ValueError:
            raise WatchFailure("a versions event whose data is not JSON") from None
        seq = data.get("contract_seq") if isinstance(data, dict) else None
        epoch = data.get("contract_epoch") if isinstance(data, dict) else None
        if not (isinstance(seq, int) and not isinstance(seq, bool) and 0 <= seq <= _MAX_SEQ):
            raise WatchFailure("a versions event without a valid contract_seq")
        if not (isinstance(epoch, str) and 0 < len(epoch) <= 128 and epoch.isprintable()):
            raise WatchFailure("a versions event without a valid contract_epoch")
        return Announced(seq, epoch)

    def behind(self, position: Announced, known: Position) -> bool:
        """Whether the memory (at ``known``, its position) is behind ``position``."""
        return known.seq is None or known.epoch != position.epoch or known.seq < position.seq

    def unreached(self, position: Announced) -> WatchFailure:
        """The failure of an event whose position the contract's reads never showed."""
        return WatchFailure(
            f"{REFRESH_ATTEMPTS} reads of the versions did not reach the announced seq "
            f"{position.seq}"
        )

    def announced(self, events: list[SSEEvent]) -> Generator[WatchStep, Any, None]:
        """What the watch does with a chunk's events, as steps both watches run: for each
        position announced, refresh until the memory has reached it (the read is a response the
        memory observes), then mark it seen; ``WatchFailure`` when it never does."""
        for event in events:
            announced = self.meaning(event)
            if announced is None:
                continue
            for attempt in range(REFRESH_ATTEMPTS + 1):
                known: Position | None = yield Known()
                if known is None or not self.behind(announced, known):
                    break
                if attempt == REFRESH_ATTEMPTS:
                    raise self.unreached(announced)
                if attempt:
                    yield Pause(REFRESH_RETRY_S)
                yield Refresh()
            yield Saw(announced.seq)

    def failed(self, failure: WatchFailure) -> float | None:
        """Record a failure; the seconds to wait before the next attempt (None: give up)."""
        self.open = False
        self.failures += 1
        retry = None if failure.permanent else self.options.backoff(self.failures)
        if failure.permanent or not self.lost:
            self.lost = True
            self.emit(
                WatchLost(
                    origin=self.origin,
                    episode=None,
                    detail=failure.detail,
                    permanent=failure.permanent,
                    retry_in_s=None if retry is None else round(retry, 3),
                )
            )
        return retry

    def stalled(self, last_progress: float) -> bool:
        return time.monotonic() - last_progress > self.options.stall_timeout_s


class SyncWatch:
    """One origin's watch in a daemon thread, for ``ContractTransport``."""

    def __init__(self, transport: ContractTransport, core: WatchCore) -> None:
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
        response = self.transport.wrapped.handle_request(core.request(position))
        self._response = response
        try:
            if self._stop.is_set():
                return
            core.check(response, position.seq)
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
        if isinstance(step, Pause):
            self._stop.wait(step.seconds)
        elif isinstance(step, Refresh):
            self._refresh()
        else:
            self._saw(step.seq)
        return None

    def _refresh(self) -> None:
        self.transport.handle_request(self.core.versions_request()).close()


class AsyncWatch:
    """One origin's watch in an asyncio task, for ``AsyncContractTransport``."""

    def __init__(self, transport: AsyncContractTransport, core: WatchCore) -> None:
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
        response = await self.transport.wrapped.handle_async_request(core.request(position))
        try:
            core.check(response, position.seq)
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
        if isinstance(step, Pause):
            await asyncio.sleep(step.seconds)
        elif isinstance(step, Refresh):
            await self._refresh()
        else:
            self._saw(step.seq)
        return None

    async def _refresh(self) -> None:
        response = await self.transport.handle_async_request(self.core.versions_request())
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


def _detail(data: str) -> str:
    try:
        body = json.loads(data)
    except ValueError:
        return "(not a problem document)"
    detail = body.get("detail") if isinstance(body, dict) else None
    return detail[:200] if isinstance(detail, str) else "(no detail)"


class Watches:
    """A transport's watch streams: at most one per origin, opened after its first response."""

    def __init__(
        self,
        transport: ContractTransport | AsyncContractTransport,
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
                AsyncWatch(cast("AsyncContractTransport", self.transport), core)
                if asynchronous
                else SyncWatch(cast("ContractTransport", self.transport), core)
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
