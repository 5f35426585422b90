"""Test-only fault injection: a process that kills itself (SIGKILL) at a named step of a write.

Crash-safety is a promise about what a *real* ``kill -9`` leaves behind, so the fault-injection
tests kill real processes — a worker under ``serve --workers``, or a script holding a store — at
the exact step they name, instead of hoping a timed kill lands there. The steps of one registry
write, in order (``server/store/base.py``, ``highwater.py``):

- ``before-commit``: the write's rows are in the transaction (and, for an epoch change, the
  mark's intent is on disk); COMMIT has not run;
- ``after-commit``: COMMIT returned; the mark has not been raised to the new head;
- ``mark-renaming``: a new mark is written and fsynced beside the old one, not yet renamed over it.

The environment variable ``INVALIDATION_CONTRACTS_TEST_CRASH`` arms it, read once per process:
``STEP:N`` kills the process the N-th time it reaches STEP (counting from 1); ``STEP:N:PATH``
kills it only if it is the one to delete the file PATH, so of many worker processes (and the
ones started in their place) exactly one dies, once. A test script holding a store may call
``arm`` instead, to count from a moment it chooses (after its open, say). Unset — the only
setting for production — each step costs one comparison. Never set it outside a test.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass

CRASH_ENV = "INVALIDATION_CONTRACTS_TEST_CRASH"
STEPS = ("before-commit", "after-commit", "mark-renaming")


@dataclass(slots=True)
class _Armed:
    step: str
    n: int
    token: str | None
    reached: int = 0


_UNREAD = object()
_armed: _Armed | None | object = _UNREAD


def parse(text: str) -> _Armed:
    """``STEP:N`` or ``STEP:N:PATH``; a clear ``ValueError`` for anything else."""
    step, _, rest = text.partition(":")
    count, _, token = rest.partition(":")
    if step not in STEPS or not count.isdigit() or int(count) < 1:
        raise ValueError(
            f"{CRASH_ENV}={text!r}: expected STEP:N[:PATH] with STEP one of {', '.join(STEPS)}"
            " and N >= 1"
        )
    return _Armed(step, int(count), token or None)


def arm(text: str | None) -> None:
    """Test-only: die at ``STEP:N[:PATH]`` from now on, counting from zero (None: disarm)."""
    global _armed
    _armed = parse(text) if text else None


def crash_point(step: str) -> None:
    """Die here with SIGKILL if the test armed ``step`` and this is its turn; else nothing."""
    if _armed is _UNREAD:
        arm(os.environ.get(CRASH_ENV))
    armed = _armed
    if not isinstance(armed, _Armed) or armed.step != step:
        return
    armed.reached += 1
    if armed.reached != armed.n:
        return
    if armed.token is not None:
        try:
            os.unlink(armed.token)
        except FileNotFoundError:
            return  # another process took the one crash
    os.kill(os.getpid(), signal.SIGKILL)
