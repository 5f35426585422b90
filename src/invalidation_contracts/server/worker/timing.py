"""How often a worker confirms it is current, how stale it may be, and how it backs off and
notices a stall: the follower's timing, as values and pure checks (no thread, no I/O), so a
worker's configuration (``server.config``) can check them without loading the follower."""

from __future__ import annotations

import random

DEFAULT_POLL_INTERVAL_S = 0.02
"""How often a worker looks for changes nothing wakes it for: every SQLite file it cannot watch
(not Linux, inotify unavailable), and the head of each PostgreSQL capture it leads (so a captured
write waits at most this long)."""
DEFAULT_HEARTBEAT_S = 1.0
"""How often a worker that is woken (NOTIFY, inotify) checks every database anyway (and a worker
that does not lead a capture bids for its lead)."""
DEFAULT_MAX_LAG_S = 2.0
"""A worker whose last confirmation that it is current is older than this answers 503."""
DEFAULT_RETRY_BASE_S = 0.05
"""The first wait after a failure; it doubles on each further failure, up to ``RETRY_MAX_S``."""
DEFAULT_RETRY_MAX_S = 1.0
"""The longest wait between two attempts while the databases fail."""
STUCK_AFTER_S = 30.0
"""A follower whose loop has not turned for this long is not live (a hung database call)."""
DEFAULT_STALL_TIMEOUT_S = 20.0
"""A loop that has not turned for this long waits on a silent link: its connections are broken
so it reconnects (before ``STUCK_AFTER_S`` would call for a restart). The default bound is this
or twice ``max_lag_s``, whichever is longer."""


def check_timing(poll_interval_s: float, heartbeat_s: float, max_lag_s: float) -> None:
    """Refuse a lag bound a worker cannot keep: it confirms once per poll or heartbeat."""
    if not 0 < poll_interval_s < max_lag_s or not 0 < heartbeat_s < max_lag_s:
        raise ValueError(
            f"max_lag_s ({max_lag_s:g}) must exceed poll_interval_s ({poll_interval_s:g}) and "
            f"heartbeat_s ({heartbeat_s:g}), both positive: a worker confirms once per interval"
        )


def stall_bound(stall_timeout_s: float | None, max_lag_s: float) -> float:
    """The stall bound: ``stall_timeout_s``, or by default the longer of
    ``DEFAULT_STALL_TIMEOUT_S`` and twice the lag bound. A given one must exceed ``max_lag_s``
    (a healthy loop turns at least once a heartbeat, which is shorter)."""
    if stall_timeout_s is None:
        return max(DEFAULT_STALL_TIMEOUT_S, 2 * max_lag_s)
    if not stall_timeout_s > max_lag_s:
        raise ValueError(
            f"stall_timeout_s ({stall_timeout_s:g}) must exceed max_lag_s ({max_lag_s:g}): a "
            "loop that turns within the lag bound is not stalled"
        )
    return stall_timeout_s


def backoff(failures: int, base_s: float, max_s: float, rng: random.Random) -> float:
    """The wait after ``failures`` consecutive failures: exponential, capped, jittered (50-100%)."""
    ceiling = min(max_s, base_s * 2.0 ** min(failures - 1, 30))
    return ceiling * (0.5 + rng.random() / 2)
