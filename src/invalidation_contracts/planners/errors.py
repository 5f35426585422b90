"""The errors a planner raises, one type per cause, so callers handle every vendor alike."""

from __future__ import annotations


class PlannerError(Exception):
    """Base of every planner failure."""


class PlannerConfigError(PlannerError, ValueError):
    """A planner cannot be built: a bad spec, an unknown option, a missing key or model file."""


class PlannerCallError(PlannerError):
    """The model's API failed (HTTP error, timeout or no connection) after the retries allowed.

    ``retries`` counts the requests re-sent for this call before it gave up.
    """

    def __init__(self, message: str, *, retries: int = 0) -> None:
        super().__init__(message)
        self.retries = retries


class PlannerResponseError(PlannerError):
    """The model answered, but not with a usable request body.

    Not JSON, cut off, empty, a refusal, no tool call, not an object, an echo of the schema, or
    an object the request schema rejects. ``raw`` is the model's text as received (None when
    there was none), so a harness can record the failed attempt with what the model wrote;
    ``retries`` counts the requests re-sent before this answer came.
    """

    def __init__(self, message: str, *, raw: str | None = None, retries: int = 0) -> None:
        super().__init__(message)
        self.raw = raw
        self.retries = retries


class PlannerUnavailableError(PlannerError):
    """The planner can answer no further call: its local model server would not start or died.

    Unlike :class:`PlannerCallError` (one failed call), this ends a run: every later attempt
    would fail the same way, so a harness stops rather than record failures for the rest.
    """
