"""The errors a planner raises, one type per cause, so callers handle every vendor alike."""

from __future__ import annotations


class PlannerError(Exception):
    """Base of every planner failure."""


class PlannerConfigError(PlannerError, ValueError):
    """A planner cannot be built: a bad spec, an unknown option or a missing API key."""


class PlannerCallError(PlannerError):
    """The model's API failed (HTTP error or no connection) after the SDK's own retries."""


class PlannerResponseError(PlannerError):
    """The model answered, but not with a request body: no tool call, not JSON, or not an object."""
