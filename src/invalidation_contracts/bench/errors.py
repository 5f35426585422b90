"""Why a run stops early; each is one line a user can act on, and says what else to skip."""

from __future__ import annotations


class HarnessError(RuntimeError):
    """A run could not go on; its metadata records this message and the grid reports it."""


class ServerUnavailable(HarnessError):
    """The server under test stopped answering (a network error on a domain or admin request).

    Every later run against the same server would fail the same way: the grid stops.
    """


class PlannerUnavailable(HarnessError):
    """The planner could not be built, failed its opening probe, or failed every call of an
    episode: the grid skips the other runs of the same planner."""


class UnlabelledEviction(HarnessError):
    """The oracle cannot say whether an entry was stale: its fix or its request is unknown."""
