"""A connection's read deadlines (``header_timeout._Deadline``) cost one timer however slowly a
client trickles its bytes (issue 42: 1,000 anonymous slow connections against a worker).

Progress (a body byte, a stalled body's restart, the total deadline's extension) only moves the
due time; the one scheduled timer re-arms itself at the moved time when it fires early. Without
that, each byte cancelled a timer and scheduled another: a heap push per byte and a cancelled
handle left in the event loop's heap until it was swept.
"""

from __future__ import annotations

import asyncio
from typing import Any

from invalidation_contracts.header_timeout import _Deadline


class _Handle:
    def __init__(self, when: float) -> None:
        self._when = when

    def when(self) -> float:
        return self._when

    def cancel(self) -> None:
        pass


class _CountingLoop:
    """The parts of an event loop a deadline uses, counting the timers it schedules."""

    def __init__(self) -> None:
        self.now = 0.0
        self.scheduled = 0

    def time(self) -> float:
        return self.now

    def call_at(self, when: float, callback: Any) -> _Handle:
        self.scheduled += 1
        return _Handle(when)

    def call_later(self, delay: float, callback: Any) -> _Handle:
        return self.call_at(self.now + delay, callback)


def test_progress_moves_a_deadline_without_scheduling_a_timer():
    loop = _CountingLoop()
    deadline = _Deadline(loop, 30.0, lambda: None)  # type: ignore[arg-type]
    deadline.arm()
    for _ in range(1000):  # a body trickled a byte at a time
        loop.now += 0.01
        deadline.restart()
        deadline.extend(1 / 1024)
    assert loop.scheduled == 1


def test_a_moved_deadline_fires_at_its_moved_time_and_only_then():
    async def expiry_after_progress() -> tuple[float, float]:
        loop = asyncio.get_running_loop()
        fired = asyncio.Event()
        deadline = _Deadline(loop, 0.2, fired.set)
        started = loop.time()
        deadline.arm()
        await asyncio.sleep(0.1)
        deadline.restart()  # due 0.2 s from now, not 0.1
        deadline.extend(0.1)  # and 0.1 s later still
        moved = loop.time() + 0.2 + 0.1
        await asyncio.wait_for(fired.wait(), 5)
        return loop.time() - started, moved - started

    elapsed, due = asyncio.run(expiry_after_progress())
    assert elapsed >= due - 0.01
    assert elapsed < due + 2.0  # fired at all, after its moves (a loaded machine is late)
