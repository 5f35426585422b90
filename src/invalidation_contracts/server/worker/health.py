"""Whether a worker can vouch for its state: its last confirmation, its failures, its backlog.

No thread and no I/O: the follower reports each round here (``ok``, ``failed``) and each
committed batch of a backlog (``progress``), and the HTTP layer reads ``lag_s`` and ``reason``.
Each outage is logged once, when it starts, and once when it ends.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Literal

# The follower's one logger: an operator's logging configuration names it, whichever room logs.
logger = logging.getLogger("invalidation_contracts.server.worker.follower")

FollowerState = Literal["idle", "following", "catching-up", "retrying", "stopped", "dead"]


@dataclass(frozen=True)
class Health:
    """Whether this worker can vouch for its state, and why not.

    ``last_ok``: the monotonic time at which the last successful round *started* (what it read
    was current then); ``reason``: the last failure's one-line reason, while it lasts.
    """

    available: bool = True
    reason: str | None = None
    last_ok: float = field(default_factory=time.monotonic)


class HealthRecord:
    """A worker's last confirmation, its consecutive failures and the backlogs it catches up."""

    def __init__(self, max_lag_s: float) -> None:
        self.max_lag_s = max_lag_s
        self.health = Health()
        self.failures = 0
        self.backlog: dict[str, int | None] = {}
        """Per source this worker is catching up with: the capture records still waiting."""

    @property
    def lag_s(self) -> float:
        """Seconds since the start of the last round that confirmed this worker current."""
        return max(0.0, time.monotonic() - self.health.last_ok)

    @property
    def fresh(self) -> bool:
        """Its last round succeeded, within ``max_lag_s`` (``lag_s`` inlined: every request of a
        retrofitted route asks)."""
        health = self.health
        return health.available and time.monotonic() - health.last_ok < self.max_lag_s

    def ok(self, started: float) -> None:
        """A round that started at ``started`` read every database: the worker is current."""
        if not self.health.available or self.failures:
            logger.warning(
                "registry reachable again after %d failed attempt(s); serving", self.failures
            )
        self.failures = 0
        self.health = Health(True, None, started)

    def failed(self, exc: Exception) -> None:
        """A round failed: unavailable at once (the follower reconnects after a backoff)."""
        reason = one_line(exc)
        if self.health.available:
            logger.error("registry unavailable, answering 503: %s", reason)
        self.health = Health(False, reason, self.health.last_ok)
        self.failures += 1

    def listener_failed(self, exc: Exception) -> None:
        """A wake-up connection failed: still available within the lag bound."""
        logger.warning("lost a wake-up connection (%s); reconnecting", one_line(exc))
        self.failures += 1

    def progress(self, source: str, waiting: int | None) -> None:
        """A batch of ``source``'s backlog is committed; ``waiting`` records left."""
        self.backlog = {**self.backlog, source: waiting}
        logger.info("%s: catching up, %s capture records wait", source, waiting)

    def caught_up(self, source: str) -> None:
        """A consume of ``source``'s capture ended (done, or failed: the next one says)."""
        self.backlog = {k: v for k, v in self.backlog.items() if k != source}

    def reason(self, available: bool, never_started: bool) -> str | None:
        """Why a worker that is not ``available`` cannot stamp (None while it can)."""
        if self.health.reason is not None and not available:
            return self.health.reason
        if available:
            return None
        if never_started:
            return "this worker's follower never started (did the app's lifespan run?)"
        return (
            f"this worker has not confirmed it is current for {self.lag_s:.1f} s "
            f"(the bound is {self.max_lag_s:g} s){_catching_up(self.backlog)}"
        )


def _catching_up(backlog: dict[str, int | None]) -> str:
    return "".join(
        f"; catching up with {name}: {'some' if waiting is None else waiting} capture records wait"
        for name, waiting in sorted(backlog.items())
    )


def one_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (its type's name when it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
