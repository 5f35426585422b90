"""The need loop every adapter drives, transport-neutral and sans-IO.

A response (or an MCP tool result) can leave the memory needing more: a resource to fetch before
a fix may be stamped. ``need_loop`` decides what to fetch next from what each answer asked for;
the HTTP transports and the MCP session only do the fetching, so no adapter depends on another's
transport.
"""

from __future__ import annotations

from collections.abc import Generator

from .events import Need

#: How many rounds of needs one response may trigger (a need can lead to another).
MAX_NEED_ROUNDS = 3


def need_loop(
    needs: tuple[Need, ...],
) -> Generator[Need, tuple[Need, ...] | None, tuple[Need, ...]]:
    """The need loop every adapter drives (both transports, the MCP session), sans-IO: yields
    each need to fetch and is sent what its answer asked for next (None: it could not be
    fetched); returns the needs outstanding."""
    outstanding: list[Need] = []
    for _ in range(MAX_NEED_ROUNDS):
        follow: list[Need] = []
        for need in dict.fromkeys(needs):
            answered = yield need
            if answered is None:
                outstanding.append(need)
            else:
                follow.extend(answered)
        needs = tuple(follow)
    return tuple(dict.fromkeys([*outstanding, *needs]))
