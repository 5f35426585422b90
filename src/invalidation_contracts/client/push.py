"""Push over plain HTTP, sans-IO: what a watch stream's events mean and what the watch does next.

An adapter (the httpx integration's ``invalidation_contracts.httpx.watch``) keeps one stream per
origin open, ``GET {origin}/contract/watch?since=&epoch=`` (SPEC §8.4), in a thread or a task;
everything it decides is here, free of I/O: whether a response opened a stream, the events a
chunk completes (bounded by ``client.sse``: line and event size), the position a ``versions``
event announces, the steps that bring the memory there (read the position, withhold the origin's
fixes until it is read, pause, refresh
through the transport, mark it seen), when a stream counts as stalled, and how long to wait
before the next attempt (exponential backoff with jitter, up to ``backoff_max_s``). A stream
that cannot be kept never fails the agent: a ``WatchLost`` event says why, a ``WatchOpened``
event says when push is back, and a server without the route (404/405/406/501) is not asked
again.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from .events import MemoryEvent, WatchLost, WatchOpened
from .sse import MAX_EVENT_BYTES, MAX_LINE_BYTES, SSEEvent, SSEParser, StreamViolation
from .values import Position

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
class Withhold:
    """Step: the memory withholds the origin's fixes until it has read position ``seq`` of
    ``epoch`` (``FixMemory.announced``): none is served stale while the diff is fetched."""

    seq: int | None
    epoch: str | None
    """None: the position was never reached; withhold until the next read that confirms."""


@dataclass(frozen=True, slots=True)
class Saw:
    """Step: the memory has acted on announced position ``seq``."""

    seq: int


WatchStep = Known | Withhold | Pause | Refresh | Saw


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
    """What the sync and async watchers share: the checks, the events' meaning, the steps."""

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

    def check(self, status: int, content_type: str, since: int | None) -> None:
        """Raise ``WatchFailure`` unless a response of ``status`` and ``content_type`` opened an
        event stream (``since``: the position the stream was asked from)."""
        kind = content_type.split(";")[0].strip().lower()
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
        memory observes), then mark it seen; ``WatchFailure`` when it never does. A position the
        memory is behind is withheld first, before any read (``Withhold``)."""
        for event in events:
            announced = self.meaning(event)
            if announced is None:
                continue
            for attempt in range(REFRESH_ATTEMPTS + 1):
                known: Position | None = yield Known()
                if known is None or not self.behind(announced, known):
                    break
                if attempt == REFRESH_ATTEMPTS:
                    yield Withhold(None, None)  # a position never shown: not withheld forever
                    raise self.unreached(announced)
                if attempt:
                    yield Pause(REFRESH_RETRY_S)
                else:
                    yield Withhold(announced.seq, announced.epoch)
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


def _detail(data: str) -> str:
    try:
        body = json.loads(data)
    except ValueError:
        return "(not a problem document)"
    detail = body.get("detail") if isinstance(body, dict) else None
    return detail[:200] if isinstance(detail, str) else "(no detail)"
