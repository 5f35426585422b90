"""The watchdog: a thread beside the follower's loop that breaks the connections of a call that
never returns (a link gone silent: a black hole, a proxy that forgot the connection, no FIN, no
RST), so the failed round is retried on fresh connections like any other failure.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable

from .timing import STUCK_AFTER_S

# The follower's one logger: an operator's logging configuration names it, whichever room logs.
logger = logging.getLogger("invalidation_contracts.server.worker.follower")


class Watchdog:
    """Watches a loop that calls ``turn()`` once per turn; once per turn that outlasts
    ``stall_timeout_s``, calls ``interrupt()`` on each of ``connections()`` (it runs beside the
    loop, whose own locks may be held)."""

    def __init__(
        self,
        stall_timeout_s: float,
        connections: Callable[[], Iterable[object]],
        stop: threading.Event,
    ) -> None:
        self.stall_timeout_s = stall_timeout_s
        self.stalls = 0
        """How often the watchdog broke a stalled loop's connections."""
        self.turned = time.monotonic()
        self._connections = connections
        self._stop = stop
        self._thread: threading.Thread | None = None

    def turn(self) -> None:
        """The loop turned (a round began, or a batch of a backlog was committed)."""
        self.turned = time.monotonic()

    @property
    def stuck(self) -> bool:
        """The loop has not turned for ``STUCK_AFTER_S``: only a restart helps."""
        return time.monotonic() - self.turned >= STUCK_AFTER_S

    def start(self) -> None:
        self._thread = threading.Thread(
            target=self._watch, name="invalidation-contracts-watchdog", daemon=True
        )
        self._thread.start()

    def join(self) -> None:
        """Wait for the thread to end (after the shared ``stop`` event is set)."""
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def _watch(self) -> None:
        broken_turn = None
        while not self._stop.wait(min(1.0, self.stall_timeout_s / 4)):
            turned = self.turned
            stalled = time.monotonic() - turned
            if stalled < self.stall_timeout_s or turned == broken_turn:
                continue
            broken_turn = turned
            self.stalls += 1
            logger.error(
                "the follower has waited %.1f s on a database call (a silent link?); breaking "
                "its connections to reconnect",
                stalled,
            )
            for connection in self._connections():
                interrupt = getattr(connection, "interrupt", None)
                if interrupt is not None:
                    try:
                        interrupt()
                    except Exception:  # noqa: BLE001 - best effort; the next turn retries
                        logger.exception("could not break a stalled connection")
