"""Count the HTTP requests one planning call sends, SDK retries included.

The vendor SDKs retry timeouts, 429 and 5xx answers themselves and say nothing about it. Their
HTTP client gets :func:`count_send` as a request hook; a planning call wraps its SDK calls in
:func:`counting_sends` and reads how many requests went out (a planner error raised in it carries
the count) (the hook runs in the caller's task,
so concurrent calls on one client keep separate counts).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass

from .errors import PlannerCallError, PlannerResponseError


@dataclass
class SendCount:
    """Requests sent so far by the planning call in this context."""

    sent: int = 0

    @property
    def retries(self) -> int:
        """Requests beyond the first."""
        return max(0, self.sent - 1)


_CURRENT: ContextVar[SendCount | None] = ContextVar("planner_send_count", default=None)


async def count_send(request: object) -> None:
    """A request hook (an ``httpx.Request``; openai 3's client is httpx2's, its own request
    type): one more request for the planning call in this context."""
    current = _CURRENT.get()
    if current is not None:
        current.sent += 1


@contextmanager
def counting_sends() -> Iterator[SendCount]:
    """Count, in the yielded value, every request sent within the block; a planner error raised
    in it leaves with the requests re-sent for it (``retries``)."""
    count = SendCount()
    token = _CURRENT.set(count)
    try:
        yield count
    except (PlannerCallError, PlannerResponseError) as exc:
        exc.retries = count.retries
        raise
    finally:
        _CURRENT.reset(token)
